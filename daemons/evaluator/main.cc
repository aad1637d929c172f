// pstrain-evaluator: the side-car evaluator. It never connects to the training cluster:
// it evaluates every checkpoint the chief commits in --model-dir and exits 0 after the
// final one. TF_CONFIG (task type "evaluator") is optional.
#include <cstdio>
#include <optional>

#include <boost/program_options.hpp>

#include "libps/core/log.h"
#include "libps/daemon/daemon.h"
#include "libps/evaluator/evaluator.h"

int main(int argc, char** argv) {
  using namespace ps;
  namespace po = boost::program_options;
  daemon::SignalWatcher signals;
  daemon::DaemonFlags flags;
  evaluator::EvaluatorOptions options;
  po::options_description desc("Options");
  daemon::AddDaemonOptions(desc, &flags);
  desc.add_options()("model-dir", po::value(&options.model_dir)->value_name("DIR")->required(),
                     "the chief's model directory")(
      "once", po::bool_switch(&options.once),
      "evaluate one checkpoint (the newest, or --step) and exit")(
      "step", po::value(&options.step)->value_name("N"),
      "with --once: the checkpoint's global step")(
      "poll-seconds", po::value(&options.poll_seconds)->value_name("S")->default_value(2),
      "how often to look for new checkpoints")(
      "stop-grace", po::value(&options.stop_grace_seconds)->value_name("S")->default_value(0),
      "on SIGTERM/SIGINT, go on for up to S seconds until the final checkpoint is evaluated (a second signal "
      "stops at once); 0: stop at once");
  if (auto rc = daemon::ParseCommandLine(
          argc, argv,
          "Usage: pstrain-evaluator --model-dir DIR [options]\n"
          "Evaluates every checkpoint in DIR on the job's eval_data; appends to "
          "DIR/eval/metrics.jsonl.",
          desc)) {
    return *rc;
  }
  // The evaluator is outside the training cluster; TF_CONFIG, when it names a task, only
  // names it. --check-config runs the same checks as a start, in the same order.
  auto fail = [](const Status& st) { return daemon::FailStart("pstrain-evaluator", st); };
  std::optional<daemon::DaemonContext> ctx;
  daemon::Metrics metrics;
  if (daemon::NamesNoTask(flags)) {
    auto m = daemon::BootstrapOutsideCluster(flags, cluster::TaskType::kEvaluator);
    if (!m.ok()) return fail(m.status());
    metrics = *m;
  } else {
    auto c = daemon::Bootstrap(flags, cluster::TaskType::kEvaluator);
    if (!c.ok()) return fail(c.status());
    ctx = std::move(*c);
    metrics = ctx->metrics;
  }
  if (Status st = evaluator::CheckOptions(options); !st.ok()) return fail(st);
  if (flags.check_config) {
    if (ctx) return daemon::CheckedConfig("pstrain-evaluator", *ctx);
    std::printf(
        "pstrain-evaluator: config ok: TF_CONFIG names no task: runs outside the training "
        "cluster, does not listen\n");
    return daemon::kExitOk;
  }
  options.metrics = metrics.registry;
  return daemon::FinishDaemon("pstrain-evaluator", evaluator::RunEvaluator(options, signals),
                              signals);
}

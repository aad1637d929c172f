// pstrain-evaluator: the side-car evaluator. It never connects to the training cluster:
// it evaluates every checkpoint the chief commits in --model-dir and exits 0 after the
// final one. TF_CONFIG (task type "evaluator") is optional.
#include <cstdio>
#include <cstdlib>

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
  // The evaluator is outside the training cluster; TF_CONFIG only names it.
  daemon::Metrics metrics;
  if (!flags.tf_config_file.empty() || std::getenv("TF_CONFIG") != nullptr) {
    auto ctx = daemon::Bootstrap(flags, ps::cluster::TaskType::kEvaluator);
    if (!ctx.ok()) {
      std::fprintf(stderr, "pstrain-evaluator: %s\n", ctx.status().message().c_str());
      return daemon::ExitCodeFor(ctx.status());
    }
    if (flags.check_config) return daemon::CheckedConfig("pstrain-evaluator", *ctx);
    metrics = ctx->metrics;
  } else if (flags.check_config) {
    std::fprintf(stderr, "pstrain-evaluator: --check-config: no TF_CONFIG to check\n");
    return daemon::kExitUsage;
  } else {
    ps::log::SetTag("evaluator");
    auto m = daemon::StartMetrics(flags, {cluster::TaskType::kEvaluator, 0}, "");
    if (!m.ok()) {
      std::fprintf(stderr, "pstrain-evaluator: %s\n", m.status().message().c_str());
      return daemon::ExitCodeFor(m.status());
    }
    metrics = *m;
  }
  options.metrics = metrics.registry;
  return daemon::FinishDaemon("pstrain-evaluator", evaluator::RunEvaluator(options, signals),
                              signals);
}

// pstrain-chief: the coordinator. Creates the variables, schedules steps on the workers,
// and at the end (or on `pstrain stop`, SIGTERM, SIGINT) drains, writes the final
// checkpoint and shuts every worker and ps task down.
#include <cstdio>

#include <boost/program_options.hpp>

#include "libps/chief/chief.h"
#include "libps/daemon/daemon.h"

int main(int argc, char** argv) {
  using namespace ps;
  namespace po = boost::program_options;
  daemon::SignalWatcher signals;
  daemon::DaemonFlags flags;
  std::string job_file, model_dir;
  double shutdown_timeout = 30, heartbeat_timeout = 2, ps_recovery_timeout = 600,
         worker_recovery_timeout = 600, watchdog = 300;
  po::options_description desc("Options");
  daemon::AddDaemonOptions(desc, &flags);
  desc.add_options()("job", po::value(&job_file)->value_name("FILE")->required(),
                     "the job file (see docs/reference/job.md)")(
      "model-dir", po::value(&model_dir)->value_name("DIR"),
      "where checkpoints and metrics go (overrides job.model_dir)")(
      "shutdown-timeout", po::value(&shutdown_timeout)->value_name("SECONDS")->default_value(30),
      "how long each task has to acknowledge Shutdown")(
      "heartbeat-timeout", po::value(&heartbeat_timeout)->value_name("SECONDS")->default_value(2),
      "a ps or worker silent for this long is declared lost")(
      "ps-recovery-timeout",
      po::value(&ps_recovery_timeout)->value_name("SECONDS")->default_value(600),
      "how long training waits for a lost ps to come back before the chief gives up (exit 138)")(
      "worker-recovery-timeout",
      po::value(&worker_recovery_timeout)->value_name("SECONDS")->default_value(600),
      "with every worker lost, how long steps wait for one to rejoin before the chief gives up (exit 138)")(
      "watchdog", po::value(&watchdog)->value_name("SECONDS")->default_value(300),
      "warn, naming the tasks waited on, when no step has completed for this long");
  if (auto rc = daemon::ParseCommandLine(argc, argv,
                                         "Usage: pstrain-chief --job FILE [options]\n"
                                         "The chief task. Reads TF_CONFIG (task type \"chief\").",
                                         desc)) {
    return *rc;
  }
  auto ctx = daemon::Bootstrap(flags, ps::cluster::TaskType::kChief);
  if (!ctx.ok()) return daemon::FailStart("pstrain-chief", ctx.status());
  auto job = job::ReadJobFile(job_file);
  if (!job.ok()) return daemon::FailStart("pstrain-chief", job.status());
  if (!model_dir.empty()) job->model_dir = model_dir;
  chief::ChiefOptions options;
  auto ms = [](double sec) { return std::chrono::milliseconds(static_cast<int64_t>(sec * 1000)); };
  constexpr double kMaxSeconds = 1e6;  // ~11 days: beyond that the deadlines' arithmetic overflows
  auto bad = [&](double sec) { return !(sec > 0 && sec <= kMaxSeconds); };
  if (bad(shutdown_timeout) || bad(heartbeat_timeout) || bad(ps_recovery_timeout) ||
      bad(worker_recovery_timeout) || bad(watchdog)) {
    std::fprintf(
        stderr,
        "pstrain-chief: --shutdown-timeout, --heartbeat-timeout, --ps-recovery-timeout, "
        "--worker-recovery-timeout and --watchdog must be > 0 and at most 1000000 seconds\n");
    return daemon::kExitUsage;
  }
  if (flags.check_config) {  // after the job file
    Status checked = chief::CheckJob(*job, ctx->tf.cluster);
    if (!checked.ok()) return daemon::FailStart("pstrain-chief", checked);
    return daemon::CheckedConfig("pstrain-chief", *ctx);
  }
  options.shutdown_timeout = ms(shutdown_timeout);
  options.heartbeat_timeout = ms(heartbeat_timeout);
  options.ps_recovery_timeout = ms(ps_recovery_timeout);
  options.worker_recovery_timeout = ms(worker_recovery_timeout);
  options.watchdog = ms(watchdog);
  return daemon::FinishDaemon("pstrain-chief",
                              chief::RunChief(*ctx, std::move(*job), options, signals), signals);
}

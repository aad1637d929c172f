// pstrain-worker: runs the steps the chief sends: next batch → pull → forward/backward →
// push; exits 0 when the chief sends Shutdown.
#include <cstdio>

#include <boost/program_options.hpp>

#include "libps/daemon/daemon.h"
#include "libps/worker/worker_task.h"

int main(int argc, char** argv) {
  using namespace ps;
  daemon::SignalWatcher signals;
  daemon::DaemonFlags flags;
  worker::WorkerOptions options;
  boost::program_options::options_description desc("Options");
  daemon::AddDaemonOptions(desc, &flags);
  daemon::AddServingTaskOptions(desc, &flags);
  desc.add_options()("blas-threads",
                     boost::program_options::value(&options.blas_threads)->default_value(1),
                     "OpenBLAS threads for the model math (keep 1 when tasks share cores)");
  if (auto rc = daemon::ParseCommandLine(argc, argv,
                                         "Usage: pstrain-worker [options]\n"
                                         "A worker task. Reads TF_CONFIG (task type \"worker\").",
                                         desc)) {
    return *rc;
  }
  if (options.blas_threads < 1 || options.blas_threads > 256) {
    std::fprintf(stderr, "pstrain-worker: --blas-threads: must be in 1..256\n");
    return daemon::kExitUsage;
  }
  auto ctx = daemon::Bootstrap(flags, ps::cluster::TaskType::kWorker);
  if (!ctx.ok()) return daemon::FailStart("pstrain-worker", ctx.status());
  if (flags.check_config) return daemon::CheckedConfig("pstrain-worker", *ctx);
  return daemon::FinishDaemon("pstrain-worker", worker::RunWorkerTask(*ctx, options, signals),
                              signals);
}

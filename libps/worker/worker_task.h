// pstrain-worker: waits for the chief's StartJob, runs the steps it is sent, until Shutdown.
#pragma once

#include "libps/core/status.h"
#include "libps/daemon/daemon.h"

namespace ps::worker {

struct WorkerOptions {
  int blas_threads = 1;
};

// Returns OK after the chief's Shutdown (Unavailable when it was retryable) and after
// SIGTERM/SIGINT, which let the steps in flight finish first.
Status RunWorkerTask(const daemon::DaemonContext& ctx, const WorkerOptions& options,
                     daemon::SignalWatcher& signals);

}  // namespace ps::worker

// pstrain-chief: creates the variables, drives training through the Coordinator,
// reports progress, and at the end (or on stop) drains, runs the final hook and shuts
// the cluster down in order: workers, then ps tasks — each must acknowledge.
#pragma once

#include "libps/core/status.h"
#include "libps/daemon/daemon.h"
#include "libps/job/job.h"

namespace ps::chief {

struct ChiefOptions {
  net::Millis shutdown_timeout{30000};      // per task, for the Shutdown acknowledgement
  net::Millis heartbeat_timeout{2000};      // a silent ps or worker is declared lost after this
  net::Millis ps_recovery_timeout{600000};  // how long to wait for a lost ps to come back
  net::Millis worker_recovery_timeout{
      600000};                   // how long steps wait for a worker when none is alive
  net::Millis watchdog{300000};  // warn when no step completed for this long
};

// --check-config: every error of `job` on `cluster` that shows without the cluster
// running, as InvalidArgument naming the key: job.update for the cluster's worker count;
// job.model_dir, when it exists, a directory;
// the data files (data::CheckDataFiles); the variables placed on the cluster's ps count
// (cluster::Place: a dense shard of at most 2^40 floats, a lazy one of at most 2^40
// rows); each non-lazy variable's floats on one ps at most 2^40 (4 TiB); the dense
// variables of one ps at most the frame limit (net::Limits: 2 GiB), as every step pulls
// and pushes them in one frame. A cluster with no ps listed skips the placement checks.
Status CheckJob(const job::JobSpec& job, const cluster::ClusterSpec& cluster);

// Runs the whole job. OK after the last step or a graceful stop.
Status RunChief(const daemon::DaemonContext& ctx, job::JobSpec job, const ChiefOptions& options,
                daemon::SignalWatcher& signals);

}  // namespace ps::chief

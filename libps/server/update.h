// Update modes: how the ps tasks turn the workers' gradients into parameter updates.
//
// JSON form (the job's "update" object; strict, errors name "<path>.<key>"):
//   {"mode": "async"}                               default: each push applied on arrival
//   {"mode": "sync", "replicas_to_aggregate": R}    R in [1, workers], default = workers
//   {"mode": "bounded_staleness", "staleness": S}   S >= 0, default 4
//   {"dense": {"mode": M, ...}, "sparse": {"mode": N, ...}}   hybrid: a mode per class
//
// async: TF's ParameterServerStrategy. A step is one worker's batch; its gradient is
//   applied when it arrives.
// sync: TF's SyncReplicasOptimizer. A step is one update: every worker computes a
//   gradient for it on the parameters of the update before; each shard averages the
//   first R gradients it receives for that update (one per worker; a shard a worker's
//   batch does not touch counts as a zero gradient), applies the average once and moves
//   to the next update. Workers beyond R are backups: a gradient computed for an update
//   that its shard has already applied is dropped and counted as stale. A pull for
//   update u waits until each shard it reads has applied updates 0..u-1.
// bounded_staleness: stale synchronous parallel. As async, but each worker counts the
//   steps it has run (its clock) and a pull for a worker's step c waits until every other
//   worker has pushed its steps 0..c-S-1 to that ps: no worker is ever more than S steps
//   ahead of the slowest. S = 0 keeps every worker in lock step. After a restore (a ps
//   or the chief restarted) a worker holds nobody back until it is heard from again.
//
// Classes (the per-class form): "sparse" is every variable the model pulls and pushes by
// rows (model::VariableDef::sparse: embedding tables, lazy or not, and weights over sparse
// ids); "dense" is every other variable (pulled and pushed whole). Each
// class object takes the keys of the single form, "mode" required. Both classes in the
// same mode (and settings) is that single mode. Otherwise one class must be "sync" and
// the other "async" (PERSIA's hybrid, either way round): steps are then sync steps (the
// chief gives every worker every update, pulls and pushes are tagged with the update),
// the sync class aggregates them as in sync mode, and the async class applies each
// worker's gradient on arrival, unaveraged and without waiting: a pull waits only for
// the sync class's shards. At most once, for the async class: per (shard, update, worker).
// A hybrid spec cannot have backup workers (replicas_to_aggregate < workers): a backup's
// async gradient for an update could land after the chief decided that update, so a
// checkpoint would not hold exactly the steps before it. bounded_staleness does not mix
// with another mode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::server {

enum class UpdateMode { kAsync, kSync, kBoundedStaleness };
const char* UpdateModeName(UpdateMode mode);

struct UpdateSpec {
  // Every variable's mode, or in a hybrid spec the dense variables'.
  UpdateMode mode = UpdateMode::kAsync;
  int replicas_to_aggregate = 0;  // sync (the sync class); 0 = every worker
  int staleness = 4;              // bounded_staleness
  int num_workers = 0;            // filled in by the chief from the cluster
  // Hybrid only: the sparse variables' mode (one of the two is sync, the other async).
  std::optional<UpdateMode> sparse_mode = std::nullopt;
  // Parsed from the per-class form with one mode for both (folded to the single form):
  // errors name "<path>.dense.<key>", where the user wrote it. Not sent to the ps.
  bool per_class = false;
  // The same update (per_class only says where errors point).
  bool operator==(const UpdateSpec& o) const {
    return mode == o.mode && replicas_to_aggregate == o.replicas_to_aggregate &&
           staleness == o.staleness && num_workers == o.num_workers && sparse_mode == o.sparse_mode;
  }
  // R with the default resolved: replicas_to_aggregate, or num_workers when 0.
  int replicas() const { return replicas_to_aggregate > 0 ? replicas_to_aggregate : num_workers; }
  bool hybrid() const { return sparse_mode.has_value(); }
  // The mode of a variable's shards: `sparse` = pulled and pushed by rows.
  UpdateMode ModeOf(bool sparse) const { return sparse && sparse_mode ? *sparse_mode : mode; }
  // How steps are scheduled and tagged: the mode, or sync for a hybrid spec.
  UpdateMode StepMode() const { return hybrid() ? UpdateMode::kSync : mode; }
  // "sync", or "dense sync, sparse async" (status, logs).
  std::string Describe() const;
};

// The job's "update" object (`num_workers` stays 0). The chief sends the spec to the ps
// tasks as a proto::Update (wire_specs.h).
Result<UpdateSpec> ParseUpdate(const Json& json, const std::string& path);
// staleness >= 0; replicas_to_aggregate in [0, num_workers]; num_workers >= 1 unless
// async; a hybrid spec is sync + async with replicas() == num_workers. Errors name
// `path` (and for a hybrid spec the class: "<path>.dense.replicas_to_aggregate").
Status ValidateUpdate(const UpdateSpec& spec, const std::string& path);
// For a hybrid spec whose job has no variable of one class (`dense_vars`, `sparse_vars`:
// how many of each): a warning naming `path` that the job trains in the other class's mode
// alone; otherwise empty.
std::string OneClassWarning(const UpdateSpec& spec, int64_t dense_vars, int64_t sparse_vars,
                            const std::string& path);

}  // namespace ps::server

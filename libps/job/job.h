// The job file: what to train, on what, how long. Read by the chief, sent verbatim (plus
// base_dir) to every worker, written to model_dir/job.json for the evaluator.
// Every key is documented in docs/reference/job.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libps/cluster/placement.h"
#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/model/model.h"
#include "libps/server/optimizer.h"
#include "libps/server/update.h"

namespace ps::job {

struct CheckpointSpec {
  int64_t every_steps = 0;     // 0: not by steps
  double every_seconds = 600;  // TF's MonitoredTrainingSession default; 0: not by time
  // Delta checkpoints (ckpt/checkpoint_dir.h) between full ones: every this many seconds
  // (0: none), only what changed since the previous checkpoint. The chain is bounded: the
  // next checkpoint is full once max_deltas deltas follow the base, or once the deltas'
  // bytes exceed delta_max_fraction of the base's.
  double delta_every_seconds = 0;
  int max_deltas = 10;
  double delta_max_fraction = 0.5;
  int max_to_keep = 5;
  // Periodic saves that may fail in a row (every ps up: a full disk, a lost mount) while
  // training goes on; the next one stops the run (exit 138).
  int max_consecutive_failures = 3;
  // Warm start: when model_dir holds no checkpoint, restore the newest one of this model
  // dir instead (any ps count and partitioning), and save it into model_dir at its step
  // before the first step. Empty: start fresh.
  std::string init_from;
};

// Ends training early (like a `stop`: drain, final checkpoint) when the inline
// evaluation's `metric` has not improved by more than `min_delta` for `patience`
// evaluations in a row (Keras' EarlyStopping).
struct EarlyStoppingSpec {
  std::string metric;    // "auc", "accuracy" or "loss"; empty: off
  bool maximize = true;  // "mode": "max" or "min" (default: min for loss, else max)
  int patience = 3;
  double min_delta = 0;
};

struct JobSpec {
  Json model;       // BuildModel's config
  Json train_data;  // OpenDataset's config
  Json eval_data;   // null when absent
  ps::server::OptimizerSpec optimizer;
  int64_t batch_size = 128;
  // The job's last step is steps - 1. With `epochs` and no "steps" key it is 0 until the
  // chief has counted the training data (it then sets the steps of `epochs` passes).
  int64_t steps = 0;
  // Passes over train_data (in memory only); training ends after them or after `steps`,
  // whichever comes first.
  std::optional<int64_t> epochs;
  int steps_per_dispatch = 10;
  int dispatches_per_worker = 2;
  // Pull the next step's parameters while this step computes: faster, but a step may see
  // parameters up to two of its own steps stale (see docs/design/performance.md, "Training,
  // and where each millisecond goes").
  bool prefetch = true;
  // Async mode: a step's push carries the pull of a later step (the next one's without
  // prefetch, the one after it with), so each ps gets one request a step instead of two.
  bool combine_push_pull = true;
  // Async, sync or bounded staleness (libps/server/update.h). num_workers is 0 here; the
  // chief and the workers fill it in from the cluster.
  ps::server::UpdateSpec update;
  cluster::PartitionerSpec partitioner;
  cluster::PlacementStrategy placement = cluster::PlacementStrategy::kBalanced;
  uint64_t seed = 0;
  int64_t log_every_steps = 100;
  std::string model_dir;  // may be empty until --model-dir fills it
  std::string base_dir;   // relative data paths resolve against this
  CheckpointSpec checkpoint;
  // Inline distributed evaluation every this many steps (0: off): training pauses and the
  // workers evaluate eval_data, each its shard; needs eval_data.
  int64_t eval_every_steps = 0;
  EarlyStoppingSpec early_stopping;  // needs eval_every_steps
  // Benchmarking aid ("fake_compute_ms"): workers skip forward/backward, sleep this many
  // ms per step instead and push zero gradients of the right shapes, so that scaling
  // benchmarks run many workers on few cores. nullopt: real compute.
  std::optional<double> fake_compute_ms;
  Json raw;  // the whole job, as sent to workers (base_dir made explicit)
};

// Strict: unknown keys and out-of-range values are errors naming "job.<key>".
// `default_base_dir`: used when the job has no base_dir (the job file's directory).
Result<JobSpec> ParseJob(const Json& json, const std::string& default_base_dir);
// The job file `path` (--job): one that cannot be opened or read is InvalidArgument, as
// every error in it is (a configuration error: exit 2).
Result<JobSpec> ReadJobFile(const std::string& path);

struct VariablePlan {
  std::vector<model::VariableDef> variables;    // in the model's order
  std::vector<cluster::ShardPlacement> shards;  // all shards of all variables
};
// The variables of the job's model and where their shards live. Deterministic: the
// chief and every worker compute the same plan independently.
Result<VariablePlan> PlanVariables(const JobSpec& job, const model::Model& model, int num_ps);

}  // namespace ps::job

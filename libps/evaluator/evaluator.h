// pstrain-evaluator: the side-car evaluator. It never connects to the training cluster:
// it watches model_dir, loads every newly committed checkpoint straight from the shard
// files, evaluates it on the job's eval_data, and appends a line to
// model_dir/eval/metrics.jsonl (and the TensorBoard run "eval"): its own records, which
// nothing else writes. Every full checkpoint the chief committed is evaluated exactly once
// across the evaluator's restarts (its records decide), oldest first, if it still exists
// when the evaluator gets to it: one that max_to_keep deleted first is logged as skipped
// and counted (pstrain_evaluator_skipped_checkpoints_total; the committed ones are read
// from train_metrics.jsonl). It exits after evaluating the final checkpoint.
#pragma once

#include <memory>
#include <string>

#include "libps/core/status.h"
#include "libps/daemon/daemon.h"

namespace ps::evaluator {

struct EvaluatorOptions {
  std::string model_dir;
  bool once = false;  // evaluate one checkpoint (`step`, or the newest) and exit
  int64_t step = -1;
  double poll_seconds = 2;  // how often to look for new checkpoints
  // After SIGTERM/SIGINT: how long to go on until the final checkpoint is evaluated (a
  // stop's final checkpoint follows within seconds); 0: stop at once. A second signal
  // stops at once.
  double stop_grace_seconds = 0;
  std::shared_ptr<prom::Registry> metrics;  // pstrain_evaluator_* go here; null: nowhere
};

// The options' own rules, as RunEvaluator applies them first (--check-config too):
// InvalidArgument naming the flag.
Status CheckOptions(const EvaluatorOptions& options);

Status RunEvaluator(const EvaluatorOptions& options, daemon::SignalWatcher& signals);

}  // namespace ps::evaluator

// model_dir/eval/: the evaluation results of a run, as lines of eval/metrics.jsonl and as
// the TensorBoard run "eval" (model_dir/eval/events.out.tfevents.*), so that TensorBoard
// overlays them on the training run. The side-car evaluator and the chief's inline
// evaluation write here. Not thread-safe; one per writer.
#pragma once

#include <optional>
#include <string>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/obs/events.h"

namespace ps::obs {

class EvalLog {
 public:
  explicit EvalLog(std::string model_dir) : model_dir_(std::move(model_dir)) {}
  // Appends `line` (an object with "step" and "unix_time") to eval/metrics.jsonl and
  // its "accuracy", "loss" and "auc" as scalars of that step. An error only for the
  // metrics file (whole lines or nothing: AppendOnlyFile); TensorBoard trouble is logged
  // once, and the next evaluation's scalars are tried again.
  Status Append(const Json& line);
  // The TensorBoard part alone (the chief's final evaluation, whose line is in
  // train_metrics.jsonl); auc < 0: none.
  void AddScalars(int64_t step, double accuracy, double loss, double auc, double wall_time);

 private:
  std::string model_dir_;
  std::optional<EventWriter> events_;
  bool events_failing_ = false;  // the last TensorBoard write failed (logged)
};

}  // namespace ps::obs

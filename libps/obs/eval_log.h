// model_dir/<run>/: the evaluation results of one evaluating task, as lines of
// <run>/metrics.jsonl and as the TensorBoard run <run> (model_dir/<run>/events.out.tfevents.*),
// so that TensorBoard overlays them on the training run. Each writer has its own run: the
// side-car evaluator "eval" (kEvaluatorRun), the chief's inline and final evaluations
// "eval_inline" (kInlineRun); one never reads or writes the other's.
// The steps of a TensorBoard run only increase: a scalar at a step not after the run's
// newest (a checkpoint evaluated again once marked final, a chief that resumed from an
// older checkpoint) goes to metrics.jsonl only. Not thread-safe; one per writer.
#pragma once

#include <optional>
#include <string>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/obs/events.h"

namespace ps::obs {

inline constexpr char kEvaluatorRun[] = "eval";
inline constexpr char kInlineRun[] = "eval_inline";

class EvalLog {
 public:
  EvalLog(std::string model_dir, std::string run)
      : model_dir_(std::move(model_dir)), run_(std::move(run)) {}
  // Appends `line` (an object with "step" and "unix_time") to <run>/metrics.jsonl and
  // its "accuracy", "loss" and "auc" as scalars of that step. An error only for the
  // metrics file (whole lines or nothing: AppendOnlyFile); TensorBoard trouble is logged
  // once, and the next evaluation's scalars are tried again.
  Status Append(const Json& line);
  // The TensorBoard part alone; auc < 0: none. Nothing for a step not after the newest.
  void AddScalars(int64_t step, double accuracy, double loss, double auc, double wall_time);

 private:
  std::string dir() const { return model_dir_ + "/" + run_; }
  // Reads newest_step_ from <run>/metrics.jsonl once: every line there had its scalars
  // written, or was not after the run's newest step.
  void LoadNewest();
  std::string model_dir_, run_;
  bool newest_loaded_ = false;
  std::optional<int64_t> newest_step_;  // the TensorBoard run's newest step; nullopt: none
  std::optional<EventWriter> events_;
  bool events_failing_ = false;  // the last TensorBoard write failed (logged)
};

}  // namespace ps::obs

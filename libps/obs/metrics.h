// Reading the metrics files a run leaves in its model dir (JSON Lines), for the HTML
// report (report.h) and `pstrain inspect` (inspect.h).
//
//   model_dir/train_metrics.jsonl  the chief, one line per log interval:
//     {"step":500,"total_steps":9000,"loss":0.58,"accuracy":0.79,"examples_per_sec":35784,
//      "elapsed_sec":3.1,"unix_time":1732268000.5,"workers":[...]}
//     and at the end {"final_eval":{"step":9000,"accuracy":..,"loss":..,"auc":..,"examples":..}};
//     one line per committed checkpoint
//       {"checkpoint":{"step":500,"final":false,"bytes":123456,"seconds":0.05}}
//     and one per cluster event (status.h's chief writes them as they happen)
//       {"event":{"kind":"ps_lost","task":"ps:1","step":1200,"unix_time":..,"detail":".."}}
//     kinds: chief_start (detail: "fresh" or "restored ckpt-N"), ps_lost, ps_back,
//     worker_lost, worker_back, restored (every ps rolled back to a checkpoint after a
//     ps came back; detail "restored ckpt-N").
//   model_dir/eval/metrics.jsonl   the evaluator, one line per evaluated checkpoint:
//     {"step":..,"accuracy":..,"loss":..,"auc":..,"examples":..}
//   model_dir/eval_inline/metrics.jsonl   the chief, one line per inline evaluation
//     (eval_every_steps; "source":"workers") and one for its final evaluation
//     ("source":"chief","final":true), with the same keys. (Runs before this file existed
//     have their inline lines in eval/metrics.jsonl with "source":"workers".)
// Lines are read leniently: unknown keys are ignored, a null, non-numeric or non-finite
// value is a missing value, and a line that is not a JSON object with a numeric "step"
// (e.g. a half-written last line) is skipped and counted in the notes.
//
// All functions are pure apart from reading the files named; safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/proto/messages.h"

namespace ps::obs {

inline constexpr char kTrainMetricsFile[] = "train_metrics.jsonl";
inline constexpr char kEvalMetricsFile[] = "eval/metrics.jsonl";  // relative to model_dir
inline constexpr char kInlineEvalMetricsFile[] = "eval_inline/metrics.jsonl";

struct TrainPoint {
  int64_t step = 0;
  std::optional<int64_t> total_steps;
  std::optional<double> loss;
  std::optional<double> accuracy;  // fraction in [0, 1]
  std::optional<double> examples_per_sec;
  std::optional<double> elapsed_sec;  // since the chief started training
  std::optional<double> unix_time;
  std::vector<proto::WorkerLoad> workers;  // the line's load figures (figures.h); may be empty
  std::vector<proto::PsLoad> ps;
};

struct CheckpointPoint {
  int64_t step = 0;
  bool final = false;
  std::optional<int64_t> bytes;
  std::optional<double> seconds;  // shard writes + commit
};

struct ClusterEvent {
  int64_t step = 0;
  std::string kind;  // chief_start, ps_lost, ps_back, worker_lost, worker_back, restored
  std::string task;  // "ps:1"; empty for chief_start
  std::string detail;
  std::optional<double> unix_time;
};

struct EvalPoint {
  int64_t step = 0;
  std::optional<double> accuracy;
  std::optional<double> loss;
  std::optional<double> auc;  // binary tasks only
  std::optional<int64_t> examples;
  bool inline_eval = false;  // "source": "workers" (eval_every_steps), else the evaluator's
};

struct MetricsHistory {
  std::vector<TrainPoint> train;  // sorted by step (stable: file order within a step)
  std::vector<EvalPoint> eval;    // the evaluator's and the inline ones (not the final), by step
  std::optional<EvalPoint> final_eval;       // the chief's final evaluation, if any
  std::vector<CheckpointPoint> checkpoints;  // in file order
  std::vector<ClusterEvent> events;          // in file order
  std::vector<std::string> notes;            // "train_metrics.jsonl: 1 line skipped (line 12: ...)"
};

// Reads the two metrics files. Missing files are not errors (they add a note); NotFound
// only when model_dir itself does not exist, IoError when a file exists but cannot be read.
Result<MetricsHistory> ReadMetrics(const std::string& model_dir);

// The lines a JSON Lines reader skipped: how many, and the first one's "line N: why".
struct LineStats {
  int skipped = 0;
  std::string first_problem;
  void Skip(int line, const std::string& why);
};

// Calls on_line(object, line_number) (numbered from 1) for every line of `path` that is
// a JSON object, in file order; blank lines are passed over, other lines are counted in
// *stats. false when the file does not exist; IoError when it cannot be opened or read.
Result<bool> ForEachJsonLine(const std::string& path, LineStats* stats,
                             const std::function<void(const Json&, int)>& on_line);

}  // namespace ps::obs

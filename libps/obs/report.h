// What people look at after (or during) a run: an HTML report of the metrics, and a
// listing of the checkpoints. Backs `pstrain report` and `pstrain inspect`.
//
// Inputs (all optional; whatever is missing shows as "no data"):
//   model_dir/train_metrics.jsonl  the chief, one line per log interval:
//     {"step":500,"total_steps":9000,"loss":0.58,"accuracy":0.79,"examples_per_sec":35784,
//      "elapsed_sec":3.1,"unix_time":1732268000.5,"workers":[...]}
//     and at the end {"final_eval":{"step":9000,"accuracy":..,"loss":..,"auc":..,"examples":..}}
//   model_dir/eval/metrics.jsonl   the evaluator, one line per evaluated checkpoint:
//     {"step":..,"accuracy":..,"loss":..,"auc":..,"examples":..}
// Lines are read leniently: unknown keys are ignored, a null or non-numeric value is a
// missing value, and a line that is not a JSON object with a numeric "step" (e.g. a
// half-written last line) is skipped and counted in the report's notes.
//
// All functions are pure apart from reading the files named; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/status.h"

namespace ps::obs {

inline constexpr char kTrainMetricsFile[] = "train_metrics.jsonl";
inline constexpr char kEvalMetricsFile[] = "eval/metrics.jsonl";  // relative to model_dir
inline constexpr char kReportFile[] = "report.html";

struct TrainPoint {
  int64_t step = 0;
  std::optional<int64_t> total_steps;
  std::optional<double> loss;
  std::optional<double> accuracy;          // fraction in [0, 1]
  std::optional<double> examples_per_sec;
  std::optional<double> elapsed_sec;       // since the chief started training
};

struct EvalPoint {
  int64_t step = 0;
  std::optional<double> accuracy;
  std::optional<double> loss;
  std::optional<double> auc;               // binary tasks only
  std::optional<int64_t> examples;
};

struct MetricsHistory {
  std::vector<TrainPoint> train;           // sorted by step (stable: file order within a step)
  std::vector<EvalPoint> eval;             // the evaluator's, sorted by step
  std::optional<EvalPoint> final_eval;     // the chief's final evaluation, if any
  std::vector<std::string> notes;          // "train_metrics.jsonl: 1 line skipped (line 12: ...)"
};

// Reads the two metrics files. Missing files are not errors (they add a note); NotFound
// only when model_dir itself does not exist, IoError when a file exists but cannot be read.
Result<MetricsHistory> ReadMetrics(const std::string& model_dir);

// A self-contained HTML page (inline CSS and SVG, no scripts, no external resources):
// a summary table and four plots, each an <svg class="plot"> whose data series are
// <polyline class="series" data-series="NAME" points="x,y ..."> (one point per metric
// line): "Training loss" (train loss, eval loss), "Training accuracy", "Evaluation"
// (eval accuracy, AUC), "Throughput" (examples/sec). A plot without data says "no data".
// `title` (the model dir) is shown in the heading; it is HTML-escaped.
std::string RenderReportHtml(const MetricsHistory& history, std::string_view title);

// ReadMetrics + RenderReportHtml.
Result<std::string> RenderReport(const std::string& model_dir);

// ---- inspect -----------------------------------------------------------------------------

struct InspectOptions {
  std::optional<int64_t> step;  // the checkpoint to detail; default: the newest
  bool verify = false;          // read all data and check every record's checksums
};

struct InspectReport {
  std::string text;      // what `pstrain inspect` prints
  bool healthy = true;   // false: a damaged checkpoint, shard or record was found
};

// Lists model_dir's committed checkpoints (step, UTC time, size, ps tasks, final), then
// details one: its shard files checked against the MANIFEST, and every variable record
// (name, partition, rows, full shape, ps index = the shard file holding it, slots, bytes,
// data checksum status — "ok", "unchecked" without verify, or the failure), then per ps
// task: its shard file and size (MANIFEST), the record bytes it holds, and, when
// train_metrics.jsonl has a progress line with a "ps" array (load.h), the last such
// line's requests (total), requests/s and bytes in/out per second. Damage is
// reported in the text (and healthy = false), not as an error. Errors: NotFound when
// model_dir holds no committed checkpoint or none at options.step.
Result<InspectReport> InspectModelDir(const std::string& model_dir, const InspectOptions& options);

}  // namespace ps::obs

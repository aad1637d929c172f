#include "libps/obs/metrics.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "libps/obs/status.h"

namespace ps::obs {

namespace fs = std::filesystem;

namespace {

std::optional<double> Number(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> Integer(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15)
      return static_cast<int64_t>(v);
  }
  return std::nullopt;
}

std::optional<EvalPoint> ParseEvalPoint(const Json& obj) {
  if (!obj.is_object()) return std::nullopt;
  auto step = Integer(obj, "step");
  if (!step) return std::nullopt;
  auto source = obj.find("source");
  return EvalPoint{.step = *step,
                   .accuracy = Number(obj, "accuracy"),
                   .loss = Number(obj, "loss"),
                   .auc = Number(obj, "auc"),
                   .examples = Integer(obj, "examples"),
                   .inline_eval = source != obj.end() && source->is_string() &&
                                  source->get<std::string>() == "workers"};
}

std::optional<TrainPoint> ParseTrainPoint(const Json& obj) {
  auto step = Integer(obj, "step");
  if (!step) return std::nullopt;
  TrainPoint p{.step = *step,
               .total_steps = Integer(obj, "total_steps"),
               .loss = Number(obj, "loss"),
               .accuracy = Number(obj, "accuracy"),
               .examples_per_sec = Number(obj, "examples_per_sec"),
               .elapsed_sec = Number(obj, "elapsed_sec"),
               .unix_time = Number(obj, "unix_time"),
               .workers = {},
               .ps = {}};
  if (obj.contains("workers") || obj.contains("ps")) {
    proto::ChiefStatus load = ChiefStatusFromJson(obj);
    p.workers = std::move(load.workers);
    p.ps = std::move(load.ps);
  }
  return p;
}

// Adds a train_metrics.jsonl line to h: a progress point, the chief's final evaluation,
// a checkpoint or a cluster event. nullptr, or why the line is skipped.
const char* TakeTrainLine(const Json& line, MetricsHistory* h) {
  if (auto fe = line.find("final_eval"); fe != line.end()) {
    auto p = ParseEvalPoint(*fe);
    if (!p) return "final_eval without a numeric step";
    h->final_eval = *p;
    return nullptr;
  }
  // An inline evaluation (eval_every_steps): the same figures are a line of
  // eval_inline/metrics.jsonl (eval/metrics.jsonl in older runs), read with the evaluator's.
  if (line.contains("eval")) return nullptr;
  if (auto c = line.find("checkpoint"); c != line.end()) {
    if (!c->is_object()) return "checkpoint is not an object";
    auto step = Integer(*c, "step");
    if (!step) return "checkpoint without a numeric step";
    auto fin = c->find("final");
    h->checkpoints.push_back({.step = *step,
                              .final = fin != c->end() && fin->is_boolean() && fin->get<bool>(),
                              .bytes = Integer(*c, "bytes"),
                              .seconds = Number(*c, "seconds")});
    return nullptr;
  }
  if (auto e = line.find("event"); e != line.end()) {
    if (!e->is_object()) return "event is not an object";
    auto step = Integer(*e, "step");
    if (!step) return "event without a numeric step";
    auto text = [&](const char* key) {
      auto it = e->find(key);
      return it != e->end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    h->events.push_back({.step = *step,
                         .kind = text("kind"),
                         .task = text("task"),
                         .detail = text("detail"),
                         .unix_time = Number(*e, "unix_time")});
    return nullptr;
  }
  auto p = ParseTrainPoint(line);
  if (!p) return "no numeric \"step\"";
  h->train.push_back(*p);
  return nullptr;
}

// Hands every JSON object line of model_dir/file to take(line), which adds it to h or
// returns why it is skipped (nullptr: taken). Notes "<file>: <missing_note>" when the
// file does not exist (nothing when missing_note is nullptr), and the skipped lines (how many, the first one's problem).
Status ReadMetricsFile(const std::string& model_dir, const char* file, const char* missing_note,
                       MetricsHistory* h, const std::function<const char*(const Json&)>& take) {
  LineStats stats;
  PS_ASSIGN_OR_RETURN(bool found, ForEachJsonLine((fs::path(model_dir) / file).string(), &stats,
                                                  [&](const Json& line, int n) {
                                                    if (const char* why = take(line))
                                                      stats.Skip(n, why);
                                                  }));
  if (!found && missing_note != nullptr)
    h->notes.push_back(std::string(file) + ": " + missing_note);
  if (stats.skipped > 0) {
    h->notes.push_back(std::string(file) + ": " + std::to_string(stats.skipped) +
                       (stats.skipped == 1 ? " line" : " lines") + " skipped (" +
                       stats.first_problem + ")");
  }
  return Status::Ok();
}

}  // namespace

void LineStats::Skip(int line, const std::string& why) {
  if (skipped++ == 0) first_problem = "line " + std::to_string(line) + ": " + why;
}

Result<bool> ForEachJsonLine(const std::string& path, LineStats* stats,
                             const std::function<void(const Json&, int)>& on_line) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  std::ifstream in(path);
  if (!in) return IoError(path + ": cannot open");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto json = ParseJson(line, "line");
    // A last line without its newline is an append in progress (a running job): not a
    // bad line, it is read whole next time.
    if (!json.ok() && in.eof()) break;
    if (!json.ok()) {
      stats->Skip(n, "not JSON");
    } else if (!json->is_object()) {
      stats->Skip(n, "not a JSON object");
    } else {
      on_line(*json, n);
    }
  }
  if (in.bad()) return IoError(path + ": read failed");
  return true;
}

Result<MetricsHistory> ReadMetrics(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) return NotFound(model_dir + ": no such model directory");
  MetricsHistory h;

  PS_RETURN_IF_ERROR(ReadMetricsFile(model_dir, kTrainMetricsFile, "not found", &h,
                                     [&](const Json& line) { return TakeTrainLine(line, &h); }));
  // No evaluator is a normal setup (the summary says how many evaluations there are).
  PS_RETURN_IF_ERROR(ReadMetricsFile(model_dir, kEvalMetricsFile, nullptr, &h,
                                     [&](const Json& line) -> const char* {
                                       auto p = ParseEvalPoint(line);
                                       if (!p) return "no numeric \"step\"";
                                       h.eval.push_back(*p);
                                       return nullptr;
                                     }));
  PS_RETURN_IF_ERROR(ReadMetricsFile(model_dir, kInlineEvalMetricsFile, nullptr, &h,
                                     [&](const Json& line) -> const char* {
                                       auto p = ParseEvalPoint(line);
                                       if (!p) return "no numeric \"step\"";
                                       // The final evaluation is train_metrics.jsonl's.
                                       if (line.value("final", false) == true) return nullptr;
                                       p->inline_eval = true;
                                       h.eval.push_back(*p);
                                       return nullptr;
                                     }));

  std::stable_sort(h.train.begin(), h.train.end(),
                   [](const auto& a, const auto& b) { return a.step < b.step; });
  std::stable_sort(h.eval.begin(), h.eval.end(),
                   [](const auto& a, const auto& b) { return a.step < b.step; });
  return h;
}

}  // namespace ps::obs

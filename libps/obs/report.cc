#include "libps/obs/report.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "libps/core/text.h"
#include "libps/obs/svg_plot.h"

namespace ps::obs {

namespace {

// 35784.2 -> "35,784"
std::string Grouped(double v) {
  std::string digits = Fixed(std::fabs(v), 0);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

constexpr char kBlue[] = "#1f77b4";
constexpr char kOrange[] = "#ff7f0e";
constexpr char kGreen[] = "#2ca02c";

constexpr char kStyle[] = R"CSS(
body { font-family: "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
p.dir { font-family: monospace; color: #555; margin: 0 0 16px 0; word-break: break-all; }
table.summary { border-collapse: collapse; margin-bottom: 20px; background: #fff; }
table.summary th, table.summary td { border: 1px solid #ddd; padding: 5px 10px; text-align: left; font-size: 14px; }
table.summary th { background: #f0f0f0; font-weight: 600; }
div.plots { display: flex; flex-wrap: wrap; gap: 16px; }
svg.plot { border: 1px solid #ddd; background: #fff; }
svg text { font-family: "DejaVu Sans", Arial, sans-serif; fill: #333; }
svg text.title { font-size: 15px; font-weight: 600; }
svg text.tick { font-size: 11px; }
svg text.label { font-size: 12px; fill: #555; }
svg text.nodata { font-size: 16px; fill: #888; }
ul.notes { color: #8a5a00; font-size: 13px; }
)CSS";

}  // namespace

std::string RenderReportHtml(const MetricsHistory& h, std::string_view title) {
  // The evaluation series: the evaluator's points, plus the chief's final evaluation
  // when the evaluator has no point at that step.
  std::vector<EvalPoint> eval = h.eval;
  if (h.final_eval && std::none_of(eval.begin(), eval.end(), [&](const EvalPoint& p) {
        return p.step == h.final_eval->step;
      })) {
    eval.push_back(*h.final_eval);
    std::stable_sort(eval.begin(), eval.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  }

  auto train_series = [&](std::string name, const char* color, std::optional<double> TrainPoint::*field) {
    Series s{std::move(name), color, {}};
    for (const auto& p : h.train) {
      if (p.*field) s.points.emplace_back(static_cast<double>(p.step), *(p.*field));
    }
    return s;
  };
  auto eval_series = [&](std::string name, const char* color, std::optional<double> EvalPoint::*field) {
    Series s{std::move(name), color, {}};
    for (const auto& p : eval) {
      if (p.*field) s.points.emplace_back(static_cast<double>(p.step), *(p.*field));
    }
    return s;
  };

  // Summary table.
  std::vector<std::pair<std::string, std::string>> rows;
  if (!h.train.empty()) {
    const TrainPoint& last = h.train.back();
    std::string steps = Grouped(static_cast<double>(last.step));
    if (last.total_steps) steps += " of " + Grouped(static_cast<double>(*last.total_steps));
    rows.emplace_back("Steps", steps);
    if (last.elapsed_sec) rows.emplace_back("Training time", FormatDuration(*last.elapsed_sec));
    for (auto it = h.train.rbegin(); it != h.train.rend(); ++it) {
      if (it->loss) {
        rows.emplace_back("Final training loss", Fixed(*it->loss, 4) + " (step " + Grouped(double(it->step)) + ")");
        break;
      }
    }
    for (auto it = h.train.rbegin(); it != h.train.rend(); ++it) {
      if (it->accuracy) {
        rows.emplace_back("Final training accuracy",
                          Fixed(*it->accuracy, 4) + " (step " + Grouped(double(it->step)) + ")");
        break;
      }
    }
    double sum = 0;
    int n = 0;
    double peak = 0;
    for (const auto& p : h.train) {
      if (p.examples_per_sec && *p.examples_per_sec > 0) {
        sum += *p.examples_per_sec;
        peak = std::max(peak, *p.examples_per_sec);
        ++n;
      }
    }
    if (n > 0) {
      rows.emplace_back("Throughput", Grouped(sum / n) + " examples/s mean, " + Grouped(peak) + " peak (" +
                                          std::to_string(n) + " intervals)");
    }
  } else {
    rows.emplace_back("Steps", "no training metrics");
  }
  const EvalPoint* best = nullptr;
  for (const auto& p : eval) {
    if (p.accuracy && (best == nullptr || *p.accuracy > *best->accuracy)) best = &p;
  }
  if (h.final_eval && h.final_eval->accuracy && (best == nullptr || *h.final_eval->accuracy > *best->accuracy)) {
    best = &*h.final_eval;
  }
  rows.emplace_back("Evaluations", std::to_string(h.eval.size()) + " by the evaluator" +
                                       (h.final_eval ? ", final evaluation by the chief" : ""));
  if (best) {
    rows.emplace_back("Best eval accuracy", Fixed(*best->accuracy, 4) + " (step " + Grouped(double(best->step)) + ")");
  }
  const EvalPoint* fin = h.final_eval ? &*h.final_eval : (eval.empty() ? nullptr : &eval.back());
  if (fin) {
    std::string text = fin->accuracy ? Fixed(*fin->accuracy, 4) : std::string("-");
    text += " (step " + Grouped(double(fin->step));
    if (fin->loss) text += ", loss " + Fixed(*fin->loss, 4);
    if (fin->auc) text += ", AUC " + Fixed(*fin->auc, 4);
    if (fin->examples) text += ", " + Grouped(double(*fin->examples)) + " examples";
    rows.emplace_back("Final eval accuracy", text + ")");
  }

  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>pstrain report: "
    << HtmlEscape(title) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  o << "<h1>pstrain training report</h1>\n<p class=\"dir\">" << HtmlEscape(title) << "</p>\n";
  o << "<table class=\"summary\">\n";
  for (const auto& [k, v] : rows) o << "<tr><th>" << HtmlEscape(k) << "</th><td>" << HtmlEscape(v) << "</td></tr>\n";
  o << "</table>\n";
  if (!h.notes.empty()) {
    o << "<ul class=\"notes\">\n";
    for (const auto& n : h.notes) o << "<li>" << HtmlEscape(n) << "</li>\n";
    o << "</ul>\n";
  }
  o << "<div class=\"plots\">\n";
  o << SvgPlot("loss", "Training loss", "step", "loss",
               {train_series("train", kBlue, &TrainPoint::loss), eval_series("eval", kOrange, &EvalPoint::loss)});
  o << SvgPlot("train-accuracy", "Training accuracy", "step", "accuracy",
               {train_series("train", kBlue, &TrainPoint::accuracy)});
  o << SvgPlot("eval", "Evaluation", "step", "accuracy / AUC",
               {eval_series("accuracy", kOrange, &EvalPoint::accuracy), eval_series("AUC", kGreen, &EvalPoint::auc)});
  o << SvgPlot("throughput", "Throughput", "step", "examples/sec",
               {train_series("examples/sec", kBlue, &TrainPoint::examples_per_sec)});
  o << "</div>\n</body>\n</html>\n";
  return o.str();
}

Result<std::string> RenderReport(const std::string& model_dir) {
  PS_ASSIGN_OR_RETURN(MetricsHistory h, ReadMetrics(model_dir));
  return RenderReportHtml(h, model_dir);
}

}  // namespace ps::obs

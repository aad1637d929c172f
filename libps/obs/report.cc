#include "libps/obs/report.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "libps/core/text.h"
#include "libps/obs/figures.h"
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
constexpr char kRed[] = "#d62728";
constexpr char kPurple[] = "#9467bd";
constexpr char kGray[] = "#7f7f7f";
constexpr const char* kPalette[] = {kBlue,   kOrange,   kGreen,    kRed,
                                    kPurple, "#8c564b", "#e377c2", "#17becf"};

const char* PaletteColor(size_t i) { return kPalette[i % (sizeof kPalette / sizeof kPalette[0])]; }

// "hint: ps:0 carries more load ..." -> "ps:0 carries more load": one hint's identity
// (its task and kind), without the figures that change from line to line.
std::string HintKey(const std::string& hint) {
  std::string rest = hint.rfind("hint: ", 0) == 0 ? hint.substr(6) : hint;
  return rest.substr(0, rest.find(':', rest.find(':') + 1));
}

struct FiredHint {
  std::string key;
  int64_t first_step = 0, last_step = 0;
  int lines = 0;
  std::string latest;
};

// The hints (figures.h) each progress line's load figures give, grouped by task and kind.
std::vector<FiredHint> FiredHints(const MetricsHistory& h) {
  std::vector<FiredHint> out;
  for (const auto& p : h.train) {
    for (const auto& hint : LoadHints(p.workers, p.ps)) {
      const std::string key = HintKey(hint);
      auto it =
          std::find_if(out.begin(), out.end(), [&](const FiredHint& f) { return f.key == key; });
      if (it == out.end()) {
        out.push_back({key, p.step, p.step, 0, hint});
        it = out.end() - 1;
      }
      it->last_step = p.step;
      it->lines += 1;
      it->latest = hint;
    }
  }
  return out;
}

// What an event line means to a reader, and its marker.
Marker EventMarker(const ClusterEvent& e, bool first_start) {
  Marker m{
      .x = static_cast<double>(e.step), .kind = e.kind, .tag = "?", .label = e.kind, .color = kRed};
  if (e.kind == "chief_start") {
    m.tag = first_start ? "S" : "R";
    m.color = first_start ? kGray : kPurple;
    m.label = (first_start ? "chief started" : "chief restarted") +
              (e.detail.empty() ? "" : ": " + e.detail);
  } else if (e.kind == "restored") {
    m.tag = "RB";
    m.color = kPurple;
    m.label = "every ps rolled back" + (e.detail.empty() ? "" : ": " + e.detail);
  } else if (e.kind == "ps_lost" || e.kind == "worker_lost") {
    m.tag = e.kind == "ps_lost" ? "P-" : "W-";
    m.label = e.task + " lost" + (e.detail.empty() ? "" : ": " + e.detail);
  } else if (e.kind == "ps_back" || e.kind == "worker_back") {
    m.tag = e.kind == "ps_back" ? "P+" : "W+";
    m.color = kGreen;
    m.label = e.task + " back" + (e.detail.empty() ? "" : ": " + e.detail);
  }
  return m;
}

constexpr char kStyle[] = R"CSS(
body { font-family: "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
p.dir { font-family: monospace; color: #555; margin: 0 0 16px 0; word-break: break-all; }
table.summary { border-collapse: collapse; margin-bottom: 20px; background: #fff; }
table.summary th, table.summary td { border: 1px solid #ddd; padding: 5px 10px; text-align: left; font-size: 14px; }
table.summary th { background: #f0f0f0; font-weight: 600; }
h2 { font-size: 17px; margin: 22px 0 8px 0; }
p.live { color: #1f5fa0; font-size: 13px; }
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
    std::stable_sort(eval.begin(), eval.end(),
                     [](const auto& a, const auto& b) { return a.step < b.step; });
  }

  auto train_series = [&](std::string name, const char* color,
                          std::optional<double> TrainPoint::*field) {
    Series s{std::move(name), color, {}};
    for (const auto& p : h.train) {
      if (p.*field) s.points.emplace_back(static_cast<double>(p.step), *(p.*field));
    }
    return s;
  };
  auto eval_series = [&](std::string name, const char* color,
                         std::optional<double> EvalPoint::*field) {
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
      const auto& r = *it;
      if (r.loss) {
        rows.emplace_back("Final training loss",
                          Fixed(*r.loss, 4) + " (step " + Grouped(double(r.step)) + ")");
        break;
      }
    }
    for (auto it = h.train.rbegin(); it != h.train.rend(); ++it) {
      const auto& r = *it;
      if (r.accuracy) {
        rows.emplace_back("Final training accuracy",
                          Fixed(*r.accuracy, 4) + " (step " + Grouped(double(r.step)) + ")");
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
      rows.emplace_back("Throughput", Grouped(sum / n) + " examples/s mean, " + Grouped(peak) +
                                          " peak (" + std::to_string(n) + " intervals)");
    }
  } else {
    rows.emplace_back("Steps", "no training metrics");
  }
  const EvalPoint* best = nullptr;
  for (const auto& p : eval) {
    if (p.accuracy && (best == nullptr || *p.accuracy > *best->accuracy)) best = &p;
  }
  if (h.final_eval && h.final_eval->accuracy &&
      (best == nullptr || *h.final_eval->accuracy > *best->accuracy)) {
    best = &*h.final_eval;
  }
  const auto inline_evals =
      std::count_if(h.eval.begin(), h.eval.end(), [](const EvalPoint& p) { return p.inline_eval; });
  rows.emplace_back(
      "Evaluations",
      std::to_string(h.eval.size() - static_cast<size_t>(inline_evals)) + " by the evaluator" +
          (inline_evals > 0 ? ", " + std::to_string(inline_evals) + " inline on the workers" : "") +
          (h.final_eval ? ", final evaluation by the chief" : ""));
  if (best) {
    rows.emplace_back("Best eval accuracy",
                      Fixed(*best->accuracy, 4) + " (step " + Grouped(double(best->step)) + ")");
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

  const bool finished = RunFinished(h);
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>pstrain report: "
    << HtmlEscape(title) << "</title>\n";
  if (!finished) o << "<meta http-equiv=\"refresh\" content=\"" << kLiveRefreshSec << "\">\n";
  o << "<style>" << kStyle << "</style>\n</head>\n<body>\n";
  o << "<h1>pstrain training report</h1>\n<p class=\"dir\">" << HtmlEscape(title) << "</p>\n";
  if (!finished) {
    o << "<p class=\"live\">Training has not finished: this page reloads every " << kLiveRefreshSec
      << " s (keep it current with <code>pstrain report --watch</code>).</p>\n";
  }
  o << "<table class=\"summary\">\n";
  for (const auto& [k, v] : rows)
    o << "<tr><th>" << HtmlEscape(k) << "</th><td>" << HtmlEscape(v) << "</td></tr>\n";
  o << "</table>\n";
  if (!h.notes.empty()) {
    o << "<ul class=\"notes\">\n";
    for (const auto& n : h.notes) o << "<li>" << HtmlEscape(n) << "</li>\n";
    o << "</ul>\n";
  }
  // One x axis for every plot: 0 .. the newest step seen.
  double last_step = 0;
  for (const auto& p : h.train) last_step = std::max(last_step, static_cast<double>(p.step));
  for (const auto& p : eval) last_step = std::max(last_step, static_cast<double>(p.step));
  PlotOptions opt{
      .x_range = std::make_pair(0.0, std::max(last_step, 1.0)), .stacked = false, .markers = {}};
  for (const auto& c : h.checkpoints) {
    std::string label = "checkpoint ckpt-" + std::to_string(c.step) + (c.final ? " (final)" : "");
    if (c.seconds) label += ", " + Fixed(*c.seconds, 2) + " s";
    if (c.bytes) label += ", " + HumanBytes(static_cast<uint64_t>(*c.bytes));
    opt.markers.push_back(
        {static_cast<double>(c.step), "checkpoint", c.final ? "F" : "C", label, kGray});
  }
  bool first_start = true;
  for (const auto& e : h.events) {
    opt.markers.push_back(EventMarker(e, first_start));
    if (e.kind == "chief_start") first_start = false;
  }

  o << "<div class=\"plots\">\n";
  o << SvgPlot("loss", "Training loss", "step", "loss",
               {train_series("train", kBlue, &TrainPoint::loss),
                eval_series("eval", kOrange, &EvalPoint::loss)},
               opt);
  o << SvgPlot("train-accuracy", "Training accuracy", "step", "accuracy",
               {train_series("train", kBlue, &TrainPoint::accuracy)}, opt);
  o << SvgPlot("eval", "Evaluation", "step", "accuracy / AUC",
               {eval_series("accuracy", kOrange, &EvalPoint::accuracy),
                eval_series("AUC", kGreen, &EvalPoint::auc)},
               opt);
  o << SvgPlot("throughput", "Throughput", "step", "examples/sec",
               {train_series("examples/sec", kBlue, &TrainPoint::examples_per_sec)}, opt);
  o << "</div>\n";

  // Where a step's time goes, per worker: ms per step in each part, stacked.
  std::vector<std::string> worker_names;
  std::vector<std::string> ps_names;
  for (const auto& p : h.train) {
    for (const auto& w : p.workers) {
      if (w.step_ms &&
          std::find(worker_names.begin(), worker_names.end(), w.task) == worker_names.end()) {
        worker_names.push_back(w.task);
      }
    }
    for (const auto& q : p.ps) {
      if (std::find(ps_names.begin(), ps_names.end(), q.task) == ps_names.end())
        ps_names.push_back(q.task);
    }
  }
  if (!worker_names.empty() || !ps_names.empty()) {
    o << "<h2>Where the time goes</h2>\n<div class=\"plots\">\n";
  }
  PlotOptions stacked = opt;
  stacked.stacked = true;
  for (const auto& name : worker_names) {
    Series parts[4] = {
        {"data", kGray, {}}, {"pull", kBlue, {}}, {"compute", kGreen, {}}, {"push", kOrange, {}}};
    for (const auto& p : h.train) {
      for (const auto& w : p.workers) {
        if (w.task != name || !w.step_ms) continue;
        const double x = static_cast<double>(p.step);
        parts[0].points.emplace_back(x, *w.step_ms * w.data_frac.value_or(0));
        parts[1].points.emplace_back(x, *w.step_ms * w.pull_frac.value_or(0));
        parts[2].points.emplace_back(x, *w.step_ms * w.compute_frac.value_or(0));
        parts[3].points.emplace_back(x, *w.step_ms * w.push_frac.value_or(0));
      }
    }
    o << SvgPlot("step-time-" + name, "Step time, " + name, "step", "ms per step",
                 {parts[0], parts[1], parts[2], parts[3]}, stacked);
  }
  auto ps_plot = [&](const std::string& id, const std::string& title, const std::string& unit,
                     double (*value)(const proto::PsLoad&)) {
    std::vector<Series> series;
    for (size_t i = 0; i < ps_names.size(); ++i) {
      Series s{ps_names[i], PaletteColor(i), {}};
      for (const auto& p : h.train) {
        for (const auto& q : p.ps) {
          if (q.task == ps_names[i] && q.answered())
            s.points.emplace_back(static_cast<double>(p.step), value(q));
        }
      }
      series.push_back(std::move(s));
    }
    o << SvgPlot(id, title, "step", unit, series, opt);
  };
  if (!ps_names.empty()) {
    ps_plot("ps-requests", "ps requests/s", "requests/s",
            [](const proto::PsLoad& q) { return q.requests_per_s; });
    ps_plot("ps-bytes", "ps traffic (in + out)", "MB/s",
            [](const proto::PsLoad& q) { return (q.bytes_in_per_s + q.bytes_out_per_s) / 1e6; });
    ps_plot("ps-queue", "ps queue depth (max per interval)", "requests",
            [](const proto::PsLoad& q) { return static_cast<double>(q.max_queue_depth); });
  }
  if (!worker_names.empty() || !ps_names.empty()) o << "</div>\n";

  // The events behind the markers, and the hints.
  if (!opt.markers.empty()) {
    o << "<h2>Checkpoints and cluster events</h2>\n<table class=\"summary events\">\n"
         "<tr><th>step</th><th>mark</th><th>what</th></tr>\n";
    std::vector<Marker> sorted = opt.markers;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const Marker& a, const Marker& b) { return a.x < b.x; });
    for (const auto& m : sorted) {
      o << "<tr><td>" << Grouped(m.x) << "</td><td>" << HtmlEscape(m.tag) << "</td><td>"
        << HtmlEscape(m.label) << "</td></tr>\n";
    }
    o << "</table>\n";
  }
  const auto hints = FiredHints(h);
  o << "<h2>Hints</h2>\n";
  if (hints.empty()) {
    o << "<p class=\"hints\">No hint fired (no hot ps, straggler, network- or ps-bound interval).</p>\n";
  } else {
    o << "<table class=\"summary hints\">\n<tr><th>first step</th><th>last step</th><th>intervals</th>"
         "<th>latest</th></tr>\n";
    for (const auto& f : hints) {
      o << "<tr><td>" << Grouped(double(f.first_step)) << "</td><td>"
        << Grouped(double(f.last_step)) << "</td><td>" << f.lines << "</td><td>"
        << HtmlEscape(f.latest) << "</td></tr>\n";
    }
    o << "</table>\n";
  }
  o << "</body>\n</html>\n";
  return o.str();
}

bool RunFinished(const MetricsHistory& h) {
  return h.final_eval.has_value() || std::any_of(h.checkpoints.begin(), h.checkpoints.end(),
                                                 [](const auto& c) { return c.final; });
}

Result<std::string> RenderReport(const std::string& model_dir) {
  PS_ASSIGN_OR_RETURN(MetricsHistory h, ReadMetrics(model_dir));
  return RenderReportHtml(h, model_dir);
}

}  // namespace ps::obs

#include "libps/obs/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "libps/core/text.h"

namespace ps::obs {

std::string HtmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// 1, 2, 5 x 10^k nearest to x (round) or at least x (ceiling).
double NiceNumber(double x, bool round) {
  double exp = std::floor(std::log10(x) + 1e-12);
  // 1 - 1e-9: 0.275 - 0.225 is 0.05000000000000002, and must count as 5 x 10^-2.
  double f = x / std::pow(10.0, exp) * (1 - 1e-9);
  double nf;
  if (round) {
    nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  } else {
    nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  }
  return nf * std::pow(10.0, exp);
}

struct Axis {
  double lo = 0, hi = 1, step = 0.2;
  std::vector<double> ticks;
};

// `integer`: the values are counts (steps), so ticks are whole numbers.
Axis MakeAxis(double lo, double hi, int target_ticks, bool integer) {
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    double pad = integer ? 1 : lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  Axis a;
  double range = NiceNumber(hi - lo, false);
  a.step = NiceNumber(range / (target_ticks - 1), true);
  if (integer) a.step = std::max(a.step, 1.0);
  a.lo = std::floor(lo / a.step + 1e-9) * a.step;
  a.hi = std::ceil(hi / a.step - 1e-9) * a.step;
  for (int i = 0;; ++i) {
    double t = a.lo + i * a.step;
    if (t > a.hi + a.step * 1e-6) break;
    a.ticks.push_back(std::fabs(t) < a.step * 1e-9 ? 0 : t);
  }
  return a;
}

std::string TickLabel(double v, const Axis& axis) {
  double biggest = std::max(std::fabs(axis.lo), std::fabs(axis.hi));
  double scale = 1;
  const char* suffix = "";
  if (biggest >= 1e8 && axis.step >= 1e6) {
    scale = 1e6;
    suffix = "M";
  } else if (biggest >= 1e5 && axis.step >= 1e3) {
    scale = 1e3;
    suffix = "k";
  }
  double step = axis.step / scale;
  int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return Fixed(v / scale, std::min(decimals, 6)) + suffix;
}

constexpr double kWidth = 540, kHeight = 320;
constexpr double kLeft = 68, kRight = 20, kTop = 56, kBottom = 50;

std::string Coord(double v) { return Fixed(v, 1); }

}  // namespace

std::string SvgPlot(std::string_view id, std::string_view title, std::string_view x_label,
                    std::string_view y_label, const std::vector<Series>& all_series,
                    const PlotOptions& options) {
  std::vector<const Series*> series;
  for (const auto& s : all_series) {
    if (!s.points.empty()) series.push_back(&s);
  }
  std::ostringstream o;
  o << "<svg class=\"plot\" id=\"" << HtmlEscape(id)
    << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" role=\"img\" aria-label=\""
    << HtmlEscape(title) << "\">\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" fill=\"#ffffff\"/>\n";
  o << "<text class=\"title\" x=\"" << kWidth / 2 << "\" y=\"24\" text-anchor=\"middle\">"
    << HtmlEscape(title) << "</text>\n";
  const double px0 = kLeft, px1 = kWidth - kRight, py0 = kHeight - kBottom, py1 = kTop;
  if (series.empty()) {
    o << "<rect x=\"" << px0 << "\" y=\"" << py1 << "\" width=\"" << px1 - px0 << "\" height=\""
      << py0 - py1 << "\" fill=\"#f6f6f6\" stroke=\"#cccccc\"/>\n";
    o << "<text class=\"nodata\" x=\"" << (px0 + px1) / 2 << "\" y=\"" << (py0 + py1) / 2
      << "\" text-anchor=\"middle\" dominant-baseline=\"middle\">no data</text>\n</svg>\n";
    return o.str();
  }
  // Stacked: each series' values become the running sum at its x (the areas' tops).
  std::vector<Series> tops;
  if (options.stacked) {
    std::map<double, double> sum;  // x -> running sum
    for (const Series* s : series) {
      for (auto [x, y] : s->points) sum.emplace(x, 0.0);
    }
    for (const Series* s : series) {
      std::map<double, double> own(s->points.begin(), s->points.end());
      Series top{s->name, s->color, {}};
      for (auto& [x, acc] : sum) {
        auto it = own.find(x);
        acc += it == own.end() ? 0.0 : it->second;
        top.points.emplace_back(x, acc);
      }
      tops.push_back(std::move(top));
    }
    series.clear();
    for (const auto& t : tops) series.push_back(&t);
  }
  double xmin = series[0]->points.front().first, xmax = xmin;
  double ymin = series[0]->points.front().second, ymax = ymin;
  for (const Series* s : series) {
    for (auto [x, y] : s->points) {
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  }
  if (options.x_range) {
    xmin = std::min(xmin, options.x_range->first);
    xmax = std::max(xmax, options.x_range->second);
  }
  if (options.stacked) ymin = std::min(ymin, 0.0);
  Axis ax = MakeAxis(xmin, xmax, 6, true);
  Axis ay = MakeAxis(ymin, ymax, 6, false);
  auto X = [&](double x) { return px0 + (x - ax.lo) / (ax.hi - ax.lo) * (px1 - px0); };
  auto Y = [&](double y) { return py0 - (y - ay.lo) / (ay.hi - ay.lo) * (py0 - py1); };

  // Grid, ticks and labels.
  o << "<g class=\"axes\">\n";
  for (double t : ay.ticks) {
    std::string y = Coord(Y(t));
    o << "<line x1=\"" << px0 << "\" y1=\"" << y << "\" x2=\"" << px1 << "\" y2=\"" << y
      << "\" stroke=\"#e6e6e6\"/>";
    o << "<line x1=\"" << px0 - 5 << "\" y1=\"" << y << "\" x2=\"" << px0 << "\" y2=\"" << y
      << "\" stroke=\"#333333\"/>";
    o << "<text class=\"tick\" x=\"" << px0 - 8 << "\" y=\"" << y
      << "\" text-anchor=\"end\" dominant-baseline=\"middle\">" << TickLabel(t, ay) << "</text>\n";
  }
  for (double t : ax.ticks) {
    std::string x = Coord(X(t));
    o << "<line x1=\"" << x << "\" y1=\"" << py1 << "\" x2=\"" << x << "\" y2=\"" << py0
      << "\" stroke=\"#f0f0f0\"/>";
    o << "<line x1=\"" << x << "\" y1=\"" << py0 << "\" x2=\"" << x << "\" y2=\"" << py0 + 5
      << "\" stroke=\"#333333\"/>";
    o << "<text class=\"tick\" x=\"" << x << "\" y=\"" << py0 + 18 << "\" text-anchor=\"middle\">"
      << TickLabel(t, ax) << "</text>\n";
  }
  o << "<line x1=\"" << px0 << "\" y1=\"" << py0 << "\" x2=\"" << px1 << "\" y2=\"" << py0
    << "\" stroke=\"#333333\"/>";
  o << "<line x1=\"" << px0 << "\" y1=\"" << py0 << "\" x2=\"" << px0 << "\" y2=\"" << py1
    << "\" stroke=\"#333333\"/>\n";
  o << "<text class=\"label\" x=\"" << (px0 + px1) / 2 << "\" y=\"" << kHeight - 10
    << "\" text-anchor=\"middle\">" << HtmlEscape(x_label) << "</text>\n";
  o << "<text class=\"label\" x=\"16\" y=\"" << (py0 + py1) / 2
    << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " << (py0 + py1) / 2 << ")\">"
    << HtmlEscape(y_label) << "</text>\n</g>\n";

  // Markers, under the data.
  int drawn = 0;
  for (const Marker& m : options.markers) {
    if (m.x < ax.lo || m.x > ax.hi) continue;
    std::string x = Coord(X(m.x));
    // Tags inside the top of the area, right of the line, in three rows so that markers
    // at nearby steps (a ps lost and back) stay readable.
    const double tag_y = py1 + 11 + 11 * (drawn++ % 3);
    o << "<g class=\"marker\" data-kind=\"" << HtmlEscape(m.kind) << "\"><title>"
      << HtmlEscape(m.label) << "</title><line x1=\"" << x << "\" y1=\"" << py1 << "\" x2=\"" << x
      << "\" y2=\"" << py0 << "\" stroke=\"" << m.color
      << "\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/><text class=\"tick\" x=\""
      << Coord(X(m.x) + 2) << "\" y=\"" << tag_y << "\" fill=\"" << m.color << "\">"
      << HtmlEscape(m.tag) << "</text></g>\n";
  }

  // Data.
  if (options.stacked) {
    for (size_t i = 0; i < series.size(); ++i) {
      const Series* s = series[i];
      o << "<polygon class=\"area\" data-series=\"" << HtmlEscape(s->name) << "\" fill=\""
        << s->color << "\" fill-opacity=\"0.85\" stroke=\"" << s->color << "\" points=\"";
      for (auto [x, y] : s->points) o << Coord(X(x)) << "," << Coord(Y(y)) << " ";
      // Back along the top of the area below (every top has the same x values).
      for (size_t k = s->points.size(); k-- > 0;) {
        const double below = i == 0 ? 0.0 : series[i - 1]->points[k].second;
        o << Coord(X(s->points[k].first)) << "," << Coord(Y(std::max(below, ay.lo))) << " ";
      }
      o << "\"/>\n";
    }
  }
  for (const Series* s : options.stacked ? std::vector<const Series*>{} : series) {
    o << "<polyline class=\"series\" data-series=\"" << HtmlEscape(s->name)
      << "\" fill=\"none\" stroke=\"" << s->color
      << "\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"";
    bool first = true;
    for (auto [x, y] : s->points) {
      o << (first ? "" : " ") << Coord(X(x)) << "," << Coord(Y(y));
      first = false;
    }
    o << "\"/>\n";
    if (s->points.size() <= 40) {
      for (auto [x, y] : s->points) {
        o << "<circle cx=\"" << Coord(X(x)) << "\" cy=\"" << Coord(Y(y)) << "\" r=\"3\" fill=\""
          << s->color << "\"/>";
      }
      o << "\n";
    }
  }

  // Legend: one row between the title and the plot area, right-aligned, so it never
  // covers data. Text width is estimated at 7 px per character (11 px font).
  if (series.size() > 1) {
    double width = 0;
    for (const Series* s : series) width += 28 + 7.0 * static_cast<double>(s->name.size()) + 14;
    double x = px1 - width + 14, y = kTop - 12;
    o << "<g class=\"legend\">";
    for (const Series* s : series) {
      o << "<line x1=\"" << Coord(x) << "\" y1=\"" << y << "\" x2=\"" << Coord(x + 22) << "\" y2=\""
        << y << "\" stroke=\"" << s->color << "\" stroke-width=\"3\"/><text class=\"tick\" x=\""
        << Coord(x + 28) << "\" y=\"" << y << "\" dominant-baseline=\"middle\">"
        << HtmlEscape(s->name) << "</text>";
      x += 28 + 7.0 * static_cast<double>(s->name.size()) + 14;
    }
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace ps::obs

// A line plot as inline SVG, and the escaping that markup text needs; for the HTML
// report (report.h). Pure functions; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ps::obs {

// `text` with & < > " ' replaced by entities: safe as HTML/SVG text and attribute values.
std::string HtmlEscape(std::string_view text);

struct Series {
  std::string name;                               // the legend text
  std::string color;                              // a CSS color, e.g. "#1f77b4"
  std::vector<std::pair<double, double>> points;  // (step, value), sorted by step
};

// One 540 x 320 px plot: <svg class="plot" id="ID"> with `title` at the top, the axis
// labels, and per series with points a <polyline class="series" data-series="NAME"
// points="x,y ..."> (one point per data point, pixels to 0.1 px; plus a circle per point
// for series of at most 40 points), in the order given. Series without points are left
// out; when none has points the plot says "no data". The x axis (steps) has whole-number
// ticks at 1, 2 or 5 x 10^k spacing around the data's range, the y axis the same without
// the whole-number rule; a flat range is padded (x +-1, y +-10 %, or +-1 around 0); tick
// labels are scaled to "k"/"M" for large values. The data area is x 68..520 px and y
// 56..270 px (top to bottom); a legend, for two or more series, sits above it, right-aligned.
// Text is escaped (HtmlEscape).
//
// PlotOptions: `x_range` fixes the x axis (e.g. 0 .. the last step, so that plots of one
// run line up and a single point sits where it belongs instead of on an axis of its own);
// points outside it widen it. `stacked`: the series are stacked areas, each drawn as
// <polygon class="area" data-series="NAME" points="..."> between the sum of the series
// before it and that sum plus its own value (the series must share x values; a missing
// value counts as 0), and the y axis starts at 0. `markers`: a dashed vertical line per
// marker, <g class="marker" data-kind="KIND"><title>LABEL</title><line .../><text>TAG</text></g>,
// at its x (markers outside the x axis are left out); they do not count as data.
struct Marker {
  double x = 0;
  std::string kind;   // e.g. "checkpoint", "ps_lost"
  std::string tag;    // a short text drawn at the top of the line, e.g. "C"
  std::string label;  // the tooltip, e.g. "checkpoint ckpt-500 (0.05 s)"
  std::string color;
};
struct PlotOptions {
  std::optional<std::pair<double, double>> x_range;
  bool stacked = false;
  std::vector<Marker> markers;
};

std::string SvgPlot(std::string_view id, std::string_view title, std::string_view x_label,
                    std::string_view y_label, const std::vector<Series>& series,
                    const PlotOptions& options = {});

}  // namespace ps::obs

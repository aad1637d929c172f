// A line plot as inline SVG, and the escaping that markup text needs; for the HTML
// report (report.h). Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ps::obs {

// `text` with & < > " ' replaced by entities: safe as HTML/SVG text and attribute values.
std::string HtmlEscape(std::string_view text);

struct Series {
  std::string name;                                // the legend text
  std::string color;                               // a CSS color, e.g. "#1f77b4"
  std::vector<std::pair<double, double>> points;   // (step, value), sorted by step
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
std::string SvgPlot(std::string_view id, std::string_view title, std::string_view x_label,
                    std::string_view y_label, const std::vector<Series>& series);

}  // namespace ps::obs

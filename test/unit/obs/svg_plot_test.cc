// The SVG line plot helper on its own: which series are drawn, where the points land,
// the legend, "no data", escaping.
#include <catch2/catch.hpp>

#include <string>

#include "libps/obs/svg_plot.h"

using ps::obs::HtmlEscape;
using ps::obs::Series;
using ps::obs::SvgPlot;

namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + what.size()))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("svg plot: escaping of text and attribute values") {
  CHECK(HtmlEscape("<a href='x'>&\"") == "&lt;a href=&#39;x&#39;&gt;&amp;&quot;");
  CHECK(HtmlEscape("plain 1.5 text") == "plain 1.5 text");
  CHECK(HtmlEscape("").empty());
}

TEST_CASE("svg plot: no series with points says no data") {
  for (const auto& series : {std::vector<Series>{}, std::vector<Series>{{"a", "#000000", {}}}}) {
    std::string svg = SvgPlot("p", "Loss <train>", "step", "loss", series);
    CHECK(svg.rfind("<svg class=\"plot\" id=\"p\"", 0) == 0);
    CHECK(Count(svg, ">no data<") == 1);
    CHECK(Count(svg, "<polyline") == 0);
    CHECK(Count(svg, "Loss &lt;train&gt;") == 2);  // aria-label and title
    CHECK(Count(svg, "<train>") == 0);
  }
}

TEST_CASE("svg plot: points map onto the data area; empty series are left out") {
  // x 0..10 (ticks every 2) -> 68..520 px; y 0..1 (ticks every 0.2) -> 270..56 px.
  std::string svg =
      SvgPlot("p", "T", "step", "v",
              {Series{"a", "#111111", {{0, 0}, {5, 0.5}, {10, 1}}}, Series{"b", "#222222", {}}});
  CHECK(Count(svg, "<polyline") == 1);
  CHECK(Count(svg, "data-series=\"a\"") == 1);
  CHECK(Count(svg, "points=\"68.0,270.0 294.0,163.0 520.0,56.0\"") == 1);
  CHECK(Count(svg, "<circle") == 3);
  CHECK(Count(svg, "class=\"legend\"") == 0);  // one series drawn: no legend
  for (const char* tick : {">0<", ">2<", ">10<", ">0.0<", ">0.2<", ">1.0<"}) {
    INFO(tick);
    CHECK(Count(svg, tick) == 1);
  }
  CHECK(svg.size() > 6);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");

  std::string two = SvgPlot(
      "p", "T", "step", "v",
      {Series{"a", "#111111", {{0, 0}, {10, 1}}}, Series{"b", "#222222", {{0, 1}, {10, 0}}}});
  CHECK(Count(two, "<polyline") == 2);
  CHECK(Count(two, "class=\"legend\"") == 1);
}

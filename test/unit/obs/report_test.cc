// The HTML report: plots, ticks and the summary table from synthetic metrics files,
// "no data", escaping, points drawn by step.
#include <catch2/catch.hpp>

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "libps/obs/report.h"
#include "test/support/temp_dir.h"

using namespace ps;

namespace {

using ps::testing::TempDir;
using ps::testing::WriteBytes;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + what.size()))
    ++n;
  return n;
}

// The <svg ...>...</svg> element with id="<id>".
std::string Svg(const std::string& html, const std::string& id) {
  size_t at = html.find("<svg class=\"plot\" id=\"" + id + "\"");
  REQUIRE(at != std::string::npos);
  size_t end = html.find("</svg>", at);
  REQUIRE(end != std::string::npos);
  return html.substr(at, end + 6 - at);
}

// The points of the polyline with data-series="<name>" in `svg`, as (x, y) pixels.
std::vector<std::pair<double, double>> Points(const std::string& svg, const std::string& name) {
  std::smatch m;
  std::regex re("data-series=\"" + name + "\"[^>]* points=\"([^\"]*)\"");
  REQUIRE(std::regex_search(svg, m, re));
  std::vector<std::pair<double, double>> out;
  std::string pts = m[1];
  std::regex pt("(-?[0-9.]+),(-?[0-9.]+)");
  for (auto it = std::sregex_iterator(pts.begin(), pts.end(), pt); it != std::sregex_iterator();
       ++it) {
    out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  }
  return out;
}

const char* kTrain =
    R"({"step":100,"total_steps":300,"loss":0.9,"accuracy":0.5,"examples_per_sec":1000,"elapsed_sec":1.5,"unix_time":1700000001.0,"workers":[{"task":"worker:0","steps":50}]}
{"step":200,"total_steps":300,"loss":0.6,"accuracy":0.7,"examples_per_sec":3000,"elapsed_sec":3.0,"unix_time":1700000002.0,"workers":[]}

{"step":300,"total_steps":300,"loss":0.3,"accuracy":0.8,"examples_per_sec":2000,"elapsed_sec":4.5,"unix_time":1700000003.0,"workers":[]}
{"final_eval":{"step":300,"examples":1000,"accuracy":0.87,"loss":0.35,"auc":0.93}}
)";
const char* kEval =
    R"({"step":100,"accuracy":0.62,"loss":0.8,"examples":1000}
{"step":200,"accuracy":0.91,"loss":0.5,"auc":0.95,"examples":1000}
)";

}  // namespace

TEST_CASE("report: plots, ticks and summary from synthetic metrics") {
  TempDir dir;
  WriteBytes(dir / "train_metrics.jsonl", kTrain);
  WriteBytes(dir / "eval/metrics.jsonl", kEval);
  auto html = ps::obs::RenderReport(dir.path());
  REQUIRE(html.ok());

  CHECK(html->rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(Count(*html, "<svg") == 4);
  CHECK(Count(*html, "no data") == 0);
  // Self-contained: no scripts, no links, no external references.
  CHECK(Count(*html, "<script") == 0);
  CHECK(Count(*html, "href=") == 0);
  CHECK(Count(*html, "src=") == 0);
  CHECK(Count(*html, "url(") == 0);

  // Loss: train (3 points) and eval (evaluator's 2 + the chief's final at step 300).
  std::string loss = Svg(*html, "loss");
  auto train = Points(loss, "train");
  REQUIRE(train.size() == 3);
  // x axis 0..300 (every plot starts at step 0; ticks every 100) maps onto [68, 520].
  CHECK(train[0].first == Approx(218.7).margin(0.051));
  CHECK(train[1].first == Approx(369.3).margin(0.051));
  CHECK(train[2].first == Approx(520.0));
  // y axis: data 0.3..0.9 -> 0.2..1.0 by 0.2; area [56, 270] from the top.
  // 0.9 -> 270 - 0.7/0.8*214 = 82.75; 0.6 -> 163.0; 0.3 -> 243.25 (printed to 0.1 px).
  CHECK(train[0].second == Approx(82.75).margin(0.051));
  CHECK(train[1].second == Approx(163.0).margin(0.051));
  CHECK(train[2].second == Approx(243.25).margin(0.051));
  for (const char* tick :
       {">0.2<", ">0.4<", ">0.6<", ">0.8<", ">1.0<", ">0<", ">100<", ">200<", ">300<"}) {
    INFO(tick);
    CHECK(Count(loss, tick) == 1);
  }
  CHECK(Points(loss, "eval").size() == 3);
  CHECK(Count(loss, "class=\"legend\"") == 1);

  CHECK(Points(Svg(*html, "train-accuracy"), "train").size() == 3);
  std::string eval = Svg(*html, "eval");
  CHECK(Points(eval, "accuracy").size() == 3);
  CHECK(Points(eval, "AUC").size() == 2);  // step 200 (evaluator) and 300 (final)
  auto tput = Points(Svg(*html, "throughput"), "examples/sec");
  REQUIRE(tput.size() == 3);
  CHECK(tput[1].second < tput[2].second);  // 3000 is drawn above 2000
  CHECK(tput[2].second < tput[0].second);

  // Summary table.
  CHECK(Count(*html, "<th>Steps</th><td>300 of 300</td>") == 1);
  CHECK(Count(*html, "<th>Final training loss</th><td>0.3000 (step 300)</td>") == 1);
  CHECK(Count(*html, "<th>Final training accuracy</th><td>0.8000 (step 300)</td>") == 1);
  CHECK(Count(*html,
              "<th>Throughput</th><td>2,000 examples/s mean, 3,000 peak (3 intervals)</td>") == 1);
  CHECK(Count(*html, "<th>Best eval accuracy</th><td>0.9100 (step 200)</td>") == 1);
  CHECK(
      Count(
          *html,
          "<th>Final eval accuracy</th><td>0.8700 (step 300, loss 0.3500, AUC 0.9300, 1,000 examples)</td>") ==
      1);
  CHECK(Count(*html, "<th>Training time</th><td>4.5 s</td>") == 1);
}

TEST_CASE("report: missing files and series say no data") {
  TempDir dir;
  auto html = ps::obs::RenderReport(dir.path());
  REQUIRE(html.ok());
  CHECK(Count(*html, "<svg") == 4);
  CHECK(Count(*html, ">no data<") == 4);
  CHECK(Count(*html, "<polyline") == 0);
  CHECK(Count(*html, "train_metrics.jsonl: not found") == 1);
  // No evaluator is a normal setup, not a warning.
  CHECK(Count(*html, "eval/metrics.jsonl") == 0);

  // Training metrics only, without accuracy: the eval and accuracy plots have no data.
  WriteBytes(dir / "train_metrics.jsonl",
             "{\"step\":1,\"loss\":2.0}\n{\"step\":2,\"loss\":1.0,\"accuracy\":null}\n");
  html = ps::obs::RenderReport(dir.path());
  REQUIRE(html.ok());
  CHECK(Count(*html, ">no data<") == 3);
  CHECK(Points(Svg(*html, "loss"), "train").size() == 2);

  CHECK(ps::obs::RenderReport(dir / "missing").status().code() == ps::Code::kNotFound);
}

TEST_CASE("report: a single point still shows; text is escaped") {
  ps::obs::MetricsHistory h;
  h.train.emplace_back().step = 5;
  h.train.back().loss = 0.5;
  h.eval.emplace_back().step = 5;
  h.eval.back().accuracy = 0.25;
  h.notes.push_back("train_metrics.jsonl: 3 lines skipped (line 1: not a JSON object)");

  std::string html = ps::obs::RenderReportHtml(h, "/tmp/<b>&\"x\"");
  CHECK(Count(html, "/tmp/&lt;b&gt;&amp;&quot;x&quot;") == 2);  // <title> and heading
  CHECK(Count(html, "<b>") == 0);
  std::string eval = Svg(html, "eval");
  CHECK(Points(eval, "accuracy").size() == 1);
  CHECK(Count(eval, "<circle") == 1);  // one point: a marker, since a 1-point line is invisible
  // A flat single value gets a padded axis around it: 0.25 +- 0.025 -> ticks 0.22..0.28 by 0.01.
  for (const char* tick : {">0.22<", ">0.25<", ">0.28<"}) CHECK(Count(eval, tick) == 1);
  CHECK(Count(eval, ">0.21<") + Count(eval, ">0.29<") == 0);
}

TEST_CASE("report: out-of-order and restarted runs are plotted by step") {
  TempDir dir;
  WriteBytes(
      dir / "train_metrics.jsonl",
      "{\"step\":300,\"loss\":0.3}\n{\"step\":100,\"loss\":0.9}\n{\"step\":200,\"loss\":0.6}\n");
  auto h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  REQUIRE(h->train.size() == 3);
  CHECK(h->train[0].step == 100);
  CHECK(h->train[2].step == 300);
  auto pts = Points(Svg(ps::obs::RenderReportHtml(*h, "x"), "loss"), "train");
  REQUIRE(pts.size() == 3);
  CHECK(pts[0].first < pts[1].first);
  CHECK(pts[1].first < pts[2].first);
}

TEST_CASE("report: our own checkpoint and event lines, step time, ps load, markers and hints") {
  TempDir dir;
  // What the chief writes: progress lines with load figures (ps:0 carries 3x ps:1's
  // requests, a hot-ps hint, from step 200 on), checkpoint lines, cluster events.
  std::string train;
  train += R"({"event":{"kind":"chief_start","step":0,"detail":"fresh"}})"
           "\n";
  for (int i = 1; i <= 3; ++i) {
    const int step = 100 * i;
    const double req0 = i == 1 ? 500 : 1500;
    train +=
        R"({"step":)" + std::to_string(step) +
        R"(,"total_steps":400,"loss":0.5,"accuracy":0.8,"examples_per_sec":1000,"unix_time":1700000000,)"
        R"("workers":[{"task":"worker:0","state":"running","steps":)" +
        std::to_string(step) +
        R"(,"step_ms":10,"data_frac":0.1,"pull_frac":0.2,"compute_frac":0.6,"push_frac":0.1}],)"
        R"("ps":[{"task":"ps:0","address":"a","state":"ok","requests_per_s":)" +
        std::to_string(req0) +
        R"(,"bytes_in_per_s":1e6,"bytes_out_per_s":1e6,"max_queue_depth":1},)"
        R"({"task":"ps:1","address":"b","state":"ok","requests_per_s":500,"bytes_in_per_s":1e6,)"
        R"("bytes_out_per_s":1e6,"max_queue_depth":0}]})"
        "\n";
    train += R"({"checkpoint":{"step":)" + std::to_string(step) +
             R"(,"final":false,"bytes":4096,"seconds":0.02}})"
             "\n";
  }
  train += R"({"event":{"kind":"ps_lost","task":"ps:1","step":250,"detail":"connection reset"}})"
           "\n";
  train += R"({"event":{"kind":"ps_back","task":"ps:1","step":250}})"
           "\n";
  train += R"({"event":{"kind":"chief_start","step":300,"detail":"restored ckpt-300"}})"
           "\n";
  WriteBytes(dir / "train_metrics.jsonl", train);
  auto h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  CHECK(h->notes.empty());
  CHECK(h->checkpoints.size() == 3);
  REQUIRE(h->events.size() == 4);
  CHECK(h->events[1].task == "ps:1");
  CHECK(h->train.size() == 3);
  CHECK(h->train[0].ps.size() == 2);

  const std::string html = ps::obs::RenderReportHtml(*h, "m");
  CHECK(Count(html, "<ul class=\"notes\">") == 0);
  // No final checkpoint: the page reloads itself.
  CHECK(Count(html, "http-equiv=\"refresh\"") == 1);
  // Step time: four stacked areas, data at the bottom.
  const std::string st = Svg(html, "step-time-worker:0");
  CHECK(Count(st, "class=\"area\"") == 4);
  CHECK(Count(st, "no data") == 0);
  // The top of the stack (push) is at 10 ms at every step.
  std::smatch m;
  REQUIRE(std::regex_search(st, m, std::regex("data-series=\"push\"[^>]* points=\"([^\"]*)\"")));
  {
    std::vector<double> ys;
    std::string pts = m[1];
    std::regex pt("(-?[0-9.]+),(-?[0-9.]+)");
    for (auto it = std::sregex_iterator(pts.begin(), pts.end(), pt); it != std::sregex_iterator();
         ++it) {
      ys.push_back(std::stod((*it)[2]));
    }
    REQUIRE(ys.size() == 6);  // 3 along the top, 3 back along the compute area's top
    CHECK(ys[0] == ys[1]);
    CHECK(ys[1] == ys[2]);
    CHECK(ys[3] > ys[0]);  // 9 ms is drawn below 10 ms
  }
  for (const char* id : {"ps-requests", "ps-bytes", "ps-queue"}) {
    INFO(id);
    const std::string svg = Svg(html, id);
    CHECK(Points(svg, "ps:0").size() == 3);
    CHECK(Points(svg, "ps:1").size() == 3);
  }
  // Markers on every plot: 3 checkpoints + chief start + ps lost + ps back + chief restart.
  CHECK(Count(Svg(html, "loss"), "class=\"marker\"") == 7);
  CHECK(Count(Svg(html, "loss"), ">S</text>") == 1);  // the first chief start
  CHECK(Count(Svg(html, "loss"), ">R</text>") == 1);  // a later one is a restart
  CHECK(Count(html, "chief restarted: restored ckpt-300") >= 1);
  CHECK(Count(Svg(html, "ps-requests"), "data-kind=\"ps_lost\"") == 1);
  CHECK(Count(html, "ps:1 lost: connection reset") >= 1);
  // The hot-ps hint, from the line where it first fired.
  CHECK(Count(html, "<tr><td>200</td><td>300</td><td>2</td><td>hint: ps:0 carries more load") == 1);

  // A final checkpoint: finished, no reload.
  WriteBytes(dir / "train_metrics.jsonl", train + R"({"checkpoint":{"step":400,"final":true}})"
                                                  "\n");
  h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  CHECK(ps::obs::RunFinished(*h));
  CHECK(Count(ps::obs::RenderReportHtml(*h, "m"), "http-equiv") == 0);
}

TEST_CASE(
    "report: one final evaluation is a point on the run's step axis, not an axis of its own") {
  TempDir dir;
  WriteBytes(dir / "train_metrics.jsonl",
             R"({"step":4500,"loss":0.5}
{"step":9000,"loss":0.4}
{"final_eval":{"step":9000,"accuracy":0.88,"loss":0.33}}
)");
  auto html = ps::obs::RenderReport(dir.path());
  REQUIRE(html.ok());
  const std::string eval = Svg(*html, "eval");
  auto acc = Points(eval, "accuracy");
  REQUIRE(acc.size() == 1);
  // 0 .. 10,000 by 2,000: step 9,000 sits at 68 + 0.9 x 452 px.
  CHECK(acc[0].first == Approx(474.8).margin(0.051));
  CHECK(Count(eval, ">8,999<") + Count(eval, ">8999<") + Count(eval, ">9.001k<") == 0);
  CHECK(Count(eval, ">0<") >= 1);
}

TEST_CASE("report: the summary counts the evaluator's and the inline evaluations apart") {
  TempDir dir;
  WriteBytes(dir / "train_metrics.jsonl", R"({"step":100,"loss":1.0})"
                                          "\n");
  WriteBytes(dir / "eval/metrics.jsonl", R"({"step":50,"accuracy":0.5,"source":"workers"})"
                                         "\n"
                                         R"({"step":100,"accuracy":0.6})"
                                         "\n"
                                         R"({"step":100,"accuracy":0.7,"source":"workers"})"
                                         "\n");
  auto h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  const std::string html = ps::obs::RenderReportHtml(*h, "m");
  CHECK(Count(html, "1 by the evaluator, 2 inline on the workers") == 1);
}

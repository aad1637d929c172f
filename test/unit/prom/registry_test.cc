// The Prometheus text exposition format 0.0.4 as libps/prom writes it: escaping, value
// formats, cumulative histogram buckets with +Inf, _sum and _count, one group per
// family, constant labels first; the registry's instruments and collectors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <thread>

#include "libps/prom/process.h"
#include "libps/prom/registry.h"

using namespace ps::prom;

TEST_CASE("label values and HELP texts are escaped as the format requires") {
  CHECK(EscapeLabelValue("plain") == "plain");
  CHECK(EscapeLabelValue("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  CHECK(EscapeHelp("a\\b\"c\nd") == "a\\\\b\"c\\nd");  // quotes stay in HELP
  Writer w;
  w.Gauge("g", "help with \\ and\nnewline", 1, {{"path", "C:\\tmp\\\"x\"\n"}});
  CHECK(w.Text() ==
        "# HELP g help with \\\\ and\\nnewline\n"
        "# TYPE g gauge\n"
        "g{path=\"C:\\\\tmp\\\\\\\"x\\\"\\n\"} 1\n");
}

TEST_CASE("sample values: integers plain, decimals short, infinities and NaN spelled out") {
  CHECK(FormatValue(0) == "0");
  CHECK(FormatValue(42) == "42");
  CHECK(FormatValue(-7) == "-7");
  CHECK(FormatValue(9007199254740992.0) == "9007199254740992");
  CHECK(FormatValue(0.5) == "0.5");
  CHECK(FormatValue(0.0001) == "0.0001");
  CHECK(FormatValue(2.5) == "2.5");
  CHECK(FormatValue(1e20) == "1e+20");
  CHECK(FormatValue(1.5e-9) == "1.5e-09");
  CHECK(FormatValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(FormatValue(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(FormatValue(std::nan("")) == "NaN");
  CHECK(std::stod(FormatValue(0.1 + 0.2)) == 0.1 + 0.2);  // round trip
}

TEST_CASE("metric and label names follow Prometheus' rules") {
  CHECK(ValidMetricName("pstrain_ps_pull_requests_total"));
  CHECK(ValidMetricName("a:b_c9"));
  CHECK_FALSE(ValidMetricName(""));
  CHECK_FALSE(ValidMetricName("9abc"));
  CHECK_FALSE(ValidMetricName("a-b"));
  CHECK(ValidLabelName("task_type"));
  CHECK_FALSE(ValidLabelName("a:b"));
  CHECK_FALSE(ValidLabelName("__name__"));
  CHECK_FALSE(ValidLabelName("0x"));
}

TEST_CASE("histogram buckets are cumulative, end with +Inf, and count equals the +Inf bucket") {
  Histogram h({0.25, 1, 4});
  for (double v : {0.125, 0.25, 0.5, 2.0, 2.0, 8.0}) h.Observe(v);  // 0.25 is in le="0.25"
  HistogramSnapshot s = h.Snapshot();
  CHECK(s.cumulative == std::vector<uint64_t>{2, 3, 5, 6});
  CHECK(s.count == 6);
  CHECK(s.sum == 12.875);
  Writer w(Labels{{"task_type", "ps"}});
  w.Histogram("lat_seconds", "Latency.", s, {{"op", "pull"}});
  CHECK(w.Text() ==
        "# HELP lat_seconds Latency.\n"
        "# TYPE lat_seconds histogram\n"
        "lat_seconds_bucket{task_type=\"ps\",op=\"pull\",le=\"0.25\"} 2\n"
        "lat_seconds_bucket{task_type=\"ps\",op=\"pull\",le=\"1\"} 3\n"
        "lat_seconds_bucket{task_type=\"ps\",op=\"pull\",le=\"4\"} 5\n"
        "lat_seconds_bucket{task_type=\"ps\",op=\"pull\",le=\"+Inf\"} 6\n"
        "lat_seconds_sum{task_type=\"ps\",op=\"pull\"} 12.875\n"
        "lat_seconds_count{task_type=\"ps\",op=\"pull\"} 6\n");
  const auto buckets = LatencyBuckets();
  CHECK(std::is_sorted(buckets.begin(), buckets.end()));
  CHECK(buckets.front() == 0.0001);
  CHECK(buckets.back() == 10);
}

TEST_CASE("concurrent observations are all counted") {
  Histogram h(LatencyBuckets());
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        h.Observe((t + 1) * 0.001);
        c.Add();
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(h.Snapshot().count == 40000);
  CHECK(h.Snapshot().cumulative.back() == 40000);
  CHECK(c.value() == 40000);
  CHECK(h.Snapshot().sum == Approx(10000 * (0.001 + 0.002 + 0.003 + 0.004)));
}

TEST_CASE("a family written from several places is one group with one HELP and TYPE") {
  Writer w;
  w.Counter("a_total", "A.", 1, {{"k", "x"}});
  w.Gauge("b", "B.", 2);
  w.Counter("a_total", "A again.", 3, {{"k", "y"}});
  w.Gauge("a_total", "wrong type: dropped", 9);
  w.Gauge("bad-name", "invalid: dropped", 9);
  CHECK(w.Text() ==
        "# HELP a_total A.\n"
        "# TYPE a_total counter\n"
        "a_total{k=\"x\"} 1\n"
        "a_total{k=\"y\"} 3\n"
        "# HELP b B.\n"
        "# TYPE b gauge\n"
        "b 2\n");
}

TEST_CASE("registry: one instrument per name and labels, collectors after instruments, removable") {
  Registry r(Labels{{"task_type", "worker"}, {"task_index", "1"}});
  Counter& c1 = r.Counter("steps_total", "Steps.");
  Counter& c2 = r.Counter("steps_total", "Steps.");
  CHECK(&c1 == &c2);
  Counter& other = r.Counter("steps_total", "Steps.", {{"phase", "x"}});
  CHECK(&other != &c1);
  c1.Add(3);
  other.Add(0.5);
  r.Gauge("up", "Up.").Set(1);
  int calls = 0;
  {
    auto collection = r.AddCollector([&](Writer& w) {
      ++calls;
      w.Counter("steps_total", "Steps.", 7, {{"phase", "collected"}});
    });
    CHECK(r.Render() ==
          "# HELP steps_total Steps.\n"
          "# TYPE steps_total counter\n"
          "steps_total{task_type=\"worker\",task_index=\"1\"} 3\n"
          "steps_total{task_type=\"worker\",task_index=\"1\",phase=\"x\"} 0.5\n"
          "steps_total{task_type=\"worker\",task_index=\"1\",phase=\"collected\"} 7\n"
          "# HELP up Up.\n"
          "# TYPE up gauge\n"
          "up{task_type=\"worker\",task_index=\"1\"} 1\n");
    CHECK(calls == 1);
    Registry::Collection moved = std::move(collection);
    r.Render();
    CHECK(calls == 2);
  }
  CHECK(r.Render().find("collected") == std::string::npos);
  CHECK(calls == 2);
}

TEST_CASE("process metrics: CPU, memory, descriptors, start time") {
  Writer w;
  WriteProcessMetrics(w);
  const std::string text = w.Text();
  for (const char* name :
       {"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
        "process_start_time_seconds ", "process_virtual_memory_bytes "}) {
    INFO(name);
    CHECK(text.find(std::string("\n") + name) != std::string::npos);
  }
  CHECK(text.find("# TYPE process_cpu_seconds_total counter") != std::string::npos);
}

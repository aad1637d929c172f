// Prometheus against the real thing: a local training cluster (chief, 2 workers, 2 ps,
// and the evaluator), every daemon with --metrics-port, scraped every second by a real
// Prometheus server (Debian's `prometheus` package) started here with a generated config,
// a temporary storage directory and the shipped alerting rules. The test queries
// Prometheus' HTTP API for pstrain series with plausible values, lints each exposition
// with `promtool check metrics`, and checks deploy/prometheus/ with promtool.
//
// Needs `prometheus` and `promtool` (Debian package prometheus; scripts/setup.sh installs
// it with PSTRAIN_WITH_TEST_TOOLS=1); PSTRAIN_PROMETHEUS / PSTRAIN_PROMTOOL override the
// paths. Prometheus 2.42 takes ~6 s to its first scrape: every wait is a poll of the API
// with a deadline.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "libps/http/client.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kManySteps = 1000000;  // stopped by SIGTERM long before the end
constexpr Millis kPollEvery = 250ms;     // between two queries of a poll

std::string FindTool(const char* env, const char* name) {
  if (const char* p = std::getenv(env)) return p;
  std::stringstream dirs(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  FAIL(std::string(name) +
       " is needed for this test and was not found on PATH (install the Debian package "
       "`prometheus`, e.g. PSTRAIN_WITH_TEST_TOOLS=1 scripts/setup.sh, or set " +
       env + ")");
  return "";
}

// The port of the daemon's metrics endpoint, from its log line "metrics at http://HOST:PORT/metrics".
uint16_t MetricsPort(Task& task) {
  REQUIRE(task.WaitForLine("metrics at http://", 60s));
  const std::string line = *task.FindLine("metrics at http://");
  const size_t end = line.rfind("/metrics");
  const size_t colon = line.rfind(':', end);
  REQUIRE((end != std::string::npos && colon != std::string::npos));
  return static_cast<uint16_t>(std::stoi(line.substr(colon + 1, end - colon - 1)));
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// GET of Prometheus' API at `target`: its "data", or null when the call failed.
Json Api(uint16_t port, const std::string& target) {
  auto r = http::Get("127.0.0.1", port, target, 5s);
  if (!r.ok() || r->status != 200) return nullptr;
  auto j = ParseJson(r->body, "Prometheus API reply");
  if (!j.ok() || !j->contains("status") || (*j)["status"] != "success") return nullptr;
  return (*j)["data"];
}

// An instant query's result vector (an empty array when it failed).
Json Query(uint16_t port, const std::string& promql) {
  Json data = Api(port, "/api/v1/query?query=" + UrlEncode(promql));
  if (data.is_null() || !data.contains("result") || !data["result"].is_array())
    return Json::array();
  return data["result"];
}

double Value(const Json& sample) { return std::stod(sample["value"][1].get<std::string>()); }

// Polls `promql` until `ok` accepts its result, for at most `timeout`; returns the last result.
Json PollQuery(uint16_t port, const std::string& promql, const std::function<bool(const Json&)>& ok,
               Millis timeout = 60s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  Json result = Query(port, promql);
  while (!ok(result) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(kPollEvery);  // a poll interval, not a synchronisation
    result = Query(port, promql);
  }
  INFO(promql << " -> " << result.dump());
  CHECK(ok(result));
  return result;
}

// `n` series, each accepted by `pred`.
std::function<bool(const Json&)> Each(size_t n, std::function<bool(double)> pred) {
  return [n, pred](const Json& r) {
    if (r.size() != n) return false;
    for (const auto& s : r) {
      if (!pred(Value(s))) return false;
    }
    return true;
  };
}
bool Positive(double v) { return v > 0; }

// The value of the first sample of `name` whose labels contain `labels` (e.g.
// "peer=\"ps:1\"") in an exposition, if any.
std::optional<double> SampleValue(const std::string& exposition, const std::string& name,
                                  const std::string& labels) {
  std::stringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0 || line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}

// Scrapes 127.0.0.1:port until the sample is there and `ok` accepts it, for at most `timeout`.
bool PollSample(uint16_t port, const std::string& name, const std::string& labels,
                const std::function<bool(double)>& ok, Millis timeout = 60s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto r = http::Get("127.0.0.1", port, "/metrics", 5s);
    std::optional<double> v;
    if (r.ok() && r->status == 200) v = SampleValue(r->body, name, labels);
    if (v && ok(*v)) return true;
    if (std::chrono::steady_clock::now() >= end) {
      INFO(name << "{" << labels << "}: " << (v ? std::to_string(*v) : "absent") << "\n"
                << (r.ok() ? r->body : r.status().ToString()));
      CHECK(false);
      return false;
    }
    std::this_thread::sleep_for(kPollEvery);  // a poll interval, not a synchronisation
  }
}

// Runs a tool to completion; its exit status (its output goes to the transcript).
int RunTool(const std::string& name, std::vector<std::string> argv) {
  Task t(name, std::move(argv));
  auto rc = t.WaitExit(60s);
  REQUIRE(rc.has_value());
  return *rc;
}

}  // namespace

TEST_CASE("a real Prometheus scrapes every pstrain daemon and finds plausible series") {
  const std::string prometheus = FindTool("PSTRAIN_PROMETHEUS", "prometheus");
  const std::string promtool = FindTool("PSTRAIN_PROMTOOL", "promtool");
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kManySteps, 20, tmp / "model");
  Tasks tasks;
  const std::vector<cluster::TaskId> training{kPs0, kPs1, kWorker0, kWorker1, kChief};
  for (const auto& id : training) {
    std::vector<std::string> args{"--metrics-port", "0"};
    if (id == kChief)
      args.insert(args.end(), {"--job", job.string(), "--model-dir", (tmp / "model").string()});
    tasks.Add(StartDaemon(spec, id, args));
  }
  // The evaluator has no RPC address: its endpoint goes to 127.0.0.1 as asked.
  Task& evaluator = tasks.Add(std::make_unique<Task>(
      "evaluator",
      std::vector<std::string>{DaemonPath(cluster::TaskType::kEvaluator), "--model-dir",
                               (tmp / "model").string(), "--metrics-port", "0", "--metrics-host",
                               "127.0.0.1", "--poll-seconds", "0.5"},
      std::vector<std::pair<std::string, std::string>>{}, std::vector<std::string>{"TF_CONFIG"}));

  std::vector<std::pair<std::string, uint16_t>> targets;  // role, metrics port
  for (const auto& id : training) {
    targets.emplace_back(cluster::TaskTypeName(id.type), MetricsPort(tasks[id]));
  }
  targets.emplace_back("evaluator", MetricsPort(evaluator));

  // Training is under way: every exposition passes promtool's lint (names, units, types).
  REQUIRE(tasks[kChief].WaitForLine("] step ", 120s));
  for (size_t i = 0; i < targets.size(); ++i) {
    auto r = http::Get("127.0.0.1", targets[i].second, "/metrics", 5s);
    REQUIRE(r.ok());
    REQUIRE(r->status == 200);
    CHECK(r->body.find("task_type=\"" + targets[i].first + "\"") != std::string::npos);
    const fs::path file = tmp / ("metrics-" + std::to_string(i) + ".txt");
    WriteFile(file, r->body);
    INFO(targets[i].first << " exposition:\n" << r->body);
    CHECK(RunTool("promtool check metrics",
                  {"/bin/sh", "-c", promtool + " check metrics < '" + file.string() + "'"}) == 0);
  }

  // Prometheus: scrape every second, the shipped rules.
  const uint16_t web_port = FreePorts(1)[0];
  std::string config =
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
      "rule_files:\n  - '" +
      SourceDir() +
      "/deploy/prometheus/pstrain-rules.yml'\n"
      "scrape_configs:\n  - job_name: pstrain\n    static_configs:\n";
  for (const auto& [role, port] : targets) {
    config += "      - targets: ['127.0.0.1:" + std::to_string(port) +
              "']\n        labels: {role: " + role + "}\n";
  }
  WriteFile(tmp / "prometheus.yml", config);
  const auto prometheus_start = std::chrono::steady_clock::now();
  Task& server = tasks.Add(std::make_unique<Task>(
      "prometheus",
      std::vector<std::string>{prometheus, "--config.file=" + (tmp / "prometheus.yml").string(),
                               "--storage.tsdb.path=" + (tmp / "tsdb").string(),
                               "--web.listen-address=127.0.0.1:" + std::to_string(web_port)}));

  // Every target scraped and up.
  PollQuery(web_port, "up{job=\"pstrain\"}", Each(targets.size(), [](double v) { return v == 1; }));
  const double first_scrape_sec =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - prometheus_start).count();
  std::printf("prometheus: every target up %.1f s after start\n", first_scrape_sec);

  // The global step rises from one scrape to the next.
  Json step = PollQuery(web_port, "pstrain_chief_global_step", Each(1, Positive));
  const double first_step = step.size() == 1 ? Value(step[0]) : 0;
  PollQuery(web_port, "pstrain_chief_global_step",
            Each(1, [&](double v) { return v > first_step; }));
  PollQuery(web_port, "pstrain_chief_total_steps",
            Each(1, [](double v) { return v == kManySteps; }));
  PollQuery(web_port, "pstrain_chief_examples_per_second", Each(1, Positive));
  PollQuery(web_port, "pstrain_chief_task_up", Each(4, [](double v) { return v == 1; }));
  PollQuery(web_port, "pstrain_chief_checkpoint_age_seconds",
            Each(1, [](double v) { return v >= 0 && v < 600; }));
  PollQuery(web_port, "pstrain_chief_lost_tasks_total", Each(2, [](double v) { return v == 0; }));

  // The ps tasks serve pulls and pushes; their figures rise.
  PollQuery(web_port, "pstrain_ps_pull_requests_total", Each(2, Positive));
  PollQuery(web_port, "pstrain_ps_push_requests_total", Each(2, Positive));
  PollQuery(web_port, "pstrain_ps_pulled_bytes_total", Each(2, Positive));
  PollQuery(web_port, "pstrain_ps_held_bytes", Each(2, Positive));
  PollQuery(web_port, "pstrain_rpc_requests_total{task_type=\"ps\"}", Each(2, Positive));
  PollQuery(web_port, "sum by (task_index) (rate(pstrain_ps_pull_requests_total[5s]))",
            Each(2, Positive));
  PollQuery(web_port, "pstrain_ps_request_duration_seconds_count{op=\"push\"}", Each(2, Positive));

  // The workers: steps, examples per second, pull round trips of a plausible length.
  PollQuery(web_port, "pstrain_worker_steps_total", Each(2, Positive));
  PollQuery(web_port, "sum(rate(pstrain_worker_examples_total[5s]))", Each(1, Positive));
  PollQuery(web_port, "pstrain_worker_step_phase_seconds_total{phase=\"compute\"}",
            Each(2, Positive));
  PollQuery(
      web_port,
      "histogram_quantile(0.9, sum by (le) (rate(pstrain_worker_pull_duration_seconds_bucket[5s])))",
      Each(1, [](double v) { return v > 0 && v <= 10; }));

  // Every daemon's process figures; the evaluator is there too.
  PollQuery(web_port, "process_resident_memory_bytes{job=\"pstrain\"}",
            Each(targets.size(), Positive));
  PollQuery(web_port, "process_start_time_seconds{task_type=\"evaluator\"}", Each(1, Positive));

  // The shipped rules are loaded and evaluate cleanly against these series.
  const auto rules_ok = [&] {
    Json data = Api(web_port, "/api/v1/rules");
    if (data.is_null() || data["groups"].size() != 1) return false;
    const Json& rules = data["groups"][0]["rules"];
    if (rules.size() != 5) return false;
    for (const auto& r : rules) {
      if (r["health"] != "ok") return false;
    }
    return true;
  };
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (!rules_ok() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(kPollEvery);
  CHECK(rules_ok());
  CHECK(Query(web_port, "ALERTS{alertstate=\"firing\"}").empty());

  // A graceful stop: every task exits 0 (the evaluator after the final checkpoint).
  tasks[kChief].Signal(SIGTERM);
  tasks.ExpectExit(training, 0, 60s);
  CHECK(evaluator.WaitExit(120s) == std::optional<int>(0));
  server.Signal(SIGTERM);
  CHECK(server.WaitExit(30s).has_value());
}

TEST_CASE("the chief's metrics: checkpoints committed, a ps lost and recovered") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kManySteps, 20, tmp / "model",
                       Json{{"checkpoint", {{"every_steps", 200}}}});
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(
      spec, kChief,
      {"--job", job.string(), "--model-dir", (tmp / "model").string(), "--metrics-port", "0"}));
  const uint16_t port = MetricsPort(chief);
  const std::string ps = "peer_type=\"ps\"";
  const std::string ps1 = "peer=\"ps:1\"";
  PollSample(port, "pstrain_chief_lost_tasks_total", ps, [](double v) { return v == 0; });
  REQUIRE(chief.WaitForLine("checkpoint ckpt-200 committed", 120s));
  PollSample(port, "pstrain_chief_checkpoints_total", "", [](double v) { return v >= 1; });
  PollSample(port, "pstrain_chief_last_checkpoint_timestamp_seconds", "",
             [](double v) { return v > 1.7e9; });
  PollSample(port, "pstrain_chief_checkpoint_age_seconds", "",
             [](double v) { return v >= 0 && v < 120; });
  PollSample(port, "pstrain_chief_task_up", ps1, [](double v) { return v == 1; });

  tasks[kPs1].Signal(SIGKILL);
  CHECK(tasks[kPs1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  REQUIRE(chief.WaitForLine("waiting up to", 30s));
  PollSample(port, "pstrain_chief_task_up", ps1, [](double v) { return v == 0; });
  PollSample(port, "pstrain_chief_lost_tasks_total", ps, [](double v) { return v == 1; });
  PollSample(port, "pstrain_chief_recovered_tasks_total", ps, [](double v) { return v == 0; });
  tasks.Replace(StartDaemon(spec, kPs1));  // the same TF_CONFIG
  REQUIRE(chief.WaitForLine("ps:1 is back", 60s));
  PollSample(port, "pstrain_chief_recovered_tasks_total", ps, [](double v) { return v == 1; });
  PollSample(port, "pstrain_chief_task_up", ps1, [](double v) { return v == 1; });

  chief.Signal(SIGTERM);
  tasks.ExpectAllExit(0, 60s);
}

TEST_CASE("deploy/prometheus: the rules, their unit tests and the example config pass promtool") {
  const std::string promtool = FindTool("PSTRAIN_PROMTOOL", "promtool");
  const std::string dir = SourceDir() + "/deploy/prometheus/";
  CHECK(RunTool("promtool check rules", {promtool, "check", "rules", dir + "pstrain-rules.yml"}) ==
        0);
  CHECK(RunTool("promtool test rules",
                {promtool, "test", "rules", dir + "pstrain-rules.test.yml"}) == 0);
  CHECK(RunTool("promtool check config", {promtool, "check", "config", dir + "prometheus.yml"}) ==
        0);
}

}  // namespace ps::integ

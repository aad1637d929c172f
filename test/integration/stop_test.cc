// Graceful stops of a real cluster (chief, 2 workers, 2 ps on 127.0.0.1): by
// `pstrain stop` after a shuffled start, and by SIGTERM to the chief. Every task exits 0.
#include <signal.h>

#include <algorithm>
#include <map>
#include <random>

#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

// The chief's progress lines: "... I [chief:0] step 40/100000  loss ...".
constexpr const char* kProgress = "] step ";
// Far more steps than a test lets run: every stop here comes before the end.
constexpr int64_t kManySteps = 1000000;

std::vector<cluster::TaskId> AllFive() { return {kPs0, kPs1, kWorker0, kWorker1, kChief}; }

TEST_CASE("shuffled start, status while training, pstrain stop: every task exits 0") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kManySteps, 20, tmp / "model");
  std::string chief_addr = spec.address(kChief).ToString();

  auto order = AllFive();
  std::mt19937 rng(20240611);
  std::shuffle(order.begin(), order.end(), rng);
  std::string order_text;
  for (const auto& id : order) order_text += id.ToString() + " ";
  Note("start order: " + order_text);

  Tasks tasks;
  for (const auto& id : order) {
    std::vector<std::string> args;
    if (id == kChief) args = {"--job", job.string(), "--model-dir", (tmp / "model").string()};
    tasks.Add(StartDaemon(spec, id, args));
  }
  Task& chief = tasks[kChief];
  REQUIRE(chief.WaitForLine(kProgress, 120s));

  {
    auto status = StartLauncher({"status", "--chief", chief_addr, "--json"}, "pstrain status");
    auto rc = status->WaitExit(30s);
    REQUIRE(rc == std::optional<int>(0));
    std::string text;
    for (const auto& l : status->Lines()) text += l + "\n";
    auto json = ParseJson(text, "pstrain status --json");
    INFO(text);
    REQUIRE(json.ok());
    CHECK((*json)["state"] == "training");
    CHECK((*json)["total_steps"] == kManySteps);
    REQUIRE((*json)["tasks"].is_array());
    std::vector<std::string> names;
    for (const auto& t : (*json)["tasks"]) names.push_back(t["task"].get<std::string>());
    std::sort(names.begin(), names.end());
    // The chief lists the tasks it drives: both ps and both workers.
    CHECK(names == std::vector<std::string>{"ps:0", "ps:1", "worker:0", "worker:1"});

    // Load: every ps answered with counters, holding the shards the plan gave it (the
    // plan is in ckpt-0's MANIFEST, written before the first step).
    auto manifest = ParseJson(ReadFile(tmp / "model" / "ckpt-0" / "MANIFEST"), "MANIFEST");
    REQUIRE(manifest.ok());
    std::map<std::string, int64_t> planned;
    for (const auto& v : (*manifest)["extra"]["variables"]) {
      for (const auto& sh : v["shards"]) ++planned["ps:" + std::to_string(sh["ps"].get<int>())];
    }
    REQUIRE((*json)["ps"].is_array());
    REQUIRE((*json)["ps"].size() == 2);
    for (const auto& p : (*json)["ps"]) {
      INFO(p.dump());
      CHECK(p["state"] == "ok");
      CHECK(p["address"] ==
            spec.address({cluster::TaskType::kPs, p["task"] == "ps:0" ? 0 : 1}).ToString());
      CHECK(p["requests"].get<uint64_t>() > 0);
      CHECK(p["bytes_in"].get<uint64_t>() > 0);
      CHECK(p["bytes_out"].get<uint64_t>() > 0);
      CHECK(p["requests_per_s"].get<double>() > 0);
      CHECK(p["bytes_held"].get<uint64_t>() > 0);
      CHECK(p["shards"].get<int64_t>() == planned[p["task"].get<std::string>()]);
      CHECK(p["max_queue_depth"].get<uint64_t>() >= p["queue_depth"].get<uint64_t>());
    }
    REQUIRE((*json)["workers"].is_array());
    REQUIRE((*json)["workers"].size() == 2);
    for (const auto& w : (*json)["workers"]) {
      INFO(w.dump());
      CHECK(w["steps"].get<int64_t>() > 0);
      for (const char* k : {"data_s", "pull_s", "compute_s", "push_s"})
        CHECK(w[k].get<double>() >= 0);
    }

    auto human = StartLauncher({"status", "--chief", chief_addr}, "pstrain status (text)");
    REQUIRE(human->WaitExit(30s) == std::optional<int>(0));
    bool ps_table = false, worker_table = false;
    for (const auto& l : human->Lines()) {
      ps_table = ps_table || l.rfind("ps    address", 0) == 0;
      worker_table = worker_table || l.rfind("worker    state    steps", 0) == 0;
    }
    CHECK(ps_table);
    CHECK(worker_table);
  }

  auto stop = StartLauncher({"stop", "--chief", chief_addr}, "pstrain stop");
  CHECK(stop->WaitExit(30s) == std::optional<int>(0));
  tasks.ExpectAllExit(0, 15s);

  CHECK(chief.HasLine("stop requested"));
  CHECK(chief.HasLine("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged"));
  CHECK(tasks[kPs0].HasLine("shut down"));
  CHECK(tasks[kPs1].HasLine("shut down"));
  CHECK(tasks[kWorker0].HasLine("shut down"));
  CHECK(tasks[kWorker1].HasLine("shut down"));

  auto metrics = ReadJsonLines(tmp / "model" / "train_metrics.jsonl");
  int progress_lines = 0;
  for (const auto& m : metrics) {
    if (!m.contains("step")) continue;
    ++progress_lines;
    INFO(m.dump());
    CHECK(m["step"].get<int64_t>() > 0);
    CHECK(m["step"].get<int64_t>() < kManySteps);
    // Each progress line carries the same load figures as status.
    REQUIRE(m["ps"].is_array());
    CHECK(m["ps"].size() == 2);
    for (const auto& p : m["ps"]) {
      if (p["state"] != "ok") continue;  // a ps may not answer in time on a busy machine
      CHECK(p["requests"].get<uint64_t>() > 0);
      CHECK(p["bytes_in"].get<uint64_t>() > 0);
      CHECK(p.contains("requests_per_s"));
    }
    REQUIRE(m["workers"].is_array());
    CHECK(m["workers"].size() == 2);
  }
  CHECK(progress_lines >= 1);
}

TEST_CASE("SIGTERM to the chief is a graceful stop: every task exits 0") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kManySteps, 20, tmp / "model");
  Tasks tasks;
  for (const auto& id : AllFive()) {
    std::vector<std::string> args;
    if (id == kChief) args = {"--job", job.string(), "--model-dir", (tmp / "model").string()};
    tasks.Add(StartDaemon(spec, id, args));
  }
  Task& chief = tasks[kChief];
  REQUIRE(chief.WaitForLine(kProgress, 120s));
  chief.Signal(SIGTERM);
  tasks.ExpectAllExit(0, 15s);
  CHECK(chief.HasLine("stop requested (SIGTERM)"));
  CHECK(chief.HasLine("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged"));
  CHECK(tasks[kPs0].HasLine("shut down"));
  CHECK(tasks[kPs1].HasLine("shut down"));
}

TEST_CASE(
    "a ps that does not acknowledge Shutdown is named; the chief exits 1, the others exit 0") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 100, 20, tmp / "model");
  Tasks tasks;
  tasks.Add(StartDaemon(spec, kPs0));
  // ps:1 holds the chief's Shutdown unanswered (testing hook).
  tasks.Add(StartDaemon(spec, kPs1, {}, {}, {{"PSTRAIN_FAULT_IGNORE_SHUTDOWN", "1"}}));
  for (auto id : {kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(
      spec, kChief,
      {"--job", job.string(), "--model-dir", (tmp / "model").string(), "--shutdown-timeout", "1"}));
  tasks.ExpectExit({kChief}, 1, 120s);
  auto why = chief.FindLine("pstrain-chief: ");
  REQUIRE(why.has_value());
  CHECK_THAT(*why, Catch::Contains("did not acknowledge Shutdown: ps:1"));
  CHECK_THAT(*why, Catch::Contains("did not complete within 1000 ms"));
  tasks.ExpectExit({kPs0, kWorker0, kWorker1}, 0, 15s);
  // The stuck ps is still there; it stops on SIGTERM (as an operator would stop it).
  CHECK(tasks[kPs1].HasLine("not answering Shutdown"));
  tasks[kPs1].Signal(SIGTERM);
  CHECK(tasks[kPs1].WaitExit(15s) == std::optional<int>(128 + SIGTERM));
}

}  // namespace
}  // namespace ps::integ

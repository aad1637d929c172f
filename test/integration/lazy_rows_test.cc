// Admission and eviction of lazy rows: configs/job-ctr-emb.json with lazy tables, "admit" and
// "evict" on two of them, trained by a real cluster (2 ps, 2 workers). The ps figures of
// train_metrics.jsonl count admitted rows, dropped gradients and evicted rows, and the
// final checkpoint holds no more of the max_rows table than max_rows.
#include <catch2/catch.hpp>

#include <regex>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

TEST_CASE(
    "lazy tables with admit and evict: counters in the metrics, max_rows bounds the checkpoint") {
  TempDir tmp;
  const auto data = tmp / "ctr-data";
  auto gen = StartLauncher(
      {"gen-ctr", "--out", data.string(), "--train-examples", "100000", "--eval-examples", "2000"});
  REQUIRE(gen->WaitExit(120s) == 0);

  constexpr int64_t kMaxRows = 1000;
  constexpr int64_t kSteps = 600;
  Json model = ReadConfig("job-ctr-emb.json")["model"];
  for (auto& field : model["fields"]) {
    field["lazy"] = true;
    if (field["table"] == "user") {
      field["admit"] = {{"min_count", 2}};
      field["evict"] = {{"max_rows", kMaxRows}};
    }
    if (field["table"] == "ad") field["evict"] = {{"ttl_steps", 40}};
  }
  auto spec = LocalCluster();
  auto job = DeriveJob("job-ctr-emb.json", tmp / "job.json", kSteps, 100, tmp / "run",
                       Json{{"model", model}, {"base_dir", data.string()}});
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 300s);

  // The newest progress line with both ps answering.
  const Json* last = nullptr;
  const auto metrics = ReadJsonLines(tmp / "run" / "train_metrics.jsonl");
  for (const auto& m : metrics) {
    if (!m.contains("ps") || m["ps"].size() != 2) continue;
    bool rows = true;
    for (const auto& p : m["ps"]) rows = rows && p.contains("rows");
    if (rows) last = &m;
  }
  REQUIRE(last != nullptr);
  uint64_t admitted = 0, not_admitted = 0, ttl = 0, max_rows = 0;
  int64_t live = 0;
  for (const auto& p : (*last)["ps"]) {
    const Json& r = p["rows"];
    CHECK(r["lazy_shards"].get<int64_t>() > 0);
    admitted += r["admitted"].get<uint64_t>();
    not_admitted += r["not_admitted"].get<uint64_t>();
    ttl += r["evicted_ttl"].get<uint64_t>();
    max_rows += r["evicted_max_rows"].get<uint64_t>();
    live += r["live_rows"].get<int64_t>();
  }
  const std::string figures = "at step " + std::to_string((*last)["step"].get<int64_t>()) +
                              ": admitted " + std::to_string(admitted) +
                              ", gradient rows dropped " + std::to_string(not_admitted) +
                              ", evicted by ttl " + std::to_string(ttl) + ", by max_rows " +
                              std::to_string(max_rows) + ", live " + std::to_string(live);
  Note(figures);
  WARN(figures);
  CHECK(admitted > static_cast<uint64_t>(kMaxRows));  // more users pushed twice than max_rows
  CHECK(not_admitted > admitted);                     // every admitted row dropped one push first
  CHECK(max_rows > 0);
  CHECK(ttl > 0);
  CHECK(live > 0);

  // The final checkpoint (swept exactly before it was written) holds at most max_rows
  // users; the tables without a policy keep every row they created.
  auto inspect = StartLauncher({"inspect", (tmp / "run").string(), "--verify"}, "pstrain inspect");
  REQUIRE(inspect->WaitExit(60s) == 0);
  auto line = inspect->FindLine(" user/embeddings ");
  REQUIRE(line.has_value());
  std::smatch m;
  REQUIRE(std::regex_search(*line, m, std::regex(R"(\(lazy: (\d+) created\))")));
  const int64_t users = std::stoll(m[1].str());
  Note("checkpoint: " + std::to_string(users) + " user rows");
  WARN("checkpoint: " << users << " user rows");
  CHECK(users <= kMaxRows);
  CHECK(users > kMaxRows / 2);
}

}  // namespace
}  // namespace ps::integ

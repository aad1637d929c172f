// Delta checkpoints in a real cluster: configs/job-ctr-emb.json with
// lazy tables (one with ttl eviction, so deltas carry deleted rows) and
// checkpoint.delta_every_seconds small. The chief is killed, or a ps, between deltas; the
// restore applies ckpt-0 and every committed delta and resumes at the newest delta's
// exact step, and the job finishes with the exact step count.
#include <signal.h>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr int64_t kSteps = 3000;

struct Setup {
  TempDir tmp;
  cluster::ClusterSpec spec = LocalCluster();
  std::filesystem::path model;
  std::filesystem::path job;
  Setup() {
    const auto data = tmp / "ctr-data";
    auto gen = StartLauncher({"gen-ctr", "--out", data.string(), "--train-examples", "50000",
                              "--eval-examples", "1000"});
    REQUIRE(gen->WaitExit(120s) == 0);
    Json fields = ReadConfig("job-ctr-emb.json")["model"];
    for (auto& field : fields["fields"]) {
      field["lazy"] = true;
      if (field["table"] == "ad") field["evict"] = {{"ttl_steps", 20}};
    }
    model = tmp / "run";
    // Only ckpt-0 and the final checkpoint are full: every other one is a delta.
    job = DeriveJob("job-ctr-emb.json", tmp / "job.json", kSteps, 100, model,
                    Json{{"model", fields},
                         {"base_dir", data.string()},
                         {"checkpoint",
                          {{"every_steps", 0},
                           {"every_seconds", 0},
                           {"delta_every_seconds", 0.2},
                           {"max_deltas", 100000},
                           {"delta_max_fraction", 1000}}}});
  }
};

// Waits for `n` more delta commits on `chief`.
void WaitForDeltas(Task& chief, int n) {
  for (int i = 0; i < n; ++i) {
    const size_t mark = chief.LineCount();
    REQUIRE(chief.WaitForLineFrom("delta checkpoint ckpt-0/delta-", mark, 120s));
  }
}

// The state a restore of `model` gets now: ckpt-0 and at least one delta.
int64_t NewestState(const std::filesystem::path& model) {
  auto found = ckpt::FindRestorable(model.string(), nullptr);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  const ckpt::CheckpointInfo& c = **found;
  CHECK(c.global_step == 0);
  REQUIRE_FALSE(c.deltas.empty());
  Note("restorable: ckpt-0 + " + std::to_string(c.deltas.size()) + " delta(s) to step " +
       std::to_string(c.restored_step()));
  return c.restored_step();
}

void CheckFinished(const std::filesystem::path& model) {
  int64_t last_step = 0;
  for (const auto& m : ReadJsonLines(model / "train_metrics.jsonl")) {
    if (m.contains("step")) last_step = std::max(last_step, m["step"].get<int64_t>());
  }
  CHECK(last_step == kSteps);
  auto manifest = ReadJsonFile((model / ("ckpt-" + std::to_string(kSteps)) / "MANIFEST").string());
  REQUIRE(manifest.ok());
  CHECK((*manifest)["final"] == true);
  CHECK_FALSE(manifest->contains("base"));  // the final checkpoint is full
}

TEST_CASE(
    "SIGKILL to the chief between deltas: a new chief restores ckpt-0 + the deltas at the exact step") {
  Setup s;
  const std::vector<std::string> chief_args{"--job", s.job.string()};
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(s.spec, id));
  {
    auto first = StartDaemon(s.spec, kChief, chief_args);
    WaitForDeltas(*first, 3);
    first->Signal(SIGKILL);
    REQUIRE(first->WaitExit(30s) == std::optional<int>(128 + SIGKILL));
  }
  const int64_t resumed = NewestState(s.model);
  CHECK(resumed > 0);
  CHECK(resumed < kSteps);

  Task& chief = tasks.Add(StartDaemon(s.spec, kChief, chief_args));
  REQUIRE(chief.WaitForLine(" delta(s) to step " + std::to_string(resumed) + ": resuming at step " +
                                std::to_string(resumed),
                            120s));
  // Both ps tasks read the chain; the new chief goes on writing deltas on the same base.
  CHECK(tasks[kPs0].WaitForLine(" delta(s): ", 30s));
  CHECK(tasks[kPs1].WaitForLine(" delta(s): ", 30s));
  WaitForDeltas(chief, 1);
  tasks.ExpectAllExit(0, 300s);
  CHECK_FALSE(chief.HasLine("starting at step 0"));
  CheckFinished(s.model);
}

TEST_CASE(
    "SIGKILL of ps:1 between deltas: every ps is restored from ckpt-0 + the deltas, deltas go on") {
  Setup s;
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(s.spec, id));
  Task& chief = tasks.Add(StartDaemon(s.spec, kChief, {"--job", s.job.string()}));
  WaitForDeltas(chief, 3);
  tasks[kPs1].Signal(SIGKILL);
  CHECK(tasks[kPs1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  REQUIRE(chief.WaitForLine("ps:1 failed", 30s));
  // A delta whose every ps answered before the kill may still be committed: the restore
  // takes the newest state then, at least this one.
  const int64_t before = NewestState(s.model);
  tasks.Replace(StartDaemon(s.spec, kPs1));
  REQUIRE(chief.WaitForLine("recovered: resuming at step ", 120s));
  const std::string line = *chief.FindLine("recovered: resuming at step ");
  const int64_t resumed = std::stoll(line.substr(line.find("resuming at step ") + 17));
  Note("recovered at step " + std::to_string(resumed));
  CHECK(resumed >= before);
  CHECK(chief.HasLine(" delta(s) to step " + std::to_string(resumed) + ": resuming at step " +
                      std::to_string(resumed)));
  CHECK(tasks[kPs1].WaitForLine(" delta(s): ", 30s));
  // The restarted ps builds deltas on the state it restored.
  WaitForDeltas(chief, 1);
  tasks.ExpectAllExit(0, 300s);
  CheckFinished(s.model);
}

}  // namespace
}  // namespace ps::integ

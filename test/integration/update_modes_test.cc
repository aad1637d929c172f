// Issue 6 acceptance, update modes on a real cluster (2 ps, 2 workers, Fashion-MNIST MLP):
// sync with every worker aggregated, sync with a backup worker, and bounded staleness
// with a straggler. The exact per-update arithmetic is checked in unit_ps_service; here
// the daemons must agree on it end to end: exact update counts on every shard, late
// gradients dropped, no worker ever granted a pull beyond the staleness bound.
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr int64_t kSteps = 300;

struct Run {
  std::vector<Json> metrics;
  std::vector<Json> ps_update;  // each ps's update-mode figures in the last metrics line
  double final_accuracy = -1;
};

// Runs the MLP job with `update` on the local cluster; `slow_worker1_ms` makes worker:1 a
// straggler (testing hook PSTRAIN_FAULT_SLOW_STEP_MS).
// `checkpoint_every`: 0 for none; otherwise the chief stops handing out steps at each
// multiple (a barrier where one worker may have no work while the other finishes its own).
Run Train(const Json& update, int slow_worker1_ms, int64_t checkpoint_every = 0) {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 100, tmp / "model",
                       Json{{"update", update}, {"checkpoint", {{"every_steps", checkpoint_every}, {"every_seconds", 0}}}});
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0}) tasks.Add(StartDaemon(spec, id));
  EnvVars slow;
  if (slow_worker1_ms > 0) slow.emplace_back("PSTRAIN_FAULT_SLOW_STEP_MS", std::to_string(slow_worker1_ms));
  tasks.Add(StartDaemon(spec, kWorker1, {}, {}, slow));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 120s);
  CHECK(chief.HasLine("step " + std::to_string(kSteps) + "/" + std::to_string(kSteps)));
  Run run;
  run.metrics = ReadJsonLines(tmp / "model" / "train_metrics.jsonl");
  for (const auto& m : run.metrics) {
    if (m.contains("final_eval")) run.final_accuracy = m["final_eval"]["accuracy"].get<double>();
    // The chief's last sample of the ps figures (at the last step): the update figures.
    if (m.contains("ps") && m.contains("step")) {
      run.ps_update.clear();
      for (const auto& p : m["ps"]) {
        if (p.contains("update")) run.ps_update.push_back(p["update"]);
      }
    }
  }
  return run;
}

TEST_CASE("sync, 2 of 2 workers: every shard applies exactly one averaged update per step, nothing is stale") {
  Run run = Train(Json{{"mode", "sync"}}, 0);
  REQUIRE(run.ps_update.size() == 2);
  for (const auto& u : run.ps_update) {
    CHECK(u["min_version"] == kSteps);
    CHECK(u["max_version"] == kSteps);
    CHECK(u["stale_dropped"] == 0);
  }
  for (const auto& m : run.metrics) {
    if (m.contains("stale_steps")) CHECK(m["stale_steps"] == 0);
  }
  WARN("accuracy " << run.final_accuracy);
  // 300 updates of 2 x 128 examples. Measured 0.8421 in 3 runs: sync training with every
  // worker aggregated is deterministic.
  CHECK(run.final_accuracy > 0.80);
}

TEST_CASE("sync, 1 of 2 workers (a backup): updates stay exact, the straggler's late gradients are dropped") {
  Run run = Train(Json{{"mode", "sync"}, {"replicas_to_aggregate", 1}}, 20);
  REQUIRE(run.ps_update.size() == 2);
  int64_t dropped = 0;
  for (const auto& u : run.ps_update) {
    CHECK(u["min_version"] == kSteps);
    CHECK(u["max_version"] == kSteps);
    dropped += u["stale_dropped"].get<int64_t>();
  }
  int64_t skipped = 0;
  for (const auto& m : run.metrics) skipped += m.value("stale_steps", int64_t{0});
  WARN("dropped at the ps: " << dropped << " item(s); skipped by workers: " << skipped
                               << "; accuracy " << run.final_accuracy);
  // worker:1 computes 20 ms longer per step than worker:0 takes for a whole step: most of
  // its gradients arrive after worker:0's has been applied (or it sees that and skips).
  CHECK(dropped + skipped > 0);
  CHECK(run.final_accuracy > 0.78);  // measured 0.8227 in 3 runs (132-144 items dropped)
}

TEST_CASE("bounded staleness 2 with a straggler: pulls wait, no worker ever leads by more than 2 steps") {
  // Checkpoints every 70 steps (7 packs): at each barrier the packs are split unevenly,
  // and a worker without work must not hold back the one finishing its pack.
  Run run = Train(Json{{"mode", "bounded_staleness"}, {"staleness", 2}}, 10, 70);
  REQUIRE(run.ps_update.size() == 2);
  for (const auto& u : run.ps_update) {
    const int64_t lead = u["max_lead"].get<int64_t>();
    const int64_t waited = u["waited_pulls"].get<int64_t>();
    WARN(u.dump() << "; accuracy " << run.final_accuracy);
    CHECK(lead <= 2);
    // worker:0 would run far ahead of the straggler: it is held at the bound.
    CHECK(lead == 2);
    CHECK(waited > 0);
  }
  CHECK(run.final_accuracy > 0.65);  // 300 async-like steps; measured 0.72-0.77
}

}  // namespace
}  // namespace ps::integ

// Full short runs from the configs/ files: the daemons started one by one, then the
// same files (with this test's ports) through `pstrain local`. Everyone exits 0.
#include <signal.h>

#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr int64_t kSteps = 200;

// Checks train_metrics.jsonl of a completed run: progress lines up to the last step,
// then the final evaluation.
void CheckCompletedMetrics(const std::filesystem::path& model_dir) {
  auto metrics = ReadJsonLines(model_dir / "train_metrics.jsonl");
  REQUIRE(metrics.size() >= 2);
  int64_t last_step = 0;
  int checkpoints = 0;
  for (size_t i = 0; i + 1 < metrics.size(); ++i) {
    if (metrics[i].contains("checkpoint")) {  // the checkpoint lines between progress lines
      ++checkpoints;
      continue;
    }
    if (metrics[i].contains("event")) continue;  // the chief's start (obs/metrics.h)
    REQUIRE(metrics[i].contains("step"));
    CHECK(metrics[i]["step"].get<int64_t>() > last_step);
    last_step = metrics[i]["step"].get<int64_t>();
  }
  CHECK(last_step == kSteps);
  CHECK(checkpoints >= 1);  // at least the final checkpoint, before the evaluation
  const Json& final_eval = metrics.back();
  REQUIRE(final_eval.contains("final_eval"));
  CHECK(final_eval["final_eval"]["step"] == kSteps);
  CHECK(final_eval["final_eval"]["examples"] == 10000);  // the Fashion-MNIST test set
  // 200 steps of batch 128 (~0.4 epoch) already classify well above chance (0.1).
  CHECK(final_eval["final_eval"]["accuracy"].get<double>() > 0.6);
}

TEST_CASE("a short fmnist run completes: final evaluation, every task exits 0") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 50, tmp / "model");
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief =
      tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));  // model_dir from the job
  tasks.ExpectAllExit(0, 120s);
  CHECK(chief.HasLine("step 200/200"));
  CHECK(chief.HasLine("final evaluation at step 200 on 10000 examples"));
  CHECK(chief.HasLine("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged"));
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1})
    CHECK(tasks[id].HasLine("shut down (job finished)"));
  CHECK(std::filesystem::exists(tmp / "model" / "job.json"));
  CheckCompletedMetrics(tmp / "model");
}

TEST_CASE("pstrain local runs the same job on a derived cluster file and exits 0") {
  TempDir tmp;
  auto spec = LocalCluster();
  WriteClusterFile(spec, tmp / "cluster.json");
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 50, tmp / "model");
  auto launcher =
      StartLauncher({"local", "--cluster", (tmp / "cluster.json").string(), "--job", job.string()},
                    "pstrain local");
  auto rc = launcher->WaitExit(150s);
  if (!rc) {
    // Let the launcher take its daemons down (second signal: SIGTERM to every task)
    // before the Task's destructor kills the launcher itself.
    launcher->Signal(SIGTERM);
    if (!launcher->WaitExit(40s)) {
      launcher->Signal(SIGTERM);
      launcher->WaitExit(20s);
    }
  }
  REQUIRE(rc == std::optional<int>(0));
  CHECK(launcher->HasLine("all 5 tasks exited cleanly"));
  CHECK(launcher->HasLine("final evaluation at step 200"));
  CHECK(launcher->HasLine("chief 127.0.0.1:" + std::to_string(spec.address(kChief).port)));
  CheckCompletedMetrics(tmp / "model");
}

}  // namespace
}  // namespace ps::integ

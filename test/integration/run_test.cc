// Full short runs from the configs/ files: the daemons started one by one, then the
// same files (with this test's ports) through `pstrain local`. Everyone exits 0.
#include <signal.h>
#include <unistd.h>

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

TEST_CASE("pstrain local makes a throw-away secret that pstrain status and stop find") {
  TempDir tmp;
  auto spec = LocalCluster();
  WriteClusterFile(spec, tmp / "cluster.json");
  // Long enough that only the stop below ends it.
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 1000000, 50, tmp / "model");
  const std::vector<std::pair<std::string, std::string>> env{
      {"XDG_RUNTIME_DIR", (tmp / "run").string()}};
  std::filesystem::create_directory(tmp / "run");
  Task launcher("pstrain local",
                {LauncherPath(), "local", "--cluster", (tmp / "cluster.json").string(), "--job",
                 job.string()},
                env);
  REQUIRE(launcher.WaitForLine("step 50", 120s));

  const std::string chief = "127.0.0.1:" + std::to_string(spec.address(kChief).port);
  const auto secret = tmp / "run" / ("pstrain-" + std::to_string(::getuid())) /
                      ("local-" + std::to_string(spec.address(kChief).port)) / "secret";
  REQUIRE(std::filesystem::exists(secret));
  CHECK((std::filesystem::status(secret).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(ReadFile(secret).size() == 65);  // 256 bits in hex and a newline
  // No task warns about a missing secret, and the hint to stop names no secret file.
  CHECK_FALSE(launcher.HasLine("no --secret-file"));
  CHECK(launcher.HasLine("pstrain stop --chief " + chief));
  CHECK_FALSE(launcher.HasLine("--secret-file " + secret.string()));

  Task status("pstrain status", {LauncherPath(), "status", "--chief", chief}, env);
  CHECK(status.WaitExit(30s) == std::optional<int>(0));
  CHECK(status.HasLine("step"));
  // Elsewhere the file is not found, and the cluster refuses a client without the secret.
  Task outsider("pstrain status", {LauncherPath(), "status", "--chief", chief},
                {{"XDG_RUNTIME_DIR", tmp.path().string()}});
  CHECK(outsider.WaitExit(30s) == std::optional<int>(1));

  Task stop("pstrain stop", {LauncherPath(), "stop", "--chief", chief}, env);
  CHECK(stop.WaitExit(30s) == std::optional<int>(0));
  CHECK(launcher.WaitExit(120s) == std::optional<int>(0));
  CHECK_FALSE(std::filesystem::exists(secret.parent_path()));
}

}  // namespace
}  // namespace ps::integ

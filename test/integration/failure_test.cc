// A ps lost mid-run (SIGKILL). The chief names it and pauses training. When the ps comes
// back with the same TF_CONFIG, every ps is restored from the newest checkpoint and the
// job finishes with the exact step count. If it does not come back in time, the chief
// exits 138 (retryable) and shuts the others down as retryable too (they exit 138), so
// that an orchestrator restarts the whole job. A ps killed while it writes
// the final checkpoint is recovered the same way.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/daemon/daemon.h"
#include "libps/obs/metrics.h"
#include "libps/obs/report.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 1200;

Json FinalManifest(const std::filesystem::path& model_dir) {
  auto text = ReadFile(model_dir / ("ckpt-" + std::to_string(kSteps)) / "MANIFEST");
  return Json::parse(text);
}

TEST_CASE(
    "SIGKILL of ps:1 mid-run, ps:1 restarted: the chief restores every ps and finishes; all exit 0") {
  // Also with a model small enough (100 KB a ps) that each push carries a later step's
  // pull (combine_push_pull): requests of both kinds are cut off by the kill.
  const bool combined = GENERATE(false, true);
  INFO((combined ? "hidden [64]: pushes with pulls" : "the demo model"));
  TempDir tmp;
  auto spec = LocalCluster();
  Json overrides{{"checkpoint", {{"every_steps", 200}}}};
  if (combined)
    overrides["model"] =
        Json{{"type", "mlp"}, {"input_dim", 784}, {"hidden", {64}}, {"classes", 10}};
  auto job =
      DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 20, tmp / "model", overrides);
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(
      StartDaemon(spec, kChief, {"--job", job.string(), "--model-dir", (tmp / "model").string()}));
  REQUIRE(chief.WaitForLine("checkpoint ckpt-200 committed", 120s));

  tasks[kPs1].Signal(SIGKILL);
  CHECK(tasks[kPs1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  REQUIRE(chief.WaitForLine("ps:1 failed", 15s));
  REQUIRE(chief.WaitForLine("waiting up to", 15s));
  tasks.Replace(StartDaemon(spec, kPs1));  // the same TF_CONFIG
  REQUIRE(chief.WaitForLine("ps:1 is back", 60s));
  auto resumed = chief.WaitForLine("recovered: resuming at step ", 60s);
  REQUIRE(resumed);
  REQUIRE(chief.WaitForLine("final evaluation at step 1200", 180s));
  tasks.ExpectAllExit(0, 60s);
  auto manifest = FinalManifest(tmp / "model");
  CHECK(manifest["final"] == true);
  CHECK(manifest["global_step"] == kSteps);
  // Both ps tasks were restored from the same checkpoint.
  CHECK(tasks[kPs0].HasLine("restored"));
  CHECK(tasks[kPs1].HasLine("restored"));
  auto down = tasks[kPs0].FindLine("shut down (job finished)");
  REQUIRE(down.has_value());
  CHECK((down->find("pushes (0 with a pull after them") == std::string::npos) == combined);
  // The report's markers: the chief's start, ps:1 lost and back, the roll-back restore.
  auto history = obs::ReadMetrics((tmp / "model").string());
  REQUIRE(history.ok());
  CHECK(history->notes.empty());
  std::vector<std::string> kinds;
  for (const auto& e : history->events)
    kinds.push_back(e.kind + (e.task.empty() ? "" : " " + e.task));
  CHECK(kinds ==
        std::vector<std::string>{"chief_start", "ps_lost ps:1", "ps_back ps:1", "restored"});
  const std::string html = obs::RenderReportHtml(*history, "model");
  CHECK(html.find("data-kind=\"ps_lost\"") != std::string::npos);
  CHECK(html.find("data-kind=\"ps_back\"") != std::string::npos);
}

TEST_CASE(
    "SIGKILL of ps:1 that does not come back: the chief exits 138 (retryable) naming it; the others too") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 1000000, 20, tmp / "model");
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief,
                                      {"--job", job.string(), "--model-dir",
                                       (tmp / "model").string(), "--ps-recovery-timeout", "2"}));
  REQUIRE(chief.WaitForLine("] step ", 120s));

  tasks[kPs1].Signal(SIGKILL);
  CHECK(tasks[kPs1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  CHECK(chief.WaitForLine("ps:1 failed", 15s));
  // Retryable: an orchestrator restarts every task (a Kubernetes pod that exited 0 would
  // not be), and the restarted chief resumes from the newest checkpoint.
  tasks.ExpectExit({kChief}, daemon::kExitRetryable, 60s);
  CHECK(daemon::kExitRetryable == 138);
  tasks.ExpectExit({kPs0, kWorker0, kWorker1}, daemon::kExitRetryable, 15s);
  auto why = chief.FindLine("pstrain-chief: ");
  REQUIRE(why.has_value());
  CHECK_THAT(*why, Catch::Contains("ps:1 did not come back"));
  CHECK(tasks[kPs0].HasLine("shut down (job failed"));
  CHECK(tasks[kWorker0].HasLine("shut down"));
  CHECK(tasks[kWorker1].HasLine("shut down"));
  CHECK(tasks[kWorker1].HasLine("exits 138 so that the whole job is restarted"));
}

TEST_CASE(
    "a ps killed while it writes the final checkpoint is recovered like a loss mid-run; every task exits 0") {
  TempDir tmp;
  const fs::path model = tmp / "model";
  constexpr int64_t kFinal = 600;
  auto job =
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", kFinal, 100, model, 200, 5);
  auto spec = LocalCluster();
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  REQUIRE(chief.WaitForLine("checkpoint ckpt-200 committed", 120s));

  // ps:0 writes the final checkpoint into ckpt-600/ps-0.shard.tmp: made a FIFO nobody
  // reads, it holds ps:0 in the middle of that write (the shard is larger than a pipe's
  // buffer) until the test kills it. The chief cleaned the model dir when it started.
  const fs::path final_dir = ckpt::CheckpointPath(model.string(), kFinal);
  fs::create_directories(final_dir);
  const fs::path fifo = final_dir / "ps-0.shard.tmp";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, 180000);
  REQUIRE(ready == 1);  // ps:0 has started writing the final checkpoint
  tasks[kPs0].Signal(SIGKILL);
  CHECK(tasks[kPs0].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  ::close(fd);
  fs::remove(fifo);

  REQUIRE(chief.WaitForLine("checkpoint 600 not committed", 60s));
  REQUIRE(chief.WaitForLine("waiting up to", 60s));
  tasks.Replace(StartDaemon(spec, kPs0));
  REQUIRE(chief.WaitForLine("recovered: resuming at step 400", 120s));
  tasks.ExpectAllExit(0, 180s);
  CHECK(chief.HasLine("checkpoint ckpt-600 (final) committed"));
  auto steps = VerifiedCheckpoints(model);
  REQUIRE_FALSE(steps.empty());
  CHECK(steps.back() == kFinal);
  auto manifest = ReadJsonFile(final_dir.string() + "/MANIFEST");
  REQUIRE(manifest.ok());
  CHECK((*manifest)["final"] == true);
}

}  // namespace
TEST_CASE("--chief-timeout: a run that ends normally shuts every task down, exit 0") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 100, 50, tmp / "model");
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1})
    tasks.Add(StartDaemon(spec, id, {"--chief-timeout", "30"}));
  tasks.Add(
      StartDaemon(spec, kChief, {"--job", job.string(), "--model-dir", (tmp / "model").string()}));
  tasks.ExpectAllExit(0, 120s);  // the watch ends with its task (it once kept a ps from exiting)
}

TEST_CASE(
    "--chief-timeout: the ps tasks and workers of a chief killed outright exit 138 (nothing else ends a Slurm step)") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 1000000, 20, tmp / "model");
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1})
    tasks.Add(StartDaemon(spec, id, {"--chief-timeout", "2"}));
  Task& chief = tasks.Add(
      StartDaemon(spec, kChief, {"--job", job.string(), "--model-dir", (tmp / "model").string()}));
  REQUIRE(chief.WaitForLine("] step ", 120s));  // training: the chief's frames keep the timers back
  chief.Signal(SIGKILL);
  CHECK(chief.WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  tasks.ExpectExit({kPs0, kPs1, kWorker0, kWorker1}, daemon::kExitRetryable, 60s);
  for (auto id : {kPs0, kWorker1}) {
    CHECK(tasks[id].HasLine("no chief heard from for"));
    CHECK(tasks[id].HasLine("(--chief-timeout)): exits 138 so that the whole job is restarted"));
  }
}

}  // namespace ps::integ

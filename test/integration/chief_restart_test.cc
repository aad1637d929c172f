// The chief dies (SIGKILL) between two checkpoints; the ps and worker tasks keep running,
// and a new chief with the same TF_CONFIG and job takes them over: it restores every ps
// from the newest checkpoint, finishes the job and everyone exits 0.
#include <signal.h>

#include <algorithm>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr int64_t kSteps = 1000;
constexpr int64_t kEvery = 300;  // checkpoints 300, 600, 900 and the final 1000

TEST_CASE("SIGKILL to the chief between checkpoints: a new chief resumes and finishes the job") {
  TempDir tmp;
  auto spec = LocalCluster();
  const auto model = tmp / "model";
  // Without prefetch, so the accuracy check below is not blurred by stale parameters.
  auto job = DeriveJob(
      "job-fmnist-mlp.json", tmp / "job.json", kSteps, 50, model,
      Json{{"checkpoint", {{"every_steps", kEvery}, {"every_seconds", 0}, {"max_to_keep", 10}}},
           {"prefetch", false}});
  const std::vector<std::string> chief_args{"--job", job.string()};

  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  {
    auto first = StartDaemon(spec, kChief, chief_args);
    // Between ckpt-300 and ckpt-600, with dispatches in flight: the workers are busy
    // when their chief dies, and their last pushes land after ckpt-300.
    REQUIRE(first->WaitForLine("checkpoint ckpt-300 committed", 120s));
    REQUIRE(first->WaitForLine("step 400/1000", 120s));
    first->Signal(SIGKILL);
    REQUIRE(first->WaitExit(30s) == std::optional<int>(128 + SIGKILL));
    CHECK_FALSE(first->HasLine("(final)"));
  }
  // ckpt-600 is 200 steps of training after the line above, so the kill should land
  // before it; the directory is the authority on what the new chief must resume from.
  auto committed = ckpt::ListCheckpoints(model.string());
  REQUIRE(committed.ok());
  REQUIRE(!committed->empty());
  const int64_t resumed = committed->back().global_step;
  Note("newest committed checkpoint after the kill: " + std::to_string(resumed));
  CHECK(resumed >= 300);
  CHECK(resumed < kSteps);
  CHECK_FALSE(committed->back().manifest.final);

  // ps and workers outlived their chief.
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) CHECK(tasks[id].Running());

  Task& chief = tasks.Add(StartDaemon(spec, kChief, chief_args));
  REQUIRE(chief.WaitForLine("resuming at step " + std::to_string(resumed), 120s));
  tasks.ExpectAllExit(0, 120s);
  CHECK_FALSE(chief.HasLine("starting at step 0"));
  CHECK(chief.HasLine("step 1000/1000"));
  CHECK(chief.HasLine("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged"));

  // The final checkpoint is at exactly the job's steps and says so in its MANIFEST.
  auto manifest = ReadJsonFile((model / "ckpt-1000" / "MANIFEST").string());
  INFO(manifest.status().ToString());
  REQUIRE(manifest.ok());
  CHECK((*manifest)["global_step"] == kSteps);
  CHECK((*manifest)["final"] == true);
  CHECK((*manifest)["num_ps"] == 2);
  CHECK(ckpt::VerifyCheckpoint((model / "ckpt-1000").string(), ckpt::Verify::kFull).ok());
  auto pointer = ckpt::ReadCheckpointPointer(model.string());
  CHECK(pointer.ok());
  CHECK(pointer.ValueOr(-1) == kSteps);

  // train_metrics.jsonl holds both chiefs' lines: the second one's end at 1000.
  auto metrics = ReadJsonLines(model / "train_metrics.jsonl");
  int64_t max_step = 0, last_step = 0;
  const Json* final_eval = nullptr;
  for (const auto& m : metrics) {
    if (m.contains("step")) {
      last_step = m["step"].get<int64_t>();
      max_step = std::max(max_step, last_step);
    }
    if (m.contains("final_eval")) final_eval = &m;
  }
  CHECK(max_step == kSteps);
  CHECK(last_step == kSteps);
  REQUIRE(final_eval != nullptr);
  CHECK(&metrics.back() == final_eval);
  CHECK((*final_eval)["final_eval"]["step"] == kSteps);
  CHECK((*final_eval)["final_eval"]["examples"] == 10000);
  // Uninterrupted runs of this job (no prefetch) reach 0.845-0.856 (5 runs); runs with the
  // restart 0.829 and up. "resuming at step N" and the exact step count above show the
  // restore; this shows the resumed run trains normally.
  CHECK((*final_eval)["final_eval"]["accuracy"].get<double>() > 0.80);
}

}  // namespace
}  // namespace ps::integ

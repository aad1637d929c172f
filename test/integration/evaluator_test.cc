// The side-car evaluator beside a training cluster: one eval/metrics.jsonl line per
// committed checkpoint, in step order, exit 0 after the final one; TensorBoard event
// files for training (model_dir) and evaluation (model_dir/eval).
#include <signal.h>

#include <filesystem>
#include <set>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/core/files.h"
#include "libps/obs/events.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

const cluster::TaskId kEvaluator{cluster::TaskType::kEvaluator, 0};

// The scalars with `tag` of every event file in `dir`, in file order.
std::vector<obs::ScalarEvent> Scalars(const std::filesystem::path& dir, const std::string& tag) {
  std::vector<obs::ScalarEvent> out;
  for (const auto& f : obs::ListEventFiles(dir.string())) {
    auto events = obs::ReadEvents(f);
    INFO(events.status().ToString());
    REQUIRE(events.ok());
    for (const auto& e : *events) {
      if (e.tag == tag) out.push_back(e);
    }
  }
  return out;
}

TEST_CASE(
    "the evaluator listed in TF_CONFIG evaluates every checkpoint once and exits 0 after the final one") {
  // 700 steps, every 200: ckpt-200, -400, -600 and the final ckpt-700; max_to_keep keeps
  // them all, so the evaluator must evaluate each exactly once. (700 is not a multiple of
  // 200: see "a checkpoint marked final after it was evaluated" below for that case.)
  constexpr int64_t kSteps = 700;
  // ckpt-0 is written before training starts, so that recovery always has a checkpoint.
  const std::vector<int64_t> kCheckpoints{0, 200, 400, 600, 700};
  TempDir tmp;
  auto spec = LocalCluster();
  spec.of(cluster::TaskType::kEvaluator).push_back({"127.0.0.1", FreePorts(1)[0]});
  const auto model = tmp / "model";
  auto job =
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 50, model, 200, 100);

  Tasks tasks;
  // First, so that it waits for the chief to create the model dir and sees every
  // checkpoint appear while training runs.
  Task& evaluator = tasks.Add(
      StartDaemon(spec, kEvaluator, {"--model-dir", model.string(), "--poll-seconds", "0.25"}));
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 120s);
  CHECK(chief.HasLine("final evaluation at step 700"));
  CHECK(evaluator.HasLine("evaluated the final checkpoint; exiting"));

  auto committed = ckpt::ListCheckpoints(model.string());
  REQUIRE(committed.ok());
  std::vector<int64_t> steps;
  for (const auto& c : *committed) steps.push_back(c.global_step);
  REQUIRE(steps == kCheckpoints);

  auto lines = ReadJsonLines(model / "eval" / "metrics.jsonl");
  std::vector<int64_t> evaluated;
  for (const auto& l : lines) evaluated.push_back(l["step"].get<int64_t>());
  CHECK(evaluated == kCheckpoints);  // one line each, ascending
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO("eval line " << lines[i].dump());
    const int64_t step = lines[i]["step"].get<int64_t>();
    CHECK(lines[i]["checkpoint"] == ckpt::CheckpointDirName(step));
    CHECK(lines[i]["examples"] == 10000);
    CHECK(lines[i]["final"] == (i + 1 == lines.size()));
    if (step == 0) {
      CHECK(lines[i]["accuracy"].get<double>() < 0.3);  // the initial model: about chance (0.1)
    } else {
      // 200 steps reach 0.66-0.71 with prefetch (parameters up to two steps stale), ~0.80
      // more later; far above chance (0.1) either way.
      CHECK(lines[i]["accuracy"].get<double>() > 0.6);
    }
    CHECK(lines[i]["loss"].get<double>() > 0);
  }
  // The final checkpoint holds the model the chief evaluated at the end: same numbers.
  auto train = ReadJsonLines(model / "train_metrics.jsonl");
  REQUIRE(!train.empty());
  REQUIRE(train.back().contains("final_eval"));
  REQUIRE(!lines.empty());
  CHECK(lines.back()["accuracy"].get<double>() ==
        Approx(train.back()["final_eval"]["accuracy"].get<double>()).margin(1e-6));
  CHECK(lines.back()["loss"].get<double>() ==
        Approx(train.back()["final_eval"]["loss"].get<double>()).epsilon(1e-4));

  // TensorBoard: the chief's events in model_dir, the evaluator's in model_dir/eval.
  CHECK(obs::ListEventFiles(model.string()).size() == 1);
  CHECK(obs::ListEventFiles((model / "eval").string()).size() == 1);
  auto train_loss = Scalars(model, "loss");
  REQUIRE(!train_loss.empty());
  CHECK(train_loss.back().step == kSteps);
  auto eval_acc = Scalars(model / "eval", "accuracy");
  std::vector<int64_t> eval_steps;
  for (const auto& e : eval_acc) eval_steps.push_back(e.step);
  CHECK(eval_steps == kCheckpoints);
  CHECK(Scalars(model / "eval", "loss").size() == kCheckpoints.size());
}

// A checkpoint can become final after it was committed: when training ends (or is
// stopped) right at a checkpoint, the chief rewrites its MANIFEST with "final": true
// ("checkpoint ckpt-N marked final"). An evaluator that had already evaluated it must
// still notice that it is final and exit 0.

TEST_CASE("a checkpoint marked final after it was evaluated ends the evaluator") {
  TempDir tmp;
  auto spec = LocalCluster();
  const auto model = tmp / "model";
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 200, 100, model, 100, 10);
  {
    Tasks tasks;
    for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
    tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
    tasks.ExpectAllExit(0, 120s);
  }
  // Put the model dir in the state the evaluator can see for a moment between the
  // chief's commit of ckpt-200 and its "marked final": the same MANIFEST, final false.
  const auto manifest_path = model / "ckpt-200" / "MANIFEST";
  auto manifest = ReadJsonFile(manifest_path.string());
  REQUIRE(manifest.ok());
  REQUIRE((*manifest)["final"] == true);
  (*manifest)["final"] = false;
  REQUIRE(WriteFileAtomic(manifest_path.string(), manifest->dump(2) + "\n").ok());

  auto evaluator = std::make_unique<Task>(
      "evaluator",
      std::vector<std::string>{DaemonPath(cluster::TaskType::kEvaluator), "--model-dir",
                               model.string(), "--poll-seconds", "0.1"},
      std::vector<std::pair<std::string, std::string>>{}, std::vector<std::string>{"TF_CONFIG"});
  REQUIRE(evaluator->WaitForLine("step 200:", 60s));
  // What the chief's "marked final" does: the MANIFEST again, now final.
  (*manifest)["final"] = true;
  REQUIRE(WriteFileAtomic(manifest_path.string(), manifest->dump(2) + "\n").ok());
  auto rc = evaluator->WaitExit(5s);  // 50 polls
  CHECK(rc == std::optional<int>(0));
  CHECK(evaluator->HasLine("evaluated the final checkpoint; exiting"));
  auto lines = ReadJsonLines(model / "eval" / "metrics.jsonl");
  REQUIRE(!lines.empty());
  CHECK(lines.back()["step"] == 200);
}

TEST_CASE(
    "SIGTERM with --stop-grace: the evaluator waits that long for the final checkpoint, then exits 143") {
  TempDir tmp;
  auto spec = LocalCluster();
  spec.of(cluster::TaskType::kEvaluator).push_back({"127.0.0.1", FreePorts(1)[0]});
  const auto model = tmp / "model";  // no chief will ever write it
  auto evaluator =
      StartDaemon(spec, kEvaluator,
                  {"--model-dir", model.string(), "--poll-seconds", "0.1", "--stop-grace", "0.5"});
  REQUIRE(evaluator->WaitForLine("waiting for " + (model / "job.json").string(), 30s));
  evaluator->Signal(SIGTERM);
  REQUIRE(evaluator->WaitForLine(
      "SIGTERM: going on until the final checkpoint is evaluated, at most 0.5 s", 30s));
  CHECK(evaluator->WaitExit(30s) == std::optional<int>(128 + SIGTERM));
  CHECK(evaluator->HasLine("stopped by a signal before the job started"));
}

}  // namespace
}  // namespace ps::integ

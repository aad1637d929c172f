// The side-car evaluator beside a training cluster: one eval/metrics.jsonl line per
// committed checkpoint, in step order, exit 0 after the final one; TensorBoard event
// files for training (model_dir) and evaluation (model_dir/eval). Beside the chief's
// inline evaluation each keeps its own records and TensorBoard run (eval, eval_inline);
// checkpoints max_to_keep deleted first are skipped, logged and counted, once.
#include <signal.h>

#include <filesystem>
#include <map>
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

// The steps of `scalars`, in order.
std::vector<int64_t> Steps(const std::vector<obs::ScalarEvent>& scalars) {
  std::vector<int64_t> out;
  for (const auto& e : scalars) out.push_back(e.step);
  return out;
}

bool Increasing(const std::vector<int64_t>& v) {
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] <= v[i - 1]) return false;
  }
  return true;
}

// The lines of `task` that contain `needle`.
int CountLines(Task& task, const std::string& needle) {
  int n = 0;
  for (const auto& l : task.Lines()) n += l.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

// An evaluator with no TF_CONFIG on `model`, run to its exit (0 required).
std::unique_ptr<Task> RunEvaluatorOn(const std::filesystem::path& model) {
  auto evaluator = std::make_unique<Task>(
      "evaluator",
      std::vector<std::string>{DaemonPath(cluster::TaskType::kEvaluator), "--model-dir",
                               model.string(), "--poll-seconds", "0.1"},
      std::vector<std::pair<std::string, std::string>>{}, std::vector<std::string>{"TF_CONFIG"});
  REQUIRE(evaluator->WaitExit(120s) == std::optional<int>(0));
  return evaluator;
}

TEST_CASE(
    "inline and side-car evaluation side by side: own records, own TensorBoard runs, every checkpoint evaluated or skipped once") {
  // 600 steps, a checkpoint every 100 (max_to_keep 2: most are deleted soon), an inline
  // evaluation every 200 on the workers, and the evaluator watching.
  TempDir tmp;
  auto spec = LocalCluster();
  spec.of(cluster::TaskType::kEvaluator).push_back({"127.0.0.1", FreePorts(1)[0]});
  const auto model = tmp / "model";
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 600, 50, model, 100, 2);
  {
    Json j = *ReadJsonFile(job.string());
    j["eval_every_steps"] = 200;
    WriteFile(job, j.dump());
  }
  Tasks tasks;
  Task& evaluator = tasks.Add(
      StartDaemon(spec, kEvaluator, {"--model-dir", model.string(), "--poll-seconds", "0.1"}));
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 180s);

  std::vector<int64_t> committed;
  for (const auto& l : ReadJsonLines(model / "train_metrics.jsonl")) {
    if (l.contains("checkpoint")) committed.push_back(l["checkpoint"]["step"].get<int64_t>());
  }
  CHECK(committed == std::vector<int64_t>{0, 100, 200, 300, 400, 500, 600});

  // The evaluator's records: only its own lines, each committed checkpoint evaluated once
  // or skipped (logged) once, never both.
  const auto eval_lines = ReadJsonLines(model / "eval" / "metrics.jsonl");
  std::map<int64_t, int> evaluated;
  for (const auto& l : eval_lines) {
    INFO(l.dump());
    CHECK_FALSE(l.contains("source"));
    ++evaluated[l["step"].get<int64_t>()];
  }
  for (int64_t step : committed) {
    const int skipped = CountLines(evaluator, "skipped " + ckpt::CheckpointDirName(step) + ":");
    INFO("ckpt-" << step << ": evaluated " << evaluated[step] << ", skipped " << skipped);
    CHECK(evaluated[step] + skipped == 1);
  }
  REQUIRE(!eval_lines.empty());
  CHECK(eval_lines.back()["step"] == 600);
  CHECK(eval_lines.back()["final"] == true);

  // The chief's records: the inline evaluations and its final one.
  const auto inline_lines = ReadJsonLines(model / "eval_inline" / "metrics.jsonl");
  REQUIRE(inline_lines.size() == 3);
  CHECK(inline_lines[0]["step"] == 200);
  CHECK(inline_lines[0]["source"] == "workers");
  CHECK(inline_lines[1]["step"] == 400);
  CHECK(inline_lines[2]["step"] == 600);
  CHECK(inline_lines[2]["source"] == "chief");
  CHECK(inline_lines[2]["final"] == true);

  // Two TensorBoard runs, each with increasing steps.
  const auto eval_steps = Steps(Scalars(model / "eval", "accuracy"));
  INFO("eval run steps: " << Json(eval_steps).dump());
  CHECK(Increasing(eval_steps));
  CHECK(eval_steps.back() == 600);
  CHECK(Steps(Scalars(model / "eval_inline", "accuracy")) == std::vector<int64_t>{200, 400, 600});

  SECTION("a fresh evaluator skips what max_to_keep deleted; once, across its restarts") {
    std::filesystem::remove_all(model / "eval");
    auto first = RunEvaluatorOn(model);
    for (int64_t step : {0, 100, 200, 300, 400}) {
      CHECK(CountLines(*first, "skipped " + ckpt::CheckpointDirName(step) +
                                   ": deleted (max_to_keep) before it could be evaluated") == 1);
    }
    CHECK(first->HasLine("(5 skipped so far)"));
    std::vector<int64_t> steps;
    for (const auto& l : ReadJsonLines(model / "eval" / "metrics.jsonl"))
      steps.push_back(l["step"].get<int64_t>());
    CHECK(steps == std::vector<int64_t>{500, 600});
    auto again = RunEvaluatorOn(model);
    CHECK(again->HasLine("was evaluated before; exiting"));
    CHECK_FALSE(again->HasLine("skipped"));
    CHECK(ReadJsonLines(model / "eval" / "metrics.jsonl").size() == 2);
    CHECK(Steps(Scalars(model / "eval", "accuracy")) == std::vector<int64_t>{500, 600});
  }
}

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

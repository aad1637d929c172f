// Inline distributed evaluation on a real cluster (2 ps, 2 workers, chief): with
// eval_every_steps the chief pauses training at exact step boundaries and the workers
// evaluate their shares of the eval files; the merged figures equal, exactly, one
// process's pass over the same checkpoint (the side-car evaluator's --once). Early
// stopping ends the job like a stop: a final checkpoint at the step reached, exit 0.
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

const cluster::TaskId kEvaluator{cluster::TaskType::kEvaluator, 0};

// gen-ctr data in `dir`: TFRecord training data in one file, eval data in 3 files; the
// job overrides for configs/job-ctr-emb.json's model on it.
Json CtrData(const std::filesystem::path& dir) {
  auto gen = StartLauncher({"gen-ctr", "--out", dir.string(), "--train-examples", "30000",
                            "--eval-examples", "6000", "--format", "tfrecord", "--files", "3"});
  REQUIRE(gen->WaitExit(120s) == 0);
  auto ctr = ReadJsonFile((dir / "ctr.json").string());
  REQUIRE(ctr.ok());
  Json train = (*ctr)["outputs"]["tfrecord"]["train_data"];
  Json eval = (*ctr)["outputs"]["tfrecord"]["eval_data"];
  return Json{{"base_dir", dir.string()}, {"train_data", train}, {"eval_data", eval}};
}

std::vector<Json> Lines(const std::vector<Json>& all, const char* key) {
  std::vector<Json> out;
  for (const auto& l : all) {
    if (l.contains(key)) out.push_back(l[key]);
  }
  return out;
}

TEST_CASE(
    "inline evaluation every 200 steps on 2 workers equals one process's pass over the same checkpoint") {
  TempDir tmp;
  Json overrides = CtrData(tmp / "ctr");
  overrides["eval_every_steps"] = 200;
  overrides["checkpoint"] = {{"every_steps", 200}, {"every_seconds", 0}, {"max_to_keep", 10}};
  const auto model = tmp / "model";
  auto job = DeriveJob("job-ctr-emb.json", tmp / "job.json", 600, 100, model, overrides);
  auto spec = LocalCluster();
  spec.of(cluster::TaskType::kEvaluator).push_back({"127.0.0.1", FreePorts(1)[0]});
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 300s);
  CHECK(chief.HasLine("evaluation at step 200 on 6000 examples (2 worker(s)"));

  // train_metrics.jsonl: one "eval" line per boundary before the last step.
  const auto evals = Lines(ReadJsonLines(model / "train_metrics.jsonl"), "eval");
  REQUIRE(evals.size() == 2);
  CHECK(evals[0]["step"] == 200);
  CHECK(evals[1]["step"] == 400);
  CHECK(evals[0]["examples"] == 6000);
  CHECK(evals[0]["workers"] == 2);

  // The evaluator's own pass over checkpoint 200 (training was paused for both).
  Task& evaluator = tasks.Add(
      StartDaemon(spec, kEvaluator, {"--model-dir", model.string(), "--once", "--step", "200"}));
  REQUIRE(evaluator.WaitExit(120s) == 0);
  const Json* inline_line = nullptr;
  const Json* single = nullptr;
  // Each keeps its own records: the chief's in eval_inline, the evaluator's in eval.
  const auto inline_lines = ReadJsonLines(model / "eval_inline" / "metrics.jsonl");
  const auto eval_lines = ReadJsonLines(model / "eval" / "metrics.jsonl");
  for (const auto& l : inline_lines) {
    if (l["step"] == 200 && l.value("source", "") == "workers") inline_line = &l;
  }
  for (const auto& l : eval_lines) {
    CHECK_FALSE(l.contains("source"));
    if (l["step"] == 200) single = &l;
  }
  REQUIRE(inline_line != nullptr);
  REQUIRE(single != nullptr);
  Note("step 200: merged auc " + (*inline_line)["auc"].dump() + ", one process " +
       (*single)["auc"].dump());
  CHECK((*inline_line)["examples"] == (*single)["examples"]);
  // The same scores up to float rounding: sgemm's blocking depends on the batch's row
  // count, and the workers' batches are not the evaluator's, so a score may differ in its
  // last bit and, rarely, swap with a near-equal one. One swapped pair moves the AUC by
  // 1 / (positives x negatives), about 2e-7 here; the accuracy by one example in 6000.
  // (The merge itself is exact: the chief ranks every example's score, it does not average.)
  CHECK((*inline_line)["accuracy"].get<double>() ==
        Approx((*single)["accuracy"].get<double>()).margin(1.0 / 6000));
  CHECK((*inline_line)["auc"].get<double>() == Approx((*single)["auc"].get<double>()).margin(2e-6));
  CHECK((*inline_line)["loss"].get<double>() ==
        Approx((*single)["loss"].get<double>()).epsilon(1e-9));
}

TEST_CASE(
    "early stopping: no improvement for `patience` evaluations ends the job with a final checkpoint, exit 0") {
  TempDir tmp;
  Json overrides = CtrData(tmp / "ctr");
  overrides["eval_every_steps"] = 100;
  // An improvement must exceed 1.0 in AUC: never; the second evaluation stops the job.
  overrides["early_stopping"] = {{"metric", "auc"}, {"patience", 1}, {"min_delta", 1.0}};
  const auto model = tmp / "model";
  auto job = DeriveJob("job-ctr-emb.json", tmp / "job.json", 5000, 100, model, overrides);
  auto spec = LocalCluster();
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 300s);
  CHECK(chief.HasLine("stop requested (early stopping: auc did not improve on"));
  CHECK(chief.HasLine("stopped at step 200 of 5000"));
  CHECK(std::filesystem::exists(model / "ckpt-200" / "MANIFEST"));
  const auto metrics = ReadJsonLines(model / "train_metrics.jsonl");
  CHECK(Lines(metrics, "eval").size() == 2);
  const auto final_eval = Lines(metrics, "final_eval");
  REQUIRE(final_eval.size() == 1);
  CHECK(final_eval[0]["step"] == 200);
}

TEST_CASE(
    "eval_every_steps without eval_data, and early_stopping without eval_every_steps, are configuration errors (exit 2)") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto spec = LocalCluster();
  for (const auto& [overrides, message] : std::vector<std::pair<Json, std::string>>{
           {Json{{"eval_every_steps", 100}, {"eval_data", nullptr}},
            "job.eval_every_steps: needs job.eval_data (what to evaluate on)"},
           {Json{{"early_stopping", {{"metric", "auc"}}}},
            "job.early_stopping: needs job.eval_every_steps (the evaluations it watches)"},
           {Json{{"eval_every_steps", 100}, {"early_stopping", {{"metric", "f1"}}}},
            "job.early_stopping.metric: must be \"auc\", \"accuracy\" or \"loss\", got \"f1\""}}) {
    Json o = overrides;
    auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 100, 50, model, o);
    if (o.contains("eval_data") && o["eval_data"].is_null()) {
      Json j = *ReadJsonFile(job.string());
      j.erase("eval_data");
      WriteFile(job, j.dump());
    }
    auto chief = StartDaemon(spec, kChief, {"--job", job.string()});
    CHECK(chief->WaitExit(60s) == 2);
    INFO(message);
    CHECK(chief->HasLine(message));
  }
}

}  // namespace
}  // namespace ps::integ

// Issue part 3 acceptance: `pstrain gen-ctr` writes a synthetic click data set with a
// known logistic ground truth, and configs/job-ctr-lr.json (logistic regression, FTRL)
// and configs/job-ctr-emb.json (embedding + MLP, Adagrad), trained on a real cluster
// (2 ps, 2 workers), reach a final eval AUC within 0.01 of the ground truth's AUC on
// the same eval examples (which gen-ctr reports in ctr.json).
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

// CI size: the default spec's fields (vocabularies 10 … 1e6, as the job files expect),
// fewer examples.
constexpr int64_t kTrainExamples = 200'000;
constexpr int64_t kEvalExamples = 20'000;

// Runs configs/<config> on data_dir for `steps` and returns the chief's final eval AUC.
double TrainAndEvaluate(const TempDir& tmp, const std::string& config, const std::string& name,
                        int64_t steps, const std::filesystem::path& data_dir) {
  auto spec = LocalCluster();
  auto job = DeriveJob(config, tmp / (name + ".json"), steps, steps, tmp / name,
                       Json{{"base_dir", data_dir.string()}});
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 300s);
  const Json* final_eval = nullptr;
  auto metrics = ReadJsonLines(tmp / name / "train_metrics.jsonl");
  for (const auto& m : metrics) {
    if (m.contains("final_eval")) final_eval = &m["final_eval"];
  }
  REQUIRE(final_eval != nullptr);
  CHECK((*final_eval)["examples"] == kEvalExamples);
  REQUIRE(final_eval->contains("auc"));
  return (*final_eval)["auc"].get<double>();
}

TEST_CASE("gen-ctr: usage errors exit 2, --help exits 0") {
  auto help = StartLauncher({"gen-ctr", "--help"});
  REQUIRE(help->WaitExit(30s) == 0);
  CHECK(help->HasLine("usage: pstrain gen-ctr --out DIR"));
  auto no_out = StartLauncher({"gen-ctr", "--seed", "3"});
  REQUIRE(no_out->WaitExit(30s) == 2);
  CHECK(no_out->HasLine("pstrain gen-ctr: --out DIR is required"));
  TempDir tmp;
  WriteFile(tmp / "spec.json", R"({"fields": [{"vocab": 0}]})");
  auto bad_spec = StartLauncher({"gen-ctr", "--out", (tmp / "d").string(), "--spec", (tmp / "spec.json").string()});
  REQUIRE(bad_spec->WaitExit(30s) == 2);
  CHECK(bad_spec->HasLine(".fields[0].vocab: must be in [1, 20000000], got 0"));
}

TEST_CASE("logistic regression and embedding + MLP reach the ground-truth AUC within 0.01") {
  TempDir tmp;
  const auto data = tmp / "ctr-data";
  auto gen = StartLauncher({"gen-ctr", "--out", data.string(), "--seed", "1", "--train-examples",
                            std::to_string(kTrainExamples), "--eval-examples",
                            std::to_string(kEvalExamples)});
  REQUIRE(gen->WaitExit(120s) == 0);
  CHECK(gen->HasLine("ground truth on eval: auc"));
  auto ctr = ReadJsonFile((data / "ctr.json").string());
  REQUIRE(ctr.ok());
  const double truth = (*ctr)["truth"]["eval_auc"].get<double>();
  const double click_rate = (*ctr)["truth"]["eval_click_rate"].get<double>();
  Note("ground truth eval auc " + std::to_string(truth) + ", click rate " + std::to_string(click_rate));
  CHECK(click_rate > 0.1);
  CHECK(click_rate < 0.3);
  CHECK(truth > 0.72);
  CHECK(truth < 0.88);

  // Measured margins (auc - (truth - 0.01)) over 3 runs: see the report in the commit.
  const double lr = TrainAndEvaluate(tmp, "job-ctr-lr.json", "lr", 800, data);
  Note("logistic regression eval auc " + std::to_string(lr));
  CHECK(lr >= truth - 0.01);

  const double emb = TrainAndEvaluate(tmp, "job-ctr-emb.json", "emb", 800, data);
  Note("embedding + MLP eval auc " + std::to_string(emb));
  CHECK(emb >= truth - 0.01);
}

}  // namespace
}  // namespace ps::integ

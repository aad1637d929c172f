// Issue part 3 acceptance: `pstrain gen-ctr` writes a synthetic click data set with a
// known logistic ground truth, and configs/job-ctr-lr.json (logistic regression, FTRL)
// and configs/job-ctr-emb.json (embedding + MLP, Adagrad), trained on a real cluster
// (2 ps, 2 workers), reach a final eval AUC within 0.01 of the ground truth's AUC on
// the same eval examples (which gen-ctr reports in ctr.json).
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

// The default spec (gen-ctr without size flags): 1M train / 100k eval examples. Writing
// them takes ~2-3 s and training each job ~5-10 s here, so CI runs the job files as
// users get them.
constexpr int64_t kEvalExamples = 100'000;

// Runs configs/<config> (its own steps) on data_dir; returns the chief's final eval AUC.
double TrainAndEvaluate(const TempDir& tmp, const std::string& config, const std::string& name,
                        const std::filesystem::path& data_dir) {
  auto spec = LocalCluster();
  const int64_t steps = ReadConfig(config)["steps"].get<int64_t>();
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
  auto gen = StartLauncher({"gen-ctr", "--out", data.string()});
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

  // Measured on 3 runs (truth 0.79793, bound 0.78793): LR 0.79219 / 0.79227 / 0.79230,
  // margin +0.0043 … +0.0044; embedding + MLP 0.79284 / 0.79229 / 0.79284, margin
  // +0.0044 … +0.0049. Both end ~0.005 below the truth: the tail ids of the large fields
  // are seen too rarely to learn their weights exactly.
  const double lr = TrainAndEvaluate(tmp, "job-ctr-lr.json", "lr", data);
  Note("logistic regression eval auc " + std::to_string(lr));
  CHECK(lr >= truth - 0.01);

  const double emb = TrainAndEvaluate(tmp, "job-ctr-emb.json", "emb", data);
  Note("embedding + MLP eval auc " + std::to_string(emb));
  CHECK(emb >= truth - 0.01);
}

}  // namespace
}  // namespace ps::integ

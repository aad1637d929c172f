// The model zoo in configs/, trained from the files as users get them on a real cluster
// (2 ps, 2 workers):
//   - `pstrain gen-ctr --spec configs/ctr-interactions.json` (click data whose ground truth
//     has pairwise field interactions), then job-ctrx-lr.json (logistic regression, the
//     baseline that cannot learn interactions), job-deepfm.json, job-dcn-v2.json,
//     job-wide-deep.json and job-dlrm.json. DeepFM and DCN-v2 must end within 0.005 of the
//     truth's eval AUC, and every graph model at least 0.01 above logistic regression.
//   - job-fmnist-cnn.json for a few hundred steps (its full run, 8 epochs, is
//     scripts/bench-zoo.sh's).
//   - a job whose graph uses examples/plugin's "prelu" layer through "plugins".
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

// Trains configs/<config> with its own steps (plus `overrides`), returns its final_eval.
Json Train(const TempDir& tmp, const std::string& config, int64_t steps,
           Json overrides = Json::object()) {
  auto spec = LocalCluster();
  const std::string name = config.substr(0, config.size() - 5);
  auto job = DeriveJob(config, tmp / (name + ".json"), steps, steps, tmp / name, overrides);
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 300s);
  for (const auto& m : ReadJsonLines(tmp / name / "train_metrics.jsonl")) {
    if (m.contains("final_eval")) return m["final_eval"];
  }
  FAIL("no final_eval in " << name << "/train_metrics.jsonl");
  return {};
}

}  // namespace

TEST_CASE(
    "CTR zoo on data with interactions: DeepFM and DCN-v2 reach the truth, all beat logistic regression") {
  TempDir tmp;
  const auto data = tmp / "ctrx";
  auto gen = StartLauncher({"gen-ctr", "--out", data.string(), "--spec",
                            SourceDir() + "/configs/ctr-interactions.json"});
  REQUIRE(gen->WaitExit(120s) == 0);
  auto ctr = ReadJsonFile((data / "ctr.json").string());
  REQUIRE(ctr.ok());
  const double truth = (*ctr)["truth"]["eval_auc"].get<double>();
  Note("ground truth eval auc " + std::to_string(truth));
  const Json base = {{"base_dir", data.string()}};

  auto auc = [&](const std::string& config) {
    const int64_t steps = ReadConfig(config)["steps"].get<int64_t>();
    Json e = Train(tmp, config, steps, base);
    REQUIRE(e.contains("auc"));
    CHECK(e["examples"] == 100000);
    Note(config + ": eval auc " + std::to_string(e["auc"].get<double>()) + " (truth - " +
         std::to_string(truth - e["auc"].get<double>()) + ")");
    return e["auc"].get<double>();
  };
  const double lr = auc("job-ctrx-lr.json");
  CHECK(lr < truth - 0.05);  // the interactions are out of its reach
  for (const char* config : {"job-deepfm.json", "job-dcn-v2.json"}) {
    INFO(config);
    const double a = auc(config);
    CHECK(a >= truth - 0.005);
    CHECK(a >= lr + 0.01);
  }
  for (const char* config : {"job-wide-deep.json", "job-dlrm.json"}) {
    INFO(config);
    const double a = auc(config);
    CHECK(a >= truth - 0.01);
    CHECK(a >= lr + 0.01);
  }
}

TEST_CASE("Fashion-MNIST CNN: a short run of configs/job-fmnist-cnn.json learns") {
  TempDir tmp;
  // 300 synchronous updates of 2 x 64 examples (0.64 epoch) with the file's optimizer; the
  // schedule still spans the file's steps, so the learning rate stays near its peak.
  Json e = Train(tmp, "job-fmnist-cnn.json", 300);
  CHECK(e["examples"] == 10000);
  Note("fmnist cnn after 300 steps: accuracy " + std::to_string(e["accuracy"].get<double>()));
  CHECK(e["accuracy"].get<double>() > 0.75);
}

}  // namespace ps::integ

namespace ps::integ {

TEST_CASE("a job naming a plug-in trains its layer on a real cluster; a bad plug-in exits 2") {
  TempDir tmp;
  const std::string plugin = BuildDir() + "/examples/libexample_layers.so";
  Json model = Json::parse(R"({"type": "graph",
    "inputs": [{"name": "pixels", "type": "dense", "dim": 784}],
    "layers": [{"name": "hidden", "type": "dense", "inputs": ["pixels"], "units": 64},
               {"name": "act", "type": "prelu", "inputs": ["hidden"], "alpha_init": 0.1},
               {"name": "logits", "type": "dense", "inputs": ["act"], "units": 10}],
    "outputs": [{"layer": "logits", "loss": "softmax_cross_entropy"}]})");
  Json e = Train(tmp, "job-fmnist-mlp.json", 200,
                 {{"model", model}, {"plugins", Json::array({plugin})}});
  Note("mlp with a prelu plug-in layer after 200 steps: accuracy " +
       std::to_string(e["accuracy"].get<double>()));
  CHECK(e["accuracy"].get<double>() > 0.6);

  auto spec = LocalCluster();
  auto bad = DeriveJob(
      "job-fmnist-mlp.json", tmp / "bad.json", 10, 10, tmp / "bad",
      {{"model", model}, {"plugins", Json::array({tmp.path().string() + "/missing.so"})}});
  Tasks tasks;
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", bad.string()}));
  REQUIRE(chief.WaitExit(60s) == 2);
  CHECK(chief.HasLine("job.plugins[0]: " + tmp.path().string() + "/missing.so: cannot load: "));
}

}  // namespace ps::integ

// TensorFlow's parameter-server tutorial (string features →
// Embedding(8, 16384) mean-pooled → Dense(1, sigmoid), RMSprop(0.1), the embedding
// split in two by a min-size partitioner), as configs/job-tutorial.json, reaches
// training accuracy 1.0 on a real cluster, and 1.0 on held-out examples.
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

TEST_CASE("configs/job-tutorial.json reaches accuracy 1.0 (training and final evaluation)") {
  TempDir tmp;
  auto spec = LocalCluster();
  Json job = ReadConfig("job-tutorial.json");
  const int64_t steps = job["steps"].get<int64_t>();
  job["model_dir"] = (tmp / "model").string();
  WriteFile(tmp / "job.json", job.dump(2));

  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", (tmp / "job.json").string()}));
  tasks.ExpectAllExit(0, 120s);
  // The embedding [8, 16384] (512 KiB) is split into two [4, 16384] shards, one per
  // ps, as in the tutorial; the dense kernel and bias are one shard each.
  CHECK(chief.HasLine("3 variables in 4 shards"));

  auto metrics = ReadJsonLines(tmp / "model" / "train_metrics.jsonl");
  REQUIRE(metrics.size() >= 2);
  const Json* last_train = nullptr;
  const Json* final_eval = nullptr;
  for (const auto& m : metrics) {
    if (m.contains("step")) last_train = &m;
    if (m.contains("final_eval")) final_eval = &m["final_eval"];
  }
  REQUIRE(last_train != nullptr);
  CHECK((*last_train)["step"] == steps);
  CHECK((*last_train)["accuracy"].get<double>() == 1.0);
  REQUIRE(final_eval != nullptr);
  CHECK((*final_eval)["examples"] == 1000);
  CHECK((*final_eval)["accuracy"].get<double>() == 1.0);
}

}  // namespace
}  // namespace ps::integ

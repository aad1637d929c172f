// Bring your own data, end to end on a real cluster (2 ps, 2 workers, chief, evaluator):
// TFRecord training data in one file streamed by 2 workers (split by record), eval
// data in 3 files, plain and gzip mixed, streamed by the chief's final evaluation and
// by the evaluator; a data glob that matches nothing stops the job at its start with
// exit 2 naming the pattern.
#include <zlib.h>

#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

const cluster::TaskId kEvaluator{cluster::TaskType::kEvaluator, 0};

void GzipInPlace(const std::filesystem::path& path) {
  const std::string bytes = ReadFile(path);
  gzFile gz = gzopen((path.string() + ".gz").c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(gz) == Z_OK);
  std::filesystem::remove(path);
}

// A job for configs/job-ctr-emb.json's model on gen-ctr data in `data_dir`.
Json Overrides(const std::filesystem::path& data_dir, const Json& train, const Json& eval) {
  return Json{{"base_dir", data_dir.string()}, {"train_data", train}, {"eval_data", eval}};
}

TEST_CASE(
    "streamed TFRecord: record-sharded training, the final evaluation and the evaluator read every eval file") {
  constexpr int64_t kTrain = 100'000, kEval = 9'000, kSteps = 1500;
  TempDir tmp;
  const auto data = tmp / "ctr";
  auto gen = StartLauncher({"gen-ctr", "--out", data.string(), "--train-examples",
                            std::to_string(kTrain), "--eval-examples", std::to_string(kEval),
                            "--format", "tfrecord", "--files", "1"});
  REQUIRE(gen->WaitExit(120s) == 0);
  auto eval_gen = StartLauncher({"gen-ctr", "--out", (tmp / "eval3").string(), "--train-examples",
                                 "0", "--eval-examples", std::to_string(kEval), "--format",
                                 "tfrecord", "--files", "3"});
  REQUIRE(eval_gen->WaitExit(120s) == 0);
  auto ctr = ReadJsonFile((data / "ctr.json").string());
  REQUIRE(ctr.ok());
  const double truth = (*ctr)["truth"]["eval_auc"].get<double>();
  // The same eval examples in 3 files (gen-ctr's eval stream does not depend on the
  // train size), the middle one gzipped.
  for (const char* name : {"eval-00000-of-00003.tfrecord", "eval-00001-of-00003.tfrecord",
                           "eval-00002-of-00003.tfrecord"}) {
    std::filesystem::rename(tmp / "eval3" / name, data / name);
  }
  GzipInPlace(data / "eval-00001-of-00003.tfrecord");
  Json train = (*ctr)["outputs"]["tfrecord"]["train_data"];
  train["shuffle_buffer"] = 20000;
  Json eval = train;
  eval.erase("shuffle_buffer");
  eval["files"] = Json::array({"eval-*-of-00003.tfrecord*"});

  auto spec = LocalCluster();
  spec.of(cluster::TaskType::kEvaluator).push_back({"127.0.0.1", FreePorts(1)[0]});
  const auto model = tmp / "model";
  auto job = DeriveJob("job-ctr-emb.json", tmp / "job.json", kSteps, 500, model,
                       Overrides(data, train, eval));
  Tasks tasks;
  Task& evaluator = tasks.Add(
      StartDaemon(spec, kEvaluator, {"--model-dir", model.string(), "--poll-seconds", "0.25"}));
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 300s);
  CHECK(evaluator.HasLine("evaluated the final checkpoint; exiting"));
  CHECK(chief.HasLine("final evaluation at step " + std::to_string(kSteps)));

  const Json* final_eval = nullptr;
  auto metrics = ReadJsonLines(model / "train_metrics.jsonl");
  for (const auto& m : metrics) {
    if (m.contains("final_eval")) final_eval = &m["final_eval"];
  }
  REQUIRE(final_eval != nullptr);
  CHECK((*final_eval)["examples"] == kEval);
  const double auc = (*final_eval)["auc"].get<double>();
  Note("final eval auc " + std::to_string(auc) + ", ground truth " + std::to_string(truth));
  CHECK(auc > truth - 0.05);  // 1500 steps of 256 on 100k examples: well above chance (0.5)
  auto lines = ReadJsonLines(model / "eval" / "metrics.jsonl");
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.back()["examples"] == kEval);
  CHECK(lines.back()["final"] == true);
  CHECK(std::abs(lines.back()["auc"].get<double>() - auc) < 1e-9);  // the same model, the same data
}

TEST_CASE(
    "a data glob that matches nothing: the chief exits 2 at the start, naming it; the others exit 0") {
  TempDir tmp;
  auto spec = LocalCluster();
  const Json train =
      Json::parse(R"({"format":"tfrecord","files":["day-*.tfrecord.gz"],"label":"label",
                                     "sparse":[{"feature":"device_type","type":"int64","vocab":10}]})");
  Json eval = train;
  eval["files"] = Json::array({"eval-*.tfrecord"});
  // Runs the job with these data objects; checks the exits; returns the chief's lines.
  auto run = [&](const Json& eval_data) {
    auto job = DeriveJob("job-ctr-emb.json", tmp / "job.json", 100, 100, tmp / "model",
                         Overrides(tmp.path(), train, eval_data));
    Tasks tasks;
    for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
    Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
    tasks.ExpectExit({kChief}, 2, 60s);
    tasks.ExpectExit({kPs0, kPs1, kWorker0, kWorker1}, 0, 30s);
    std::string lines;
    for (const auto& l : chief.Lines()) lines += l + "\n";
    return lines;
  };
  SECTION("train_data: the chief checks it when it makes the shards") {
    const std::string lines = run(nullptr);
    CHECK_THAT(lines, Catch::Contains("job.train_data.files[0]: '" +
                                      (tmp / "day-*.tfrecord.gz").string() + "' matches no file"));
    CHECK_THAT(lines, !Catch::Contains("variables in"));
  }
  SECTION("train_data: files that hold no record stop the job after one pass") {
    WriteFile(tmp / "day-1.tfrecord.gz", "");
    CHECK_THAT(run(nullptr), Catch::Contains("job.train_data: its 1 file(s) hold no record"));
  }
  SECTION("eval_data: the chief checks it before creating variables") {
    WriteFile(tmp / "day-1.tfrecord.gz", "");
    const std::string lines = run(eval);
    CHECK_THAT(lines, Catch::Contains("job.eval_data.files[0]: '" +
                                      (tmp / "eval-*.tfrecord").string() + "' matches no file"));
    CHECK_THAT(lines, !Catch::Contains("variables in"));
  }
}

TEST_CASE(
    "a corrupt training record under \"on_error\": \"skip\" is skipped and counted in the chief's metrics") {
  TempDir tmp;
  const auto data = tmp / "ctr";
  auto gen = StartLauncher({"gen-ctr", "--out", data.string(), "--train-examples", "5000",
                            "--eval-examples", "1000", "--format", "tfrecord", "--files", "1"});
  REQUIRE(gen->WaitExit(120s) == 0);
  auto ctr = ReadJsonFile((data / "ctr.json").string());
  REQUIRE(ctr.ok());
  Json train = (*ctr)["outputs"]["tfrecord"]["train_data"];
  Json eval = (*ctr)["outputs"]["tfrecord"]["eval_data"];
  train["on_error"] = "skip";
  // The first record's data starts after its 8-byte length and 4-byte CRC: a flipped
  // byte there fails its data CRC and leaves the framing intact.
  std::filesystem::path file;
  for (const auto& e : std::filesystem::directory_iterator(data)) {
    if (e.path().filename().string().rfind("train", 0) == 0) file = e.path();
  }
  REQUIRE_FALSE(file.empty());
  FlipByte(file, 20);
  const auto model = tmp / "model";
  // 300 steps of 256 over 5000 examples: about 15 epochs, the bad record in each.
  auto job = DeriveJob("job-ctr-emb.json", tmp / "job.json", 300, 100, model,
                       Overrides(data, train, eval));
  auto spec = LocalCluster();
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 120s);
  CHECK(chief.HasLine("bad record(s) skipped since the last progress line"));
  int64_t total = 0;
  for (const auto& m : ReadJsonLines(model / "train_metrics.jsonl")) {
    if (m.contains("skipped_records_total")) total = m["skipped_records_total"].get<int64_t>();
  }
  Note("records skipped: " + std::to_string(total));
  CHECK(total >= 10);
}

}  // namespace
}  // namespace ps::integ

// `pstrain gen-ctr` writes a synthetic click data set with a
// known logistic ground truth, and configs/job-ctr-lr.json (logistic regression, FTRL)
// and configs/job-ctr-emb.json (embedding + MLP, Adagrad), trained on a real cluster
// (2 ps, 2 workers), reach a final eval AUC within 0.01 of the ground truth's AUC on
// the same eval examples (which gen-ctr reports in ctr.json). The embedding job also
// runs with lazy tables: same bound, and its checkpoint holds only the rows created.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

// The default spec (gen-ctr without size flags): 1M train / 100k eval examples. Writing
// them takes ~2-3 s and training each job ~5-10 s here, so CI runs the job files as
// users get them.
constexpr int64_t kEvalExamples = 100'000;

// Runs configs/<config> (its own steps) on data_dir, with the top-level keys of
// `overrides` replaced; returns the chief's final eval AUC.
double TrainAndEvaluate(const TempDir& tmp, const std::string& config, const std::string& name,
                        const std::filesystem::path& data_dir, Json overrides = Json::object()) {
  auto spec = LocalCluster();
  const int64_t steps = ReadConfig(config)["steps"].get<int64_t>();
  overrides["base_dir"] = data_dir.string();
  auto job = DeriveJob(config, tmp / (name + ".json"), steps, steps, tmp / name, overrides);
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

// Distinct field-local ids per field in a gen-ctr LibSVM file (1-based global ids;
// field f owns [offsets[f], offsets[f + 1]) of the 0-based id space).
std::vector<int64_t> DistinctIdsPerField(const std::filesystem::path& path,
                                         const std::vector<int64_t>& offsets) {
  std::vector<std::set<int64_t>> ids(offsets.size());
  std::ifstream f(path);
  REQUIRE(f);
  for (std::string line; std::getline(f, line);) {
    size_t pos = line.find(' ');
    while (pos != std::string::npos) {
      int64_t id = std::stoll(line.substr(pos + 1)) - 1;
      size_t field = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), id) -
                                         offsets.begin()) -
                     1;
      ids[field].insert(id - offsets[field]);
      pos = line.find(' ', pos + 1);
    }
  }
  std::vector<int64_t> counts;
  for (const auto& s : ids) counts.push_back(static_cast<int64_t>(s.size()));
  return counts;
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
  auto bad_spec = StartLauncher(
      {"gen-ctr", "--out", (tmp / "d").string(), "--spec", (tmp / "spec.json").string()});
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
  Note("ground truth eval auc " + std::to_string(truth) + ", click rate " +
       std::to_string(click_rate));
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

TEST_CASE(
    "embedding + MLP with lazy tables: same AUC bound; the checkpoint holds only created rows") {
  TempDir tmp;
  const auto data = tmp / "ctr-data";
  auto gen = StartLauncher({"gen-ctr", "--out", data.string()});
  REQUIRE(gen->WaitExit(120s) == 0);
  auto ctr = ReadJsonFile((data / "ctr.json").string());
  REQUIRE(ctr.ok());
  const double truth = (*ctr)["truth"]["eval_auc"].get<double>();

  Json model = ReadConfig("job-ctr-emb.json")["model"];
  for (auto& field : model["fields"]) field["lazy"] = true;  // one table per field
  // Measured on 4 runs (truth 0.79793, bound 0.78793): 0.79297 / 0.79291 / 0.79295 /
  // 0.79286, margin +0.0049 … +0.0050, as the dense tables above. ~7 s per run here.
  const double emb =
      TrainAndEvaluate(tmp, "job-ctr-emb.json", "lazy", data, Json{{"model", model}});
  Note("lazy embedding + MLP eval auc " + std::to_string(emb) + ", truth " + std::to_string(truth));
  CHECK(emb >= truth - 0.01);

  // A lazy row is created by its first push, so a table holds at most the ids the
  // training data has, and the checkpoint (written by the 2 ps) stores only those rows.
  // 8000 steps of 256 are 2 epochs, so each worker passes over all of its half of the
  // data unless it runs fewer than 1954 of the steps: all 4 runs created exactly the
  // distinct ids (site 9572 of 10000, ad 19000 of 100000, user 13392 of 1000000).
  const auto offsets = (*ctr)["data_config"]["field_offsets"].get<std::vector<int64_t>>();
  const auto distinct = DistinctIdsPerField(data / "train.libsvm", offsets);
  REQUIRE(distinct.size() == model["fields"].size());
  auto inspect = StartLauncher({"inspect", (tmp / "lazy").string(), "--verify"}, "pstrain inspect");
  REQUIRE(inspect->WaitExit(60s) == 0);
  int64_t dense_bytes = 0;
  for (size_t f = 0; f < distinct.size(); ++f) {
    const auto& field = model["fields"][f];
    const std::string table = field["table"].get<std::string>();
    const int64_t vocab = field["vocab"].get<int64_t>();
    dense_bytes += vocab * field["dim"].get<int64_t>() * 4 * 2;  // values + Adagrad accumulator
    auto line = inspect->FindLine(" " + table + "/embeddings ");
    REQUIRE(line.has_value());
    std::smatch m;
    REQUIRE(std::regex_search(*line, m, std::regex(R"(\(lazy: (\d+) created\))")));
    const int64_t created = std::stoll(m[1].str());
    Note(table + ": " + std::to_string(created) + " rows created, " + std::to_string(distinct[f]) +
         " distinct ids in the training data, vocab " + std::to_string(vocab));
    CHECK(created <= distinct[f]);
    CHECK(10 * created >= 9 * distinct[f]);
  }
  const auto ckpt =
      tmp / "lazy" /
      ("ckpt-" + std::to_string(ReadConfig("job-ctr-emb.json")["steps"].get<int64_t>()));
  int64_t shard_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(ckpt)) {
    if (e.path().extension() == ".shard") shard_bytes += static_cast<int64_t>(e.file_size());
  }
  Note("checkpoint shard files " + std::to_string(shard_bytes) +
       " bytes; dense tables would hold " + std::to_string(dense_bytes));
  // Measured: 3,515,266 bytes on every run against 71,432,576 (4.9 %).
  CHECK(shard_bytes > 0);
  CHECK(10 * shard_bytes < dense_bytes);
}

}  // namespace
}  // namespace ps::integ

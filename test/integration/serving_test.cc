// Serving export: a real cluster trains (a dense MLP on Fashion-MNIST,
// and a CTR model with lazy embedding tables on `pstrain gen-ctr` data), `pstrain export`
// writes a bundle, `pstrain predict` scores the eval data from the bundle and from the
// checkpoint, and examples/serving (the public C++ API) scores a batch. Every score is
// bit-identical across the three, and the metrics are exactly the evaluator's.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_file.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

std::vector<std::string> Lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string ServingExample() { return BuildDir() + "/examples/serving_example"; }

// The evaluator's line for `step` (pstrain-evaluator --once --step).
Json EvaluatorLine(const std::filesystem::path& model, int64_t step) {
  auto evaluator = std::make_unique<Task>(
      "evaluator",
      std::vector<std::string>{DaemonPath(cluster::TaskType::kEvaluator), "--model-dir",
                               model.string(), "--once", "--step", std::to_string(step)},
      EnvVars{}, std::vector<std::string>{"TF_CONFIG"});
  REQUIRE(evaluator->WaitExit(300s) == std::optional<int>(0));
  for (const auto& l : ReadJsonLines(model / "eval" / "metrics.jsonl")) {
    if (l["step"] == step) return l;
  }
  FAIL("no eval line for step " << step);
  return {};
}

// `pstrain predict`; returns its exit code. Scores to `scores`, metrics to `metrics`; the
// lines it printed to `said` (when given).
int Predict(const std::vector<std::string>& model_args, const std::filesystem::path& data,
            const std::filesystem::path& scores, const std::filesystem::path& metrics,
            std::vector<std::string>* said = nullptr) {
  std::vector<std::string> args{"predict"};
  args.insert(args.end(), model_args.begin(), model_args.end());
  for (const std::string& a : {std::string("--data"), data.string(), std::string("--out"),
                               scores.string(), std::string("--metrics"), metrics.string()}) {
    args.push_back(a);
  }
  auto p = StartLauncher(args, "pstrain predict");
  auto rc = p->WaitExit(300s);
  REQUIRE(rc.has_value());
  if (said != nullptr) *said = p->Lines();
  return *rc;
}

// The chief's final evaluation line (model_dir/train_metrics.jsonl), or null.
Json FinalEvalLine(const std::filesystem::path& model) {
  for (const auto& l : ReadJsonLines(model / "train_metrics.jsonl")) {
    if (l.contains("final_eval")) return l["final_eval"];
  }
  return nullptr;
}

// `m` (predict's --metrics) has exactly `want`'s figures (doubles compared exactly).
void CheckSameMetrics(const Json& m, const Json& want) {
  INFO(m.dump() << " vs " << want.dump());
  CHECK(m["examples"] == want["examples"]);
  CHECK(m["loss"].get<double>() == want["loss"].get<double>());
  CHECK(m["accuracy"].get<double>() == want["accuracy"].get<double>());
  CHECK(m.contains("auc") == want.contains("auc"));
  if (want.contains("auc")) CHECK(m["auc"].get<double>() == want["auc"].get<double>());
}

// serving_example's score lines and its own lines ("serving_example: ..."), and its exit code.
struct ExampleRun {
  std::optional<int> rc;
  std::vector<std::string> scores, said;
};
ExampleRun RunExample(const std::vector<std::string>& args) {
  std::vector<std::string> argv{ServingExample()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto example = std::make_unique<Task>("serving_example", argv);
  ExampleRun run;
  run.rc = example->WaitExit(120s);
  for (const auto& l : example->Lines())
    (l.rfind("serving_example:", 0) == 0 ? run.said : run.scores).push_back(l);
  return run;
}

bool Says(const ExampleRun& run, const std::string& text) {
  return std::any_of(run.said.begin(), run.said.end(),
                     [&](const auto& l) { return l.find(text) != std::string::npos; });
}

// Export step `step` of `model`, predict from the bundle and from the checkpoint, run the
// example program on the bundle; check everything against the evaluator on that step
// and, for the final checkpoint, against the chief's final evaluation. Returns the
// bundle's directory.
std::filesystem::path ExportAndCompare(const TempDir& tmp, const std::filesystem::path& model,
                                       int64_t step, const Json& eval_data, int64_t examples) {
  const Json eval = EvaluatorLine(model, step);
  const auto bundle = tmp / ("bundle-" + std::to_string(step));
  auto exp = StartLauncher(
      {"export", model.string(), "--out", bundle.string(), "--step", std::to_string(step)},
      "pstrain export");
  REQUIRE(exp->WaitExit(300s) == std::optional<int>(0));
  CHECK(exp->HasLine("exported step " + std::to_string(step)));
  auto manifest = ReadJsonFile((bundle / "bundle.json").string());
  REQUIRE(manifest.ok());
  CHECK((*manifest)["source"]["checkpoint"] ==
        "ckpt-" + std::to_string(step));  // a full checkpoint
  // Nothing but the bundle was left next to it (the temporary directory was renamed).
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  }

  const auto data = tmp / ("data-" + std::to_string(step) + ".json");
  WriteFile(data, eval_data.dump());
  const auto s_bundle = tmp / "scores-bundle.txt", m_bundle = tmp / "metrics-bundle.json";
  const auto s_ckpt = tmp / "scores-ckpt.txt", m_ckpt = tmp / "metrics-ckpt.json";
  REQUIRE(Predict({"--model", bundle.string()}, data, s_bundle, m_bundle) == 0);
  std::vector<std::string> said;
  REQUIRE(Predict({"--model", model.string(), "--step", std::to_string(step)}, data, s_ckpt, m_ckpt,
                  &said) == 0);
  CHECK(std::any_of(said.begin(), said.end(), [&](const std::string& l) {
    return l.find("scored with checkpoint " + (model / ("ckpt-" + std::to_string(step))).string() +
                  " (step ") != std::string::npos;
  }));

  const auto bundle_lines = Lines(s_bundle);
  CHECK(static_cast<int64_t>(bundle_lines.size()) == examples);
  CHECK(bundle_lines == Lines(s_ckpt));  // per example, bit-identical (9 significant digits)
  // The metrics are exactly the evaluator's. The evaluator loads the checkpoint as
  // predict does (LoadValues), so on the final checkpoint they are also compared with the
  // chief's final evaluation, which pulls the values from the ps tasks' live stores over
  // the network (no checkpoint file): the same floats (the final checkpoint is saved
  // after the last update and before that evaluation), the same batches, OpenBLAS on one
  // thread in every process: exactly equal.
  const Json final_eval = FinalEvalLine(model);
  REQUIRE(final_eval.is_object());
  for (const auto& path : {m_bundle, m_ckpt}) {
    auto m = ReadJsonFile(path.string());
    REQUIRE(m.ok());
    INFO(path.string() << " against the evaluator's line");
    CHECK((*m)["step"] == step);
    CheckSameMetrics(*m, eval);
    if (final_eval["step"] == step) {
      INFO("against the chief's final evaluation");
      CheckSameMetrics(*m, final_eval);
    }
  }

  // The public API in a program of its own: the first batch, scored alone, as predict did.
  const ExampleRun example = RunExample({bundle.string(), data.string(), "256"});
  REQUIRE(example.rc == std::optional<int>(0));
  REQUIRE(example.scores.size() == 256);
  CHECK(std::equal(example.scores.begin(), example.scores.end(), bundle_lines.begin()));
  return bundle;
}

// Every record of the bundle's weights: values only.
void CheckNoSlots(const std::filesystem::path& bundle,
                  const std::filesystem::path& checkpoint_shard) {
  auto weights = ckpt::Inspect((bundle / "weights.shard").string(), true);
  REQUIRE(weights.ok());
  for (const auto& r : weights->records) {
    INFO(r.meta.layout.var);
    CHECK(r.meta.slot_names.empty());
    CHECK(r.data_error.empty());
  }
  auto ckpt = ckpt::Inspect(checkpoint_shard.string(), false);
  REQUIRE(ckpt.ok());
  REQUIRE(!ckpt->records.empty());
  CHECK(!ckpt->records[0].meta.slot_names.empty());  // the optimizer's slots were there to drop
}

TEST_CASE(
    "a dense MLP: export, predict from bundle and checkpoint, the C++ API; scores equal the evaluator's") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 200, 100, model, 100, 10);
  TrainToEnd(job, 180s);
  const Json eval_data = ReadConfig("job-fmnist-mlp.json")["eval_data"];
  const auto b200 = ExportAndCompare(tmp, model, 200, eval_data, 10000);
  CheckNoSlots(b200, model / "ckpt-200" / "ps-0.shard");
  const auto scores200 = Lines(tmp / "scores-bundle.txt");
  // Another checkpoint scores differently: the comparisons can tell checkpoints apart.
  const auto b100 = ExportAndCompare(tmp, model, 100, eval_data, 10000);
  const auto scores100 = Lines(tmp / "scores-bundle.txt");
  CHECK(scores100 != scores200);

  // Adam's two slots are gone: the bundle is about a third of the checkpoint.
  uint64_t ckpt_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(model / "ckpt-200"))
    ckpt_bytes += e.file_size();
  const uint64_t bundle_bytes = std::filesystem::file_size(b200 / "weights.shard");
  Note("checkpoint " + std::to_string(ckpt_bytes) + " bytes, bundle weights " +
       std::to_string(bundle_bytes));
  CHECK(bundle_bytes * 5 < ckpt_bytes * 2);

  // Errors: an existing --out, a damaged bundle (named), a bundle with --step, usage.
  auto again = StartLauncher({"export", model.string(), "--out", b200.string()}, "pstrain export");
  CHECK(again->WaitExit(120s) == std::optional<int>(1));
  CHECK(again->HasLine("already exists"));
  FlipByte(b100 / "weights.shard");
  const auto data = tmp / "data-100.json";
  CHECK(Predict({"--model", b100.string()}, data, tmp / "s.txt", tmp / "m.json") == 1);
  CHECK(!std::filesystem::exists(tmp / "s.txt"));
  auto damaged = StartLauncher({"predict", "--model", b100.string(), "--data", data.string()},
                               "pstrain predict");
  CHECK(damaged->WaitExit(120s) == std::optional<int>(1));
  CHECK(damaged->HasLine((b100 / "weights.shard").string() + ": checksum mismatch"));
  auto usage = StartLauncher({"predict", "--model", b200.string()}, "pstrain predict");
  CHECK(usage->WaitExit(30s) == std::optional<int>(2));
  CHECK(usage->HasLine("pstrain predict: --data DATA is required"));
  // Predict and export without --step take the newest checkpoint that verifies: a damaged
  // ckpt-200 is named in a warning and ckpt-100 used.
  FlipByte(model / "ckpt-200" / "ps-1.shard");
  const auto s_fallback = tmp / "s-fallback.txt", m_fallback = tmp / "m-fallback.json";
  auto fallback = StartLauncher({"predict", "--model", model.string(), "--data", data.string(),
                                 "--out", s_fallback.string(), "--metrics", m_fallback.string()},
                                "pstrain predict");
  CHECK(fallback->WaitExit(120s) == std::optional<int>(0));
  CHECK(fallback->HasLine("pstrain predict: warning: "));
  CHECK(fallback->HasLine("ckpt-200"));
  CHECK(Lines(s_fallback) == scores100);
  auto m_fb = ReadJsonFile(m_fallback.string());
  REQUIRE(m_fb.ok());
  CHECK((*m_fb)["step"] == 100);
  auto exp_fb = StartLauncher({"export", model.string(), "--out", (tmp / "b-fallback").string()},
                              "pstrain export");
  CHECK(exp_fb->WaitExit(120s) == std::optional<int>(0));
  CHECK(exp_fb->HasLine("pstrain export: warning: "));
  CHECK(exp_fb->HasLine("exported step 100 of"));

  // Usage errors exit 2: --step with a bundle, --data that is not JSON.
  auto step_on_bundle =
      StartLauncher({"predict", "--model", b200.string(), "--step", "200", "--data", data.string()},
                    "pstrain predict");
  CHECK(step_on_bundle->WaitExit(30s) == std::optional<int>(2));
  CHECK(step_on_bundle->HasLine("--step: " + b200.string() + " is a bundle"));
  auto not_json = StartLauncher({"predict", "--model", b200.string(), "--data", "{not json"},
                                "pstrain predict");
  CHECK(not_json->WaitExit(30s) == std::optional<int>(2));
  CHECK(not_json->HasLine("--data: malformed JSON"));
  // Data without examples is an error, as in the evaluator; no score file is left.
  WriteFile(tmp / "empty.libsvm", "");
  WriteFile(tmp / "empty.json",
            Json{{"format", "libsvm"}, {"path", "empty.libsvm"}, {"num_features", 784}}.dump());
  auto empty =
      StartLauncher({"predict", "--model", b200.string(), "--data", (tmp / "empty.json").string(),
                     "--out", (tmp / "s-empty.txt").string()},
                    "pstrain predict");
  CHECK(empty->WaitExit(60s) == std::optional<int>(1));
  CHECK(empty->HasLine("pstrain predict: --data: no examples"));
  CHECK(!std::filesystem::exists(tmp / "s-empty.txt"));
  // A directory that is neither a bundle nor a model dir says so.
  std::filesystem::create_directories(tmp / "neither");
  auto neither =
      StartLauncher({"predict", "--model", (tmp / "neither").string(), "--data", data.string()},
                    "pstrain predict");
  CHECK(neither->WaitExit(30s) == std::optional<int>(1));
  CHECK(neither->HasLine("neither a bundle (no bundle.json) nor a model dir (no job.json)"));
  auto help = StartLauncher({"export", "--help"}, "pstrain export");
  CHECK(help->WaitExit(30s) == std::optional<int>(0));
  CHECK(help->HasLine("usage: pstrain export MODEL_DIR --out DIR [--step N]"));
}

TEST_CASE(
    "a model with a plug-in layer: the bundle carries a copy of the plug-in and scores like the evaluator") {
  TempDir tmp;
  const std::string plugin = BuildDir() + "/examples/libexample_layers.so";
  Json model_config = Json::parse(R"({"type": "graph",
    "inputs": [{"name": "pixels", "type": "dense", "dim": 784}],
    "layers": [{"name": "hidden", "type": "dense", "inputs": ["pixels"], "units": 32},
               {"name": "act", "type": "prelu", "inputs": ["hidden"], "alpha_init": 0.1},
               {"name": "logits", "type": "dense", "inputs": ["act"], "units": 10}],
    "outputs": [{"layer": "logits", "loss": "softmax_cross_entropy"}]})");
  const auto model = tmp / "model";
  auto job = DeriveJob(
      "job-fmnist-mlp.json", tmp / "job.json", 100, 50, model,
      Json{{"model", model_config},
           {"plugins", Json::array({plugin})},
           {"checkpoint", {{"every_steps", 0}, {"every_seconds", 0}, {"max_to_keep", 5}}}});
  TrainToEnd(job, 180s);
  const auto bundle =
      ExportAndCompare(tmp, model, 100, ReadConfig("job-fmnist-mlp.json")["eval_data"], 10000);
  auto manifest = ReadJsonFile((bundle / "bundle.json").string());
  REQUIRE(manifest.ok());
  CHECK((*manifest)["job"]["plugins"] == Json::array({"plugins/0-libexample_layers.so"}));
  CHECK(ReadFile(bundle / "plugins" / "0-libexample_layers.so") == ReadFile(plugin));
}

TEST_CASE(
    "a CTR model with lazy, partitioned embedding tables: live rows only, scores equal the evaluator's") {
  TempDir tmp;
  const auto data = tmp / "ctr-data";
  auto gen = StartLauncher(
      {"gen-ctr", "--out", data.string(), "--train-examples", "20000", "--eval-examples", "3000"});
  REQUIRE(gen->WaitExit(120s) == std::optional<int>(0));
  Json model_config = ReadConfig("job-ctr-emb.json")["model"];
  for (auto& field : model_config["fields"]) {
    if (field["table"] == "user" || field["table"] == "ad" || field["table"] == "site")
      field["lazy"] = true;
  }
  const auto model = tmp / "model";
  auto job = DeriveJob(
      "job-ctr-emb.json", tmp / "job.json", 150, 50, model,
      Json{{"model", model_config},
           {"base_dir", data.string()},
           {"partitioner", {{"type", "fixed"}, {"num_shards", 3}}},
           {"checkpoint", {{"every_steps", 0}, {"every_seconds", 0}, {"max_to_keep", 5}}}});
  {
    auto spec = LocalCluster();
    Tasks tasks;
    for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
    tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
    tasks.ExpectAllExit(0, 300s);
  }
  Json eval_data = ReadConfig("job-ctr-emb.json")["eval_data"];
  eval_data["path"] = (data / "eval.libsvm").string();
  const auto bundle = ExportAndCompare(tmp, model, 150, eval_data, 3000);
  CheckNoSlots(bundle, model / "ckpt-150" / "ps-0.shard");

  // The lazy tables hold their live rows only: fewer than their id spaces, and exactly
  // the rows the checkpoint holds.
  auto manifest = ReadJsonFile((bundle / "bundle.json").string());
  REQUIRE(manifest.ok());
  int64_t ckpt_rows = 0;
  for (int p = 0; p < 2; ++p) {
    auto s = ckpt::Inspect((model / "ckpt-150" / ckpt::ShardFileName(p)).string(), false);
    REQUIRE(s.ok());
    for (const auto& r : s->records) {
      if (r.meta.layout.var == "user/embeddings") ckpt_rows += r.meta.stored_rows;
    }
  }
  bool seen = false;
  for (const auto& v : (*manifest)["variables"]) {
    if (v["name"] != "user/embeddings") continue;
    seen = true;
    CHECK(v["lazy"] == true);
    CHECK(v["shards"] == 3);
    CHECK(v["stored_rows"].get<int64_t>() == ckpt_rows);
    CHECK(ckpt_rows > 0);
    CHECK(ckpt_rows < 1000000);
  }
  CHECK(seen);
}

TEST_CASE(
    "a bundle refreshed from a cluster's delta checkpoints scores as one exported at the newest delta") {
  TempDir tmp;
  const auto data = tmp / "ctr-data";
  auto gen = StartLauncher(
      {"gen-ctr", "--out", data.string(), "--train-examples", "20000", "--eval-examples", "1000"});
  REQUIRE(gen->WaitExit(120s) == std::optional<int>(0));
  Json model_config = ReadConfig("job-ctr-emb.json")["model"];
  for (auto& field : model_config["fields"]) {
    field["lazy"] = true;
    if (field["table"] == "ad") field["evict"] = {{"ttl_steps", 20}};  // deltas delete rows
  }
  constexpr int64_t kSteps = 3000;  // about 2 s here: several deltas at 0.2 s
  const auto model = tmp / "model";
  // ckpt-0 and the final checkpoint are full, every other one a delta.
  auto job = DeriveJob("job-ctr-emb.json", tmp / "job.json", kSteps, 100, model,
                       Json{{"model", model_config},
                            {"base_dir", data.string()},
                            {"checkpoint",
                             {{"every_steps", 0},
                              {"every_seconds", 0},
                              {"delta_every_seconds", 0.2},
                              {"max_deltas", 100000},
                              {"delta_max_fraction", 1000}}}});
  {
    auto spec = LocalCluster();
    Tasks tasks;
    for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
    tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
    tasks.ExpectAllExit(0, 300s);
  }
  ckpt::CheckpointInfo chain{.global_step = 0, .dir = (model / "ckpt-0").string(), .manifest = {}};
  REQUIRE(ckpt::LoadDeltaChain(&chain, ckpt::Verify::kFooters, nullptr).ok());
  REQUIRE(chain.deltas.size() >= 2);
  const int64_t first = chain.deltas.front().global_step;
  const int64_t newest = chain.deltas.back().global_step;
  Note("ckpt-0 + " + std::to_string(chain.deltas.size()) + " deltas, steps " +
       std::to_string(first) + ".." + std::to_string(newest));
  auto export_at = [&](int64_t step) {
    std::string name = "b";
    name += std::to_string(step);
    const auto out = tmp / name;
    auto e = StartLauncher(
        {"export", model.string(), "--out", out.string(), "--step", std::to_string(step)},
        "pstrain export");
    REQUIRE(e->WaitExit(120s) == std::optional<int>(0));
    // A delta's directory is in its base's.
    auto manifest = ReadJsonFile((out / "bundle.json").string());
    REQUIRE(manifest.ok());
    CHECK((*manifest)["source"]["checkpoint"] == "ckpt-0/delta-" + std::to_string(step));
    return out.string();
  };
  const std::string old_bundle = export_at(first), new_bundle = export_at(newest);
  Json eval_data = ReadConfig("job-ctr-emb.json")["eval_data"];
  eval_data["path"] = (data / "eval.libsvm").string();
  const auto data_file = tmp / "data.json";
  WriteFile(data_file, eval_data.dump());
  // predict from the model dir at a delta names the delta's directory too.
  std::vector<std::string> said;
  REQUIRE(Predict({"--model", model.string(), "--step", std::to_string(first)}, data_file,
                  tmp / "scores.txt", tmp / "metrics.json", &said) == 0);
  CHECK(std::any_of(said.begin(), said.end(), [&](const std::string& l) {
    return l.find("scored with checkpoint " +
                  (model / "ckpt-0" / ("delta-" + std::to_string(first))).string() + " (step " +
                  std::to_string(first) + ")") != std::string::npos;
  }));

  const ExampleRun want = RunExample({new_bundle, data_file.string(), "256"});
  REQUIRE(want.rc == std::optional<int>(0));
  REQUIRE(want.scores.size() == 256);
  const ExampleRun stale = RunExample({old_bundle, data_file.string(), "256"});
  REQUIRE(stale.rc == std::optional<int>(0));
  CHECK(stale.scores != want.scores);
  // The final checkpoint is full: the bundle of ckpt-0's chain must be reloaded.
  const ExampleRun refused =
      RunExample({"--refresh-from", model.string(), old_bundle, data_file.string(), "256"});
  CHECK(refused.rc == std::optional<int>(1));
  CHECK(Says(refused, "newer full checkpoint ckpt-" + std::to_string(kSteps)));
  // Without it, ckpt-0's chain is the newest: the refresh applies every delta after the
  // bundle's, and the scores are those of the bundle exported at the newest delta.
  std::filesystem::remove_all(model / ("ckpt-" + std::to_string(kSteps)));
  const ExampleRun refreshed =
      RunExample({"--refresh-from", model.string(), old_bundle, data_file.string(), "256"});
  CHECK(refreshed.rc == std::optional<int>(0));
  CHECK(Says(refreshed, "refreshed from step " + std::to_string(first) + " to " +
                            std::to_string(newest) + " (" +
                            std::to_string(chain.deltas.size() - 1) +
                            " deltas of ckpt-0; scoring paused "));
  CHECK(refreshed.scores ==
        want.scores);  // bit-identical (9 significant digits: a float32 exactly)
  for (const auto& l : refreshed.said) Note(l);
}

}  // namespace
}  // namespace ps::integ

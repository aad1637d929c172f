// Inference bundles (libps/serving/bundle.h) without a cluster: a model dir with one
// checkpoint written from a Store trained in-process (Adam slots, a lazy table), exported,
// read back and scored; and every way a bundle can be damaged.
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_checkpointer.h"
#include "libps/ckpt/store_io.h"
#include "libps/client/param_fetcher.h"
#include "libps/client/ps_link.h"
#include "libps/core/crc32c.h"
#include "libps/core/json.h"
#include "libps/scoring/scoring.h"
#include "libps/serving/bundle.h"
#include "libps/serving/params.h"
#include "libps/serving/serving.h"
#include "test/support/temp_dir.h"

namespace ps::serving {
namespace {

using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

constexpr int64_t kStep = 40;
constexpr int64_t kLazyVocab = int64_t{1} << 30;

Json JobJson() {
  return Json::parse(R"({
    "model": {"type": "embedding_mlp",
              "fields": [{"table": "user", "vocab": )" +
                     std::to_string(kLazyVocab) + R"(, "dim": 4, "lazy": true},
                         {"table": "site", "vocab": 50, "dim": 4}],
              "dense_dim": 2, "hidden": [8], "classes": 1},
    "train_data": {"format": "libsvm", "path": "unused.libsvm", "num_features": 10},
    "optimizer": {"type": "adam", "learning_rate": 0.05},
    "partitioner": {"type": "fixed", "num_shards": 2},
    "batch_size": 16, "steps": 100, "seed": 9
  })");
}

// A batch of `n` examples: a user id (mostly never trained) and a site id per example.
model::Batch MakeBatch(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  model::Batch b;
  b.size = n;
  b.dense_dim = 2;
  b.sparse.resize(2);
  for (int64_t i = 0; i < n; ++i) {
    b.dense.push_back(static_cast<float>(rng() % 100) / 100.0f);
    b.dense.push_back(static_cast<float>(rng() % 100) / 50.0f);
    for (int f = 0; f < 2; ++f) {
      b.sparse[f].offsets.push_back(i);
      const int64_t user =
          static_cast<int64_t>(rng() % 400) * (kLazyVocab / 400);  // both partitions
      b.sparse[f].ids.push_back(f == 0 ? user : static_cast<int64_t>(rng() % 50));
    }
    b.labels.push_back(static_cast<float>(rng() % 2));
  }
  for (auto& f : b.sparse) f.offsets.push_back(n);
  return b;
}

// A graph with examples/plugin's layer "prelu" (the library at `plugin`) on 2 dense inputs.
Json PluginJobJson(const std::string& plugin) {
  Json job = Json::parse(R"({
    "model": {"type": "graph", "inputs": [{"name": "x", "type": "dense", "dim": 2}],
              "layers": [{"name": "h", "type": "dense", "inputs": ["x"], "units": 4},
                         {"name": "act", "type": "prelu", "inputs": ["h"], "alpha_init": 0.1},
                         {"name": "out", "type": "dense", "inputs": ["act"], "units": 1}],
              "outputs": [{"layer": "out", "loss": "sigmoid_cross_entropy"}]},
    "train_data": {"format": "libsvm", "path": "unused.libsvm", "num_features": 2},
    "optimizer": {"type": "adam", "learning_rate": 0.05},
    "batch_size": 16, "steps": 100, "seed": 9
  })");
  job["plugins"] = Json::array({plugin});
  return job;
}

model::Batch DenseBatch(int64_t n) {
  model::Batch b;
  b.size = n;
  b.dense_dim = 2;
  for (int64_t i = 0; i < 2 * n; ++i) b.dense.push_back(static_cast<float>(i % 7) / 3.0f - 1.0f);
  return b;
}

// model_dir with job.json and a committed ckpt-<kStep> of 2 ps tasks, trained in-process
// (`train`: through the same plan and fetcher a worker uses; else the initial values).
// Train and Save go on from there: more steps, delta checkpoints, full ones, written by
// the ps's own checkpointer (ckpt::ShardCheckpointer), as the chief has them written.
struct ModelDir {
  TempDir tmp;
  std::string dir = tmp / "model";
  std::unique_ptr<model::Model> model;
  std::vector<std::unique_ptr<ps::server::Store>>
      stores;  // one per ps task, as the cluster has them
  std::vector<std::unique_ptr<ckpt::ShardCheckpointer>> checkpointers;
  std::unique_ptr<client::ParamFetcher> fetcher;
  int64_t trained = 0;  // steps

  // final_base: ckpt-<kStep> is the run's final checkpoint (false: deltas follow).
  explicit ModelDir(const Json& job_json = JobJson(), bool train = true, bool final_base = true) {
    Json json = job_json;
    json["base_dir"] = tmp.path();
    WriteBytes(dir + "/job.json", json.dump(2));
    auto job = job::ParseJob(json, tmp.path());
    REQUIRE(job.ok());
    auto built = model::BuildModel(job->model, "job.model");
    REQUIRE(built.ok());
    model = std::move(*built);
    auto plan = job::PlanVariables(*job, *model, 2);
    REQUIRE(plan.ok());
    std::vector<std::unique_ptr<client::PsLink>> links;
    for (int p = 0; p < 2; ++p) {
      stores.push_back(std::make_unique<ps::server::Store>());
      REQUIRE(stores[p]->Configure(job->optimizer).ok());
      links.push_back(client::LocalPsLink(stores[p].get()));
      checkpointers.push_back(std::make_unique<ckpt::ShardCheckpointer>(stores[p].get(), p));
    }
    for (const auto& s : plan->shards) {
      const auto& v = *std::find_if(plan->variables.begin(), plan->variables.end(),
                                    [&](const auto& d) { return d.name == s.layout.var; });
      REQUIRE(stores[s.ps]
                  ->Create(
                      {.layout = s.layout, .init = v.init, .seed = job->seed, .row_policy = v.rows})
                  .ok());
    }
    auto f = client::ParamFetcher::Create(*plan, std::move(links));
    REQUIRE(f.ok());
    fetcher = std::move(*f);
    if (train) Train(kStep);
    trained = kStep;
    Save(kStep, std::nullopt, 0, true, final_base);
  }

  // Trains steps [trained, upto), step s on MakeBatch(16, batch_seed + s).
  void Train(int64_t upto, uint64_t batch_seed = 100) {
    model::Grads grads;
    for (; trained < upto; ++trained) {
      model::Batch batch = MakeBatch(16, batch_seed + static_cast<uint64_t>(trained));
      REQUIRE(fetcher->Fetch(*model, batch).ok());
      REQUIRE(model->ForwardBackward(batch, fetcher->params(), &grads).ok());
      REQUIRE(fetcher->Push(grads, trained).ok());
    }
  }

  // Every ps saves the checkpoint of `step` (a delta of `parent` in `base`'s chain when
  // base is set), committed unless `commit` is false; `final`: the run's last.
  void Save(int64_t step, std::optional<int64_t> base = std::nullopt, int64_t parent = 0,
            bool commit = true, bool final = false) {
    ckpt::Manifest m{.global_step = step,
                     .unix_time = 1,
                     .final = final,
                     .num_ps = 2,
                     .shards = {},
                     .extra = Json::object(),
                     .base = base,
                     .parent = base ? parent : 0};
    for (auto& ck : checkpointers) {
      auto r = ck->Save({.model_dir = dir,
                         .global_step = step,
                         .delta_base = base.value_or(-1),
                         .delta_parent = base ? parent : -1});
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      m.shards.push_back({r->file, r->bytes, r->digest});
    }
    if (commit) REQUIRE(ckpt::CommitCheckpoint(dir, m).ok());
  }
};

// Rewrites bundle.json after `edit`, with a valid checksum (a consistent, wrong manifest).
void EditManifest(const std::string& bundle, const std::function<void(Json&)>& edit) {
  const std::string path = bundle + "/bundle.json";
  Json m = Json::parse(ReadBytes(path));
  m.erase("checksum");
  edit(m);
  const std::string compact = m.dump();
  m["checksum"] = MaskedCrc32c(Crc32c(0, compact.data(), compact.size()));
  WriteBytes(path, m.dump(2));
}

void FlipByteAt(const std::string& path, size_t at) {
  std::string bytes = ReadBytes(path);
  REQUIRE(at < bytes.size());
  bytes[at] = static_cast<char>(~static_cast<unsigned char>(bytes[at]));
  WriteBytes(path, bytes);
}

// md exported to md.tmp / name, at `step` (default: the newest checkpoint).
std::string Exported(const ModelDir& md, const std::string& name = "bundle",
                     std::optional<int64_t> step = std::nullopt) {
  const std::string out = md.tmp / name;
  auto r = ExportBundle({.model_dir = md.dir, .step = step, .out_dir = out});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return out;
}

TEST_CASE(
    "export: values only (no optimizer slots), lazy tables as their live rows, the checkpoint's values") {
  ModelDir md;
  const std::string out = Exported(md);
  // Only the bundle's files; the temporary directory is gone.
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(md.tmp.path()))
    names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"bundle", "model"});
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(out))
    files.insert(e.path().filename().string());
  CHECK(files == std::set<std::string>{"bundle.json", "weights.shard"});

  // The checkpoint's records (values and Adam's m, v) by shard.
  std::map<std::pair<std::string, int>, ckpt::ShardRecord> ckpt_records;
  for (int p = 0; p < 2; ++p) {
    auto reader = ckpt::ShardReader::Open(md.dir + "/ckpt-40/" + ckpt::ShardFileName(p));
    REQUIRE(reader.ok());
    auto records = reader->ReadRecords();
    REQUIRE(records.ok());
    for (auto& r : *records) ckpt_records[{r.meta.layout.var, r.meta.layout.shard}] = std::move(r);
  }
  auto reader = ckpt::ShardReader::Open(out + "/weights.shard");
  REQUIRE(reader.ok());
  auto records = reader->ReadRecords();
  REQUIRE(records.ok());
  REQUIRE(records->size() == ckpt_records.size());
  int lazy_records = 0;
  for (const auto& r : *records) {
    INFO(r.meta.layout.var << " shard " << r.meta.layout.shard);
    CHECK(r.meta.slot_names.empty());
    CHECK(r.slots.empty());
    const auto& c = ckpt_records.at({r.meta.layout.var, r.meta.layout.shard});
    CHECK(c.slots.size() == 2);  // Adam's m and v were in the checkpoint
    CHECK(r.meta.layout == c.meta.layout);
    CHECK(r.row_ids == c.row_ids);
    CHECK(r.values == c.values);  // bit-exact
    if (r.meta.layout.lazy) {
      ++lazy_records;
      CHECK(!r.row_ids.empty());
      CHECK(r.meta.stored_rows < r.meta.layout.rows);
    }
  }
  CHECK(lazy_records == 2);  // the user table, in two partitions

  auto manifest = ReadJsonFile(out + "/bundle.json");
  REQUIRE(manifest.ok());
  CHECK((*manifest)["format"] == "pstrain-bundle");
  CHECK((*manifest)["version"] == 1);
  CHECK((*manifest)["source"]["checkpoint"] == "ckpt-40");
  CHECK((*manifest)["source"]["global_step"] == kStep);
  CHECK((*manifest)["source"]["final"] == true);
  CHECK((*manifest)["num_ps"] == 2);
  CHECK(!(*manifest)["job"].contains("base_dir"));
  CHECK((*manifest)["job"]["model"] == JobJson()["model"]);
  const Json& user = (*manifest)["variables"][0];
  CHECK(user["name"] == "user/embeddings");
  CHECK(user["shape"] == Json::array({kLazyVocab, 4}));
  CHECK(user["lazy"] == true);
  CHECK(user["shards"] == 2);
}

TEST_CASE(
    "a loaded bundle scores bit-identically to the checkpoint it came from, through the public API") {
  ModelDir md;
  const std::string out = Exported(md);
  auto bundle = Bundle::Load(out);
  INFO(bundle.status().ToString());
  REQUIRE(bundle.ok());
  const BundleInfo& info = (*bundle)->info();
  CHECK(info.source_step == kStep);
  CHECK(info.format_version == 1);
  REQUIRE(info.heads.size() == 1);
  CHECK(info.heads[0].outputs == 1);
  CHECK(info.heads[0].loss == "sigmoid_cross_entropy");
  CHECK(info.eval_batch_size == 256);

  // The evaluator's path: the checkpoint's shard files into a store, scored by ScoreBatch.
  std::vector<std::string> warnings;
  auto from_ckpt = LoadModelDir(md.dir, std::nullopt, &warnings);
  REQUIRE(from_ckpt.ok());
  auto fetcher = from_ckpt->loaded.NewFetcher();
  REQUIRE(fetcher.ok());

  auto scorer = (*bundle)->NewScorer();
  REQUIRE(scorer.ok());
  auto other = (*bundle)->NewScorer();  // a second thread's
  REQUIRE(other.ok());
  for (uint64_t seed : {1u, 2u, 3u}) {
    model::Batch batch = MakeBatch(64, seed);
    auto want = scoring::ScoreBatch(*from_ckpt->model, **fetcher, batch);
    REQUIRE(want.ok());
    auto got = (*scorer)->Score(batch);
    REQUIRE(got.ok());
    REQUIRE(got->heads.size() == 1);
    CHECK(got->examples == 64);
    CHECK(got->heads[0] == want->probabilities);  // bit-identical floats
    batch.labels.clear();                         // labels are optional
    auto again = (*other)->Score(batch);
    REQUIRE(again.ok());
    CHECK(again->heads[0] == want->probabilities);
  }
  // The bundle stays usable while a scorer holds it.
  auto keep = std::move(*scorer);
  bundle = Result<std::shared_ptr<Bundle>>(NotFound("dropped"));
  CHECK(keep->Score(MakeBatch(4, 7)).ok());
  // A batch that does not fit the model.
  model::Batch bad = MakeBatch(4, 8);
  bad.dense_dim = 3;
  CHECK(keep->Score(bad).status().code() == Code::kInvalidArgument);
}

TEST_CASE(
    "scoring data without examples is an error, as in the evaluator, with or without an observer") {
  ModelDir md;
  auto b = LoadBundle(Exported(md));
  REQUIRE(b.ok());
  WriteBytes(md.tmp / "empty.libsvm", "");
  const Json data = {{"format", "libsvm"}, {"path", "empty.libsvm"}, {"num_features", 10}};
  int batches = 0;
  for (bool observe : {false, true}) {
    auto pass = scoring::ScoreData(
        b->loaded, *b->model, data, md.tmp.path(), "--data",
        observe ? scoring::BatchObserver([&](const model::Batch&, const model::EvalOutput&) {
          ++batches;
          return Status::Ok();
        })
                : scoring::BatchObserver());
    INFO("observe " << observe << ": " << pass.status().ToString());
    CHECK(pass.status().code() == Code::kInvalidArgument);
    CHECK(pass.status().message() == "--data: no examples");
  }
  CHECK(batches == 0);
}

TEST_CASE("scorers of one bundle score concurrently, each as it would alone") {
  ModelDir md;
  auto bundle = Bundle::Load(Exported(md));
  REQUIRE(bundle.ok());
  auto alone = (*bundle)->NewScorer();
  REQUIRE(alone.ok());
  std::vector<model::Batch> batches;
  std::vector<std::vector<float>> want;
  for (uint64_t i = 0; i < 8; ++i) {
    batches.push_back(MakeBatch(32, 50 + i));
    auto s = (*alone)->Score(batches.back());
    REQUIRE(s.ok());
    want.push_back(s->heads[0]);
  }
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto scorer = (*bundle)->NewScorer();
      if (!scorer.ok()) {
        ++mismatches[t];
        return;
      }
      for (int round = 0; round < 20; ++round) {
        const size_t b = static_cast<size_t>(round + t) % batches.size();
        auto s = (*scorer)->Score(batches[b]);
        if (!s.ok() || s->heads[0] != want[b]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(kThreads, 0));
}

TEST_CASE("damage to a bundle is DataLoss naming the file") {
  ModelDir md;
  const std::string out = Exported(md);
  REQUIRE(LoadBundle(out).ok());
  const std::string weights = out + "/weights.shard";
  const std::string manifest = out + "/bundle.json";
  const std::string good_weights = ReadBytes(weights);
  const std::string good_manifest = ReadBytes(manifest);
  auto restore = [&] {
    WriteBytes(weights, good_weights);
    WriteBytes(manifest, good_manifest);
  };
  auto expect = [&](const std::string& what, Code code, const std::string& text) {
    auto r = LoadBundle(out);
    INFO(what << ": " << r.status().ToString());
    CHECK(r.status().code() == code);
    CHECK(r.status().message().find(text) != std::string::npos);
    restore();
  };

  FlipByteAt(weights, good_weights.size() / 2);
  expect("a flipped weight byte", Code::kDataLoss, weights + ": checksum mismatch");
  FlipByteAt(weights, 3);
  expect("a flipped header byte", Code::kDataLoss, weights + ": checksum mismatch");
  WriteBytes(weights, good_weights.substr(0, good_weights.size() - 10));
  expect("truncated weights", Code::kDataLoss,
         weights + ": " + std::to_string(good_weights.size() - 10) + " bytes");
  std::filesystem::remove(weights);
  expect("missing weights", Code::kDataLoss, weights + ": missing");
  // A digit of a number in the manifest (the first digit of the step).
  const size_t at = good_manifest.find("\"global_step\": ") + 15;
  FlipByteAt(manifest, at);
  expect("a flipped manifest byte", Code::kDataLoss, manifest + ":");
  WriteBytes(manifest, good_manifest.substr(0, good_manifest.size() / 2));
  expect("a truncated manifest", Code::kDataLoss, manifest + ":");
  std::filesystem::remove(manifest);
  expect("no manifest", Code::kNotFound, "not a pstrain bundle");

  // Consistent manifests that do not match the files.
  EditManifest(out, [](Json& m) { m["version"] = 2; });
  expect("a newer version", Code::kInvalidArgument, "bundle version 1, got 2");
  EditManifest(out, [](Json& m) { m["variables"][0]["stored_rows"] = 1; });
  expect("another variable list", Code::kDataLoss, "variables disagree with weights.shard");
  EditManifest(out, [](Json& m) { m["files"] = Json::array(); });
  expect("weights not listed", Code::kDataLoss, "does not list weights.shard");
  EditManifest(out, [](Json& m) { m["files"][0]["name"] = "../model/job.json"; });
  expect("a path outside", Code::kInvalidArgument, "is not a file inside the bundle");
  // Plug-ins: only verified files under plugins/ are loaded.
  EditManifest(out, [](Json& m) { m["job"]["plugins"] = Json::array({"plugins/0-libx.so"}); });
  expect("an unlisted plug-in", Code::kDataLoss,
         "job.plugins[0]: \"plugins/0-libx.so\" is not listed in files");
  for (const std::string name :
       {"/usr/lib/libx.so", "plugins/../../model/libx.so", "weights.shard", ""}) {
    EditManifest(out, [&](Json& m) { m["job"]["plugins"] = Json::array({name}); });
    expect("plug-in " + name, Code::kInvalidArgument,
           "job.plugins[0]: \"" + name + "\" is not a file under");
  }
  EditManifest(out, [](Json& m) { m["job"]["partitioner"]["num_shards"] = 3; });
  // The weights load into any partitioning (the restore reshards), but the manifest's
  // variable list then disagrees with what was loaded.
  expect("another layout", Code::kDataLoss, "variables disagree with weights.shard");
  EditManifest(out, [](Json& m) { m["surprise"] = 1; });
  expect("an unknown key", Code::kInvalidArgument, "surprise: unknown key");
  // The checksum is over the whole manifest.
  Json m = Json::parse(good_manifest);
  m["source"]["global_step"] = 41;
  WriteBytes(manifest, m.dump(2));
  expect("an edited value", Code::kDataLoss, "checksum mismatch (the manifest is damaged)");
  REQUIRE(LoadBundle(out).ok());
}

TEST_CASE(
    "export refuses an existing bundle, names a missing step, and writes into an empty directory") {
  ModelDir md;
  const std::string out = Exported(md);
  auto again = ExportBundle({.model_dir = md.dir, .step = std::nullopt, .out_dir = out});
  CHECK(again.status().code() == Code::kAlreadyExists);
  auto step = ExportBundle({.model_dir = md.dir, .step = 7, .out_dir = md.tmp / "b7"});
  CHECK(step.status().code() == Code::kNotFound);
  CHECK(step.status().message().find("no committed checkpoint at step 7") != std::string::npos);
  CHECK(!std::filesystem::exists(md.tmp / "b7"));
  std::filesystem::create_directories(md.tmp / "empty");
  auto into_empty = ExportBundle({.model_dir = md.dir, .step = kStep, .out_dir = md.tmp / "empty"});
  REQUIRE(into_empty.ok());
  CHECK(LoadBundle(md.tmp / "empty").ok());
  // A trailing separator names the same directory.
  auto slash = ExportBundle({.model_dir = md.dir, .step = kStep, .out_dir = md.tmp / "slash/"});
  INFO(slash.status().ToString());
  REQUIRE(slash.ok());
  CHECK(slash->info.dir == md.tmp / "slash");
  CHECK(LoadBundle(md.tmp / "slash").ok());
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(md.tmp.path()))
    names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"bundle", "empty", "model", "slash"});
  // A damaged newest checkpoint with nothing older: a DataLoss naming it, no bundle.
  const std::string shard = md.dir + "/ckpt-40/ps-1.shard";
  std::string bytes = ReadBytes(shard);
  bytes[bytes.size() / 2] = static_cast<char>(~static_cast<unsigned char>(bytes[bytes.size() / 2]));
  WriteBytes(shard, bytes);
  auto damaged =
      ExportBundle({.model_dir = md.dir, .step = std::nullopt, .out_dir = md.tmp / "b2"});
  CHECK(damaged.status().code() == Code::kDataLoss);
  CHECK(damaged.status().message().find("ps-1.shard") != std::string::npos);
  CHECK(!std::filesystem::exists(md.tmp / "b2"));
}

TEST_CASE(
    "the bundle directory has the mode of a directory this process creates, not mkdtemp's 0700") {
  ModelDir md;
  for (mode_t mask : {mode_t{022}, mode_t{027}}) {
    const mode_t old = ::umask(mask);
    const std::string out = md.tmp / ("bundle-" + std::to_string(mask));
    auto r = ExportBundle({.model_dir = md.dir, .step = std::nullopt, .out_dir = out});
    ::umask(old);
    REQUIRE(r.ok());
    struct stat st {};
    REQUIRE(::stat(out.c_str(), &st) == 0);
    INFO("umask " << std::oct << mask << ": mode " << (st.st_mode & 07777));
    CHECK((st.st_mode & 07777) == (0777 & ~mask));
    REQUIRE(::stat((out + "/weights.shard").c_str(), &st) == 0);
    CHECK((st.st_mode & 0444) == (0444 & ~mask));  // readable by whom the umask allows
  }
}

TEST_CASE("one process loads several bundles of a plug-in model, and one bundle by two paths") {
  const char* plugin = std::getenv("PSTRAIN_EXAMPLE_PLUGIN");
  REQUIRE(plugin != nullptr);
  ModelDir md(PluginJobJson(plugin), false);  // the job loads the plug-in from where it was built
  const std::string b1 = Exported(md, "b1"), b2 = Exported(md, "b2");
  CHECK(ReadBytes(b1 + "/plugins/0-libexample_layers.so") == ReadBytes(plugin));
  const model::Batch batch = DenseBatch(8);
  std::vector<float> first;
  // Each bundle has its own copy of the library; "./" names the same copy another way.
  for (const std::string& dir : {b1, b2, md.tmp.path() + "/./b1"}) {
    auto bundle = Bundle::Load(dir);
    INFO(dir << ": " << bundle.status().ToString());
    REQUIRE(bundle.ok());
    auto scorer = (*bundle)->NewScorer();
    REQUIRE(scorer.ok());
    auto scores = (*scorer)->Score(batch);
    REQUIRE(scores.ok());
    if (first.empty()) first = scores->heads[0];
    CHECK(scores->heads[0] == first);
  }
  // A plug-in whose name has ".." in it (not as a path component).
  TempDir lib;
  WriteBytes(lib / "libprelu..so", ReadBytes(plugin));
  ModelDir dots(PluginJobJson(lib / "libprelu..so"), false);
  const std::string b3 = Exported(dots);
  CHECK(std::filesystem::exists(b3 + "/plugins/0-libprelu..so"));
  auto bundle = Bundle::Load(b3);
  INFO(bundle.status().ToString());
  CHECK(bundle.ok());
}

TEST_CASE("an export that fails after making its temporary directory removes it") {
  const char* plugin = std::getenv("PSTRAIN_EXAMPLE_PLUGIN");
  REQUIRE(plugin != nullptr);
  TempDir lib;
  WriteBytes(lib / "libgone.so", ReadBytes(plugin));
  ModelDir md(PluginJobJson(lib / "libgone.so"), false);
  // The job still loads (the library is loaded already), but its copy into the bundle,
  // after the weights were written, fails.
  std::filesystem::remove(lib / "libgone.so");
  auto r = ExportBundle({.model_dir = md.dir, .step = std::nullopt, .out_dir = md.tmp / "bundle"});
  INFO(r.status().ToString());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(r.status().message().find(lib / "libgone.so") != std::string::npos);
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(md.tmp.path()))
    names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"model"});
}

// ---- Refreshing a loaded bundle from delta checkpoints (serving.h, "Refreshing").

// JobJson with a user table whose rows are evicted 35 steps after their last push: the
// deltas of steps 50..70 delete rows of ckpt-40, and rows pushed last in steps 36..39
// are in ckpt-40 and no delta (a refresh must keep them).
Json EvictingJobJson() {
  Json job = JobJson();
  job["model"]["fields"][0]["evict"] = {{"ttl_steps", 35}};
  return job;
}

// ckpt-40 and its deltas 50, 60, 70 (each against the previous), trained in between
// (steps from 40 on MakeBatch(16, batch_seed + step)); delta 70 is the run's final
// checkpoint.
struct DeltaModelDir : ModelDir {
  explicit DeltaModelDir(const Json& job = EvictingJobJson(), uint64_t batch_seed = 100)
      : ModelDir(job, true, /*final_base=*/false) {
    int64_t parent = kStep;
    for (int64_t step : {50, 60, 70}) {
      Train(step, batch_seed);
      Save(step, kStep, parent, true, /*final=*/step == 70);
      parent = step;
    }
  }
};

std::shared_ptr<Bundle> Loaded(const std::string& dir) {
  auto b = Bundle::Load(dir);
  INFO(b.status().ToString());
  REQUIRE(b.ok());
  return *b;
}

// The scores of batches 1..4 of MakeBatch (users over the whole pool, most never trained).
std::vector<std::vector<float>> ScoresOf(const Bundle& bundle) {
  auto scorer = bundle.NewScorer();
  REQUIRE(scorer.ok());
  std::vector<std::vector<float>> out;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto s = (*scorer)->Score(MakeBatch(64, seed));
    REQUIRE(s.ok());
    out.push_back(s->heads[0]);
  }
  return out;
}

// Every shard of a store: its key -> (lazy: the created rows' ids; values, bit-exact).
std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> Contents(
    const ps::server::Store& store) {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> out;
  for (const auto& key : store.Keys()) {
    REQUIRE(store
                .Read(key,
                      [&](const ps::server::ShardView& v) {
                        auto& [ids, values] = out[key.var + "/" + std::to_string(key.shard)];
                        if (!v.def.layout.lazy) {
                          values.assign(v.values.begin(), v.values.end());
                          return;
                        }
                        ids.assign(v.row_ids.begin(), v.row_ids.end());
                        for (size_t i = 0; i < v.row_ids.size(); ++i) {
                          auto row = v.row(i, 0);
                          values.insert(values.end(), row.begin(), row.end());
                        }
                      })
                .ok());
  }
  return out;
}

// The global ids of the user table's rows that delta `step` deleted (deleted) and wrote
// (changed or created), from its records.
struct UserRows {
  std::set<int64_t> deleted, written;
};
UserRows DeltaUsers(const ModelDir& md, int64_t step) {
  UserRows out;
  for (int p = 0; p < 2; ++p) {
    auto reader = ckpt::ShardReader::Open(ckpt::DeltaPath(md.dir, kStep, step) + "/" +
                                          ckpt::ShardFileName(p));
    REQUIRE(reader.ok());
    auto records = reader->ReadRecords();
    REQUIRE(records.ok());
    for (const auto& r : *records) {
      if (r.meta.layout.var != "user/embeddings") continue;
      for (int64_t id : r.deleted_ids) out.deleted.insert(r.meta.layout.row_begin + id);
      for (int64_t id : r.row_ids) out.written.insert(r.meta.layout.row_begin + id);
    }
  }
  return out;
}

// Refresh's parts (bundle.h) on `loaded` without a Bundle around it: its rows can be
// looked at. Returns the next BundleInfo.
BundleInfo RefreshedByParts(LoadedBundle& loaded, const std::string& model_dir) {
  RefreshStats stats;
  auto deltas = NewerDeltas(loaded, model_dir, &stats);
  INFO(deltas.status().ToString());
  REQUIRE(deltas.ok());
  bool changed = false;
  REQUIRE(WriteBundleDeltas(loaded, *deltas, &changed).ok());
  BundleInfo next = loaded.info;
  RecordBundleDeltas(loaded, *deltas, &stats, &next);
  return next;
}

// bundle.json's "source" of the bundle in `dir`.
Json SourceOf(const std::string& dir) {
  auto manifest = ReadJsonFile(dir + "/" + kBundleManifest);
  INFO(manifest.status().ToString());
  REQUIRE(manifest.ok());
  return (*manifest)["source"];
}

TEST_CASE("bundle.json's source.checkpoint names the directory that holds the exported step") {
  DeltaModelDir md;
  // A delta lives in its base's directory; a full checkpoint is its own.
  const Json at50 = SourceOf(Exported(md, "b50", 50));
  CHECK(at50["checkpoint"] == "ckpt-40/delta-50");
  CHECK(at50["global_step"] == 50);
  CHECK(at50["base_step"] == kStep);
  CHECK(SourceOf(Exported(md, "b70"))["checkpoint"] == "ckpt-40/delta-70");  // the newest: a delta
  const Json at40 = SourceOf(Exported(md, "b40", kStep));
  CHECK(at40["checkpoint"] == "ckpt-40");
  CHECK(at40["global_step"] == kStep);
  // The name is a directory of the model dir holding that step's MANIFEST.
  for (const Json& source : {at50, at40}) {
    auto m = ckpt::ReadManifest(md.dir + "/" + source["checkpoint"].get<std::string>());
    INFO(source.dump() << ": " << m.status().ToString());
    REQUIRE(m.ok());
    CHECK(m->global_step == source["global_step"]);
  }
  // Exported at a delta, the bundle loads and refreshes (Refresh goes by base_step and
  // the digests, not by this name).
  auto bundle = Loaded(md.tmp / "b50");
  auto stats = bundle->Refresh(md.dir);
  REQUIRE(stats.ok());
  CHECK(bundle->info().source_step == 70);
}

TEST_CASE(
    "a refreshed bundle is bit-identical to one exported at the newest delta, rows and scores") {
  DeltaModelDir md;
  const std::string newest = Exported(md, "b70");
  auto fresh = Loaded(newest);
  REQUIRE(fresh->info().source_step == 70);
  const auto want = ScoresOf(*fresh);
  auto want_rows = LoadBundle(newest);
  REQUIRE(want_rows.ok());
  const auto want_contents = Contents(*want_rows->loaded.store);

  // From the base, and from the first delta.
  for (int64_t from : {kStep, int64_t{50}}) {
    INFO("exported at step " << from);
    const std::string dir = Exported(md, from == kStep ? "b40" : "b50", from);
    auto bundle = Loaded(dir);
    CHECK(bundle->info().source_step == from);
    CHECK(!bundle->info().source_final);
    const auto before = ScoresOf(*bundle);
    CHECK(before != want);  // the deltas change the scores
    auto stats = bundle->Refresh(md.dir);
    INFO(stats.status().ToString());
    REQUIRE(stats.ok());
    CHECK(stats->base_step == kStep);
    CHECK(stats->from_step == from);
    CHECK(stats->to_step == 70);
    CHECK(stats->applied ==
          (from == kStep ? std::vector<int64_t>{50, 60, 70} : std::vector<int64_t>{60, 70}));
    CHECK(stats->warnings.empty());
    CHECK(stats->build_seconds > 0);
    CHECK(stats->copied_bytes > 0);
    const BundleInfo info = bundle->info();
    CHECK(info.source_step == 70);
    CHECK(info.source_final);  // delta 70 is the run's final checkpoint
    CHECK(info.source_base_step == kStep);
    CHECK(info.source_base_digests == fresh->info().source_base_digests);
    CHECK(info.source_delta_digests == fresh->info().source_delta_digests);
    CHECK(bundle->status().ok());
    REQUIRE(info.variables.size() == fresh->info().variables.size());
    for (size_t i = 0; i < info.variables.size(); ++i) {
      CHECK(info.variables[i].name == fresh->info().variables[i].name);
      CHECK(info.variables[i].stored_rows == fresh->info().variables[i].stored_rows);
    }
    CHECK(ScoresOf(*bundle) == want);  // bit-identical floats
    // Nothing newer: a no-op.
    auto again = bundle->Refresh(md.dir);
    REQUIRE(again.ok());
    CHECK(again->applied.empty());
    CHECK(again->to_step == 70);
    CHECK(ScoresOf(*bundle) == want);

    // The rows themselves, through Refresh's two halves on a bundle loaded the same way.
    auto loaded = LoadBundle(dir);
    REQUIRE(loaded.ok());
    CHECK(RefreshedByParts(*loaded, md.dir).source_step == 70);
    CHECK(Contents(*loaded->loaded.store) == want_contents);
  }
}

TEST_CASE(
    "a row a delta evicted leaves the refreshed bundle and scores with its initial value again") {
  DeltaModelDir md;
  const std::string base = Exported(md, "b40", kStep);
  auto loaded = LoadBundle(base);
  REQUIRE(loaded.ok());
  const auto at_base = Contents(*loaded->loaded.store);
  // A user row of the bundle that a delta deleted and no later delta wrote again, read
  // from the deltas' records (not from a restore, which shares the code under test).
  constexpr int64_t kRowsPerShard = kLazyVocab / 2;
  auto in_base = [&](int64_t id) {
    const auto& ids = at_base.at("user/embeddings/" + std::to_string(id / kRowsPerShard)).first;
    return std::find(ids.begin(), ids.end(), id % kRowsPerShard) != ids.end();
  };
  std::set<int64_t> deleted, touched;  // touched: written or deleted by some delta
  for (int64_t step : {50, 60, 70}) {
    UserRows rows = DeltaUsers(md, step);
    for (int64_t id : rows.written) deleted.erase(id);
    for (int64_t id : rows.deleted) {
      if (in_base(id)) deleted.insert(id);
    }
    touched.insert(rows.written.begin(), rows.written.end());
    touched.insert(rows.deleted.begin(), rows.deleted.end());
  }
  std::optional<int64_t> gone;
  if (!deleted.empty()) gone = *deleted.begin();
  REQUIRE(gone.has_value());
  INFO("user " << *gone);
  model::Batch batch = MakeBatch(4, 11);
  for (int64_t i = 0; i < 4; ++i) batch.sparse[0].ids[static_cast<size_t>(i)] = *gone;

  auto bundle = Loaded(base);
  auto scorer = bundle->NewScorer();
  REQUIRE(scorer.ok());
  auto before = (*scorer)->Score(batch);
  REQUIRE(before.ok());
  REQUIRE(bundle->Refresh(md.dir).ok());
  auto after = (*scorer)->Score(batch);  // the same scorer, made before the refresh
  REQUIRE(after.ok());
  auto fresh_scorer = Loaded(Exported(md, "b70"))->NewScorer();
  REQUIRE(fresh_scorer.ok());
  auto want = (*fresh_scorer)->Score(batch);  // the row is absent: its initial value
  REQUIRE(want.ok());
  CHECK(after->heads[0] == want->heads[0]);
  CHECK(after->heads[0] != before->heads[0]);
  // The table has no such row any more: with a row at its initial value the bundle would
  // score the same but hold it; the store shows it is gone.
  CHECK(RefreshedByParts(*loaded, md.dir).source_step == 70);
  // Rows of ckpt-40 that no delta wrote or deleted are live at step 70 with their values
  // of step 40 (a refresh that dropped the lazy tables' rows first would lose them).
  const auto refreshed = Contents(*loaded->loaded.store);
  int kept = 0;
  for (int shard = 0; shard < 2; ++shard) {
    const std::string key = "user/embeddings/" + std::to_string(shard);
    const auto& [ids, values] = at_base.at(key);
    const auto& [new_ids, new_values] = refreshed.at(key);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (touched.contains(shard * kRowsPerShard + ids[i])) continue;
      ++kept;
      auto at = std::find(new_ids.begin(), new_ids.end(), ids[i]);
      REQUIRE(at != new_ids.end());
      const auto j = static_cast<size_t>(at - new_ids.begin());
      CHECK(std::equal(values.begin() + static_cast<std::ptrdiff_t>(i * 4),
                       values.begin() + static_cast<std::ptrdiff_t>(i * 4 + 4),
                       new_values.begin() + static_cast<std::ptrdiff_t>(j * 4)));
    }
  }
  REQUIRE(kept > 0);
  const ps::server::ShardKey key{"user/embeddings", static_cast<int>(*gone / kRowsPerShard)};
  const auto after_rows = Contents(*loaded->loaded.store);
  const auto& ids = after_rows.at("user/embeddings/" + std::to_string(key.shard)).first;
  CHECK(std::find(ids.begin(), ids.end(), *gone % kRowsPerShard) == ids.end());
  // It pulls as a row never created does: a fresh shard of the same def.
  auto def = loaded->loaded.store->GetDef(key);
  REQUIRE(def.ok());
  ps::server::Store untouched;
  REQUIRE(untouched.Configure(ps::server::OptimizerSpec{}).ok());
  REQUIRE(untouched.Create(*def).ok());
  const std::vector<int64_t> row{*gone % kRowsPerShard};
  std::vector<float> pulled(4), initial(4), trained(4);
  REQUIRE(loaded->loaded.store->PullRows(key, row, pulled).ok());
  REQUIRE(untouched.PullRows(key, row, initial).ok());
  auto base_again = LoadBundle(base);
  REQUIRE(base_again.ok());
  REQUIRE(base_again->loaded.store->PullRows(key, row, trained).ok());
  CHECK(pulled == initial);
  CHECK(trained != initial);
}

TEST_CASE(
    "a refresh stops before a corrupt delta, naming its file, and ignores an uncommitted one") {
  DeltaModelDir md;
  const std::string base = Exported(md, "b40", kStep);
  const auto at60 = ScoresOf(*Loaded(Exported(md, "b60", 60)));
  const auto at70 = ScoresOf(*Loaded(Exported(md, "b70", 70)));
  // A delta written but never committed (no MANIFEST): it does not exist.
  md.Train(80);
  md.Save(80, kStep, 70, /*commit=*/false);
  REQUIRE(std::filesystem::exists(ckpt::DeltaPath(md.dir, kStep, 80) + "/ps-0.shard"));
  {
    auto bundle = Loaded(base);
    auto stats = bundle->Refresh(md.dir);
    INFO(stats.status().ToString());
    REQUIRE(stats.ok());
    CHECK(stats->applied == std::vector<int64_t>{50, 60, 70});
    CHECK(stats->warnings.empty());
    CHECK(ScoresOf(*bundle) == at70);
  }
  // A flipped byte in the data of the newest committed delta: its footer still matches
  // its MANIFEST, only reading the records finds it.
  const std::string bad = ckpt::DeltaPath(md.dir, kStep, 70) + "/ps-1.shard";
  const std::string good = ReadBytes(bad);
  FlipByteAt(bad, good.size() / 2);
  auto bundle = Loaded(base);
  auto stats = bundle->Refresh(md.dir);
  INFO(stats.status().ToString());
  REQUIRE(stats.ok());
  CHECK(stats->applied == std::vector<int64_t>{50, 60});
  CHECK(stats->to_step == 60);
  REQUIRE(stats->warnings.size() == 1);
  CHECK_THAT(stats->warnings[0], Catch::Contains(bad + ":"));
  CHECK_THAT(stats->warnings[0], Catch::Contains("the delta chain of ckpt-40 stops at step 60"));
  CHECK(bundle->info().source_step == 60);
  CHECK(!bundle->info().source_final);
  CHECK(ScoresOf(*bundle) == at60);  // as exported at the last good delta
  // Repaired, the next refresh picks it up.
  WriteBytes(bad, good);
  auto later = bundle->Refresh(md.dir);
  REQUIRE(later.ok());
  CHECK(later->applied == std::vector<int64_t>{70});
  CHECK(ScoresOf(*bundle) == at70);
}

TEST_CASE(
    "a refresh reads the model dir's job.json as JSON: the training job's plug-ins are not loaded") {
  DeltaModelDir md;
  auto bundle = Loaded(Exported(md, "b40", kStep));
  // The training hosts' plug-in, absent here: parsing the job would dlopen it and fail.
  Json job = ReadJsonFile(md.dir + "/job.json").value();
  job["plugins"] = Json::array({md.tmp / "training-host-only/libmissing_layers.so"});
  WriteBytes(md.dir + "/job.json", job.dump(2));
  auto stats = bundle->Refresh(md.dir);
  INFO(stats.status().ToString());
  REQUIRE(stats.ok());
  CHECK(stats->applied == std::vector<int64_t>{50, 60, 70});
}

TEST_CASE("a newer full checkpoint is an error asking for a reload; the bundle is left as it was") {
  DeltaModelDir md;
  auto bundle = Loaded(Exported(md, "b40", kStep));
  const auto before = ScoresOf(*bundle);
  md.Train(80);
  md.Save(80);
  auto stats = bundle->Refresh(md.dir);
  INFO(stats.status().ToString());
  CHECK(stats.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(stats.status().message(), Catch::Contains("newer full checkpoint ckpt-80"));
  CHECK_THAT(stats.status().message(), Catch::Contains("reload the bundle"));
  CHECK(bundle->info().source_step == kStep);
  CHECK(ScoresOf(*bundle) == before);
  // A model dir whose chain never held the bundle's step: not silently mixed either.
  ModelDir other(EvictingJobJson());
  other.Train(45);
  other.Save(45, kStep, kStep);
  auto fifty = Loaded(Exported(md, "b50", 50));
  auto wrong = fifty->Refresh(other.dir);
  INFO(wrong.status().ToString());
  CHECK(wrong.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(wrong.status().message(),
             Catch::Contains("the bundle's step 50 is not in the newest checkpoint chain"));
  auto none = bundle->Refresh(md.tmp / "nothing");
  CHECK(none.status().code() == Code::kNotFound);
  // Another model's deltas, at the bundle's very steps: refused before anything is read.
  Json job = EvictingJobJson();
  job["model"]["hidden"] = Json::array({6});
  ModelDir another(job);
  another.Train(50);
  another.Save(50, kStep, kStep);
  auto mixed = bundle->Refresh(another.dir);
  INFO(mixed.status().ToString());
  CHECK(mixed.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(mixed.status().message(),
             Catch::Contains(another.dir + "/job.json: its model differs from the bundle's"));
  CHECK(bundle->info().source_step == kStep);
  CHECK(ScoresOf(*bundle) == before);
}

// Replaces model dir `dir` with a copy of `with` (a model dir wiped and trained again).
void ReplaceModelDir(const std::string& dir, const std::string& with) {
  std::filesystem::remove_all(dir);
  std::filesystem::copy(with, dir, std::filesystem::copy_options::recursive);
}

TEST_CASE(
    "a refresh refuses a model dir wiped and trained again, even at the bundle's very steps") {
  DeltaModelDir md;
  auto at40 = Loaded(Exported(md, "b40", kStep));
  auto also40 = Loaded(Exported(md, "b40-also", kStep));
  auto at50 = Loaded(Exported(md, "b50", 50));
  CHECK(at50->info().source_base_step == kStep);
  CHECK(at50->info().source_base_digests.size() == 2);
  CHECK(at50->info().source_delta_digests.size() == 2);
  CHECK(at40->info().source_delta_digests.empty());
  // The same job again: training is deterministic, so the same ckpt-40; other batches
  // after it, so other deltas of the same steps.
  DeltaModelDir rerun(EvictingJobJson(), /*batch_seed=*/7000);
  ReplaceModelDir(md.dir, rerun.dir);
  const auto before = ScoresOf(*at50);
  auto refused = at50->Refresh(md.dir);
  INFO(refused.status().ToString());
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains(ckpt::DeltaPath(md.dir, kStep, 50) +
                                                         ": not the checkpoint the bundle"));
  CHECK_THAT(refused.status().message(), Catch::Contains("another training run"));
  CHECK(at50->info().source_step == 50);
  CHECK(at50->status().ok());
  CHECK(ScoresOf(*at50) == before);
  // The bundle of ckpt-40, bit-identical in both runs, is that state: it follows the new chain.
  auto followed = at40->Refresh(md.dir);
  INFO(followed.status().ToString());
  REQUIRE(followed.ok());
  CHECK(followed->applied == std::vector<int64_t>{50, 60, 70});
  CHECK(ScoresOf(*at40) == ScoresOf(*Loaded(Exported(md, "rerun-b70"))));
  // Another seed: another ckpt-40.
  Json seeded = EvictingJobJson();
  seeded["seed"] = 10;
  DeltaModelDir reseeded(seeded);
  ReplaceModelDir(md.dir, reseeded.dir);
  auto base_refused = also40->Refresh(md.dir);
  INFO(base_refused.status().ToString());
  CHECK(base_refused.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(base_refused.status().message(), Catch::Contains(ckpt::CheckpointPath(md.dir, kStep) +
                                                              ": not the checkpoint the bundle"));
  CHECK(also40->info().source_step == kStep);
}

TEST_CASE(
    "a bundle without its source's digests (an older export) loads and scores, and is not refreshed") {
  DeltaModelDir md;
  const std::string dir = Exported(md, "b40", kStep);
  EditManifest(dir, [](Json& m) {
    for (const char* key : {"base_step", "base_digests", "delta_digests"}) m["source"].erase(key);
  });
  auto bundle = Loaded(dir);
  CHECK(bundle->info().source_base_digests.empty());
  const auto before = ScoresOf(*bundle);
  auto refused = bundle->Refresh(md.dir);
  INFO(refused.status().ToString());
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(refused.status().message(),
             Catch::Contains(dir + "/bundle.json: the source has no base_digests"));
  CHECK_THAT(refused.status().message(), Catch::Contains("export the bundle anew"));
  CHECK(ScoresOf(*bundle) == before);
}

TEST_CASE(
    "a refresh writes the deltas from memory: files deleted after the reading do not matter") {
  DeltaModelDir md;
  auto newest = LoadBundle(Exported(md, "b70"));
  REQUIRE(newest.ok());
  const auto want = Contents(*newest->loaded.store);
  auto loaded = LoadBundle(Exported(md, "b40", kStep));
  REQUIRE(loaded.ok());
  RefreshStats stats;
  auto deltas = NewerDeltas(*loaded, md.dir, &stats);
  INFO(deltas.status().ToString());
  REQUIRE(deltas.ok());
  REQUIRE(deltas->size() == 3);
  // The trainer's max_to_keep deletes the chain between the reading and the writing.
  std::filesystem::remove_all(md.dir);
  bool changed = false;
  Status st = WriteBundleDeltas(*loaded, *deltas, &changed);
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(changed);
  CHECK(Contents(*loaded->loaded.store) == want);
}

TEST_CASE("a refresh that fails leaves the bundle as it was, whether or not earlier deltas fit") {
  DeltaModelDir md;
  auto at40 = Loaded(Exported(md, "b40", kStep));
  auto at70 = Loaded(Exported(md, "b70", 70));
  const auto scores40 = ScoresOf(*at40), scores70 = ScoresOf(*at70);
  // A committed delta 80 that verifies but cannot be applied: a record of the dense site
  // table marked lazy (a delta of another model's layout).
  auto loaded = LoadBundle(md.tmp / "b70");
  REQUIRE(loaded.ok());
  auto def = loaded->loaded.store->GetDef({"site/embeddings", 0});
  REQUIRE(def.ok());
  cluster::ShardLayout layout = def->layout;
  REQUIRE(!layout.lazy);
  layout.lazy = true;
  auto dir = ckpt::CreateDeltaDir(md.dir, kStep, 80);
  REQUIRE(dir.ok());
  ckpt::Manifest m{.global_step = 80,
                   .unix_time = 1,
                   .final = false,
                   .num_ps = 2,
                   .shards = {},
                   .extra = Json::object(),
                   .base = kStep,
                   .parent = 70};
  const std::vector<int64_t> ids{0};
  const std::vector<float> values(static_cast<size_t>(layout.cols), 1.0f);
  for (int p = 0; p < 2; ++p) {
    auto w = ckpt::ShardWriter::Create(*dir + "/" + ckpt::ShardFileName(p), p, 80);
    REQUIRE(w.ok());
    if (p == 0) {
      REQUIRE(w->Append({.layout = layout,
                         .values = values,
                         .slots = {},
                         .row_ids = ids,
                         .gather = {},
                         .delta = true,
                         .deleted_ids = {}})
                  .ok());
    }
    auto info = w->Commit();
    REQUIRE(info.ok());
    m.shards.push_back(*info);
  }
  REQUIRE(ckpt::CommitCheckpoint(md.dir, m).ok());

  // From step 70, delta 80 fails on its first record: nothing was written.
  auto early = at70->Refresh(md.dir);
  INFO(early.status().ToString());
  CHECK(early.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(early.status().message(),
             Catch::Contains("is lazy in the checkpoint and dense in this job"));
  CHECK_THAT(early.status().message(), Catch::Contains(ckpt::DeltaPath(md.dir, kStep, 80)));
  CHECK(at70->status().ok());
  CHECK(at70->info().source_step == 70);
  CHECK(ScoresOf(*at70) == scores70);
  auto again = at70->Refresh(md.dir);  // the same error, not "an earlier refresh failed"
  CHECK_THAT(again.status().message(), Catch::Contains("is lazy in the checkpoint"));

  // From step 40, deltas 50..70 fit and 80 fails: the version built from them is never
  // published, the bundle stays at step 40 and can be refreshed again.
  auto half = at40->Refresh(md.dir);
  INFO(half.status().ToString());
  CHECK(half.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(half.status().message(), Catch::Contains("is lazy in the checkpoint"));
  CHECK(at40->status().ok());
  CHECK(at40->info().source_step == kStep);
  CHECK(ScoresOf(*at40) == scores40);
  auto later = at40->Refresh(md.dir);
  CHECK_THAT(later.status().message(), Catch::Contains("is lazy in the checkpoint"));
}

TEST_CASE("scorers keep scoring while a bundle refreshes, each batch wholly before or after") {
  DeltaModelDir md;
  auto bundle = Loaded(Exported(md, "b40", kStep));
  const model::Batch batch = MakeBatch(64, 3);
  auto score = [&](Scorer& s) {
    auto r = s.Score(batch);
    REQUIRE(r.ok());
    return r->heads[0];
  };
  auto first = bundle->NewScorer();
  REQUIRE(first.ok());
  const auto old_scores = score(**first);
  auto fresh = Loaded(Exported(md, "b70"))->NewScorer();
  REQUIRE(fresh.ok());
  const auto want_new = score(**fresh);
  REQUIRE(old_scores != want_new);

  constexpr int kThreads = 3;
  std::atomic<bool> done{false};
  std::atomic<int> started{0};
  std::vector<int> mixed(kThreads, 0), failed(kThreads, 0), batches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto scorer = bundle->NewScorer();
      if (!scorer.ok()) {
        ++failed[t];
        return;
      }
      ++started;
      // Until the refresh is over, and a few batches after.
      for (int after = 0; after < 3;) {
        if (done) ++after;
        auto r = (*scorer)->Score(batch);
        ++batches[t];
        if (!r.ok()) {
          ++failed[t];
        } else if (r->heads[0] != old_scores && r->heads[0] != want_new) {
          ++mixed[t];
        }
        (void)bundle->info();  // info() beside a refresh
      }
    });
  }
  while (started < kThreads) std::this_thread::yield();
  auto stats = bundle->Refresh(md.dir);
  done = true;
  for (auto& th : threads) th.join();
  INFO(stats.status().ToString());
  REQUIRE(stats.ok());
  CHECK(stats->applied == std::vector<int64_t>{50, 60, 70});
  CHECK(failed == std::vector<int>(kThreads, 0));
  CHECK(mixed == std::vector<int>(kThreads, 0));
  CHECK(score(**first) == want_new);
}

// Copies what a trainer committed for `step` from `from` (a model dir) into `to`: a full
// checkpoint's files (its deltas' directories apart), or one delta's directory.
void CopyCheckpoint(const std::string& from, const std::string& to, int64_t step,
                    std::optional<int64_t> base) {
  namespace fs = std::filesystem;
  fs::create_directories(to);
  if (!fs::exists(to + "/job.json")) fs::copy_file(from + "/job.json", to + "/job.json");
  const std::string src =
      base ? ckpt::DeltaPath(from, *base, step) : ckpt::CheckpointPath(from, step);
  const std::string dst = base ? ckpt::DeltaPath(to, *base, step) : ckpt::CheckpointPath(to, step);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), dst + "/" + e.path().filename().string());
  }
}

TEST_CASE(
    "scorers racing refreshes and full checkpoint swaps: every batch scores exactly as the version "
    "it names, never a mix") {
  // States 40 (full), 50, 60 (deltas), 70 (full), 80 (its delta), 90 (full): every step
  // trains the dense layers and the rows its batch touches, so no two states score alike
  // and a batch that mixed two states would match neither.
  ModelDir md(JobJson(), true, /*final_base=*/false);
  struct State {
    int64_t step;
    std::optional<int64_t> base;
  };
  const std::vector<State> states{{50, kStep}, {60, kStep}, {70, {}}, {80, 70}, {90, {}}};
  int64_t parent = kStep;
  for (const State& st : states) {
    md.Train(st.step);
    md.Save(st.step, st.base, parent, true, st.step == 90);
    parent = st.step;
  }
  std::map<int64_t, std::vector<std::vector<float>>> want;  // step -> ScoresOf
  want[kStep] = ScoresOf(*Loaded(Exported(md, "e40", kStep)));
  for (const State& st : states) {
    // Appended, not "e" + std::to_string(...): GCC 12 warns (-Wrestrict, a false positive
    // fixed in GCC 13) on inserting a literal before a temporary string.
    const std::string name = std::string("e").append(std::to_string(st.step));
    want[st.step] = ScoresOf(*Loaded(Exported(md, name, st.step)));
  }
  for (auto a = want.begin(); a != want.end(); ++a) {
    for (auto b = std::next(a); b != want.end(); ++b) REQUIRE(a->second != b->second);
  }

  const std::string served = md.tmp / "served";
  CopyCheckpoint(md.dir, served, kStep, std::nullopt);
  auto bundle = Bundle::LoadModelDir(served, nullptr);
  REQUIRE(bundle.ok());
  REQUIRE((*bundle)->info().source_step == kStep);

  constexpr int kThreads = 3;
  std::atomic<bool> done{false};
  std::atomic<int> started{0};
  std::vector<int> mixed(kThreads, 0), failed(kThreads, 0), batches(kThreads, 0);
  std::vector<std::set<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto scorer = (*bundle)->NewScorer();
      if (!scorer.ok()) {
        ++failed[t];
        return;
      }
      ++started;
      for (int after = 0; after < 8;) {
        if (done) ++after;
        const uint64_t seed = 1 + static_cast<uint64_t>(batches[t] % 4);
        auto r = (*scorer)->Score(MakeBatch(64, seed));
        ++batches[t];
        if (!r.ok() || !want.contains(r->step)) {
          ++failed[t];
          continue;
        }
        seen[t].insert(r->step);
        if (r->heads[0] != want.at(r->step)[seed - 1]) ++mixed[t];
      }
    });
  }
  while (started < kThreads) std::this_thread::yield();
  for (const State& st : states) {
    CopyCheckpoint(md.dir, served, st.step, st.base);
    auto r = (*bundle)->Update(served);
    INFO("step " << st.step << ": " << r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->to_step == st.step);
    CHECK(r->new_base == !st.base);
    CHECK(r->base_step == st.base.value_or(st.step));
    CHECK(r->applied == (st.base ? std::vector<int64_t>{st.step} : std::vector<int64_t>{}));
    CHECK(r->copied_bytes > 0);
    CHECK((*bundle)->info().source_step == st.step);
    CHECK((*bundle)->info().source_base_step == st.base.value_or(st.step));
  }
  done = true;
  for (auto& th : threads) th.join();
  CHECK(failed == std::vector<int>(kThreads, 0));
  CHECK(mixed == std::vector<int>(kThreads, 0));
  for (const auto& s : seen) CHECK(s.contains(90));  // the last state was served
  CHECK(ScoresOf(**bundle) == want[90]);
  CHECK((*bundle)->info().source_final);
  // Refresh refuses what Update follows.
  auto fresh = Loaded(Exported(md, "r40", kStep));
  auto refused = fresh->Refresh(md.dir);
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("newer full checkpoint ckpt-90"));
}

TEST_CASE(
    "a full checkpoint whose rows did not change shares every block; LoadNewer leaves the old "
    "bundle serving its version") {
  ModelDir md(JobJson(), true, /*final_base=*/false);
  md.Train(50);
  md.Save(50, kStep, kStep);
  md.Save(60);  // full, no training since: the values of delta 50
  const std::string served = md.tmp / "served";
  CopyCheckpoint(md.dir, served, kStep, std::nullopt);
  CopyCheckpoint(md.dir, served, 50, kStep);
  auto b = Bundle::LoadModelDir(served, nullptr);
  REQUIRE(b.ok());
  REQUIRE((*b)->info().source_step == 50);
  const auto at50 = ScoresOf(**b);
  CopyCheckpoint(md.dir, served, 60, std::nullopt);
  RefreshStats stats;
  auto next = (*b)->LoadNewer(served, &stats);
  INFO(next.status().ToString());
  REQUIRE(next.ok());
  CHECK(stats.new_base);
  CHECK(stats.copied_bytes == 0);  // every row as it was: all shared
  CHECK((*next)->info().source_step == 60);
  CHECK((*next)->info().source_base_step == 60);
  CHECK((*b)->info().source_step == 50);  // the old bundle keeps its version
  CHECK(ScoresOf(**next) == at50);
  CHECK((*next)->parameter_bytes() == (*b)->parameter_bytes());
  // Nothing newer: a bundle of the same version.
  auto same = (*next)->LoadNewer(served, &stats);
  REQUIRE(same.ok());
  CHECK(!stats.new_base);
  CHECK(stats.applied.empty());
  CHECK((*same)->info().source_step == 60);
}

TEST_CASE("a newer full checkpoint damaged inside a record is DataLoss and publishes nothing") {
  ModelDir md(JobJson(), true, /*final_base=*/false);
  md.Train(50);
  md.Save(50);
  const std::string served = md.tmp / "served";
  CopyCheckpoint(md.dir, served, kStep, std::nullopt);
  auto b = Bundle::LoadModelDir(served, nullptr);
  REQUIRE(b.ok());
  const auto at40 = ScoresOf(**b);
  CopyCheckpoint(md.dir, served, 50, std::nullopt);
  // A flipped byte in the data of ps 0's file (its header and footer intact: it passes
  // the footer check that picks the checkpoint, and fails once its records are read).
  const std::string file = ckpt::CheckpointPath(served, 50) + "/" + ckpt::ShardFileName(0);
  FlipByteAt(file, std::filesystem::file_size(file) / 2);
  auto r = (*b)->Update(served);
  CHECK(r.status().code() == Code::kDataLoss);
  CHECK_THAT(r.status().message(), Catch::Contains(file));
  CHECK((*b)->info().source_step == kStep);
  CHECK((*b)->status().ok());
  CHECK(ScoresOf(**b) == at40);
}

// The first version of a bundle, its parts as params.h has them.
std::shared_ptr<const ParamVersion> VersionOf(const std::string& bundle) {
  auto loaded = LoadBundle(bundle);
  REQUIRE(loaded.ok());
  auto v = VersionFromStore(loaded->loaded, loaded->info);
  REQUIRE(v.ok());
  return *v;
}

// Row `row` of variable `var` in `v`, as a batch needing it gets it.
std::vector<float> RowOf(const ParamVersion& v, int var, int64_t row) {
  std::vector<std::vector<int64_t>> rows(v.vars.size());
  rows[static_cast<size_t>(var)] = {row};
  std::vector<std::vector<float>> scratch;
  model::Params params;
  REQUIRE(GatherParams(v, rows, &scratch, &params).ok());
  const auto& values = params.values[static_cast<size_t>(var)];
  return {values.begin(), values.end()};
}

TEST_CASE("versions: memory accounting, copy on write of one block, lazy rows and re-bucketing") {
  ModelDir md;
  const auto v0 = VersionOf(Exported(md));
  int user = -1, site = -1;
  for (size_t i = 0; i < v0->vars.size(); ++i) {
    if (v0->vars[i].meta->name == "user/embeddings") user = static_cast<int>(i);
    if (v0->vars[i].meta->name == "site/embeddings") site = static_cast<int>(i);
  }
  REQUIRE(user >= 0);
  REQUIRE(site >= 0);
  REQUIRE(v0->vars[user].meta->lazy);
  REQUIRE(v0->vars[site].meta->sparse);
  // Every value stored once, a lazy row with its 8-byte id.
  uint64_t want = 0;
  for (const auto& var : v0->vars) {
    const auto row_bytes = static_cast<uint64_t>(var.meta->cols) * sizeof(float);
    want += var.meta->lazy ? static_cast<uint64_t>(var.live_rows) * (row_bytes + 8)
                           : static_cast<uint64_t>(var.meta->rows) * row_bytes;
  }
  CHECK(UnsharedBytes(*v0, nullptr) == want);
  CHECK(UnsharedBytes(*v0, v0.get()) == 0);

  const std::vector<float> ones(4, 1.0f);
  const auto site3 = RowOf(*v0, site, 3);
  REQUIRE(site3 != ones);
  VersionBuilder b(*v0);
  b.SetRow(site, 3, site3);  // the same values: nothing copied
  CHECK(b.copied_blocks() == 0);
  b.SetRow(site, 3, ones);
  b.SetRow(site, 5, ones);  // the same block
  CHECK(b.copied_blocks() == 1);
  // A lazy row created, one never trained read at its initial value.
  const int64_t fresh_id = kLazyVocab - 7;
  const auto initial = RowOf(*v0, user, fresh_id);
  b.SetRow(user, fresh_id, ones);
  CHECK(b.copied_blocks() == 2);
  auto v1 = b.Finish(v0->info);
  // The copies: one block of site (16 rows) and the bucket as copied, plus the row
  // created in it since (its id and values).
  CHECK(UnsharedBytes(*v1, v0.get()) == b.copied_bytes() + 8 + 4 * sizeof(float));
  CHECK(b.copied_bytes() >= kBlockRows * 4 * sizeof(float));
  CHECK(UnsharedBytes(*v1, v0.get()) < want / 2);
  CHECK(RowOf(*v1, site, 3) == ones);
  CHECK(RowOf(*v0, site, 3) == site3);  // the old version untouched
  CHECK(RowOf(*v1, user, fresh_id) == ones);
  CHECK(RowOf(*v0, user, fresh_id) == initial);
  CHECK(v1->vars[user].live_rows == v0->vars[user].live_rows + 1);
  for (const auto& vi : v1->info.variables) {
    if (vi.name == "user/embeddings") CHECK(vi.stored_rows == v1->vars[user].live_rows);
  }
  // Dropped again: the initial value.
  VersionBuilder drop(*v1);
  drop.EraseRow(user, fresh_id);
  auto v2 = drop.Finish(v1->info);
  CHECK(RowOf(*v2, user, fresh_id) == initial);
  CHECK(v2->vars[user].live_rows == v0->vars[user].live_rows);

  // A table grown past kMaxBucketRows a bucket is re-bucketed; every row still found.
  const size_t buckets = v2->vars[user].buckets.size();
  VersionBuilder grow(*v2);
  const int64_t n = kMaxBucketRows * static_cast<int64_t>(buckets) + 100;
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(i);
    grow.SetRow(user, 1000 + i * 3, std::vector<float>{x, x, x, x});
  }
  auto v3 = grow.Finish(v2->info);
  CHECK(v3->vars[user].buckets.size() > buckets);
  CHECK(v2->vars[user].buckets.size() == buckets);
  for (int64_t i = 0; i < n; i += 97) {
    const float x = static_cast<float>(i);
    CHECK(RowOf(*v3, user, 1000 + i * 3) == std::vector<float>{x, x, x, x});
  }
  CHECK(RowOf(*v3, user, fresh_id) == initial);
  for (const auto& bucket : v3->vars[user].buckets)
    CHECK(std::is_sorted(bucket->ids.begin(), bucket->ids.end()));
}

}  // namespace
}  // namespace ps::serving

// Resharding on restore. A CTR job with lazy and dense tables (and
// dense layers) trains on 2 ps with 2 shards a variable; its final checkpoint is then
// restored by real clusters of 3 ps (5 shards a variable), 1 ps (no partitioner) and 2 ps
// (7 shards a variable), each
// warm-started from the previous hop's model dir (checkpoint.init_from) with no step to
// train, so each writes what it restored as its own checkpoint at the same step. Read
// back with a small reader here, every hop's variables are bit-identical to the first's:
// values, optimizer slots, and the set of created rows of each lazy table. Finally the
// 1-ps checkpoint is restored in place by 2 ps, which train on to the end; and a corrupt
// block in the newest checkpoint makes the chief fall back to the one before it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_file.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

// A variable of a checkpoint, put together from all its records.
struct WholeVar {
  std::vector<int64_t> shape;
  bool lazy = false;
  std::vector<std::string> slots;       // sorted
  std::map<int64_t, std::string> rows;  // global row -> values, then each slot (by name), as bytes
  std::set<std::pair<int64_t, int64_t>> shards;  // (row_begin, rows) of its records
  bool operator==(const WholeVar& o) const {
    return shape == o.shape && lazy == o.lazy && slots == o.slots && rows == o.rows;
  }
};

// Every variable of the checkpoint at `step` in `model_dir`, from the files its MANIFEST
// lists (every checksum verified).
std::map<std::string, WholeVar> ReadCheckpoint(const fs::path& model_dir, int64_t step,
                                               int* num_ps) {
  const std::string dir = ckpt::CheckpointPath(model_dir.string(), step);
  auto manifest = ckpt::ReadManifest(dir);
  REQUIRE(manifest.ok());
  *num_ps = manifest->num_ps;
  std::map<std::string, WholeVar> out;
  for (const auto& file : manifest->shards) {
    auto reader = ckpt::ShardReader::Open(dir + "/" + file.name);
    REQUIRE(reader.ok());
    auto records = reader->ReadRecords();
    INFO(records.status().message());
    REQUIRE(records.ok());
    for (const auto& r : *records) {
      const auto& l = r.meta.layout;
      WholeVar& v = out[l.var];
      v.shape = l.full_shape;
      v.lazy = l.lazy;
      v.slots.clear();
      auto slots = r.slots;
      std::sort(slots.begin(), slots.end());
      for (const auto& s : slots) v.slots.push_back(s.first);
      v.shards.emplace(l.row_begin, l.rows);
      const auto cols = static_cast<size_t>(l.cols);
      auto bytes = [cols](const std::vector<float>& block, size_t i) {
        return std::string(reinterpret_cast<const char*>(block.data() + i * cols),
                           cols * sizeof(float));
      };
      for (size_t i = 0; i < static_cast<size_t>(r.meta.stored_rows); ++i) {
        std::string row = bytes(r.values, i);
        for (const auto& s : slots) row += bytes(s.second, i);
        const int64_t global = l.row_begin + (l.lazy ? r.row_ids[i] : static_cast<int64_t>(i));
        REQUIRE(v.rows.emplace(global, std::move(row)).second);
      }
    }
  }
  return out;
}

// cluster-local.json's shape with `num_ps` ps tasks on free ports.
cluster::ClusterSpec ClusterWithPs(int num_ps) {
  auto spec = LocalCluster();
  auto& ps = spec.of(cluster::TaskType::kPs);
  std::set<uint16_t> used;
  for (const auto& id : spec.AllTasks()) used.insert(spec.address(id).port);
  while (static_cast<int>(ps.size()) < num_ps) {
    const uint16_t port = FreePorts(1)[0];
    if (used.insert(port).second) ps.push_back(cluster::HostPort{ps.front().host, port});
  }
  ps.resize(static_cast<size_t>(num_ps));
  return spec;
}

// Runs `job` on a cluster of `num_ps` ps and 2 workers to its end; returns the chief's lines.
// With `chief_exit` other than 0 only the chief's exit is checked (the rest are killed).
std::vector<std::string> Run(int num_ps, const fs::path& job, int chief_exit = 0) {
  auto spec = ClusterWithPs(num_ps);
  Tasks tasks;
  for (int i = 0; i < num_ps; ++i) tasks.Add(StartDaemon(spec, {cluster::TaskType::kPs, i}));
  for (auto id : {kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  if (chief_exit != 0) {
    CHECK(chief.WaitExit(300s) == std::optional<int>(chief_exit));
    return chief.Lines();
  }
  tasks.ExpectAllExit(0, 300s);
  return chief.Lines();
}

bool Has(const std::vector<std::string>& lines, const std::string& needle) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const auto& l) { return l.find(needle) != std::string::npos; });
}

TEST_CASE(
    "a checkpoint restores onto 3 ps, then 1 ps, with other shard counts: bit-identical values, slots and lazy rows") {
  TempDir tmp;
  const auto data = tmp / "ctr-data";
  auto gen = StartLauncher(
      {"gen-ctr", "--out", data.string(), "--train-examples", "20000", "--eval-examples", "1000"});
  REQUIRE(gen->WaitExit(120s) == 0);

  constexpr int64_t kSteps = 200;
  Json model = ReadConfig("job-ctr-emb.json")["model"];
  for (auto& field : model["fields"]) {
    if (field["table"] == "user" || field["table"] == "ad" || field["table"] == "site")
      field["lazy"] = true;
  }
  auto job = [&](const std::string& name, const fs::path& model_dir, int64_t steps, int shards,
                 const std::string& init_from) {
    Json partitioner =
        shards > 1 ? Json{{"type", "fixed"}, {"num_shards", shards}} : Json{{"type", "none"}};
    Json overrides = {{"model", model},
                      {"base_dir", data.string()},
                      {"optimizer", {{"type", "adam"}, {"learning_rate", 0.01}}},
                      {"partitioner", partitioner}};
    auto path = DeriveCheckpointJob("job-ctr-emb.json", tmp / name, steps, 100, model_dir, 100, 5);
    Json j = *ReadJsonFile(path.string());
    for (auto& [k, v] : overrides.items()) j[k] = v;
    if (!init_from.empty()) j["checkpoint"]["init_from"] = init_from;
    WriteFile(path, j.dump());
    return path;
  };

  // Hop 0: 2 ps, 2 shards a variable.
  const auto dir2 = tmp / "ps2";
  Run(2, job("job2.json", dir2, kSteps, 2, ""));
  int num_ps = 0;
  const auto trained = ReadCheckpoint(dir2, kSteps, &num_ps);
  REQUIRE(num_ps == 2);
  REQUIRE(trained.count("user/embeddings") == 1);
  const WholeVar& user = trained.at("user/embeddings");
  CHECK(user.lazy);
  CHECK(user.slots == std::vector<std::string>{"m", "v"});
  CHECK(user.rows.size() > 1000);
  CHECK(user.rows.size() < 1000000);  // only the created rows
  CHECK(user.shards.size() == 2);
  bool dense_table = false;
  for (const auto& [name, v] : trained)
    dense_table = dense_table || (!v.lazy && v.shape.size() == 2 && v.shape[0] == 1000);
  CHECK(dense_table);  // "app": a dense embedding table

  // Hop 1: 3 ps, 5 shards a variable, warm-started from hop 0 with nothing to train.
  const auto dir3 = tmp / "ps3";
  auto lines = Run(3, job("job3.json", dir3, kSteps, 5, dir2.string()));
  CHECK(Has(lines, "warm-started from " + ckpt::CheckpointPath(dir2.string(), kSteps) +
                       " (final) (written by 2 ps task(s), resharded onto 3)"));
  auto hop1 = ReadCheckpoint(dir3, kSteps, &num_ps);
  CHECK(num_ps == 3);
  CHECK(hop1.at("user/embeddings").shards.size() == 5);
  CHECK(hop1 == trained);

  // Hop 2: 1 ps, no partitioner, from hop 1.
  const auto dir1 = tmp / "ps1";
  lines = Run(1, job("job1.json", dir1, kSteps, 1, dir3.string()));
  CHECK(Has(lines, "(written by 3 ps task(s), resharded onto 1)"));
  auto hop2 = ReadCheckpoint(dir1, kSteps, &num_ps);
  CHECK(num_ps == 1);
  CHECK(hop2.at("user/embeddings").shards.size() == 1);
  CHECK(hop2 == trained);
  for (const auto& [name, v] : trained) {
    INFO(name);
    CHECK(hop1.at(name) == v);
    CHECK(hop2.at(name) == v);
  }

  // Hop 3: back to 2 ps, 7 shards a variable, from hop 2: each ps fills several of its
  // shards from one record.
  const auto dir2b = tmp / "ps2b";
  lines = Run(2, job("job2b.json", dir2b, kSteps, 7, dir1.string()));
  CHECK(Has(lines, "(written by 1 ps task(s), resharded onto 2)"));
  auto hop3 = ReadCheckpoint(dir2b, kSteps, &num_ps);
  CHECK(num_ps == 2);
  CHECK(hop3.at("user/embeddings").shards.size() == 7);
  CHECK(hop3 == trained);

  // In place: the 1-ps model dir restored by 2 ps (3 shards a variable), which train on.
  lines = Run(2, job("job1-more.json", dir1, kSteps + 60, 3, ""));
  CHECK(
      Has(lines, "restored " + ckpt::CheckpointPath(dir1.string(), kSteps) +
                     " (final) (written by 1 ps task(s), resharded onto 2): resuming at step 200"));
  CHECK(VerifiedCheckpoints(dir1).back() == kSteps + 60);
  auto more = ReadCheckpoint(dir1, kSteps + 60, &num_ps);
  CHECK(num_ps == 2);
  CHECK(more.at("user/embeddings").rows.size() >= user.rows.size());

  // A corrupt data block in the newest checkpoint (which the footers cannot show): the ps
  // that reads it while resharding reports DataLoss naming the file, and the chief falls
  // back to the checkpoint before, resharded just the same.
  const auto bad = ckpt::CheckpointPath(dir2.string(), kSteps) + "/ps-1.shard";
  FlipByte(bad);
  const auto dir3b = tmp / "ps3b";
  lines = Run(3, job("job3b.json", dir3b, kSteps, 5, dir2.string()));
  CHECK(Has(lines, "cannot restore " + ckpt::CheckpointPath(dir2.string(), kSteps)));
  CHECK(Has(lines, bad));
  CHECK(Has(lines, "warm-started from " + ckpt::CheckpointPath(dir2.string(), 100) +
                       " (written by 2 ps task(s), resharded onto 3): resuming at step 100"));
  CHECK(ReadCheckpoint(dir3b, 100, &num_ps) == ReadCheckpoint(dir2, 100, &num_ps));
  CHECK(VerifiedCheckpoints(dir3b).back() == kSteps);

  // Every checkpoint of init_from corrupt: the chief refuses to start from scratch and
  // says how to (not "move the directory away": init_from is only read).
  for (int64_t step : {int64_t{0}, int64_t{100}})
    FlipByte(ckpt::CheckpointPath(dir2.string(), step) + "/ps-1.shard");
  lines = Run(3, job("job3c.json", tmp / "ps3c", kSteps, 5, dir2.string()), 1);
  CHECK(Has(lines,
            "job.checkpoint.init_from: no checkpoint in " + dir2.string() + " could be restored"));
  CHECK(Has(lines, "fix or remove checkpoint.init_from"));
  CHECK_FALSE(Has(lines, "move the directory away"));
}

}  // namespace
}  // namespace ps::integ

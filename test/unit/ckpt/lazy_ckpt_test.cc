// Checkpoints of lazy shards: only created rows are saved (a sparse record with row ids),
// and a restore recreates exactly those rows, bit-exact with their slots.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_checkpointer.h"
#include "libps/ckpt/store_io.h"
#include "test/support/temp_dir.h"

using namespace ps::server;
using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

constexpr int64_t kVocab = int64_t{1} << 40;

std::vector<ShardDef> Defs() {
  ShardDef lazy;
  lazy.layout.var = "emb/embeddings";
  lazy.layout.shard = 1;
  lazy.layout.num_shards = 2;
  lazy.layout.row_begin = kVocab / 2;
  lazy.layout.rows = kVocab / 2;
  lazy.layout.cols = 4;
  lazy.layout.full_shape = {kVocab, 4};
  lazy.init = {ps::model::InitKind::kUniform, -0.05, 0.05};
  lazy.seed = 3;
  lazy.layout.lazy = true;
  ShardDef dense;
  dense.layout.var = "dense_0/kernel";
  dense.layout.rows = 3;
  dense.layout.cols = 2;
  dense.layout.full_shape = {3, 2};
  dense.init = {ps::model::InitKind::kGlorotUniform, 0, 0};
  return {lazy, dense};
}

void Build(Store* store, OptimizerKind kind) {
  OptimizerSpec spec = DefaultOptimizer(kind);
  spec.learning_rate = 0.05;
  REQUIRE(store->Configure(spec).ok());
  for (const auto& d : Defs()) REQUIRE(store->Create(d).ok());
}

void Train(Store* store, uint64_t seed, int steps) {
  const ShardDef lazy = Defs()[0];
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> rows;
    for (int i = 0; i < 30; ++i) rows.push_back(static_cast<int64_t>(rng() % 5000) * 1000003);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<float> grad(rows.size() * 4);
    for (float& x : grad) x = g(rng);
    REQUIRE(store->PushRows(lazy.key(), rows, grad, s).ok());
    std::vector<float> dense_grad(6);
    for (float& x : dense_grad) x = g(rng);
    REQUIRE(store->Push(Defs()[1].key(), dense_grad, s).ok());
  }
}

// Every row of every shard with all its blocks, as bytes: lazy shards as (id, blocks...).
std::string Snapshot(Store& store) {
  std::string out;
  store.ForEachShard([&](const ShardView& v) {
    out += v.def.key().ToString() + ";";
    auto put = [&](std::span<const float> s) {
      out.append(reinterpret_cast<const char*>(s.data()), s.size_bytes());
    };
    if (v.def.layout.lazy) {
      for (size_t i = 0; i < v.row_ids.size(); ++i) {
        out.append(reinterpret_cast<const char*>(&v.row_ids[i]), 8);
        for (size_t b = 0; b <= v.slots.size(); ++b) put(v.row(i, b));
      }
    } else {
      put(v.values);
      for (const auto& [name, s] : v.slots) put(s);
    }
  });
  return out;
}

// Saves `store` as ps 0 of a one-ps checkpoint at `step` and commits it.
ps::ckpt::CheckpointInfo SaveOnePs(const Store& store, const std::string& model_dir, int64_t step) {
  auto info = ps::ckpt::SaveStore(store, model_dir, 0, step);
  REQUIRE(info.ok());
  ps::ckpt::Manifest m;
  m.global_step = step;
  m.num_ps = 1;
  m.shards = {*info};
  REQUIRE(ps::ckpt::CommitCheckpoint(model_dir, m).ok());
  return {step, ps::ckpt::CheckpointPath(model_dir, step), m, {}};
}

// Saves `store` as the one ps of a checkpoint at `step` through the ps's checkpointer
// (which sweeps evicting shards first) and commits it.
void SaveAndCommit(Store& store, const std::string& model_dir, int64_t step) {
  ps::ckpt::ShardCheckpointer saver(&store, 0);
  auto saved = saver.Save({.model_dir = model_dir, .global_step = step});
  REQUIRE(saved.ok());
  ps::ckpt::Manifest manifest;
  manifest.global_step = step;
  manifest.num_ps = 1;
  manifest.shards = {{saved->file, saved->bytes, saved->digest}};
  REQUIRE(ps::ckpt::CommitCheckpoint(model_dir, manifest).ok());
}

}  // namespace

TEST_CASE("lazy shard checkpoint round trip is bit-exact with slots (adagrad, ftrl)") {
  const OptimizerKind kind = GENERATE(OptimizerKind::kAdagrad, OptimizerKind::kFtrl);
  CAPTURE(OptimizerKindName(kind));
  TempDir dir;
  Store a;
  Build(&a, kind);
  Train(&a, 1, 20);
  const int64_t created = a.Memory(Defs()[0].key())->rows;
  REQUIRE(created > 100);
  auto info = ps::ckpt::SaveStore(a, dir.path(), 0, 20);
  REQUIRE(info.ok());
  const std::string path = ps::ckpt::CheckpointPath(dir.path(), 20) + "/ps-0.shard";
  // Only created rows are written: ids + (values + slots) per created row, not 2^39 rows.
  CHECK(info->bytes < static_cast<uint64_t>(created) * (8 + 3 * 4 * 4) + 4096);

  auto summary = ps::ckpt::Inspect(path, true);
  REQUIRE(summary.ok());
  REQUIRE(summary->records.size() == 2);
  const auto& rec = summary->records[0].meta.layout.var == "emb/embeddings" ? summary->records[0]
                                                                            : summary->records[1];
  CHECK(rec.meta.layout.lazy);
  CHECK(rec.meta.stored_rows == created);
  CHECK(rec.meta.layout.rows == kVocab / 2);
  CHECK(rec.data_error.empty());

  Store b;
  Build(&b, kind);
  Train(&b, 99, 3);  // rows the checkpoint lacks: the restore drops them
  ps::ckpt::RestoreStats stats;
  REQUIRE(ps::ckpt::RestoreStore(&b, SaveOnePs(a, dir.path() + "/again", 20), &stats).ok());
  CHECK(stats.shards == 2);
  CHECK_FALSE(stats.resharded);
  CHECK(Snapshot(a) == Snapshot(b));
  CHECK(b.Memory(Defs()[0].key())->rows == created);

  // Both continue identically after the restore.
  Train(&a, 5, 3);
  Train(&b, 5, 3);
  CHECK(Snapshot(a) == Snapshot(b));
}

TEST_CASE(
    "a lazy checkpoint does not restore into a dense shard, and damaged row ids are DataLoss") {
  TempDir dir;
  Store a;
  Build(&a, OptimizerKind::kAdagrad);
  Train(&a, 1, 2);
  const auto ckpt = SaveOnePs(a, dir.path(), 2);
  const std::string path = ckpt.dir + "/ps-0.shard";

  Store dense;
  REQUIRE(dense.Configure(*a.optimizer()).ok());
  ShardDef d = Defs()[0];
  d.layout.lazy = false;
  d.layout.rows = 1000;
  d.layout.row_begin = 0;
  REQUIRE(dense.Create(d).ok());
  auto st = ps::ckpt::RestoreStore(&dense, ckpt);
  CHECK(st.code() == ps::Code::kFailedPrecondition);
  CHECK_THAT(st.message(),
             Catch::Contains(
                 "variable \"emb/embeddings\" is lazy in the checkpoint and dense in this job"));

  // Flip a byte of the first stored row id (the ids block follows the sparse record's
  // metadata, whose last 8 bytes are the stored row count).
  std::string bytes = ReadBytes(path);
  int64_t first_id = 0;
  REQUIRE(a.Read(Defs()[0].key(), [&](const ShardView& v) { first_id = v.row_ids[0]; }).ok());
  size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&first_id), 8));
  REQUIRE(at != std::string::npos);
  bytes[at] ^= 0x01;
  WriteBytes(path, bytes);
  Store b;
  Build(&b, OptimizerKind::kAdagrad);
  st = ps::ckpt::RestoreStore(&b, ckpt);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK_THAT(st.message(), Catch::Contains("row ids checksum mismatch"));
  auto summary = ps::ckpt::Inspect(path, true);
  REQUIRE(summary.ok());
  bool flagged = false;
  for (const auto& r : summary->records) flagged |= r.data_error == "row ids checksum mismatch";
  CHECK(flagged);
}

TEST_CASE(
    "a lazy shard of 200,000 rows (tables grown many times) round-trips bit-exact, then trains identically") {
  TempDir dir;
  Store a;
  Build(&a, OptimizerKind::kAdagrad);
  const ShardDef lazy = Defs()[0];
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0, 1);
  int64_t step = 0;
  while (a.Memory(lazy.key())->rows < 200000) {
    std::vector<int64_t> rows;
    for (int i = 0; i < 8192; ++i)
      rows.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(lazy.layout.rows)));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<float> grad(rows.size() * 4);
    for (float& x : grad) x = g(rng);
    REQUIRE(a.PushRows(lazy.key(), rows, grad, step++).ok());
  }
  const int64_t created = a.Memory(lazy.key())->rows;
  const auto ckpt = SaveOnePs(a, dir.path(), step);
  Store b;
  Build(&b, OptimizerKind::kAdagrad);
  Train(&b, 3, 4);  // rows the checkpoint lacks: the restore drops them
  REQUIRE(ps::ckpt::RestoreStore(&b, ckpt).ok());
  CHECK(b.Memory(lazy.key())->rows == created);
  CHECK(Snapshot(a) == Snapshot(b));
  Train(&a, 8, 5);
  Train(&b, 8, 5);
  CHECK(Snapshot(a) == Snapshot(b));
}

TEST_CASE(
    "a sweep handed over before a restore does not run before the restored rows are restamped") {
  TempDir dir;
  auto policy_defs = [] {
    auto defs = Defs();
    defs[0].row_policy.ttl_steps = 1000;
    return defs;
  };
  OptimizerSpec spec = DefaultOptimizer(OptimizerKind::kAdagrad);
  Store a;
  REQUIRE(a.Configure(spec).ok());
  for (const auto& d : policy_defs()) REQUIRE(a.Create(d).ok());
  const ShardKey key = policy_defs()[0].key();
  std::vector<float> grad(4, 0.5f);
  for (int64_t r = 0; r < 40; ++r)
    REQUIRE(a.PushRows(key, std::vector<int64_t>{r * 7919}, grad, r).ok());
  SaveAndCommit(a, dir.path(), 40);

  // A ps that had trained on to step 5000 (say, before the chief fell back to this
  // checkpoint), with a sweep handed over to its sweeper and not run yet.
  Store b;
  std::vector<std::function<void()>> handed;
  b.SetSweepRunner([&](std::function<void()> work) { handed.push_back(std::move(work)); });
  REQUIRE(b.Configure(spec).ok());
  for (const auto& d : policy_defs()) REQUIRE(b.Create(d).ok());
  REQUIRE(b.PushRows(key, std::vector<int64_t>{3}, grad, 5000).ok());
  REQUIRE(handed.size() == 1);
  ps::ckpt::ShardCheckpointer loader(&b, 0);
  // The sweeper runs it while the restored rows are still stamped 0 (at row clock 5000
  // they would all be older than ttl_steps).
  loader.SetRestoreHookForTesting([&] { std::thread(handed[0]).join(); });
  REQUIRE(loader.Restore({.model_dir = dir.path(), .global_step = 40}).ok());
  CHECK(b.stats().rows_evicted_ttl == 0);
  CHECK(b.stats().live_rows == 40);
  CHECK(Snapshot(a) == Snapshot(b));
}

TEST_CASE(
    "a lazy shard with evict: the saved checkpoint holds only live rows; a restore restamps them") {
  TempDir dir;
  auto policy_defs = [] {
    auto defs = Defs();
    defs[0].row_policy.ttl_steps = 1000;
    defs[0].row_policy.max_rows = 2 * 40;  // 40 per shard: the table has 2 shards
    return defs;
  };
  Store a;
  OptimizerSpec spec = DefaultOptimizer(OptimizerKind::kAdagrad);
  spec.learning_rate = 0.05;
  REQUIRE(a.Configure(spec).ok());
  for (const auto& d : policy_defs()) REQUIRE(a.Create(d).ok());
  const ShardKey key = policy_defs()[0].key();
  std::vector<float> grad(4, 0.5f);
  // 41 rows, one a step: over 40 but within the sixteenth a sweep waits for.
  for (int64_t r = 0; r < 41; ++r)
    REQUIRE(a.PushRows(key, std::vector<int64_t>{r * 7919}, grad, r).ok());
  REQUIRE(a.Memory(key)->rows == 41);
  SaveAndCommit(a, dir.path(), 41);
  CHECK(a.Memory(key)->rows == 40);  // Save swept first: row 0 (the least recently pushed) went
  auto summary = ps::ckpt::Inspect(ps::ckpt::CheckpointPath(dir.path(), 41) + "/ps-0.shard", true);
  REQUIRE(summary.ok());
  for (const auto& rec : summary->records) {
    if (rec.meta.layout.var == "emb/embeddings") CHECK(rec.meta.stored_rows == 40);
  }

  Store b;
  REQUIRE(b.Configure(spec).ok());
  for (const auto& d : policy_defs()) REQUIRE(b.Create(d).ok());
  ps::ckpt::ShardCheckpointer loader(&b, 0);
  REQUIRE(loader.Restore({.model_dir = dir.path(), .global_step = 41}).ok());
  CHECK(b.row_clock() == 41);
  CHECK(Snapshot(a) == Snapshot(b));
  CHECK(b.stats().live_rows == 40);
  // Restored rows count as pushed at 41: at 1041 they are still within ttl_steps, at 1042 not.
  REQUIRE(b.PushRows(key, std::vector<int64_t>{1}, grad, 1041).ok());
  CHECK(b.Memory(key)->rows == 41);
  b.EvictRows();
  CHECK(b.Memory(key)->rows == 40);  // max_rows: one restored row goes, not the new one
  REQUIRE(b.PushRows(key, std::vector<int64_t>{1}, grad, 1042).ok());
  b.EvictRows();
  CHECK(b.Memory(key)->rows == 1);
}

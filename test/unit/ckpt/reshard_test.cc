// Restoring a checkpoint onto another number of ps tasks and other partitioner shard
// counts (ckpt::RestoreStore): 2 -> 3 -> 1 -> 2 ps round trips are bit-identical in values
// and optimizer slots, and lazy tables keep exactly their created rows; what must stay an
// error still is one.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/record_format.h"
#include "libps/ckpt/shard_checkpointer.h"
#include "libps/ckpt/store_io.h"
#include "libps/cluster/placement.h"
#include "test/support/store_cluster.h"
#include "test/support/temp_dir.h"

using namespace ps::server;
using ps::ckpt::CheckpointInfo;
using ps::cluster::PartitionerSpec;
using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

using namespace ps::testing;

// Random pushes to every shard: whole dense shards, and 40 random rows of each lazy shard
// per step (so its created rows are scattered over its whole range).
void Train(Cluster& c, uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  for (int step = 0; step < steps; ++step) {
    for (const auto& s : c.placement) {
      Store& store = *c.ps[static_cast<size_t>(s.ps)];
      const ShardKey key{s.layout.var, s.layout.shard};
      if (s.layout.lazy) {
        std::vector<int64_t> rows;
        for (int i = 0; i < 40; ++i)
          rows.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(s.layout.rows)));
        std::sort(rows.begin(), rows.end());
        rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
        std::vector<float> grad(rows.size() * static_cast<size_t>(s.layout.cols));
        for (float& x : grad) x = g(rng);
        REQUIRE(store.PushRows(key, rows, grad, step).ok());
      } else {
        std::vector<float> grad(static_cast<size_t>(s.layout.rows * s.layout.cols));
        for (float& x : grad) x = g(rng);
        REQUIRE(store.Push(key, grad, step).ok());
      }
    }
  }
}

// Every ps saves, then the MANIFEST is committed (with the plan unless `with_plan` is false).
CheckpointInfo Save(const Cluster& c, const std::string& model_dir, int64_t step,
                    bool with_plan = true) {
  ps::ckpt::Manifest m;
  m.global_step = step;
  m.num_ps = static_cast<int>(c.ps.size());
  for (size_t p = 0; p < c.ps.size(); ++p) {
    auto info = ps::ckpt::SaveStore(*c.ps[p], model_dir, static_cast<int>(p), step);
    REQUIRE(info.ok());
    m.shards.push_back(*info);
  }
  if (with_plan) m.extra = {{"variables", PlanJson(c)}};
  REQUIRE(ps::ckpt::CommitCheckpoint(model_dir, m).ok());
  return {step, ps::ckpt::CheckpointPath(model_dir, step), m, {}};
}

std::vector<ps::ckpt::RestoreStats> Restore(Cluster& c, const CheckpointInfo& ckpt) {
  std::vector<ps::ckpt::RestoreStats> stats(c.ps.size());
  for (size_t p = 0; p < c.ps.size(); ++p) {
    ps::Status st = ps::ckpt::RestoreStore(c.ps[p].get(), ckpt, &stats[p]);
    INFO(st.message());
    REQUIRE(st.ok());
  }
  return stats;
}

// Elements of slots of every shard of `c` that are not the slot's initial value.
int64_t SlotsOffInitial(const Cluster& c) {
  int64_t off = 0;
  for (const auto& store : c.ps) {
    auto spec = store->optimizer();
    REQUIRE(spec.ok());
    const auto defs = SlotDefs(*spec);
    store->ForEachShard([&](const ShardView& v) {
      for (size_t k = 0; k < v.slots.size(); ++k) {
        auto def = std::find_if(defs.begin(), defs.end(),
                                [&](const SlotDef& d) { return d.name == v.slots[k].first; });
        REQUIRE(def != defs.end());
        if (v.def.layout.lazy) {
          for (size_t i = 0; i < v.row_ids.size(); ++i) {
            for (float x : v.row(i, 1 + k)) off += x != def->initial;
          }
        } else {
          for (float x : v.slots[k].second) off += x != def->initial;
        }
      }
    });
  }
  return off;
}

int Sum(const std::vector<ps::ckpt::RestoreStats>& stats, int ps::ckpt::RestoreStats::*field) {
  int n = 0;
  for (const auto& s : stats) n += s.*field;
  return n;
}

}  // namespace

TEST_CASE(
    "restore reshards: 2 -> 3 -> 1 -> 2 -> 2 ps with other shard counts, bit-identical values, slots and lazy rows") {
  TempDir dir;
  Cluster a = Build(2, 2);
  Train(a, 1, 6);
  const Whole trained = Assemble(a);
  REQUIRE(trained.size() == 4);
  REQUIRE(trained.at("emb/embeddings").size() > 400);
  const auto ckpt_a = Save(a, dir / "a", 6);

  // 3 ps, 5 shards a variable: old shards spread over new ones and the other way round.
  Cluster b = Build(3, 5);
  Train(b, 2, 2);  // rows and values the checkpoint lacks: the restore replaces them all
  auto stats_b = Restore(b, ckpt_a);
  CHECK(Assemble(b) == trained);
  for (const auto& s : stats_b) CHECK(s.resharded);
  const auto ckpt_b = Save(b, dir / "b", 6);

  Cluster c = Build(1, 1);
  auto stats_c = Restore(c, ckpt_b);
  CHECK(Assemble(c) == trained);
  CHECK(stats_c[0].files_read == 3);
  CHECK(stats_c[0].shards == 4);
  const auto ckpt_c = Save(c, dir / "c", 6);

  // 2 ps, 5 shards: a ps holds several shards of one old record (a record in parts).
  Cluster d = Build(2, 5);
  auto stats_d = Restore(d, ckpt_c);
  CHECK(Assemble(d) == trained);
  CHECK(stats_d[0].records_read < stats_d[0].shards);
  const auto ckpt_d = Save(d, dir / "d", 6);

  Cluster a2 = Build(2, 2);
  Restore(a2, ckpt_d);
  CHECK(Assemble(a2) == trained);

  // And they train on identically: restored optimizer slots, not just values.
  Train(a, 7, 3);
  Train(a2, 7, 3);
  CHECK(Assemble(a2) == Assemble(a));
}

TEST_CASE("the same layout reads only each ps's own file, one record per shard, unresharded") {
  TempDir dir;
  Cluster a = Build(3, 3);
  Train(a, 1, 3);
  const auto ckpt = Save(a, dir.path(), 3);
  Cluster b = Build(3, 3);
  auto stats = Restore(b, ckpt);
  CHECK(Assemble(b) == Assemble(a));
  for (size_t p = 0; p < stats.size(); ++p) {
    CHECK(stats[p].files_read == 1);
    CHECK(stats[p].records_skipped == 0);
    CHECK(stats[p].records_read == static_cast<int>(b.ps[p]->Keys().size()));
    CHECK_FALSE(stats[p].resharded);
  }

  SECTION(
      "without the plan in the MANIFEST every file is walked, other ps's records skipped unread") {
    const auto bare = Save(a, dir / "bare", 3, false);
    Cluster d = Build(3, 3);
    auto s = Restore(d, bare);
    CHECK(Assemble(d) == Assemble(a));
    CHECK(s[0].files_read == 3);
    CHECK(Sum(s, &ps::ckpt::RestoreStats::records_read) == static_cast<int>(a.placement.size()));
    CHECK(Sum(s, &ps::ckpt::RestoreStats::records_skipped) ==
          2 * static_cast<int>(a.placement.size()));
  }
}

TEST_CASE("a reshard reads only the files and records that overlap a ps's shards") {
  TempDir dir;
  Cluster a = Build(2, 2);
  Train(a, 1, 2);
  const auto ckpt = Save(a, dir.path(), 2);
  // 4 ps, 4 shards: each new shard lies inside one old one.
  Cluster b = Build(4, 4);
  auto stats = Restore(b, ckpt);
  CHECK(Assemble(b) == Assemble(a));
  int files = 0;
  for (const auto& s : stats) files += s.files_read;
  CHECK(files < 4 * 2);  // not every ps opened both files

  SECTION(
      "corruption in a record a ps skips does not stop it; the ps that reads it gets DataLoss naming the file") {
    // Flip a byte in the middle of the last record's last block of ps-1.shard (its footer
    // is the last 32 bytes, the block's checksum the 4 before).
    const std::string path = ckpt.dir + "/ps-1.shard";
    std::string bytes = ReadBytes(path);
    bytes[bytes.size() - 32 - 4 - 2] ^= 0x20;
    WriteBytes(path, bytes);
    auto ok = ps::ckpt::VerifyCheckpoint(ckpt, ps::ckpt::Verify::kFooters);
    CHECK(ok.ok());  // the footers cannot tell: only reading the block can
    Cluster c = Build(4, 4);
    int failed = 0;
    for (auto& store : c.ps) {
      ps::Status st = ps::ckpt::RestoreStore(store.get(), ckpt);
      if (!st.ok()) {
        ++failed;
        CHECK(st.code() == ps::Code::kDataLoss);
        CHECK_THAT(st.message(), Catch::Contains(path) && Catch::Contains("checksum mismatch"));
      }
    }
    CHECK(failed >= 1);
    CHECK(failed < 4);
  }
}

TEST_CASE("a file that is not the one the MANIFEST lists is DataLoss naming it") {
  TempDir dir;
  Cluster a = Build(2, 2);
  Train(a, 1, 1);
  const auto ckpt = Save(a, dir.path(), 1);
  auto other = ckpt;
  other.manifest.shards[0].digest ^= 1;
  Cluster b = Build(1, 1);
  ps::Status st = ps::ckpt::RestoreStore(b.ps[0].get(), other);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK_THAT(st.message(), Catch::Contains("ps-0.shard: digest differs from the MANIFEST's"));
}

TEST_CASE("what differs beyond the layout stays an error naming the variable") {
  TempDir dir;
  Cluster a = Build(2, 2);
  Train(a, 1, 1);
  const auto ckpt = Save(a, dir.path(), 1);

  // Restores the checkpoint into a store holding one shard of `layout`.
  auto restore_onto = [&](const ps::cluster::ShardLayout& layout) {
    Store s;
    REQUIRE(s.Configure(DefaultOptimizer(OptimizerKind::kAdam)).ok());
    ShardDef def;
    def.layout = layout;
    REQUIRE(s.Create(def).ok());
    return ps::ckpt::RestoreStore(&s, ckpt);
  };
  SECTION("another full shape") {
    ps::Status st = restore_onto({.var = "dense/kernel",
                                  .shard = 0,
                                  .num_shards = 1,
                                  .row_begin = 0,
                                  .rows = 13,
                                  .cols = 4,
                                  .full_shape = {13, 4},
                                  .lazy = false});
    CHECK(st.code() == ps::Code::kFailedPrecondition);
    CHECK_THAT(
        st.message(),
        Catch::Contains(
            "variable \"dense/kernel\" has shape [13, 3] in the checkpoint and [13, 4] in this job"));
  }
  SECTION("a dense table where the checkpoint has a lazy one") {
    // A dense shard of the same variable's first rows.
    ps::Status st = restore_onto({.var = "emb/embeddings",
                                  .shard = 0,
                                  .num_shards = kIds / 1000 + 1,
                                  .row_begin = 0,
                                  .rows = 1000,
                                  .cols = 4,
                                  .full_shape = {kIds, 4},
                                  .lazy = false});
    CHECK(st.code() == ps::Code::kFailedPrecondition);
    CHECK_THAT(st.message(),
               Catch::Contains(
                   "variable \"emb/embeddings\" is lazy in the checkpoint and dense in this job"));
  }
  SECTION("a variable the checkpoint lacks") {
    ps::Status st = restore_onto({.var = "new/kernel",
                                  .shard = 0,
                                  .num_shards = 1,
                                  .row_begin = 0,
                                  .rows = 2,
                                  .cols = 2,
                                  .full_shape = {2, 2},
                                  .lazy = false});
    CHECK(st.code() == ps::Code::kFailedPrecondition);
    CHECK_THAT(st.message(), Catch::Contains("no record holds rows [0, 2) of new/kernel/part_0"));
  }
}

TEST_CASE(
    "a resharded lazy table with ttl_steps: restored rows are stamped at the checkpoint's step") {
  TempDir dir;
  Cluster a = Build(2, 2, OptimizerKind::kAdagrad, 100);
  Train(a, 1, 3);
  const auto ckpt = Save(a, dir.path(), 3);
  Cluster b = Build(3, 3, OptimizerKind::kAdagrad, 100);
  for (size_t p = 0; p < b.ps.size(); ++p) {
    ps::ckpt::ShardCheckpointer loader(b.ps[p].get(), static_cast<int>(p));
    REQUIRE(loader.Restore({.model_dir = dir.path(), .global_step = 3}).ok());
    CHECK(b.ps[p]->row_clock() == 3);
  }
  CHECK(Assemble(b) == Assemble(a));
  int64_t live = 0;
  for (auto& s : b.ps) live += s->stats().live_rows;
  CHECK(live == static_cast<int64_t>(Assemble(a).at("emb/embeddings").size()));
  // Pushed as at step 103: nothing is evicted (3 + 100); at 104 every restored row is.
  for (auto& s : b.ps) {
    for (const auto& key : s->Keys()) {
      if (!s->GetDef(key)->layout.lazy) continue;
      REQUIRE(s->PushRows(key, std::vector<int64_t>{0}, std::vector<float>(4, 0.1f), 103).ok());
    }
    s->EvictRows();
  }
  int64_t after = 0;
  for (auto& s : b.ps) after += s->stats().live_rows;
  CHECK(after >= live);
  for (auto& s : b.ps) {
    for (const auto& key : s->Keys()) {
      if (!s->GetDef(key)->layout.lazy) continue;
      REQUIRE(s->PushRows(key, std::vector<int64_t>{1}, std::vector<float>(4, 0.1f), 104).ok());
    }
    s->EvictRows();
  }
  int64_t last = 0;
  for (auto& s : b.ps) last += s->stats().live_rows;
  CHECK(last <= 2 * 3);  // only rows 0 and 1 of each lazy shard are left
}

TEST_CASE(
    "another optimizer's checkpoint: its slots the job lacks are dropped, the job's slots it lacks start at their initial values") {
  TempDir dir;
  SECTION("SGD -> Adam, resharded") {
    Cluster a = Build(2, 2, OptimizerKind::kSgd);
    Train(a, 1, 3);
    const auto ckpt = Save(a, dir.path(), 3);
    Cluster b = Build(3, 3, OptimizerKind::kAdam);
    Train(b, 2, 2);  // slots off their initial values: the restore must reset them
    REQUIRE(SlotsOffInitial(b) > 0);
    auto stats = Restore(b, ckpt);
    CHECK(Assemble(b, false) == Assemble(a, false));
    CHECK(SlotsOffInitial(b) == 0);
    for (const auto& s : stats) {
      CHECK(s.slots_dropped.empty());
      CHECK(s.slots_initialised == std::set<std::string>{"m", "v"});
    }
  }
  SECTION("Adam -> SGD") {
    Cluster a = Build(2, 2, OptimizerKind::kAdam);
    Train(a, 1, 3);
    const auto ckpt = Save(a, dir.path(), 3);
    Cluster b = Build(1, 1, OptimizerKind::kSgd);
    auto stats = Restore(b, ckpt);
    CHECK(Assemble(b) == Assemble(a, false));
    CHECK(stats[0].slots_dropped == std::set<std::string>{"m", "v"});
    CHECK(stats[0].slots_initialised.empty());
  }
  SECTION("Adam -> Adagrad") {
    Cluster a = Build(2, 2, OptimizerKind::kAdam);
    Train(a, 1, 3);
    const auto ckpt = Save(a, dir.path(), 3);
    Cluster b = Build(2, 2, OptimizerKind::kAdagrad);
    Train(b, 2, 2);
    Restore(b, ckpt);
    CHECK(Assemble(b, false) == Assemble(a, false));
    CHECK(SlotsOffInitial(b) == 0);
  }
}

TEST_CASE("RestoreSlots::kSkip reshards values and reads no slot") {
  TempDir dir;
  Cluster a = Build(2, 2);
  Train(a, 1, 3);
  const auto ckpt = Save(a, dir.path(), 3);
  Cluster b = Build(3, 5, OptimizerKind::kSgd);
  for (auto& store : b.ps) {
    ps::ckpt::RestoreStats stats;
    ps::Status st =
        ps::ckpt::RestoreStore(store.get(), ckpt, &stats, ps::ckpt::RestoreSlots::kSkip);
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(stats.resharded);
    CHECK(stats.slots_dropped.empty());
  }
  CHECK(Assemble(b) == Assemble(a, false));
}

TEST_CASE(
    "the MANIFEST's placement (not checksummed) only saves reading files: a wrong one still restores") {
  TempDir dir;
  Cluster a = Build(2, 2);
  Train(a, 1, 2);
  const auto ckpt = Save(a, dir.path(), 2);
  auto tampered = ckpt;
  SECTION("every shard placed on ps 0") {
    for (auto& v : tampered.manifest.extra["variables"]) {
      for (auto& s : v["shards"]) s["ps"] = 0;
    }
    Cluster b = Build(2, 2);
    auto stats = Restore(b, tampered);
    CHECK(Assemble(b) == Assemble(a));
    CHECK(stats[1].files_read == 2);  // ps-0.shard as placed, then ps-1.shard for the rows missing
  }
  SECTION("negative rows: no usable placement, every file read") {
    tampered.manifest.extra["variables"][0]["shards"][0]["rows"] = -1;
    Cluster b = Build(2, 2);
    auto stats = Restore(b, tampered);
    CHECK(Assemble(b) == Assemble(a));
    for (const auto& s : stats) CHECK(s.files_read == 2);
  }
  SECTION("row_begin + rows overflows: no usable placement, every file read") {
    tampered.manifest.extra["variables"][0]["shards"][0]["row_begin"] = INT64_MAX - 1;
    tampered.manifest.extra["variables"][0]["shards"][0]["rows"] = 10;
    Cluster b = Build(2, 2);
    auto stats = Restore(b, tampered);
    CHECK(Assemble(b) == Assemble(a));
    for (const auto& s : stats) CHECK(s.files_read == 2);
  }
  SECTION("a row no file holds stays FailedPrecondition after every file was read") {
    Store s;
    REQUIRE(s.Configure(DefaultOptimizer(OptimizerKind::kAdam)).ok());
    ShardDef def;
    def.layout = {.var = "new/kernel",
                  .shard = 0,
                  .num_shards = 1,
                  .row_begin = 0,
                  .rows = 2,
                  .cols = 2,
                  .full_shape = {2, 2},
                  .lazy = false};
    REQUIRE(s.Create(def).ok());
    ps::ckpt::RestoreStats stats;
    ps::Status st = ps::ckpt::RestoreStore(&s, ckpt, &stats);
    CHECK(st.code() == ps::Code::kFailedPrecondition);
    CHECK(stats.files_read == 2);
  }
}

TEST_CASE("rows in two records of the checkpoint are DataLoss") {
  TempDir dir;
  Cluster a;
  const ps::cluster::ShardLayout l{.var = "dense/kernel",
                                   .shard = 0,
                                   .num_shards = 1,
                                   .row_begin = 0,
                                   .rows = 13,
                                   .cols = 3,
                                   .full_shape = {13, 3},
                                   .lazy = false};
  for (int p = 0; p < 2; ++p) {
    a.ps.push_back(std::make_unique<Store>());
    REQUIRE(a.ps.back()->Configure(DefaultOptimizer(OptimizerKind::kAdam)).ok());
    REQUIRE(
        a.ps.back()->Create(ShardDef{.layout = l, .init = {}, .seed = 1, .row_policy = {}}).ok());
  }
  const auto ckpt = Save(a, dir.path(), 1, false);
  Store s;
  REQUIRE(s.Configure(DefaultOptimizer(OptimizerKind::kAdam)).ok());
  REQUIRE(s.Create(ShardDef{.layout = l, .init = {}, .seed = 1, .row_policy = {}}).ok());
  ps::Status st = ps::ckpt::RestoreStore(&s, ckpt);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK_THAT(st.message(),
             Catch::Contains("ps-1.shard") &&
                 Catch::Contains("rows [0, 13) of dense/kernel/part_0 are in two records"));
}

TEST_CASE(
    "a large lazy record resharded onto 3 shards of one ps: pieces that start inside it and cross shards") {
  TempDir dir;
  constexpr int64_t kRows = 150000;
  constexpr int64_t kCols = 64;
  auto layout = [&](int shard, int shards) {
    const int64_t rows = kRows / shards;
    return ps::cluster::ShardLayout{.var = "big/emb",
                                    .shard = shard,
                                    .num_shards = shards,
                                    .row_begin = shard * rows,
                                    .rows = rows,
                                    .cols = kCols,
                                    .full_shape = {kRows, kCols},
                                    .lazy = true};
  };
  const ps::model::InitSpec init{ps::model::InitKind::kUniform, -0.1, 0.1};
  Cluster a;
  a.ps.push_back(std::make_unique<Store>());
  REQUIRE(a.ps[0]->Configure(DefaultOptimizer(OptimizerKind::kAdam)).ok());
  REQUIRE(a.ps[0]
              ->Create(ShardDef{.layout = layout(0, 1), .init = init, .seed = 3, .row_policy = {}})
              .ok());
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < kRows; r += 3) rows.push_back(r);  // 50000 rows
  std::vector<float> grad(rows.size() * kCols);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0, 1);
  for (float& x : grad) x = g(rng);
  REQUIRE(a.ps[0]->PushRows({"big/emb", 0}, rows, grad, 1).ok());
  // The reader hands sparse rows over in pieces of kChunkBytes: several per block here.
  REQUIRE(static_cast<int64_t>(rows.size()) >
          3 * static_cast<int64_t>(ps::ckpt::format::kChunkBytes / 4 / kCols));
  const auto ckpt = Save(a, dir.path(), 1, false);

  Cluster b;
  b.ps.push_back(std::make_unique<Store>());
  REQUIRE(b.ps[0]->Configure(DefaultOptimizer(OptimizerKind::kAdam)).ok());
  for (int shard = 0; shard < 3; ++shard) {
    REQUIRE(b.ps[0]
                ->Create(
                    ShardDef{.layout = layout(shard, 3), .init = init, .seed = 3, .row_policy = {}})
                .ok());
  }
  auto stats = Restore(b, ckpt);
  CHECK(stats[0].resharded);
  CHECK(stats[0].records_read == 1);
  CHECK(stats[0].shards == 3);
  const Whole got = Assemble(b);
  CHECK(got.at("big/emb").size() == rows.size());
  CHECK(got == Assemble(a));
}

// Delta checkpoints (ckpt/checkpoint_dir.h, "Delta checkpoints"): the store's change
// epochs, kind-3 records, and base + deltas restoring bit-identically to a full
// checkpoint of the same state, with evictions, uncommitted and corrupt deltas.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_checkpointer.h"
#include "libps/ckpt/store_io.h"
#include "libps/core/crc32c.h"
#include "libps/obs/inspect.h"
#include "test/support/store_cluster.h"
#include "test/support/temp_dir.h"

using namespace ps::testing;
using ps::ckpt::CheckpointInfo;
using ps::ckpt::Manifest;

namespace {

// A cluster whose stores save and restore through the ps's own ShardCheckpointer.
struct Ps {
  Cluster c;
  std::vector<std::unique_ptr<ps::ckpt::ShardCheckpointer>> ck;
  explicit Ps(Cluster cluster) : c(std::move(cluster)) {
    for (size_t p = 0; p < c.ps.size(); ++p) {
      ck.push_back(
          std::make_unique<ps::ckpt::ShardCheckpointer>(c.ps[p].get(), static_cast<int>(p)));
    }
  }
};

// Every ps saves (a delta of `parent` within `base`'s chain when base is set); the
// MANIFEST is committed unless `commit` is false.
Manifest SaveAll(Ps& ps, const std::string& dir, int64_t step,
                 std::optional<int64_t> base = std::nullopt, int64_t parent = 0,
                 bool commit = true) {
  Manifest m;
  m.global_step = step;
  m.num_ps = static_cast<int>(ps.ck.size());
  m.base = base;
  m.parent = base ? parent : 0;
  for (auto& ck : ps.ck) {
    auto r = ck->Save({.model_dir = dir,
                       .global_step = step,
                       .delta_base = base.value_or(-1),
                       .delta_parent = base ? parent : -1});
    INFO(r.status().message());
    REQUIRE(r.ok());
    m.shards.push_back({r->file, r->bytes, r->digest});
  }
  m.extra = {{"variables", PlanJson(ps.c)}};
  if (commit) REQUIRE(ps::ckpt::CommitCheckpoint(dir, m).ok());
  return m;
}

uint64_t Bytes(const Manifest& m) {
  uint64_t n = 0;
  for (const auto& s : m.shards) n += s.bytes;
  return n;
}

// Steps [first, last]: a few rows of each dense shard (PushRows), and 30 rows of each lazy
// shard drawn from a pool of 120 ids, so that with ttl_steps rows are evicted and created
// again.
void TrainRows(Cluster& c, uint64_t seed, int64_t first, int64_t last) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  for (int64_t step = first; step <= last; ++step) {
    for (const auto& s : c.placement) {
      Store& store = *c.ps[static_cast<size_t>(s.ps)];
      const ShardKey key{s.layout.var, s.layout.shard};
      std::vector<int64_t> rows;
      const int n = s.layout.lazy ? 30 : 2;
      for (int i = 0; i < n; ++i) {
        const uint64_t id = s.layout.lazy ? (rng() % 120) * 7919 : rng();
        rows.push_back(static_cast<int64_t>(id % static_cast<uint64_t>(s.layout.rows)));
      }
      std::sort(rows.begin(), rows.end());
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      std::vector<float> grad(rows.size() * static_cast<size_t>(s.layout.cols));
      for (float& x : grad) x = g(rng);
      REQUIRE(store.PushRows(key, rows, grad, step).ok());
    }
  }
}

Whole RestoreInto(Ps& ps, const std::string& dir, int64_t step) {
  for (auto& ck : ps.ck) {
    ps::Status st = ck->Restore({.model_dir = dir, .global_step = step});
    INFO(st.message());
    REQUIRE(st.ok());
  }
  return Assemble(ps.c);
}

uint64_t Evicted(const Cluster& c) {
  uint64_t n = 0;
  for (const auto& s : c.ps) n += s->stats().rows_evicted_ttl;
  return n;
}

}  // namespace

TEST_CASE(
    "store change epochs: pushes stamp rows, BeginEpoch ends an epoch, evictions are logged") {
  Store s;
  REQUIRE(s.Configure(DefaultOptimizer(OptimizerKind::kAdagrad)).ok());
  ShardDef dense{.layout = {.var = "d",
                            .shard = 0,
                            .num_shards = 1,
                            .row_begin = 0,
                            .rows = 100,
                            .cols = 2,
                            .full_shape = {100, 2},
                            .lazy = false},
                 .init = {},
                 .seed = 1,
                 .row_policy = {}};
  ShardDef lazy{.layout = {.var = "e",
                           .shard = 0,
                           .num_shards = 1,
                           .row_begin = 0,
                           .rows = 1000,
                           .cols = 2,
                           .full_shape = {1000, 2},
                           .lazy = true},
                .init = {},
                .seed = 1,
                .row_policy = {}};
  lazy.row_policy.ttl_steps = 1;
  REQUIRE(s.Create(dense).ok());
  REQUIRE(s.Create(lazy).ok());
  const uint32_t e0 = s.BeginEpoch();
  REQUIRE(s.PushRows({"d", 0}, std::vector<int64_t>{3, 50}, std::vector<float>(4, 1.f), 1).ok());
  REQUIRE(s.PushRows({"e", 0}, std::vector<int64_t>{7, 9}, std::vector<float>(4, 1.f), 1).ok());
  const uint32_t e1 = s.BeginEpoch();
  CHECK(e1 == e0 + 1);
  REQUIRE(s.PushRows({"e", 0}, std::vector<int64_t>{9}, std::vector<float>(2, 1.f), 3).ok());
  s.EvictRows();  // row 7 was last pushed at step 1, the clock is at 3: evicted
  REQUIRE(s.Read({"d", 0}, [&](const ShardView& v) {
             for (int64_t r = 0; r < 100; ++r) {
               CHECK(v.row_epochs[static_cast<size_t>(r)] == (r == 3 || r == 50 ? e1 : 0u));
             }
           }).ok());
  REQUIRE(s.Read({"e", 0}, [&](const ShardView& v) {
             REQUIRE(v.row_ids.size() == 1);
             CHECK(v.row_ids[0] == 9);
             CHECK(v.row_epoch(0) == e1 + 1);
             REQUIRE(v.evicted.size() == 1);
             CHECK(v.evicted[0].first == 7);
             CHECK(v.evicted[0].second == e1 + 1);
           }).ok());
  s.ForgetEvictions(e1 + 1);
  REQUIRE(s.Read({"e", 0}, [&](const ShardView& v) { CHECK(v.evicted.empty()); }).ok());
}

TEST_CASE("a delta record (kind 3) keeps its changed and deleted row ids") {
  TempDir dir;
  const std::string path = dir / "ps-0.shard";
  auto w = ps::ckpt::ShardWriter::Create(path, 0, 5);
  REQUIRE(w.ok());
  ps::cluster::ShardLayout lazy{.var = "e",
                                .shard = 0,
                                .num_shards = 1,
                                .row_begin = 0,
                                .rows = 100,
                                .cols = 2,
                                .full_shape = {100, 2},
                                .lazy = true};
  ps::cluster::ShardLayout dense = lazy;
  dense.var = "d";
  dense.lazy = false;
  const std::vector<int64_t> ids{2, 40};
  const std::vector<int64_t> gone{5, 6, 90};
  const std::vector<float> values{1, 2, 3, 4};
  const std::vector<float> acc{5, 6, 7, 8};
  ps::ckpt::ShardRecordView bad{.layout = dense,
                                .values = values,
                                .slots = {{"accumulator", acc}},
                                .row_ids = ids,
                                .gather = {},
                                .delta = true,
                                .deleted_ids = gone};
  CHECK(w->Append(bad).code() == ps::Code::kInvalidArgument);  // a dense shard deletes nothing
  bad.deleted_ids = {};
  REQUIRE(w->Append(bad).ok());
  ps::ckpt::ShardRecordView rec{.layout = lazy,
                                .values = values,
                                .slots = {{"accumulator", acc}},
                                .row_ids = ids,
                                .gather = {},
                                .delta = true,
                                .deleted_ids = gone};
  REQUIRE(w->Append(rec).ok());
  REQUIRE(w->Commit().ok());
  auto r = ps::ckpt::ShardReader::Open(path);
  REQUIRE(r.ok());
  auto records = r->ReadRecords();
  REQUIRE(records.ok());
  REQUIRE(records->size() == 2);
  const auto& d = (*records)[0];
  CHECK(d.meta.delta);
  CHECK_FALSE(d.meta.layout.lazy);
  CHECK(d.row_ids == ids);
  CHECK(d.deleted_ids.empty());
  CHECK(d.values == values);
  const auto& e = (*records)[1];
  CHECK(e.meta.delta);
  CHECK(e.meta.layout.lazy);
  CHECK(e.row_ids == ids);
  CHECK(e.deleted_ids == gone);
  CHECK(e.slots.at(0).second == acc);
  // Version 2 files have no kind-3 records: one claiming version 2 is refused.
  std::string bytes = ReadBytes(path);
  {
    std::string v2 = bytes;
    v2[8] = 2;
    const uint32_t crc = ps::MaskedCrc32c(ps::Crc32c(0, v2.data(), 28));
    std::memcpy(v2.data() + 28, &crc, 4);
    WriteBytes(dir / "v2.shard", v2);
    auto old = ps::ckpt::ShardReader::Open(dir / "v2.shard");
    REQUIRE(old.ok());
    auto st = old->ReadRecords();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.status().message(), Catch::Contains("unknown record kind 3"));
  }
  // A bit flipped in the deleted ids is caught by the ids' checksum.
  const size_t at =
      bytes.find(std::string(reinterpret_cast<const char*>(gone.data()), gone.size() * 8));
  REQUIRE(at != std::string::npos);
  bytes[at + 9] ^= 1;
  WriteBytes(path, bytes);
  auto again = ps::ckpt::ShardReader::Open(path);
  REQUIRE(again.ok());
  auto broken = again->ReadRecords();
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(broken.status().message(), Catch::Contains("row ids checksum mismatch"));
}

TEST_CASE(
    "base + 3 deltas restore bit-identically to a full checkpoint of the same state (dense, lazy, evictions)") {
  TempDir dir;
  const std::string md = dir / "model";
  Ps a(Build(2, 2, OptimizerKind::kAdam, 2));
  TrainRows(a.c, 1, 1, 3);
  const Manifest full = SaveAll(a, md, 3);
  TrainRows(a.c, 2, 4, 5);
  const Manifest d5 = SaveAll(a, md, 5, 3, 3);
  TrainRows(a.c, 3, 6, 7);
  SaveAll(a, md, 7, 3, 5);
  TrainRows(a.c, 4, 8, 9);
  const Manifest d9 = SaveAll(a, md, 9, 3, 7);
  CHECK(Evicted(a.c) > 0);
  const Whole state = Assemble(a.c);
  REQUIRE(state.at("emb/embeddings").size() > 10);

  CHECK(Bytes(d5) < Bytes(full));
  CHECK(Bytes(d9) < Bytes(full));
  // A delta holds the rows pushed since its parent (2 rows of each dense shard a step),
  // and the evicted rows, as deleted.
  size_t deleted = 0;
  for (int p = 0; p < 2; ++p) {
    auto r = ps::ckpt::ShardReader::Open(ps::ckpt::DeltaPath(md, 3, 9) + "/" +
                                         ps::ckpt::ShardFileName(p));
    REQUIRE(r.ok());
    auto records = r->ReadRecords();
    REQUIRE(records.ok());
    for (const auto& rec : *records) {
      CHECK(rec.meta.delta);
      deleted += rec.deleted_ids.size();
      if (rec.meta.layout.var == "dense/kernel") {
        CHECK(rec.meta.stored_rows <= 4);
        CHECK(rec.meta.stored_rows < rec.meta.layout.rows);
      }
    }
  }
  CHECK(deleted > 0);

  std::vector<std::string> warnings;
  auto found = ps::ckpt::FindRestorable(md, &warnings);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  const CheckpointInfo& chain = **found;
  CHECK(chain.global_step == 3);
  REQUIRE(chain.deltas.size() == 3);
  CHECK(chain.restored_step() == 9);
  for (const auto& w : warnings) WARN(w);
  CHECK(warnings.empty());
  // `pstrain inspect` lists the chain beside its base.
  auto listing = ps::obs::InspectModelDir(md, {});
  REQUIRE(listing.ok());
  INFO(listing->text);
  CHECK_THAT(listing->text, Catch::Contains("  no     3 to step 9, "));

  // The same state saved in full restores to the same bytes as base + deltas.
  const std::string ref = dir / "ref";
  SaveAll(a, ref, 9);
  Ps r(Build(2, 2, OptimizerKind::kAdam, 2));
  CHECK(RestoreInto(r, ref, 9) == state);

  Ps b(Build(2, 2, OptimizerKind::kAdam, 2));
  TrainRows(b.c, 99, 1, 2);  // rows the chain lacks: the restore drops them
  CHECK(RestoreInto(b, md, 9) == state);

  SECTION("onto another ps count and partitioning") {
    Cluster c = Build(3, 5, OptimizerKind::kAdam, 2);
    for (auto& store : c.ps) {
      ps::ckpt::RestoreStats stats;
      ps::Status st = ps::ckpt::RestoreStore(store.get(), chain, &stats);
      INFO(st.message());
      REQUIRE(st.ok());
      CHECK(stats.deltas == 3);
    }
    CHECK(Assemble(c) == state);
  }
  SECTION("a restored ps writes deltas on top of what it restored") {
    // (Not compared with `a`: restored rows count as pushed at step 9, so ttl evicts
    // differently from here on.)
    TrainRows(b.c, 5, 10, 11);
    SaveAll(b, md, 11, 3, 9);
    Ps c(Build(2, 2, OptimizerKind::kAdam, 2));
    CHECK(RestoreInto(c, md, 11) == Assemble(b.c));
  }
  SECTION("max_to_keep deletes a base with its deltas") {
    SaveAll(a, md, 10);
    std::vector<std::string> removed;
    REQUIRE(ps::ckpt::ApplyMaxToKeep(md, 1, &removed).ok());
    CHECK_FALSE(std::filesystem::exists(ps::ckpt::CheckpointPath(md, 3)));
    auto list = ps::ckpt::ListCheckpoints(md);
    REQUIRE(list.ok());
    REQUIRE(list->size() == 1);
    CHECK(list->front().global_step == 10);
  }
}

TEST_CASE("a delta without its MANIFEST does not exist; the next delta rewrites its rows") {
  TempDir dir;
  const std::string md = dir / "model";
  Ps a(Build(2, 2, OptimizerKind::kAdagrad, 0));
  TrainRows(a.c, 1, 1, 3);
  SaveAll(a, md, 3);
  TrainRows(a.c, 2, 4, 5);
  SaveAll(a, md, 5, 3, 3);
  const Whole at5 = Assemble(a.c);
  TrainRows(a.c, 3, 6, 7);
  SaveAll(a, md, 7, 3, 5, /*commit=*/false);  // the chief never committed it
  REQUIRE(std::filesystem::exists(ps::ckpt::DeltaPath(md, 3, 7) + "/ps-0.shard"));

  auto found = ps::ckpt::FindRestorable(md, nullptr);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->restored_step() == 5);
  CHECK(ps::ckpt::LoadCheckpointAt(md, 7).status().code() == ps::Code::kNotFound);
  Ps b(Build(2, 2, OptimizerKind::kAdagrad, 0));
  CHECK(RestoreInto(b, md, 5) == at5);

  std::vector<std::string> removed;
  REQUIRE(ps::ckpt::CleanUncommitted(md, &removed).ok());
  CHECK_FALSE(std::filesystem::exists(ps::ckpt::DeltaPath(md, 3, 7)));
  CHECK(std::filesystem::exists(ps::ckpt::DeltaPath(md, 3, 5) + "/MANIFEST"));

  // The next delta is against the last committed one (5): the rows changed in steps 6-7,
  // which the lost delta held, are written again.
  TrainRows(a.c, 4, 8, 9);
  SaveAll(a, md, 9, 3, 5);
  Ps c(Build(2, 2, OptimizerKind::kAdagrad, 0));
  CHECK(RestoreInto(c, md, 9) == Assemble(a.c));
}

TEST_CASE("a corrupt delta stops the chain at the one before it, with a warning naming it") {
  TempDir dir;
  const std::string md = dir / "model";
  Ps a(Build(2, 2, OptimizerKind::kAdam, 2));
  TrainRows(a.c, 1, 1, 3);
  SaveAll(a, md, 3);
  TrainRows(a.c, 2, 4, 5);
  SaveAll(a, md, 5, 3, 3);
  const Whole at5 = Assemble(a.c);
  TrainRows(a.c, 3, 6, 7);
  SaveAll(a, md, 7, 3, 5);
  TrainRows(a.c, 4, 8, 9);
  SaveAll(a, md, 9, 3, 7);
  const std::string bad = ps::ckpt::DeltaPath(md, 3, 7) + "/ps-1.shard";
  std::string bytes = ReadBytes(bad);

  SECTION("its footer (found by the default verification)") {
    bytes[bytes.size() - 10] ^= 0x4;
    WriteBytes(bad, bytes);
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings);
    REQUIRE(found.ok());
    REQUIRE(found->has_value());
    CHECK((*found)->restored_step() == 5);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains(bad) && Catch::Contains("delta-7 is corrupt") &&
                                Catch::Contains("stops at step 5"));
    auto listing = ps::obs::InspectModelDir(md, {});
    REQUIRE(listing.ok());
    INFO(listing->text);
    CHECK_THAT(listing->text, Catch::Contains("  no     1 to step 5, ") &&
                                  Catch::Contains("warnings:\n") && Catch::Contains(bad));
    Ps b(Build(2, 2, OptimizerKind::kAdam, 2));
    CHECK(RestoreInto(b, md, 5) == at5);
    // Asked for the broken chain's end, a ps refuses rather than restoring something else.
    CHECK(ps::ckpt::LoadCheckpointAt(md, 9).status().code() == ps::Code::kDataLoss);
  }
  SECTION("a data block (found by full verification)") {
    bytes[bytes.size() - 32 - 4 - 3] ^= 0x4;
    WriteBytes(bad, bytes);
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings, ps::ckpt::Verify::kFull);
    REQUIRE(found.ok());
    REQUIRE(found->has_value());
    CHECK((*found)->restored_step() == 5);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains(bad) && Catch::Contains("checksum mismatch"));
  }
  SECTION(
      "options: deltas up to verify_after join unverified; read sees each newer one, its DataLoss stops the chain") {
    bytes[bytes.size() - 10] ^= 0x4;  // delta 7's footer
    WriteBytes(bad, bytes);
    CheckpointInfo base{.global_step = 3, .dir = ps::ckpt::CheckpointPath(md, 3), .manifest = {}};
    std::vector<int64_t> read;
    std::optional<int64_t> fail_at;
    ps::Code fail_code = ps::Code::kDataLoss;
    ps::ckpt::DeltaChainOptions options{.upto = std::nullopt,
                                        .verify_after = 7,
                                        .read = [&](const CheckpointInfo& d) -> ps::Status {
                                          read.push_back(d.global_step);
                                          if (fail_at == d.global_step)
                                            return ps::Status(fail_code, "read failed");
                                          return ps::Status::Ok();
                                        }};
    std::vector<std::string> warnings;
    REQUIRE(ps::ckpt::LoadDeltaChain(&base, ps::ckpt::Verify::kFooters, &warnings, options).ok());
    CHECK(base.restored_step() == 9);  // delta 7's damaged files are not looked at
    CHECK(read == std::vector<int64_t>{9});
    CHECK(warnings.empty());
    // verify_after 5: delta 7 is verified, and stops the chain before read sees it.
    read.clear();
    options.verify_after = 5;
    REQUIRE(ps::ckpt::LoadDeltaChain(&base, ps::ckpt::Verify::kFooters, &warnings, options).ok());
    CHECK(base.restored_step() == 5);
    CHECK(read.empty());
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains(bad) && Catch::Contains("delta-7 is corrupt"));
    // read's DataLoss breaks the chain as a failed verification does; another error fails.
    read.clear();
    warnings.clear();
    options.verify_after = 7;
    fail_at = 9;
    REQUIRE(ps::ckpt::LoadDeltaChain(&base, ps::ckpt::Verify::kFooters, &warnings, options).ok());
    CHECK(base.restored_step() == 7);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(
        warnings[0],
        Catch::Contains(
            "read failed; delta delta-9 is corrupt; the delta chain of ckpt-3 stops at step 7"));
    fail_code = ps::Code::kIo;
    CHECK(ps::ckpt::LoadDeltaChain(&base, ps::ckpt::Verify::kFooters, &warnings, options).code() ==
          ps::Code::kIo);
  }
}

TEST_CASE("a delta against a checkpoint the ps did not write or restore is refused") {
  TempDir dir;
  Ps a(Build(1, 1, OptimizerKind::kAdam, 0));
  TrainRows(a.c, 1, 1, 2);
  SaveAll(a, dir.path(), 2);
  auto r = a.ck[0]->Save(
      {.model_dir = dir.path(), .global_step = 4, .delta_base = 2, .delta_parent = 3});
  CHECK(r.status().code() == ps::Code::kFailedPrecondition);
  CHECK_THAT(r.status().message(), Catch::Contains("a full checkpoint is needed"));
}

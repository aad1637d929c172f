// Admission and eviction of lazy rows (store.h, "Admission and eviction"): a row is
// created exactly at its N-th push, dropped gradients are counted, ttl_steps and
// max_rows evict (least recently pushed first), an evicted row pulls its initial value
// again, EvictRows leaves only live rows for a checkpoint; the admission sketch's false
// positive rate against its documented figure; LazyStripe::Erase against a map.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "libps/server/lazy_rows.h"
#include "libps/server/store.h"

using namespace ps::server;
using ps::model::InitKind;
using ps::model::RowPolicy;

namespace {

ShardDef Def(RowPolicy policy, int num_shards = 1) {
  ShardDef d;
  d.layout.var = "emb";
  d.layout.num_shards = num_shards;
  d.layout.rows = int64_t{1} << 40;
  d.layout.cols = 3;
  d.layout.full_shape = {d.layout.rows * num_shards, 3};
  d.layout.lazy = true;
  d.init = {InitKind::kUniform, -0.05, 0.05};
  d.seed = 11;
  d.row_policy = policy;
  return d;
}

void Build(Store* store, const ShardDef& def, OptimizerKind kind = OptimizerKind::kSgd) {
  OptimizerSpec spec = DefaultOptimizer(kind);
  spec.learning_rate = 0.5;
  REQUIRE(store->Configure(spec).ok());
  REQUIRE(store->Create(def).ok());
}

std::vector<float> Pull(Store& store, const ShardKey& key, std::vector<int64_t> rows) {
  std::vector<float> out(rows.size() * 3);
  REQUIRE(store.PullRows(key, rows, out).ok());
  return out;
}

// Pushes gradient `g` (every element) for `rows` at global step `step`.
void Push(Store& store, const ShardKey& key, std::vector<int64_t> rows, float g, int64_t step) {
  std::sort(rows.begin(), rows.end());
  std::vector<float> grad(rows.size() * 3, g);
  REQUIRE(store.PushRows(key, rows, grad, step).ok());
}

std::vector<int64_t> Created(Store& store, const ShardKey& key) {
  std::vector<int64_t> ids;
  REQUIRE(
      store.Read(key, [&](const ShardView& v) { ids.assign(v.row_ids.begin(), v.row_ids.end()); })
          .ok());
  return ids;
}

// A sweep runner that keeps the work handed over, for the test to run when it chooses.
Store::SweepRunner Keep(std::vector<std::function<void()>>& handed) {
  return [&handed](std::function<void()> work) { handed.push_back(std::move(work)); };
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE(
    "admission: a row is created exactly at its N-th push; before, it pulls its initial value") {
  const int64_t n = GENERATE(2, 3, 7);
  CAPTURE(n);
  Store store;
  const ShardDef def = Def({.admit_min_count = n});
  Build(&store, def);
  Store plain;  // the same table without admission: its never-pushed rows are the reference
  Build(&plain, Def({}));
  const ShardKey key = def.key();
  const std::vector<int64_t> rows = {5, 123456789, int64_t{1} << 39};
  const std::vector<float> initial = Pull(plain, key, rows);

  for (int64_t push = 1; push < n; ++push) {
    Push(store, key, rows, 1.0f, push);
    CHECK(store.Memory(key)->rows == 0);
    CHECK(BitEqual(Pull(store, key, rows), initial));
    CHECK(store.stats().rows_not_admitted == static_cast<uint64_t>(push) * rows.size());
    CHECK(store.stats().rows_admitted == 0);
  }
  Push(store, key, rows, 1.0f, n);  // the N-th push creates the rows and applies its gradient
  CHECK(store.Memory(key)->rows == 3);
  CHECK(store.stats().rows_admitted == 3);
  CHECK(store.stats().rows_not_admitted == static_cast<uint64_t>(n - 1) * 3);
  CHECK(store.stats().live_rows == 3);
  Push(plain, key, rows, 1.0f, 0);  // one SGD step from the initial value, exactly
  CHECK(BitEqual(Pull(store, key, rows), Pull(plain, key, rows)));
  // Once admitted, every push is applied.
  Push(store, key, rows, 1.0f, n + 1);
  Push(plain, key, rows, 1.0f, 0);
  CHECK(BitEqual(Pull(store, key, rows), Pull(plain, key, rows)));
  CHECK(store.stats().rows_not_admitted == static_cast<uint64_t>(n - 1) * 3);
  // Pulls do not count towards admission.
  for (int i = 0; i < 10; ++i) (void)Pull(store, key, {42});
  Push(store, key, {42}, 1.0f, n + 2);
  CHECK(store.Memory(key)->rows == 3);
}

TEST_CASE("admission: with min_count 1 (the default) every push creates its rows; no sketch") {
  Store store;
  Build(&store, Def({.admit_min_count = 1}));
  Push(store, Def({}).key(), {1, 2}, 1.0f, 1);
  CHECK(store.Memory(Def({}).key())->rows == 2);
  CHECK(store.stats().rows_admitted == 0);
  CHECK(store.stats().rows_not_admitted == 0);
}

TEST_CASE(
    "ttl eviction: a row not pushed for more than ttl_steps steps is evicted and pulls its initial value") {
  Store store;
  const ShardDef def = Def({.ttl_steps = 5});
  Build(&store, def);
  Store plain;
  Build(&plain, Def({}));
  const ShardKey key = def.key();
  const std::vector<float> initial_a = Pull(plain, key, {100});
  Push(store, key, {100, 200}, 1.0f, 1);  // a: last pushed at 1
  CHECK_FALSE(BitEqual(Pull(store, key, {100}), initial_a));
  for (int64_t step = 2; step <= 6; ++step) Push(store, key, {200}, 1.0f, step);
  CHECK(Created(store, key) == std::vector<int64_t>{100, 200});  // 6 - 1 = 5: not more than 5
  Push(store, key, {200}, 1.0f, 7);                              // 7 - 1 > 5: a goes
  CHECK(Created(store, key) == std::vector<int64_t>{200});
  CHECK(store.stats().rows_evicted_ttl == 1);
  CHECK(store.stats().live_rows == 1);
  CHECK(BitEqual(Pull(store, key, {100}), initial_a));
  // Pushed again, it starts over from its initial value.
  Push(store, key, {100}, 1.0f, 8);
  Push(plain, key, {100}, 1.0f, 0);
  CHECK(BitEqual(Pull(store, key, {100}), Pull(plain, key, {100})));
  // A late push of an old step (a retried step) marks its row as pushed at the row clock.
  Push(store, key, {300}, 1.0f, 2);  // row clock 8: stamped 8, not 2
  Push(store, key, {200}, 1.0f, 13);
  CHECK(Created(store, key) == std::vector<int64_t>{100, 200, 300});
  Push(store, key, {200}, 1.0f, 14);
  CHECK(Created(store, key) == std::vector<int64_t>{200});
}

TEST_CASE(
    "with a sweep runner a push hands a due sweep over and returns; one per shard at a time") {
  Store store;
  std::vector<std::function<void()>> handed;
  store.SetSweepRunner(Keep(handed));
  const ShardDef def = Def({.ttl_steps = 5});
  Build(&store, def);
  const ShardKey key = def.key();
  Push(store, key, {100, 200}, 1.0f, 1);  // the first sweep is due at once
  REQUIRE(handed.size() == 1);
  handed[0]();  // nothing to evict; the next is due at 2
  for (int64_t step = 2; step <= 7; ++step) Push(store, key, {200}, 1.0f, step);
  REQUIRE(handed.size() == 2);  // due at 2 and after: handed over once, not run
  CHECK(Created(store, key) == std::vector<int64_t>{100, 200});  // 7 - 1 > 5, but not swept yet
  CHECK(store.stats().rows_evicted_ttl == 0);
  handed[1]();  // at row clock 7: 100 goes
  CHECK(Created(store, key) == std::vector<int64_t>{200});
  CHECK(store.stats().rows_evicted_ttl == 1);
  Push(store, key, {200}, 1.0f, 8);  // due again at 8
  REQUIRE(handed.size() == 3);
  store.EvictRows();  // meanwhile, exact at 8: the next sweep is due at 9
  handed[2]();        // no longer due: nothing swept, and the shard may hand over again
  Push(store, key, {200}, 1.0f, 9);
  CHECK(handed.size() == 4);

  // max_rows: a push that takes the shard past max_rows and a sixteenth hands a sweep over.
  Store capped;
  std::vector<std::function<void()>> capped_handed;
  capped.SetSweepRunner(Keep(capped_handed));
  const ShardDef capped_def = Def({.max_rows = 16});
  Build(&capped, capped_def);
  std::vector<int64_t> rows(20);
  for (int64_t r = 0; r < 20; ++r) rows[static_cast<size_t>(r)] = r;
  Push(capped, capped_def.key(), rows, 1.0f, 1);
  REQUIRE(capped_handed.size() == 1);
  CHECK(Created(capped, capped_def.key()).size() == 20);
  capped_handed[0]();
  CHECK(Created(capped, capped_def.key()).size() == 16);
  CHECK(capped.stats().rows_evicted_max_rows == 4);
}

TEST_CASE(
    "a sweep handed over does nothing while sweeps are paused (a restore), and is handed over again") {
  Store store;
  std::vector<std::function<void()>> handed;
  store.SetSweepRunner(Keep(handed));
  const ShardDef def = Def({.ttl_steps = 100});
  Build(&store, def);
  const ShardKey key = def.key();
  Push(store, key, {1, 2}, 1.0f, 1);
  REQUIRE(handed.size() == 1);
  handed[0]();                       // the next is due at 13
  Push(store, key, {1}, 1.0f, 500);  // due: handed over, not run yet
  REQUIRE(handed.size() == 2);
  {
    auto paused = store.PauseSweeps();
    // A restore: the rows are replaced, stamped 0 until ResetRowClock.
    auto fill = store.Fill(key);
    REQUIRE(fill.ok());
    REQUIRE((*fill)->DropRows().ok());
    Store::CreatedRows created;
    const std::vector<int64_t> restored = {5, 6, 7};
    REQUIRE((*fill)->CreateRows(restored, &created).ok());
    fill->reset();
    // The sweep runs meanwhile (on another thread, as the sweeper's would): at row clock
    // 500 it would evict rows stamped 0.
    auto sweep = std::async(std::launch::async, [&] { handed[1](); });
    REQUIRE(sweep.wait_for(std::chrono::seconds(30)) ==
            std::future_status::ready);  // it must not wait
    store.ResetRowClock(400);
  }
  CHECK(Created(store, key) == std::vector<int64_t>{5, 6, 7});
  CHECK(store.stats().live_rows == 3);
  CHECK(store.stats().rows_evicted_ttl == 0);
  Push(store, key, {5}, 1.0f, 401);  // ResetRowClock made a sweep due: handed over again
  REQUIRE(handed.size() == 3);
  handed[2]();
  CHECK(Created(store, key) == std::vector<int64_t>{5, 6, 7});  // stamped 400: none goes
}

TEST_CASE(
    "a runner that cannot take the sweep: the push is applied, and the next push hands it over") {
  Store store;
  int calls = 0;
  std::vector<std::function<void()>> handed;
  store.SetSweepRunner([&](std::function<void()> work) {
    if (++calls == 1) throw std::bad_alloc();
    handed.push_back(std::move(work));
  });
  const ShardDef def = Def({.ttl_steps = 5});
  Build(&store, def);
  const ShardKey key = def.key();
  Store plain;
  Build(&plain, Def({}));
  Push(store, key, {100}, 1.0f, 1);  // due: the runner throws; the gradient is applied
  Push(plain, key, {100}, 1.0f, 1);
  CHECK(BitEqual(Pull(store, key, {100}), Pull(plain, key, {100})));
  CHECK(handed.empty());
  Push(store, key, {100}, 1.0f, 2);
  CHECK(handed.size() == 1);
}

TEST_CASE("ttl eviction: sweeps run every ttl/8 steps; EvictRows is exact") {
  Store store;
  const ShardDef def = Def({.ttl_steps = 80});
  Build(&store, def);
  const ShardKey key = def.key();
  Push(store, key, {1}, 1.0f, 0);  // a sweep (nothing to evict); the next is due at 10
  Push(store, key, {2}, 1.0f, 5);
  Push(store, key, {3}, 1.0f, 81);  // due: 1 goes (81 - 0 > 80), 2 stays (76); next due at 91
  CHECK(Created(store, key) == std::vector<int64_t>{2, 3});
  Push(store, key, {3}, 1.0f, 86);  // 2 is 81 behind, but no sweep is due
  CHECK(Created(store, key) == std::vector<int64_t>{2, 3});
  CHECK(store.stats().rows_evicted_ttl == 1);
  store.EvictRows();  // exact, at row clock 86
  CHECK(Created(store, key) == std::vector<int64_t>{3});
  CHECK(store.stats().rows_evicted_ttl == 2);
  CHECK(store.stats().live_rows == 1);
}

TEST_CASE("max_rows eviction: least recently pushed rows go first") {
  Store store;
  const ShardDef def = Def({.max_rows = 4});
  Build(&store, def);
  const ShardKey key = def.key();
  for (int64_t r = 0; r < 6; ++r) Push(store, key, {r * 1000}, 1.0f, r);
  CHECK(Created(store, key) == std::vector<int64_t>{2000, 3000, 4000, 5000});
  CHECK(store.stats().rows_evicted_max_rows == 2);
  Push(store, key, {2000}, 1.0f, 6);  // 2000 is now the most recent
  Push(store, key, {9000}, 1.0f, 7);  // 3000 is the least recently pushed
  CHECK(Created(store, key) == std::vector<int64_t>{2000, 4000, 5000, 9000});
  // Several rows in one push: the oldest of the others go.
  Push(store, key, {7000, 8000}, 1.0f, 8);
  CHECK(Created(store, key) == std::vector<int64_t>{2000, 7000, 8000, 9000});
  CHECK(store.stats().rows_evicted_max_rows == 5);
  CHECK(store.stats().live_rows == 4);
}

TEST_CASE(
    "max_rows eviction: a table split over shards keeps ceil(max_rows / num_shards) per shard") {
  Store store;
  const ShardDef def = Def({.max_rows = 5}, 2);  // 3 per shard
  Build(&store, def);
  const ShardKey key = def.key();
  for (int64_t r = 0; r < 10; ++r) Push(store, key, {r}, 1.0f, r);
  CHECK(Created(store, key) == std::vector<int64_t>{7, 8, 9});
}

TEST_CASE("max_rows eviction: above 16 rows a shard may exceed it by a sixteenth until EvictRows") {
  Store store;
  const ShardDef def = Def({.max_rows = 64});
  Build(&store, def);
  const ShardKey key = def.key();
  for (int64_t r = 0; r < 68; ++r) Push(store, key, {r}, 1.0f, r);
  CHECK(store.Memory(key)->rows == 68);  // 64 + 64 / 16: not yet
  Push(store, key, {68}, 1.0f, 68);      // 69 > 68: swept down to 64
  CHECK(store.Memory(key)->rows == 64);
  CHECK(Created(store, key).front() == 5);
  for (int64_t r = 69; r < 72; ++r) Push(store, key, {r}, 1.0f, r);
  CHECK(store.Memory(key)->rows == 67);
  store.EvictRows();
  CHECK(store.Memory(key)->rows == 64);
  CHECK(Created(store, key).front() == 8);
}

TEST_CASE("admission: rows admitted but not created (the shard is full) are not counted") {
  Store store;
  store.SetLazyChunkLimitForTesting(1);  // 16 records
  const ShardDef def = Def({.admit_min_count = 2});
  Build(&store, def);
  const ShardKey key = def.key();
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 40; ++r) rows.push_back(r * 1000003);
  Push(store, key, rows, 1.0f, 1);  // counted, none admitted yet
  CHECK(store.stats().rows_not_admitted == 40);
  std::vector<float> grad(rows.size() * 3, 1.0f);
  const ps::Status st = store.PushRows(key, rows, grad, 2);  // all 40 admitted, 16 fit
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("lazy shard full") != std::string::npos);
  const uint64_t created = static_cast<uint64_t>(store.Memory(key)->rows);
  CHECK(created == 16);
  CHECK(store.stats().live_rows == 16);
  CHECK(store.stats().rows_admitted == created);
}

TEST_CASE("admission and eviction: an evicted row must be admitted anew") {
  Store store;
  const ShardDef def = Def({.admit_min_count = 2, .ttl_steps = 3});
  Build(&store, def);
  Store plain;
  Build(&plain, Def({}));
  const ShardKey key = def.key();
  Push(store, key, {77}, 1.0f, 1);
  Push(store, key, {77}, 1.0f, 2);
  CHECK(Created(store, key) == std::vector<int64_t>{77});
  for (int64_t step = 3; step <= 6; ++step) Push(store, key, {5}, 1.0f, step);  // 5 admitted at 4
  CHECK(Created(store, key) == std::vector<int64_t>{5});  // 77 evicted: 6 - 2 > 3
  CHECK(BitEqual(Pull(store, key, {77}), Pull(plain, key, {77})));
  Push(store, key, {77}, 1.0f, 7);
  CHECK(Created(store, key) == std::vector<int64_t>{5});
  Push(store, key, {77}, 1.0f, 8);
  CHECK(Created(store, key) == std::vector<int64_t>{5, 77});
  CHECK(store.stats().rows_admitted == 3);
  CHECK(store.stats().rows_not_admitted == 3);
  CHECK(store.stats().rows_evicted_ttl == 1);
}

TEST_CASE(
    "EvictRows leaves only live rows to Read (what a checkpoint writes); ResetRowClock restamps") {
  Store store;
  const ShardDef def = Def({.ttl_steps = 100, .max_rows = 3});
  Build(&store, def, OptimizerKind::kAdagrad);
  const ShardKey key = def.key();
  Push(store, key, {1, 2}, 1.0f, 10);
  Push(store, key, {3}, 1.0f, 20);
  Push(store, key, {4}, 1.0f, 30);  // max_rows: 1 or 2 (both at 10) goes; ties in stripe order
  CHECK(store.Memory(key)->rows == 3);
  Push(store, key, {4}, 1.0f, 115);  // ttl sweep at 115: the one left of 1, 2 (10) goes
  CHECK(Created(store, key) == std::vector<int64_t>{3, 4});
  store.EvictRows();  // 115 - 20 = 95: 3 stays
  CHECK(Created(store, key) == std::vector<int64_t>{3, 4});
  // The record layout (values then the Adagrad slot) is unchanged by the stamp.
  REQUIRE(store
              .Read(key,
                    [&](const ShardView& v) {
                      REQUIRE(v.row_ids.size() == 2);
                      REQUIRE(v.slots.size() == 1);
                      for (size_t i = 0; i < 2; ++i)
                        CHECK(v.row(i, 1)[0] > 0.1f);  // accumulators grew
                    })
              .ok());
  store.ResetRowClock(500);  // as after a restore at step 500: every row pushed at 500
  CHECK(store.row_clock() == 500);
  Push(store, key, {9}, 1.0f, 550);
  CHECK(Created(store, key) == std::vector<int64_t>{3, 4, 9});
  Push(store, key, {9}, 1.0f, 601);
  CHECK(Created(store, key) == std::vector<int64_t>{9});
}

TEST_CASE("admission and eviction are refused on a dense shard and out of range") {
  Store store;
  OptimizerSpec spec = DefaultOptimizer(OptimizerKind::kSgd);
  REQUIRE(store.Configure(spec).ok());
  ShardDef dense = Def({.ttl_steps = 4});
  dense.layout.lazy = false;
  dense.layout.rows = 10;
  dense.layout.full_shape = {10, 3};
  auto st = store.Create(dense);
  CHECK(st.code() == ps::Code::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("lazy shards only"));
  st = store.Create(Def({.admit_min_count = 256}));
  CHECK_THAT(st.message(), Catch::Contains("emb/part_0.admit.min_count: must be in [1, 255]"));
  st = store.Create(Def({.max_rows = -1}));
  CHECK_THAT(st.message(), Catch::Contains("emb/part_0.evict.max_rows"));
}

TEST_CASE("eviction while other threads pull and push: counts add up, pulls see whole rows") {
  // Sweeps on the pushing threads (the default), or handed over to threads of their own
  // as a ps does (each sweep handed over runs on a new thread, joined before the checks).
  const bool handed_over = GENERATE(false, true);
  CAPTURE(handed_over);
  Store store;
  std::mutex sweepers_mu;
  std::vector<std::thread> sweepers;
  struct JoinAll {  // before the store goes, also when a check throws
    std::vector<std::thread>& threads;
    ~JoinAll() {
      for (auto& th : threads)
        if (th.joinable()) th.join();
    }
  } join_sweepers{sweepers};
  if (handed_over) {
    store.SetSweepRunner([&](std::function<void()> work) {
      std::lock_guard lock(sweepers_mu);
      sweepers.emplace_back(std::move(work));
    });
  }
  const ShardDef def = Def({.admit_min_count = 2, .ttl_steps = 20, .max_rows = 300});
  Build(&store, def);
  const ShardKey key = def.key();
  Store plain;
  Build(&plain, Def({}));
  std::vector<int64_t> all(2000);
  for (int64_t r = 0; r < 2000; ++r) all[static_cast<size_t>(r)] = r;
  const std::vector<float> initial = Pull(plain, key, all);  // [2000 * 3]
  std::atomic<int64_t> step{0};
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      for (int i = 0; i < 400; ++i) {
        std::set<int64_t> ids;
        while (ids.size() < 40) ids.insert(static_cast<int64_t>(rng() % 2000));
        std::vector<int64_t> rows(ids.begin(), ids.end());
        if (t % 2 == 0) {
          std::vector<float> grad(rows.size() * 3, 1.0f);
          if (!store.PushRows(key, rows, grad, step.fetch_add(1)).ok()) bad = true;
        } else {
          std::vector<float> out(rows.size() * 3);
          if (!store.PullRows(key, rows, out).ok()) bad = true;
          // SGD (lr 0.5) with gradient 1 moves the 3 columns of a row by the same -0.5 k:
          // a row pulled half-updated, or from a record reused by another row, would not.
          for (size_t r = 0; r < rows.size(); ++r) {
            const float* init = &initial[static_cast<size_t>(rows[r]) * 3];
            const float d0 = out[r * 3] - init[0];
            const float k = -d0 / 0.5f;
            if (!(k > -0.01f) || std::fabs(k - std::round(k)) > 0.01f) bad = true;
            for (size_t c = 1; c < 3; ++c) {
              if (std::fabs(out[r * 3 + c] - init[c] - d0) > 1e-3f) bad = true;
            }
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& th : sweepers) th.join();  // no push is left to add any
  CHECK_FALSE(bad);
  if (handed_over) {
    // Every sweep handed over has run and let its shard hand over again: a push that finds
    // one due now hands over exactly one more.
    const size_t ran = sweepers.size();
    REQUIRE(ran >= 1);
    std::vector<float> grad(3, 1.0f);
    const std::vector<int64_t> row = {0};
    REQUIRE(store.PushRows(key, row, grad, step.load() + 100).ok());
    REQUIRE(sweepers.size() == ran + 1);
    sweepers.back().join();
  }
  const StoreStats st = store.stats();
  CHECK(static_cast<int64_t>(st.rows_admitted) -
            static_cast<int64_t>(st.rows_evicted_ttl + st.rows_evicted_max_rows) ==
        st.live_rows);
  CHECK(store.Memory(key)->rows == st.live_rows);
  // On the pushing threads a shard exceeds max_rows by at most a sixteenth plus the rows
  // of the pushes under way; a sweep handed over lags by the pushes made while it waits.
  if (!handed_over) CHECK(st.live_rows <= 300 + 300 / 16 + 80);
  store.EvictRows();
  CHECK(store.Memory(key)->rows <= 300);
  CHECK(static_cast<int64_t>(Created(store, key).size()) == store.stats().live_rows);
}

TEST_CASE("AdmitSketch: false-positive rate at the documented loads") {
  // A fresh id's estimate is wrong only if all 4 of its counters are taken by other ids:
  // with n ids counted once each in m counters, (1 - e^{-4n/m})^4
  // (store.h, docs/guide/sparse-tables.md).
  struct Load {
    size_t n;
    double documented;
  };
  const Load load = GENERATE(Load{kSketchCounters / 16, 0.0024}, Load{kSketchCounters / 8, 0.0240});
  CAPTURE(load.n);
  const double formula =
      std::pow(1 - std::exp(-4.0 * static_cast<double>(load.n) / kSketchCounters), 4);
  CHECK(formula == Approx(load.documented).epsilon(0.05));
  std::mt19937_64 rng(1234);
  auto sketch = std::make_unique<AdmitSketch>();
  for (size_t i = 0; i < load.n; ++i) sketch->Add(HashRow(static_cast<int64_t>(rng() >> 24)));
  CHECK(sketch->agings() == 0);
  const int queries = 400000;
  int wrong = 0;
  for (int i = 0; i < queries; ++i)
    wrong += sketch->Estimate(HashRow(static_cast<int64_t>(rng() >> 24))) > 0;
  const double measured = static_cast<double>(wrong) / queries;
  CAPTURE(measured, formula);
  CHECK(measured > 0.75 * formula);
  CHECK(measured < 1.25 * formula);
}

TEST_CASE(
    "AdmitSketch: aging keeps the false-positive rate under (1/2)^4, and Remove frees counters") {
  std::mt19937_64 rng(99);
  auto sketch = std::make_unique<AdmitSketch>();
  for (size_t i = 0; i < 4 * kSketchCounters; ++i) {
    sketch->Add(HashRow(static_cast<int64_t>(rng() >> 24)));
    REQUIRE(sketch->nonzero() * 2 <= kSketchCounters);
  }
  CHECK(sketch->agings() > 0);
  const double occupancy = static_cast<double>(sketch->nonzero()) / kSketchCounters;
  CHECK(occupancy <= 0.5);
  int wrong = 0;
  const int queries = 200000;
  for (int i = 0; i < queries; ++i)
    wrong += sketch->Estimate(HashRow(static_cast<int64_t>(rng() >> 24))) > 0;
  const double measured = static_cast<double>(wrong) / queries;
  CAPTURE(measured, occupancy);
  CHECK(measured == Approx(std::pow(occupancy, 4)).epsilon(0.15));

  auto fresh = std::make_unique<AdmitSketch>();
  const uint64_t h = HashRow(5);
  for (int i = 0; i < 3; ++i) CHECK(fresh->Add(h) == static_cast<uint32_t>(i + 1));
  CHECK(fresh->nonzero() == 4);
  fresh->Remove(h, 3);
  CHECK(fresh->Estimate(h) == 0);
  CHECK(fresh->nonzero() == 0);
}

TEST_CASE("LazyStripe::Erase matches an unordered_map under random inserts and erases") {
  RecordArena arena(2);
  LazyStripe stripe;
  std::unordered_map<int64_t, float> ref;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const auto row = static_cast<int64_t>(rng() % 3000);
    const uint64_t h = HashRow(row);
    LazyStripe::Entry* e = stripe.Find(row, h);
    float* rec = e == nullptr ? nullptr : arena.At(e->ref);
    REQUIRE((rec != nullptr) == ref.contains(row));
    if (rec != nullptr) REQUIRE(rec[0] == ref[row]);
    if (rng() % 3 == 0) {
      REQUIRE(stripe.Erase(row, h, arena) == (rec != nullptr));
      ref.erase(row);
    } else if (rec == nullptr) {
      e = stripe.Insert(row, h, arena);
      REQUIRE(e != nullptr);
      rec = arena.At(e->ref);
      rec[0] = static_cast<float>(i);
      rec[1] = 0;
      ref[row] = rec[0];
    }
    REQUIRE(stripe.count() == ref.size());
  }
  for (const auto& [row, v] : ref) {
    const LazyStripe::Entry* e = stripe.Find(row, HashRow(row));
    REQUIRE(e != nullptr);
    CHECK(arena.At(e->ref)[0] == v);
  }
  // Erased records are reused: the arena does not grow past the largest live count.
  CHECK(arena.bytes() <= 2 * 3000 * 2 * sizeof(float) + 4096);
}

// Lazy shards (ShardDef::lazy): rows created on first push, pulled at their initial value
// before that, sparse Adagrad/FTRL with slots, concurrency, memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "libps/server/store.h"

using namespace ps::server;
using ps::model::InitKind;
using ps::model::InitSpec;

namespace {

ShardDef Def(bool lazy, int64_t rows, int64_t cols, InitSpec init, int64_t row_begin = 0,
             int64_t full_rows = 0) {
  ShardDef d;
  d.layout.var = "emb";
  d.layout.row_begin = row_begin;
  d.layout.rows = rows;
  d.layout.cols = cols;
  d.layout.full_shape = {full_rows > 0 ? full_rows : row_begin + rows, cols};
  d.init = init;
  d.seed = 7;
  d.layout.lazy = lazy;
  return d;
}

OptimizerSpec Opt(OptimizerKind kind, double lr) {
  OptimizerSpec s = DefaultOptimizer(kind);
  s.learning_rate = lr;
  return s;
}

std::vector<float> PullRows(Store& store, const ShardKey& key, std::vector<int64_t> rows,
                            size_t cols) {
  std::vector<float> out(rows.size() * cols);
  REQUIRE(store.PullRows(key, rows, out).ok());
  return out;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Row `row` of the shard as [values, slot 0, slot 1...], each cols floats, read via Read.
std::vector<float> RowBlocks(Store& store, const ShardKey& key, int64_t row) {
  std::vector<float> out;
  REQUIRE(store
              .Read(key,
                    [&](const ShardView& v) {
                      const auto cols = static_cast<size_t>(v.def.layout.cols);
                      if (v.def.layout.lazy) {
                        for (size_t i = 0; i < v.row_ids.size(); ++i) {
                          if (v.row_ids[i] != row) continue;
                          for (size_t b = 0; b <= v.slots.size(); ++b) {
                            auto r = v.row(i, b);
                            out.insert(out.end(), r.begin(), r.end());
                          }
                        }
                        return;
                      }
                      auto at = [&](std::span<const float> s) {
                        return s.subspan(static_cast<size_t>(row) * cols, cols);
                      };
                      auto r = at(v.values);
                      out.insert(out.end(), r.begin(), r.end());
                      for (const auto& [name, s] : v.slots) {
                        auto rs = at(s);
                        out.insert(out.end(), rs.begin(), rs.end());
                      }
                    })
              .ok());
  return out;
}

}  // namespace

TEST_CASE("lazy PullRows returns the dense shard's initial values without creating rows") {
  Store store;
  REQUIRE(store.Configure(Opt(OptimizerKind::kAdagrad, 0.1)).ok());
  InitSpec init{InitKind::kUniform, -0.05, 0.05};
  ShardDef dense = Def(false, 1000, 4, init, 3000, 10000);
  dense.layout.num_shards = 2;
  ShardDef lazy = dense;
  lazy.layout.var = "emb";
  lazy.layout.shard = 1;
  lazy.layout.lazy = true;
  dense.layout.shard = 0;
  REQUIRE(store.Create(dense).ok());
  REQUIRE(store.Create(lazy).ok());
  std::vector<int64_t> rows{0, 17, 999, 17, 512};
  CHECK(BitEqual(PullRows(store, dense.key(), rows, 4), PullRows(store, lazy.key(), rows, 4)));
  auto mem = store.Memory(lazy.key());
  REQUIRE(mem.ok());
  CHECK(mem->rows == 0);
  auto dmem = store.Memory(dense.key());
  CHECK(dmem->rows == 1000);
  CHECK(dmem->bytes ==
        2 * 1000 * 4 * 4 + 1000 * 4);  // values + accumulator + a change epoch per row

  // Whole-shard calls and bad rows are errors; nothing is created by them.
  std::vector<float> all(4000);
  CHECK(store.Pull(lazy.key(), all).code() == ps::Code::kInvalidArgument);
  CHECK(store.Push(lazy.key(), all, 0).code() == ps::Code::kInvalidArgument);
  std::vector<int64_t> dup{3, 3};
  std::vector<float> g(8, 1.0f);
  CHECK(store.PushRows(lazy.key(), dup, g, 0).code() == ps::Code::kInvalidArgument);
  std::vector<int64_t> out_of_range{3, 1000};
  CHECK(store.PushRows(lazy.key(), out_of_range, g, 0).code() == ps::Code::kOutOfRange);
  CHECK(store.Memory(lazy.key())->rows == 0);
  CHECK(store.Restore(lazy.key(), {}, {}).code() == ps::Code::kInvalidArgument);
}

TEST_CASE("lazy PushRows creates rows; lazy and dense shards train bit-identically") {
  Store store;
  REQUIRE(store.Configure(Opt(OptimizerKind::kAdagrad, 0.05)).ok());
  InitSpec init{InitKind::kNormal, 0.0, 0.1};
  ShardDef dense = Def(false, 5000, 8, init);
  ShardDef lazy = dense;
  lazy.layout.shard = 0;
  lazy.layout.var = "emb_lazy";
  dense.layout.var = "emb_lazy";  // same var name and rows: same initial values
  dense.layout.shard = 1;
  dense.layout.num_shards = 2;
  lazy.layout.num_shards = 2;
  lazy.layout.lazy = true;
  // The two shards cover different halves in real life; here both hold rows 0..4999 of a
  // 10000-row variable so that their initial values are the same.
  dense.layout.full_shape = lazy.layout.full_shape = {10000, 8};
  REQUIRE(store.Create(dense).ok());
  REQUIRE(store.Create(lazy).ok());
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> row(0, 4999);
  std::normal_distribution<float> grad(0, 1);
  std::map<int64_t, int> touched;
  for (int step = 0; step < 50; ++step) {
    std::vector<int64_t> rows;
    for (int i = 0; i < 40; ++i) rows.push_back(row(rng));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<float> g(rows.size() * 8);
    for (float& x : g) x = grad(rng);
    REQUIRE(store.PushRows(dense.key(), rows, g, step).ok());
    REQUIRE(store.PushRows(lazy.key(), rows, g, step).ok());
    for (int64_t r : rows) ++touched[r];
  }
  std::vector<int64_t> all(5000);
  for (int64_t i = 0; i < 5000; ++i) all[static_cast<size_t>(i)] = i;
  CHECK(BitEqual(PullRows(store, dense.key(), all, 8), PullRows(store, lazy.key(), all, 8)));
  for (int64_t r : {touched.begin()->first, std::prev(touched.end())->first})
    CHECK(BitEqual(RowBlocks(store, dense.key(), r), RowBlocks(store, lazy.key(), r)));

  auto mem = store.Memory(lazy.key());
  REQUIRE(mem.ok());
  CHECK(mem->rows == static_cast<int64_t>(touched.size()));
  // values + accumulator = 64 bytes per row; the table and chunk slack add the rest.
  const double per_row = static_cast<double>(mem->bytes) / static_cast<double>(mem->rows);
  WARN("lazy shard, 8 columns, adagrad: " << mem->rows << " rows, " << per_row
                                          << " bytes per created row");
  CHECK(per_row >= 64);
  CHECK(per_row < 64 * 3);

  REQUIRE(store
              .Read(lazy.key(),
                    [&](const ShardView& v) {
                      CHECK(v.values.empty());
                      REQUIRE(v.row_ids.size() == touched.size());
                      size_t i = 0;
                      for (const auto& [r, n] : touched) CHECK(v.row_ids[i++] == r);
                    })
              .ok());
}

TEST_CASE("sparse Adagrad and FTRL on lazy and dense shards match hand-computed values") {
  const OptimizerKind kind = GENERATE(OptimizerKind::kAdagrad, OptimizerKind::kFtrl);
  const bool lazy = GENERATE(false, true);
  CAPTURE(OptimizerKindName(kind), lazy);
  OptimizerSpec spec = Opt(kind, 0.1);
  spec.l1 = 0.01;  // ftrl only
  Store store;
  REQUIRE(store.Configure(spec).ok());
  ShardDef def = Def(lazy, 6, 2, {InitKind::kConstant, 1.0, 0});
  REQUIRE(store.Create(def).ok());
  std::vector<int64_t> rows{1, 4};
  std::vector<float> g{0.5f, 0.5f, 0.5f, 0.5f};
  REQUIRE(store.PushRows(def.key(), rows, g, 0).ok());

  // Adagrad: acc = 0.1 + 0.5^2 = 0.35; var = 1 - 0.1 * 0.5 / (sqrt(0.35) + 1e-7) = 0.91548459.
  // FTRL (p = -0.5, l1 = 0.01, l2 = 0): n = 0.35;
  //   linear = 0.5 - (sqrt(0.35) - sqrt(0.1)) / 0.1 * 1 = -2.2538021;
  //   var = (-0.01 - linear) / (sqrt(0.35) / 0.1) = 0.37927178.
  const std::vector<float> want_pushed =
      kind == OptimizerKind::kAdagrad
          ? std::vector<float>{0.91548459f, 0.91548459f, 0.35f, 0.35f}
          : std::vector<float>{0.37927178f, 0.37927178f, 0.35f, 0.35f, -2.2538021f, -2.2538021f};
  for (int64_t r : rows) {
    auto got = RowBlocks(store, def.key(), r);
    REQUIRE(got.size() == want_pushed.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want_pushed[i]).epsilon(1e-6));
  }
  // Untouched rows: value 1 and slots at their initial values (dense), or not created (lazy).
  auto untouched = PullRows(store, def.key(), {0, 2, 3, 5}, 2);
  CHECK(untouched == std::vector<float>(8, 1.0f));
  if (lazy) {
    CHECK(store.Memory(def.key())->rows == 2);
    CHECK(RowBlocks(store, def.key(), 0).empty());
  } else {
    auto r0 = RowBlocks(store, def.key(), 0);
    std::vector<float> want0 = kind == OptimizerKind::kAdagrad
                                   ? std::vector<float>{1, 1, 0.1f, 0.1f}
                                   : std::vector<float>{1, 1, 0.1f, 0.1f, 0, 0};
    CHECK(r0 == want0);
  }
}

TEST_CASE("lazy shard of a 2^40-row hashed id space: concurrent pushes sum exactly") {
  const int64_t vocab = int64_t{1} << 40;
  Store store;
  REQUIRE(store.Configure(Opt(OptimizerKind::kSgd, 1.0)).ok());
  ShardDef def = Def(true, vocab, 16, {});
  REQUIRE(store.Create(def).ok());
  ShardDef too_big = def;
  too_big.layout.var = "dense";
  too_big.layout.lazy = false;
  CHECK(store.Create(too_big).code() == ps::Code::kInvalidArgument);

  // 300 ids spread over the whole space; each of 4 threads pushes 200 random subsets with
  // gradient 1 (and the row's id modulo 7 in column 1): SGD with lr 1 subtracts it.
  std::vector<int64_t> pool;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 300; ++i)
    pool.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));
  std::sort(pool.begin(), pool.end());
  pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
  constexpr int kThreads = 4;
  std::vector<std::map<int64_t, int>> counts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 r(100 + static_cast<uint64_t>(t));
      for (int step = 0; step < 200; ++step) {
        std::vector<int64_t> rows;
        for (int64_t id : pool) {
          if (r() % 3 == 0) rows.push_back(id);
        }
        std::vector<float> g(rows.size() * 16, 1.0f);
        for (size_t i = 0; i < rows.size(); ++i) g[i * 16 + 1] = static_cast<float>(rows[i] % 7);
        if (!store.PushRows(def.key(), rows, g, step).ok()) return;
        for (int64_t id : rows) ++counts[static_cast<size_t>(t)][id];
      }
    });
  }
  for (auto& th : threads) th.join();
  std::map<int64_t, int> total;
  for (const auto& c : counts)
    for (const auto& [id, n] : c) total[id] += n;
  const size_t created = total.size();
  std::vector<int64_t> ids(pool.begin(), pool.end());
  ids.push_back(5);  // never pushed: initial value (zeros)
  auto got = PullRows(store, def.key(), ids, 16);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float n = static_cast<float>(total[ids[i]]);
    CHECK(got[i * 16] == -n);
    CHECK(got[i * 16 + 1] == -n * static_cast<float>(ids[i] % 7));
    CHECK(got[i * 16 + 15] == -n);
  }
  CHECK(store.Memory(def.key())->rows == static_cast<int64_t>(created));
  CHECK(store.stats().failed_requests == 0);
}

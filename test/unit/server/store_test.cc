#include <catch2/catch.hpp>
#include <cstring>

#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "libps/server/store.h"

using namespace ps::server;
using ps::model::InitKind;
using ps::model::InitSpec;

namespace {

OptimizerSpec Sgd(double lr) {
  OptimizerSpec s = DefaultOptimizer(OptimizerKind::kSgd);
  s.learning_rate = lr;
  return s;
}

ShardDef Def(std::string var, int shard, int64_t row_begin, int64_t rows, int64_t cols,
             std::vector<int64_t> full_shape, InitSpec init = {}, uint64_t seed = 1) {
  // shard + 1 shards: enough for the shard index (the row ranges here need not tile).
  return ShardDef{.layout = {.var = std::move(var),
                             .shard = shard,
                             .num_shards = shard + 1,
                             .row_begin = row_begin,
                             .rows = rows,
                             .cols = cols,
                             .full_shape = std::move(full_shape),
                             .lazy = false},
                  .init = init,
                  .seed = seed};
}

std::vector<float> PullAll(Store& store, const ShardKey& key, size_t n) {
  std::vector<float> out(n);
  REQUIRE(store.Pull(key, out).ok());
  return out;
}

}  // namespace

TEST_CASE("Create before Configure, Configure once") {
  Store store;
  auto def = Def("w", 0, 0, 2, 3, {2, 3});
  auto st = store.Create(def);
  CHECK(st.code() == ps::Code::kFailedPrecondition);
  CHECK_FALSE(store.optimizer().ok());
  REQUIRE(store.Configure(Sgd(0.1)).ok());
  CHECK(store.Configure(Sgd(0.1)).ok());
  CHECK(store.Configure(Sgd(0.2)).code() == ps::Code::kFailedPrecondition);
  CHECK(store.optimizer()->learning_rate == 0.1);
  OptimizerSpec bad = Sgd(0.1);
  bad.momentum = 2;
  Store other;
  CHECK(other.Configure(bad).code() == ps::Code::kInvalidArgument);
}

TEST_CASE("Create is idempotent for the same def and conflicts for another") {
  Store store;
  REQUIRE(store.Configure(Sgd(0.1)).ok());
  auto def = Def("w", 1, 4, 4, 3, {8, 3}, {InitKind::kNormal, 0, 1}, 9);
  REQUIRE(store.Create(def).ok());
  auto before = PullAll(store, def.key(), 12);
  CHECK(store.Create(def).ok());
  CHECK(PullAll(store, def.key(), 12) == before);

  auto other = def;
  other.seed = 10;
  auto st = store.Create(other);
  CHECK(st.code() == ps::Code::kAlreadyExists);
  CHECK(st.message() == "w/part_1: already exists with a different definition");
  CHECK(store.Contains(def.key()));
  CHECK(*store.GetDef(def.key()) == def);
  CHECK(store.Keys() == std::vector<ShardKey>{{"w", 1}});

  // Invalid defs.
  CHECK(store.Create(Def("", 0, 0, 1, 1, {1})).code() == ps::Code::kInvalidArgument);
  CHECK(store.Create(Def("x", 0, 0, 0, 3, {0, 3})).code() == ps::Code::kInvalidArgument);
  CHECK(store.Create(Def("x", 0, 0, 2, 4, {2, 3})).message() ==
        "x/part_0: cols 4 != product of full_shape[1:] = 3");
  CHECK(store.Create(Def("x", 0, 3, 2, 3, {4, 3})).message() ==
        "x/part_0: rows [3, 5) exceed full_shape[0] = 4");
  CHECK(store.Create(Def("x", 0, std::numeric_limits<int64_t>::max(), 2, 3, {4, 3})).code() ==
        ps::Code::kInvalidArgument);
  CHECK(store.Create(Def("x", 0, 0, 4, 3, {4, 3}, {InitKind::kNormal, 0, -1})).message() ==
        "x/part_0.init.stddev: must be finite and >= 0, got -1.000000");
  // The layout checks are cluster::ValidateShardLayout's (the shard index among them).
  auto beyond = Def("x", 1, 0, 4, 3, {4, 3});
  beyond.layout.num_shards = 1;
  CHECK(store.Create(beyond).message() == "x/part_1: shard 1 is outside [0, num_shards 1)");
  auto sharded_scalar = Def("x", 0, 0, 1, 1, {});
  sharded_scalar.layout.num_shards = 2;
  CHECK(store.Create(sharded_scalar).message() ==
        "x/part_0: a scalar variable (full_shape []) is one unsharded 1 x 1 shard");
  CHECK(store.Create(Def("x", 0, 0, 1, 1, {}, {InitKind::kConstant, 5, 0})).ok());
  CHECK(PullAll(store, {"x", 0}, 1) == std::vector<float>{5.0f});
}

TEST_CASE("sharded variables hold the same values as an unsharded one") {
  Store store;
  REQUIRE(store.Configure(Sgd(0.1)).ok());
  InitSpec init{InitKind::kGlorotUniform, 0, 0};
  REQUIRE(store.Create(Def("emb", 0, 0, 13, 4, {13, 4}, init, 5)).ok());
  int64_t begin = 0;
  const int64_t sizes[] = {3, 3, 3, 2, 2};  // TF "div" partitioning of 13 rows
  for (int s = 0; s < 5; ++s) {
    REQUIRE(store.Create(Def("emb_sharded", s, begin, sizes[s], 4, {13, 4}, init, 5)).ok());
    begin += sizes[s];
  }
  // Different names give different values: use a second store with the same name instead.
  Store parts;
  REQUIRE(parts.Configure(Sgd(0.1)).ok());
  begin = 0;
  std::vector<float> joined;
  for (int s = 0; s < 5; ++s) {
    REQUIRE(parts.Create(Def("emb", s, begin, sizes[s], 4, {13, 4}, init, 5)).ok());
    auto v = PullAll(parts, {"emb", s}, static_cast<size_t>(sizes[s] * 4));
    joined.insert(joined.end(), v.begin(), v.end());
    begin += sizes[s];
  }
  CHECK(joined == PullAll(store, {"emb", 0}, 52));
}

TEST_CASE("Pull/PullRows/Push/PushRows with SGD") {
  Store store;
  REQUIRE(store.Configure(Sgd(0.5)).ok());
  auto def = Def("w", 0, 0, 4, 2, {4, 2}, {InitKind::kConstant, 1, 0});
  REQUIRE(store.Create(def).ok());
  ShardKey key = def.key();

  std::vector<float> grad{0, 1, 2, 3, 4, 5, 6, 7};
  REQUIRE(store.Push(key, grad, 0).ok());
  CHECK(PullAll(store, key, 8) == std::vector<float>{1, 0.5, 0, -0.5, -1, -1.5, -2, -2.5});

  std::vector<int64_t> rows{3, 1};
  std::vector<float> g2{2, 2, 4, 4};
  REQUIRE(store.PushRows(key, rows, g2, 1).ok());
  CHECK(PullAll(store, key, 8) == std::vector<float>{1, 0.5, -2, -2.5, -1, -1.5, -3, -3.5});

  std::vector<int64_t> pull_rows{2, 3, 2};
  std::vector<float> out(6);
  REQUIRE(store.PullRows(key, pull_rows, out).ok());
  CHECK(out == std::vector<float>{-1, -1.5, -3, -3.5, -1, -1.5});

  auto stats = store.stats();
  CHECK(stats.push_requests == 2);
  CHECK(stats.pull_requests == 3);
  CHECK(stats.bytes_pushed == (8 + 4) * 4);
  CHECK(stats.bytes_pulled == (8 + 8 + 6) * 4);
  CHECK(stats.rows_pushed == 4 + 2);
  CHECK(stats.rows_pulled == 4 + 4 + 3);
  CHECK(stats.failed_requests == 0);
}

TEST_CASE("PullRows/PushRows/Push errors name the shard and leave it unchanged") {
  Store store;
  REQUIRE(store.Configure(Sgd(1.0)).ok());
  auto def = Def("emb", 2, 10, 5, 3, {20, 3});
  REQUIRE(store.Create(def).ok());
  ShardKey key = def.key();
  std::vector<float> out(6), grad(6, 1.0f);

  std::vector<int64_t> bad{1, 5};
  auto st = store.PullRows(key, bad, out);
  CHECK(st.code() == ps::Code::kOutOfRange);
  CHECK(st.message() == "PullRows emb/part_2: row 5 is out of range [0, 5)");
  std::vector<int64_t> negative{-1, 0};
  CHECK(store.PullRows(key, negative, out).code() == ps::Code::kOutOfRange);
  st = store.PushRows(key, bad, grad, 0);
  CHECK(st.code() == ps::Code::kOutOfRange);
  CHECK(st.message() == "PushRows emb/part_2: row 5 is out of range [0, 5)");

  std::vector<int64_t> dup{3, 1, 3};
  std::vector<float> grad3(9, 1.0f);
  st = store.PushRows(key, dup, grad3, 0);
  CHECK(st.code() == ps::Code::kInvalidArgument);
  CHECK(st.message() == "PushRows emb/part_2: row 3 appears more than once");

  std::vector<int64_t> two{0, 1};
  std::vector<float> short_grad(5);
  CHECK(store.PushRows(key, two, short_grad, 0).message() ==
        "PushRows emb/part_2: gradient has 5 floats, expected 6");
  CHECK(store.Push(key, short_grad, 0).message() ==
        "Push emb/part_2: gradient has 5 floats, expected 15");
  std::vector<float> small(3);
  CHECK(store.Pull(key, small).code() == ps::Code::kInvalidArgument);
  CHECK(store.PullRows(key, two, small).code() == ps::Code::kInvalidArgument);

  st = store.Pull({"emb", 3}, out);
  CHECK(st.code() == ps::Code::kNotFound);
  CHECK(st.message() == "Pull emb/part_3: no such shard on this ps");
  CHECK(store.PushRows({"nope", 0}, two, grad, 0).code() == ps::Code::kNotFound);

  CHECK(PullAll(store, key, 15) == std::vector<float>(15, 0.0f));
  CHECK(store.stats().failed_requests == 10);
  CHECK(store.stats().push_requests == 0);
}

TEST_CASE("sparse Adam is lazy: untouched rows and their slots do not move") {
  Store store;
  OptimizerSpec adam = DefaultOptimizer(OptimizerKind::kAdam);
  REQUIRE(store.Configure(adam).ok());
  auto def = Def("emb", 0, 0, 3, 2, {3, 2}, {InitKind::kConstant, 1, 0});
  REQUIRE(store.Create(def).ok());
  std::vector<int64_t> rows{1};
  std::vector<float> g{0.1f, -0.1f};
  REQUIRE(store.PushRows(def.key(), rows, g, 0).ok());
  auto v = PullAll(store, def.key(), 6);
  // t = 1: the step is lr * m_hat / (sqrt(v_hat) + eps) ≈ lr * sign(g)
  CHECK(v[0] == 1.0f);
  CHECK(v[1] == 1.0f);
  CHECK(v[2] == Approx(0.999).epsilon(1e-5));
  CHECK(v[3] == Approx(1.001).epsilon(1e-5));
  CHECK(v[4] == 1.0f);
  REQUIRE(store
              .Read(def.key(),
                    [&](const ShardView& view) {
                      REQUIRE(view.slots.size() == 2);
                      CHECK(view.slots[0].first == "m");
                      CHECK(view.slots[1].first == "v");
                      CHECK(view.slots[0].second[0] == 0.0f);
                      CHECK(view.slots[0].second[2] == Approx(0.01f));
                      CHECK(view.slots[1].second[3] ==
                            Approx(1e-5).epsilon(1e-4));  // (1 - 0.999f) * 0.01
                      CHECK(reinterpret_cast<uintptr_t>(view.values.data()) % 64 == 0);
                      CHECK(reinterpret_cast<uintptr_t>(view.slots[1].second.data()) % 64 == 0);
                    })
              .ok());
}

TEST_CASE("Restore, Read and ForEachShard round-trip values and slots") {
  Store store;
  OptimizerSpec ftrl = DefaultOptimizer(OptimizerKind::kFtrl);
  REQUIRE(store.Configure(ftrl).ok());
  auto a = Def("a", 0, 0, 2, 2, {2, 2});
  auto b = Def("b", 0, 0, 1, 3, {1, 3});
  REQUIRE(store.Create(b).ok());
  REQUIRE(store.Create(a).ok());

  std::vector<float> values{1, 2, 3, 4}, accum{5, 6, 7, 8}, linear{9, 10, 11, 12};
  std::vector<NamedSlot> slots{{"linear", linear}, {"accumulator", accum}};
  REQUIRE(store.Restore(a.key(), values, slots).ok());
  std::vector<std::string> seen;
  store.ForEachShard([&](const ShardView& v) {
    seen.push_back(v.def.layout.var);
    if (v.def.layout.var != "a") return;
    CHECK(std::vector<float>(v.values.begin(), v.values.end()) == values);
    CHECK(v.slots[0].first == "accumulator");
    CHECK(std::vector<float>(v.slots[0].second.begin(), v.slots[0].second.end()) == accum);
    CHECK(std::vector<float>(v.slots[1].second.begin(), v.slots[1].second.end()) == linear);
  });
  CHECK(seen == std::vector<std::string>{"a", "b"});

  // Slots not given go back to their initial values.
  REQUIRE(store.Restore(a.key(), values, {}).ok());
  REQUIRE(store
              .Read(a.key(),
                    [&](const ShardView& v) {
                      CHECK(v.slots[0].second[3] == Approx(0.1f));
                      CHECK(v.slots[1].second[3] == 0.0f);
                    })
              .ok());

  std::vector<NamedSlot> unknown{{"m", accum}};
  CHECK(store.Restore(a.key(), values, unknown).message() ==
        "Restore a/part_0: slot \"m\" does not belong to optimizer ftrl");
  std::vector<float> short_values(3);
  CHECK(store.Restore(a.key(), short_values, {}).code() == ps::Code::kInvalidArgument);
  CHECK(store.Restore({"zz", 0}, values, {}).code() == ps::Code::kNotFound);

  CHECK(store.global_step() == 0);
  store.SetGlobalStep(1234);
  CHECK(store.global_step() == 1234);
}

// 8 threads x 1000 pushes with SGD lr = 1 onto zeros. Every gradient is a multiple of
// 0.25 and every partial sum stays below 2^24 * 0.25, so float addition is exact and the
// result must be exactly the sum, whatever the interleaving.
TEST_CASE("concurrent dense pushes sum exactly") {
  Store store;
  REQUIRE(store.Configure(Sgd(1.0)).ok());
  auto def = Def("w", 0, 0, 100, 16, {100, 16});  // 100 rows → 50 stripes of 2 rows
  REQUIRE(store.Create(def).ok());
  constexpr int kThreads = 8, kPushes = 1000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> grad(1600);
      for (size_t i = 0; i < grad.size(); ++i) grad[i] = -0.25f * float((t + 1) * (1 + i % 3));
      std::vector<float> pulled(1600);
      for (int k = 0; k < kPushes; ++k) {
        if (!store.Push(def.key(), grad, k).ok()) failures++;
        if (k % 100 == 0 && !store.Pull(def.key(), pulled).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  auto v = PullAll(store, def.key(), 1600);
  bool all_exact = true;
  for (size_t i = 0; i < v.size(); ++i) {
    // sum over t of 1000 * 0.25 * (t + 1) * (1 + i % 3) = 9000 * (1 + i % 3)
    if (v[i] != 9000.0f * float(1 + i % 3)) all_exact = false;
  }
  CHECK(all_exact);
  CHECK(store.stats().push_requests == kThreads * kPushes);
}

// Overlapping sparse pushes, with a concurrent reader checking that no row is ever seen
// half-applied (every push adds the same amount to all elements of a row).
TEST_CASE("concurrent PushRows on overlapping rows sum exactly; rows are atomic") {
  Store store;
  REQUIRE(store.Configure(Sgd(1.0)).ok());
  constexpr int64_t kRows = 10, kCols = 256;
  auto def = Def("emb", 0, 0, kRows, kCols, {kRows, kCols});
  REQUIRE(store.Create(def).ok());
  constexpr int kThreads = 8, kPushes = 1000;
  // Thread t pushes rows {t % 3, 3 + t % 2, 9, 5 + t % 4} (unique within a push, shared
  // across threads) with gradient -(t + 1) * 0.5 on every element.
  auto rows_of = [](int t) { return std::vector<int64_t>{t % 3, 3 + t % 2, 9, 5 + t % 4}; };
  std::vector<double> expected(kRows, 0.0);
  for (int t = 0; t < kThreads; ++t)
    for (int64_t r : rows_of(t)) expected[r] += kPushes * 0.5 * (t + 1);

  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, failures{0};
  std::thread reader([&] {
    std::vector<int64_t> all(kRows);
    for (int64_t r = 0; r < kRows; ++r) all[r] = r;
    std::vector<float> out(kRows * kCols);
    while (!done.load()) {
      if (!store.PullRows(def.key(), all, out).ok()) failures++;
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 1; c < kCols; ++c)
          if (out[r * kCols + c] != out[r * kCols]) torn++;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      auto rows = rows_of(t);
      std::vector<float> grad(rows.size() * kCols, -0.5f * float(t + 1));
      for (int k = 0; k < kPushes; ++k)
        if (!store.PushRows(def.key(), rows, grad, k).ok()) failures++;
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  CHECK(failures == 0);
  CHECK(torn == 0);
  auto v = PullAll(store, def.key(), kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    INFO("row " << r);
    CHECK(v[r * kCols] == float(expected[r]));
    CHECK(v[r * kCols + kCols - 1] == float(expected[r]));
  }
}

TEST_CASE("PushPart applies whole rows from any row, as Push would, and counts one request") {
  // 1000 rows: 32 stripes of 32 rows (the last one shorter), so the parts below start and
  // end inside stripes, on their edges, and span several.
  Store whole, parts;
  const OptimizerSpec adam = DefaultOptimizer(OptimizerKind::kAdam);
  REQUIRE(whole.Configure(adam).ok());
  REQUIRE(parts.Configure(adam).ok());
  const ShardKey key{"w", 0};
  constexpr int64_t kRows = 1000, kCols = 7;
  for (Store* s : {&whole, &parts})
    REQUIRE(s->Create(Def("w", 0, 0, kRows, kCols, {kRows, kCols})).ok());
  std::vector<float> grad(kRows * kCols);
  for (size_t i = 0; i < grad.size(); ++i)
    grad[i] = static_cast<float>(static_cast<int64_t>(i % 97) - 48) / 16.0f;
  const std::vector<int64_t> cuts = {0, 1, 31, 32, 33, 300, 301, 999, kRows};
  for (int64_t step = 0; step < 2; ++step) {
    REQUIRE(whole.Push(key, grad, step).ok());
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const auto part =
          std::span<const float>(grad).subspan(cuts[c] * kCols, (cuts[c + 1] - cuts[c]) * kCols);
      REQUIRE(parts.PushPart(key, cuts[c], part, step, c == 0).ok());
    }
  }
  const auto a = PullAll(whole, key, kRows * kCols), b = PullAll(parts, key, kRows * kCols);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  CHECK(parts.stats().push_requests == whole.stats().push_requests);
  CHECK(parts.stats().bytes_pushed == whole.stats().bytes_pushed);
  CHECK(parts.stats().rows_pushed == whole.stats().rows_pushed);
  // Not whole rows, or past the end: refused, nothing applied.
  CHECK(parts.PushPart(key, 0, std::span(grad).first(kCols + 1), 2, true).code() ==
        ps::Code::kInvalidArgument);
  CHECK(parts.PushPart(key, kRows - 1, std::span(grad).first(2 * kCols), 2, true).code() ==
        ps::Code::kInvalidArgument);
  CHECK(PullAll(parts, key, kRows * kCols) == b);
}

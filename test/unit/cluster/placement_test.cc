#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "libps/cluster/placement.h"

namespace {

using ps::cluster::NumShards;
using ps::cluster::PartitionerSpec;
using ps::cluster::Place;
using ps::cluster::PlacementStrategy;
using ps::cluster::ShardPlacement;
using ps::cluster::VarShape;

int Shards(const PartitionerSpec& spec, std::vector<int64_t> shape, int64_t elem_bytes = 4) {
  auto n = NumShards(spec, shape, elem_bytes);
  INFO(n.status().ToString());
  REQUIRE(n.ok());
  return *n;
}

PartitionerSpec Fixed(int n) {
  PartitionerSpec s;
  s.kind = PartitionerSpec::kFixed;
  s.num_shards = n;
  return s;
}
PartitionerSpec MinSize(int64_t min_bytes, int max_shards) {
  PartitionerSpec s;
  s.kind = PartitionerSpec::kMinSize;
  s.min_shard_bytes = min_bytes;
  s.max_shards = max_shards;
  return s;
}
PartitionerSpec MaxSize(int64_t max_bytes, int max_shards = 0) {
  PartitionerSpec s;
  s.kind = PartitionerSpec::kMaxSize;
  s.max_shard_bytes = max_bytes;
  s.max_shards = max_shards;
  return s;
}

double Ratio(const std::vector<int64_t>& loads) {
  auto [lo, hi] = std::minmax_element(loads.begin(), loads.end());
  return static_cast<double>(*hi) / static_cast<double>(std::max<int64_t>(*lo, 1));
}

}  // namespace

TEST_CASE("SplitRows is TF's div split: earlier shards take the remainder") {
  // TF-REFERENCE.md: 13 rows over 5 shards -> 3,3,3,2,2.
  CHECK(ps::cluster::SplitRows(13, 5) == std::vector<int64_t>{3, 3, 3, 2, 2});
  // create_partitioned_variables docstring: partitions are "incremented by 1 starting from
  // partition 0 until all slack is absorbed" — 10 over 3 -> 4,3,3.
  CHECK(ps::cluster::SplitRows(10, 3) == std::vector<int64_t>{4, 3, 3});
  CHECK(ps::cluster::SplitRows(6, 6) == std::vector<int64_t>{1, 1, 1, 1, 1, 1});
  CHECK(ps::cluster::SplitRows(7, 1) == std::vector<int64_t>{7});
  CHECK(ps::cluster::SplitRows(3, 5) == std::vector<int64_t>{1, 1, 1, 0, 0});
  CHECK(ps::cluster::SplitRows(0, 2) == std::vector<int64_t>{0, 0});
}

TEST_CASE("ShardOfRow and ShardRowBegin agree with SplitRows (naive reference)") {
  for (int64_t rows = 0; rows <= 40; ++rows) {
    for (int shards = 1; shards <= 9; ++shards) {
      const auto split = ps::cluster::SplitRows(rows, shards);
      int64_t begin = 0;
      for (int s = 0; s < shards; ++s) {
        CHECK(ps::cluster::ShardRowBegin(rows, shards, s) == begin);
        for (int64_t r = begin; r < begin + split[static_cast<size_t>(s)]; ++r) {
          INFO("rows=" << rows << " shards=" << shards << " row=" << r);
          CHECK(ps::cluster::ShardOfRow(rows, shards, r) == s);
        }
        begin += split[static_cast<size_t>(s)];
      }
      CHECK(begin == rows);
      CHECK(ps::cluster::ShardRowBegin(rows, shards, shards) == rows);
    }
  }
}

TEST_CASE("Fixed partitioner: min(num_shards, rows)") {
  // FixedShardsPartitioner docstring: num_shards=2, TensorShape([10, 3]) -> [2, 1].
  CHECK(Shards(Fixed(2), {10, 3}) == 2);
  CHECK(Shards(Fixed(5), {3, 4}) == 3);
  CHECK(Shards(Fixed(4), {7}) == 4);
  CHECK(Shards(Fixed(4), {}) == 1);                     // scalar: 1 row
  CHECK(Shards(PartitionerSpec{}, {1000, 1000}) == 1);  // kNone
}

TEST_CASE("Min-size partitioner follows min_max_variable_partitioner") {
  // MinSizePartitioner docstring: min_shard_bytes=4, max_shards=2, [6, 1] float32 -> [2, 1].
  CHECK(Shards(MinSize(4, 2), {6, 1}) == 2);
  // MinSizePartitioner docstring: min_shard_bytes=4, max_shards=10, [6, 1] float32 -> [6, 1].
  CHECK(Shards(MinSize(4, 10), {6, 1}) == 6);
  // min_max_variable_partitioner docstring: float32 [1024, 1024] with the default 256K:
  // (1024 * 1024 * 4) / (256 * 1024) = 16 when max_partitions >= 16, else max_partitions.
  CHECK(Shards(MinSize(256 << 10, 16), {1024, 1024}) == 16);
  CHECK(Shards(MinSize(256 << 10, 100), {1024, 1024}) == 16);
  CHECK(Shards(MinSize(256 << 10, 5), {1024, 1024}) == 5);
  CHECK(PartitionerSpec{}.min_shard_bytes == 262144);
  // Smaller than one min-size shard: one shard.
  CHECK(Shards(MinSize(256 << 10, 8), {10, 1}) == 1);
  // TF rounds total/min up (int(math.ceil(partitions))): 40 bytes / 16 -> 3 shards of
  // 4,3,3 rows = 16,12,12 bytes, so the last shards hold less than min_shard_bytes.
  CHECK(Shards(MinSize(16, 8), {10, 1}) == 3);
  // Never more shards than rows.
  CHECK(Shards(MinSize(1, 100), {3, 1000}) == 3);
  CHECK(Shards(MinSize(1, 4), {}) == 1);
}

TEST_CASE("Max-size partitioner follows variable_axis_size_partitioner") {
  // MaxSizePartitioner docstring: max_shard_bytes=4, [6, 1] float32 -> [6, 1].
  CHECK(Shards(MaxSize(4), {6, 1}) == 6);
  // MaxSizePartitioner docstring: max_shard_bytes=4, max_shards=2 -> [2, 1].
  CHECK(Shards(MaxSize(4, 2), {6, 1}) == 2);
  // MaxSizePartitioner docstring: max_shard_bytes=1024 -> [1, 1].
  CHECK(Shards(MaxSize(1024), {6, 1}) == 1);
  // Rows of 40 bytes: 1000 B fits 25 rows -> 4 shards; 999 B fits 24 -> ceil(100/24) = 5.
  CHECK(Shards(MaxSize(1000), {100, 10}) == 4);
  CHECK(Shards(MaxSize(999), {100, 10}) == 5);
  // A single row larger than max_shard_bytes: "every dimension becomes a separate shard".
  CHECK(Shards(MaxSize(100), {5, 1000}) == 5);
  CHECK(Shards(MaxSize(100, 3), {5, 1000}) == 3);
  CHECK(Shards(MaxSize(1), {}) == 1);
  CHECK(Shards(MaxSize(8), {9}, 8) == 9);
  // Resulting shards never exceed max bytes when max_shards does not bind.
  for (int64_t rows : {1, 7, 100, 101, 1000}) {
    for (int64_t max_bytes : {40, 41, 400, 999, 4000}) {
      const int n = Shards(MaxSize(max_bytes), {rows, 10});
      const auto split = ps::cluster::SplitRows(rows, n);
      CHECK(split.front() * 40 <= std::max<int64_t>(max_bytes, 40));
      if (n > 1) CHECK((rows + n - 2) / (n - 1) * 40 > max_bytes);  // n - 1 would not fit
    }
  }
}

TEST_CASE("NumShards rejects bad shapes and specs with a clear error") {
  CHECK(NumShards(Fixed(2), std::vector<int64_t>{0, 3}, 4).status().message() ==
        "shape [0, 3]: dimension 0 is 0 (must be >= 1)");
  CHECK(NumShards(Fixed(2), std::vector<int64_t>{4, -1}, 4).status().message() ==
        "shape [4, -1]: dimension 1 is -1 (must be >= 1)");
  CHECK(NumShards(Fixed(2), std::vector<int64_t>{4}, 0).status().message() ==
        "shape [4]: element size 0 must be >= 1 byte");
  CHECK(NumShards(Fixed(2), std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}, 4)
            .status()
            .message() == "shape [1099511627776, 1099511627776]: size in bytes overflows 64 bits");
  CHECK_FALSE(NumShards(Fixed(0), std::vector<int64_t>{4}, 4).ok());
  CHECK_FALSE(NumShards(MinSize(0, 2), std::vector<int64_t>{4}, 4).ok());
  CHECK_FALSE(NumShards(MinSize(4, 0), std::vector<int64_t>{4}, 4).ok());
  CHECK_FALSE(NumShards(MaxSize(0), std::vector<int64_t>{4}, 4).ok());
}

TEST_CASE("ParsePartitioner reads the four JSON forms strictly") {
  auto parse = [](const char* text) {
    auto j = ps::ParseJson(text, "t");
    REQUIRE(j.ok());
    return ps::cluster::ParsePartitioner(*j, "job.partitioner");
  };
  auto none = parse(R"({"type": "none"})");
  REQUIRE(none.ok());
  CHECK(none->kind == PartitionerSpec::kNone);
  auto fixed = parse(R"({"type": "fixed", "num_shards": 4})");
  REQUIRE(fixed.ok());
  CHECK(*fixed == Fixed(4));
  auto min = parse(R"({"type": "min_size", "min_shard_bytes": 1024, "max_shards": 2})");
  REQUIRE(min.ok());
  CHECK(*min == MinSize(1024, 2));
  auto min_default = parse(R"({"type": "min_size", "max_shards": 3})");
  REQUIRE(min_default.ok());
  CHECK(*min_default == MinSize(262144, 3));
  auto max = parse(R"({"type": "max_size", "max_shard_bytes": 1048576, "max_shards": 8})");
  REQUIRE(max.ok());
  CHECK(*max == MaxSize(1048576, 8));
  auto max_unbounded = parse(R"({"type": "max_size", "max_shard_bytes": 64})");
  REQUIRE(max_unbounded.ok());
  CHECK(*max_unbounded == MaxSize(64, 0));

  for (const PartitionerSpec& s : {*none, *fixed, *min, *max, *max_unbounded}) {
    auto back = ps::cluster::ParsePartitioner(ps::cluster::PartitionerToJson(s), "p");
    REQUIRE(back.ok());
    CHECK(*back == s);
  }

  CHECK(parse(R"({"type": "hash"})").status().message() ==
        "job.partitioner.type: unknown partitioner \"hash\" (expected none, fixed, min_size or "
        "max_size)");
  CHECK(parse(R"({"num_shards": 4})").status().message() ==
        "job.partitioner.type: required key is missing");
  CHECK(parse(R"({"type": "fixed"})").status().message() ==
        "job.partitioner.num_shards: required key is missing");
  CHECK(parse(R"({"type": "fixed", "num_shards": 0})").status().message() ==
        "job.partitioner.num_shards: must be >= 1, got 0");
  CHECK(parse(R"({"type": "fixed", "num_shards": "4"})").status().message() ==
        "job.partitioner.num_shards: expected an integer, got string");
  CHECK(parse(R"({"type": "min_size", "min_shard_bytes": 1024})").status().message() ==
        "job.partitioner.max_shards: required key is missing");
  CHECK(
      parse(R"({"type": "max_size", "max_shard_bytes": 64, "num_shards": 2})").status().message() ==
      "job.partitioner.num_shards: unknown key");
  CHECK(parse(R"({"type": "max_size", "max_shard_bytes": 64, "max_shards": -1})")
            .status()
            .message() == "job.partitioner.max_shards: must be >= 1, got -1");
  CHECK(parse(R"("fixed")").status().message() == "job.partitioner: must be a JSON object");
}

TEST_CASE("Place round-robin: every shard in creation order to ps 0,1,2,0,...") {
  const std::vector<VarShape> vars = {{"a", {10, 4}}, {"b", {3}}, {"c", {}}};
  auto table = Place(vars, Fixed(2), 3, PlacementStrategy::kRoundRobin);
  REQUIRE(table.ok());
  auto placed = [](std::string var, int shard, int num_shards, int64_t row_begin, int64_t rows,
                   int64_t cols, std::vector<int64_t> full_shape, int ps) {
    return ShardPlacement{.layout = {.var = std::move(var),
                                     .shard = shard,
                                     .num_shards = num_shards,
                                     .row_begin = row_begin,
                                     .rows = rows,
                                     .cols = cols,
                                     .full_shape = std::move(full_shape),
                                     .lazy = false},
                          .ps = ps};
  };
  const std::vector<ShardPlacement> want = {
      placed("a", 0, 2, 0, 5, 4, {10, 4}, 0), placed("a", 1, 2, 5, 5, 4, {10, 4}, 1),
      placed("b", 0, 2, 0, 2, 1, {3}, 2), placed("b", 1, 2, 2, 1, 1, {3}, 0),
      placed("c", 0, 1, 0, 1, 1, {}, 1)};
  CHECK(*table == want);
  CHECK(ps::cluster::BytesPerPs(vars, *table, 3) == std::vector<int64_t>{84, 84, 8});

  // Same variables, greedy: a0 (80 B) -> ps0, a1 (80) -> ps1, then b0 (8), b1 (4), c0 (4)
  // all go to ps2, the least loaded each time.
  auto greedy = Place(vars, Fixed(2), 3, PlacementStrategy::kGreedyBytes);
  REQUIRE(greedy.ok());
  std::vector<int> ps;
  for (const auto& s : *greedy) ps.push_back(s.ps);
  CHECK(ps == std::vector<int>{0, 1, 2, 2, 2});
}

TEST_CASE("Greedy-by-bytes balances a skewed set that round-robin piles onto one ps") {
  // Creation order alternates a 400 B matrix and a 4 B bias, as in a stack of layers
  // (the pain of TensorFlow #24953: round-robin puts every big variable on the same ps).
  std::vector<VarShape> vars;
  for (int i = 0; i < 4; ++i) {
    vars.push_back({std::string("kernel").append(std::to_string(i)), {100, 1}});
    vars.push_back({std::string("bias").append(std::to_string(i)), {1}});
  }
  auto rr = Place(vars, PartitionerSpec{}, 2, PlacementStrategy::kRoundRobin);
  auto greedy = Place(vars, PartitionerSpec{}, 2, PlacementStrategy::kGreedyBytes);
  REQUIRE(rr.ok());
  REQUIRE(greedy.ok());
  CHECK(ps::cluster::BytesPerPs(vars, *rr, 2) == std::vector<int64_t>{1600, 16});
  CHECK(ps::cluster::BytesPerPs(vars, *greedy, 2) == std::vector<int64_t>{808, 808});
  CHECK(Ratio(ps::cluster::BytesPerPs(vars, *rr, 2)) == 100.0);
  // Kernels in order 0,1,2,3 -> ps 0,1,0,1; biases in order -> ps 0,1,0,1.
  std::vector<int> ps;
  for (const auto& s : *greedy) ps.push_back(s.ps);
  CHECK(ps == std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1});
}

TEST_CASE("Placement is deterministic and consistent on random variable sets") {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<VarShape> vars;
    const int nvars = 1 + static_cast<int>(rng() % 12);
    for (int v = 0; v < nvars; ++v) {
      VarShape var{std::string("v").append(std::to_string(v)), {}, 4};
      const int rank = static_cast<int>(rng() % 3);
      for (int d = 0; d < rank; ++d) {
        // Skewed sizes: mostly small, sometimes large.
        var.shape.push_back(rng() % 5 == 0 ? 200 + static_cast<int64_t>(rng() % 2000)
                                           : 1 + static_cast<int64_t>(rng() % 20));
      }
      if (rng() % 4 == 0) var.elem_bytes = 8;
      vars.push_back(var);
    }
    const int num_ps = 1 + static_cast<int>(rng() % 5);
    const PartitionerSpec parts[] = {PartitionerSpec{}, Fixed(1 + static_cast<int>(rng() % 6)),
                                     MinSize(1024, num_ps), MaxSize(4096)};
    const PartitionerSpec& part = parts[rng() % 4];
    for (auto strategy : {PlacementStrategy::kRoundRobin, PlacementStrategy::kGreedyBytes}) {
      auto a = Place(vars, part, num_ps, strategy);
      auto b = Place(vars, part, num_ps, strategy);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      CHECK(*a == *b);
      // Shards of each variable tile its rows exactly, in order.
      size_t i = 0;
      int64_t largest_shard = 0;
      for (const VarShape& var : vars) {
        const int64_t rows = var.shape.empty() ? 1 : var.shape[0];
        int64_t next = 0;
        const int n = (*a)[i].layout.num_shards;
        for (int s = 0; s < n; ++s, ++i) {
          const ShardPlacement& sp = (*a)[i];
          CHECK(sp.layout.var == var.name);
          CHECK(sp.layout.shard == s);
          CHECK(sp.layout.row_begin == next);
          CHECK(sp.layout.rows >= 1);
          CHECK(sp.ps >= 0);
          CHECK(sp.ps < num_ps);
          next += sp.layout.rows;
          largest_shard = std::max(largest_shard, sp.layout.rows * sp.layout.cols * var.elem_bytes);
        }
        CHECK(next == rows);
      }
      CHECK(i == a->size());
      if (strategy == PlacementStrategy::kGreedyBytes) {
        // List scheduling onto the least-loaded ps keeps max - min <= the largest shard.
        const auto loads = ps::cluster::BytesPerPs(vars, *a, num_ps);
        auto [lo, hi] = std::minmax_element(loads.begin(), loads.end());
        CHECK(*hi - *lo <= largest_shard);
      }
    }
  }
}

TEST_CASE("Place rejects bad input naming the variable") {
  const std::vector<VarShape> ok = {{"w", {4, 4}}};
  CHECK(Place(ok, Fixed(2), 0, PlacementStrategy::kRoundRobin).status().message() ==
        "placement needs at least one ps task, got 0");
  const std::vector<VarShape> dup = {{"w", {4}}, {"w", {5}}};
  CHECK(Place(dup, Fixed(2), 2, PlacementStrategy::kRoundRobin).status().message() ==
        "variable \"w\" is defined twice");
  const std::vector<VarShape> unnamed = {{"", {4}}};
  CHECK(Place(unnamed, Fixed(2), 2, PlacementStrategy::kRoundRobin).status().message() ==
        "variable #0 has an empty name");
  const std::vector<VarShape> empty_dim = {{"w", {0, 4}}};
  CHECK(Place(empty_dim, Fixed(2), 2, PlacementStrategy::kGreedyBytes).status().message() ==
        "variable \"w\": shape [0, 4]: dimension 0 is 0 (must be >= 1)");
  CHECK(Place({}, Fixed(2), 2, PlacementStrategy::kGreedyBytes)->empty());
}

TEST_CASE("Placement strategy names round-trip") {
  for (auto s : {PlacementStrategy::kRoundRobin, PlacementStrategy::kGreedyBytes}) {
    CHECK(ps::cluster::ParsePlacementStrategy(ps::cluster::PlacementStrategyName(s)) == s);
  }
  CHECK_FALSE(ps::cluster::ParsePlacementStrategy("RoundRobin").has_value());
}

TEST_CASE("A lazy 2^40 x 16 table is sized by kLazyEstimateRows, not allocated per row") {
  const int64_t vocab = int64_t{1} << 40;
  std::vector<VarShape> vars = {{"ids/embeddings", {vocab, 16}, 4, true},
                                {"dense_0/kernel", {64, 1}, 4, false}};
  // 2^20 estimated rows * 64 bytes = 64 MiB: max_size 4 MiB gives 16 shards, each a
  // contiguous range of the real 2^40 rows.
  PartitionerSpec max_size;
  max_size.kind = PartitionerSpec::kMaxSize;
  max_size.max_shard_bytes = 4 << 20;
  auto placed = Place(vars, max_size, 3, PlacementStrategy::kGreedyBytes);
  REQUIRE(placed.ok());
  REQUIRE(placed->size() == 17);
  int64_t rows = 0;
  for (int s = 0; s < 16; ++s) {
    const ShardPlacement& p = (*placed)[static_cast<size_t>(s)];
    CHECK(p.layout.num_shards == 16);
    CHECK(p.layout.row_begin == rows);
    CHECK(p.layout.rows == vocab / 16);
    CHECK(p.layout.cols == 16);
    rows += p.layout.rows;
  }
  CHECK(rows == vocab);
  // Greedy bytes sees 16 shards of 4 MiB (and a tiny kernel): 6/5/5 over 3 ps.
  auto bytes = ps::cluster::BytesPerPs(vars, *placed, 3);
  CHECK(bytes[0] == 6 * (4 << 20));
  CHECK(bytes[1] == 5 * (4 << 20) + 256);
  CHECK(bytes[2] == 5 * (4 << 20));

  PartitionerSpec min_size;
  min_size.kind = PartitionerSpec::kMinSize;
  min_size.max_shards = 1000;
  auto by_min = Place(vars, min_size, 2, PlacementStrategy::kRoundRobin);
  REQUIRE(by_min.ok());
  CHECK((*by_min)[0].layout.num_shards == 256);  // 64 MiB / 256 KiB
  // Not lazy, the same table would need 2^46 bytes and 2^26 shards of 1 MiB.
  vars[0].lazy = false;
  CHECK(*NumShards(max_size, vars[0].shape, 4) == (1 << 24));
}

TEST_CASE(
    "Place: every layout carries its variable's shape and laziness and passes the validator") {
  const std::vector<VarShape> vars = {
      {"emb", {1000, 8}, 4, true}, {"kernel", {10, 3, 2}}, {"step", {}}};
  auto placed = Place(vars, Fixed(3), 2, PlacementStrategy::kRoundRobin);
  REQUIRE(placed.ok());
  REQUIRE(placed->size() == 7);
  for (const ShardPlacement& p : *placed) {
    INFO(p.layout.Name());
    CHECK(ps::cluster::ValidateShardLayout(p.layout).ok());
  }
  CHECK((*placed)[0].layout.full_shape == std::vector<int64_t>{1000, 8});
  CHECK((*placed)[0].layout.lazy);
  CHECK((*placed)[3].layout.full_shape == std::vector<int64_t>{10, 3, 2});
  CHECK((*placed)[3].layout.cols == 6);
  CHECK_FALSE((*placed)[3].layout.lazy);
  CHECK((*placed)[6].layout.full_shape.empty());

  // A dense shard beyond what a ps can hold is refused at placement, naming the variable.
  const std::vector<VarShape> huge = {{"huge", {int64_t{1} << 21, int64_t{1} << 20}}};
  CHECK(
      Place(huge, PartitionerSpec{}, 1, PlacementStrategy::kRoundRobin).status().message() ==
      "variable \"huge\": huge/part_0: rows x cols: 2097152 x 1048576 elements is more than 2^40");
  // A lazy scalar cannot be placed.
  const std::vector<VarShape> lazy_scalar = {{"s", {}, 4, true}};
  CHECK(
      Place(lazy_scalar, PartitionerSpec{}, 1, PlacementStrategy::kRoundRobin).status().message() ==
      "variable \"s\": s/part_0: lazy: a lazy shard needs a variable of rank >= 1");
}

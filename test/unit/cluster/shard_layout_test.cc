// ValidateShardLayout: the one check of a shard's layout that placement, the wire codec,
// the ps store and checkpoint files all apply. A table of cases, each with its message.
#include <catch2/catch.hpp>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "libps/cluster/shard_layout.h"

using ps::cluster::ShardLayout;
using ps::cluster::ValidateShardLayout;

namespace {

// w/part_0: rows 0..3 of a [4, 3] variable, unsharded.
ShardLayout Good() {
  return ShardLayout{.var = "w",
                     .shard = 0,
                     .num_shards = 1,
                     .row_begin = 0,
                     .rows = 4,
                     .cols = 3,
                     .full_shape = {4, 3},
                     .lazy = false};
}

}  // namespace

TEST_CASE("ShardLayout::Name is TF's partition name") {
  ShardLayout l = Good();
  l.shard = 3;
  CHECK(l.Name() == "w/part_3");
}

TEST_CASE("ValidateShardLayout accepts the layouts placement makes") {
  const int64_t k40 = int64_t{1} << 40;
  struct Case {
    const char* what;
    ShardLayout layout;
  };
  std::vector<Case> cases = {
      {"an unsharded matrix", Good()},
      {"the last shard of two",
       {.var = "w",
        .shard = 1,
        .num_shards = 2,
        .row_begin = 2,
        .rows = 2,
        .cols = 3,
        .full_shape = {4, 3},
        .lazy = false}},
      {"a vector",
       {.var = "b",
        .shard = 0,
        .num_shards = 1,
        .row_begin = 0,
        .rows = 4,
        .cols = 1,
        .full_shape = {4},
        .lazy = false}},
      {"a scalar",
       {.var = "s",
        .shard = 0,
        .num_shards = 1,
        .row_begin = 0,
        .rows = 1,
        .cols = 1,
        .full_shape = {},
        .lazy = false}},
      {"a rank-3 variable",
       {.var = "c",
        .shard = 0,
        .num_shards = 1,
        .row_begin = 0,
        .rows = 2,
        .cols = 12,
        .full_shape = {2, 3, 4},
        .lazy = false}},
      {"a lazy 2^40 x 16 table",
       {.var = "emb",
        .shard = 0,
        .num_shards = 1,
        .row_begin = 0,
        .rows = k40,
        .cols = 16,
        .full_shape = {k40, 16},
        .lazy = true}},
      {"a dense shard of exactly 2^40 elements",
       {.var = "big",
        .shard = 0,
        .num_shards = 1,
        .row_begin = 0,
        .rows = int64_t{1} << 20,
        .cols = int64_t{1} << 20,
        .full_shape = {int64_t{1} << 20, int64_t{1} << 20},
        .lazy = false}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto st = ValidateShardLayout(c.layout);
    INFO(st.ToString());
    CHECK(st.ok());
  }
}

TEST_CASE("ValidateShardLayout rejects every broken field with a one-line message naming it") {
  const int64_t k40 = int64_t{1} << 40;
  struct Case {
    std::function<void(ShardLayout&)> mutate;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ShardLayout& l) { l.var.clear(); }, "shard layout: var must not be empty"},
      {[](ShardLayout& l) { l.var.assign(4097, 'v'); },
       "shard layout: var is 4097 bytes, more than 4096"},
      {[](ShardLayout& l) { l.num_shards = 0; }, "w/part_0: num_shards 0 must be >= 1"},
      {[](ShardLayout& l) {
         l.shard = 2;
         l.num_shards = 2;
       },
       "w/part_2: shard 2 is outside [0, num_shards 2)"},
      {[](ShardLayout& l) { l.shard = -1; }, "w/part_-1: shard -1 is outside [0, num_shards 1)"},
      {[](ShardLayout& l) { l.row_begin = -1; }, "w/part_0: row_begin -1 must be >= 0"},
      {[](ShardLayout& l) { l.rows = 0; }, "w/part_0: rows and cols must be > 0, got 0 x 3"},
      {[](ShardLayout& l) { l.cols = -3; }, "w/part_0: rows and cols must be > 0, got 4 x -3"},
      {[](ShardLayout& l) {
         l.full_shape = std::vector<int64_t>(33, 1);
         l.cols = 1;
       },
       "w/part_0: full_shape has rank 33, more than 32"},
      {[](ShardLayout& l) {
         l.full_shape = {4, 0};
       },
       "w/part_0: full_shape[1] is 0, must be > 0"},
      {[](ShardLayout& l) {
         l.full_shape = {-4, 3};
       },
       "w/part_0: full_shape[0] is -4, must be > 0"},
      {[](ShardLayout& l) {
         l.full_shape = {1, int64_t{1} << 30, int64_t{1} << 30, 2};
         l.rows = 1;
         l.cols = 1;
       },
       "w/part_0: full_shape[1:] has more than 2^40 elements"},
      {[](ShardLayout& l) { l.cols = 4; }, "w/part_0: cols 4 != product of full_shape[1:] = 3"},
      {[](ShardLayout& l) {
         l.row_begin = 3;
         l.rows = 2;
       },
       "w/part_0: rows [3, 5) exceed full_shape[0] = 4"},
      {[](ShardLayout& l) {
         l.row_begin = std::numeric_limits<int64_t>::max();
         l.rows = 2;
       },
       "w/part_0: rows [9223372036854775807, 9223372036854775809) exceed full_shape[0] = 4"},
      {[](ShardLayout& l) {
         l.full_shape = {};
         l.rows = 1;
         l.cols = 1;
         l.num_shards = 2;
       },
       "w/part_0: a scalar variable (full_shape []) is one unsharded 1 x 1 shard"},
      {[](ShardLayout& l) {
         l.full_shape = {};
         l.rows = 2;
         l.cols = 1;
       },
       "w/part_0: a scalar variable (full_shape []) is one unsharded 1 x 1 shard"},
      {[](ShardLayout& l) {
         l.full_shape = {};
         l.rows = 1;
         l.cols = 1;
         l.lazy = true;
       },
       "w/part_0: lazy: a lazy shard needs a variable of rank >= 1"},
      {[k40](ShardLayout& l) {
         l.full_shape = {k40 + 1, 3};
         l.rows = k40 + 1;
         l.lazy = true;
       },
       "w/part_0: lazy: a lazy shard has at most 2^40 rows of 2^24 columns, got 1099511627777 x 3"},
      {[](ShardLayout& l) {
         l.full_shape = {4, (1 << 24) + 1};
         l.cols = (1 << 24) + 1;
         l.lazy = true;
       },
       "w/part_0: lazy: a lazy shard has at most 2^40 rows of 2^24 columns, got 4 x 16777217"},
      {[](ShardLayout& l) {
         l.full_shape = {int64_t{1} << 21, int64_t{1} << 20};
         l.rows = int64_t{1} << 21;
         l.cols = int64_t{1} << 20;
       },
       "w/part_0: rows x cols: 2097152 x 1048576 elements is more than 2^40"},
  };
  for (const auto& c : cases) {
    ShardLayout l = Good();
    c.mutate(l);
    auto st = ValidateShardLayout(l);
    INFO(c.message);
    CHECK(st.code() == ps::Code::kInvalidArgument);
    CHECK(st.message() == c.message);
  }
}

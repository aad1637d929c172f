// The layout of one shard of a variable: which rows of axis 0 it holds, of which whole
// variable. Placement (placement.h) produces it; the wire (proto::ShardDef), the ps store
// (server::ShardDef) and checkpoint records (ckpt::RecordMeta, ckpt::ShardRecordView)
// embed it, and all of them check it with ValidateShardLayout, the one validator.
// Plain values; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/status.h"

namespace ps::cluster {

inline constexpr size_t kMaxVarNameBytes = 4096;
inline constexpr size_t kMaxRank = 32;
// rows * cols of a dense shard: 4 TiB of floats, beyond any ps.
inline constexpr int64_t kMaxShardElements = int64_t{1} << 40;
// A lazy shard allocates only the rows it is pushed, so its rows are bounded apart.
inline constexpr int64_t kMaxLazyRows = int64_t{1} << 40;
inline constexpr int64_t kMaxLazyCols = int64_t{1} << 24;

struct ShardLayout {
  std::string var;        // the variable's name: non-empty, <= kMaxVarNameBytes
  int shard = 0;          // in [0, num_shards)
  int num_shards = 1;     // how many shards the variable is split into, >= 1
  int64_t row_begin = 0;  // global row of the shard's first row, >= 0
  int64_t rows = 0;       // > 0; row_begin + rows <= full_shape[0]
  int64_t cols = 1;       // floats per row: product of full_shape[1:] (1 for rank <= 1)
  // The whole variable's shape, rank <= kMaxRank, every dimension > 0. {} is a scalar,
  // held as one unsharded 1 x 1 shard.
  std::vector<int64_t> full_shape;
  // Rows are created on first push (hashed ids); requires rank >= 1. Dense: rows * cols
  // <= kMaxShardElements; lazy: rows <= kMaxLazyRows and cols <= kMaxLazyCols.
  bool lazy = false;

  // "<var>/part_<shard>", as TF names partitions.
  std::string Name() const;
  friend bool operator==(const ShardLayout&, const ShardLayout&) = default;
};

// "[13, 3]" ("[]" for a scalar); `sep` between dimensions ("," for a narrow table column).
// The one shape formatter of every message and listing that names a shape.
std::string ShapeString(std::span<const int64_t> shape, std::string_view sep = ", ");

// Every rule in the comments of ShardLayout. InvalidArgument, one line naming the shard
// and the field: "w/part_2: shard 2 is outside [0, num_shards 2)".
Status ValidateShardLayout(const ShardLayout& layout);

}  // namespace ps::cluster

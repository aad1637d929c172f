#include "libps/cluster/shard_layout.h"

namespace ps::cluster {

std::string ShapeString(std::span<const int64_t> shape, std::string_view sep) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += sep;
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string ShardLayout::Name() const { return var + "/part_" + std::to_string(shard); }

Status ValidateShardLayout(const ShardLayout& l) {
  using std::to_string;
  if (l.var.empty()) return InvalidArgument("shard layout: var must not be empty");
  if (l.var.size() > kMaxVarNameBytes) {
    return InvalidArgument("shard layout: var is " + to_string(l.var.size()) +
                           " bytes, more than " + to_string(kMaxVarNameBytes));
  }
  const std::string name = l.Name();
  auto bad = [&name](const std::string& problem) { return InvalidArgument(name + ": " + problem); };
  if (l.num_shards < 1) return bad("num_shards " + to_string(l.num_shards) + " must be >= 1");
  if (l.shard < 0 || l.shard >= l.num_shards) {
    return bad("shard " + to_string(l.shard) + " is outside [0, num_shards " +
               to_string(l.num_shards) + ")");
  }
  if (l.row_begin < 0) return bad("row_begin " + to_string(l.row_begin) + " must be >= 0");
  if (l.rows <= 0 || l.cols <= 0) {
    return bad("rows and cols must be > 0, got " + to_string(l.rows) + " x " + to_string(l.cols));
  }
  if (l.lazy) {
    if (l.full_shape.empty()) return bad("lazy: a lazy shard needs a variable of rank >= 1");
    if (l.rows > kMaxLazyRows || l.cols > kMaxLazyCols) {
      return bad("lazy: a lazy shard has at most 2^40 rows of 2^24 columns, got " +
                 to_string(l.rows) + " x " + to_string(l.cols));
    }
  } else if (l.cols > kMaxShardElements / l.rows) {
    return bad("rows x cols: " + to_string(l.rows) + " x " + to_string(l.cols) +
               " elements is more than 2^40");
  }
  if (l.full_shape.size() > kMaxRank) {
    return bad("full_shape has rank " + to_string(l.full_shape.size()) + ", more than " +
               to_string(kMaxRank));
  }
  if (l.full_shape.empty()) {
    if (l.num_shards != 1 || l.row_begin != 0 || l.rows != 1 || l.cols != 1) {
      return bad("a scalar variable (full_shape []) is one unsharded 1 x 1 shard");
    }
    return Status::Ok();
  }
  int64_t cols = 1;
  for (size_t i = 0; i < l.full_shape.size(); ++i) {
    const int64_t d = l.full_shape[i];
    if (d <= 0) return bad("full_shape[" + to_string(i) + "] is " + to_string(d) + ", must be > 0");
    if (i == 0) continue;
    if (d > kMaxShardElements / cols) return bad("full_shape[1:] has more than 2^40 elements");
    cols *= d;
  }
  if (cols != l.cols) {
    return bad("cols " + to_string(l.cols) + " != product of full_shape[1:] = " + to_string(cols));
  }
  if (l.row_begin >
      l.full_shape[0] - l.rows) {  // row_begin + rows > full_shape[0], without overflow
    const uint64_t end = static_cast<uint64_t>(l.row_begin) + static_cast<uint64_t>(l.rows);
    return bad("rows [" + to_string(l.row_begin) + ", " + to_string(end) +
               ") exceed full_shape[0] = " + to_string(l.full_shape[0]));
  }
  return Status::Ok();
}

}  // namespace ps::cluster

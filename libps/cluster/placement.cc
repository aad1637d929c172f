#include "libps/cluster/placement.h"
#include "libps/core/text.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <map>
#include <numeric>

namespace ps::cluster {

namespace {

struct RowsCols {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t row_bytes = 0;
  int64_t total_bytes = 0;
};

Result<RowsCols> Measure(std::span<const int64_t> shape, int64_t elem_bytes) {
  const std::string where = "shape " + ShapeString(shape);
  if (elem_bytes < 1) {
    return InvalidArgument(where + ": element size " + std::to_string(elem_bytes) +
                           " must be >= 1 byte");
  }
  RowsCols rc;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) {
      return InvalidArgument(where + ": dimension " + std::to_string(i) + " is " +
                             std::to_string(shape[i]) + " (must be >= 1)");
    }
  }
  if (!shape.empty()) rc.rows = shape[0];
  for (size_t i = 1; i < shape.size(); ++i) {
    if (__builtin_mul_overflow(rc.cols, shape[i], &rc.cols)) {
      return InvalidArgument(where + ": too many elements");
    }
  }
  if (__builtin_mul_overflow(rc.cols, elem_bytes, &rc.row_bytes) ||
      __builtin_mul_overflow(rc.row_bytes, rc.rows, &rc.total_bytes)) {
    return InvalidArgument(where + ": size in bytes overflows 64 bits");
  }
  return rc;
}

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// The shape partitioners and placement size a variable by (kLazyEstimateRows).
std::vector<int64_t> SizingShape(const VarShape& var) {
  std::vector<int64_t> shape = var.shape;
  if (var.lazy && !shape.empty()) shape[0] = std::min(shape[0], kLazyEstimateRows);
  return shape;
}

}  // namespace

std::vector<int64_t> SplitRows(int64_t rows, int shards) {
  PS_ASSERT(rows >= 0 && shards >= 1);
  const int64_t base = rows / shards;
  const int64_t extra = rows % shards;
  std::vector<int64_t> out(static_cast<size_t>(shards), base);
  for (int64_t i = 0; i < extra; ++i) out[static_cast<size_t>(i)] += 1;
  return out;
}

int ShardOfRow(int64_t rows, int shards, int64_t row) {
  PS_ASSERT(shards >= 1 && row >= 0 && row < rows);
  const int64_t base = rows / shards;
  const int64_t extra = rows % shards;
  const int64_t big_rows = extra * (base + 1);  // rows held by the first `extra` shards
  if (row < big_rows) return static_cast<int>(row / (base + 1));
  return static_cast<int>(extra + (row - big_rows) / base);
}

int64_t ShardRowBegin(int64_t rows, int shards, int shard) {
  PS_ASSERT(shards >= 1 && shard >= 0 && shard <= shards && rows >= 0);
  const int64_t base = rows / shards;
  const int64_t extra = rows % shards;
  return shard * base + std::min<int64_t>(shard, extra);
}

Result<int> NumShards(const PartitionerSpec& spec, std::span<const int64_t> shape,
                      int64_t elem_bytes) {
  PS_ASSIGN_OR_RETURN(RowsCols rc, Measure(shape, elem_bytes));
  switch (spec.kind) {
    case PartitionerSpec::kNone:
      return 1;
    case PartitionerSpec::kFixed: {
      if (spec.num_shards < 1) {
        return InvalidArgument("fixed partitioner: num_shards " + std::to_string(spec.num_shards) +
                               " must be >= 1");
      }
      return static_cast<int>(std::min<int64_t>(spec.num_shards, rc.rows));
    }
    case PartitionerSpec::kMinSize: {
      if (spec.min_shard_bytes < 1 || spec.max_shards < 1) {
        return InvalidArgument(
            "min_size partitioner: min_shard_bytes and max_shards must be "
            ">= 1");
      }
      const int64_t wanted = CeilDiv(rc.total_bytes, spec.min_shard_bytes);
      return static_cast<int>(
          std::max<int64_t>(1, std::min({rc.rows, int64_t{spec.max_shards}, wanted})));
    }
    case PartitionerSpec::kMaxSize: {
      if (spec.max_shard_bytes < 1 || spec.max_shards < 0) {
        return InvalidArgument(
            "max_size partitioner: max_shard_bytes must be >= 1 and "
            "max_shards >= 0");
      }
      const int64_t rows_per_shard = std::max<int64_t>(1, spec.max_shard_bytes / rc.row_bytes);
      int64_t shards = CeilDiv(rc.rows, rows_per_shard);
      if (spec.max_shards > 0) shards = std::min<int64_t>(shards, spec.max_shards);
      if (shards > INT_MAX) {
        return InvalidArgument("shape " + ShapeString(shape) +
                               ": max_size partitioner would "
                               "create " +
                               std::to_string(shards) + " shards");
      }
      return static_cast<int>(shards);
    }
  }
  return Internal("unknown partitioner kind");
}

Result<PartitionerSpec> ParsePartitioner(const Json& json, std::string path) {
  JsonReader r(json, std::move(path));
  PS_RETURN_IF_ERROR(r.status());
  std::string type;
  PS_RETURN_IF_ERROR(r.Get("type", &type));
  PartitionerSpec spec;
  auto positive = [&r](std::string_view key, int64_t value) -> Status {
    if (value < 1) {
      return InvalidArgument(r.Path(key) + ": must be >= 1, got " + std::to_string(value));
    }
    return Status::Ok();
  };
  if (type == "none") {
    spec.kind = PartitionerSpec::kNone;
  } else if (type == "fixed") {
    spec.kind = PartitionerSpec::kFixed;
    PS_RETURN_IF_ERROR(r.Get("num_shards", &spec.num_shards));
    PS_RETURN_IF_ERROR(positive("num_shards", spec.num_shards));
  } else if (type == "min_size") {
    spec.kind = PartitionerSpec::kMinSize;
    PS_RETURN_IF_ERROR(r.Get("max_shards", &spec.max_shards));
    PS_RETURN_IF_ERROR(positive("max_shards", spec.max_shards));
    PS_RETURN_IF_ERROR(r.GetOr("min_shard_bytes", &spec.min_shard_bytes));
    PS_RETURN_IF_ERROR(positive("min_shard_bytes", spec.min_shard_bytes));
  } else if (type == "max_size") {
    spec.kind = PartitionerSpec::kMaxSize;
    PS_RETURN_IF_ERROR(r.Get("max_shard_bytes", &spec.max_shard_bytes));
    PS_RETURN_IF_ERROR(positive("max_shard_bytes", spec.max_shard_bytes));
    if (r.Has("max_shards")) {  // absent: no bound, as in TF
      PS_RETURN_IF_ERROR(r.Get("max_shards", &spec.max_shards));
      PS_RETURN_IF_ERROR(positive("max_shards", spec.max_shards));
    }
  } else {
    return InvalidArgument(r.Path("type") + ": unknown partitioner " +
                           Json(type).dump(-1, ' ', false, Json::error_handler_t::replace) +
                           " (expected none, fixed, min_size or max_size)");
  }
  PS_RETURN_IF_ERROR(r.Finish());
  return spec;
}

Json PartitionerToJson(const PartitionerSpec& spec) {
  Json j = Json::object();
  switch (spec.kind) {
    case PartitionerSpec::kNone:
      j["type"] = "none";
      break;
    case PartitionerSpec::kFixed:
      j["type"] = "fixed";
      j["num_shards"] = spec.num_shards;
      break;
    case PartitionerSpec::kMinSize:
      j["type"] = "min_size";
      j["min_shard_bytes"] = spec.min_shard_bytes;
      j["max_shards"] = spec.max_shards;
      break;
    case PartitionerSpec::kMaxSize:
      j["type"] = "max_size";
      j["max_shard_bytes"] = spec.max_shard_bytes;
      if (spec.max_shards > 0) j["max_shards"] = spec.max_shards;
      break;
  }
  return j;
}

const char* PlacementStrategyName(PlacementStrategy strategy) {
  switch (strategy) {
    case PlacementStrategy::kRoundRobin:
      return "round_robin";
    case PlacementStrategy::kGreedyBytes:
      return "greedy_bytes";
    case PlacementStrategy::kBalanced:
      return "balanced";
  }
  return "unknown";
}

std::optional<PlacementStrategy> ParsePlacementStrategy(std::string_view name) {
  for (auto s : {PlacementStrategy::kRoundRobin, PlacementStrategy::kGreedyBytes,
                 PlacementStrategy::kBalanced}) {
    if (name == PlacementStrategyName(s)) return s;
  }
  return std::nullopt;
}

int64_t TrafficPerStep(const VarShape& var) {
  auto rc = Measure(SizingShape(var), var.elem_bytes);
  if (!rc.ok()) return 0;
  if (!var.sparse) return rc->total_bytes;
  return std::min(std::max<int64_t>(var.rows_per_step, 0), rc->rows) * rc->row_bytes;
}

Result<std::vector<ShardPlacement>> Place(std::span<const VarShape> vars,
                                          const PartitionerSpec& partitioner, int num_ps,
                                          PlacementStrategy strategy) {
  if (num_ps < 1) {
    return InvalidArgument("placement needs at least one ps task, got " + std::to_string(num_ps));
  }
  // Shards per variable: the partitioner's, or kBalanced's split of the heaviest ones.
  std::vector<int> shards(vars.size());
  std::vector<int64_t> traffic(vars.size());  // [var] TrafficPerStep
  int64_t total_traffic = 0;
  std::map<std::string, size_t, std::less<>> seen;
  for (size_t v = 0; v < vars.size(); ++v) {
    const VarShape& var = vars[v];
    if (var.name.empty()) {
      return InvalidArgument("variable #" + std::to_string(v) + " has an empty name");
    }
    if (!seen.emplace(var.name, v).second) {
      return InvalidArgument("variable " + QuoteInput(var.name, '"') + " is defined twice");
    }
    auto n = NumShards(partitioner, SizingShape(var), var.elem_bytes);
    if (!n.ok()) return n.status().WithContext("variable " + QuoteInput(var.name, '"'));
    shards[v] = *n;
    traffic[v] = TrafficPerStep(var);
    total_traffic = total_traffic > std::numeric_limits<int64_t>::max() - traffic[v]
                        ? std::numeric_limits<int64_t>::max()
                        : total_traffic + traffic[v];
  }
  if (strategy == PlacementStrategy::kBalanced && partitioner.kind == PartitionerSpec::kNone &&
      num_ps > 1) {
    const int64_t share = std::max<int64_t>(1, CeilDiv(total_traffic, num_ps));
    for (size_t v = 0; v < vars.size(); ++v) {
      if (traffic[v] <= share) continue;
      const int64_t rows = vars[v].shape.empty() ? 1 : vars[v].shape[0];
      shards[v] = static_cast<int>(std::min<int64_t>({CeilDiv(traffic[v], share), num_ps, rows}));
    }
  }

  std::vector<ShardPlacement> out;
  std::vector<int64_t> bytes;       // [out.size()] held
  std::vector<int64_t> step_bytes;  // [out.size()] traffic per step
  for (size_t v = 0; v < vars.size(); ++v) {
    const VarShape& var = vars[v];
    const int n = shards[v];
    PS_ASSIGN_OR_RETURN(RowsCols rc, Measure(var.shape, var.elem_bytes));
    PS_ASSIGN_OR_RETURN(RowsCols sized, Measure(SizingShape(var), var.elem_bytes));
    const std::vector<int64_t> split = SplitRows(rc.rows, n);
    int64_t row = 0;
    for (int s = 0; s < n; ++s) {
      const int64_t rows = split[static_cast<size_t>(s)];
      ShardLayout layout{.var = var.name,
                         .shard = s,
                         .num_shards = n,
                         .row_begin = row,
                         .rows = rows,
                         .cols = rc.cols,
                         .full_shape = var.shape,
                         .lazy = var.lazy};
      Status valid = ValidateShardLayout(layout);
      if (!valid.ok()) return valid.WithContext("variable " + QuoteInput(var.name, '"'));
      out.push_back({.layout = std::move(layout), .ps = 0});
      bytes.push_back(var.lazy ? sized.total_bytes / n : rows * rc.row_bytes);
      step_bytes.push_back(var.sparse ? traffic[v] / n : rows * rc.row_bytes);
      row += rows;
    }
  }

  if (strategy == PlacementStrategy::kRoundRobin) {
    for (size_t i = 0; i < out.size(); ++i) out[i].ps = static_cast<int>(i % num_ps);
    return out;
  }

  const bool by_traffic = strategy == PlacementStrategy::kBalanced;
  std::vector<size_t> order(out.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (by_traffic && step_bytes[a] != step_bytes[b]) return step_bytes[a] > step_bytes[b];
    return bytes[a] > bytes[b];
  });
  std::vector<int64_t> load(static_cast<size_t>(num_ps), 0);  // bytes held so far
  std::vector<int64_t> busy(static_cast<size_t>(num_ps), 0);  // traffic so far
  for (size_t i : order) {
    size_t best = 0;
    for (size_t p = 1; p < load.size(); ++p) {
      const bool less =
          by_traffic ? (busy[p] < busy[best] || (busy[p] == busy[best] && load[p] < load[best]))
                     : load[p] < load[best];
      if (less) best = p;
    }
    out[i].ps = static_cast<int>(best);
    load[best] += bytes[i];
    busy[best] += step_bytes[i];
  }
  return out;
}

namespace {
// Sums per_shard(variable, shard layout) over the shards each ps holds.
template <typename PerShard>
std::vector<int64_t> SumPerPs(std::span<const VarShape> vars,
                              std::span<const ShardPlacement> placement, int num_ps,
                              PerShard per_shard) {
  std::map<std::string, const VarShape*, std::less<>> by_name;
  for (const VarShape& v : vars) by_name.emplace(v.name, &v);
  std::vector<int64_t> out(static_cast<size_t>(std::max(num_ps, 0)), 0);
  for (const ShardPlacement& p : placement) {
    const ShardLayout& s = p.layout;
    auto it = by_name.find(s.var);
    if (p.ps < 0 || p.ps >= num_ps || it == by_name.end() || s.num_shards < 1) continue;
    out[static_cast<size_t>(p.ps)] += per_shard(*it->second, s);
  }
  return out;
}
}  // namespace

std::vector<int64_t> BytesPerPs(std::span<const VarShape> vars,
                                std::span<const ShardPlacement> placement, int num_ps) {
  return SumPerPs(vars, placement, num_ps, [](const VarShape& v, const ShardLayout& s) {
    int64_t rows = s.rows;
    if (v.lazy && !v.shape.empty()) rows = std::min(v.shape[0], kLazyEstimateRows) / s.num_shards;
    return rows * s.cols * v.elem_bytes;
  });
}

std::vector<int64_t> TrafficPerPs(std::span<const VarShape> vars,
                                  std::span<const ShardPlacement> placement, int num_ps) {
  return SumPerPs(vars, placement, num_ps, [](const VarShape& v, const ShardLayout& s) {
    return v.sparse ? TrafficPerStep(v) / s.num_shards : s.rows * s.cols * v.elem_bytes;
  });
}

}  // namespace ps::cluster

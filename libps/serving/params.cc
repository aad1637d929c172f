#include "libps/serving/params.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_set>

#include "libps/model/initializer.h"

namespace ps::serving {

namespace {

uint64_t Mix(uint64_t x) {  // SplitMix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

size_t BucketOf(int64_t row, size_t buckets) {
  return static_cast<size_t>(Mix(static_cast<uint64_t>(row)) & (buckets - 1));
}

size_t BucketsFor(int64_t live_rows) {
  return std::bit_ceil(static_cast<size_t>(std::max<int64_t>(16, live_rows / kBucketRows)));
}

// The row's values in a bucket, or null.
const float* FindIn(const LazyBucket& b, int64_t row, int64_t cols) {
  auto it = std::lower_bound(b.ids.begin(), b.ids.end(), row);
  if (it == b.ids.end() || *it != row) return nullptr;
  return b.values.data() + (it - b.ids.begin()) * cols;
}

const std::shared_ptr<const LazyBucket>& EmptyBucket() {
  static const auto empty = std::make_shared<const LazyBucket>();
  return empty;
}

}  // namespace

uint64_t UnsharedBytes(const ParamVersion& v, const ParamVersion* other) {
  std::unordered_set<const void*> theirs;
  if (other != nullptr) {
    for (const auto& var : other->vars) {
      for (const auto& b : var.blocks) theirs.insert(b.get());
      for (const auto& b : var.buckets) theirs.insert(b.get());
    }
  }
  std::unordered_set<const void*> counted;
  uint64_t bytes = 0;
  for (const auto& var : v.vars) {
    for (const auto& b : var.blocks) {
      if (!theirs.contains(b.get()) && counted.insert(b.get()).second)
        bytes += b->size() * sizeof(float);
    }
    for (const auto& b : var.buckets) {
      if (!theirs.contains(b.get()) && counted.insert(b.get()).second)
        bytes += b->ids.size() * sizeof(int64_t) + b->values.size() * sizeof(float);
    }
  }
  return bytes;
}

Result<std::shared_ptr<const ParamVersion>> VersionFromStore(const scoring::LoadedModel& loaded,
                                                             BundleInfo info) {
  auto v = std::make_shared<ParamVersion>();
  for (const auto& def : loaded.plan.variables) {
    auto meta = std::make_shared<VarVersion::Meta>();
    meta->name = def.name;
    meta->sparse = def.sparse;
    meta->lazy = def.lazy;
    meta->cols = def.row_elements();
    meta->rows = def.num_elements() / meta->cols;
    meta->full_shape = def.shape;
    meta->init = def.init;
    meta->seed = loaded.job.seed;
    meta->block_rows = def.sparse ? kBlockRows : meta->rows;
    const auto cols = static_cast<size_t>(meta->cols);
    VarVersion var;
    std::vector<std::shared_ptr<std::vector<float>>> blocks;
    std::vector<std::shared_ptr<LazyBucket>> buckets;
    if (!def.lazy) {
      const int64_t n = (meta->rows + meta->block_rows - 1) / meta->block_rows;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t rows = std::min(meta->block_rows, meta->rows - b * meta->block_rows);
        blocks.push_back(std::make_shared<std::vector<float>>(static_cast<size_t>(rows) * cols));
      }
    }
    // Each shard of the variable, read under its locks (the store is ours alone here).
    struct Row {
      int64_t id;
      const float* values;
    };
    for (const auto& s : loaded.plan.shards) {
      if (s.layout.var != def.name) continue;
      const int64_t begin = s.layout.row_begin;
      Status st = loaded.store->Read(
          {s.layout.var, s.layout.shard}, [&](const ps::server::ShardView& view) {
            if (def.lazy) {
              if (buckets.empty()) {
                // Sized for the whole table: the shards' rows are counted first.
                buckets.resize(BucketsFor(0));
              }
              for (size_t i = 0; i < view.row_ids.size(); ++i) {
                const int64_t id = begin + view.row_ids[i];
                const auto row = view.row(i, 0);
                auto& b = buckets[BucketOf(id, buckets.size())];
                if (!b) b = std::make_shared<LazyBucket>();
                b->ids.push_back(id);
                b->values.insert(b->values.end(), row.begin(), row.end());
                ++var.live_rows;
              }
              return;
            }
            for (int64_t r = 0; r < s.layout.rows; ++r) {
              const int64_t g = begin + r;
              auto& block = *blocks[static_cast<size_t>(g / meta->block_rows)];
              std::memcpy(block.data() + (g % meta->block_rows) * meta->cols,
                          view.values.data() + r * meta->cols, cols * sizeof(float));
            }
          });
      PS_RETURN_IF_ERROR(st);
    }
    for (auto& b : blocks) var.blocks.push_back(std::move(b));
    if (def.lazy) {
      if (buckets.empty()) buckets.resize(BucketsFor(0));
      // Ids arrive shard by shard, each ascending; buckets keep them sorted.
      for (auto& b : buckets) {
        if (!b) {
          var.buckets.push_back(EmptyBucket());
          continue;
        }
        std::vector<size_t> order(b->ids.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(),
                  [&](size_t x, size_t y) { return b->ids[x] < b->ids[y]; });
        auto sorted = std::make_shared<LazyBucket>();
        for (size_t i : order) {
          sorted->ids.push_back(b->ids[i]);
          const auto first = b->values.begin() + static_cast<std::ptrdiff_t>(i * cols);
          sorted->values.insert(sorted->values.end(), first,
                                first + static_cast<std::ptrdiff_t>(cols));
        }
        b.reset();
        var.buckets.push_back(std::move(sorted));
      }
    }
    var.meta = std::move(meta);
    v->vars.push_back(std::move(var));
  }
  // A table loaded with many rows gets its bucket count from them.
  VersionBuilder rebucket(*v);
  return rebucket.Finish(std::move(info));
}

Status GatherParams(const ParamVersion& v, const std::vector<std::vector<int64_t>>& rows,
                    std::vector<std::vector<float>>* scratch, model::Params* params) {
  const size_t n = v.vars.size();
  scratch->resize(n);
  params->values.resize(n);
  params->rows.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const VarVersion& var = v.vars[i];
    const VarVersion::Meta& m = *var.meta;
    if (!m.sparse) {
      params->values[i] = *var.blocks[0];
      params->rows[i] = {};
      continue;
    }
    const auto& want = i < rows.size() ? rows[i] : std::vector<int64_t>{};
    auto& out = (*scratch)[i];
    const auto cols = static_cast<size_t>(m.cols);
    out.resize(want.size() * cols);
    for (size_t k = 0; k < want.size(); ++k) {
      const int64_t r = want[k];
      if (r < 0 || r >= m.rows) {
        return InvalidArgument("row " + std::to_string(r) + " of " + m.name + " is outside [0, " +
                               std::to_string(m.rows) + ")");
      }
      float* dst = out.data() + k * cols;
      if (!m.lazy) {
        const auto& block = *var.blocks[static_cast<size_t>(r / m.block_rows)];
        std::memcpy(dst, block.data() + (r % m.block_rows) * m.cols, cols * sizeof(float));
      } else if (const float* src =
                     FindIn(*var.buckets[BucketOf(r, var.buckets.size())], r, m.cols);
                 src != nullptr) {
        std::memcpy(dst, src, cols * sizeof(float));
      } else {
        model::FillInitial(m.init, m.seed, m.name, m.full_shape, r, 1, m.cols, {dst, cols});
      }
    }
    params->values[i] = out;
    params->rows[i] =
        i < rows.size() ? std::span<const int64_t>(rows[i]) : std::span<const int64_t>();
  }
  return Status::Ok();
}

VersionBuilder::VersionBuilder(const ParamVersion& from)
    : next_(std::make_shared<ParamVersion>(from)) {
  for (const auto& var : next_->vars) {
    owned_.emplace_back(var.meta->lazy ? var.buckets.size() : var.blocks.size(), false);
  }
}

int VersionBuilder::Find(std::string_view name) const {
  for (size_t i = 0; i < next_->vars.size(); ++i) {
    if (next_->vars[i].meta->name == name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<float>& VersionBuilder::OwnBlock(int var, size_t b) {
  auto& slot = next_->vars[var].blocks[b];
  if (!owned_[var][b]) {
    slot = std::make_shared<const std::vector<float>>(*slot);
    owned_[var][b] = true;
    ++copied_;
    copied_bytes_ += slot->size() * sizeof(float);
  }
  return const_cast<std::vector<float>&>(*slot);  // ours alone until Finish
}

LazyBucket& VersionBuilder::OwnBucket(int var, size_t b) {
  auto& slot = next_->vars[var].buckets[b];
  if (!owned_[var][b]) {
    slot = std::make_shared<const LazyBucket>(*slot);
    owned_[var][b] = true;
    ++copied_;
    copied_bytes_ += slot->ids.size() * sizeof(int64_t) + slot->values.size() * sizeof(float);
  }
  return const_cast<LazyBucket&>(*slot);  // ours alone until Finish
}

void VersionBuilder::SetRow(int var, int64_t row, std::span<const float> values) {
  VarVersion& v = next_->vars[var];
  const VarVersion::Meta& m = *v.meta;
  const size_t bytes = static_cast<size_t>(m.cols) * sizeof(float);
  if (!m.lazy) {
    const auto b = static_cast<size_t>(row / m.block_rows);
    const int64_t at = (row % m.block_rows) * m.cols;
    if (std::memcmp(v.blocks[b]->data() + at, values.data(), bytes) == 0) return;
    std::memcpy(OwnBlock(var, b).data() + at, values.data(), bytes);
    return;
  }
  const size_t b = BucketOf(row, v.buckets.size());
  if (const float* cur = FindIn(*v.buckets[b], row, m.cols);
      cur != nullptr && std::memcmp(cur, values.data(), bytes) == 0) {
    return;
  }
  LazyBucket& bucket = OwnBucket(var, b);
  auto it = std::lower_bound(bucket.ids.begin(), bucket.ids.end(), row);
  const auto k = static_cast<size_t>(it - bucket.ids.begin());
  if (it == bucket.ids.end() || *it != row) {
    bucket.ids.insert(it, row);
    bucket.values.insert(bucket.values.begin() + static_cast<std::ptrdiff_t>(k * m.cols),
                         values.begin(), values.end());
    ++v.live_rows;
    return;
  }
  std::memcpy(bucket.values.data() + k * m.cols, values.data(), bytes);
}

void VersionBuilder::EraseRow(int var, int64_t row) {
  VarVersion& v = next_->vars[var];
  const size_t b = BucketOf(row, v.buckets.size());
  if (FindIn(*v.buckets[b], row, v.meta->cols) == nullptr) return;
  LazyBucket& bucket = OwnBucket(var, b);
  auto it = std::lower_bound(bucket.ids.begin(), bucket.ids.end(), row);
  const auto k = static_cast<int64_t>(it - bucket.ids.begin());
  bucket.ids.erase(it);
  bucket.values.erase(bucket.values.begin() + k * v.meta->cols,
                      bucket.values.begin() + (k + 1) * v.meta->cols);
  --v.live_rows;
}

void VersionBuilder::EraseRowsExcept(int var, int64_t begin, int64_t end,
                                     std::span<const int64_t> keep) {
  VarVersion& v = next_->vars[var];
  std::vector<int64_t> drop;
  for (const auto& b : v.buckets) {
    for (int64_t id : b->ids) {
      if (id >= begin && id < end && !std::binary_search(keep.begin(), keep.end(), id))
        drop.push_back(id);
    }
  }
  for (int64_t id : drop) EraseRow(var, id);
}

std::shared_ptr<const ParamVersion> VersionBuilder::Finish(BundleInfo info) {
  for (auto& v : next_->vars) {
    const VarVersion::Meta& m = *v.meta;
    if (!m.lazy || v.live_rows <= kMaxBucketRows * static_cast<int64_t>(v.buckets.size())) continue;
    // Re-bucketed: the table has outgrown its buckets.
    const size_t n = BucketsFor(v.live_rows);
    std::vector<std::shared_ptr<LazyBucket>> fresh(n);
    for (auto& f : fresh) f = std::make_shared<LazyBucket>();
    std::vector<std::pair<int64_t, const float*>> all;
    for (const auto& b : v.buckets) {
      for (size_t i = 0; i < b->ids.size(); ++i)
        all.emplace_back(b->ids[i], b->values.data() + i * m.cols);
    }
    std::sort(all.begin(), all.end());
    for (const auto& [id, values] : all) {
      LazyBucket& f = *fresh[BucketOf(id, n)];
      f.ids.push_back(id);
      f.values.insert(f.values.end(), values, values + m.cols);
    }
    v.buckets.assign(fresh.begin(), fresh.end());
    copied_bytes_ +=
        static_cast<uint64_t>(v.live_rows) * (sizeof(int64_t) + m.cols * sizeof(float));
  }
  for (auto& vi : info.variables) {
    const int i = Find(vi.name);
    if (i < 0) continue;
    const VarVersion& v = next_->vars[i];
    vi.stored_rows = v.meta->lazy ? v.live_rows : v.meta->rows;
  }
  next_->info = std::move(info);
  owned_.clear();
  return std::move(next_);
}

}  // namespace ps::serving

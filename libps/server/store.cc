#include "libps/server/store.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace ps::server {
namespace {

constexpr size_t kAlign = 64;
constexpr int64_t kMaxStripes = 64;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// A 64-byte-aligned float array; the allocation is rounded up to a multiple of 64 bytes.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  static Result<AlignedFloats> Make(size_t n, const std::string& what) {
    size_t bytes = (n * sizeof(float) + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, bytes);
    if (p == nullptr)
      return Internal(what + ": out of memory allocating " + std::to_string(bytes) + " bytes");
    AlignedFloats a;
    a.data_.reset(static_cast<float*>(p));
    a.size_ = n;
    return a;
  }
  float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::span<float> span() const { return {data_.get(), size_}; }

 private:
  std::unique_ptr<float, FreeDeleter> data_;
  size_t size_ = 0;
};

constexpr int kLazyStripeBits = 6;
constexpr int64_t kLazyStripes = int64_t{1} << kLazyStripeBits;
constexpr size_t kFirstChunkRows = 16;
constexpr size_t kMaxChunkRows = 4096;

// SplitMix64's finaliser: the top kLazyStripeBits bits pick the stripe, the low bits the
// table position.
uint64_t HashRow(int64_t row) {
  uint64_t z = static_cast<uint64_t>(row) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The rows of one stripe of a lazy shard: an open-addressing table (linear probing,
// grown at load 0.7) from shard-local row to its record, and the chunks holding the
// records. A record is record_floats floats (values, then each slot) at a stable address:
// chunks are never moved or freed until Clear. Not synchronised: the stripe's mutex
// guards it.
class LazyStripe {
 public:
  struct Entry {
    int64_t row = -1;  // -1: empty
    float* record = nullptr;
  };

  float* Find(int64_t row, uint64_t hash) const {
    if (table_.empty()) return nullptr;
    const size_t mask = table_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      if (table_[i].row == row) return table_[i].record;
      if (table_[i].row < 0) return nullptr;
    }
  }

  // Adds `row` (not present) with an uninitialised record; null when out of memory.
  float* Insert(int64_t row, uint64_t hash, size_t record_floats) {
    if ((count_ + 1) * 10 > table_.size() * 7 && !Grow()) return nullptr;
    if (chunk_used_ == chunk_rows_) {
      size_t rows = chunks_.empty() ? kFirstChunkRows : std::min(chunk_rows_ * 2, kMaxChunkRows);
      auto chunk = AlignedFloats::Make(rows * record_floats, "lazy rows");
      if (!chunk.ok()) return nullptr;
      chunks_.push_back(std::move(*chunk));
      chunk_rows_ = rows;
      chunk_used_ = 0;
      chunk_floats_ += rows * record_floats;
    }
    float* record = chunks_.back().data() + chunk_used_ * record_floats;
    ++chunk_used_;
    const size_t mask = table_.size() - 1;
    size_t i = hash & mask;
    while (table_[i].row >= 0) i = (i + 1) & mask;
    table_[i] = {row, record};
    ++count_;
    return record;
  }

  void Clear() {
    table_.clear();
    table_.shrink_to_fit();
    chunks_.clear();
    count_ = chunk_used_ = chunk_rows_ = chunk_floats_ = 0;
  }

  size_t count() const { return count_; }
  uint64_t bytes() const { return table_.size() * sizeof(Entry) + chunk_floats_ * sizeof(float); }
  template <typename F>
  void ForEach(F&& f) const {
    for (const Entry& e : table_) {
      if (e.row >= 0) f(e.row, e.record);
    }
  }

 private:
  bool Grow() {
    std::vector<Entry> old;
    old.swap(table_);
    try {
      table_.resize(old.empty() ? 16 : old.size() * 2);
    } catch (const std::bad_alloc&) {
      table_.swap(old);
      return false;
    }
    const size_t mask = table_.size() - 1;
    for (const Entry& e : old) {
      if (e.row < 0) continue;
      size_t i = HashRow(e.row) & mask;
      while (table_[i].row >= 0) i = (i + 1) & mask;
      table_[i] = e;
    }
    return true;
  }

  std::vector<Entry> table_;  // size 0 or a power of two
  size_t count_ = 0;
  std::vector<AlignedFloats> chunks_;
  size_t chunk_rows_ = 0;     // capacity of chunks_.back(), in records
  size_t chunk_used_ = 0;     // records used in chunks_.back()
  size_t chunk_floats_ = 0;   // all chunks
};

}  // namespace

struct Store::Shard {
  ShardDef def;
  size_t cols = 0;
  AlignedFloats values;
  std::vector<SlotDef> slot_defs;
  std::array<AlignedFloats, kMaxSlots> slots;
  int64_t stripe_rows = 1;  // rows per stripe; stripe of row r is r / stripe_rows
  int64_t num_stripes = 1;
  std::unique_ptr<std::mutex[]> stripes;
  // Lazy shards: one per stripe (stripes[k] guards lazy[k]); values and slots are empty.
  std::unique_ptr<LazyStripe[]> lazy;
  size_t record_floats = 0;  // lazy: (1 + slots) * cols

  std::mutex& StripeOf(int64_t row) const { return stripes[row / stripe_rows]; }
  static size_t LazyStripeOf(uint64_t hash) { return hash >> (64 - kLazyStripeBits); }

  // Lazy: writes row `row`'s initial values and slots into `record`.
  void InitRecord(int64_t row, float* record) const {
    model::FillInitial(def.init, def.seed, def.var, def.full_shape, def.row_begin + row, 1, def.cols,
                       {record, cols});
    for (size_t i = 0; i < slot_defs.size(); ++i)
      std::fill_n(record + (i + 1) * cols, cols, slot_defs[i].initial);
  }
  SlotRows RecordSlots(float* record) const {
    SlotRows r;
    for (size_t i = 0; i < slot_defs.size(); ++i) r.data[i] = record + (i + 1) * cols;
    return r;
  }

  // Elements [begin, end) of values and slots.
  std::span<float> Values(size_t begin, size_t end) const {
    return {values.data() + begin, end - begin};
  }
  SlotRows Slots(size_t begin) const {
    SlotRows r;
    for (size_t i = 0; i < slot_defs.size(); ++i) r.data[i] = slots[i].data() + begin;
    return r;
  }

  void LockAll() const {
    for (int64_t i = 0; i < num_stripes; ++i) stripes[i].lock();
  }
  void UnlockAll() const {
    for (int64_t i = num_stripes; i-- > 0;) stripes[i].unlock();
  }
};

std::string ShardKey::ToString() const { return var + "/part_" + std::to_string(shard); }

Status ValidateShardDef(const ShardDef& d) {
  std::string name = d.key().ToString();
  if (d.var.empty()) return InvalidArgument("shard def: var must not be empty");
  if (d.shard < 0) return InvalidArgument(name + ": shard index must be >= 0");
  if (d.row_begin < 0) return InvalidArgument(name + ": row_begin must be >= 0");
  if (d.rows <= 0 || d.cols <= 0)
    return InvalidArgument(name + ": rows and cols must be > 0, got " + std::to_string(d.rows) +
                           " x " + std::to_string(d.cols));
  constexpr int64_t kMaxElements = int64_t{1} << 40;  // 4 TiB of floats: beyond any ps
  if (d.lazy) {
    if (d.full_shape.empty())
      return InvalidArgument(name + ": a lazy shard needs a variable of rank >= 1");
    if (d.rows > kMaxElements || d.cols > (int64_t{1} << 24))
      return InvalidArgument(name + ": a lazy shard has at most 2^40 rows of 2^24 columns");
  } else if (d.cols > kMaxElements / d.rows)
    return InvalidArgument(name + ": " + std::to_string(d.rows) + " x " + std::to_string(d.cols) +
                           " elements is too large");
  if (d.full_shape.empty()) {
    if (d.row_begin != 0 || d.rows != 1 || d.cols != 1)
      return InvalidArgument(name + ": a scalar variable (full_shape []) is one 1 x 1 shard");
  } else {
    int64_t cols = 1;
    for (size_t i = 0; i < d.full_shape.size(); ++i) {
      if (d.full_shape[i] <= 0)
        return InvalidArgument(name + ": full_shape[" + std::to_string(i) + "] must be > 0");
      if (i > 0) {
        if (d.full_shape[i] > kMaxElements / cols)
          return InvalidArgument(name + ": full_shape is too large");
        cols *= d.full_shape[i];
      }
    }
    if (cols != d.cols)
      return InvalidArgument(name + ": cols " + std::to_string(d.cols) +
                             " != product of full_shape[1:] = " + std::to_string(cols));
    if (d.row_begin > d.full_shape[0] - d.rows)  // row_begin + rows > full_shape[0]
      return InvalidArgument(name + ": rows [" + std::to_string(d.row_begin) + ", " +
                             std::to_string(d.row_begin + d.rows) + ") exceed full_shape[0] = " +
                             std::to_string(d.full_shape[0]));
  }
  return model::ValidateInit(d.init, name + ".init");
}

Store::Store() = default;
Store::~Store() = default;

Status Store::Configure(const OptimizerSpec& spec) {
  PS_RETURN_IF_ERROR(ValidateOptimizer(spec, "optimizer"));
  std::unique_lock lock(mu_);
  if (spec_.has_value()) {
    if (*spec_ == spec) return Status::Ok();
    return FailedPrecondition(std::string("optimizer: already configured as ") +
                              OptimizerKindName(spec_->kind) + " with other settings");
  }
  spec_ = spec;
  return Status::Ok();
}

Result<OptimizerSpec> Store::optimizer() const {
  std::shared_lock lock(mu_);
  if (!spec_) return FailedPrecondition("optimizer: not configured");
  return *spec_;
}

Status Store::Create(const ShardDef& def) {
  PS_RETURN_IF_ERROR(ValidateShardDef(def));
  const std::string name = def.key().ToString();
  OptimizerSpec spec;
  {
    std::shared_lock lock(mu_);
    if (!spec_) return FailedPrecondition(name + ": Create before the optimizer is configured");
    spec = *spec_;
    if (auto it = shards_.find(def.key()); it != shards_.end()) {
      if (it->second->def == def) return Status::Ok();
      return Status(Code::kAlreadyExists, name + ": already exists with a different definition");
    }
  }
  // Build and initialise outside the store lock: a big table must not stall other shards.
  auto shard = std::make_unique<Shard>();
  shard->def = def;
  shard->cols = static_cast<size_t>(def.cols);
  shard->slot_defs = SlotDefs(spec);
  PS_ASSERT(shard->slot_defs.size() <= kMaxSlots);
  if (def.lazy) {
    shard->num_stripes = kLazyStripes;
    shard->lazy = std::make_unique<LazyStripe[]>(static_cast<size_t>(kLazyStripes));
    shard->record_floats = (1 + shard->slot_defs.size()) * shard->cols;
  } else {
    const size_t n = static_cast<size_t>(def.rows * def.cols);
    PS_ASSIGN_OR_RETURN(shard->values, AlignedFloats::Make(n, name));
    model::FillInitial(def.init, def.seed, def.var, def.full_shape, def.row_begin, def.rows,
                       def.cols, shard->values.span());
    for (size_t i = 0; i < shard->slot_defs.size(); ++i) {
      PS_ASSIGN_OR_RETURN(shard->slots[i],
                          AlignedFloats::Make(n, name + "/" + shard->slot_defs[i].name));
      std::fill_n(shard->slots[i].data(), n, shard->slot_defs[i].initial);
    }
    shard->num_stripes = std::min(def.rows, kMaxStripes);
    shard->stripe_rows = (def.rows + shard->num_stripes - 1) / shard->num_stripes;
    shard->num_stripes = (def.rows + shard->stripe_rows - 1) / shard->stripe_rows;
  }
  shard->stripes = std::make_unique<std::mutex[]>(static_cast<size_t>(shard->num_stripes));

  std::unique_lock lock(mu_);
  if (!spec_ || !(*spec_ == spec))
    return FailedPrecondition(name + ": optimizer changed while the shard was created");
  auto [it, inserted] = shards_.try_emplace(def.key(), nullptr);
  if (!inserted) {  // created concurrently
    if (it->second->def == def) return Status::Ok();
    return Status(Code::kAlreadyExists, name + ": already exists with a different definition");
  }
  it->second = std::move(shard);
  return Status::Ok();
}

Result<Store::Shard*> Store::Find(const ShardKey& key, const char* op) const {
  auto it = shards_.find(key);
  if (it == shards_.end())
    return NotFound(std::string(op) + " " + key.ToString() + ": no such shard on this ps");
  return it->second.get();
}

Status Store::Count(Status st, bool pull, uint64_t bytes, uint64_t rows) {
  if (!st.ok()) {
    failed_requests_.fetch_add(1, std::memory_order_relaxed);
    return st;
  }
  if (pull) {
    pull_requests_.fetch_add(1, std::memory_order_relaxed);
    bytes_pulled_.fetch_add(bytes, std::memory_order_relaxed);
    rows_pulled_.fetch_add(rows, std::memory_order_relaxed);
  } else {
    push_requests_.fetch_add(1, std::memory_order_relaxed);
    bytes_pushed_.fetch_add(bytes, std::memory_order_relaxed);
    rows_pushed_.fetch_add(rows, std::memory_order_relaxed);
  }
  return st;
}

namespace {

Status CheckSize(const char* op, const ShardKey& key, const char* what, size_t got, size_t want) {
  if (got == want) return Status::Ok();
  return InvalidArgument(std::string(op) + " " + key.ToString() + ": " + what + " has " +
                         std::to_string(got) + " floats, expected " + std::to_string(want));
}

Status CheckRows(const char* op, const ShardKey& key, std::span<const int64_t> rows,
                 int64_t num_rows) {
  for (int64_t r : rows) {
    if (r < 0 || r >= num_rows)
      return OutOfRange(std::string(op) + " " + key.ToString() + ": row " + std::to_string(r) +
                        " is out of range [0, " + std::to_string(num_rows) + ")");
  }
  return Status::Ok();
}

// A lazy pull's or push's rows grouped by stripe (a counting sort), so each stripe's lock
// is taken once per request: the rows of stripe k are order[begin[k] .. begin[k + 1]).
// One per thread (thread_local), so the buffers are reused.
struct StripeGroups {
  std::vector<uint64_t> hashes;  // [i] HashRow(rows[i])
  std::vector<uint32_t> order;
  std::array<uint32_t, kLazyStripes + 1> begin{};

  void Build(std::span<const int64_t> rows) {
    const size_t n = rows.size();
    hashes.resize(n);
    order.resize(n);
    begin.fill(0);
    for (size_t i = 0; i < n; ++i) {
      hashes[i] = HashRow(rows[i]);
      ++begin[Store::Shard::LazyStripeOf(hashes[i]) + 1];
    }
    for (size_t k = 0; k < kLazyStripes; ++k) begin[k + 1] += begin[k];
    auto next = begin;
    for (size_t i = 0; i < n; ++i) order[next[Store::Shard::LazyStripeOf(hashes[i])]++] = static_cast<uint32_t>(i);
  }
};

Status LazyWhole(const char* op, const ShardKey& key) {
  return InvalidArgument(std::string(op) + " " + key.ToString() +
                         ": a lazy shard is pulled and pushed by rows only");
}

Status CheckUnique(const char* op, const ShardKey& key, std::span<const int64_t> rows) {
  bool ascending = true;
  for (size_t i = 1; i < rows.size() && ascending; ++i) ascending = rows[i - 1] < rows[i];
  if (ascending) return Status::Ok();
  std::vector<int64_t> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end());
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup == sorted.end()) return Status::Ok();
  return InvalidArgument(std::string(op) + " " + key.ToString() + ": row " +
                         std::to_string(*dup) + " appears more than once");
}

}  // namespace

Status Store::Pull(const ShardKey& key, std::span<float> out) {
  uint64_t pulled_rows = 0;
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Pull"));
    if (s->lazy) return LazyWhole("Pull", key);
    PS_RETURN_IF_ERROR(CheckSize("Pull", key, "output", out.size(), s->values.size()));
    const int64_t rows = s->def.rows;
    for (int64_t k = 0; k < s->num_stripes; ++k) {
      size_t begin = static_cast<size_t>(k * s->stripe_rows) * s->cols;
      size_t end = static_cast<size_t>(std::min(rows, (k + 1) * s->stripe_rows)) * s->cols;
      std::lock_guard g(s->stripes[k]);
      std::memcpy(out.data() + begin, s->values.data() + begin, (end - begin) * sizeof(float));
    }
    pulled_rows = static_cast<uint64_t>(rows);
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), true, out.size() * sizeof(float), pulled_rows);
}

Status Store::PullRows(const ShardKey& key, std::span<const int64_t> rows, std::span<float> out) {
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "PullRows"));
    PS_RETURN_IF_ERROR(CheckSize("PullRows", key, "output", out.size(), rows.size() * s->cols));
    PS_RETURN_IF_ERROR(CheckRows("PullRows", key, rows, s->def.rows));
    const size_t cols = s->cols;
    if (s->lazy) {
      // Rows not created yet get their initial values outside the locks.
      thread_local StripeGroups groups;
      thread_local std::vector<uint32_t> missing;
      groups.Build(rows);
      missing.clear();
      for (size_t k = 0; k < kLazyStripes; ++k) {
        if (groups.begin[k] == groups.begin[k + 1]) continue;
        std::lock_guard g(s->stripes[k]);
        for (uint32_t j = groups.begin[k]; j < groups.begin[k + 1]; ++j) {
          const uint32_t i = groups.order[j];
          if (const float* record = s->lazy[k].Find(rows[i], groups.hashes[i])) {
            std::memcpy(out.data() + i * cols, record, cols * sizeof(float));
          } else {
            missing.push_back(i);
          }
        }
      }
      for (uint32_t i : missing) {
        model::FillInitial(s->def.init, s->def.seed, s->def.var, s->def.full_shape, s->def.row_begin + rows[i], 1,
                           s->def.cols, out.subspan(i * cols, cols));
      }
      return Status::Ok();
    }
    std::mutex* held = nullptr;
    for (size_t i = 0; i < rows.size(); ++i) {
      std::mutex* m = &s->StripeOf(rows[i]);
      if (m != held) {
        if (held) held->unlock();
        m->lock();
        held = m;
      }
      std::memcpy(out.data() + i * cols, s->values.data() + static_cast<size_t>(rows[i]) * cols,
                  cols * sizeof(float));
    }
    if (held) held->unlock();
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), true, out.size() * sizeof(float), rows.size());
}

void Store::ApplyDense(Shard& s, std::span<const float> grad, int64_t global_step) {
  const OptimizerSpec& spec = *spec_;
  const float lr = static_cast<float>(LearningRate(spec, global_step));
  const int64_t rows = s.def.rows;
  for (int64_t k = 0; k < s.num_stripes; ++k) {
    size_t begin = static_cast<size_t>(k * s.stripe_rows) * s.cols;
    size_t end = static_cast<size_t>(std::min(rows, (k + 1) * s.stripe_rows)) * s.cols;
    std::lock_guard g(s.stripes[k]);
    ApplyRows(spec, lr, global_step, s.Values(begin, end), s.Slots(begin),
              grad.subspan(begin, end - begin));
  }
}

void Store::ApplySparse(Shard& s, std::span<const int64_t> rows, std::span<const float> grad_rows,
                        int64_t global_step) {
  const OptimizerSpec& spec = *spec_;
  const float lr = static_cast<float>(LearningRate(spec, global_step));
  const size_t cols = s.cols;
  std::mutex* held = nullptr;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::mutex* m = &s.StripeOf(rows[i]);
    if (m != held) {
      if (held) held->unlock();
      m->lock();
      held = m;
    }
    size_t begin = static_cast<size_t>(rows[i]) * cols;
    ApplyRows(spec, lr, global_step, s.Values(begin, begin + cols), s.Slots(begin),
              grad_rows.subspan(i * cols, cols));
  }
  if (held) held->unlock();
}

Status Store::ApplyLazy(Shard& s, std::span<const int64_t> rows, std::span<const float> grad_rows,
                       int64_t global_step) {
  const OptimizerSpec& spec = *spec_;
  const float lr = static_cast<float>(LearningRate(spec, global_step));
  const size_t cols = s.cols;
  thread_local StripeGroups groups;
  groups.Build(rows);
  for (size_t k = 0; k < kLazyStripes; ++k) {
    if (groups.begin[k] == groups.begin[k + 1]) continue;
    std::lock_guard g(s.stripes[k]);
    for (uint32_t j = groups.begin[k]; j < groups.begin[k + 1]; ++j) {
      const uint32_t i = groups.order[j];
      float* record = s.lazy[k].Find(rows[i], groups.hashes[i]);
      if (record == nullptr) {
        record = s.lazy[k].Insert(rows[i], groups.hashes[i], s.record_floats);
        if (record == nullptr)
          return Internal("PushRows " + s.def.key().ToString() + ": out of memory creating row " +
                          std::to_string(rows[i]));
        s.InitRecord(rows[i], record);
      }
      ApplyRows(spec, lr, global_step, {record, cols}, s.RecordSlots(record), grad_rows.subspan(i * cols, cols));
    }
  }
  return Status::Ok();
}

Status Store::Push(const ShardKey& key, std::span<const float> grad, int64_t global_step) {
  uint64_t pushed_rows = 0;
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Push"));
    if (s->lazy) return LazyWhole("Push", key);
    PS_RETURN_IF_ERROR(CheckSize("Push", key, "gradient", grad.size(), s->values.size()));
    ApplyDense(*s, grad, global_step);
    pushed_rows = static_cast<uint64_t>(s->def.rows);
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), false, grad.size() * sizeof(float), pushed_rows);
}

Status Store::PushRows(const ShardKey& key, std::span<const int64_t> rows,
                       std::span<const float> grad_rows, int64_t global_step) {
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "PushRows"));
    PS_RETURN_IF_ERROR(
        CheckSize("PushRows", key, "gradient", grad_rows.size(), rows.size() * s->cols));
    PS_RETURN_IF_ERROR(CheckRows("PushRows", key, rows, s->def.rows));
    PS_RETURN_IF_ERROR(CheckUnique("PushRows", key, rows));
    if (s->lazy) return ApplyLazy(*s, rows, grad_rows, global_step);
    ApplySparse(*s, rows, grad_rows, global_step);
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), false, grad_rows.size() * sizeof(float), rows.size());
}

bool Store::Contains(const ShardKey& key) const {
  std::shared_lock lock(mu_);
  return shards_.contains(key);
}

Result<ShardDef> Store::GetDef(const ShardKey& key) const {
  std::shared_lock lock(mu_);
  PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "GetDef"));
  return s->def;
}

Result<ShardMemory> Store::Memory(const ShardKey& key) const {
  std::shared_lock lock(mu_);
  PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Memory"));
  ShardMemory m;
  if (!s->lazy) {
    m.rows = s->def.rows;
    m.bytes = (1 + s->slot_defs.size()) * s->values.size() * sizeof(float);
    return m;
  }
  for (int64_t k = 0; k < s->num_stripes; ++k) {
    std::lock_guard g(s->stripes[k]);
    m.rows += static_cast<int64_t>(s->lazy[k].count());
    m.bytes += s->lazy[k].bytes();
  }
  return m;
}

std::vector<ShardKey> Store::Keys() const {
  std::shared_lock lock(mu_);
  std::vector<ShardKey> keys;
  keys.reserve(shards_.size());
  for (const auto& [k, _] : shards_) keys.push_back(k);
  return keys;
}

namespace {

void CallWithView(const auto& s, const std::function<void(const ShardView&)>& fn) {
  ShardView view{s.def, s.values.span(), {}, {}, {}};
  for (size_t i = 0; i < s.slot_defs.size(); ++i)
    view.slots.emplace_back(s.slot_defs[i].name, s.slots[i].span());
  s.LockAll();
  if (!s.lazy) {
    fn(view);
    s.UnlockAll();
    return;
  }
  std::vector<std::pair<int64_t, const float*>> created;
  size_t n = 0;
  for (int64_t k = 0; k < s.num_stripes; ++k) n += s.lazy[k].count();
  created.reserve(n);
  for (int64_t k = 0; k < s.num_stripes; ++k)
    s.lazy[k].ForEach([&](int64_t row, const float* record) { created.emplace_back(row, record); });
  std::sort(created.begin(), created.end());
  std::vector<int64_t> ids(created.size());
  for (size_t i = 0; i < created.size(); ++i) ids[i] = created[i].first;
  view.row_ids = ids;
  const size_t cols = s.cols;
  view.row = [&created, cols](size_t i, size_t block) {
    return std::span<const float>(created[i].second + block * cols, cols);
  };
  fn(view);
  s.UnlockAll();
}

}  // namespace

Status Store::Read(const ShardKey& key, const std::function<void(const ShardView&)>& fn) const {
  std::shared_lock lock(mu_);
  PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Read"));
  CallWithView(*s, fn);
  return Status::Ok();
}

void Store::ForEachShard(const std::function<void(const ShardView&)>& fn) const {
  for (const ShardKey& key : Keys()) {
    // A shard is never removed, so a key listed by Keys() is found.
    Status st = Read(key, fn);
    PS_ASSERT(st.ok());
  }
}

Status Store::Restore(const ShardKey& key, std::span<const float> values,
                      std::span<const NamedSlot> slots) {
  std::shared_lock lock(mu_);
  PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Restore"));
  if (s->lazy)
    return InvalidArgument("Restore " + key.ToString() + ": a lazy shard is restored with Fill");
  const size_t n = s->values.size();
  PS_RETURN_IF_ERROR(CheckSize("Restore", key, "values", values.size(), n));
  std::array<const NamedSlot*, kMaxSlots> given{};
  for (const NamedSlot& slot : slots) {
    size_t i = 0;
    while (i < s->slot_defs.size() && s->slot_defs[i].name != slot.name) ++i;
    if (i == s->slot_defs.size())
      return InvalidArgument("Restore " + key.ToString() + ": slot \"" + slot.name +
                             "\" does not belong to optimizer " + OptimizerKindName(spec_->kind));
    if (given[i] != nullptr)
      return InvalidArgument("Restore " + key.ToString() + ": slot \"" + slot.name +
                             "\" given twice");
    PS_RETURN_IF_ERROR(CheckSize("Restore", key, ("slot " + slot.name).c_str(),
                                 slot.values.size(), n));
    given[i] = &slot;
  }
  s->LockAll();
  std::memcpy(s->values.data(), values.data(), n * sizeof(float));
  for (size_t i = 0; i < s->slot_defs.size(); ++i) {
    if (given[i] != nullptr) {
      std::memcpy(s->slots[i].data(), given[i]->values.data(), n * sizeof(float));
    } else {
      std::fill_n(s->slots[i].data(), n, s->slot_defs[i].initial);
    }
  }
  s->UnlockAll();
  return Status::Ok();
}

Store::ShardFill::ShardFill(std::shared_lock<std::shared_mutex> lock, Shard* shard)
    : lock_(std::move(lock)), shard_(shard) {
  shard_->LockAll();
}

Store::ShardFill::~ShardFill() {
  if (shard_->lazy) {  // CreateRows initialised every slot
    shard_->UnlockAll();
    return;
  }
  const size_t n = shard_->values.size();
  for (size_t i = 0; i < shard_->slot_defs.size(); ++i) {
    if (!written_[i]) std::fill_n(shard_->slots[i].data(), n, shard_->slot_defs[i].initial);
  }
  shard_->UnlockAll();
}

const ShardDef& Store::ShardFill::def() const { return shard_->def; }

std::span<float> Store::ShardFill::values() { return {shard_->values.data(), shard_->values.size()}; }

Result<std::span<float>> Store::ShardFill::Slot(std::string_view name) {
  if (shard_->lazy)
    return InvalidArgument("Restore " + shard_->def.key().ToString() + ": a lazy shard has no slot arrays");
  for (size_t i = 0; i < shard_->slot_defs.size(); ++i) {
    if (shard_->slot_defs[i].name == name) {
      written_[i] = true;
      return std::span<float>(shard_->slots[i].data(), shard_->values.size());
    }
  }
  return InvalidArgument("Restore " + shard_->def.key().ToString() + ": slot \"" + std::string(name) +
                         "\" does not belong to this ps's optimizer");
}

Status Store::ShardFill::CreateRows(std::span<const int64_t> rows) {
  const Shard& s = *shard_;
  const ShardKey key = s.def.key();
  if (!s.lazy) return InvalidArgument("Restore " + key.ToString() + ": not a lazy shard");
  PS_RETURN_IF_ERROR(CheckRows("Restore", key, rows, s.def.rows));
  PS_RETURN_IF_ERROR(CheckUnique("Restore", key, rows));
  created_.clear();
  for (int64_t k = 0; k < s.num_stripes; ++k) s.lazy[k].Clear();
  created_.reserve(rows.size());
  for (int64_t row : rows) {
    const uint64_t h = HashRow(row);
    float* record = s.lazy[Shard::LazyStripeOf(h)].Insert(row, h, s.record_floats);
    if (record == nullptr)
      return Internal("Restore " + key.ToString() + ": out of memory creating " +
                      std::to_string(rows.size()) + " rows");
    s.InitRecord(row, record);
    created_.push_back(record);
  }
  return Status::Ok();
}

Status Store::ShardFill::WriteRows(std::string_view block, int64_t first, std::span<const float> data) {
  const Shard& s = *shard_;
  const std::string name = s.def.key().ToString();
  if (!s.lazy) return InvalidArgument("Restore " + name + ": not a lazy shard");
  size_t b = 0;
  if (block != "values") {
    while (b < s.slot_defs.size() && s.slot_defs[b].name != block) ++b;
    if (b == s.slot_defs.size())
      return InvalidArgument("Restore " + name + ": slot \"" + std::string(block) +
                             "\" does not belong to this ps's optimizer");
    ++b;
  }
  const size_t cols = s.cols;
  const auto n = static_cast<int64_t>(data.size() / cols);
  if (data.size() % cols != 0 || first < 0 || first > static_cast<int64_t>(created_.size()) - n)
    return OutOfRange("Restore " + name + ": rows [" + std::to_string(first) + ", +" + std::to_string(n) +
                      ") outside the " + std::to_string(created_.size()) + " created rows");
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(created_[static_cast<size_t>(first + i)] + b * cols, data.data() + i * cols,
                cols * sizeof(float));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Store::ShardFill>> Store::Fill(const ShardKey& key) {
  std::shared_lock lock(mu_);
  PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Restore"));
  return std::unique_ptr<ShardFill>(new ShardFill(std::move(lock), s));
}

StoreStats Store::stats() const {
  StoreStats st;
  st.pull_requests = pull_requests_.load(std::memory_order_relaxed);
  st.push_requests = push_requests_.load(std::memory_order_relaxed);
  st.failed_requests = failed_requests_.load(std::memory_order_relaxed);
  st.bytes_pulled = bytes_pulled_.load(std::memory_order_relaxed);
  st.bytes_pushed = bytes_pushed_.load(std::memory_order_relaxed);
  st.rows_pulled = rows_pulled_.load(std::memory_order_relaxed);
  st.rows_pushed = rows_pushed_.load(std::memory_order_relaxed);
  return st;
}

}  // namespace ps::server

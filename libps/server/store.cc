// The row store (store.h): shard creation, pulls, pushes and the optimizer apply, inspection.
#include "libps/server/store.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "libps/server/store_shard.h"

namespace ps::server {

namespace {
constexpr int64_t kMaxStripes = kLazyStripes;  // of a dense shard (lazy_rows.h)
}  // namespace

std::string ShardKey::ToString() const { return var + "/part_" + std::to_string(shard); }

Status ValidateShardDef(const ShardDef& d) {
  PS_RETURN_IF_ERROR(cluster::ValidateShardLayout(d.layout));
  PS_RETURN_IF_ERROR(model::ValidateRowPolicy(d.row_policy, d.layout.Name()));
  if (d.row_policy.any() && !d.layout.lazy) {
    return InvalidArgument(d.layout.Name() + ": admission and eviction apply to lazy shards only");
  }
  return model::ValidateInit(d.init, d.layout.Name() + ".init");
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
  shard->cols = static_cast<size_t>(def.layout.cols);
  shard->slot_defs = SlotDefs(spec);
  PS_ASSERT(shard->slot_defs.size() <= kMaxSlots);
  if (def.layout.lazy) {
    shard->num_stripes = kLazyStripes;
    shard->lazy = std::make_unique<LazyStripe[]>(static_cast<size_t>(kLazyStripes));
    shard->record_floats = (1 + shard->slot_defs.size()) * shard->cols;
    const model::RowPolicy& p = def.row_policy;
    if (p.evicts()) {
      shard->stamped = true;
      shard->record_floats += 1;
      if (p.max_rows > 0)
        shard->max_rows = (p.max_rows + def.layout.num_shards - 1) / def.layout.num_shards;
    }
    if (p.admits())
      shard->sketch = std::make_unique<AdmitSketch[]>(static_cast<size_t>(kLazyStripes));
    shard->arena = std::make_unique<RecordArena>(shard->record_floats, lazy_chunk_limit_);
  } else {
    const size_t n = static_cast<size_t>(def.layout.rows * def.layout.cols);
    PS_ASSIGN_OR_RETURN(shard->values, AlignedFloats::Make(n, name));
    const cluster::ShardLayout& l = def.layout;
    model::FillInitial(def.init, def.seed, l.var, l.full_shape, l.row_begin, l.rows, l.cols,
                       shard->values.span());
    for (size_t i = 0; i < shard->slot_defs.size(); ++i) {
      PS_ASSIGN_OR_RETURN(shard->slots[i],
                          AlignedFloats::Make(n, name + "/" + shard->slot_defs[i].name));
      std::fill_n(shard->slots[i].data(), n, shard->slot_defs[i].initial);
    }
    shard->row_epochs =
        std::make_unique<uint32_t[]>(static_cast<size_t>(def.layout.rows));  // zeroed: unchanged
    shard->num_stripes = std::min(def.layout.rows, kMaxStripes);
    shard->stripe_rows = (def.layout.rows + shard->num_stripes - 1) / shard->num_stripes;
    shard->num_stripes = (def.layout.rows + shard->stripe_rows - 1) / shard->stripe_rows;
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

Status Store::Count(Status st, bool pull, uint64_t bytes, uint64_t rows, bool request) {
  if (!st.ok()) {
    failed_requests_.fetch_add(1, std::memory_order_relaxed);
    return st;
  }
  if (!request) {
    (pull ? bytes_pulled_ : bytes_pushed_).fetch_add(bytes, std::memory_order_relaxed);
    (pull ? rows_pulled_ : rows_pushed_).fetch_add(rows, std::memory_order_relaxed);
  } else if (pull) {
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

Status CheckUnique(const char* op, const ShardKey& key, std::span<const int64_t> rows) {
  bool ascending = true;
  for (size_t i = 1; i < rows.size() && ascending; ++i) ascending = rows[i - 1] < rows[i];
  if (ascending) return Status::Ok();
  std::vector<int64_t> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end());
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup == sorted.end()) return Status::Ok();
  return InvalidArgument(std::string(op) + " " + key.ToString() + ": row " + std::to_string(*dup) +
                         " appears more than once");
}

Status LazyWhole(const char* op, const ShardKey& key) {
  return InvalidArgument(std::string(op) + " " + key.ToString() +
                         ": a lazy shard is pulled and pushed by rows only");
}

Status Store::Pull(const ShardKey& key, std::span<float> out,
                   const std::function<void(size_t)>& copied) {
  uint64_t pulled_rows = 0;
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Pull"));
    if (s->lazy) return LazyWhole("Pull", key);
    PS_RETURN_IF_ERROR(CheckSize("Pull", key, "output", out.size(), s->values.size()));
    const int64_t rows = s->layout().rows;
    for (int64_t k = 0; k < s->num_stripes; ++k) {
      size_t begin = static_cast<size_t>(k * s->stripe_rows) * s->cols;
      size_t end = static_cast<size_t>(std::min(rows, (k + 1) * s->stripe_rows)) * s->cols;
      {
        std::lock_guard g(s->stripes[k]);
        std::memcpy(out.data() + begin, s->values.data() + begin, (end - begin) * sizeof(float));
      }
      if (copied) copied(end);
    }
    pulled_rows = static_cast<uint64_t>(rows);
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), true, out.size() * sizeof(float), pulled_rows);
}

Status Store::PullBorrowed(const ShardKey& key,
                           const std::function<void(std::span<const float>)>& fn) {
  uint64_t bytes = 0, pulled_rows = 0;
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Pull"));
    if (s->lazy) return LazyWhole("Pull", key);
    // Every stripe at once: fn may use the values for as long as it runs (Pull copies a
    // stripe at a time instead). Released even if fn throws (std::bad_alloc).
    s->LockAll();
    struct Unlock {
      const Shard& s;
      ~Unlock() { s.UnlockAll(); }
    } unlock{*s};
    fn(s->values.span());
    bytes = s->values.size() * sizeof(float);
    pulled_rows = static_cast<uint64_t>(s->layout().rows);
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), true, bytes, pulled_rows);
}

Status Store::PullRows(const ShardKey& key, std::span<const int64_t> rows, std::span<float> out) {
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "PullRows"));
    PS_RETURN_IF_ERROR(CheckSize("PullRows", key, "output", out.size(), rows.size() * s->cols));
    PS_RETURN_IF_ERROR(CheckRows("PullRows", key, rows, s->layout().rows));
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
        s->lazy[k].FindEach(
            rows, groups, groups.begin[k], groups.begin[k + 1], *s->arena, cols * sizeof(float),
            false, [](uint32_t) { return false; },
            [&](uint32_t j, const LazyStripe::Entry*, const float* record, bool) {
              const uint32_t i = groups.order[j];
              if (record != nullptr) {
                std::memcpy(out.data() + i * cols, record, cols * sizeof(float));
              } else {
                missing.push_back(i);
              }
            });
      }
      for (uint32_t i : missing) {
        const cluster::ShardLayout& l = s->layout();
        model::FillInitial(s->def.init, s->def.seed, l.var, l.full_shape, l.row_begin + rows[i], 1,
                           l.cols, out.subspan(i * cols, cols));
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
      if (i + kPrefetchRows < rows.size())
        PrefetchBytes(s->values.data() + static_cast<size_t>(rows[i + kPrefetchRows]) * cols,
                      cols * sizeof(float), false);
      std::memcpy(out.data() + i * cols, s->values.data() + static_cast<size_t>(rows[i]) * cols,
                  cols * sizeof(float));
    }
    if (held) held->unlock();
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), true, out.size() * sizeof(float), rows.size());
}

void Store::ApplyDense(Shard& s, int64_t row_begin, std::span<const float> grad,
                       int64_t global_step) {
  const OptimizerSpec& spec = *spec_;
  const float lr = static_cast<float>(LearningRate(spec, global_step));
  const int64_t row_end = row_begin + static_cast<int64_t>(grad.size() / s.cols);
  for (int64_t k = row_begin / s.stripe_rows; k < s.num_stripes && k * s.stripe_rows < row_end;
       ++k) {
    const int64_t first = std::max(row_begin, k * s.stripe_rows);
    const int64_t last = std::min(row_end, (k + 1) * s.stripe_rows);
    const size_t begin = static_cast<size_t>(first) * s.cols;
    const size_t end = static_cast<size_t>(last) * s.cols;
    const uint32_t epoch = this->epoch();
    std::lock_guard g(s.stripes[k]);
    ApplyRows(spec, lr, global_step, s.Values(begin, end), s.Slots(begin),
              grad.subspan(begin - static_cast<size_t>(row_begin) * s.cols, end - begin));
    std::fill(s.row_epochs.get() + first, s.row_epochs.get() + last, epoch);
  }
}

void Store::ApplySparse(Shard& s, std::span<const int64_t> rows, std::span<const float> grad_rows,
                        int64_t global_step) {
  const OptimizerSpec& spec = *spec_;
  const float lr = static_cast<float>(LearningRate(spec, global_step));
  const size_t cols = s.cols;
  const uint32_t epoch = this->epoch();
  std::mutex* held = nullptr;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::mutex* m = &s.StripeOf(rows[i]);
    if (m != held) {
      if (held) held->unlock();
      m->lock();
      held = m;
    }
    if (i + kPrefetchRows < rows.size()) {
      const auto row = static_cast<size_t>(rows[i + kPrefetchRows]);
      const size_t ahead = row * cols;
      PrefetchBytes(s.values.data() + ahead, cols * sizeof(float), true);
      for (size_t b = 0; b < s.slot_defs.size(); ++b)
        PrefetchBytes(s.slots[b].data() + ahead, cols * sizeof(float), true);
      // The epoch too: x86 commits stores in order, so one store waiting for its line
      // holds every later store (the next rows' updates) in the store buffer.
      __builtin_prefetch(s.row_epochs.get() + row, 1);
    }
    size_t begin = static_cast<size_t>(rows[i]) * cols;
    ApplyRows(spec, lr, global_step, s.Values(begin, begin + cols), s.Slots(begin),
              grad_rows.subspan(i * cols, cols));
    s.row_epochs[static_cast<size_t>(rows[i])] = epoch;
  }
  if (held) held->unlock();
}

Status Store::ApplyLazy(Shard& s, std::span<const int64_t> rows, std::span<const float> grad_rows,
                        int64_t global_step, int64_t stamp) {
  const OptimizerSpec& spec = *spec_;
  const float lr = static_cast<float>(LearningRate(spec, global_step));
  const size_t cols = s.cols;
  thread_local StripeGroups groups;
  groups.Build(rows);
  int64_t failed_row = -1;  // the row whose creation failed
  const auto admit = static_cast<uint32_t>(s.def.row_policy.admit_min_count);
  const uint32_t epoch = this->epoch();
  uint64_t dropped = 0, created = 0;
  for (size_t k = 0; k < kLazyStripes; ++k) {
    if (groups.begin[k] == groups.begin[k + 1]) continue;
    std::lock_guard g(s.stripes[k]);
    LazyStripe& stripe = s.lazy[k];
    // Admission is decided in FindEach's first pass, so its table grows once to hold
    // exactly the rows admitted.
    const auto create = [&](uint32_t j) {
      if (!s.sketch) return true;
      const uint64_t hash = groups.hashes[groups.order[j]];
      if (s.sketch[k].Add(hash) < admit) {
        ++dropped;
        return false;
      }
      s.sketch[k].Remove(hash, admit);
      return true;
    };
    const uint32_t end =
        stripe.FindEach(rows, groups, groups.begin[k], groups.begin[k + 1], *s.arena,
                        s.record_floats * sizeof(float), true, create,
                        [&](uint32_t j, LazyStripe::Entry* entry, float* record, bool create_it) {
                          const uint32_t i = groups.order[j];
                          if (entry == nullptr) {
                            if (!create_it || failed_row >= 0) return;
                            entry = s.CreateRow(stripe, rows[i], groups.hashes[i]);
                            if (entry == nullptr) {
                              failed_row = rows[i];
                              return;
                            }
                            record = s.arena->At(entry->ref);
                            ++created;
                          }
                          ApplyRows(spec, lr, global_step, {record, cols}, s.RecordSlots(record),
                                    grad_rows.subspan(i * cols, cols));
                          if (s.stamped) s.SetStamp(record, stamp);
                          // Stored only when it changes: a row pushed again within an epoch (a hot id) then
                          // leaves its entry's cache line clean, with no write-back to memory.
                          if (entry->epoch != epoch) entry->epoch = epoch;
                        });
    if (end < groups.begin[k + 1] && failed_row < 0) failed_row = rows[groups.order[end]];
    if (failed_row >= 0) break;
  }
  s.live.fetch_add(static_cast<int64_t>(created), std::memory_order_relaxed);
  // With admission every row created was admitted; rows admitted whose creation then
  // failed (out of memory, shard full) are not counted.
  if (s.sketch && created > 0) rows_admitted_.fetch_add(created, std::memory_order_relaxed);
  if (dropped > 0) rows_not_admitted_.fetch_add(dropped, std::memory_order_relaxed);
  if (failed_row >= 0)
    return Internal("PushRows " + s.def.key().ToString() + ": " + s.CreateFailure(failed_row));
  return Status::Ok();
}

Status Store::Push(const ShardKey& key, std::span<const float> grad, int64_t global_step) {
  return PushDense(key, std::nullopt, grad, global_step, true);
}

Status Store::PushPart(const ShardKey& key, int64_t row_begin, std::span<const float> grad,
                       int64_t global_step, bool first) {
  return PushDense(key, row_begin, grad, global_step, first);
}

Status Store::PushDense(const ShardKey& key, std::optional<int64_t> part_begin,
                        std::span<const float> grad, int64_t global_step, bool count_request) {
  uint64_t pushed_rows = 0;
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Push"));
    if (s->lazy) return LazyWhole("Push", key);
    const int64_t rows = s->layout().rows;
    const int64_t begin = part_begin.value_or(0);
    if (!part_begin) {
      PS_RETURN_IF_ERROR(CheckSize("Push", key, "gradient", grad.size(), s->values.size()));
    } else if (begin < 0 || begin > rows || grad.size() % s->cols != 0 ||
               static_cast<int64_t>(grad.size() / s->cols) > rows - begin) {
      return InvalidArgument("Push " + key.ToString() + ": " + std::to_string(grad.size()) +
                             " floats from row " + std::to_string(begin) +
                             " are not whole rows within its " + std::to_string(rows) +
                             " rows of " + std::to_string(s->cols));
    }
    ApplyDense(*s, begin, grad, global_step);
    pushed_rows = grad.size() / s->cols;
    return Status::Ok();
  };
  Status st = run();
  return Count(std::move(st), false, grad.size() * sizeof(float), pushed_rows, count_request);
}

Status Store::PushRows(const ShardKey& key, std::span<const int64_t> rows,
                       std::span<const float> grad_rows, int64_t global_step) {
  auto run = [&]() -> Status {
    std::shared_lock lock(mu_);
    PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "PushRows"));
    PS_RETURN_IF_ERROR(
        CheckSize("PushRows", key, "gradient", grad_rows.size(), rows.size() * s->cols));
    PS_RETURN_IF_ERROR(CheckRows("PushRows", key, rows, s->layout().rows));
    PS_RETURN_IF_ERROR(CheckUnique("PushRows", key, rows));
    if (s->lazy) {
      if (!s->stamped) return ApplyLazy(*s, rows, grad_rows, global_step, 0);
      int64_t clock = row_clock_.load(std::memory_order_relaxed);
      while (global_step > clock && !row_clock_.compare_exchange_weak(clock, global_step)) {}
      // Rows are stamped with the row clock, not the push's own step: a retried or late
      // push of an old step still marks its rows as pushed now.
      PS_RETURN_IF_ERROR(ApplyLazy(*s, rows, grad_rows, global_step, std::max(clock, global_step)));
      MaybeSweep(*s);
      return Status::Ok();
    }
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
    m.rows = s->layout().rows;
    m.bytes = (1 + s->slot_defs.size()) * s->values.size() * sizeof(float) +
              static_cast<uint64_t>(s->layout().rows) * sizeof(uint32_t);  // + the change epochs
    return m;
  }
  for (int64_t k = 0; k < s->num_stripes; ++k) {
    std::lock_guard g(s->stripes[k]);
    m.rows += static_cast<int64_t>(s->lazy[k].count());
    m.bytes += s->lazy[k].bytes();
  }
  m.bytes += s->arena->bytes();
  if (s->sketch) m.bytes += static_cast<uint64_t>(s->num_stripes) * AdmitSketch::bytes();
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
  ShardView view{s.def, s.values.span(), {}, {}, {}, {}, {}, {}};
  for (size_t i = 0; i < s.slot_defs.size(); ++i)
    view.slots.emplace_back(s.slot_defs[i].name, s.slots[i].span());
  s.LockAll();
  if (!s.lazy) {
    view.row_epochs = {s.row_epochs.get(), static_cast<size_t>(s.def.layout.rows)};
    fn(view);
    s.UnlockAll();
    return;
  }
  struct Created {
    int64_t row;
    const float* record;
    uint32_t epoch;
  };
  std::vector<Created> created;
  size_t n = 0;
  for (int64_t k = 0; k < s.num_stripes; ++k) n += s.lazy[k].count();
  created.reserve(n);
  for (int64_t k = 0; k < s.num_stripes; ++k) {
    s.lazy[k].ForEach(*s.arena, [&](int64_t row, const float* record, uint32_t epoch) {
      created.push_back({row, record, epoch});
    });
  }
  std::sort(created.begin(), created.end(),
            [](const Created& a, const Created& b) { return a.row < b.row; });
  std::vector<int64_t> ids(created.size());
  for (size_t i = 0; i < created.size(); ++i) ids[i] = created[i].row;
  view.row_ids = ids;
  const size_t cols = s.cols;
  view.row = [&created, cols](size_t i, size_t block) {
    return std::span<const float>(created[i].record + block * cols, cols);
  };
  view.row_epoch = [&created](size_t i) { return created[i].epoch; };
  view.evicted = s.evicted;
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

StoreStats Store::stats() const {
  StoreStats st;
  st.pull_requests = pull_requests_.load(std::memory_order_relaxed);
  st.push_requests = push_requests_.load(std::memory_order_relaxed);
  st.failed_requests = failed_requests_.load(std::memory_order_relaxed);
  st.bytes_pulled = bytes_pulled_.load(std::memory_order_relaxed);
  st.bytes_pushed = bytes_pushed_.load(std::memory_order_relaxed);
  st.rows_pulled = rows_pulled_.load(std::memory_order_relaxed);
  st.rows_pushed = rows_pushed_.load(std::memory_order_relaxed);
  st.rows_admitted = rows_admitted_.load(std::memory_order_relaxed);
  st.rows_not_admitted = rows_not_admitted_.load(std::memory_order_relaxed);
  st.rows_evicted_ttl = evicted_ttl_.load(std::memory_order_relaxed);
  st.rows_evicted_max_rows = evicted_max_rows_.load(std::memory_order_relaxed);
  std::shared_lock lock(mu_);
  for (const auto& [key, shard] : shards_) {
    if (!shard->lazy) continue;
    ++st.lazy_shards;
    st.live_rows += shard->live.load(std::memory_order_relaxed);
  }
  return st;
}

}  // namespace ps::server

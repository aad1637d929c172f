// Store::Shard, the memory of one shard, and the request checks the store's files share.
// Private to libps/server (store.cc, store_fill.cc).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "libps/server/lazy_rows.h"
#include "libps/server/store.h"

namespace ps::server {

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
  std::unique_ptr<RecordArena> arena;  // lazy: the records of every stripe
  size_t record_floats = 0;  // lazy: (1 + slots) * cols, + 1 when stamped (the last float)
  // Lazy, admission and eviction (store.h): per stripe when def.rows admits (stripes[k]
  // guards sketch[k]); records carry their last push step after the slots when the
  // policy evicts (`stamped`).
  std::unique_ptr<AdmitSketch[]> sketch;
  bool stamped = false;
  int64_t max_rows = 0;          // per shard: ceil(def.rows.max_rows / num_shards); 0 none
  std::atomic<int64_t> live{0};  // lazy: created rows now
  std::atomic<int64_t> next_ttl_sweep{0};
  std::mutex sweep_mu;                         // held by the one thread sweeping this shard
  std::atomic<bool> sweep_handed_over{false};  // a sweep waits for the store's sweep runner

  // Change tracking for delta checkpoints (store.h, "Change epochs"). Dense: the epoch
  // of each row's last push ([rows], under its stripe lock). Lazy: the epoch is in the
  // row's table entry (LazyStripe::Entry), and `evicted` lists (row, epoch) of evictions
  // (appended under sweep_mu and the row's stripe lock; read under every stripe lock).
  std::unique_ptr<uint32_t[]> row_epochs;
  std::vector<std::pair<int64_t, uint32_t>> evicted;

  // The step a stamped record was last pushed at (saturated to [0, 2^32 - 1]).
  uint32_t Stamp(const float* record) const {
    uint32_t v;
    std::memcpy(&v, record + (record_floats - 1), sizeof(v));
    return v;
  }
  void SetStamp(float* record, int64_t step) const {
    const auto v = static_cast<uint32_t>(std::clamp<int64_t>(step, 0, UINT32_MAX));
    std::memcpy(record + (record_floats - 1), &v, sizeof(v));
  }

  const cluster::ShardLayout& layout() const { return def.layout; }
  std::mutex& StripeOf(int64_t row) const { return stripes[row / stripe_rows]; }

  // Lazy: creates `row` (absent) in `stripe` (lazy[k] for the row's stripe k, whose lock
  // is held) with its initial values and slots, epoch 0; null when the table or arena
  // could not grow (CreateFailure says why).
  LazyStripe::Entry* CreateRow(LazyStripe& stripe, int64_t row, uint64_t hash) const {
    LazyStripe::Entry* entry = stripe.Insert(row, hash, *arena);
    if (entry != nullptr) InitRecord(row, arena->At(entry->ref));
    return entry;
  }
  // Why CreateRow failed for `row`.
  std::string CreateFailure(int64_t row) const {
    if (arena->full())
      return "lazy shard full: at most " + std::to_string(arena->max_records()) +
             " records (creating row " + std::to_string(row) + ")";
    return "out of memory creating row " + std::to_string(row);
  }
  // Lazy: writes row `row`'s initial values and slots into `record`.
  void InitRecord(int64_t row, float* record) const {
    const cluster::ShardLayout& l = def.layout;
    model::FillInitial(def.init, def.seed, l.var, l.full_shape, l.row_begin + row, 1, l.cols,
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

// "<op> <key>: <what> has <got> floats, expected <want>" unless got == want.
Status CheckSize(const char* op, const ShardKey& key, const char* what, size_t got, size_t want);
// Every row in [0, num_rows), else OutOfRange naming the first that is not.
Status CheckRows(const char* op, const ShardKey& key, std::span<const int64_t> rows,
                 int64_t num_rows);
// No row twice, else InvalidArgument naming one that is.
Status CheckUnique(const char* op, const ShardKey& key, std::span<const int64_t> rows);
// The error for a lazy shard named whole (all_rows) by a pull or push.
Status LazyWhole(const char* op, const ShardKey& key);

}  // namespace ps::server

// The store's row clock and eviction: sweeps by ttl and max_rows, the evicted-row log that
// delta checkpoints read, and the checkpoint epochs (store.h).
#include <algorithm>
#include <exception>

#include "libps/core/log.h"
#include "libps/server/store.h"
#include "libps/server/store_shard.h"

namespace ps::server {

bool Store::SweepDue(const Shard& s, int64_t now) {
  const model::RowPolicy& p = s.def.row_policy;
  const bool ttl_due = p.ttl_steps > 0 && now >= s.next_ttl_sweep.load(std::memory_order_relaxed);
  const bool rows_due =
      s.max_rows > 0 && s.live.load(std::memory_order_relaxed) > s.max_rows + s.max_rows / 16;
  return ttl_due || rows_due;
}

void Store::MaybeSweep(Shard& s) {
  const int64_t now = row_clock();
  if (!SweepDue(s, now)) return;
  if (sweep_runner_) {
    if (s.sweep_handed_over.exchange(true, std::memory_order_acq_rel)) return;  // one is waiting
    try {
      sweep_runner_([this, key = s.def.key()] { SweepHandedOver(key); });
    } catch (const std::exception& e) {
      // The push itself is applied; the sweep stays due and the next push hands it over.
      s.sweep_handed_over.store(false, std::memory_order_release);
      try {
        PS_LOG(Warning) << "could not hand over the eviction sweep of " << s.def.key().ToString()
                        << ": " << e.what();
      } catch (...) {}
    }
    return;
  }
  std::unique_lock lock(s.sweep_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread sweeps it
  Sweep(s, now, false);
}

void Store::SweepHandedOver(const ShardKey& key) {
  std::shared_lock unpaused(sweeps_mu_,
                            std::try_to_lock);  // else a restore is under way (PauseSweeps)
  std::shared_lock lock(mu_);
  auto it = shards_.find(key);
  if (it == shards_.end()) return;
  Shard& s = *it->second;
  struct Clear {  // however this returns: the shard may hand a sweep over again
    std::atomic<bool>& flag;
    ~Clear() { flag.store(false, std::memory_order_release); }
  } clear{s.sweep_handed_over};
  if (!unpaused.owns_lock()) return;
  try {
    // Waits for an EvictRows that holds it; after one, the sweep is usually no longer due.
    std::lock_guard sweeping(s.sweep_mu);
    const int64_t now = row_clock();
    if (SweepDue(s, now)) Sweep(s, now, false);
  } catch (const std::exception& e) {
    // Out of memory, say. The rows evicted so far are evicted, logged and counted (Evict);
    // the sweep comes due again (a ttl sweep T/8 steps later). On the runner's thread an
    // exception would end the process.
    try {
      PS_LOG(Warning) << "eviction sweep of " << key.ToString() << " failed: " << e.what();
    } catch (...) {}
  }
}

void Store::Sweep(Shard& s, int64_t now, bool exact) {
  // Stripes are swept last to first, against the order in which pushes and pulls take
  // them: a request that meets the sweep waits for one stripe's scan, then passes it.
  // In the same order it would wait at every stripe after that one, for the rest of the
  // sweep.
  const model::RowPolicy& p = s.def.row_policy;
  std::vector<int64_t> victims;
  if (p.ttl_steps > 0) {
    s.next_ttl_sweep.store(now + std::max<int64_t>(1, p.ttl_steps / 8), std::memory_order_relaxed);
    for (int64_t k = s.num_stripes - 1; k >= 0; --k) {
      std::lock_guard g(s.stripes[k]);
      victims.clear();
      s.lazy[k].ForEach(*s.arena, [&](int64_t row, const float* record, uint32_t) {
        if (now - static_cast<int64_t>(s.Stamp(record)) > p.ttl_steps) victims.push_back(row);
      });
      Evict(s, k, victims, evicted_ttl_);
    }
  }
  if (s.max_rows == 0) return;
  const int64_t limit = exact ? s.max_rows : s.max_rows + s.max_rows / 16;
  if (s.live.load(std::memory_order_relaxed) <= limit) return;
  // The cut: the stamp of the excess-th least recently pushed row. Rows pushed meanwhile
  // get newer stamps, so they are not counted as older than the cut.
  std::vector<uint32_t> stamps;
  stamps.reserve(static_cast<size_t>(std::max<int64_t>(0, s.live.load(std::memory_order_relaxed))));
  for (int64_t k = s.num_stripes - 1; k >= 0; --k) {
    std::lock_guard g(s.stripes[k]);
    s.lazy[k].ForEach(*s.arena, [&](int64_t, const float* record, uint32_t) {
      stamps.push_back(s.Stamp(record));
    });
  }
  if (static_cast<int64_t>(stamps.size()) <= s.max_rows) return;
  const size_t excess = stamps.size() - static_cast<size_t>(s.max_rows);
  std::nth_element(stamps.begin(), stamps.begin() + static_cast<std::ptrdiff_t>(excess - 1),
                   stamps.end());
  const uint32_t cut = stamps[excess - 1];
  size_t at_cut = 0;  // rows stamped `cut` that may go: excess minus those older than it
  for (size_t i = 0; i < excess; ++i) at_cut += stamps[i] == cut ? 1 : 0;
  for (int64_t k = s.num_stripes - 1; k >= 0; --k) {
    std::lock_guard g(s.stripes[k]);
    victims.clear();
    s.lazy[k].ForEach(*s.arena, [&](int64_t row, const float* record, uint32_t) {
      const uint32_t stamp = s.Stamp(record);
      if (stamp < cut) {
        victims.push_back(row);
      } else if (stamp == cut && at_cut > 0) {
        victims.push_back(row);
        --at_cut;
      }
    });
    Evict(s, k, victims, evicted_max_rows_);
  }
}

uint64_t Store::Evict(Shard& s, int64_t k, std::span<const int64_t> victims,
                      std::atomic<uint64_t>& counter) {
  const uint32_t epoch = this->epoch();
  // Room for the log before any row goes, so nothing can fail once one has (doubling, as
  // push_back would: the log grows by a stripe's victims at a time).
  const size_t need = s.evicted.size() + victims.size();
  if (need > s.evicted.capacity()) s.evicted.reserve(std::max(need, 2 * s.evicted.capacity()));
  uint64_t evicted = 0;
  for (int64_t row : victims) {
    if (!s.lazy[k].Erase(row, HashRow(row), *s.arena)) continue;
    ++evicted;
    s.evicted.emplace_back(row, epoch);  // a delta checkpoint records it as deleted
  }
  s.live.fetch_sub(static_cast<int64_t>(evicted), std::memory_order_relaxed);
  counter.fetch_add(evicted, std::memory_order_relaxed);
  return evicted;
}

uint32_t Store::BeginEpoch() { return epoch_.fetch_add(1, std::memory_order_acq_rel); }

void Store::ForgetEvictions(uint32_t upto) {
  std::shared_lock lock(mu_);
  for (auto& [key, shard] : shards_) {
    Shard& s = *shard;
    if (!s.lazy) continue;
    std::lock_guard sweeping(s.sweep_mu);
    s.LockAll();
    std::erase_if(s.evicted, [upto](const auto& e) { return e.second <= upto; });
    s.UnlockAll();
  }
}

void Store::EvictRows() {
  std::shared_lock lock(mu_);
  const int64_t now = row_clock();
  for (auto& [key, shard] : shards_) {
    if (!shard->lazy || !shard->stamped) continue;
    std::lock_guard sweeping(shard->sweep_mu);
    Sweep(*shard, now, true);
  }
}

void Store::ResetRowClock(int64_t step) {
  std::shared_lock lock(mu_);
  row_clock_.store(step, std::memory_order_release);
  for (auto& [key, shard] : shards_) {
    Shard& s = *shard;
    if (!s.lazy || !s.stamped) continue;
    std::lock_guard sweeping(s.sweep_mu);
    s.next_ttl_sweep.store(0, std::memory_order_relaxed);
    for (int64_t k = 0; k < s.num_stripes; ++k) {
      std::lock_guard g(s.stripes[k]);
      s.lazy[k].ForEach(*s.arena,
                        [&](int64_t, float* record, uint32_t) { s.SetStamp(record, step); });
    }
  }
}

}  // namespace ps::server

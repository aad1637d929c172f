// Memory building blocks of the store (private to libps/server): aligned float arrays,
// and the row table of a lazy shard (store.h, "Lazy shards"). Not synchronised: the
// store's stripe locks guard them.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "libps/core/status.h"

namespace ps::server {

inline constexpr size_t kAlign = 64;
inline constexpr size_t kHugePage = size_t{2} << 20;

// At least `bytes` bytes aligned to kAlign, for std::free; null when out of memory. From
// kHugePage bytes up: aligned to kHugePage, size rounded up to it, and advised to the
// kernel as transparent-huge-page memory.
void* AllocateAligned(size_t bytes);

// A std allocator over AllocateAligned (throws std::bad_alloc when out of memory).
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    void* p = AllocateAligned(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

// A 64-byte-aligned float array; the allocation is rounded up to a multiple of 64 bytes.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  // Internal (naming `what`) when out of memory.
  static Result<AlignedFloats> Make(size_t n, const std::string& what);
  float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::span<float> span() const { return {data_.get(), size_}; }

 private:
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, FreeDeleter> data_;
  size_t size_ = 0;
};

// Stripes per shard (lazy by hash, dense by row range). Checkpoints and restores hold
// every stripe lock of a shard at once; 32 keeps that within ThreadSanitizer's 64 locks
// held per thread (scripts/test-sanitize.sh) and is far above the ps's handler threads.
inline constexpr int kLazyStripeBits = 5;
inline constexpr int64_t kLazyStripes = int64_t{1} << kLazyStripeBits;

// SplitMix64's finaliser: the top kLazyStripeBits bits pick the stripe (LazyStripeOf),
// the bits below them the table position (LazyStripe) and the admission sketch's
// counters (AdmitSketch) use the low bits.
inline uint64_t HashRow(int64_t row) {
  uint64_t z = static_cast<uint64_t>(row) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
inline size_t LazyStripeOf(uint64_t hash) { return hash >> (64 - kLazyStripeBits); }

// Starts loading the first `bytes` (rounded up to 64, at most 512) at `p`; `write` when the
// caller will store there. A hint only: no effect on results.
inline void PrefetchBytes(const void* p, size_t bytes, bool write) {
  const char* c = static_cast<const char*>(p);
  bytes = std::min<size_t>(bytes, 512);
  for (size_t off = 0; off < bytes; off += 64) {
    if (write) {
      __builtin_prefetch(c + off, 1);
    } else {
      __builtin_prefetch(c + off, 0);
    }
  }
}

// How far ahead batched lookups and updates prefetch, in rows (records, and a lazy
// table's probe slots, alike).
inline constexpr uint32_t kPrefetchRows = 16;

struct StripeGroups;

// The records of one lazy shard: record_floats floats each (values, then each slot, then
// the last-push stamp of an evicting shard), named by a 32-bit reference and at stable
// addresses (chunks are never moved or freed until Clear). Chunks double from 16 records
// up to kHugePage bytes; a full-size chunk is one huge page, 64-byte aligned like every
// chunk, so when a record is a multiple of 64 bytes (16 floats of values and one slot:
// 128 bytes) its values start a cache line and a pull touches one line per row. At most
// one partly used chunk per shard is slack. Allocate, Free and Clear take the arena's own
// mutex (taken after a stripe lock); At needs none: a reference is only used under the
// stripe lock of the row it belongs to, whose Insert published it. Clear only while no
// record is in use (every stripe of the shard locked).
class RecordArena {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // `max_chunks` (tests only) lowers the chunk limit below what the references allow.
  explicit RecordArena(size_t record_floats, size_t max_chunks = SIZE_MAX);
  // An uninitialised record (a freed one first); kNone when out of memory or when the
  // references are used up (then full() is true).
  uint32_t Allocate();
  // Allocate refused for want of references: max_records() records are in use.
  bool full() const {
    std::lock_guard lock(mu_);
    return full_;
  }
  // How many records the 32-bit references can name: 2^(32 - slot bits) - 1 chunks, the
  // first few smaller (at least 2^31 - 1 records in all; just under 2^32 when a 2 MiB
  // chunk holds a power of two of them, as 128-byte records do).
  uint64_t max_records() const;
  // The record `ref` names (made by Allocate, not freed since).
  float* At(uint32_t ref) const {
    const float* const* dir = dir_.load(std::memory_order_acquire);
    return const_cast<float*>(dir[ref >> slot_bits_]) +
           static_cast<size_t>(ref & slot_mask_) * record_floats_;
  }
  // Returns a record for reuse (eviction); the free list is kept inside freed records.
  void Free(uint32_t ref);
  void Clear();
  size_t record_floats() const { return record_floats_; }
  uint64_t bytes() const {
    std::lock_guard lock(mu_);
    return chunk_floats_ * sizeof(float);
  }

 private:
  const size_t record_floats_;
  size_t max_rows_ = 0;  // records in a full-size chunk
  int slot_bits_ = 0;    // a reference is chunk << slot_bits_ | slot, slot < max_rows_
  uint32_t slot_mask_ = 0;
  size_t max_chunks_ = 0;  // the last reference of chunk max_chunks_ would be kNone
  mutable std::mutex mu_;
  bool full_ = false;
  std::vector<AlignedFloats> chunks_;
  // The chunks' addresses, read by At without the mutex. Grown by copying into a new
  // array twice the size; old arrays stay alive (in dirs_) until Clear, so a reader that
  // loaded an old one still reads valid, unchanged entries.
  std::atomic<const float* const*> dir_{nullptr};
  std::vector<std::unique_ptr<const float*[]>> dirs_;
  size_t dir_size_ = 0;
  size_t chunk_rows_ = 0;    // capacity of chunks_.back(), in records
  size_t chunk_used_ = 0;    // records used in chunks_.back()
  size_t chunk_floats_ = 0;  // all chunks
  uint32_t free_ = kNone;    // freed records, each holding the next one's reference
};

// The admission sketch of one stripe of a lazy shard (store.h, "Admission and
// eviction"): a counting Bloom filter of kSketchCounters 8-bit saturating counters.
// Counting id h increments its kSketchHashes counters (positions from disjoint 14-bit
// fields of HashRow, whose top bits picked the stripe); its estimate is the least of
// them, exact unless every one of them is shared with another id (probability
// occupancy^4, occupancy = share of counters not 0). Aging: when more than half of the
// counters are non-zero, every counter is halved, which bounds that probability by
// (1/2)^4 = 6.25%. Not synchronised: its stripe's lock guards it.
inline constexpr int kSketchHashes = 4;
inline constexpr int kSketchBits = 14;
inline constexpr size_t kSketchCounters = size_t{1}
                                          << kSketchBits;  // 16 KiB a stripe, 512 KiB a shard

class AdmitSketch {
 public:
  // Counts one push of the id of `hash`; returns its estimate afterwards.
  uint32_t Add(uint64_t hash);
  uint32_t Estimate(uint64_t hash) const;
  // Takes `n` off each of the id's counters (down to 0; a saturated counter stays), when
  // the id is admitted, so that only pending ids fill the sketch.
  void Remove(uint64_t hash, uint32_t n);
  void Clear();
  size_t nonzero() const { return nonzero_; }
  uint64_t agings() const { return agings_; }
  static constexpr uint64_t bytes() { return kSketchCounters; }

 private:
  static size_t Position(uint64_t hash, int i) {
    return (hash >> (kSketchBits * i)) & (kSketchCounters - 1);
  }
  void Age();

  std::array<uint8_t, kSketchCounters> counters_{};
  size_t nonzero_ = 0;
  uint64_t agings_ = 0;
};

// The rows of one stripe of a lazy shard: an open-addressing table (linear probing from
// the start of a cache line of four entries, grown at load 0.7, backward-shift deletion;
// 16-byte entries, huge pages from 2 MiB) from
// shard-local row to its record in the shard's RecordArena. An entry also holds the row's
// change epoch (store.h, "Change epochs"), so a push, which has just read the entry to
// find the record, sets the epoch without touching another cache line.
class LazyStripe {
 public:
  struct Entry {
    int64_t row = -1;    // -1: empty
    uint32_t ref = 0;    // the record (RecordArena)
    uint32_t epoch = 0;  // of the row's last change
  };
  static_assert(sizeof(Entry) == 16);

  // The entry of `row` (hash = HashRow(row)), or null when the row was never created.
  // Valid until the next Insert or Erase on this stripe.
  // A whole cache line of entries at a time, compared without a branch per entry: a row
  // is in the line its probe starts at unless that line was full when it came (89-96 % of
  // present rows are in their first line at load 0.7-0.5), so a lookup of a present row
  // mostly reads one line and takes one predictable branch. A lookup of an absent row ends
  // at the first line with an empty slot: the first line for 59-84 % of them.
  // No empty slot lies between a row's home and its slot (linear probing, backward-shift
  // deletion) and homes start lines, so the occupied slots of a line are a prefix of it,
  // and a line with an empty slot but not the row ends the probe.
  Entry* Find(int64_t row, uint64_t hash) {
    if (table_.empty()) return nullptr;
    const size_t mask = table_.size() - 1;
    for (size_t i = Home(hash);; i = (i + kLineSlots) & mask) {
      const Entry* line = &table_[i];
      unsigned hit = 0, empty = 0;
      for (unsigned k = 0; k < kLineSlots; ++k) {
        hit |= static_cast<unsigned>(line[k].row == row) << k;
        empty |= static_cast<unsigned>(line[k].row < 0) << k;
      }
      if (hit != 0) return &table_[i + static_cast<size_t>(std::countr_zero(hit))];
      if (empty != 0) return nullptr;
    }
  }
  const Entry* Find(int64_t row, uint64_t hash) const {
    return const_cast<LazyStripe*>(this)->Find(row, hash);
  }
  // Starts loading the line where a probe for `hash` begins.
  void PrefetchSlot(uint64_t hash) const {
    if (!table_.empty()) __builtin_prefetch(&table_[Home(hash)]);
  }
  // Batched Find over groups.order[b, e) (one stripe's rows of a StripeGroups built from
  // `rows`). Pass 1 looks every row up (probe slots prefetched ahead) and calls
  // create(j) for each row not found, in increasing j: true when f will Insert it. The
  // table is then grown once to hold them all (lookups redone if it moved). Pass 2 calls
  // f(j, entry or null, its record in `arena` or null, created) for j = b, ..., e - 1 in
  // that order, with the first `record_bytes` of each record prefetched ahead (`write`:
  // for stores); `created` is create(j)'s answer for a row not found. Lookups whose next
  // step does not wait on their outcome keep many misses in flight; a probe loop's exit
  // branch that waits on a miss does not. Growing before pass 2 matters beyond that: a
  // batch's rows come in home-slot order, so rows inserted into a table that grows as
  // they come would pile up in one probe run from slot 0 (quadratic inserts). f must
  // Insert rows[order[j]] when `created` (and only those rows), and must not Erase.
  // Returns e, or when the table could not grow, the first j to create, before which f
  // stopped (out of memory). Uses groups.found as scratch.
  template <typename C, typename F>
  uint32_t FindEach(std::span<const int64_t> rows, StripeGroups& groups, uint32_t b, uint32_t e,
                    const RecordArena& arena, size_t record_bytes, bool write, C&& create, F&& f);

  // Adds `row` (not present) with an uninitialised record from `arena` and epoch 0,
  // growing the table unless Reserve made room; null when out of memory or the arena is
  // full (RecordArena::full). Valid until the next Insert, Reserve or Erase on this stripe.
  Entry* Insert(int64_t row, uint64_t hash, RecordArena& arena);
  // Grows the table (once) so `rows` rows fit under its load limit; false when out of
  // memory. Moves entries (not records) when it grows.
  bool Reserve(size_t rows);
  // Removes `row` (hash = HashRow(row)) and returns its record to `arena`; false when it
  // is not present. Invalidates records found before (of this row) only.
  bool Erase(int64_t row, uint64_t hash, RecordArena& arena);
  // Forgets every row (the arena's records are cleared apart, RecordArena::Clear).
  void Clear();

  size_t count() const { return count_; }
  // Of the table only (the records are the arena's).
  uint64_t bytes() const { return table_.size() * sizeof(Entry); }
  // Occupied slots Insert has stepped over since the stripe was made (tests: the cost
  // of inserts).
  uint64_t insert_probes() const { return insert_probes_; }
  // f(row, record, epoch) for every row, in table order.
  template <typename F>
  void ForEach(const RecordArena& arena, F&& f) const {
    for (const Entry& e : table_) {
      if (e.row >= 0) f(e.row, arena.At(e.ref), e.epoch);
    }
  }

 private:
  // kLineSlots entries, aligned: one cache line (the table is kAlign-aligned). The
  // smallest table holds whole lines.
  static constexpr size_t kLineSlots = 64 / sizeof(Entry);
  static constexpr size_t kMinSlots = 16;
  static_assert(kMinSlots % kLineSlots == 0 && kAlign % (kLineSlots * sizeof(Entry)) == 0);
  // A row's home slot: the first slot of a cache line, picked by the hash bits right below
  // the stripe's, so a StripeGroups batch (sorted by those bits) probes its stripe's table
  // in increasing address order.
  size_t Home(uint64_t hash) const {
    return static_cast<size_t>((hash << kLazyStripeBits) >> shift_) & ~(kLineSlots - 1);
  }
  static bool Fits(size_t rows, size_t slots) { return rows * 10 <= slots * 7; }  // load 0.7

  std::vector<Entry, AlignedAllocator<Entry>> table_;  // size 0 or a power of two, 2^(64 - shift_)
  int shift_ = 64;
  size_t count_ = 0;
  uint64_t insert_probes_ = 0;
};

// A lazy pull's or push's rows grouped by stripe (a counting sort), so each stripe's lock
// is taken once per request: the rows of stripe k are order[begin[k] .. begin[k + 1]),
// ordered by the top group_bits of their hashes: the stripe's, then up to 8 of the home
// slot's (see Build). Keep one per thread (thread_local), so the buffers are reused.
struct StripeGroups {
  static constexpr int kMaxGroupBits = kLazyStripeBits + 8;  // 256 groups per stripe
  int group_bits = kLazyStripeBits;                          // of the last Build
  std::vector<uint64_t> hashes;                              // [i] HashRow(rows[i])
  std::vector<uint32_t> order;
  std::array<uint32_t, kLazyStripes + 1> begin{};
  std::vector<uint32_t> bucket;  // Build's counts
  struct Found {
    LazyStripe::Entry* entry;
    float* record;
    bool create;
  };
  std::vector<Found> found;  // LazyStripe::FindEach's scratch

  void Build(std::span<const int64_t> rows);
};

template <typename C, typename F>
uint32_t LazyStripe::FindEach(std::span<const int64_t> rows, StripeGroups& groups, uint32_t b,
                              uint32_t e, const RecordArena& arena, size_t record_bytes, bool write,
                              C&& create, F&& f) {
  constexpr uint32_t kAhead = kPrefetchRows;
  if (groups.found.size() < e - b) groups.found.resize(e - b);
  StripeGroups::Found* const found = groups.found.data();  // [j - b] for j in [b, e)
  auto lookup_all = [&] {
    for (uint32_t j = b; j < e && j < b + kAhead; ++j) PrefetchSlot(groups.hashes[groups.order[j]]);
    for (uint32_t j = b; j < e; ++j) {
      if (j + kAhead < e) PrefetchSlot(groups.hashes[groups.order[j + kAhead]]);
      const uint32_t i = groups.order[j];
      Entry* entry = Find(rows[i], groups.hashes[i]);
      found[j - b].entry = entry;
      found[j - b].record = entry != nullptr ? arena.At(entry->ref) : nullptr;
    }
  };
  lookup_all();
  size_t creates = 0;
  uint32_t first_create = e;
  for (uint32_t j = b; j < e; ++j) {
    found[j - b].create = found[j - b].entry == nullptr && create(j);
    if (found[j - b].create) {
      ++creates;
      first_create = std::min(first_create, j);
    }
  }
  uint32_t end = e;
  if (creates > 0 && !Fits(count_ + creates, table_.size())) {
    const bool moves = count_ > 0;
    if (!Reserve(count_ + creates)) {
      end = first_create;  // f runs up to the first row it could not create
    } else if (moves) {
      lookup_all();  // the entries moved (their records did not)
    }
  }
  for (uint32_t j = b; j < end && j < b + kAhead; ++j) {
    if (found[j - b].record != nullptr) PrefetchBytes(found[j - b].record, record_bytes, write);
  }
  for (uint32_t j = b; j < end; ++j) {
    if (j + kAhead < end && found[j + kAhead - b].record != nullptr)
      PrefetchBytes(found[j + kAhead - b].record, record_bytes, write);
    f(j, found[j - b].entry, found[j - b].record, found[j - b].create);
  }
  return end;
}

}  // namespace ps::server

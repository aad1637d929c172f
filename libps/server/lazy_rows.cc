#include "libps/server/lazy_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include <sys/mman.h>

namespace ps::server {

namespace {
constexpr size_t kFirstChunkRows = 16;
}  // namespace

void* AllocateAligned(size_t bytes) {
  if (bytes < kHugePage) return std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, bytes);
  // Random row access over big arrays is bound by TLB misses with 4 KiB pages. Only a
  // hint: without transparent huge pages (or with "never") the memory stays usable.
  if (p != nullptr) (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

Result<AlignedFloats> AlignedFloats::Make(size_t n, const std::string& what) {
  size_t bytes = (n * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  void* p = AllocateAligned(bytes);
  if (p == nullptr)
    return Internal(what + ": out of memory allocating " + std::to_string(bytes) + " bytes");
  AlignedFloats a;
  a.data_.reset(static_cast<float*>(p));
  a.size_ = n;
  return a;
}

RecordArena::RecordArena(size_t record_floats, size_t max_chunks) : record_floats_(record_floats) {
  PS_ASSERT(record_floats_ >= 1);
  // Not rounded down to a power of two to fill the reference space: a full-size chunk
  // would then leave up to half of its huge page unused, and memory, not the 2^31 and
  // more references, is the limit on any real machine.
  max_rows_ = std::max<size_t>(kFirstChunkRows, kHugePage / (record_floats_ * sizeof(float)));
  while ((size_t{1} << slot_bits_) < max_rows_) ++slot_bits_;
  slot_mask_ = static_cast<uint32_t>((uint64_t{1} << slot_bits_) - 1);
  // The last reference of chunk 2^(32 - slot_bits_) - 1 would be kNone.
  max_chunks_ = std::min<size_t>(max_chunks, (size_t{1} << (32 - slot_bits_)) - 1);
}

uint64_t RecordArena::max_records() const {
  // Chunks double from kFirstChunkRows up to max_rows_ records, then stay there.
  uint64_t records = 0;
  size_t rows = kFirstChunkRows;
  for (size_t c = 0; c < max_chunks_; ++c) {
    records += rows;
    if (rows == max_rows_)
      return records + (max_chunks_ - c - 1) * static_cast<uint64_t>(max_rows_);
    rows = std::min(rows * 2, max_rows_);
  }
  return records;
}

uint32_t RecordArena::Allocate() {
  std::lock_guard lock(mu_);
  if (free_ != kNone) {
    const uint32_t ref = free_;
    std::memcpy(&free_, At(ref), sizeof(free_));
    return ref;
  }
  if (chunk_used_ == chunk_rows_) {
    if (chunks_.size() >= max_chunks_) {
      full_ = true;
      return kNone;
    }
    const size_t rows = chunks_.empty() ? kFirstChunkRows : std::min(chunk_rows_ * 2, max_rows_);
    // A full-size chunk takes whole huge pages (AllocateAligned advises them only from
    // kHugePage bytes up); the few bytes past its last record are slack.
    const size_t floats = rows == max_rows_
                              ? std::max(rows * record_floats_, kHugePage / sizeof(float))
                              : rows * record_floats_;
    auto chunk = AlignedFloats::Make(floats, "lazy rows");
    if (!chunk.ok()) return kNone;
    if (chunks_.size() == dir_size_) {
      const size_t size = std::max<size_t>(16, dir_size_ * 2);
      std::unique_ptr<const float*[]> dir(new (std::nothrow) const float*[size]);
      if (dir == nullptr) return kNone;
      std::copy_n(dirs_.empty() ? nullptr : dirs_.back().get(), dir_size_, dir.get());
      dirs_.push_back(std::move(dir));
      dir_size_ = size;
    }
    dirs_.back()[chunks_.size()] = chunk->data();
    dir_.store(dirs_.back().get(), std::memory_order_release);
    chunks_.push_back(std::move(*chunk));
    chunk_rows_ = rows;
    chunk_used_ = 0;
    chunk_floats_ += floats;
  }
  return static_cast<uint32_t>(((chunks_.size() - 1) << slot_bits_) | chunk_used_++);
}

void RecordArena::Free(uint32_t ref) {
  std::lock_guard lock(mu_);
  std::memcpy(At(ref), &free_, sizeof(free_));
  free_ = ref;
}

void RecordArena::Clear() {
  std::lock_guard lock(mu_);
  free_ = kNone;
  full_ = false;
  chunks_.clear();
  dir_.store(nullptr, std::memory_order_release);
  dirs_.clear();
  dir_size_ = 0;
  chunk_used_ = chunk_rows_ = chunk_floats_ = 0;
}

LazyStripe::Entry* LazyStripe::Insert(int64_t row, uint64_t hash, RecordArena& arena) {
  if (!Reserve(count_ + 1)) return nullptr;
  const uint32_t ref = arena.Allocate();
  if (ref == RecordArena::kNone) return nullptr;
  const size_t mask = table_.size() - 1;
  size_t i = Home(hash);
  uint64_t probes = 0;
  for (; table_[i].row >= 0; ++probes) i = (i + 1) & mask;
  insert_probes_ += probes;
  table_[i] = {row, ref, 0};
  ++count_;
  return &table_[i];
}

bool LazyStripe::Erase(int64_t row, uint64_t hash, RecordArena& arena) {
  if (table_.empty()) return false;
  const size_t mask = table_.size() - 1;
  size_t i = Home(hash);
  while (table_[i].row != row) {
    if (table_[i].row < 0) return false;
    i = (i + 1) & mask;
  }
  arena.Free(table_[i].ref);
  // Backward-shift deletion: move later entries of the probe run into the hole unless
  // their home slot lies cyclically in (hole, their slot].
  for (size_t j = i;;) {
    j = (j + 1) & mask;
    if (table_[j].row < 0) break;
    const size_t home = Home(HashRow(table_[j].row));
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    table_[i] = table_[j];
    i = j;
  }
  table_[i] = Entry{};
  --count_;
  return true;
}

void LazyStripe::Clear() {
  table_.clear();
  table_.shrink_to_fit();
  shift_ = 64;
  count_ = 0;
}

bool LazyStripe::Reserve(size_t rows) {
  if (Fits(rows, table_.size())) return true;
  size_t size = std::max<size_t>(kMinSlots, table_.size() * 2);
  while (!Fits(rows, size)) size *= 2;
  std::vector<Entry, AlignedAllocator<Entry>> old;
  old.swap(table_);
  try {
    table_.resize(size);
  } catch (const std::bad_alloc&) {
    table_.swap(old);
    return false;
  }
  shift_ = 64 - std::countr_zero(table_.size());
  const size_t mask = table_.size() - 1;
  for (const Entry& e : old) {
    if (e.row < 0) continue;
    size_t i = Home(HashRow(e.row));
    while (table_[i].row >= 0) i = (i + 1) & mask;
    table_[i] = e;
  }
  return true;
}

uint32_t AdmitSketch::Add(uint64_t hash) {
  uint32_t least = UINT32_MAX;
  for (int i = 0; i < kSketchHashes; ++i) {
    uint8_t& c = counters_[Position(hash, i)];
    if (c == 0) ++nonzero_;
    if (c < UINT8_MAX) ++c;
    least = std::min<uint32_t>(least, c);
  }
  if (nonzero_ * 2 > kSketchCounters) {
    Age();
    return Estimate(hash);
  }
  return least;
}

uint32_t AdmitSketch::Estimate(uint64_t hash) const {
  uint32_t least = UINT32_MAX;
  for (int i = 0; i < kSketchHashes; ++i)
    least = std::min<uint32_t>(least, counters_[Position(hash, i)]);
  return least;
}

void AdmitSketch::Remove(uint64_t hash, uint32_t n) {
  for (int i = 0; i < kSketchHashes; ++i) {
    uint8_t& c = counters_[Position(hash, i)];
    if (c == 0 || c == UINT8_MAX) continue;
    c = static_cast<uint8_t>(c > n ? c - n : 0);
    if (c == 0) --nonzero_;
  }
}

void AdmitSketch::Clear() {
  counters_.fill(0);
  nonzero_ = 0;
}

void AdmitSketch::Age() {
  nonzero_ = 0;
  for (uint8_t& c : counters_) {
    c = static_cast<uint8_t>(c >> 1);
    if (c != 0) ++nonzero_;
  }
  ++agings_;
}

void StripeGroups::Build(std::span<const int64_t> rows) {
  const size_t n = rows.size();
  hashes.resize(n);
  order.resize(n);
  // A counting sort on the top group_bits bits of the hashes: by stripe, and within a
  // stripe by the top bits of the home slot (LazyStripe::Home), so probes walk each
  // stripe's table in increasing address order, as a dense shard's sorted rows do. About
  // one group per row per stripe, up to 256: a small request clears and sums few counters.
  const int extra = std::min(kMaxGroupBits - kLazyStripeBits,
                             static_cast<int>(std::bit_width(n >> kLazyStripeBits)));
  group_bits = kLazyStripeBits + extra;
  const int shift = 64 - group_bits;
  const size_t groups = size_t{1} << group_bits;
  bucket.assign(groups + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    hashes[i] = HashRow(rows[i]);
    ++bucket[(hashes[i] >> shift) + 1];
  }
  for (size_t b = 0; b < groups; ++b) bucket[b + 1] += bucket[b];
  for (size_t k = 0; k <= kLazyStripes; ++k) begin[k] = bucket[k << extra];
  for (size_t i = 0; i < n; ++i) order[bucket[hashes[i] >> shift]++] = static_cast<uint32_t>(i);
}

}  // namespace ps::server

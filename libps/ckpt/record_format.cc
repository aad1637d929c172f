#include "libps/ckpt/record_format.h"

#include <set>

namespace ps::ckpt {

std::string RecordMeta::Describe(const std::string& path) const {
  return path + ": record " + std::to_string(index) + " (var " + format::Quote(layout.var) +
         " shard " + std::to_string(layout.shard) + ")";
}

std::string ShardFileName(int ps_index) { return "ps-" + std::to_string(ps_index) + ".shard"; }

namespace format {

namespace {

static_assert(kMaxNameBytes == cluster::kMaxVarNameBytes,
              "one bound for every name in the metadata");

void AppendU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void AppendU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }
void AppendName(std::string* s, const std::string& name) {
  AppendU32(s, static_cast<uint32_t>(name.size()));
  s->append(name);
}

// Bounds-checked little-endian reader over a metadata blob.
class MetaCursor {
 public:
  explicit MetaCursor(std::string_view data) : data_(data) {}
  bool U32(uint32_t* v) { return Take(v, 4); }
  bool I32(int32_t* v) { return Take(v, 4); }
  bool I64(int64_t* v) { return Take(v, 8); }
  bool Name(std::string* s) {
    uint32_t n = 0;
    if (!U32(&n) || n > kMaxNameBytes || n > data_.size() - pos_) return false;
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == data_.size(); }

 private:
  bool Take(void* v, size_t n) {
    if (data_.size() - pos_ < n) return false;
    std::memcpy(v, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace

std::string CheckRecord(const cluster::ShardLayout& layout,
                        const std::vector<std::string>& slot_names, int64_t stored_rows) {
  if (Status valid = cluster::ValidateShardLayout(layout); !valid.ok()) return valid.message();
  if (stored_rows < 0 || stored_rows > layout.rows) {
    return "stored rows " + std::to_string(stored_rows) + " outside [0, rows]";
  }
  if (layout.lazy && stored_rows > cluster::kMaxShardElements / layout.cols) {
    return "stored rows x cols: " + std::to_string(stored_rows) + " x " +
           std::to_string(layout.cols) + " elements is more than 2^40";
  }
  if (slot_names.size() > kMaxSlots) return "more than 64 slots";
  std::set<std::string> seen;
  for (const auto& name : slot_names) {
    if (name.empty()) return "empty slot name";
    if (name.size() > kMaxNameBytes) return "slot name longer than 4096 bytes";
    if (name == "values") return "slot named \"values\" (reserved for the values block)";
    if (!seen.insert(name).second) return "duplicate slot " + Quote(name);
  }
  return {};
}

std::string EncodeMeta(const cluster::ShardLayout& l, const std::vector<std::string>& slot_names,
                       int64_t stored_rows, bool delta, int64_t deleted_rows) {
  std::string meta;
  AppendName(&meta, l.var);
  AppendU32(&meta, static_cast<uint32_t>(l.shard));
  AppendU32(&meta, static_cast<uint32_t>(l.num_shards));
  AppendU64(&meta, static_cast<uint64_t>(l.row_begin));
  AppendU64(&meta, static_cast<uint64_t>(l.rows));
  AppendU64(&meta, static_cast<uint64_t>(l.cols));
  AppendU32(&meta, static_cast<uint32_t>(l.full_shape.size()));
  for (int64_t d : l.full_shape) AppendU64(&meta, static_cast<uint64_t>(d));
  AppendU32(&meta, static_cast<uint32_t>(slot_names.size()));
  for (const auto& s : slot_names) AppendName(&meta, s);
  if (l.lazy || delta) AppendU64(&meta, static_cast<uint64_t>(stored_rows));
  if (delta) {
    AppendU32(&meta, l.lazy ? kDeltaFlagLazy : 0);
    AppendU64(&meta, static_cast<uint64_t>(deleted_rows));
  }
  return meta;
}

std::string ParseMeta(std::string_view blob, uint32_t kind, RecordMeta* m) {
  MetaCursor c(blob);
  cluster::ShardLayout& l = m->layout;
  int32_t shard = 0;
  int32_t num_shards = 0;
  uint32_t rank = 0;
  uint32_t num_slots = 0;
  if (!c.Name(&l.var) || !c.I32(&shard) || !c.I32(&num_shards) || !c.I64(&l.row_begin) ||
      !c.I64(&l.rows) || !c.I64(&l.cols) || !c.U32(&rank)) {
    return "metadata truncated";
  }
  if (rank > cluster::kMaxRank) return "rank " + std::to_string(rank) + " above 32";
  l.full_shape.resize(rank);
  for (auto& d : l.full_shape) {
    if (!c.I64(&d)) return "metadata truncated";
  }
  if (!c.U32(&num_slots)) return "metadata truncated";
  if (num_slots > kMaxSlots) return std::to_string(num_slots) + " slots, more than 64";
  m->slot_names.resize(num_slots);
  for (auto& s : m->slot_names) {
    if (!c.Name(&s)) return "metadata truncated";
  }
  l.shard = shard;
  l.num_shards = num_shards;
  l.lazy = kind == kKindSparseRows;
  m->delta = kind == kKindDeltaRows;
  m->stored_rows = l.rows;
  if ((l.lazy || m->delta) && !c.I64(&m->stored_rows)) return "metadata truncated";
  if (m->delta) {
    uint32_t flags = 0;
    if (!c.U32(&flags) || !c.I64(&m->deleted_rows)) return "metadata truncated";
    if ((flags & ~kDeltaFlagLazy) != 0) return "unknown delta flags " + std::to_string(flags);
    l.lazy = (flags & kDeltaFlagLazy) != 0;
    if (m->deleted_rows < 0 || m->deleted_rows > l.rows) {
      return "deleted rows " + std::to_string(m->deleted_rows) + " outside [0, rows]";
    }
    if (!l.lazy && m->deleted_rows != 0) return "deleted rows in a dense shard's delta";
  }
  if (!c.AtEnd()) return "unexpected bytes at the end of the metadata";
  return CheckRecord(l, m->slot_names, m->stored_rows);
}

}  // namespace format
}  // namespace ps::ckpt

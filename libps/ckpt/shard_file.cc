#include "libps/ckpt/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "libps/core/crc32c.h"

namespace ps::ckpt {

static_assert(std::endian::native == std::endian::little,
              "shard files are little-endian and written straight from memory");

namespace {

constexpr char kFileMagic[8] = {'P', 'S', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kFooterMagic[8] = {'P', 'S', 'C', 'K', 'E', 'N', 'D', '1'};
constexpr char kRecordMagic[4] = {'P', 'S', 'R', 'C'};
constexpr uint32_t kKindRowBlock = 1;
constexpr uint32_t kKindSparseRows = 2;
constexpr size_t kHeaderBytes = 32;
constexpr size_t kRecordHeaderBytes = 32;
constexpr size_t kFooterBytes = 32;
constexpr uint32_t kMaxMetaBytes = 1u << 20;
constexpr size_t kStagingBytes = size_t{1} << 20;
// Blocks at least this large are written straight from the caller's span.
constexpr size_t kDirectWriteBytes = size_t{256} << 10;
// Reads are checksummed in chunks of this size while the chunk is still in cache.
constexpr size_t kReadChunkBytes = size_t{4} << 20;

void PutU32(unsigned char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void PutU64(unsigned char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t GetU32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetU64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t Checksum(const void* data, size_t n) { return MaskedCrc32c(Crc32c(0, data, n)); }

uint32_t ExtendDigest(uint32_t digest, uint32_t stored_crc) {
  unsigned char b[4];
  PutU32(b, stored_crc);
  return Crc32c(digest, b, 4);
}

void AppendU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void AppendU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }
void AppendName(std::string* s, const std::string& name) {
  AppendU32(s, static_cast<uint32_t>(name.size()));
  s->append(name);
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

// The rules a record's metadata must satisfy, shared by writer (InvalidArgument) and
// reader (DataLoss). Returns an empty string when the record is consistent.
std::string CheckMeta(const std::string& var, int shard, int num_shards, int64_t row_begin,
                      int64_t rows, int64_t cols, const std::vector<int64_t>& full_shape,
                      const std::vector<std::string>& slot_names) {
  if (var.empty()) return "empty variable name";
  if (var.size() > kMaxNameBytes) return "variable name longer than 4096 bytes";
  if (num_shards < 1) return "num_shards " + std::to_string(num_shards) + " < 1";
  if (shard < 0 || shard >= num_shards) {
    return "shard " + std::to_string(shard) + " out of range for " + std::to_string(num_shards) +
           " shards";
  }
  if (row_begin < 0 || rows < 0 || cols < 0) return "negative row_begin, rows or cols";
  if (cols > 0 && rows > std::numeric_limits<int64_t>::max() / 8 / cols) {
    return "rows * cols too large";
  }
  if (full_shape.size() > kMaxRank) return "rank above 32";
  if (full_shape.empty()) {
    if (row_begin != 0 || rows != 1 || cols != 1 || num_shards != 1) {
      return "a scalar (empty full_shape) must be one unsharded 1 x 1 block";
    }
  } else {
    for (int64_t d : full_shape) {
      if (d < 0) return "negative dimension in full_shape";
    }
    if (row_begin > full_shape[0] || rows > full_shape[0] - row_begin) {
      return "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + rows) +
             ") outside full_shape[0] = " + std::to_string(full_shape[0]);
    }
    int64_t inner = 1;
    for (size_t i = 1; i < full_shape.size(); ++i) {
      if (full_shape[i] != 0 && inner > std::numeric_limits<int64_t>::max() / full_shape[i]) {
        return "full_shape too large";
      }
      inner *= full_shape[i];
    }
    if (inner != cols) {
      return "cols " + std::to_string(cols) + " != product of full_shape[1:] = " +
             std::to_string(inner);
    }
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

// Empty string on success, else what is wrong.
std::string ParseMeta(std::string_view blob, bool sparse, RecordMeta* m) {
  MetaCursor c(blob);
  int32_t shard = 0;
  int32_t num_shards = 0;
  uint32_t rank = 0;
  uint32_t num_slots = 0;
  if (!c.Name(&m->var) || !c.I32(&shard) || !c.I32(&num_shards) || !c.I64(&m->row_begin) ||
      !c.I64(&m->rows) || !c.I64(&m->cols) || !c.U32(&rank)) {
    return "metadata truncated";
  }
  if (rank > kMaxRank) return "rank " + std::to_string(rank) + " above 32";
  m->full_shape.resize(rank);
  for (auto& d : m->full_shape) {
    if (!c.I64(&d)) return "metadata truncated";
  }
  if (!c.U32(&num_slots)) return "metadata truncated";
  if (num_slots > kMaxSlots) return std::to_string(num_slots) + " slots, more than 64";
  m->slot_names.resize(num_slots);
  for (auto& s : m->slot_names) {
    if (!c.Name(&s)) return "metadata truncated";
  }
  m->sparse = sparse;
  m->stored_rows = m->rows;
  if (sparse) {
    if (!c.I64(&m->stored_rows)) return "metadata truncated";
    if (m->stored_rows < 0 || m->stored_rows > m->rows) {
      return "stored rows " + std::to_string(m->stored_rows) + " outside [0, rows]";
    }
  }
  if (!c.AtEnd()) return "unexpected bytes at the end of the metadata";
  m->shard = shard;
  m->num_shards = num_shards;
  return CheckMeta(m->var, m->shard, m->num_shards, m->row_begin, m->rows, m->cols,
                   m->full_shape, m->slot_names);
}

std::string AtRecord(const std::string& path, uint64_t index, uint64_t offset) {
  return path + ": record " + std::to_string(index) + " at offset " + std::to_string(offset);
}

}  // namespace

std::string RecordMeta::Describe(const std::string& path) const {
  return path + ": record " + std::to_string(index) + " (var " + Quote(var) + " shard " +
         std::to_string(shard) + ")";
}

std::string ShardFileName(int ps_index) { return "ps-" + std::to_string(ps_index) + ".shard"; }

// ---------------------------------------------------------------------------------------
// ShardWriter

Result<ShardWriter> ShardWriter::Create(std::string path, int ps_index, int64_t global_step) {
  if (ps_index < 0) return InvalidArgument(path + ": negative ps index");
  if (global_step < 0) return InvalidArgument(path + ": negative global step");
  ShardWriter w;
  w.path_ = std::move(path);
  w.tmp_path_ = w.path_ + ".tmp";
  w.fd_ = UniqueFd(::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!w.fd_.valid()) {
    int err = errno;
    w.tmp_path_.clear();  // nothing of ours to remove
    return ErrnoStatus(w.path_ + ".tmp", "create", err);
  }
  w.buffer_.resize(kStagingBytes);
  unsigned char h[kHeaderBytes] = {};
  std::memcpy(h, kFileMagic, 8);
  PutU32(h + 8, kShardFormatVersion);
  PutU32(h + 12, static_cast<uint32_t>(ps_index));
  PutU64(h + 16, static_cast<uint64_t>(global_step));
  PutU32(h + 24, 0);
  uint32_t crc = Checksum(h, 28);
  PutU32(h + 28, crc);
  w.digest_ = ExtendDigest(0, crc);
  PS_RETURN_IF_ERROR(w.Put(h, sizeof(h)));
  return w;
}

ShardWriter::ShardWriter(ShardWriter&& o) noexcept
    : path_(std::move(o.path_)),
      tmp_path_(std::exchange(o.tmp_path_, std::string())),
      fd_(std::move(o.fd_)),
      buffer_(std::move(o.buffer_)),
      buffered_(std::exchange(o.buffered_, 0)),
      offset_(o.offset_),
      records_(o.records_),
      digest_(o.digest_),
      error_(std::move(o.error_)),
      committed_(o.committed_) {}

ShardWriter& ShardWriter::operator=(ShardWriter&& o) noexcept {
  if (this != &o) {
    Abandon();
    path_ = std::move(o.path_);
    tmp_path_ = std::exchange(o.tmp_path_, std::string());
    fd_ = std::move(o.fd_);
    buffer_ = std::move(o.buffer_);
    buffered_ = std::exchange(o.buffered_, 0);
    offset_ = o.offset_;
    records_ = o.records_;
    digest_ = o.digest_;
    error_ = std::move(o.error_);
    committed_ = o.committed_;
  }
  return *this;
}

ShardWriter::~ShardWriter() { Abandon(); }

void ShardWriter::Abandon() {
  fd_.reset();
  if (!committed_ && !tmp_path_.empty()) ::unlink(tmp_path_.c_str());
  tmp_path_.clear();
}

Status ShardWriter::Fail(Status st) {
  error_ = st;
  Abandon();
  return st;
}

Status ShardWriter::Flush() {
  if (buffered_ == 0) return Status::Ok();
  Status st = WriteAll(fd_.get(), buffer_.data(), buffered_, tmp_path_);
  buffered_ = 0;
  return st;
}

Status ShardWriter::Put(const void* data, size_t n) {
  offset_ += n;
  if (n >= kDirectWriteBytes) {
    PS_RETURN_IF_ERROR(Flush());
    return WriteAll(fd_.get(), data, n, tmp_path_);
  }
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    size_t take = std::min(n, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ == buffer_.size()) PS_RETURN_IF_ERROR(Flush());
  }
  return Status::Ok();
}

Status ShardWriter::Append(const ShardRecordView& r) {
  if (!error_.ok()) return error_;
  if (committed_ || !fd_.valid()) return FailedPrecondition(path_ + ": writer already committed");
  std::vector<std::string> slot_names;
  slot_names.reserve(r.slots.size());
  for (const auto& s : r.slots) slot_names.push_back(s.first);
  std::string problem = CheckMeta(r.var, r.shard, r.num_shards, r.row_begin, r.rows, r.cols,
                                  r.full_shape, slot_names);
  const std::string what = path_ + ": record " + std::to_string(records_) + " (var " +
                           Quote(r.var) + " shard " + std::to_string(r.shard) + ")";
  if (!problem.empty()) return InvalidArgument(what + ": " + problem);
  const int64_t stored_rows = r.sparse ? static_cast<int64_t>(r.row_ids.size()) : r.rows;
  if (r.sparse) {
    for (size_t i = 0; i < r.row_ids.size(); ++i) {
      if (r.row_ids[i] < 0 || r.row_ids[i] >= r.rows || (i > 0 && r.row_ids[i] <= r.row_ids[i - 1])) {
        return InvalidArgument(what + ": row_ids must be strictly ascending in [0, rows)");
      }
    }
  }
  const bool gathered = r.sparse && r.gather != nullptr;
  const auto elements = static_cast<uint64_t>(stored_rows * r.cols);
  if (!gathered && r.values.size() != elements) {
    return InvalidArgument(what + ": values has " + std::to_string(r.values.size()) +
                           " floats, rows * cols = " + std::to_string(elements));
  }
  for (const auto& [name, span] : r.slots) {
    if (!gathered && span.size() != elements) {
      return InvalidArgument(what + ": slot " + Quote(name) + " has " +
                             std::to_string(span.size()) + " floats, rows * cols = " +
                             std::to_string(elements));
    }
  }

  std::string meta;
  AppendName(&meta, r.var);
  AppendU32(&meta, static_cast<uint32_t>(r.shard));
  AppendU32(&meta, static_cast<uint32_t>(r.num_shards));
  AppendU64(&meta, static_cast<uint64_t>(r.row_begin));
  AppendU64(&meta, static_cast<uint64_t>(r.rows));
  AppendU64(&meta, static_cast<uint64_t>(r.cols));
  AppendU32(&meta, static_cast<uint32_t>(r.full_shape.size()));
  for (int64_t d : r.full_shape) AppendU64(&meta, static_cast<uint64_t>(d));
  AppendU32(&meta, static_cast<uint32_t>(slot_names.size()));
  for (const auto& s : slot_names) AppendName(&meta, s);
  if (r.sparse) AppendU64(&meta, static_cast<uint64_t>(stored_rows));
  PS_ASSERT(meta.size() <= kMaxMetaBytes);  // bounded by kMaxNameBytes, kMaxSlots, kMaxRank

  const uint64_t block_bytes = elements * sizeof(float);
  unsigned char h[kRecordHeaderBytes] = {};
  std::memcpy(h, kRecordMagic, 4);
  PutU32(h + 4, r.sparse ? kKindSparseRows : kKindRowBlock);
  PutU32(h + 8, static_cast<uint32_t>(meta.size()));
  PutU32(h + 12, static_cast<uint32_t>(1 + r.slots.size()));
  PutU64(h + 16, block_bytes);
  uint32_t meta_crc = Checksum(meta.data(), meta.size());
  PutU32(h + 24, meta_crc);
  uint32_t header_crc = Checksum(h, 28);
  PutU32(h + 28, header_crc);

  Status st = Put(h, sizeof(h));
  if (st.ok()) st = Put(meta.data(), meta.size());
  uint32_t digest = ExtendDigest(ExtendDigest(digest_, header_crc), meta_crc);
  auto put_block = [&](std::span<const float> block) -> Status {
    uint32_t crc = Checksum(block.data(), block_bytes);
    digest = ExtendDigest(digest, crc);
    PS_RETURN_IF_ERROR(Put(block.data(), block_bytes));
    unsigned char c[4];
    PutU32(c, crc);
    return Put(c, 4);
  };
  // A gathered block goes out in pieces through the staging buffer.
  std::vector<float> piece;
  auto put_gathered = [&](size_t block) -> Status {
    const size_t cols = static_cast<size_t>(r.cols);
    const size_t piece_rows = std::max<size_t>(1, kReadChunkBytes / sizeof(float) / std::max<size_t>(cols, 1));
    uint32_t crc = 0;
    for (size_t first = 0; first < r.row_ids.size() && cols > 0; first += piece_rows) {
      const size_t n = std::min(piece_rows, r.row_ids.size() - first);
      piece.resize(n * cols);
      r.gather(block, first, piece);
      crc = Crc32c(crc, piece.data(), piece.size() * sizeof(float));
      PS_RETURN_IF_ERROR(Put(piece.data(), piece.size() * sizeof(float)));
    }
    crc = MaskedCrc32c(crc);
    digest = ExtendDigest(digest, crc);
    unsigned char c[4];
    PutU32(c, crc);
    return Put(c, 4);
  };
  if (st.ok() && r.sparse) {
    const size_t id_bytes = r.row_ids.size() * sizeof(int64_t);
    uint32_t crc = Checksum(r.row_ids.data(), id_bytes);
    digest = ExtendDigest(digest, crc);
    st = Put(r.row_ids.data(), id_bytes);
    unsigned char c[4];
    PutU32(c, crc);
    if (st.ok()) st = Put(c, 4);
  }
  if (st.ok()) st = gathered ? put_gathered(0) : put_block(r.values);
  for (size_t i = 0; st.ok() && i < r.slots.size(); ++i) {
    st = gathered ? put_gathered(1 + i) : put_block(r.slots[i].second);
  }
  if (!st.ok()) return Fail(st);
  digest_ = digest;
  ++records_;
  return Status::Ok();
}

Result<ShardFileInfo> ShardWriter::Commit() {
  if (!error_.ok()) return error_;
  if (committed_ || !fd_.valid()) return FailedPrecondition(path_ + ": writer already committed");
  unsigned char f[kFooterBytes] = {};
  std::memcpy(f, kFooterMagic, 8);
  PutU64(f + 8, records_);
  PutU64(f + 16, offset_ + kFooterBytes);
  PutU32(f + 24, digest_);
  PutU32(f + 28, Checksum(f, 28));
  Status st = Put(f, sizeof(f));
  if (st.ok()) st = Flush();
  if (st.ok()) st = FsyncFd(fd_.get(), tmp_path_);
  if (st.ok()) st = fd_.Close(tmp_path_);
  if (st.ok() && ::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    st = ErrnoStatus(path_, "rename from " + tmp_path_, errno);
  }
  if (!st.ok()) return Fail(st);
  committed_ = true;
  tmp_path_.clear();
  std::filesystem::path p(path_);
  std::string parent = p.parent_path().string();
  st = FsyncDir(parent.empty() ? "." : parent);
  if (!st.ok()) {
    error_ = st;
    return st;
  }
  return ShardFileInfo{p.filename().string(), offset_, digest_};
}

// ---------------------------------------------------------------------------------------
// ShardReader

Result<ShardReader> ShardReader::Open(std::string path) {
  ShardReader r;
  r.path_ = std::move(path);
  const std::string& p = r.path_;
  r.fd_ = UniqueFd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!r.fd_.valid()) return ErrnoStatus(p, "open", errno);
  struct stat st {};
  if (::fstat(r.fd_.get(), &st) != 0) return ErrnoStatus(p, "stat", errno);
  if (!S_ISREG(st.st_mode)) return DataLoss(p + ": not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes + kFooterBytes) {
    return DataLoss(p + ": truncated: " + std::to_string(size) +
                    " bytes, a shard file has at least 64");
  }
  unsigned char h[kHeaderBytes];
  PS_RETURN_IF_ERROR(PreadAll(r.fd_.get(), h, sizeof(h), 0, p));
  if (std::memcmp(h, kFileMagic, 8) != 0) {
    return DataLoss(p + ": bad magic (not a pstrain shard file)");
  }
  if (GetU32(h + 28) != Checksum(h, 28)) return DataLoss(p + ": file header checksum mismatch");
  if (GetU32(h + 8) != 1 && GetU32(h + 8) != kShardFormatVersion) {
    return DataLoss(p + ": unsupported format version " + std::to_string(GetU32(h + 8)) +
                    " (this build reads versions 1 and 2)");
  }
  r.version_ = GetU32(h + 8);
  if (GetU32(h + 24) != 0) return DataLoss(p + ": reserved header field is not 0");
  if (GetU32(h + 12) > static_cast<uint32_t>(std::numeric_limits<int>::max()) ||
      GetU64(h + 16) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return DataLoss(p + ": ps index or global step out of range");
  }
  r.ps_index_ = static_cast<int>(GetU32(h + 12));
  r.global_step_ = static_cast<int64_t>(GetU64(h + 16));
  r.header_crc_ = GetU32(h + 28);

  unsigned char f[kFooterBytes];
  PS_RETURN_IF_ERROR(PreadAll(r.fd_.get(), f, sizeof(f), size - kFooterBytes, p));
  if (std::memcmp(f, kFooterMagic, 8) != 0 || GetU32(f + 28) != Checksum(f, 28)) {
    return DataLoss(p + ": footer missing or corrupt (the file is truncated, has bytes "
                        "appended, or was never committed)");
  }
  if (GetU64(f + 16) != size) {
    return DataLoss(p + ": footer says " + std::to_string(GetU64(f + 16)) +
                    " bytes but the file has " + std::to_string(size));
  }
  const uint64_t count = GetU64(f + 8);
  // Each record takes at least a header and one 4-byte checksum.
  if (count > (size - kHeaderBytes - kFooterBytes) / (kRecordHeaderBytes + 4)) {
    return DataLoss(p + ": footer says " + std::to_string(count) +
                    " records, more than the file can hold");
  }
  r.record_count_ = count;
  r.file_bytes_ = size;
  r.digest_ = GetU32(f + 24);
  return r;
}

Status ShardReader::Walk(DataMode mode, const Sink* sink, const SparseSink* sparse,
                         const RecordDone& done) {
  const std::string& p = path_;
  const int fd = fd_.get();
  const uint64_t end = file_bytes_ - kFooterBytes;
  uint64_t off = kHeaderBytes;
  uint32_t digest = ExtendDigest(0, header_crc_);
  std::vector<unsigned char> scratch;
  std::string meta_blob;

  for (uint64_t i = 0; i < record_count_; ++i) {
    const uint64_t record_offset = off;
    if (end - off < kRecordHeaderBytes) {
      return DataLoss(AtRecord(p, i, off) + ": truncated (footer says " +
                      std::to_string(record_count_) + " records)");
    }
    unsigned char h[kRecordHeaderBytes];
    PS_RETURN_IF_ERROR(PreadAll(fd, h, sizeof(h), off, p));
    if (std::memcmp(h, kRecordMagic, 4) != 0) return DataLoss(AtRecord(p, i, off) + ": bad record magic");
    if (GetU32(h + 28) != Checksum(h, 28)) {
      return DataLoss(AtRecord(p, i, off) + ": record header checksum mismatch");
    }
    const uint32_t kind = GetU32(h + 4);
    if (kind != kKindRowBlock && (kind != kKindSparseRows || version_ < 2)) {
      return DataLoss(AtRecord(p, i, off) + ": unknown record kind " + std::to_string(kind));
    }
    const bool is_sparse = kind == kKindSparseRows;
    const uint32_t meta_len = GetU32(h + 8);
    const uint32_t num_blocks = GetU32(h + 12);
    const uint64_t block_bytes = GetU64(h + 16);
    off += kRecordHeaderBytes;
    const uint64_t left = end - off;
    if (meta_len > kMaxMetaBytes || meta_len > left) {
      return DataLoss(AtRecord(p, i, record_offset) + ": metadata length " +
                      std::to_string(meta_len) + " exceeds the file or the 1 MiB limit");
    }
    if (num_blocks < 1 || num_blocks > 1 + kMaxSlots || block_bytes % sizeof(float) != 0 ||
        block_bytes > left || num_blocks > (left - meta_len) / (block_bytes + 4)) {
      return DataLoss(AtRecord(p, i, record_offset) + ": " + std::to_string(num_blocks) +
                      " blocks of " + std::to_string(block_bytes) +
                      " bytes do not fit in the file (truncated?)");
    }
    meta_blob.resize(meta_len);
    PS_RETURN_IF_ERROR(PreadAll(fd, meta_blob.data(), meta_len, off, p));
    off += meta_len;
    const uint32_t meta_crc = GetU32(h + 24);
    if (meta_crc != Checksum(meta_blob.data(), meta_len)) {
      return DataLoss(AtRecord(p, i, record_offset) + ": metadata checksum mismatch");
    }
    RecordMeta meta;
    meta.index = static_cast<int>(i);
    if (std::string problem = ParseMeta(meta_blob, is_sparse, &meta); !problem.empty()) {
      return DataLoss(AtRecord(p, i, record_offset) + ": malformed metadata: " + problem);
    }
    const uint64_t elements = static_cast<uint64_t>(meta.stored_rows * meta.cols);
    if (num_blocks != 1 + meta.slot_names.size() || block_bytes != elements * sizeof(float)) {
      return DataLoss(meta.Describe(p) + ": record header disagrees with the metadata");
    }
    digest = ExtendDigest(ExtendDigest(digest, GetU32(h + 28)), meta_crc);

    std::string data_error;
    uint64_t id_bytes = 0;
    const bool to_sparse_sink = is_sparse && mode == DataMode::kSink && sparse != nullptr;
    if (is_sparse) {
      const uint64_t n = static_cast<uint64_t>(meta.stored_rows);
      const uint64_t room = end - off;
      if (n > room / 8 || n * 8 + 4 > room ||
          num_blocks > (room - n * 8 - 4) / (block_bytes + 4)) {
        return DataLoss(meta.Describe(p) + ": " + std::to_string(n) +
                        " stored rows do not fit in the file (truncated?)");
      }
      id_bytes = n * 8 + 4;
      if (mode == DataMode::kSkip) {
        off += n * 8;
      } else {
        std::vector<int64_t> ids(n);
        PS_RETURN_IF_ERROR(PreadAll(fd, ids.data(), n * 8, off, p));
        off += n * 8;
        unsigned char c[4];
        PS_RETURN_IF_ERROR(PreadAll(fd, c, 4, off, p));
        const bool crc_ok = GetU32(c) == Checksum(ids.data(), n * 8);
        bool order_ok = true;
        for (uint64_t k = 0; k < n && order_ok; ++k) {
          order_ok = ids[k] >= 0 && ids[k] < meta.rows && (k == 0 || ids[k] > ids[k - 1]);
        }
        if (mode == DataMode::kSink) {
          if (!crc_ok) return DataLoss(meta.Describe(p) + ": row ids checksum mismatch");
          if (!order_ok) return DataLoss(meta.Describe(p) + ": row ids not ascending in [0, rows)");
          if (to_sparse_sink) PS_RETURN_IF_ERROR(sparse->rows(meta, ids));
        } else if (!crc_ok) {
          data_error = "row ids checksum mismatch";
        } else if (!order_ok) {
          data_error = "row ids not ascending in [0, rows)";
        }
      }
      unsigned char c[4];
      PS_RETURN_IF_ERROR(PreadAll(fd, c, 4, off, p));
      off += 4;
      digest = ExtendDigest(digest, GetU32(c));
    }
    for (uint32_t b = 0; b < num_blocks; ++b) {
      const std::string& name = b == 0 ? std::string("values") : meta.slot_names[b - 1];
      const std::string label = b == 0 ? "values" : "slot " + Quote(name);
      std::span<float> dst;
      if (mode == DataMode::kSink && elements > 0 && !is_sparse) {
        auto got = (*sink)(meta, name);
        if (!got.ok()) return got.status();
        dst = *got;
        if (!dst.empty() && dst.size() != elements) {
          return InvalidArgument(meta.Describe(p) + ": sink gave " + std::to_string(dst.size()) +
                                 " floats for " + label + ", the block has " +
                                 std::to_string(elements));
        }
      }
      uint32_t crc = 0;
      if (mode == DataMode::kSkip) {
        off += block_bytes;
      } else if (to_sparse_sink && elements > 0) {
        const uint64_t cols = static_cast<uint64_t>(meta.cols);
        const uint64_t piece_rows = std::max<uint64_t>(1, kReadChunkBytes / 4 / cols);
        std::vector<float> piece;
        for (uint64_t first = 0; first < static_cast<uint64_t>(meta.stored_rows); first += piece_rows) {
          const uint64_t n = std::min(piece_rows, static_cast<uint64_t>(meta.stored_rows) - first);
          piece.resize(n * cols);
          const size_t bytes = piece.size() * sizeof(float);
          PS_RETURN_IF_ERROR(PreadAll(fd, piece.data(), bytes, off, p));
          crc = Crc32c(crc, piece.data(), bytes);
          off += bytes;
          PS_RETURN_IF_ERROR(sparse->data(meta, name, static_cast<int64_t>(first), piece));
        }
      } else if (!dst.empty()) {
        auto* out = reinterpret_cast<unsigned char*>(dst.data());
        for (uint64_t done_bytes = 0; done_bytes < block_bytes;) {
          size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunkBytes, block_bytes - done_bytes));
          PS_RETURN_IF_ERROR(PreadAll(fd, out + done_bytes, n, off, p));
          crc = Crc32c(crc, out + done_bytes, n);
          done_bytes += n;
          off += n;
        }
      } else {
        if (scratch.empty() && block_bytes > 0) scratch.resize(kReadChunkBytes);
        for (uint64_t done_bytes = 0; done_bytes < block_bytes;) {
          size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunkBytes, block_bytes - done_bytes));
          PS_RETURN_IF_ERROR(PreadAll(fd, scratch.data(), n, off, p));
          crc = Crc32c(crc, scratch.data(), n);
          done_bytes += n;
          off += n;
        }
      }
      unsigned char c[4];
      PS_RETURN_IF_ERROR(PreadAll(fd, c, 4, off, p));
      off += 4;
      const uint32_t stored = GetU32(c);
      digest = ExtendDigest(digest, stored);
      if (mode != DataMode::kSkip && stored != MaskedCrc32c(crc)) {
        std::string msg = label + " checksum mismatch";
        if (mode == DataMode::kSink) return DataLoss(meta.Describe(p) + ": " + msg);
        if (data_error.empty()) data_error = msg;
      }
    }
    if (done) done(meta, record_offset, block_bytes * num_blocks + id_bytes, std::move(data_error));
  }
  if (off != end) {
    return DataLoss(p + ": " + std::to_string(end - off) +
                    " unexpected bytes after the last record (footer says " +
                    std::to_string(record_count_) + " records)");
  }
  if (digest != digest_) return DataLoss(p + ": footer digest does not match the records");
  return Status::Ok();
}

Status ShardReader::ReadAll(const Sink& sink, const SparseSink* sparse) {
  return Walk(DataMode::kSink, &sink, sparse, nullptr);
}

Result<std::vector<ShardRecord>> ShardReader::ReadRecords() {
  std::vector<ShardRecord> out;
  Sink sink = [&out](const RecordMeta& meta, std::string_view block) -> Result<std::span<float>> {
    if (out.empty() || out.back().meta.index != meta.index) {
      out.push_back(ShardRecord{meta, {}, {}, {}});
    }
    ShardRecord& r = out.back();
    const auto n = static_cast<size_t>(meta.elements());
    if (block == "values") {
      r.values.resize(n);
      return std::span<float>(r.values);
    }
    r.slots.emplace_back(std::string(block), std::vector<float>(n));
    return std::span<float>(r.slots.back().second);
  };
  SparseSink sparse;
  sparse.rows = [&out](const RecordMeta& meta, std::span<const int64_t> ids) -> Status {
    ShardRecord r{meta, {ids.begin(), ids.end()}, {}, {}};
    r.values.resize(static_cast<size_t>(meta.elements()));
    for (const auto& s : meta.slot_names) {
      r.slots.emplace_back(s, std::vector<float>(static_cast<size_t>(meta.elements())));
    }
    out.push_back(std::move(r));
    return Status::Ok();
  };
  sparse.data = [&out](const RecordMeta& meta, std::string_view block, int64_t first,
                       std::span<const float> data) -> Status {
    ShardRecord& r = out.back();
    std::vector<float>* dst = &r.values;
    for (auto& [name, v] : r.slots) {
      if (name == block) dst = &v;
    }
    std::copy(data.begin(), data.end(), dst->begin() + first * meta.cols);
    return Status::Ok();
  };
  // Records without data (rows or cols 0) never reach the sink; pick them up here.
  RecordDone done = [&out](const RecordMeta& meta, uint64_t, uint64_t, std::string) {
    if (out.empty() || out.back().meta.index != meta.index) {
      ShardRecord r{meta, {}, {}, {}};
      for (const auto& s : meta.slot_names) r.slots.emplace_back(s, std::vector<float>());
      out.push_back(std::move(r));
    }
  };
  PS_RETURN_IF_ERROR(Walk(DataMode::kSink, &sink, &sparse, done));
  return out;
}

Result<ShardSummary> ShardReader::Summarize(bool verify_data) {
  ShardSummary s;
  s.path = path_;
  s.ps_index = ps_index_;
  s.global_step = global_step_;
  s.file_bytes = file_bytes_;
  s.digest = digest_;
  RecordDone done = [&s, verify_data](const RecordMeta& meta, uint64_t offset, uint64_t bytes,
                                      std::string error) {
    s.records.push_back(RecordSummary{meta, offset, bytes, verify_data, std::move(error)});
  };
  PS_RETURN_IF_ERROR(
      Walk(verify_data ? DataMode::kVerifyCollect : DataMode::kSkip, nullptr, nullptr, done));
  return s;
}

Result<ShardSummary> Inspect(const std::string& path, bool verify_data) {
  PS_ASSIGN_OR_RETURN(ShardReader reader, ShardReader::Open(path));
  return reader.Summarize(verify_data);
}

}  // namespace ps::ckpt

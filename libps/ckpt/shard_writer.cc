// ShardWriter (shard_file.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "libps/ckpt/record_format.h"

namespace ps::ckpt {

using namespace format;

namespace {
constexpr size_t kStagingBytes = size_t{1} << 20;
// Blocks at least this large are written straight from the caller's span.
constexpr size_t kDirectWriteBytes = size_t{256} << 10;
}  // namespace

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
  const cluster::ShardLayout& l = r.layout;
  const bool sparse = l.lazy || r.delta;
  const int64_t stored_rows = sparse ? static_cast<int64_t>(r.row_ids.size()) : l.rows;
  const std::string what = path_ + ": record " + std::to_string(records_) + " (var " +
                           Quote(l.var) + " shard " + std::to_string(l.shard) + ")";
  if (std::string problem = CheckRecord(l, slot_names, stored_rows); !problem.empty()) {
    return InvalidArgument(what + ": " + problem);
  }
  auto ascending = [&l](std::span<const int64_t> ids) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= l.rows || (i > 0 && ids[i] <= ids[i - 1])) return false;
    }
    return true;
  };
  if (sparse && !ascending(r.row_ids)) {
    return InvalidArgument(what + ": row_ids must be strictly ascending in [0, rows)");
  }
  if (!r.deleted_ids.empty() && (!r.delta || !l.lazy)) {
    return InvalidArgument(what + ": deleted_ids need a delta record of a lazy shard");
  }
  if (!ascending(r.deleted_ids))
    return InvalidArgument(what + ": deleted_ids must be strictly ascending in [0, rows)");
  const bool gathered = sparse && r.gather != nullptr;
  const auto elements = static_cast<uint64_t>(stored_rows * l.cols);
  if (!gathered && r.values.size() != elements) {
    return InvalidArgument(what + ": values has " + std::to_string(r.values.size()) +
                           " floats, rows * cols = " + std::to_string(elements));
  }
  for (const auto& [name, span] : r.slots) {
    if (!gathered && span.size() != elements) {
      return InvalidArgument(what + ": slot " + Quote(name) + " has " +
                             std::to_string(span.size()) +
                             " floats, rows * cols = " + std::to_string(elements));
    }
  }

  const std::string meta =
      EncodeMeta(l, slot_names, stored_rows, r.delta, static_cast<int64_t>(r.deleted_ids.size()));
  PS_ASSERT(meta.size() <= kMaxMetaBytes);  // bounded by the name, rank and slot limits

  const uint64_t block_bytes = elements * sizeof(float);
  unsigned char h[kRecordHeaderBytes] = {};
  std::memcpy(h, kRecordMagic, 4);
  PutU32(h + 4, r.delta ? kKindDeltaRows : sparse ? kKindSparseRows : kKindRowBlock);
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
    const size_t cols = static_cast<size_t>(l.cols);
    const size_t piece_rows =
        std::max<size_t>(1, kChunkBytes / sizeof(float) / std::max<size_t>(cols, 1));
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
  if (st.ok() && sparse) {
    const size_t id_bytes = r.row_ids.size() * sizeof(int64_t);
    const size_t deleted_bytes = r.deleted_ids.size() * sizeof(int64_t);
    uint32_t crc = MaskedCrc32c(
        Crc32c(Crc32c(0, r.row_ids.data(), id_bytes), r.deleted_ids.data(), deleted_bytes));
    digest = ExtendDigest(digest, crc);
    st = Put(r.row_ids.data(), id_bytes);
    if (st.ok() && deleted_bytes > 0) st = Put(r.deleted_ids.data(), deleted_bytes);
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

}  // namespace ps::ckpt

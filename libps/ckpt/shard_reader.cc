// ShardReader and Inspect (shard_file.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "libps/ckpt/record_format.h"

namespace ps::ckpt {

using namespace format;

namespace {
std::string AtRecord(const std::string& path, uint64_t index, uint64_t offset) {
  return path + ": record " + std::to_string(index) + " at offset " + std::to_string(offset);
}
}  // namespace

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
  if (GetU32(h + 8) < 1 || GetU32(h + 8) > kShardFormatVersion) {
    return DataLoss(p + ": unsupported format version " + std::to_string(GetU32(h + 8)) +
                    " (this build reads versions 1 to 3)");
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
    return DataLoss(p +
                    ": footer missing or corrupt (the file is truncated, has bytes "
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

Status ShardReader::Walk(DataMode mode, const Visitor* visitor, const RecordDone& done) {
  const std::string& p = path_;
  const int fd = fd_.get();
  const uint64_t end = file_bytes_ - kFooterBytes;
  uint64_t off = kHeaderBytes;
  uint32_t digest = ExtendDigest(0, header_crc_);
  std::vector<unsigned char> scratch;
  std::string meta_blob;
  // Reads `bytes` at `off` into `out` (or into scratch when null), extending `crc`.
  auto read_block_part = [&](unsigned char* out, uint64_t bytes, uint32_t* crc) -> Status {
    if (out == nullptr && scratch.empty() && bytes > 0) scratch.resize(kChunkBytes);
    for (uint64_t done_bytes = 0; done_bytes < bytes;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, bytes - done_bytes));
      unsigned char* dst = out != nullptr ? out + done_bytes : scratch.data();
      PS_RETURN_IF_ERROR(PreadAll(fd, dst, n, off, p));
      *crc = Crc32c(*crc, dst, n);
      done_bytes += n;
      off += n;
    }
    return Status::Ok();
  };

  for (uint64_t i = 0; i < record_count_; ++i) {
    const uint64_t record_offset = off;
    if (end - off < kRecordHeaderBytes) {
      return DataLoss(AtRecord(p, i, off) + ": truncated (footer says " +
                      std::to_string(record_count_) + " records)");
    }
    unsigned char h[kRecordHeaderBytes];
    PS_RETURN_IF_ERROR(PreadAll(fd, h, sizeof(h), off, p));
    if (std::memcmp(h, kRecordMagic, 4) != 0)
      return DataLoss(AtRecord(p, i, off) + ": bad record magic");
    if (GetU32(h + 28) != Checksum(h, 28)) {
      return DataLoss(AtRecord(p, i, off) + ": record header checksum mismatch");
    }
    const uint32_t kind = GetU32(h + 4);
    if (kind != kKindRowBlock && (kind != kKindSparseRows || version_ < 2) &&
        (kind != kKindDeltaRows || version_ < 3)) {
      return DataLoss(AtRecord(p, i, off) + ": unknown record kind " + std::to_string(kind));
    }
    const bool is_sparse = kind == kKindSparseRows || kind == kKindDeltaRows;
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
    if (std::string problem = ParseMeta(meta_blob, kind, &meta); !problem.empty()) {
      return DataLoss(AtRecord(p, i, record_offset) + ": malformed metadata: " + problem);
    }
    // A forged header can make rows * cols overflow: check before comparing sizes.
    uint64_t elements = 0;
    if (meta.stored_rows < 0 || meta.layout.cols < 0 ||
        __builtin_mul_overflow(static_cast<uint64_t>(meta.stored_rows),
                               static_cast<uint64_t>(meta.layout.cols), &elements) ||
        elements > UINT64_MAX / sizeof(float) || num_blocks != 1 + meta.slot_names.size() ||
        block_bytes != elements * sizeof(float)) {
      return DataLoss(meta.Describe(p) + ": record header disagrees with the metadata");
    }
    digest = ExtendDigest(ExtendDigest(digest, GetU32(h + 28)), meta_crc);

    // What the visitor wants of this record: nothing (skip_data), or these rows.
    std::vector<RowRange> ranges{{0, meta.stored_rows}};
    bool skip_data = mode == DataMode::kSkip;
    if (mode == DataMode::kSink && visitor->select) {
      PS_ASSIGN_OR_RETURN(auto selected, visitor->select(meta));
      if (!selected) {
        skip_data = true;
      } else {
        ranges = std::move(*selected);
        int64_t next = 0;
        for (const RowRange& r : ranges) {
          if (is_sparse) break;  // its rows all go to the SparseSink
          if (r.first < next || r.count < 0 || r.first > meta.stored_rows - r.count) {
            return InvalidArgument(
                meta.Describe(p) +
                ": selected rows are not ascending and disjoint within the record");
          }
          next = r.first + r.count;
        }
      }
    }
    std::string data_error;
    uint64_t id_bytes = 0;
    const SparseSink* sparse =
        mode == DataMode::kSink && visitor->sparse.rows ? &visitor->sparse : nullptr;
    const bool to_sparse_sink = is_sparse && !skip_data && sparse != nullptr;
    if (is_sparse) {
      const uint64_t stored = static_cast<uint64_t>(meta.stored_rows);
      const uint64_t n = stored + static_cast<uint64_t>(meta.deleted_rows);  // ids in the record
      const uint64_t room = end - off;
      if (n > room / 8 || n * 8 + 4 > room || num_blocks > (room - n * 8 - 4) / (block_bytes + 4)) {
        return DataLoss(meta.Describe(p) + ": " + std::to_string(n) +
                        " stored rows do not fit in the file (truncated?)");
      }
      id_bytes = n * 8 + 4;
      if (skip_data) {
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
          // Stored and deleted ids are each ascending.
          order_ok = ids[k] >= 0 && ids[k] < meta.layout.rows &&
                     (k == 0 || k == stored || ids[k] > ids[k - 1]);
        }
        if (mode == DataMode::kSink) {
          if (!crc_ok) return DataLoss(meta.Describe(p) + ": row ids checksum mismatch");
          if (!order_ok) return DataLoss(meta.Describe(p) + ": row ids not ascending in [0, rows)");
          const std::span<const int64_t> all(ids);
          if (to_sparse_sink && sparse->deleted && meta.deleted_rows > 0) {
            PS_RETURN_IF_ERROR(sparse->deleted(meta, all.subspan(stored)));
          }
          if (to_sparse_sink) PS_RETURN_IF_ERROR(sparse->rows(meta, all.first(stored)));
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
      uint32_t crc = 0;
      if (skip_data) {
        off += block_bytes;
      } else if (to_sparse_sink && elements > 0) {
        const uint64_t cols = static_cast<uint64_t>(meta.layout.cols);
        const uint64_t piece_rows = std::max<uint64_t>(1, kChunkBytes / 4 / cols);
        std::vector<float> piece;
        for (uint64_t first = 0; first < static_cast<uint64_t>(meta.stored_rows);
             first += piece_rows) {
          const uint64_t n = std::min(piece_rows, static_cast<uint64_t>(meta.stored_rows) - first);
          piece.resize(n * cols);
          const size_t bytes = piece.size() * sizeof(float);
          PS_RETURN_IF_ERROR(PreadAll(fd, piece.data(), bytes, off, p));
          crc = Crc32c(crc, piece.data(), bytes);
          off += bytes;
          if (sparse->data)
            PS_RETURN_IF_ERROR(sparse->data(meta, name, static_cast<int64_t>(first), piece));
        }
      } else if (mode == DataMode::kSink && !is_sparse && visitor->dense) {
        // The selected ranges straight into the visitor's memory, the rows between them
        // through scratch: one pass over the block, in file order, for its checksum.
        const uint64_t row_bytes = static_cast<uint64_t>(meta.layout.cols) * sizeof(float);
        int64_t pos = 0;
        for (const RowRange& r : ranges) {
          if (r.count == 0) continue;
          PS_RETURN_IF_ERROR(
              read_block_part(nullptr, static_cast<uint64_t>(r.first - pos) * row_bytes, &crc));
          PS_ASSIGN_OR_RETURN(std::span<float> dst, visitor->dense(meta, name, r));
          const uint64_t want =
              static_cast<uint64_t>(r.count) * static_cast<uint64_t>(meta.layout.cols);
          if (!dst.empty() && dst.size() != want) {
            const bool whole = r.first == 0 && r.count == meta.stored_rows;
            return InvalidArgument(meta.Describe(p) + ": sink gave " + std::to_string(dst.size()) +
                                   " floats for " + label +
                                   (whole
                                        ? ", the block has "
                                        : " rows [" + std::to_string(r.first) + ", " +
                                              std::to_string(r.first + r.count) + "), they have ") +
                                   std::to_string(want));
          }
          PS_RETURN_IF_ERROR(
              read_block_part(dst.empty() ? nullptr : reinterpret_cast<unsigned char*>(dst.data()),
                              want * sizeof(float), &crc));
          pos = r.first + r.count;
        }
        PS_RETURN_IF_ERROR(read_block_part(
            nullptr, static_cast<uint64_t>(meta.stored_rows - pos) * row_bytes, &crc));
      } else {
        PS_RETURN_IF_ERROR(read_block_part(nullptr, block_bytes, &crc));
      }
      unsigned char c[4];
      PS_RETURN_IF_ERROR(PreadAll(fd, c, 4, off, p));
      off += 4;
      const uint32_t stored = GetU32(c);
      digest = ExtendDigest(digest, stored);
      if (!skip_data && stored != MaskedCrc32c(crc)) {
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
  Visitor v;
  v.dense = [&sink](const RecordMeta& meta, std::string_view block, RowRange) {
    return sink(meta, block);
  };
  if (sparse != nullptr) v.sparse = *sparse;
  return Walk(DataMode::kSink, &v, nullptr);
}

Status ShardReader::Read(const Visitor& visitor) {
  return Walk(DataMode::kSink, &visitor, nullptr);
}

Result<std::vector<ShardRecord>> ShardReader::ReadRecords(bool values_only) {
  std::vector<ShardRecord> out;
  // The slot vectors of a new record (none when only the values are kept).
  auto slots_of = [values_only](const RecordMeta& meta, size_t n) {
    std::vector<std::pair<std::string, std::vector<float>>> slots;
    if (values_only) return slots;
    for (const auto& s : meta.slot_names) slots.emplace_back(s, std::vector<float>(n));
    return slots;
  };
  Sink sink = [&out, values_only](const RecordMeta& meta,
                                  std::string_view block) -> Result<std::span<float>> {
    if (out.empty() || out.back().meta.index != meta.index) {
      out.push_back(
          ShardRecord{.meta = meta, .row_ids = {}, .deleted_ids = {}, .values = {}, .slots = {}});
    }
    ShardRecord& r = out.back();
    const auto n = static_cast<size_t>(meta.elements());
    if (block == "values") {
      r.values.resize(n);
      return std::span<float>(r.values);
    }
    if (values_only) return std::span<float>();  // read and verified, not kept
    r.slots.emplace_back(std::string(block), std::vector<float>(n));
    return std::span<float>(r.slots.back().second);
  };
  SparseSink sparse;
  sparse.rows = [&out, &slots_of](const RecordMeta& meta, std::span<const int64_t> ids) -> Status {
    if (!out.empty() && out.back().meta.index == meta.index) {  // a delta's deleted ids came first
      out.back().row_ids.assign(ids.begin(), ids.end());
      return Status::Ok();
    }
    ShardRecord r{.meta = meta,
                  .row_ids = {ids.begin(), ids.end()},
                  .deleted_ids = {},
                  .values = {},
                  .slots = slots_of(meta, static_cast<size_t>(meta.elements()))};
    r.values.resize(static_cast<size_t>(meta.elements()));
    out.push_back(std::move(r));
    return Status::Ok();
  };
  sparse.deleted = [&out, &slots_of](const RecordMeta& meta,
                                     std::span<const int64_t> ids) -> Status {
    ShardRecord r{.meta = meta,
                  .row_ids = {},
                  .deleted_ids = {ids.begin(), ids.end()},
                  .values = {},
                  .slots = slots_of(meta, static_cast<size_t>(meta.elements()))};
    r.values.resize(static_cast<size_t>(meta.elements()));
    out.push_back(std::move(r));
    return Status::Ok();
  };
  sparse.data = [&out, values_only](const RecordMeta& meta, std::string_view block, int64_t first,
                                    std::span<const float> data) -> Status {
    ShardRecord& r = out.back();
    std::vector<float>* dst = &r.values;
    if (block != "values") {
      if (values_only) return Status::Ok();  // verified by the reader, not kept
      for (auto& [name, v] : r.slots) {
        if (name == block) dst = &v;
      }
    }
    std::copy(data.begin(), data.end(), dst->begin() + first * meta.layout.cols);
    return Status::Ok();
  };
  // A sparse record without stored rows never reaches a sink; pick it up here.
  RecordDone done = [&out, &slots_of](const RecordMeta& meta, uint64_t, uint64_t,
                                      const std::string&) {
    if (out.empty() || out.back().meta.index != meta.index) {
      out.push_back(ShardRecord{.meta = meta,
                                .row_ids = {},
                                .deleted_ids = {},
                                .values = {},
                                .slots = slots_of(meta, 0)});
    }
  };
  Visitor v;
  v.dense = [&sink](const RecordMeta& meta, std::string_view block, RowRange) {
    return sink(meta, block);
  };
  v.sparse = std::move(sparse);
  PS_RETURN_IF_ERROR(Walk(DataMode::kSink, &v, done));
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
  PS_RETURN_IF_ERROR(Walk(verify_data ? DataMode::kVerifyCollect : DataMode::kSkip, nullptr, done));
  return s;
}

Result<ShardSummary> Inspect(const std::string& path, bool verify_data) {
  PS_ASSIGN_OR_RETURN(ShardReader reader, ShardReader::Open(path));
  return reader.Summarize(verify_data);
}

}  // namespace ps::ckpt

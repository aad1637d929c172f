// The byte layout of shard files (documented in shard_file.h), shared by the writer
// (shard_writer.cc) and the reader (shard_reader.cc): constants, little-endian field
// access, checksums, and a record's metadata encoded and parsed. Private to libps/ckpt.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "libps/ckpt/shard_file.h"
#include "libps/core/crc32c.h"

namespace ps::ckpt::format {

static_assert(std::endian::native == std::endian::little,
              "shard files are little-endian and written straight from memory");

inline constexpr char kFileMagic[8] = {'P', 'S', 'C', 'K', 'P', 'T', '0', '1'};
inline constexpr char kFooterMagic[8] = {'P', 'S', 'C', 'K', 'E', 'N', 'D', '1'};
inline constexpr char kRecordMagic[4] = {'P', 'S', 'R', 'C'};
inline constexpr uint32_t kKindRowBlock = 1;
inline constexpr uint32_t kKindSparseRows = 2;  // a lazy shard's created rows (version 2)
inline constexpr uint32_t kKindDeltaRows = 3;   // changed and deleted rows (version 3)
inline constexpr uint32_t kDeltaFlagLazy = 1;
inline constexpr size_t kHeaderBytes = 32;
inline constexpr size_t kRecordHeaderBytes = 32;
inline constexpr size_t kFooterBytes = 32;
inline constexpr uint32_t kMaxMetaBytes = 1u << 20;
// Reads (and gathered writes) go in pieces of this size, checksummed while in cache.
inline constexpr size_t kChunkBytes = size_t{4} << 20;

inline void PutU32(unsigned char* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void PutU64(unsigned char* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint32_t GetU32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t GetU64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint32_t Checksum(const void* data, size_t n) { return MaskedCrc32c(Crc32c(0, data, n)); }
// The footer's digest chains every stored checksum, in file order.
inline uint32_t ExtendDigest(uint32_t digest, uint32_t stored_crc) {
  unsigned char b[4];
  PutU32(b, stored_crc);
  return Crc32c(digest, b, 4);
}

inline std::string Quote(const std::string& s) { return "\"" + s + "\""; }

// The metadata of a record: layout, slot names and, for a sparse (lazy) record, the
// number of stored rows. Precondition: CheckRecord(layout, slot_names, stored_rows) is OK.
std::string EncodeMeta(const cluster::ShardLayout& layout,
                       const std::vector<std::string>& slot_names, int64_t stored_rows,
                       bool delta = false, int64_t deleted_rows = 0);
// Parses a metadata blob of a record of kind `kind` into `meta` (index untouched) and
// checks it with CheckRecord. Empty string on success, else what is wrong.
std::string ParseMeta(std::string_view blob, uint32_t kind, RecordMeta* meta);

// What the writer and the reader both require of a record, beyond its layout: slot names
// non-empty, unique, not "values", at most kMaxSlots of at most kMaxNameBytes; and for a
// sparse record stored_rows in [0, rows] with stored_rows * cols within 2^40 elements.
// Empty string when consistent, else the problem (ValidateShardLayout's message for a bad
// layout).
std::string CheckRecord(const cluster::ShardLayout& layout,
                        const std::vector<std::string>& slot_names, int64_t stored_rows);

}  // namespace ps::ckpt::format

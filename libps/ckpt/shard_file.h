// Shard files: what one ps task writes for one checkpoint (model_dir/ckpt-<step>/ps-<i>.shard).
//
// Binary, little-endian (the build refuses big-endian hosts). Offsets in bytes. Every
// checksum is TensorFlow's masked CRC-32C (MaskedCrc32c in libps/core/crc32c.h), stored u32.
//
// File header (32 bytes)
//   | off | size | field                                                  |
//   |   0 |    8 | magic "PSCKPT01"                                       |
//   |   8 |    4 | u32 format version (3; versions 1 (no kind-2 records) and 2 (no
//   |     |      |   kind-3 records) are read too)                        |
//   |  12 |    4 | u32 ps index                                           |
//   |  16 |    8 | i64 global step                                        |
//   |  24 |    4 | u32 reserved, 0                                        |
//   |  28 |    4 | u32 crc of bytes [0, 28)                               |
// Records, back to back, each:
//   Record header (32 bytes)
//   |   0 |    4 | record magic "PSRC"                                    |
//   |   4 |    4 | u32 kind: 1 = float32 row block of a (possibly sharded) variable, |
//   |     |      |   2 = sparse rows of a lazy shard (only the created rows),  |
//   |     |      |   3 = changed rows of a shard, dense or lazy (delta checkpoints) |
//   |   8 |    4 | u32 meta_len (<= 1 MiB)                                |
//   |  12 |    4 | u32 num_blocks = 1 + number of slots                  |
//   |  16 |    8 | u64 block_bytes = stored rows * cols * 4 (every float block has this size;
//   |     |      |   stored rows = rows for kind 1, n for kind 2)           |
//   |  24 |    4 | u32 crc of the metadata bytes                          |
//   |  28 |    4 | u32 crc of bytes [0, 28) of this header               |
//   Metadata (meta_len bytes)
//   |     |    4 | u32 n, then n bytes: variable name (UTF-8)             |
//   |     |    4 | i32 shard                                              |
//   |     |    4 | i32 num_shards                                         |
//   |     |    8 | i64 row_begin   (first row of the full variable in this shard) |
//   |     |    8 | i64 rows                                               |
//   |     |    8 | i64 cols        (product of full_shape[1:], 1 for rank <= 1) |
//   |     |    4 | u32 rank, then rank x i64: full_shape                  |
//   |     |    4 | u32 num_slots, then per slot: u32 n, n bytes of name   |
//   |     |    8 | kinds 2, 3: u64 n, the number of stored rows (<= rows)  |
//   |     |    4 | kind 3 only: u32 flags, bit 0 = the shard is lazy       |
//   |     |    8 | kind 3 only: u64 d, the number of deleted rows (lazy: rows
//   |     |      |   evicted since the parent checkpoint; 0 for a dense shard) |
//   Kinds 2 and 3, the row ids block:
//   |     |  n * 8 | i64 [n] shard-local row ids, strictly ascending, < rows |
//   |     |  d * 8 | kind 3 only: i64 [d] deleted row ids, the same rules     |
//   |     |    4 | u32 crc of the ids' bytes (both lists)                 |
//   Data blocks, num_blocks of them: "values", then each slot in metadata order
//   |     | block_bytes | float32 [stored rows * cols], row-major; kinds 2, 3: row i
//   |     |      |   of the block belongs to row id i                      |
//   |     |    4 | u32 crc of the block's bytes                           |
// Footer (32 bytes, the last bytes of the file)
//   |   0 |    8 | magic "PSCKEND1"                                       |
//   |   8 |    8 | u64 record count                                       |
//   |  16 |    8 | u64 file bytes, footer included                        |
//   |  24 |    4 | u32 digest: CRC-32C of all the checksum fields above, in file order |
//   |  28 |    4 | u32 crc of bytes [0, 28) of the footer                |
//
// A kind-3 record (delta checkpoints, checkpoint_dir.h) is applied on top of the state its
// parent checkpoint restored: first its deleted rows are dropped (a row not created is
// ignored), then its stored rows overwrite (lazy: create if needed) values and every
// slot. A shard a delta has no record for did not change.
//
// A record's metadata is a cluster::ShardLayout (its `lazy` is the record kind: 2 = lazy;
// kind 3: flags bit 0);
// the writer refuses, and the reader reports as DataLoss, one that fails
// cluster::ValidateShardLayout (the layout rules placement, the wire and the ps store use).
//
// Every byte of the file is covered by a checksum, and lengths are checked against the
// file size before anything is allocated or read: a truncated, extended or bit-flipped
// file is a DataLoss status naming the file, and the record where it can.
// Records are numbered from 0 in messages ("record 3" is the fourth).
//
// The digest identifies the file's contents (it chains every checksum); the MANIFEST
// records it with the size so a restore can check that the files are the ones committed,
// reading only the 64 bytes of header and footer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libps/cluster/shard_layout.h"
#include "libps/core/files.h"
#include "libps/core/status.h"

namespace ps::ckpt {

inline constexpr uint32_t kShardFormatVersion = 3;
inline constexpr size_t kMaxNameBytes = 4096;  // variable and slot names
inline constexpr size_t kMaxSlots = 64;

// One record to write. Borrows everything: the spans must stay valid during Append.
struct ShardRecordView {
  // Stored in the metadata; must pass cluster::ValidateShardLayout. A lazy layout makes a
  // sparse record (kind 2).
  cluster::ShardLayout layout;
  std::span<const float> values;  // [rows * cols]
  // Optimizer slots ("m", "v", "accumulator"...), each [rows * cols]. Names are
  // non-empty, unique and not "values".
  std::vector<std::pair<std::string, std::span<const float>>> slots;

  // Sparse records (layout.lazy) only: just the rows `row_ids` (shard-local, strictly
  // ascending, < rows) are stored; values and slots are then [row_ids.size() * cols]
  // each — or empty, with `gather` set: gather(block, first, out) writes stored rows
  // [first, first + out.size() / cols) of block `block` (0 = values, 1 + k = slots[k])
  // into out. Slot names still come from `slots`.
  std::span<const int64_t> row_ids;
  std::function<void(size_t block, size_t first, std::span<float> out)> gather;

  // A delta record (kind 3, for a dense or lazy layout): only `row_ids` are stored (as
  // for a sparse record, values/slots or gather), and `deleted_ids` (lazy only,
  // shard-local, strictly ascending, < rows) are listed as deleted.
  bool delta = false;
  std::span<const int64_t> deleted_ids;
};

// A record's metadata as read back.
struct RecordMeta {
  int index = 0;  // position in the file, from 0
  // Passes cluster::ValidateShardLayout; lazy exactly for a sparse record (kind 2: only
  // stored_rows rows, whose ids are in the record, are stored).
  cluster::ShardLayout layout;
  std::vector<std::string> slot_names;
  int64_t stored_rows = 0;   // rows in each block: layout.rows, or n for a sparse record
  bool delta = false;        // kind 3: stored rows are the changed ones (ids in the record)
  int64_t deleted_rows = 0;  // kind 3: d, the deleted row ids in the record

  int64_t elements() const { return stored_rows * layout.cols; }  // floats per block
  // `<file>: record 3 (var "dense_0/kernel" shard 1)` — the prefix of every message.
  std::string Describe(const std::string& path) const;
};

// A record read into owned memory.
struct ShardRecord {
  RecordMeta meta;
  std::vector<int64_t> row_ids;                                   // sparse records: [stored_rows]
  std::vector<int64_t> deleted_ids;                               // delta records: [deleted_rows]
  std::vector<float> values;                                      // [stored_rows * cols]
  std::vector<std::pair<std::string, std::vector<float>>> slots;  // each [stored_rows * cols]
};

// What the MANIFEST says about one shard file.
struct ShardFileInfo {
  std::string name;     // file name inside the checkpoint directory, e.g. "ps-0.shard"
  uint64_t bytes = 0;   // file size
  uint32_t digest = 0;  // the footer's digest
};

// "ps-<i>.shard"
std::string ShardFileName(int ps_index);

// Writes one shard file: Create, Append each record, Commit. The data goes to
// path + ".tmp" with large writes straight from the caller's spans; Commit writes the
// footer, fsyncs, renames to `path` and fsyncs the directory. A writer destroyed (or
// failed) before Commit removes its .tmp file. After any error the writer is dead: every
// later call returns that error. Not thread-safe; movable.
class ShardWriter {
 public:
  static Result<ShardWriter> Create(std::string path, int ps_index, int64_t global_step);

  ShardWriter(ShardWriter&&) noexcept;
  ShardWriter& operator=(ShardWriter&&) noexcept;
  ~ShardWriter();

  // InvalidArgument for an inconsistent record (its layout, sizes vs shape, names); that
  // does not kill the writer. IoError for a failed write.
  Status Append(const ShardRecordView& record);
  // Name (the file name of `path`), size and digest for the MANIFEST.
  Result<ShardFileInfo> Commit();

  const std::string& path() const { return path_; }
  int64_t records() const { return static_cast<int64_t>(records_); }
  uint64_t bytes_written() const { return offset_; }

 private:
  ShardWriter() = default;
  Status Put(const void* data, size_t n);  // staged or written straight through
  Status Flush();
  Status Fail(Status st);
  void Abandon();

  std::string path_;
  std::string tmp_path_;
  UniqueFd fd_;
  std::vector<unsigned char> buffer_;  // staging for headers, metadata and small blocks
  size_t buffered_ = 0;
  uint64_t offset_ = 0;  // bytes of the file so far, staged ones included
  uint64_t records_ = 0;
  uint32_t digest_ = 0;
  Status error_;
  bool committed_ = false;
};

// One record's entry in Inspect's listing.
struct RecordSummary {
  RecordMeta meta;
  uint64_t offset = 0;      // of the record header in the file
  uint64_t data_bytes = 0;  // all blocks, checksums excluded
  bool data_checked = false;
  std::string data_error;  // empty unless a data block failed its checksum
};

struct ShardSummary {
  std::string path;
  int ps_index = 0;
  int64_t global_step = 0;
  uint64_t file_bytes = 0;
  uint32_t digest = 0;
  std::vector<RecordSummary> records;
};

// Reads a shard file. Open verifies header and footer (and the file size against the
// footer); the Read calls walk the records verifying every checksum. They use pread,
// so the reader can be read again; one reader must not be used by two threads at once.
class ShardReader {
 public:
  // Called once per data block: `block` is "values" or a slot name. Returns where to put
  // the block's rows * cols floats: a span of exactly that size, or an empty span to skip
  // the block (it is still read and verified). An error status aborts the read and is
  // returned as is. On any error, memory already handed out holds unspecified data.
  using Sink =
      std::function<Result<std::span<float>>(const RecordMeta& meta, std::string_view block)>;
  // Sparse records (kind 2) do not go to the Sink: `rows` gets the record's row ids
  // (verified: checksum, ascending, in range) before its blocks, then `data` gets each
  // block in pieces, in order: stored rows [first, first + data.size() / cols). A piece
  // is handed out before its block's checksum is verified (as with Sink). An error status
  // aborts the read. Without a SparseSink, sparse records are verified and skipped.
  // Delta records (kind 3) go to the SparseSink too: `deleted` (if set) gets the deleted
  // row ids first, then `rows` and `data` the changed rows as for a sparse record.
  struct SparseSink {
    std::function<Status(const RecordMeta& meta, std::span<const int64_t> row_ids)> rows;
    std::function<Status(const RecordMeta& meta, std::span<const int64_t> deleted_ids)> deleted;
    std::function<Status(const RecordMeta& meta, std::string_view block, int64_t first,
                         std::span<const float> data)>
        data;
  };

  // Rows [first, first + count) of a record (indices into its stored rows).
  struct RowRange {
    int64_t first = 0;
    int64_t count = 0;
  };
  // What Read hands a record to. Every member may be unset.
  struct Visitor {
    // Called with each record's metadata before its data. nullopt skips the data unread:
    // its stored checksums only enter the footer's digest (so the data is not verified).
    // Otherwise, for a dense record, the row ranges (ascending, disjoint, within the
    // record) whose rows go to `dense`; rows outside them are read and verified only.
    // Sparse records ignore the ranges: all their rows go to sparse.rows / sparse.data.
    // Unset: every record is read whole.
    std::function<Result<std::optional<std::vector<RowRange>>>(const RecordMeta& meta)> select;
    // Dense records: called for each block ("values", then each slot) and each selected
    // range, in file order, just before those rows are read; returns where to put them
    // ([range.count * cols] floats, valid until the next call), or an empty span to
    // read and verify them only. Unset: verify only. As with Sink, memory handed out holds
    // unspecified data after an error.
    std::function<Result<std::span<float>>(const RecordMeta& meta, std::string_view block,
                                           RowRange range)>
        dense;
    SparseSink sparse;  // an unset `rows` verifies and skips sparse records
  };

  static Result<ShardReader> Open(std::string path);

  const std::string& path() const { return path_; }
  int ps_index() const { return ps_index_; }
  int64_t global_step() const { return global_step_; }
  uint64_t record_count() const { return record_count_; }
  uint64_t file_bytes() const { return file_bytes_; }
  uint32_t digest() const { return digest_; }

  // Reads every block into the memory `sink` provides, verifying as it goes.
  Status ReadAll(const Sink& sink, const SparseSink* sparse = nullptr);
  // Walks every record, handing what `visitor` selects to it; verifies every checksum of
  // the data it reads, and the footer's digest.
  Status Read(const Visitor& visitor);
  // Every record into owned memory, verifying every checksum. With values_only, the slot
  // blocks are read and verified but not kept (ShardRecord::slots empty; the metadata
  // still names them).
  Result<std::vector<ShardRecord>> ReadRecords(bool values_only = false);
  // Structure only (verify_data false: the data is not read) or everything, collecting
  // data checksum failures per record instead of stopping at the first.
  Result<ShardSummary> Summarize(bool verify_data);

 private:
  enum class DataMode { kSink, kVerifyCollect, kSkip };
  using RecordDone = std::function<void(const RecordMeta&, uint64_t offset, uint64_t data_bytes,
                                        std::string data_error)>;
  ShardReader() = default;
  Status Walk(DataMode mode, const Visitor* visitor, const RecordDone& done);

  std::string path_;
  UniqueFd fd_;
  int ps_index_ = 0;
  int64_t global_step_ = 0;
  uint64_t record_count_ = 0;
  uint64_t file_bytes_ = 0;
  uint32_t digest_ = 0;
  uint32_t header_crc_ = 0;
  uint32_t version_ = 0;
};

// Opens `path` and lists its records; with verify_data, reads all data and marks records
// whose checksums fail. Structural damage (header, footer, record headers, metadata) is
// DataLoss.
Result<ShardSummary> Inspect(const std::string& path, bool verify_data);

}  // namespace ps::ckpt

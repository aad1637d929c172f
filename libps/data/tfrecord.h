// TFRecord framing, as TensorFlow writes it (tensorflow/core/lib/io/record_writer.cc):
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   length bytes of data          | uint32 masked CRC-32C of the data
// optionally gzip-compressed as a whole (ByteStream detects it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "libps/core/status.h"
#include "libps/data/byte_stream.h"

namespace ps::data {

inline constexpr uint64_t kMaxTfRecordBytes = uint64_t{64} << 20;

// Not thread-safe.
class TfRecordReader {
 public:
  explicit TfRecordReader(std::unique_ptr<ByteStream> stream,
                          uint64_t max_record_bytes = kMaxTfRecordBytes)
      : stream_(std::move(stream)), max_record_bytes_(max_record_bytes) {}

  // The next record's data, valid until the next call; false at the end of the file.
  // Errors (InvalidArgument "<file>: record at byte offset N: ..."; N counts inflated bytes
  // for a gzip file): a truncated record, a length whose CRC does not match or that is
  // over the limit (the rest of the file cannot be framed: resumable() is false), a
  // data CRC mismatch (the reader is past the record: resumable() is true).
  Result<bool> Next(std::string_view* record);
  bool resumable() const { return resumable_; }
  // Byte offset of the record Next returned last (or failed on).
  uint64_t record_offset() const { return record_offset_; }
  const std::string& path() const { return stream_->path(); }
  // Byte offset of what follows the last record.
  uint64_t offset() const { return stream_->offset(); }
  // "<file>: record at byte offset N" for error messages.
  std::string Where() const;

 private:
  std::unique_ptr<ByteStream> stream_;
  uint64_t max_record_bytes_;
  uint64_t record_offset_ = 0;
  bool resumable_ = true;
};

// Appends data as one framed record to out.
void AppendTfRecord(std::string_view data, std::string* out);

}  // namespace ps::data

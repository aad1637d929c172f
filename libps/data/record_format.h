// RecordFormat: how one file format is read record by record — the seam between the
// per-format parsers (TFRecord with tf.Example, Criteo TSV, LibSVM) and the code that
// feeds them (the streaming pipeline in stream.h, and the in-memory loader).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/data/byte_stream.h"
#include "libps/data/examples.h"
#include "libps/data/row.h"

namespace ps::data {

// One open file. Not thread-safe: used by one thread.
class RecordReader {
 public:
  virtual ~RecordReader() = default;
  // Moves to the next record (a TFRecord's payload, a non-blank text line); false at
  // the end of the file. On an error (bad CRC, truncation: InvalidArgument naming the file and
  // the record's byte offset) the reader is past the bad record when resumable() is
  // true, and can read no further otherwise.
  virtual Result<bool> Advance() = 0;
  virtual bool resumable() const = 0;
  // Parses the current record (after Advance returned true) into row (cleared first).
  // Errors name the file, the record's position and the feature or column.
  virtual Status Parse(Row* row) = 0;
  // "<file>: record at byte offset N" or "<file>:<line>": the current record.
  virtual std::string Where() const = 0;
  // Byte offset (into the decompressed content) of what follows the current record: where
  // a reader opened on it reads the next record first.
  virtual uint64_t offset() const = 0;
};

// The parsed config of one format. Immutable after creation; Open may be called from
// any thread.
class RecordFormat {
 public:
  virtual ~RecordFormat() = default;
  // The schema of every row (info.examples is 0: a stream has no known size).
  const DatasetInfo& info() const { return info_; }
  // Rows carry values for their ids (LibSVM's id:value); else every value is 1.
  bool has_values() const { return has_values_; }
  Result<std::unique_ptr<RecordReader>> Open(const std::string& path) const {
    return OpenRange(path, ByteRange{});
  }
  // Reads the records of `range` only (a text format's lines that start in it; a TFRecord
  // file from range.begin, which must be a record's start, to its end).
  virtual Result<std::unique_ptr<RecordReader>> OpenRange(const std::string& path,
                                                          const ByteRange& range) const = 0;

 protected:
  DatasetInfo info_;
  bool has_values_ = false;
};

// For text formats: one record per line that is not blank (only spaces and tabs) after
// cutting a comment that starts with `comment` (when it is not '\0'); a UTF-8 BOM at
// the start is skipped. Errors name "<file>:<line>".
class TextRecordReader : public RecordReader {
 public:
  Result<bool> Advance() override;
  bool resumable() const override { return resumable_; }
  std::string Where() const override;  // "<file>:<line>"
  uint64_t offset() const override { return stream_->offset(); }
  // 1-based, of the current record (counted from the range's first line when it is not
  // the file's)
  int64_t line_no() const { return line_no_; }

 protected:
  TextRecordReader(std::unique_ptr<ByteStream> stream, char comment)
      : stream_(std::move(stream)), comment_(comment) {}
  std::string_view line_;  // the current record (its comment cut), valid until Advance

 private:
  std::unique_ptr<ByteStream> stream_;
  char comment_;
  int64_t line_no_ = 0;
  bool resumable_ = true;
};

// The formats that stream: "tfrecord", "criteo_tsv", "libsvm". Reads the
// format-specific keys of r (see dataset.h) and leaves the common ones ("format",
// "files", "path", "shuffle_buffer", "on_error", "limit") to the caller.
// Returns nullptr (and no error) for a format that does not stream.
Result<std::unique_ptr<RecordFormat>> MakeRecordFormat(const std::string& format, JsonReader& r);

// Format constructors, one per file (tf_example.cc, criteo.cc, libsvm.cc).
Result<std::unique_ptr<RecordFormat>> MakeTfExampleFormat(JsonReader& r);
Result<std::unique_ptr<RecordFormat>> MakeCriteoFormat(JsonReader& r);
Result<std::unique_ptr<RecordFormat>> MakeLibSvmFormat(JsonReader& r);

}  // namespace ps::data

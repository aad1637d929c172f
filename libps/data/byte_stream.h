// ByteStream: one file read front to back through a fixed-size buffer, inflated on the fly
// when it starts with the gzip magic 1f 8b (concatenated gzip members are one stream).
// Memory is O(buffer + longest line / record), never O(file).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "libps/core/status.h"

namespace ps::data {

// Every error of an input file the job names has the code of its cause, as the exit-code
// rule (daemon::ExitCodeFor) reads it: what no restart changes (a missing file, a
// directory, a file this process may not read, a bad header, a record that does not parse)
// is InvalidArgument, the configuration's mistake; a read the OS failed (EIO, ...) is
// IoError, which a restart may cure.
//
// "<path>: <what>: <strerror(err)>": InvalidArgument, or IoError for the errnos ErrnoCode
// (libps/core/files.h) calls kIo.
Status InputErrno(const std::string& path, std::string_view what, int err);

// A part of a file's (decompressed) content. begin: where reading starts (a gzip file's
// content before it is inflated and dropped). lines: begin > 0 moves on to the first line
// start at or after begin (the byte before it is '\n'), and NextLine reads only the lines
// that start before end: ranges cut anywhere split a text file's lines between them with
// each line read once.
struct ByteRange {
  uint64_t begin = 0;
  uint64_t end = UINT64_MAX;
  bool lines = false;
};

class ByteStream {
 public:
  // Errors: InputErrno naming the file.
  static Result<std::unique_ptr<ByteStream>> Open(const std::string& path,
                                                  const ByteRange& range = {});
  ~ByteStream();
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  const std::string& path() const { return path_; }
  bool gzip() const { return gzip_; }
  // Bytes of (decompressed) content consumed so far: the offset of the next byte.
  uint64_t offset() const { return consumed_; }

  // The next n bytes, fewer only at the end of the stream; valid until the next call.
  // Errors: InputErrno, InvalidArgument "<file>: gzip: ... at compressed offset N".
  Result<std::string_view> Take(size_t n);
  // The next line without its '\n' (and a trailing '\r'); valid until the next call.
  // false at the end of the stream. A last line without '\n' is a line. Error:
  // InvalidArgument when a line is longer than max_line bytes, or Take's errors. false
  // for a line that starts at or after the range's end.
  Result<bool> NextLine(std::string_view* line, size_t max_line = size_t{64} << 20);

 private:
  explicit ByteStream(std::string path) : path_(std::move(path)) {}
  // Appends more content to buf_ (moving the unread part to the front first); false at
  // the end of the stream.
  Result<bool> Fill();
  // Refills in_ from the file when it is used up; false at the end of the file.
  Result<bool> FillInput();
  Status GzipError(const std::string& what) const;

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t file_size_ = 0;  // for error messages only
  bool gzip_ = false;
  bool eof_ = false;  // no more content after buf_
  z_stream zs_{};
  bool zs_open_ = false;
  std::string in_;                // compressed input (gzip only); zs_ points into it
  uint64_t compressed_read_ = 0;  // bytes of the file read into in_ so far
  std::string buf_;               // content; [pos_, end_) unread
  size_t pos_ = 0, end_ = 0;
  uint64_t consumed_ = 0;
  uint64_t limit_ = UINT64_MAX;  // NextLine: no line starting at or after it
};

}  // namespace ps::data

// Small POSIX file helpers for the checkpoint layer: an owning fd, full reads and
// writes that retry on EINTR and short transfers, and the tmp + fsync + rename + fsync-dir
// sequence that makes a small file appear atomically. Errors name the path.
// All functions are thread-safe (they share no state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "libps/core/status.h"

namespace ps {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();
  // close(2) with its error reported (close can surface delayed write errors).
  Status Close(const std::string& path);

 private:
  int fd_ = -1;
};

// The cause an errno stands for, the code the exit-code rule (daemon::ExitCodeFor) reads:
// ENOENT kNotFound; a path that names the wrong kind of thing or one this process may not
// use (EISDIR, ENOTDIR, EACCES, EPERM, ELOOP, ENAMETOOLONG, EROFS), which no restart
// changes, kInvalidArgument; anything else (EIO, ENOSPC, EMFILE, ...) kIo.
Code ErrnoCode(int err);
// "<path>: <what>: <strerror(err)>" with the code ErrnoCode(err).
Status ErrnoStatus(const std::string& path, std::string_view what, int err);

Status WriteAll(int fd, const void* data, size_t n, const std::string& path);
// Reads exactly n bytes at offset; reaching end of file first is DataLoss.
Status PreadAll(int fd, void* data, size_t n, uint64_t offset, const std::string& path);
Status FsyncFd(int fd, const std::string& path);
// fsync of a directory, so that renames and unlinks inside it are durable.
Status FsyncDir(const std::string& dir);
// Writes `contents` to path + ".tmp", fsyncs it, renames it over `path` and fsyncs the
// parent directory: readers see either the old file or the whole new one.
Status WriteFileAtomic(const std::string& path, std::string_view contents);
// A file written only at its end, one whole record at a time (a JSON line, a TFRecord):
// each Append adds all of `bytes` or nothing. A write that fails part-way (a full disk) is
// truncated back, so a reader never sees half a record, and a failed Append does not stop
// later ones (the disk may have room again by then).
class AppendOnlyFile {
 public:
  AppendOnlyFile() = default;
  // Opens `path` for appending, creating it; `create_new`: it must not exist yet
  // (AlreadyExists if it does).
  static Result<AppendOnlyFile> Open(const std::string& path, bool create_new = false);
  Status Append(std::string_view bytes);
  const std::string& path() const { return path_; }

 private:
  UniqueFd fd_;
  std::string path_;
};

// Reads `path` to its end in chunks of a few MiB, passing each to `chunk` (which may
// fail the read).
Status ReadChunks(const std::string& path,
                  const std::function<Status(std::span<const unsigned char>)>& chunk);
// Size and masked CRC-32C (libps/core/crc32c.h) of a whole file.
struct FileSum {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};
Result<FileSum> SumFile(const std::string& path);

// Whole file; a file larger than max_bytes is DataLoss (never a huge allocation).
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

}  // namespace ps

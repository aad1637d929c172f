#include "libps/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "libps/core/crc32c.h"

namespace ps {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status UniqueFd::Close(const std::string& path) {
  if (fd_ < 0) return Status::Ok();
  int fd = release();
  if (::close(fd) != 0) return ErrnoStatus(path, "close", errno);
  return Status::Ok();
}

Code ErrnoCode(int err) {
  switch (err) {
    case ENOENT:
      return Code::kNotFound;
    case EISDIR:
    case ENOTDIR:
    case EACCES:
    case EPERM:
    case ELOOP:
    case ENAMETOOLONG:
    case EROFS:
      return Code::kInvalidArgument;
    default:
      return Code::kIo;
  }
}

Status ErrnoStatus(const std::string& path, std::string_view what, int err) {
  return {ErrnoCode(err), path + ": " + std::string(what) + ": " + std::strerror(err)};
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux transfers at most 0x7ffff000 bytes per call; ask for no more than 1 GiB.
    size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(path, "write", errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status PreadAll(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(path, "read", errno);
    }
    if (r == 0) {
      return DataLoss(path + ": unexpected end of file at offset " + std::to_string(offset));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status FsyncFd(int fd, const std::string& path) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return ErrnoStatus(path, "fsync", errno);
  }
  return Status::Ok();
}

Status FsyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(dir, "open directory", errno);
  PS_RETURN_IF_ERROR(FsyncFd(fd.get(), dir));
  return fd.Close(dir);
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus(tmp, "create", errno);
  Status st = WriteAll(fd.get(), contents.data(), contents.size(), tmp);
  if (st.ok()) st = FsyncFd(fd.get(), tmp);
  if (st.ok()) st = fd.Close(tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoStatus(path, "rename from " + tmp, errno);
  }
  if (!st.ok()) {
    fd.reset();
    ::unlink(tmp.c_str());
    return st;
  }
  std::string parent = std::filesystem::path(path).parent_path().string();
  return FsyncDir(parent.empty() ? "." : parent);
}

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(path, "open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) return DataLoss(path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return DataLoss(path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                    std::to_string(max_bytes) + " allowed");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  PS_RETURN_IF_ERROR(PreadAll(fd.get(), out.data(), out.size(), 0, path));
  return out;
}

Result<AppendOnlyFile> AppendOnlyFile::Open(const std::string& path, bool create_new) {
  AppendOnlyFile a;
  a.fd_ = UniqueFd(::open(
      path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (create_new ? O_EXCL : 0), 0644));
  if (!a.fd_.valid()) {
    const int err = errno;
    if (err == EEXIST) return Status(Code::kAlreadyExists, path + ": exists");
    return ErrnoStatus(path, "open", err);
  }
  a.path_ = path;
  return a;
}

Status AppendOnlyFile::Append(std::string_view bytes) {
  if (!fd_.valid()) return FailedPrecondition("AppendOnlyFile: not open");
  const off_t end = ::lseek(fd_.get(), 0, SEEK_END);
  Status st = WriteAll(fd_.get(), bytes.data(), bytes.size(), path_);
  if (!st.ok() && end >= 0 && ::ftruncate(fd_.get(), end) != 0) {
    st = Status(st.code(), st.message() + " (and a partial record may remain: truncate: " +
                               std::strerror(errno) + ")");
  }
  return st;
}

Status ReadChunks(const std::string& path,
                  const std::function<Status(std::span<const unsigned char>)>& chunk) {
  constexpr size_t kChunk = size_t{4} << 20;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(path, "open", errno);
  std::vector<unsigned char> buf(kChunk);
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(path, "read", errno);
    if (n == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(chunk(std::span<const unsigned char>(buf.data(), static_cast<size_t>(n))));
  }
}

Result<FileSum> SumFile(const std::string& path) {
  FileSum sum;
  uint32_t crc = 0;
  PS_RETURN_IF_ERROR(ReadChunks(path, [&](std::span<const unsigned char> b) {
    crc = Crc32c(crc, b.data(), b.size());
    sum.bytes += b.size();
    return Status::Ok();
  }));
  sum.crc = MaskedCrc32c(crc);
  return sum;
}

}  // namespace ps

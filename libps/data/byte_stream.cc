#include "libps/data/byte_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "libps/core/files.h"

namespace ps::data {
namespace {
constexpr size_t kChunk = size_t{1} << 20;  // file reads and the content buffer's start size
}  // namespace

Status InputErrno(const std::string& path, std::string_view what, int err) {
  const Code code = ErrnoCode(err) == Code::kIo ? Code::kIo : Code::kInvalidArgument;
  return {code, path + ": " + std::string(what) + ": " + std::strerror(err)};
}

Result<std::unique_ptr<ByteStream>> ByteStream::Open(const std::string& path,
                                                     const ByteRange& range) {
  std::unique_ptr<ByteStream> s(new ByteStream(path));
  s->file_ = std::fopen(path.c_str(), "rb");
  if (s->file_ == nullptr) {
    return InputErrno(path, "cannot open file", errno);
  }
  if (std::fseek(s->file_, 0, SEEK_END) == 0) {
    long size = std::ftell(s->file_);
    s->file_size_ = size > 0 ? static_cast<uint64_t>(size) : 0;
    std::rewind(s->file_);
  }
  s->buf_.resize(kChunk);
  // Sniff the magic from the first raw bytes.
  s->in_.resize(kChunk);
  size_t n = std::fread(s->in_.data(), 1, s->in_.size(), s->file_);
  if (n < s->in_.size() && std::ferror(s->file_)) return InputErrno(path, "read failed", errno);
  s->in_.resize(n);
  s->compressed_read_ = n;
  if (n >= 2 && std::memcmp(s->in_.data(), "\x1f\x8b", 2) == 0) {
    s->gzip_ = true;
    if (inflateInit2(&s->zs_, 15 + 16) != Z_OK)
      return Internal(path + ": gzip: inflateInit2 failed");
    s->zs_open_ = true;
    s->zs_.next_in = reinterpret_cast<Bytef*>(s->in_.data());
    s->zs_.avail_in = static_cast<uInt>(n);
  } else {
    std::memcpy(s->buf_.data(), s->in_.data(), n);
    s->end_ = n;
    s->in_.clear();
    s->in_.shrink_to_fit();
  }
  s->limit_ = range.end;
  // A line range starts one byte early: the line that byte ends (or the empty line of a
  // '\n' there) belongs to the range before.
  const uint64_t start = range.lines && range.begin > 0 ? range.begin - 1 : range.begin;
  if (start > 0 && !s->gzip_) {
    if (::fseeko(s->file_, static_cast<off_t>(start), SEEK_SET) != 0)
      return InputErrno(path, "seek failed", errno);
    s->pos_ = s->end_ = 0;
    s->consumed_ = start;
    s->eof_ = false;
  } else {
    for (uint64_t left = start; left > 0;) {
      PS_ASSIGN_OR_RETURN(std::string_view skipped, s->Take(std::min<uint64_t>(left, kChunk)));
      if (skipped.empty()) break;
      left -= skipped.size();
    }
  }
  if (range.lines && range.begin > 0) {
    std::string_view dropped;
    const uint64_t limit = s->limit_;
    s->limit_ = UINT64_MAX;
    PS_RETURN_IF_ERROR(s->NextLine(&dropped).status());
    s->limit_ = limit;
  }
  return s;
}

ByteStream::~ByteStream() {
  if (zs_open_) inflateEnd(&zs_);
  if (file_ != nullptr) std::fclose(file_);
}

Status ByteStream::GzipError(const std::string& what) const {
  return InvalidArgument(path_ + ": gzip: " + what + " at compressed offset " +
                         std::to_string(compressed_read_ - zs_.avail_in));
}

Result<bool> ByteStream::FillInput() {
  if (zs_.avail_in > 0) return true;
  in_.resize(kChunk);
  size_t n = std::fread(in_.data(), 1, in_.size(), file_);
  if (n < in_.size() && std::ferror(file_)) return InputErrno(path_, "read failed", errno);
  compressed_read_ += n;
  zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
  zs_.avail_in = static_cast<uInt>(n);
  return n > 0;
}

Result<bool> ByteStream::Fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
  char* dst = buf_.data() + end_;
  const size_t room = buf_.size() - end_;
  if (!gzip_) {
    size_t n = std::fread(dst, 1, room, file_);
    if (n < room && std::ferror(file_)) return InputErrno(path_, "read failed", errno);
    end_ += n;
    if (n == 0) eof_ = true;
    return n > 0;
  }
  for (;;) {
    PS_ASSIGN_OR_RETURN(bool more_input, FillInput());
    if (!more_input) return GzipError("truncated stream");
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = static_cast<uInt>(room);
    int rc = inflate(&zs_, Z_NO_FLUSH);
    const size_t produced = room - zs_.avail_out;
    end_ += produced;
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (as `cat a.gz b.gz` makes), else the file ends.
      PS_ASSIGN_OR_RETURN(bool more, FillInput());
      if (!more) {
        eof_ = true;
      } else if (zs_.avail_in >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b) {
        if (inflateReset(&zs_) != Z_OK) return GzipError("inflateReset failed");
      } else {
        const uint64_t at = compressed_read_ - zs_.avail_in;
        return GzipError(std::to_string(file_size_ > at ? file_size_ - at : 0) +
                         " trailing bytes after the gzip stream");
      }
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return GzipError(zs_.msg != nullptr ? std::string(zs_.msg)
                                          : "inflate error " + std::to_string(rc));
    }
    if (produced > 0) return true;
    if (eof_) return false;
  }
}

Result<std::string_view> ByteStream::Take(size_t n) {
  while (end_ - pos_ < n) {
    if (buf_.size() < n) buf_.resize(n + kChunk);  // room for the whole request
    PS_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) break;
  }
  const size_t got = std::min(n, end_ - pos_);
  std::string_view view(buf_.data() + pos_, got);
  pos_ += got;
  consumed_ += got;
  return view;
}

Result<bool> ByteStream::NextLine(std::string_view* line, size_t max_line) {
  if (consumed_ >= limit_) return false;
  size_t scanned = 0;  // bytes after pos_ known to hold no '\n'
  for (;;) {
    const char* begin = buf_.data() + pos_;
    const void* nl = std::memchr(begin + scanned, '\n', end_ - pos_ - scanned);
    if (nl != nullptr) {
      const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - begin);
      *line = std::string_view(begin, len);
      pos_ += len + 1;
      consumed_ += len + 1;
      break;
    }
    scanned = end_ - pos_;
    if (scanned > max_line) {
      return InvalidArgument(path_ + ": offset " + std::to_string(consumed_) +
                             ": line longer than " + std::to_string(max_line) + " bytes");
    }
    PS_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) {
      if (end_ == pos_) return false;
      *line = std::string_view(buf_.data() + pos_, end_ - pos_);
      consumed_ += end_ - pos_;
      pos_ = end_;
      break;
    }
  }
  if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
  return true;
}

}  // namespace ps::data

#include "libps/data/tfrecord.h"

#include <bit>
#include <cstring>

#include "libps/core/crc32c.h"

namespace ps::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "TFRecord framing is read and written in place");

uint32_t LoadLe32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t LoadLe64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void StoreLe32(uint32_t v, std::string* out) { out->append(reinterpret_cast<const char*>(&v), 4); }
void StoreLe64(uint64_t v, std::string* out) { out->append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

std::string TfRecordReader::Where() const {
  return path() + ": record at byte offset " + std::to_string(record_offset_) +
         (stream_->gzip() ? " (inflated)" : "");
}

Result<bool> TfRecordReader::Next(std::string_view* record) {
  if (!resumable_) return false;
  record_offset_ = stream_->offset();
  resumable_ = false;  // until the record is framed
  PS_ASSIGN_OR_RETURN(std::string_view header, stream_->Take(12));
  if (header.empty()) {
    resumable_ = true;
    return false;
  }
  if (header.size() < 12) {
    return InvalidArgument(Where() + ": truncated header: " + std::to_string(header.size()) +
                           " of 12 bytes");
  }
  const uint64_t length = LoadLe64(header.data());
  if (UnmaskCrc32c(LoadLe32(header.data() + 8)) != Crc32c(0, header.data(), 8)) {
    return InvalidArgument(Where() + ": length CRC mismatch (corrupt header)");
  }
  if (length > max_record_bytes_) {
    return InvalidArgument(Where() + ": length " + std::to_string(length) +
                           " exceeds the limit of " + std::to_string(max_record_bytes_) + " bytes");
  }
  PS_ASSIGN_OR_RETURN(std::string_view body, stream_->Take(length + 4));
  if (body.size() < length + 4) {
    return InvalidArgument(Where() + ": truncated: " + std::to_string(body.size()) + " of " +
                           std::to_string(length + 4) + " bytes of data and CRC");
  }
  resumable_ = true;
  const auto n = static_cast<size_t>(length);
  if (UnmaskCrc32c(LoadLe32(body.data() + n)) != Crc32c(0, body.data(), n)) {
    return InvalidArgument(Where() + ": data CRC mismatch (corrupt record of " +
                           std::to_string(length) + " bytes)");
  }
  *record = body.substr(0, n);
  return true;
}

void AppendTfRecord(std::string_view data, std::string* out) {
  const size_t at = out->size();
  StoreLe64(data.size(), out);
  StoreLe32(MaskedCrc32c(Crc32c(0, out->data() + at, 8)), out);
  out->append(data);
  StoreLe32(MaskedCrc32c(Crc32c(0, data.data(), data.size())), out);
}

}  // namespace ps::data

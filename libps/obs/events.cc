#include "libps/obs/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "libps/core/crc32c.h"

namespace ps::obs {

namespace fs = std::filesystem;

namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutKey(std::string* out, uint32_t field, uint32_t wire_type) {
  PutVarint(out, (field << 3) | wire_type);
}

template <typename T>
void PutFixed(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only (the build checks)
  out->append(bytes, sizeof(T));
}

void PutBytesField(std::string* out, uint32_t field, std::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

// Event fields 1 and 2, left out when zero as proto3 does.
void PutEventHeader(std::string* out, double wall_time, int64_t step) {
  if (wall_time != 0) {
    PutKey(out, 1, kFixed64);
    PutFixed(out, wall_time);
  }
  if (step != 0) {
    PutKey(out, 2, kVarint);
    PutVarint(out, static_cast<uint64_t>(step));
  }
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// ---- decoding --------------------------------------------------------------------------

// A bounded reader over one message's bytes. Every Read* returns false on truncation or
// a malformed varint.
class Wire {
 public:
  explicit Wire(std::string_view data) : data_(data) {}
  bool done() const { return pos_ == data_.size(); }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      auto b = static_cast<uint8_t>(data_[pos_++]);
      if (shift == 63 && b > 1) return false;
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  template <typename T>
  bool ReadFixed(T* v) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadBytes(std::string_view* v) {
    uint64_t n;
    if (!ReadVarint(&n) || n > data_.size() - pos_) return false;
    *v = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // Skips one field's value of `wire_type`; false for groups and unknown types.
  bool Skip(uint32_t wire_type) {
    uint64_t u64;
    uint32_t u32;
    std::string_view bytes;
    switch (wire_type) {
      case kVarint:
        return ReadVarint(&u64);
      case kFixed64:
        return ReadFixed(&u64);
      case kLengthDelimited:
        return ReadBytes(&bytes);
      case kFixed32:
        return ReadFixed(&u32);
      default:
        return false;
    }
  }
  bool ReadKey(uint32_t* field, uint32_t* wire_type) {
    uint64_t key;
    if (!ReadVarint(&key) || key > 0xFFFFFFFFu) return false;
    *field = static_cast<uint32_t>(key >> 3);
    *wire_type = static_cast<uint32_t>(key & 7);
    return *field != 0;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  bool has_file_version = false;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
};

// Reads the fields of the message `data` in order: on_field(field, wire_type, &wire)
// reads a field it knows and returns "" or what is wrong with it, or nullopt for a field
// it does not know, which is skipped. Empty string on success, otherwise what is wrong;
// `message` names the message in errors.
template <typename F>
std::string ForEachField(std::string_view data, std::string_view message, F on_field) {
  Wire w(data);
  while (!w.done()) {
    uint32_t field, type;
    if (!w.ReadKey(&field, &type)) return std::string(message) + ": bad field key";
    std::optional<std::string> err = on_field(field, type, &w);
    if (!err) {
      if (!w.Skip(type)) {
        return std::string(message) + " field " + std::to_string(field) +
               ": truncated or bad wire type";
      }
    } else if (!err->empty()) {
      return *err;
    }
  }
  return "";
}

// Empty string on success, otherwise what is wrong.
std::string DecodeValue(std::string_view data, DecodedEvent* event) {
  std::string tag;
  bool has_value = false;
  float value = 0;
  std::string err =
      ForEachField(data, "Summary.Value",
                   [&](uint32_t field, uint32_t type, Wire* w) -> std::optional<std::string> {
                     if (field == 1 && type == kLengthDelimited) {
                       std::string_view t;
                       if (!w->ReadBytes(&t)) return "Summary.Value.tag: truncated";
                       tag = t;
                       return "";
                     }
                     if (field == 2 && type == kFixed32) {
                       if (!w->ReadFixed(&value)) return "Summary.Value.simple_value: truncated";
                       has_value = true;
                       return "";
                     }
                     if (field == 1 || field == 2) {
                       return "Summary.Value field " + std::to_string(field) +
                              ": wrong wire type " + std::to_string(type);
                     }
                     return std::nullopt;
                   });
  if (!err.empty()) return err;
  if (has_value) event->values.emplace_back(std::move(tag), value);
  return "";
}

std::string DecodeSummary(std::string_view data, DecodedEvent* event) {
  return ForEachField(data, "Summary",
                      [&](uint32_t field, uint32_t type, Wire* w) -> std::optional<std::string> {
                        if (field != 1) return std::nullopt;
                        if (type != kLengthDelimited)
                          return "Summary.value: wrong wire type " + std::to_string(type);
                        std::string_view v;
                        if (!w->ReadBytes(&v)) return "Summary.value: truncated";
                        return DecodeValue(v, event);
                      });
}

std::string DecodeEvent(std::string_view data, DecodedEvent* event) {
  return ForEachField(data, "Event",
                      [&](uint32_t field, uint32_t type, Wire* w) -> std::optional<std::string> {
                        if (field == 1) {
                          if (type != kFixed64 || !w->ReadFixed(&event->wall_time))
                            return "Event.wall_time: bad or truncated";
                          return "";
                        }
                        if (field == 2) {
                          uint64_t v;
                          if (type != kVarint || !w->ReadVarint(&v))
                            return "Event.step: bad or truncated";
                          event->step = static_cast<int64_t>(v);
                          return "";
                        }
                        if (field == 3) {
                          std::string_view v;
                          if (type != kLengthDelimited || !w->ReadBytes(&v))
                            return "Event.file_version: bad or truncated";
                          event->has_file_version = true;
                          event->file_version = v;
                          return "";
                        }
                        if (field == 5) {
                          std::string_view v;
                          if (type != kLengthDelimited || !w->ReadBytes(&v))
                            return "Event.summary: bad or truncated";
                          return DecodeSummary(v, event);
                        }
                        return std::nullopt;
                      });
}

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

double WallTimeNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string EventFileName(double wall_time, std::string_view hostname) {
  return "events.out.tfevents." + std::to_string(static_cast<int64_t>(std::floor(wall_time))) +
         "." + std::string(hostname);
}

std::string EncodeFileVersionEvent(double wall_time, std::string_view file_version) {
  std::string out;
  PutEventHeader(&out, wall_time, 0);
  PutBytesField(&out, 3, file_version);
  return out;
}

std::string EncodeScalarEvent(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  PutBytesField(&v, 1, tag);
  PutKey(&v, 2, kFixed32);
  PutFixed(&v, value);
  std::string summary;
  PutBytesField(&summary, 1, v);
  std::string out;
  PutEventHeader(&out, wall_time, step);
  PutBytesField(&out, 5, summary);
  return out;
}

std::string FrameRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutFixed(&out, static_cast<uint64_t>(data.size()));
  PutFixed(&out, MaskedCrc32c(Crc32c(0, out.data(), 8)));
  out.append(data);
  PutFixed(&out, MaskedCrc32c(Crc32c(0, data.data(), data.size())));
  return out;
}

// ---- EventWriter -----------------------------------------------------------------------

Result<EventWriter> EventWriter::Open(const std::string& dir, double file_wall_time) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(dir + ": cannot create directory: " + ec.message());
  const std::string base = (fs::path(dir) / EventFileName(file_wall_time, Hostname())).string();
  EventWriter w;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto f = AppendOnlyFile::Open(attempt == 0 ? base : base + "." + std::to_string(attempt),
                                  /*create_new=*/true);
    if (f.status().code() == Code::kAlreadyExists) continue;
    if (!f.ok()) return f.status();
    w.file_ = std::move(*f);
    PS_RETURN_IF_ERROR(
        w.file_.Append(FrameRecord(EncodeFileVersionEvent(file_wall_time, kEventFileVersion))));
    return w;
  }
  return IoError(base + ": too many event files with this name");
}

Status EventWriter::AddScalar(std::string_view tag, int64_t step, double value, double wall_time) {
  return file_.Append(
      FrameRecord(EncodeScalarEvent(wall_time, step, tag, static_cast<float>(value))));
}

// ---- reading ---------------------------------------------------------------------------

Result<EventFileContents> ReadEventFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(path + ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return IoError(path + ": read failed");

  EventFileContents out;
  size_t pos = 0;
  for (int record = 0; pos < bytes.size(); ++record) {
    auto fail = [&](const std::string& what) {
      return DataLoss(path + ": record " + std::to_string(record) + " at offset " +
                      std::to_string(pos) + ": " + what);
    };
    if (bytes.size() - pos < 12) return fail("truncated header");
    const char* p = bytes.data() + pos;
    uint64_t len;
    std::memcpy(&len, p, 8);
    if (MaskedCrc32c(Crc32c(0, p, 8)) != LoadU32(p + 8)) return fail("length checksum mismatch");
    if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) {
      return fail("truncated data (length " + std::to_string(len) + ")");
    }
    std::string_view data(p + 12, len);
    if (MaskedCrc32c(Crc32c(0, data.data(), data.size())) != LoadU32(p + 12 + len)) {
      return fail("data checksum mismatch");
    }
    DecodedEvent event;
    std::string err = DecodeEvent(data, &event);
    if (!err.empty()) return fail(err);
    if (record == 0 && event.has_file_version) out.file_version = event.file_version;
    for (auto& [tag, value] : event.values) {
      out.scalars.push_back(ScalarEvent{event.wall_time, event.step, std::move(tag), value});
    }
    pos += 12 + len + 4;
  }
  return out;
}

Result<std::vector<ScalarEvent>> ReadEvents(const std::string& path) {
  PS_ASSIGN_OR_RETURN(EventFileContents contents, ReadEventFile(path));
  return std::move(contents.scalars);
}

std::vector<std::string> ListEventFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.find("tfevents") != std::string::npos && it->is_regular_file(ec))
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ps::obs

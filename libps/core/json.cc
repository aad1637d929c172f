#include "libps/core/json.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "libps/core/text.h"

namespace ps {

Result<Json> ParseJson(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number that overflows
    std::string detail = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> keep the tail.
    if (auto pos = detail.find("] "); pos != std::string::npos) detail = detail.substr(pos + 2);
    // "...; last read: '<input>'": the input quoted as every error quotes it.
    static constexpr std::string_view kLastRead = "last read: '";
    if (auto pos = detail.find(kLastRead); pos != std::string::npos) {
      std::string_view read = std::string_view(detail).substr(pos + kLastRead.size());
      if (!read.empty() && read.back() == '\'') read.remove_suffix(1);
      detail = detail.substr(0, pos) + "last read: " + QuoteInput(read);
    }
    return InvalidArgument(std::string(what) + ": malformed JSON: " + detail);
  }
}

Result<Json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return IoError(path + ": read failed");
  return ParseJson(buffer.str(), path);
}

JsonReader::JsonReader(const Json& value, std::string path)
    : value_(&value), path_(std::move(path)) {
  if (!value.is_object()) status_ = InvalidArgument(path_ + ": must be a JSON object");
}

std::string JsonReader::Path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool JsonReader::Has(std::string_view key) const {
  return value_->is_object() && value_->contains(key);
}

const Json* JsonReader::Find(std::string_view key) {
  if (!Has(key)) return nullptr;
  seen_.insert(std::string(key));
  return &(*value_)[std::string(key)];
}

JsonReader JsonReader::Child(std::string_view key) {
  static const Json kEmpty = Json::object();
  const Json* sub = Find(key);
  if (sub == nullptr) {
    JsonReader r(kEmpty, Path(key));
    r.status_ = InvalidArgument(Path(key) + ": required key is missing");
    return r;
  }
  return JsonReader(*sub, Path(key));
}

Status JsonReader::Finish() const {
  if (!status_.ok()) return status_;
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    if (!seen_.contains(it.key())) return InvalidArgument(Path(it.key()) + ": unknown key");
  }
  return Status::Ok();
}

namespace {

const char* TypeName(const Json& j) { return j.type_name(); }

Status WrongType(const std::string& path, const char* want, const Json& got) {
  return InvalidArgument(path + ": expected " + want + ", got " + TypeName(got));
}

template <typename Int>
Status ReadInt(const Json& j, const std::string& path, Int* out) {
  if (j.is_number_integer()) {
    if (j.is_number_unsigned()) {
      auto v = j.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<Int>::max()))
        return InvalidArgument(path + ": " + std::to_string(v) + " is too large");
      *out = static_cast<Int>(v);
      return Status::Ok();
    }
    auto v = j.get<int64_t>();
    if constexpr (std::is_unsigned_v<Int>) {
      if (v < 0) return InvalidArgument(path + ": must not be negative, got " + std::to_string(v));
    } else {
      if (v < static_cast<int64_t>(std::numeric_limits<Int>::min()) ||
          v > static_cast<int64_t>(std::numeric_limits<Int>::max()))
        return InvalidArgument(path + ": " + std::to_string(v) + " is out of range");
    }
    *out = static_cast<Int>(v);
    return Status::Ok();
  }
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (std::floor(d) == d && std::isfinite(d) && std::fabs(d) < 9.0e15) {
      return ReadInt(Json(static_cast<int64_t>(d)), path, out);
    }
    return InvalidArgument(path + ": expected an integer, got " + j.dump());
  }
  return WrongType(path, "an integer", j);
}

template <typename T>
Status ReadOne(const Json& j, const std::string& path, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) return WrongType(path, "true or false", j);
    *out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    return ReadInt(j, path, out);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) return WrongType(path, "a number", j);
    *out = static_cast<T>(j.get<double>());
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) return WrongType(path, "a string", j);
    *out = j.get<std::string>();
  } else {
    static_assert(!sizeof(T*), "unsupported JsonReader type");
  }
  return Status::Ok();
}

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

}  // namespace

template <typename T>
Status JsonReader::Read(std::string_view key, T* out) {
  if (!status_.ok()) return status_;
  const Json& j = (*value_)[std::string(key)];
  seen_.insert(std::string(key));
  std::string path = Path(key);
  if constexpr (IsVector<T>::value) {
    if (!j.is_array()) return WrongType(path, "an array", j);
    T result;
    result.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
      typename T::value_type v{};
      PS_RETURN_IF_ERROR(ReadOne(j[i], path + "[" + std::to_string(i) + "]", &v));
      result.push_back(std::move(v));
    }
    *out = std::move(result);
    return Status::Ok();
  } else {
    return ReadOne(j, path, out);
  }
}

template Status JsonReader::Read(std::string_view, bool*);
template Status JsonReader::Read(std::string_view, int*);
template Status JsonReader::Read(std::string_view, int64_t*);
template Status JsonReader::Read(std::string_view, uint64_t*);
template Status JsonReader::Read(std::string_view, double*);
template Status JsonReader::Read(std::string_view, float*);
template Status JsonReader::Read(std::string_view, std::string*);
template Status JsonReader::Read(std::string_view, std::vector<int64_t>*);
template Status JsonReader::Read(std::string_view, std::vector<int>*);
template Status JsonReader::Read(std::string_view, std::vector<uint32_t>*);
template Status JsonReader::Read(std::string_view, std::vector<double>*);
template Status JsonReader::Read(std::string_view, std::vector<std::string>*);

}  // namespace ps

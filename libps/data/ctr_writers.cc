#include "libps/data/ctr_writers.h"

#include <charconv>
#include <cstring>
#include <filesystem>

#include "libps/data/tfrecord.h"

namespace ps::data {
namespace {

void AppendInt(std::string& out, int64_t v, int base = 10) {
  char tmp[24];
  auto [end, ec] = std::to_chars(tmp, tmp + sizeof tmp, v, base);
  out.append(tmp, end);
}

}  // namespace

OutFile::~OutFile() {
  if (plain_ != nullptr) std::fclose(plain_);
  if (gz_ != nullptr) gzclose(gz_);
  if (!closed_ && !tmp_.empty()) std::remove(tmp_.c_str());
}

Status OutFile::Open(const std::string& path, bool gzip) {
  path_ = path;
  tmp_ = path + ".tmp";
  closed_ = false;
  if (gzip) {
    gz_ = gzopen(tmp_.c_str(), "wb1");
    if (gz_ == nullptr) return IoError(tmp_ + ": cannot create: " + std::strerror(errno));
    gzbuffer(gz_, 1 << 20);
  } else {
    plain_ = std::fopen(tmp_.c_str(), "wb");
    if (plain_ == nullptr) return IoError(tmp_ + ": cannot create: " + std::strerror(errno));
  }
  buf_.reserve(kFlushBytes + 4096);
  return Status::Ok();
}

Status OutFile::Flush() {
  if (buf_.empty()) return Status::Ok();
  if (plain_ != nullptr) {
    if (std::fwrite(buf_.data(), 1, buf_.size(), plain_) != buf_.size()) {
      return IoError(tmp_ + ": write failed: " + std::strerror(errno));
    }
  } else if (gzwrite(gz_, buf_.data(), static_cast<unsigned>(buf_.size())) !=
             static_cast<int>(buf_.size())) {
    return IoError(tmp_ + ": gzip write failed");
  }
  buf_.clear();
  return Status::Ok();
}

Status OutFile::Close() {
  PS_RETURN_IF_ERROR(Flush());
  if (plain_ != nullptr) {
    int rc = std::fclose(plain_);
    plain_ = nullptr;
    if (rc != 0) return IoError(tmp_ + ": write failed: " + std::strerror(errno));
  } else {
    int rc = gzclose(gz_);
    gz_ = nullptr;
    if (rc != Z_OK) return IoError(tmp_ + ": gzip write failed (" + std::to_string(rc) + ")");
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) return IoError(path_ + ": cannot rename from " + tmp_ + ": " + ec.message());
  closed_ = true;
  return Status::Ok();
}

Status CheckCriteoColumns(const CtrSpec& spec) {
  int columns = 0;
  for (const CtrField& f : spec.fields) columns += f.max_ids;
  if (columns > kCriteoCategoricalColumns) {
    return InvalidArgument(
        "criteo_tsv: the spec's fields need " + std::to_string(columns) +
        " categorical columns (one per id an example can have), Criteo's layout has " +
        std::to_string(kCriteoCategoricalColumns));
  }
  return Status::Ok();
}

CtrFileWriter::CtrFileWriter(CtrFormat format, const CtrSpec& spec,
                             const std::vector<int64_t>& offsets)
    : format_(format), spec_(spec), offsets_(offsets) {
  int column = 0;
  for (const CtrField& f : spec.fields) {
    first_column_.push_back(column);
    column += f.max_ids;
  }
}

Status CtrFileWriter::Write(uint8_t label, std::span<const int64_t> ids,
                            std::span<const float> counts) {
  std::string& out = out_.buffer();
  if (format_ == CtrFormat::kLibSvm) {
    out.push_back(label ? '1' : '0');
    for (size_t i = 0; i < ids.size(); ++i) {
      out.push_back(' ');
      AppendInt(out, ids[i] + 1);  // LibSVM ids are 1-based
      out.push_back(':');
      AppendInt(out, static_cast<int64_t>(counts[i]));
    }
    out.push_back('\n');
    return out_.MaybeFlush();
  }
  if (format_ == CtrFormat::kTfRecord) {
    example_.Clear();
    const int64_t y = label;
    example_.AddInt64("label", std::span(&y, 1));
  } else {
    out.push_back(label ? '1' : '0');
    out.append(static_cast<size_t>(kCriteoIntegerColumns), '\t');
  }
  size_t i = 0;
  int column = 0;  // Criteo: categorical columns written so far
  for (size_t f = 0; f < spec_.fields.size(); ++f) {
    local_.clear();
    for (; i < ids.size() && ids[i] < offsets_[f + 1]; ++i) {
      local_.insert(local_.end(), static_cast<size_t>(counts[i]), ids[i] - offsets_[f]);
    }
    if (format_ == CtrFormat::kTfRecord) {
      example_.AddInt64(spec_.fields[f].name, local_);
      continue;
    }
    for (; column < first_column_[f]; ++column) out.push_back('\t');
    for (int64_t id : local_) {
      out.push_back('\t');
      AppendInt(out, id, 16);
      ++column;
    }
  }
  if (format_ == CtrFormat::kTfRecord) {
    record_.clear();
    example_.AppendTo(&record_);
    AppendTfRecord(record_, &out);
  } else {
    for (; column < kCriteoCategoricalColumns; ++column) out.push_back('\t');
    out.push_back('\n');
  }
  return out_.MaybeFlush();
}

Json CtrDataConfig(CtrFormat format, const CtrSpec& spec, const std::vector<int64_t>& offsets,
                   const std::vector<std::string>& files) {
  Json d = Json::object();
  d["format"] = CtrFormatName(format);
  d["files"] = files;
  if (format == CtrFormat::kLibSvm) {
    d["num_features"] = offsets.back();
    d["field_offsets"] = std::vector<int64_t>(offsets.begin(), offsets.end() - 1);
    d["classes"] = 2;
  } else if (format == CtrFormat::kTfRecord) {
    d["label"] = "label";
    Json sparse = Json::array();
    for (const CtrField& f : spec.fields)
      sparse.push_back({{"feature", f.name}, {"type", "int64"}, {"vocab", f.vocab}});
    d["sparse"] = std::move(sparse);
  } else {
    d["dense"] = "drop";
    d["categorical_ids"] = "hex";
    Json fields = Json::array();
    int column = 1;
    for (const CtrField& f : spec.fields) {
      Json columns = Json::array();
      for (int k = 0; k < f.max_ids; ++k) {
        std::string name = "C";  // (not "C" + ...: GCC 12's -Wrestrict false positive)
        name += std::to_string(column++);
        columns.push_back(std::move(name));
      }
      fields.push_back({{"name", f.name}, {"columns", std::move(columns)}, {"buckets", f.vocab}});
    }
    d["fields"] = std::move(fields);
  }
  return d;
}

}  // namespace ps::data

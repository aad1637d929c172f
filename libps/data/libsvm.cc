#include "libps/data/libsvm.h"

#include <algorithm>

#include "libps/core/text.h"
#include "libps/data/text.h"

namespace ps::data {
namespace {

class LibSvmReader : public TextRecordReader {
 public:
  LibSvmReader(std::unique_ptr<ByteStream> s, std::shared_ptr<const LibSvmOptions> o)
      : TextRecordReader(std::move(s), '#'), o_(std::move(o)) {}

  Status Parse(Row* row) override {
    const LibSvmOptions& o = *o_;
    const int64_t shift = o.zero_based ? 0 : 1;
    row->Clear();
    ids_.clear();
    values_.clear();
    std::string_view line = line_;
    size_t pos = 0;
    bool first = true;
    while (pos < line.size()) {
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
      if (pos >= line.size()) break;
      size_t end = pos;
      while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
      std::string_view tok = line.substr(pos, end - pos);
      pos = end;
      if (first) {
        first = false;
        int64_t label;
        if (!ParseLabel(tok, &label))
          return InvalidArgument(Where() + ": bad label " + QuoteInput(tok));
        PS_RETURN_IF_ERROR(MapLabel(label, &row->label));
        continue;
      }
      if (tok.starts_with("qid:")) continue;  // ranking group ids carry no feature
      size_t colon = tok.find(':');
      int64_t id;
      double value;
      if (colon == std::string_view::npos || !ParseInt(tok.substr(0, colon), &id) ||
          !ParseDouble(tok.substr(colon + 1), &value)) {
        return InvalidArgument(Where() + ": bad feature " + QuoteInput(tok));
      }
      if (!LibSvmIdInRange(o, id)) return InvalidArgument(Where() + ": " + LibSvmIdError(o, id));
      ids_.push_back(id - shift);
      values_.push_back(static_cast<float>(value));
    }
    GroupLibSvmFeatures(o, ids_, values_, &field_, row);
    return Status::Ok();
  }

 private:
  Status MapLabel(int64_t label, float* out) const {
    const int classes = o_->classes;
    const bool as_is = classes == 0 || (classes > 2 && label >= 0 && label < classes);
    if (as_is) {
      *out = static_cast<float>(label);
    } else if (classes == 2 && (label == -1 || label == 0 || label == 1)) {
      *out = label == 1 ? 1.0f : 0.0f;
    } else {
      return InvalidArgument(Where() + ": label " + std::to_string(label) +
                             " is out of range for " + std::to_string(classes) + " classes" +
                             (classes == 2 ? " (expected -1, 0 or 1)" : ""));
    }
    return Status::Ok();
  }

  std::shared_ptr<const LibSvmOptions> o_;
  std::vector<int64_t> ids_;  // the line's global ids (after the zero_based shift)
  std::vector<float> values_;
  std::vector<uint32_t> field_;
};

class LibSvmFormat : public RecordFormat {
 public:
  explicit LibSvmFormat(LibSvmOptions o) : o_(std::make_shared<const LibSvmOptions>(std::move(o))) {
    info_ = LibSvmInfo(*o_);
    has_values_ = true;
  }
  Result<std::unique_ptr<RecordReader>> OpenRange(const std::string& path,
                                                  const ByteRange& range) const override {
    PS_ASSIGN_OR_RETURN(auto reader, OpenLibSvm(path, o_, range));
    return std::unique_ptr<RecordReader>(std::move(reader));
  }

 private:
  std::shared_ptr<const LibSvmOptions> o_;
};

}  // namespace

void GroupLibSvmFeatures(const LibSvmOptions& o, std::span<const int64_t> ids,
                         std::span<const float> values, std::vector<uint32_t>* field, Row* row) {
  const std::vector<int64_t>& fo = o.field_offsets;
  if (fo.empty()) {
    row->ids.assign(ids.begin(), ids.end());
    row->values.assign(values.begin(), values.end());
    row->EndField();
    return;
  }
  // Group by field, keeping the order of appearance within each (a stable counting
  // sort; gen-ctr's ascending ids are grouped already).
  field->resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    (*field)[i] =
        static_cast<uint32_t>(std::upper_bound(fo.begin(), fo.end(), ids[i]) - fo.begin() - 1);
  }
  row->ends.assign(fo.size(), 0);
  for (uint32_t f : *field) ++row->ends[f];
  for (size_t f = 1; f < row->ends.size(); ++f) row->ends[f] += row->ends[f - 1];
  row->ids.resize(ids.size());
  row->values.resize(ids.size());
  for (size_t i = ids.size(); i-- > 0;) {  // backwards: each field's slots fill from its end
    const uint32_t at = --row->ends[(*field)[i]];
    row->ids[at] = ids[i] - fo[(*field)[i]];
    row->values[at] = values[i];
  }
  for (size_t f = 0; f + 1 < row->ends.size(); ++f) row->ends[f] = row->ends[f + 1];
  row->ends.back() = static_cast<uint32_t>(ids.size());
}

std::string LibSvmIdError(const LibSvmOptions& o, int64_t id) {
  const int64_t shift = o.zero_based ? 0 : 1;
  return "feature id " + std::to_string(id) + " is out of range [" + std::to_string(shift) + ", " +
         std::to_string(o.num_features - 1 + shift) + "]" +
         (o.zero_based ? "" : " (ids are 1-based)");
}

DatasetInfo LibSvmInfo(const LibSvmOptions& o) {
  DatasetInfo info;
  info.classes = o.classes;
  if (o.field_offsets.empty()) {
    info.field_names = {"features"};
    info.field_vocab_sizes = {o.num_features};
    return info;
  }
  const std::vector<int64_t>& fo = o.field_offsets;
  for (size_t f = 0; f < fo.size(); ++f) {
    info.field_names.push_back("field_" + std::to_string(f));
    info.field_vocab_sizes.push_back((f + 1 < fo.size() ? fo[f + 1] : o.num_features) - fo[f]);
  }
  return info;
}

Status CheckLibSvmOptions(const LibSvmOptions& o, const std::string& prefix) {
  if (o.num_features <= 0) {
    return InvalidArgument(prefix + "num_features: must be positive, got " +
                           std::to_string(o.num_features));
  }
  const std::vector<int64_t>& fo = o.field_offsets;
  for (size_t i = 0; i < fo.size(); ++i) {
    if ((i == 0 && fo[0] != 0) || (i > 0 && fo[i] <= fo[i - 1]) || fo[i] >= o.num_features) {
      return InvalidArgument(
          prefix + "field_offsets[" + std::to_string(i) + "]: " + std::to_string(fo[i]) +
          (i == 0 && fo[0] != 0 ? " (the first offset must be 0)" : "") +
          ": offsets must start at 0, ascend strictly and stay below num_features (" +
          std::to_string(o.num_features) + ")");
    }
  }
  if (o.classes < 0 || o.classes == 1) {
    return InvalidArgument(prefix + "classes: must be 0 (infer) or at least 2, got " +
                           std::to_string(o.classes));
  }
  return Status::Ok();
}

Result<std::unique_ptr<TextRecordReader>> OpenLibSvm(const std::string& path,
                                                     std::shared_ptr<const LibSvmOptions> options,
                                                     const ByteRange& range) {
  PS_ASSIGN_OR_RETURN(auto stream, ByteStream::Open(path, range));
  return std::unique_ptr<TextRecordReader>(new LibSvmReader(std::move(stream), std::move(options)));
}

Result<LibSvmOptions> ParseLibSvmOptions(JsonReader& r) {
  LibSvmOptions o;
  o.classes = 2;
  PS_RETURN_IF_ERROR(r.Get("num_features", &o.num_features));
  PS_RETURN_IF_ERROR(r.GetOr("zero_based", &o.zero_based));
  PS_RETURN_IF_ERROR(r.GetOr("field_offsets", &o.field_offsets));
  if (r.Has("field_offsets") && o.field_offsets.empty()) {
    return InvalidArgument(r.Path("field_offsets") + ": must not be empty (omit it for one field)");
  }
  PS_RETURN_IF_ERROR(r.GetOr("classes", &o.classes));
  if (o.classes < 2) {
    return InvalidArgument(r.Path("classes") +
                           ": must be at least 2 when streaming (the labels cannot be "
                           "counted before training), got " +
                           std::to_string(o.classes));
  }
  PS_RETURN_IF_ERROR(CheckLibSvmOptions(o, r.path() + "."));
  return o;
}

Result<std::unique_ptr<RecordFormat>> MakeLibSvmFormat(JsonReader& r) {
  PS_ASSIGN_OR_RETURN(LibSvmOptions o, ParseLibSvmOptions(r));
  return std::unique_ptr<RecordFormat>(new LibSvmFormat(std::move(o)));
}

}  // namespace ps::data

// The "criteo_tsv" format: Criteo's display-advertising layout, one example per line,
// tab-separated: label (0 or 1), integer columns I1..In (default 13), categorical
// columns C1..Cm (default 26, usually 8 hex digits). Any field but the label may be
// empty: an empty integer counts as 0, an empty categorical column gives no id.
#include <cmath>

#include "libps/core/text.h"
#include "libps/data/record_format.h"
#include "libps/data/text.h"

namespace ps::data {
namespace {

enum class DenseMode { kLog1p, kRaw, kDrop };
enum class IdMode { kHash, kHex };

struct CriteoField {
  std::string name;
  std::vector<int> columns;  // 0-based categorical column indices
  int64_t buckets = 0;
};

struct CriteoSpec {
  int integer_columns = 13;
  int categorical_columns = 26;
  DenseMode dense = DenseMode::kLog1p;
  IdMode ids = IdMode::kHash;
  std::vector<CriteoField> fields;
};

class CriteoReader : public TextRecordReader {
 public:
  CriteoReader(std::unique_ptr<ByteStream> s, std::shared_ptr<const CriteoSpec> spec)
      : TextRecordReader(std::move(s), '\0'), spec_(std::move(spec)) {}

  Status Parse(Row* row) override {
    const CriteoSpec& spec = *spec_;
    row->Clear();
    cells_.clear();
    size_t pos = 0;
    for (;;) {
      size_t tab = line_.find('\t', pos);
      cells_.push_back(
          line_.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos));
      if (tab == std::string_view::npos) break;
      pos = tab + 1;
    }
    const size_t want = 1 + static_cast<size_t>(spec.integer_columns + spec.categorical_columns);
    if (cells_.size() != want) {
      return InvalidArgument(Where() + ": expected " + std::to_string(want) +
                             " tab-separated fields (label, " +
                             std::to_string(spec.integer_columns) + " integer, " +
                             std::to_string(spec.categorical_columns) + " categorical), got " +
                             std::to_string(cells_.size()));
    }
    int64_t label;
    if (!ParseLabel(cells_[0], &label) || (label != 0 && label != 1)) {
      return InvalidArgument(Where() + ": label: expected 0 or 1, got " + QuoteInput(cells_[0]));
    }
    row->label = static_cast<float>(label);
    if (spec.dense != DenseMode::kDrop) {
      for (int i = 0; i < spec.integer_columns; ++i) {
        std::string_view cell = cells_[1 + static_cast<size_t>(i)];
        int64_t v = 0;
        if (!cell.empty() && !ParseInt(cell, &v)) {
          return InvalidArgument(Where() + ": column I" + std::to_string(i + 1) +
                                 ": expected an integer, got " + QuoteInput(cell));
        }
        row->dense.push_back(spec.dense == DenseMode::kRaw
                                 ? static_cast<float>(v)
                                 : static_cast<float>(std::log1p(v > 0 ? v : 0)));
      }
    }
    const size_t first_cat = 1 + static_cast<size_t>(spec.integer_columns);
    for (const CriteoField& f : spec.fields) {
      for (int c : f.columns) {
        std::string_view cell = cells_[first_cat + static_cast<size_t>(c)];
        if (cell.empty()) continue;
        if (spec.ids == IdMode::kHash) {
          row->ids.push_back(
              static_cast<int64_t>(HashBytes(cell) % static_cast<uint64_t>(f.buckets)));
          continue;
        }
        uint64_t id;
        if (!ParseHex(cell, &id) || id >= static_cast<uint64_t>(f.buckets)) {
          return InvalidArgument(Where() + ": column C" + std::to_string(c + 1) + " (field '" +
                                 f.name + "'): expected a hex id below " +
                                 std::to_string(f.buckets) + ", got " + QuoteInput(cell));
        }
        row->ids.push_back(static_cast<int64_t>(id));
      }
      row->EndField();
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<const CriteoSpec> spec_;
  std::vector<std::string_view> cells_;
};

class CriteoFormat : public RecordFormat {
 public:
  explicit CriteoFormat(CriteoSpec spec)
      : spec_(std::make_shared<const CriteoSpec>(std::move(spec))) {
    info_.classes = 2;
    info_.dense_dim = spec_->dense == DenseMode::kDrop ? 0 : spec_->integer_columns;
    for (const CriteoField& f : spec_->fields) {
      info_.field_names.push_back(f.name);
      info_.field_vocab_sizes.push_back(f.buckets);
    }
  }
  Result<std::unique_ptr<RecordReader>> OpenRange(const std::string& path,
                                                  const ByteRange& range) const override {
    PS_ASSIGN_OR_RETURN(auto stream, ByteStream::Open(path, range));
    return std::unique_ptr<RecordReader>(new CriteoReader(std::move(stream), spec_));
  }

 private:
  std::shared_ptr<const CriteoSpec> spec_;
};

Status CheckBuckets(const std::string& path, int64_t buckets) {
  if (buckets < 1 || buckets > (int64_t{1} << 31)) {
    return InvalidArgument(path + ": must be in [1, 2^31], got " + std::to_string(buckets));
  }
  return Status::Ok();
}

// "C7" or 7 → 6 (0-based); error unless in [1, columns].
Status ReadColumn(const Json& j, const std::string& path, int columns, int* out) {
  int64_t c = 0;
  if (j.is_number_integer()) {
    c = j.get<int64_t>();
  } else if (!j.is_string() || j.get<std::string>().size() < 2 || j.get<std::string>()[0] != 'C' ||
             !ParseInt(std::string_view(j.get<std::string>()).substr(1), &c)) {
    return InvalidArgument(path + ": expected a categorical column \"C<k>\" or its number k");
  }
  if (c < 1 || c > columns) {
    return InvalidArgument(path + ": column " + std::to_string(c) + " is not in C1..C" +
                           std::to_string(columns));
  }
  *out = static_cast<int>(c - 1);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<RecordFormat>> MakeCriteoFormat(JsonReader& r) {
  CriteoSpec spec;
  PS_RETURN_IF_ERROR(r.GetOr("integer_columns", &spec.integer_columns));
  if (spec.integer_columns < 0 || spec.integer_columns > 4096) {
    return InvalidArgument(r.Path("integer_columns") + ": must be in 0..4096");
  }
  PS_RETURN_IF_ERROR(r.GetOr("categorical_columns", &spec.categorical_columns));
  if (spec.categorical_columns < 0 || spec.categorical_columns > 4096) {
    return InvalidArgument(r.Path("categorical_columns") + ": must be in 0..4096");
  }
  std::string dense = "log1p", ids = "hash";
  PS_RETURN_IF_ERROR(r.GetOr("dense", &dense));
  if (dense == "log1p") {
    spec.dense = DenseMode::kLog1p;
  } else if (dense == "raw") {
    spec.dense = DenseMode::kRaw;
  } else if (dense == "drop") {
    spec.dense = DenseMode::kDrop;
  } else {
    return InvalidArgument(r.Path("dense") + ": must be \"log1p\", \"raw\" or \"drop\", got \"" +
                           dense + "\"");
  }
  PS_RETURN_IF_ERROR(r.GetOr("categorical_ids", &ids));
  if (ids == "hash") {
    spec.ids = IdMode::kHash;
  } else if (ids == "hex") {
    spec.ids = IdMode::kHex;
  } else {
    return InvalidArgument(r.Path("categorical_ids") + ": must be \"hash\" or \"hex\", got \"" +
                           ids + "\"");
  }
  const Json* fields = r.Find("fields");
  if (fields != nullptr && !fields->is_null()) {
    if (r.Has("buckets"))
      return InvalidArgument(r.Path("buckets") + ": give it per field when \"fields\" is set");
    if (!fields->is_array() || fields->empty())
      return InvalidArgument(r.Path("fields") + ": expected a non-empty array");
    for (size_t i = 0; i < fields->size(); ++i) {
      JsonReader fr((*fields)[i], r.Path("fields") + "[" + std::to_string(i) + "]");
      PS_RETURN_IF_ERROR(fr.status());
      CriteoField f;
      PS_RETURN_IF_ERROR(fr.Get("name", &f.name));
      PS_RETURN_IF_ERROR(fr.Get("buckets", &f.buckets));
      PS_RETURN_IF_ERROR(CheckBuckets(fr.Path("buckets"), f.buckets));
      const Json* cols = fr.Find("columns");
      if (cols == nullptr || !cols->is_array() || cols->empty()) {
        return InvalidArgument(fr.Path("columns") +
                               ": expected a non-empty array of columns (\"C1\" …)");
      }
      for (size_t k = 0; k < cols->size(); ++k) {
        PS_RETURN_IF_ERROR(ReadColumn((*cols)[k],
                                      fr.Path("columns") + "[" + std::to_string(k) + "]",
                                      spec.categorical_columns, &f.columns.emplace_back()));
      }
      PS_RETURN_IF_ERROR(fr.Finish());
      spec.fields.push_back(std::move(f));
    }
  } else {
    std::vector<int64_t> buckets;
    if (const Json* b = r.Find("buckets"); b != nullptr && b->is_number_integer()) {
      buckets.assign(static_cast<size_t>(spec.categorical_columns), b->get<int64_t>());
    } else {
      PS_RETURN_IF_ERROR(r.Get("buckets", &buckets));
      if (buckets.size() != static_cast<size_t>(spec.categorical_columns)) {
        return InvalidArgument(
            r.Path("buckets") + ": expected one integer, or one per categorical column (" +
            std::to_string(spec.categorical_columns) + "), got " + std::to_string(buckets.size()));
      }
    }
    for (int c = 0; c < spec.categorical_columns; ++c) {
      PS_RETURN_IF_ERROR(CheckBuckets(r.Path("buckets"), buckets[static_cast<size_t>(c)]));
      CriteoField f{"C", {c}, buckets[static_cast<size_t>(c)]};
      f.name += std::to_string(c + 1);  // (not "C" + ...: GCC 12's -Wrestrict false positive)
      spec.fields.push_back(std::move(f));
    }
  }
  if (spec.fields.empty() && (spec.dense == DenseMode::kDrop || spec.integer_columns == 0)) {
    return InvalidArgument(r.path() + ": no inputs: no categorical fields and no dense columns");
  }
  return std::unique_ptr<RecordFormat>(new CriteoFormat(std::move(spec)));
}

}  // namespace ps::data

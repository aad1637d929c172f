#include "libps/data/tf_example.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "libps/core/text.h"
#include "libps/data/byte_stream.h"
#include "libps/data/example.pb.h"
#include "libps/data/record_format.h"
#include "libps/data/text.h"
#include "libps/data/tfrecord.h"

namespace ps::data {
namespace {

namespace tfx = pstrain::tfexample;

constexpr int64_t kMaxSize = int64_t{1} << 31;  // a field's ids, a dense feature's values

Status ReadDense(const Json& j, const std::string& path, TfDenseSpec* out) {
  JsonReader r(j, path);
  PS_RETURN_IF_ERROR(r.status());
  PS_RETURN_IF_ERROR(r.Get("feature", &out->feature));
  PS_RETURN_IF_ERROR(r.Get("shape", &out->shape));
  if (out->shape.empty())
    return InvalidArgument(r.Path("shape") + ": must not be empty (use [1] for a scalar)");
  out->size = 1;
  for (int64_t d : out->shape) {
    if (d < 1 || out->size * d > (int64_t{1} << 24)) {
      return InvalidArgument(r.Path("shape") +
                             ": dimensions must be positive, with at most 2^24 values in all");
    }
    out->size *= d;
  }
  return r.Finish();
}

Status ReadSparse(const Json& j, const std::string& path, TfSparseSpec* out) {
  JsonReader r(j, path);
  PS_RETURN_IF_ERROR(r.status());
  PS_RETURN_IF_ERROR(r.Get("feature", &out->feature));
  out->name = out->feature;
  PS_RETURN_IF_ERROR(r.GetOr("name", &out->name));
  std::string type;
  PS_RETURN_IF_ERROR(r.Get("type", &type));
  if (type == "int64") {
    out->type = TfSparseSpec::Type::kInt64;
  } else if (type == "bytes") {
    out->type = TfSparseSpec::Type::kBytes;
  } else {
    return InvalidArgument(r.Path("type") + ": must be \"int64\" or \"bytes\", got " +
                           QuoteInput(type, '"') + "");
  }
  const int given = int{r.Has("vocab")} + int{r.Has("hash_buckets")} + int{r.Has("vocabulary")};
  if (given != 1) {
    return InvalidArgument(path +
                           ": needs exactly one of vocab (int64 ids as they are), hash_buckets, "
                           "vocabulary (bytes)");
  }
  if (r.Has("vocab")) {
    if (out->type != TfSparseSpec::Type::kInt64)
      return InvalidArgument(r.Path("vocab") + ": needs type int64");
    out->map = TfSparseSpec::Map::kIdentity;
    PS_RETURN_IF_ERROR(r.Get("vocab", &out->size));
  } else if (r.Has("hash_buckets")) {
    out->map = TfSparseSpec::Map::kHash;
    PS_RETURN_IF_ERROR(r.Get("hash_buckets", &out->size));
  } else {
    if (out->type != TfSparseSpec::Type::kBytes)
      return InvalidArgument(r.Path("vocabulary") + ": needs type bytes");
    out->map = TfSparseSpec::Map::kVocabulary;
    std::vector<std::string> tokens;
    PS_RETURN_IF_ERROR(r.Get("vocabulary", &tokens));
    auto v = Vocabulary::Create(std::move(tokens), 1);
    if (!v.ok()) return v.status().WithContext(r.Path("vocabulary"));
    out->vocabulary = std::move(*v);
    out->size = out->vocabulary.size();
  }
  if (out->size < 1 || out->size > kMaxSize) {
    return InvalidArgument(path + ": the field's size must be in [1, 2^31], got " +
                           std::to_string(out->size));
  }
  PS_RETURN_IF_ERROR(r.GetOr("weights", &out->weights));
  PS_RETURN_IF_ERROR(r.GetOr("optional", &out->optional));
  return r.Finish();
}

const char* KindName(const tfx::Feature& f) {
  if (f.has_int64_list()) return "int64_list";
  if (f.has_float_list()) return "float_list";
  if (f.has_bytes_list()) return "bytes_list";
  return "no list";
}
int Kinds(const tfx::Feature& f) {
  return int{f.has_int64_list()} + int{f.has_float_list()} + int{f.has_bytes_list()};
}

Status Bad(const std::string& feature, const std::string& what) {
  return InvalidArgument("feature '" + feature + "': " + what);
}

// A file of TFRecords holding tf.Examples.
class TfExampleReader : public RecordReader {
 public:
  TfExampleReader(std::unique_ptr<ByteStream> s, std::shared_ptr<const TfExampleSpec> spec)
      : records_(std::move(s)), decoder_(std::move(spec)) {}
  Result<bool> Advance() override { return records_.Next(&record_); }
  bool resumable() const override { return records_.resumable(); }
  std::string Where() const override { return records_.Where(); }
  uint64_t offset() const override { return records_.offset(); }
  Status Parse(Row* row) override {
    Status st = decoder_.Decode(record_, row);
    if (!st.ok()) return Status(st.code(), Where() + ": " + st.message());
    return st;
  }

 private:
  TfRecordReader records_;
  TfExampleDecoder decoder_;
  std::string_view record_;
};

class TfExampleFormat : public RecordFormat {
 public:
  explicit TfExampleFormat(TfExampleSpec spec)
      : spec_(std::make_shared<const TfExampleSpec>(std::move(spec))) {
    info_.classes = spec_->classes;
    for (const TfDenseSpec& d : spec_->dense) info_.dense_dim += d.size;
    for (const TfSparseSpec& s : spec_->sparse) {
      info_.field_names.push_back(s.name);
      info_.field_vocab_sizes.push_back(s.size);
      if (!s.weights.empty()) has_values_ = true;
    }
  }
  Result<std::unique_ptr<RecordReader>> OpenRange(const std::string& path,
                                                  const ByteRange& range) const override {
    PS_ASSIGN_OR_RETURN(auto stream, ByteStream::Open(path, ByteRange{range.begin}));
    return std::unique_ptr<RecordReader>(new TfExampleReader(std::move(stream), spec_));
  }

 private:
  std::shared_ptr<const TfExampleSpec> spec_;
};

}  // namespace

Result<TfExampleSpec> ParseTfExampleSpec(JsonReader& r) {
  TfExampleSpec spec;
  PS_RETURN_IF_ERROR(r.Get("label", &spec.label));
  PS_RETURN_IF_ERROR(r.GetOr("classes", &spec.classes));
  if (spec.classes < 2) return InvalidArgument(r.Path("classes") + ": must be at least 2");
  for (const char* key : {"dense", "sparse"}) {
    const Json* list = r.Find(key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array()) return InvalidArgument(r.Path(key) + ": expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string p = r.Path(key) + "[" + std::to_string(i) + "]";
      if (std::string_view(key) == "dense") {
        PS_RETURN_IF_ERROR(ReadDense((*list)[i], p, &spec.dense.emplace_back()));
      } else {
        PS_RETURN_IF_ERROR(ReadSparse((*list)[i], p, &spec.sparse.emplace_back()));
      }
    }
  }
  if (spec.dense.empty() && spec.sparse.empty()) {
    return InvalidArgument(r.path() + ": needs at least one \"dense\" or \"sparse\" feature");
  }
  return spec;
}

Result<std::unique_ptr<RecordFormat>> MakeTfExampleFormat(JsonReader& r) {
  PS_ASSIGN_OR_RETURN(TfExampleSpec spec, ParseTfExampleSpec(r));
  return std::unique_ptr<RecordFormat>(new TfExampleFormat(std::move(spec)));
}

// ---- decoding --------------------------------------------------------------------------

struct TfExampleDecoder::Impl {
  std::shared_ptr<const TfExampleSpec> spec;
  tfx::Example example;
  // The features the spec reads: names[k], and per record found[k] (nullptr = absent).
  // Slot 0 is the label, then the dense features, the sparse ones, their weights.
  std::vector<std::string> names;
  std::vector<const tfx::Feature*> found;
  std::vector<int> dense_slot, sparse_slot, weight_slot;  // -1: no weights
  std::vector<int> guess;   // [entry position] the slot that entry held in the last record
  bool has_values = false;  // some field has weights: rows carry values (1 where none)

  int Slot(const std::string& name) {
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k] == name) return static_cast<int>(k);
    }
    names.push_back(name);
    return static_cast<int>(names.size() - 1);
  }
  int Find(std::string_view key, size_t position) {
    if (position < guess.size()) {
      int g = guess[position];
      if (g >= 0 && names[static_cast<size_t>(g)] == key) return g;
    } else {
      guess.resize(position + 1, -1);
    }
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k] == key) return guess[position] = static_cast<int>(k);
    }
    return guess[position] = -1;
  }
};

TfExampleDecoder::TfExampleDecoder(std::shared_ptr<const TfExampleSpec> spec)
    : impl_(std::make_unique<Impl>()) {
  impl_->spec = std::move(spec);
  impl_->Slot(impl_->spec->label);
  for (const TfDenseSpec& d : impl_->spec->dense)
    impl_->dense_slot.push_back(impl_->Slot(d.feature));
  for (const TfSparseSpec& s : impl_->spec->sparse) {
    impl_->sparse_slot.push_back(impl_->Slot(s.feature));
    impl_->weight_slot.push_back(s.weights.empty() ? -1 : impl_->Slot(s.weights));
    if (!s.weights.empty()) impl_->has_values = true;
  }
  impl_->found.resize(impl_->names.size());
}

TfExampleDecoder::~TfExampleDecoder() = default;

Status TfExampleDecoder::Decode(std::string_view record, Row* row) {
  Impl& m = *impl_;
  const TfExampleSpec& spec = *m.spec;
  row->Clear();
  if (!m.example.ParseFromArray(record.data(), static_cast<int>(record.size()))) {
    return InvalidArgument("not a tf.Example: protobuf parse error");
  }
  std::fill(m.found.begin(), m.found.end(), nullptr);
  const auto& entries = m.example.features().feature();
  for (int i = 0; i < entries.size(); ++i) {
    int k = m.Find(entries[i].key(), static_cast<size_t>(i));
    if (k >= 0)
      m.found[static_cast<size_t>(k)] = &entries[i].value();  // a repeated key: the last wins
  }
  for (size_t k = 0; k < m.found.size(); ++k) {
    if (m.found[k] != nullptr && Kinds(*m.found[k]) > 1) {
      return Bad(m.names[k], "more than one of bytes_list, float_list, int64_list");
    }
  }
  // Label.
  const tfx::Feature* lf = m.found[0];
  if (lf == nullptr) return Bad(spec.label, "missing (the label)");
  double label;
  if (lf->has_int64_list() && lf->int64_list().value_size() == 1) {
    label = static_cast<double>(lf->int64_list().value(0));
  } else if (lf->has_float_list() && lf->float_list().value_size() == 1) {
    label = lf->float_list().value(0);
  } else {
    return Bad(spec.label,
               std::string("the label must be an int64_list or float_list of one value, got ") +
                   KindName(*lf));
  }
  if (!(label >= 0 && label < spec.classes && std::floor(label) == label)) {
    return Bad(spec.label, "label " + std::to_string(label) + " is not a class index in 0.." +
                               std::to_string(spec.classes - 1));
  }
  row->label = static_cast<float>(label);
  // Dense.
  for (size_t d = 0; d < spec.dense.size(); ++d) {
    const TfDenseSpec& ds = spec.dense[d];
    const tfx::Feature* f = m.found[static_cast<size_t>(m.dense_slot[d])];
    if (f == nullptr) return Bad(ds.feature, "missing");
    if (!f->has_float_list())
      return Bad(ds.feature, std::string("expected float_list, got ") + KindName(*f));
    const auto& v = f->float_list().value();
    if (v.size() != ds.size) {
      return Bad(ds.feature, "expected " + std::to_string(ds.size) + " values, got " +
                                 std::to_string(v.size()));
    }
    row->dense.insert(row->dense.end(), v.begin(), v.end());
  }
  // Sparse.
  for (size_t s = 0; s < spec.sparse.size(); ++s) {
    const TfSparseSpec& ss = spec.sparse[s];
    const tfx::Feature* f = m.found[static_cast<size_t>(m.sparse_slot[s])];
    const size_t before = row->ids.size();
    if (f == nullptr) {
      if (!ss.optional) return Bad(ss.feature, "missing");
    } else if (Kinds(*f) == 0) {
      // An empty Feature: no values of any type.
    } else if (ss.type == TfSparseSpec::Type::kInt64) {
      if (!f->has_int64_list())
        return Bad(ss.feature, std::string("expected int64_list, got ") + KindName(*f));
      for (int64_t id : f->int64_list().value()) {
        if (ss.map == TfSparseSpec::Map::kHash) {
          id = static_cast<int64_t>(HashInt(id) % static_cast<uint64_t>(ss.size));
        } else if (id < 0 || id >= ss.size) {
          return Bad(ss.feature, "id " + std::to_string(id) + " is out of range [0, " +
                                     std::to_string(ss.size) + ")");
        }
        row->ids.push_back(id);
      }
    } else {
      if (!f->has_bytes_list())
        return Bad(ss.feature, std::string("expected bytes_list, got ") + KindName(*f));
      for (const std::string& token : f->bytes_list().value()) {
        row->ids.push_back(
            ss.map == TfSparseSpec::Map::kHash
                ? static_cast<int64_t>(HashBytes(token) % static_cast<uint64_t>(ss.size))
                : ss.vocabulary.Lookup(token));
      }
    }
    row->EndField();
    const size_t count = row->ids.size() - before;
    if (m.weight_slot[s] >= 0) {
      const tfx::Feature* w = m.found[static_cast<size_t>(m.weight_slot[s])];
      if (w == nullptr && count > 0)
        return Bad(ss.weights, "missing (weights of '" + ss.feature + "')");
      if (w != nullptr &&
          (!w->has_float_list() || static_cast<size_t>(w->float_list().value_size()) != count) &&
          !(count == 0 && Kinds(*w) == 0)) {
        return Bad(ss.weights, "expected a float_list of " + std::to_string(count) +
                                   " weights (one per id of '" + ss.feature + "'), got " +
                                   KindName(*w));
      }
      if (count > 0)
        row->values.insert(row->values.end(), w->float_list().value().begin(),
                           w->float_list().value().end());
    } else if (m.has_values) {
      row->values.insert(row->values.end(), count, 1.0f);
    }
  }
  return Status::Ok();
}

// ---- building --------------------------------------------------------------------------

struct TfExampleBuilder::Impl {
  tfx::Example example;
  tfx::Feature* Add(std::string_view name) {
    tfx::FeatureEntry* e = example.mutable_features()->add_feature();
    e->set_key(std::string(name));
    return e->mutable_value();
  }
};

TfExampleBuilder::TfExampleBuilder() : impl_(std::make_unique<Impl>()) {}
TfExampleBuilder::~TfExampleBuilder() = default;
void TfExampleBuilder::Clear() { impl_->example.Clear(); }

void TfExampleBuilder::AddInt64(std::string_view feature, std::span<const int64_t> values) {
  auto* list = impl_->Add(feature)->mutable_int64_list()->mutable_value();
  list->Add(values.begin(), values.end());
}
void TfExampleBuilder::AddFloat(std::string_view feature, std::span<const float> values) {
  auto* list = impl_->Add(feature)->mutable_float_list()->mutable_value();
  list->Add(values.begin(), values.end());
}
void TfExampleBuilder::AddBytes(std::string_view feature, std::span<const std::string> values) {
  auto* list = impl_->Add(feature)->mutable_bytes_list();
  for (const std::string& v : values) list->add_value(v);
}
void TfExampleBuilder::AppendTo(std::string* out) const { impl_->example.AppendToString(out); }

}  // namespace ps::data

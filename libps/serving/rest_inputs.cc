#include "libps/serving/rest_inputs.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "libps/core/text.h"
#include "libps/data/examples.h"
#include "libps/data/libsvm.h"
#include "libps/data/record_format.h"
#include "libps/data/row.h"
#include "libps/data/tf_example.h"

namespace ps::serving {

namespace {

using Instance = std::vector<std::pair<std::string, const Json*>>;

const Json* Lookup(const Instance& in, const std::string& name) {
  for (const auto& [k, v] : in) {
    if (k == name) return v->is_null() ? nullptr : v;
  }
  return nullptr;
}

std::string Where(size_t i, const std::string& input) {
  return "instance " + std::to_string(i) + ": input '" + input + "'";
}

// Numbers arrive as JSON numbers, or as the strings the request parser made of NaN,
// Infinity and -Infinity (rest.cc).
bool AsDouble(const Json& v, double* out) {
  if (v.is_number()) {
    *out = v.get<double>();
    return true;
  }
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "\x01NaN")
      *out = std::nan("");
    else if (s == "\x01Infinity")
      *out = std::numeric_limits<double>::infinity();
    else if (s == "\x01-Infinity")
      *out = -std::numeric_limits<double>::infinity();
    else
      return false;
    return true;
  }
  return false;
}

// A scalar or nested lists of scalars, flattened row-major (a dense input of shape
// [2, 2] comes as [[a, b], [c, d]]).
void Flatten(const Json& v, std::vector<const Json*>* out) {
  if (v.is_array()) {
    for (const auto& e : v) Flatten(e, out);
  } else {
    out->push_back(&v);
  }
}
std::vector<const Json*> AsList(const Json& v) {
  std::vector<const Json*> out;
  Flatten(v, &out);
  return out;
}

Status Floats(const Json& v, size_t i, const std::string& name, std::vector<double>* out) {
  out->clear();
  for (const Json* e : AsList(v)) {
    double d;
    if (!AsDouble(*e, &d)) return InvalidArgument(Where(i, name) + ": expected numbers");
    out->push_back(d);
  }
  return Status::Ok();
}

Status Ints(const Json& v, size_t i, const std::string& name, std::vector<int64_t>* out) {
  out->clear();
  for (const Json* e : AsList(v)) {
    if (!e->is_number_integer()) return InvalidArgument(Where(i, name) + ": expected integers");
    out->push_back(e->get<int64_t>());
  }
  return Status::Ok();
}

Status Strings(const Json& v, size_t i, const std::string& name, std::vector<std::string>* out) {
  out->clear();
  for (const Json* e : AsList(v)) {
    if (!e->is_string()) return InvalidArgument(Where(i, name) + ": expected strings");
    out->push_back(e->get<std::string>());
  }
  return Status::Ok();
}

// Every value of a numeric list, printed so that the reader reads back the same double.
std::string Num(double d) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

}  // namespace

struct InputSchema::Impl {
  std::string format;
  std::vector<InputSpec> inputs;
  data::DatasetInfo info;
  bool has_values = false;
  std::unique_ptr<data::RecordFormat> text_format;     // criteo_tsv
  data::LibSvmOptions libsvm;                          // libsvm
  std::shared_ptr<const data::TfExampleSpec> tf_spec;  // tfrecord
  int64_t idx_dim = -1;
  float idx_scale = data::ExampleTable().dense_u8_scale;
  int criteo_ints = 0, criteo_cats = 0;

  Status TextLine(const Instance& in, size_t i, std::string* line) const;
  Result<model::Batch> FromText(const std::vector<Instance>& instances) const;
  Result<model::Batch> FromTfExamples(const std::vector<Instance>& instances) const;
  Result<model::Batch> FromIdx(const std::vector<Instance>& instances) const;
};

const char* DtypeName(InputSpec::Type type) {
  switch (type) {
    case InputSpec::Type::kFloat:
      return "DT_FLOAT";
    case InputSpec::Type::kInt64:
      return "DT_INT64";
    case InputSpec::Type::kString:
      return "DT_STRING";
  }
  return "DT_INVALID";
}

InputSchema::InputSchema(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InputSchema::~InputSchema() = default;
const std::string& InputSchema::format() const { return impl_->format; }
const std::vector<InputSpec>& InputSchema::inputs() const { return impl_->inputs; }
const InputSpec* InputSchema::Find(const std::string& name) const {
  for (const auto& s : impl_->inputs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Result<std::shared_ptr<const InputSchema>> InputSchema::Make(const Json& job) {
  const bool eval = job.contains("eval_data") && job["eval_data"].is_object();
  const std::string path = eval ? "job.eval_data" : "job.train_data";
  Json data = eval ? job["eval_data"] : job.value("train_data", Json::object());
  if (!data.is_object() || !data.contains("format") || !data["format"].is_string()) {
    return InvalidArgument(path + ": no data format: the model's inputs are unknown");
  }
  auto impl = std::make_unique<Impl>();
  impl->format = data["format"].get<std::string>();
  const std::string& f = impl->format;
  using T = InputSpec::Type;
  if (f == "idx") {
    const Json& m = job.value("model", Json::object());
    for (const char* key : {"input_dim", "dense_dim"}) {
      if (m.contains(key) && m[key].is_number_integer()) impl->idx_dim = m[key].get<int64_t>();
    }
    if (m.contains("inputs") && m["inputs"].is_array() && m["inputs"].size() == 1 &&
        m["inputs"][0].value("dim", Json()).is_number_integer()) {
      impl->idx_dim = m["inputs"][0]["dim"].get<int64_t>();  // a graph's one dense input
    }
    impl->info.dense_dim = impl->idx_dim;
    impl->inputs.push_back({"image", T::kFloat, {-1, impl->idx_dim}, true});
  } else if (f == "libsvm" || f == "criteo_tsv" || f == "tfrecord") {
    // The streamed readers' own parsers: a request's instances are records of the format.
    if (f == "libsvm" && data.value("classes", 0) < 2) data["classes"] = 2;  // labels unused
    JsonReader r(data, path);
    PS_RETURN_IF_ERROR(r.status());
    PS_ASSIGN_OR_RETURN(auto rf, data::MakeRecordFormat(f, r));
    impl->info = rf->info();
    impl->has_values = rf->has_values();
    if (f == "libsvm") {
      impl->inputs.push_back({"features", T::kInt64, {-1, -1}, true});
      impl->inputs.push_back({"values", T::kFloat, {-1, -1}, false});
    } else if (f == "criteo_tsv") {
      impl->criteo_ints = data.value("integer_columns", 13);
      impl->criteo_cats = data.value("categorical_columns", 26);
      for (int c = 1; c <= impl->criteo_ints; ++c)
        impl->inputs.push_back({"I" + std::to_string(c), T::kInt64, {-1}, false});
      for (int c = 1; c <= impl->criteo_cats; ++c)
        impl->inputs.push_back({"C" + std::to_string(c), T::kString, {-1}, false});
    } else {
      JsonReader sr(data, path);
      PS_ASSIGN_OR_RETURN(auto spec, data::ParseTfExampleSpec(sr));
      for (const auto& d : spec.dense) {
        std::vector<int64_t> shape{-1};
        shape.insert(shape.end(), d.shape.begin(), d.shape.end());
        impl->inputs.push_back({d.feature, T::kFloat, shape, true});
      }
      for (const auto& s : spec.sparse) {
        const T type = s.type == data::TfSparseSpec::Type::kInt64 ? T::kInt64 : T::kString;
        impl->inputs.push_back({s.feature, type, {-1, -1}, !s.optional});
        if (!s.weights.empty()) impl->inputs.push_back({s.weights, T::kFloat, {-1, -1}, false});
      }
      impl->tf_spec = std::make_shared<const data::TfExampleSpec>(std::move(spec));
    }
    if (f == "libsvm") {
      JsonReader lr(data, path);
      PS_ASSIGN_OR_RETURN(impl->libsvm, data::ParseLibSvmOptions(lr));
    } else if (f == "criteo_tsv") {
      impl->text_format = std::move(rf);
    }
  } else if (f == "csv" || f == "string_features") {
    return InvalidArgument(path + ": format \"" + f +
                           "\" is not served (pstrain-serve serves idx, libsvm, criteo_tsv "
                           "and tfrecord models)");
  } else {
    return InvalidArgument(path + ".format: unknown format \"" + f + "\"");
  }
  return std::shared_ptr<const InputSchema>(new InputSchema(std::move(impl)));
}

Status InputSchema::Impl::TextLine(const Instance& in, size_t i, std::string* line) const {
  // criteo_tsv: label, the integer cells, the categorical cells.
  *line = "0";
  for (int c = 1; c <= criteo_ints + criteo_cats; ++c) {
    const bool is_int = c <= criteo_ints;
    // Appended, not "I" + std::to_string(c): GCC 12's -Wrestrict false positive.
    std::string name(1, is_int ? 'I' : 'C');
    name += std::to_string(is_int ? c : c - criteo_ints);
    *line += '\t';
    const Json* v = Lookup(in, name);
    if (v == nullptr) continue;
    if (is_int) {
      if (!v->is_number_integer()) return InvalidArgument(Where(i, name) + ": expected an integer");
      *line += std::to_string(v->get<int64_t>());
    } else {
      if (!v->is_string()) return InvalidArgument(Where(i, name) + ": expected a string");
      const auto& s = v->get_ref<const std::string&>();
      if (s.find_first_of("\t\n\r") != std::string::npos) {
        return InvalidArgument(Where(i, name) + ": a tab or line break in a token");
      }
      *line += s;
    }
  }
  return Status::Ok();
}

bool InputSchema::is_libsvm() const { return impl_->format == "libsvm"; }

void InputSchema::StartBatch(model::Batch* batch) const {
  const size_t fields = impl_->info.field_vocab_sizes.size();
  batch->size = 0;
  batch->dense_dim = impl_->info.dense_dim;
  batch->dense.clear();
  batch->labels.clear();
  batch->sparse.resize(fields);
  for (model::SparseField& f : batch->sparse) {
    f.offsets.assign(1, 0);
    f.ids.clear();
    f.values.clear();
  }
}

Status InputSchema::AppendLibSvm(size_t i, std::span<const int64_t> ids,
                                 const std::vector<double>* values, model::Batch* batch) const {
  if (values != nullptr && values->size() != ids.size()) {
    return InvalidArgument(Where(i, "values") + ": " + std::to_string(values->size()) +
                           " values for " + std::to_string(ids.size()) + " features");
  }
  const data::LibSvmOptions& o = impl_->libsvm;
  const int64_t shift = o.zero_based ? 0 : 1;
  const std::vector<int64_t>& fo = o.field_offsets;
  // As the reader: each id checked in order, then put in its field, keeping the order of
  // appearance within the field.
  for (size_t k = 0; k < ids.size(); ++k) {
    if (values != nullptr && !std::isfinite((*values)[k])) {  // as the reader: not a number
      return InvalidArgument("instance " + std::to_string(i) + ": bad feature " +
                             QuoteInput(std::to_string(ids[k]) + ":" + Num((*values)[k])));
    }
    if (!data::LibSvmIdInRange(o, ids[k])) {
      return InvalidArgument("instance " + std::to_string(i) + ": " +
                             data::LibSvmIdError(o, ids[k]));
    }
    const int64_t id = ids[k] - shift;
    size_t f = 0;
    if (!fo.empty())
      f = static_cast<size_t>(std::upper_bound(fo.begin(), fo.end(), id) - fo.begin() - 1);
    model::SparseField& field = batch->sparse[f];
    field.ids.push_back(fo.empty() ? id : id - fo[f]);
    // The value as a double, then a float, as the reader reads it.
    field.values.push_back(values == nullptr ? 1.0f : static_cast<float>((*values)[k]));
  }
  for (model::SparseField& field : batch->sparse)
    field.offsets.push_back(static_cast<int64_t>(field.ids.size()));
  ++batch->size;
  return Status::Ok();
}

// The instances as lines of a file of the format, read back by the format's own reader
// from an anonymous memory file.
Result<model::Batch> InputSchema::Impl::FromText(const std::vector<Instance>& instances) const {
  std::string text, line;
  for (size_t i = 0; i < instances.size(); ++i) {
    PS_RETURN_IF_ERROR(TextLine(instances[i], i, &line));
    text += line;
    text += '\n';
  }
  const int fd = ::memfd_create("pstrain-serve-request", MFD_CLOEXEC);
  if (fd < 0) return Internal(std::string("memfd_create: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  for (size_t at = 0; at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Internal(std::string("memfd write: ") + std::strerror(errno));
    }
    at += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  PS_ASSIGN_OR_RETURN(auto reader, text_format->Open(path));
  model::Batch batch = data::StartBatch(info);
  data::Row row;
  for (size_t i = 0; i < instances.size(); ++i) {
    PS_ASSIGN_OR_RETURN(bool more, reader->Advance());
    if (!more) return Internal("request records: " + std::to_string(i) + " read back");
    if (Status st = reader->Parse(&row); !st.ok()) {
      // "<path>:<line>: problem" -> "instance <i>: problem"
      std::string m = st.message();
      const std::string prefix = reader->Where() + ": ";
      if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
      return InvalidArgument("instance " + std::to_string(i) + ": " + m);
    }
    data::AppendRow(row, has_values, &batch);
  }
  batch.labels.clear();
  return batch;
}

Result<model::Batch> InputSchema::Impl::FromTfExamples(
    const std::vector<Instance>& instances) const {
  data::TfExampleBuilder builder;
  data::TfExampleDecoder decoder(tf_spec);
  model::Batch batch = data::StartBatch(info);
  data::Row row;
  std::string record;
  std::vector<double> d;
  std::vector<float> fl;
  std::vector<int64_t> ints;
  std::vector<std::string> strs;
  for (size_t i = 0; i < instances.size(); ++i) {
    builder.Clear();
    if (!tf_spec->label.empty()) {
      const int64_t zero = 0;
      builder.AddInt64(tf_spec->label, {&zero, 1});
    }
    for (const auto& in : inputs) {
      const Json* v = Lookup(instances[i], in.name);
      if (v == nullptr) {
        if (in.required) return InvalidArgument(Where(i, in.name) + ": missing");
        continue;
      }
      if (in.type == InputSpec::Type::kFloat) {
        PS_RETURN_IF_ERROR(Floats(*v, i, in.name, &d));
        fl.assign(d.begin(), d.end());
        builder.AddFloat(in.name, fl);
      } else if (in.type == InputSpec::Type::kInt64) {
        PS_RETURN_IF_ERROR(Ints(*v, i, in.name, &ints));
        builder.AddInt64(in.name, ints);
      } else {
        PS_RETURN_IF_ERROR(Strings(*v, i, in.name, &strs));
        builder.AddBytes(in.name, strs);
      }
    }
    record.clear();
    builder.AppendTo(&record);
    if (Status st = decoder.Decode(record, &row); !st.ok()) {
      return InvalidArgument("instance " + std::to_string(i) + ": " + st.message());
    }
    data::AppendRow(row, has_values, &batch);
  }
  batch.labels.clear();
  return batch;
}

Result<model::Batch> InputSchema::Impl::FromIdx(const std::vector<Instance>& instances) const {
  model::Batch batch;
  batch.size = 0;
  batch.dense_dim = idx_dim;
  std::vector<double> px;
  for (size_t i = 0; i < instances.size(); ++i) {
    const Json* v = Lookup(instances[i], "image");
    if (v == nullptr) return InvalidArgument(Where(i, "image") + ": missing");
    PS_RETURN_IF_ERROR(Floats(*v, i, "image", &px));
    if (idx_dim >= 0 && static_cast<int64_t>(px.size()) != idx_dim) {
      return InvalidArgument(Where(i, "image") + ": expected " + std::to_string(idx_dim) +
                             " pixels, got " + std::to_string(px.size()));
    }
    if (i == 0) batch.dense_dim = static_cast<int64_t>(px.size());
    if (static_cast<int64_t>(px.size()) != batch.dense_dim) {
      return InvalidArgument(Where(i, "image") + ": another size than instance 0's");
    }
    for (double p : px) {
      if (!(p >= 0 && p <= 255) || p != std::floor(p)) {
        return InvalidArgument(Where(i, "image") +
                               ": pixels are integers 0..255 (as in the "
                               "IDX file), got " +
                               Num(p));
      }
      batch.dense.push_back(static_cast<float>(static_cast<uint8_t>(p)) * idx_scale);
    }
    ++batch.size;
  }
  return batch;
}

namespace {

Result<model::Batch> FromLibSvm(const InputSchema& schema, const std::vector<Instance>& instances) {
  model::Batch batch;
  schema.StartBatch(&batch);
  std::vector<int64_t> ids;
  std::vector<double> values;
  for (size_t i = 0; i < instances.size(); ++i) {
    const Json* f = Lookup(instances[i], "features");
    if (f == nullptr) return InvalidArgument(Where(i, "features") + ": missing");
    PS_RETURN_IF_ERROR(Ints(*f, i, "features", &ids));
    const Json* v = Lookup(instances[i], "values");
    if (v != nullptr) PS_RETURN_IF_ERROR(Floats(*v, i, "values", &values));
    PS_RETURN_IF_ERROR(schema.AppendLibSvm(i, ids, v != nullptr ? &values : nullptr, &batch));
  }
  return batch;
}

}  // namespace

Result<model::Batch> InputSchema::ToBatch(const std::vector<Instance>& instances) const {
  if (impl_->format == "idx") return impl_->FromIdx(instances);
  if (impl_->format == "libsvm") return FromLibSvm(*this, instances);
  if (impl_->format == "tfrecord") return impl_->FromTfExamples(instances);
  return impl_->FromText(instances);
}

}  // namespace ps::serving

// Fuzz entries for the data readers (libps/data): each input is one file, loaded whole
// through LoadExamples and, for the formats that stream, read record by record.
#include <algorithm>
#include <memory>
#include <string>

#include "libps/core/json.h"
#include "libps/data/dataset.h"
#include "libps/data/record_format.h"
#include "libps/data/tf_example.h"
#include "libps/data/tfrecord.h"
#include "test/fuzz/fuzz_targets.h"

namespace ps::fuzz {
namespace {

constexpr int kMaxRecords = 1 << 16;

Json Config(const std::string& text) { return Json::parse(text); }

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

// Loads the file `config` names; what loads must be a consistent table.
void Load(const std::string& config) {
  auto table = data::LoadExamples(Config(config), "fuzz", "/");
  if (table.ok()) FUZZ_CHECK(table->Validate().ok());
}

// Streams `path` as `format` with the format's keys in `keys` (a JSON object).
void Stream(const std::string& format, const std::string& keys, const std::string& path) {
  Json json = Config(keys);
  JsonReader r(json, "fuzz");
  auto fmt = data::MakeRecordFormat(format, r);
  FUZZ_CHECK(fmt.ok() && *fmt != nullptr);
  auto reader = (*fmt)->Open(path);
  if (!reader.ok()) return;
  data::Row row;
  for (int i = 0; i < kMaxRecords; ++i) {
    auto more = (*reader)->Advance();
    if (!more.ok()) {
      if (!(*reader)->resumable()) return;
      continue;
    }
    if (!*more) return;
    if ((*reader)->Parse(&row).ok()) {
      FUZZ_CHECK(row.ends.size() == (*fmt)->info().field_names.size());
      FUZZ_CHECK(row.ends.empty() || row.ends.back() == row.ids.size());
    }
  }
}

// The tf.Example spec of the tfrecord tests: every dense/sparse mapping kind.
const char kTfSpec[] = R"("label":"click",
  "dense":[{"feature":"x","shape":[2]}],
  "sparse":[{"feature":"site","type":"int64","vocab":10},
            {"feature":"user","name":"user_hashed","type":"int64","hash_buckets":50,"optional":true},
            {"feature":"country","type":"bytes","vocabulary":["de","us"]},
            {"feature":"query","type":"bytes","hash_buckets":100,"weights":"query_w"}])";

}  // namespace

// data: u16 little-endian n, then n bytes of the idx3 images file, then the idx1 labels.
void Idx(Bytes data) {
  static MemFile images, labels;
  if (data.size() < 2) return;
  const size_t n = std::min<size_t>(data[0] | (size_t{data[1]} << 8), data.size() - 2);
  images.Set(data.subspan(2, n));
  labels.Set(data.subspan(2 + n));
  for (const char* classes : {"0", "10"}) {
    Load(R"({"format":"idx","images":)" + Quoted(images.path()) + R"(,"labels":)" +
         Quoted(labels.path()) + R"(,"classes":)" + classes + "}");
  }
}

// data: a LibSVM file, read with one field and with field offsets, 0- and 1-based.
void LibSvm(Bytes data) {
  static MemFile file;
  file.Set(data);
  const std::string keys[] = {
      R"({"num_features":100})",
      R"({"num_features":64,"zero_based":true,"field_offsets":[0,10,40],"classes":2})",
      R"({"num_features":1000,"classes":5})",
  };
  for (const std::string& k : keys) {
    Load(R"({"format":"libsvm","path":)" + Quoted(file.path()) + "," + k.substr(1));
    Stream("libsvm", k, file.path());
  }
}

// data: a CSV file (header first), read with integer labels and learned vocabularies,
// and with a label vocabulary, fixed vocabularies and tabs.
void Csv(Bytes data) {
  static MemFile file;
  file.Set(data);
  const std::string p = Quoted(file.path());
  Load(
      R"({"format":"csv","path":)" + p +
      R"(,"label":"label","dense":["a","b"],"categorical":["c",{"column":"d","vocabulary":["x","y"]}]})");
  Load(
      R"({"format":"csv","path":)" + p +
      R"(,"label":"label","dense":["a"],"label_vocabulary":["yes","no"],"classes":2,"delimiter":"\t"})");
}

// data: a TFRecord file: framed record by record, then loaded as tf.Examples.
void TfRecord(Bytes data) {
  static MemFile file;
  file.Set(data);
  auto stream = data::ByteStream::Open(file.path());
  if (stream.ok()) {
    data::TfRecordReader reader(std::move(*stream), 1 << 16);
    std::string_view record;
    for (int i = 0; i < kMaxRecords; ++i) {
      auto more = reader.Next(&record);
      if (!more.ok() && !reader.resumable()) break;
      if (more.ok() && !*more) break;
    }
  }
  Load(R"({"format":"tfrecord","on_error":"skip","path":)" + Quoted(file.path()) + "," + kTfSpec +
       "}");
  Stream("tfrecord", std::string("{") + kTfSpec + "}", file.path());
}

// data: one serialized tf.Example, decoded by the spec above.
void TfExample(Bytes data) {
  static const auto spec = [] {
    Json json = Config(std::string("{") + kTfSpec + "}");
    JsonReader r(json, "fuzz");
    auto s = data::ParseTfExampleSpec(r);
    FUZZ_CHECK(s.ok());
    return std::make_shared<const data::TfExampleSpec>(std::move(*s));
  }();
  static data::TfExampleDecoder decoder(spec);
  data::Row row;
  if (decoder.Decode({reinterpret_cast<const char*>(data.data()), data.size()}, &row).ok()) {
    FUZZ_CHECK(row.dense.size() == 2);
    FUZZ_CHECK(row.ends.size() == spec->sparse.size());
    FUZZ_CHECK(row.ends.back() == row.ids.size());
  }
}

// data: a Criteo TSV file, with hashed ids and log1p dense values, and with hex ids in
// fields and raw dense values.
void CriteoTsv(Bytes data) {
  static MemFile file;
  file.Set(data);
  const std::string keys[] = {
      R"({"buckets":1000})",
      R"({"dense":"raw","categorical_ids":"hex","fields":[{"name":"small","columns":["C1"],"buckets":16},{"name":"multi","columns":["C2","C3",4,"C5"],"buckets":32}]})",
      R"({"integer_columns":2,"categorical_columns":3,"dense":"drop","buckets":[5,6,7]})",
  };
  for (const std::string& k : keys) {
    Load(R"({"format":"criteo_tsv","on_error":"skip","path":)" + Quoted(file.path()) + "," +
         k.substr(1));
    Stream("criteo_tsv", k, file.path());
  }
}

}  // namespace ps::fuzz

// tf.Example records (example.proto) mapped to the model's inputs by a feature spec —
// the "tfrecord" data format (keys documented in dataset.h and docs/reference/job.md).
// Only libps/data/tf_example.cc includes the protobuf-generated header.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/data/row.h"
#include "libps/data/vocabulary.h"

namespace ps::data {

struct TfDenseSpec {
  std::string feature;         // a float_list of exactly `size` values
  std::vector<int64_t> shape;  // its shape; size = product (row-major into Batch::dense)
  int64_t size = 0;
};

struct TfSparseSpec {
  enum class Type { kInt64, kBytes };
  // kIdentity: int64 ids used as they are, in [0, size). kHash: ids (int64) or tokens
  // (bytes) hashed into [0, size) (text.h). kVocabulary: bytes through `vocabulary`
  // (0 = out of vocabulary; size = tokens + 1).
  enum class Map { kIdentity, kHash, kVocabulary };
  std::string feature;
  std::string name;  // the sparse field's name (DatasetInfo::field_names)
  Type type = Type::kInt64;
  Map map = Map::kIdentity;
  int64_t size = 0;       // the field's vocabulary size: ids lie in [0, size)
  Vocabulary vocabulary;  // kVocabulary only
  std::string weights;    // optional float_list feature: one value per id
  bool optional = false;  // a missing feature is no ids (else an error)
};

struct TfExampleSpec {
  std::string label;  // int64_list or float_list of one value
  int classes = 2;    // 2: label 0 or 1; k > 2: label in 0..k-1
  std::vector<TfDenseSpec> dense;
  std::vector<TfSparseSpec> sparse;
};

// Reads "label", "classes", "dense", "sparse" of a "tfrecord" data object.
Result<TfExampleSpec> ParseTfExampleSpec(JsonReader& r);

// Decodes serialized tf.Example records into rows. Not thread-safe (one per reader
// thread); allocates nothing per record once warm.
class TfExampleDecoder {
 public:
  explicit TfExampleDecoder(std::shared_ptr<const TfExampleSpec> spec);
  ~TfExampleDecoder();
  // Error (InvalidArgument): "feature '<name>': <problem>", or "not a
  // tf.Example: protobuf parse error"; the caller adds the file and offset.
  Status Decode(std::string_view record, Row* row);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Builds tf.Example records (gen-ctr, tests, benchmarks). Not thread-safe.
class TfExampleBuilder {
 public:
  TfExampleBuilder();
  ~TfExampleBuilder();
  void Clear();
  void AddInt64(std::string_view feature, std::span<const int64_t> values);
  void AddFloat(std::string_view feature, std::span<const float> values);
  void AddBytes(std::string_view feature, std::span<const std::string> values);
  // Appends the serialized Example to out.
  void AppendTo(std::string* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps::data

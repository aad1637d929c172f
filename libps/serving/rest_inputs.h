// The inputs of a served model (pstrain-serve's REST API, rest.h): named tensors per
// instance, turned into a model::Batch exactly as the job's data reader turns a record of
// its data format into one, so that a request scores as `pstrain predict` scores the same
// examples from a file. The names, per data format of the job (its eval_data, else its
// train_data):
//   idx          "image": DT_FLOAT [-1, input size], the pixels as in the IDX file (integers
//                0..255), scaled by 1/255 as the reader scales them
//   libsvm       "features": DT_INT64 [-1, -1], the ids as in the file (1-based unless
//                "zero_based"), split by "field_offsets" as the reader splits them;
//                "values": DT_FLOAT [-1, -1], optional, one per id (default 1)
//   criteo_tsv   "I1".."I<integer_columns>": DT_INT64 [-1]; "C1".."C<categorical_columns>":
//                DT_STRING [-1], the hexadecimal or raw tokens of the file; each optional
//                (missing or null: an empty cell, as Criteo's data has them)
//   tfrecord     each "dense" feature: DT_FLOAT [-1, shape...]; each "sparse" feature:
//                DT_INT64 or DT_STRING [-1, -1] (hashed or looked up as the spec says),
//                and its "weights" feature DT_FLOAT [-1, -1]; "optional" ones may be left out
// Formats whose vocabulary is learned from the training file ("csv" categorical columns
// without a "vocabulary") or that are generated ("string_features") are not served:
// MakeInputSchema is InvalidArgument naming the format ("csv" is not served at all).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/model/batch.h"

namespace ps::serving {

struct InputSpec {
  enum class Type { kFloat, kInt64, kString };
  std::string name;
  Type type = Type::kFloat;
  std::vector<int64_t> shape;  // per instance; -1 unknown; empty: a scalar
  bool required = true;
};

// TF's dtype name: "DT_FLOAT", "DT_INT64", "DT_STRING".
const char* DtypeName(InputSpec::Type type);

class InputSchema {
 public:
  // From the training job (bundle.json's "job", or a model dir's job.json).
  static Result<std::shared_ptr<const InputSchema>> Make(const Json& job);
  ~InputSchema();

  const std::string& format() const;
  const std::vector<InputSpec>& inputs() const;
  const InputSpec* Find(const std::string& name) const;  // exact name, or nullptr

  // instances[i]: input name -> value (names already checked to be inputs; a value of
  // JSON null is a missing input). InvalidArgument naming the instance and the input for a
  // missing required input, a value of the wrong type or shape, or one the reader refuses
  // (an id outside a non-hashed vocabulary, a token with a tab).
  Result<model::Batch> ToBatch(
      const std::vector<std::vector<std::pair<std::string, const Json*>>>& instances) const;

  // The "libsvm" path without JSON: a caller that reads the instances itself (rest_fast.h)
  // starts a batch, then appends each instance's ids and values as ToBatch would.
  bool is_libsvm() const;
  // batch emptied (capacity kept) and shaped for the model's inputs.
  void StartBatch(model::Batch* batch) const;
  // Instance i of a libsvm model: "features" ids as written (1-based unless "zero_based")
  // and "values" (null: not given, 1 each), appended to batch (from StartBatch).
  // InvalidArgument as ToBatch's: a count of values unlike the count of ids, a value that is
  // not finite, an id out of range; batch is then unusable (StartBatch it again).
  Status AppendLibSvm(size_t i, std::span<const int64_t> ids, const std::vector<double>* values,
                      model::Batch* batch) const;

  struct Impl;

 private:
  explicit InputSchema(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps::serving

// ExampleTable: a whole data set in memory, in the layout Dataset slices batches from.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/model/batch.h"

namespace ps::data {

// What a model needs to know to size its inputs and outputs.
struct DatasetInfo {
  int64_t examples = 0;   // in the whole data set, before sharding
  int64_t dense_dim = 0;  // 0 when there are no dense features
  // One entry per sparse field, in Batch::sparse order: ids lie in [0, size).
  std::vector<int64_t> field_vocab_sizes;
  std::vector<std::string> field_names;  // [field_vocab_sizes.size()]
  // Number of label classes. 2 means binary: Batch::labels are 0.0 / 1.0 (sigmoid
  // models). k > 2: labels are class indices 0..k-1 (softmax models).
  int classes = 0;
  // Label strings by class index when labels came through a label vocabulary
  // (e.g. {"yes", "no"}: "yes" = 0, "no" = 1); empty otherwise.
  std::vector<std::string> label_names;
};

// Dense features are stored either as bytes (scaled by dense_u8_scale when a batch is
// filled: images stay 1 byte per pixel in memory) or as floats — exactly one of
// dense_u8 / dense_f32 is non-empty when info.dense_dim > 0.
struct SparseColumn {
  std::vector<int64_t> offsets;  // [examples + 1]; example i owns ids[offsets[i], offsets[i+1])
  std::vector<int64_t> ids;      // each in [0, info.field_vocab_sizes[field])
  std::vector<float> values;     // [ids.size()], or empty meaning all 1.0
};

struct ExampleTable {
  DatasetInfo info;
  std::vector<uint8_t> dense_u8;  // [examples * dense_dim] or empty
  float dense_u8_scale = 1.0f / 255.0f;
  std::vector<float> dense_f32;      // [examples * dense_dim] or empty
  std::vector<SparseColumn> sparse;  // [info.field_vocab_sizes.size()]
  std::vector<float> labels;         // [examples]

  int64_t size() const { return info.examples; }
  // Checks that every array has the size the info says and ids are in range.
  Status Validate() const;
  // Keeps the first n examples (n <= size()).
  void Truncate(int64_t n);
  // Appends example `index` to batch (which must have been started by StartBatch).
  void AppendTo(int64_t index, model::Batch* batch) const;
  // Appends the examples `indices`, in order (as AppendTo each), sizing the batch once and
  // starting to load each example's dense values while the one before it is converted.
  void AppendTo(std::span<const int64_t> indices, model::Batch* batch) const;
  // An empty batch with this table's dense_dim and one empty field per sparse field.
  model::Batch StartBatch() const;
};

}  // namespace ps::data

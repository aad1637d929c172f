// Batch: what the data module produces and the model module consumes.
#pragma once

#include <cstdint>
#include <vector>

namespace ps::model {

// One sparse field for a batch, in CSR form over the batch's examples.
struct SparseField {
  std::vector<int64_t> offsets;  // [size + 1]; example i owns ids[offsets[i], offsets[i+1])
  std::vector<int64_t> ids;      // feature ids (row ids of an embedding/weight table)
  std::vector<float> values;     // [ids.size()] feature values, or empty meaning all 1.0
};

struct Batch {
  int64_t size = 0;                 // number of examples
  int64_t dense_dim = 0;            // 0 when the batch has no dense features
  std::vector<float> dense;         // [size * dense_dim], row-major
  std::vector<SparseField> sparse;  // one entry per sparse field, in the job's field order
  // [size] class index (0..classes-1) for softmax models, 0.0 / 1.0 for binary models.
  std::vector<float> labels;
};

}  // namespace ps::model

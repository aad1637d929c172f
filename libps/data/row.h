// Row: one parsed example as the streaming readers produce it, and the element of the
// shuffle buffer. Its vectors keep their capacity when a row is reused, so a reader in
// steady state allocates nothing per example.
#pragma once

#include <cstdint>
#include <vector>

#include "libps/data/examples.h"
#include "libps/model/batch.h"

namespace ps::data {

struct Row {
  float label = 0;
  std::vector<float> dense;    // [info.dense_dim]
  std::vector<int64_t> ids;    // every sparse field's ids, field after field
  std::vector<float> values;   // [ids.size()] when the format has values, else empty
  std::vector<uint32_t> ends;  // [fields]: field f owns ids [f ? ends[f-1] : 0, ends[f])

  void Clear() {
    label = 0;
    dense.clear();
    ids.clear();
    values.clear();
    ends.clear();
  }
  // Closes the current sparse field: the ids appended since the last call are its ids.
  void EndField() { ends.push_back(static_cast<uint32_t>(ids.size())); }
};

// An empty batch shaped by info: dense_dim, one empty field per sparse field.
model::Batch StartBatch(const DatasetInfo& info);
// Appends row to batch (started by StartBatch for the same info). has_values: the
// format gives ids values (row.values is filled); otherwise the batch's values stay empty.
void AppendRow(const Row& row, bool has_values, model::Batch* batch);
// Appends row to table (whose info is the format's; info.examples is incremented).
// A table built this way stores dense features as floats.
void AppendRow(const Row& row, bool has_values, ExampleTable* table);
// Appends rows [begin, begin + count) of src to dst (same shape).
void AppendRows(const model::Batch& src, int64_t begin, int64_t count, model::Batch* dst);

}  // namespace ps::data

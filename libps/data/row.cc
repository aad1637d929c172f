#include "libps/data/row.h"

namespace ps::data {
namespace {

// Appends row's ids (and values) field by field to columns[f] (model::SparseField or
// SparseColumn: both are CSR with ids, values and offsets).
template <typename Column>
void AppendFields(const Row& row, bool has_values, std::vector<Column>& columns) {
  uint32_t begin = 0;
  for (size_t f = 0; f < columns.size(); ++f) {
    Column& out = columns[f];
    const uint32_t end = row.ends[f];
    out.ids.insert(out.ids.end(), row.ids.begin() + begin, row.ids.begin() + end);
    if (has_values)
      out.values.insert(out.values.end(), row.values.begin() + begin, row.values.begin() + end);
    out.offsets.push_back(static_cast<int64_t>(out.ids.size()));
    begin = end;
  }
}

}  // namespace

model::Batch StartBatch(const DatasetInfo& info) {
  model::Batch b;
  b.dense_dim = info.dense_dim;
  b.sparse.resize(info.field_vocab_sizes.size());
  for (model::SparseField& f : b.sparse) f.offsets.push_back(0);
  return b;
}

void AppendRow(const Row& row, bool has_values, model::Batch* batch) {
  batch->dense.insert(batch->dense.end(), row.dense.begin(), row.dense.end());
  AppendFields(row, has_values, batch->sparse);
  batch->labels.push_back(row.label);
  ++batch->size;
}

void AppendRow(const Row& row, bool has_values, ExampleTable* table) {
  table->dense_f32.insert(table->dense_f32.end(), row.dense.begin(), row.dense.end());
  if (table->sparse.size() != table->info.field_vocab_sizes.size()) {
    table->sparse.resize(table->info.field_vocab_sizes.size());
  }
  for (SparseColumn& c : table->sparse) {
    if (c.offsets.empty()) c.offsets.push_back(0);
  }
  AppendFields(row, has_values, table->sparse);
  table->labels.push_back(row.label);
  ++table->info.examples;
}

void AppendRows(const model::Batch& src, int64_t begin, int64_t count, model::Batch* dst) {
  const auto b = static_cast<size_t>(begin), e = static_cast<size_t>(begin + count);
  const auto d = static_cast<size_t>(src.dense_dim);
  dst->dense.insert(dst->dense.end(), src.dense.begin() + static_cast<ptrdiff_t>(b * d),
                    src.dense.begin() + static_cast<ptrdiff_t>(e * d));
  for (size_t f = 0; f < src.sparse.size(); ++f) {
    const model::SparseField& in = src.sparse[f];
    model::SparseField& out = dst->sparse[f];
    const int64_t first = in.offsets[b];
    const int64_t shift = static_cast<int64_t>(out.ids.size()) - first;
    out.ids.insert(out.ids.end(), in.ids.begin() + first, in.ids.begin() + in.offsets[e]);
    if (!in.values.empty()) {
      out.values.insert(out.values.end(), in.values.begin() + first,
                        in.values.begin() + in.offsets[e]);
    }
    for (size_t i = b + 1; i <= e; ++i) out.offsets.push_back(in.offsets[i] + shift);
  }
  dst->labels.insert(dst->labels.end(), src.labels.begin() + static_cast<ptrdiff_t>(b),
                     src.labels.begin() + static_cast<ptrdiff_t>(e));
  dst->size += count;
}

}  // namespace ps::data

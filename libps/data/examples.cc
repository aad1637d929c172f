#include "libps/data/examples.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "libps/data/row.h"

namespace ps::data {

Status ExampleTable::Validate() const {
  const int64_t n = info.examples;
  const auto un = static_cast<size_t>(n);
  if (n < 0) return Internal("example table: negative size");
  if (labels.size() != un) return Internal("example table: labels size mismatch");
  if (info.dense_dim > 0) {
    const auto want = static_cast<size_t>(n * info.dense_dim);
    if (!((dense_u8.size() == want && dense_f32.empty()) ||
          (dense_f32.size() == want && dense_u8.empty()))) {
      return Internal("example table: dense size mismatch");
    }
  } else if (!dense_u8.empty() || !dense_f32.empty()) {
    return Internal("example table: dense data without dense_dim");
  }
  if (sparse.size() != info.field_vocab_sizes.size() ||
      info.field_names.size() != info.field_vocab_sizes.size()) {
    return Internal("example table: sparse field count mismatch");
  }
  for (size_t f = 0; f < sparse.size(); ++f) {
    const SparseColumn& c = sparse[f];
    if (c.offsets.size() != un + 1 || c.offsets.front() != 0 ||
        c.offsets.back() != static_cast<int64_t>(c.ids.size())) {
      return Internal("example table: bad offsets in field " + info.field_names[f]);
    }
    if (!c.values.empty() && c.values.size() != c.ids.size()) {
      return Internal("example table: values size mismatch in field " + info.field_names[f]);
    }
    for (int64_t id : c.ids) {
      if (id < 0 || id >= info.field_vocab_sizes[f]) {
        return Internal("example table: id " + std::to_string(id) + " out of range in field " +
                        info.field_names[f]);
      }
    }
  }
  return Status::Ok();
}

void ExampleTable::Truncate(int64_t n) {
  if (n >= info.examples) return;
  const auto un = static_cast<size_t>(n);
  labels.resize(un);
  if (!dense_u8.empty()) dense_u8.resize(un * static_cast<size_t>(info.dense_dim));
  if (!dense_f32.empty()) dense_f32.resize(un * static_cast<size_t>(info.dense_dim));
  for (SparseColumn& c : sparse) {
    c.offsets.resize(un + 1);
    c.ids.resize(static_cast<size_t>(c.offsets.back()));
    if (!c.values.empty()) c.values.resize(c.ids.size());
  }
  info.examples = n;
}

model::Batch ExampleTable::StartBatch() const { return data::StartBatch(info); }

void ExampleTable::AppendTo(int64_t index, model::Batch* batch) const {
  AppendTo(std::span(&index, 1), batch);
}

void ExampleTable::AppendTo(std::span<const int64_t> indices, model::Batch* batch) const {
  const auto d = static_cast<size_t>(info.dense_dim);
  if (d > 0) {
    // Sized once, then each example's values written in a loop the compiler vectorises
    // (a push_back per value does not vectorise). The examples are random rows of a table
    // bigger than the caches: the next one's bytes are requested before this one's are
    // converted, so that the loads wait on memory once per example, not once per line.
    const bool bytes = !dense_u8.empty();
    const size_t row_bytes = d * (bytes ? sizeof(uint8_t) : sizeof(float));
    auto row = [&](size_t j) -> const void* {
      const auto i = static_cast<size_t>(indices[j]);
      return bytes ? static_cast<const void*>(dense_u8.data() + i * d) : dense_f32.data() + i * d;
    };
    // Every cache line of the row (its start need not be line-aligned), at most 4 KiB.
    auto prefetch = [&](const void* p) {
      const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
      const uintptr_t end = reinterpret_cast<uintptr_t>(p) + std::min<size_t>(row_bytes, 4096);
      for (uintptr_t line = first; line < end; line += 64)
        // NOLINTNEXTLINE(performance-no-int-to-ptr): a prefetch hint for each cache line
        __builtin_prefetch(reinterpret_cast<const void*>(line));
    };
    size_t at = batch->dense.size();
    batch->dense.resize(at + indices.size() * d);
    if (!indices.empty()) prefetch(row(0));
    const float scale = dense_u8_scale;
    for (size_t j = 0; j < indices.size(); ++j, at += d) {
      if (j + 1 < indices.size()) prefetch(row(j + 1));
      float* out = batch->dense.data() + at;
      if (bytes) {
        const auto* in = static_cast<const uint8_t*>(row(j));
        for (size_t k = 0; k < d; ++k) out[k] = static_cast<float>(in[k]) * scale;
      } else {
        std::memcpy(out, row(j), d * sizeof(float));
      }
    }
  }
  for (size_t f = 0; f < sparse.size(); ++f) {
    const SparseColumn& c = sparse[f];
    model::SparseField& out = batch->sparse[f];
    for (const int64_t index : indices) {
      const auto i = static_cast<size_t>(index);
      const auto begin = static_cast<ptrdiff_t>(c.offsets[i]);
      const auto end = static_cast<ptrdiff_t>(c.offsets[i + 1]);
      out.ids.insert(out.ids.end(), c.ids.begin() + begin, c.ids.begin() + end);
      if (!c.values.empty()) {
        out.values.insert(out.values.end(), c.values.begin() + begin, c.values.begin() + end);
      }
      out.offsets.push_back(static_cast<int64_t>(out.ids.size()));
    }
  }
  for (const int64_t index : indices) batch->labels.push_back(labels[static_cast<size_t>(index)]);
  batch->size += static_cast<int64_t>(indices.size());
}

}  // namespace ps::data

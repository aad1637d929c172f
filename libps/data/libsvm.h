// LibSVM lines (`label id:value id:value ...`, '#' comments) read one at a time: the
// parser behind both the in-memory "libsvm" reader (readers.h) and the streaming one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/data/examples.h"
#include "libps/data/readers.h"
#include "libps/data/record_format.h"
#include "libps/data/row.h"

namespace ps::data {

// The sparse fields options describes: one "features" field of num_features ids, or
// "field_<i>" per field_offsets entry. classes is options.classes (0 stays 0).
DatasetInfo LibSvmInfo(const LibSvmOptions& options);

// Error "<prefix>field_offsets[i]: ..." unless num_features > 0, field_offsets start at
// 0, ascend strictly and stay below num_features, and classes is 0 or >= 2. prefix is
// "job.train_data." or "<file>: ".
Status CheckLibSvmOptions(const LibSvmOptions& options, const std::string& prefix);

// A "libsvm" data spec's options, checked as MakeRecordFormat("libsvm", r) checks them
// (streamed: classes at least 2).
Result<LibSvmOptions> ParseLibSvmOptions(JsonReader& r);

// Whether an id as written (1-based unless zero_based) is one of the options' ids; the
// reader's error for one that is not, without the place: "feature id 0 is out of range
// [1, 9] (ids are 1-based)".
inline bool LibSvmIdInRange(const LibSvmOptions& o, int64_t id) {
  const int64_t shifted = id - (o.zero_based ? 0 : 1);
  return shifted >= 0 && shifted < o.num_features;
}
std::string LibSvmIdError(const LibSvmOptions& o, int64_t id);

// A line's features as the reader puts them in row (ids, values, ends; the label is left
// alone): ids after the zero_based shift, each in range, and one value per id, grouped by
// field_offsets keeping their order within a field. field: scratch space.
void GroupLibSvmFeatures(const LibSvmOptions& o, std::span<const int64_t> ids,
                         std::span<const float> values, std::vector<uint32_t>* field, Row* row);

// A LibSVM file. Rows have values and one field per LibSvmInfo field (ids keep their
// order of appearance within a field). Labels: with options.classes == 0 the raw
// integer label (the caller maps it, readers.h); 2: -1 and 0 → 0, +1 → 1; k > 2: 0..k-1.
Result<std::unique_ptr<TextRecordReader>> OpenLibSvm(const std::string& path,
                                                     std::shared_ptr<const LibSvmOptions> options,
                                                     const ByteRange& range = {});

}  // namespace ps::data

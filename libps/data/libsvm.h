// LibSVM lines (`label id:value id:value ...`, '#' comments) read one at a time: the
// parser behind both the in-memory "libsvm" reader (readers.h) and the streaming one.
#pragma once

#include <memory>
#include <string>

#include "libps/core/status.h"
#include "libps/data/examples.h"
#include "libps/data/readers.h"
#include "libps/data/record_format.h"

namespace ps::data {

// The sparse fields options describes: one "features" field of num_features ids, or
// "field_<i>" per field_offsets entry. classes is options.classes (0 stays 0).
DatasetInfo LibSvmInfo(const LibSvmOptions& options);

// Error "<prefix>field_offsets[i]: ..." unless num_features > 0, field_offsets start at
// 0, ascend strictly and stay below num_features, and classes is 0 or >= 2. prefix is
// "job.train_data." or "<file>: ".
Status CheckLibSvmOptions(const LibSvmOptions& options, const std::string& prefix);

// A LibSVM file. Rows have values and one field per LibSvmInfo field (ids keep their
// order of appearance within a field). Labels: with options.classes == 0 the raw
// integer label (the caller maps it, readers.h); 2: -1 and 0 → 0, +1 → 1; k > 2: 0..k-1.
Result<std::unique_ptr<TextRecordReader>> OpenLibSvm(const std::string& path,
                                                     std::shared_ptr<const LibSvmOptions> options,
                                                     const ByteRange& range = {});

}  // namespace ps::data

// Readers that load a whole file into an ExampleTable. Every error names the file and
// where in it: IDX errors a byte offset into the (decompressed) contents, text formats
// a line (and, for CSV, a column).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/data/examples.h"
#include "libps/data/vocabulary.h"

namespace ps::data {

// Reads a file, inflating it when it starts with the gzip magic 1f 8b (concatenated gzip
// members are read as one stream). Errors: InputErrno naming the file; InvalidArgument
// "<file>: gzip: ... at compressed offset N" for a corrupt or truncated stream.
Result<std::string> ReadMaybeGzipFile(const std::string& path);

// IDX (LeCun's MNIST format): images = idx3 (magic 00 00 08 03, big-endian dims
// n, rows, cols, then n*rows*cols bytes), labels = idx1 (00 00 08 01, n, n bytes).
// Result: dense_dim = rows*cols stored as bytes (scaled 1/255 into batches), no sparse
// fields, labels = class index. classes: 0 = max label + 1 (at least 2); otherwise every
// label must be below it.
Result<ExampleTable> ReadIdx(const std::string& images_path, const std::string& labels_path,
                             int classes = 0);

// Label parsing shared by LibSVM and CSV numeric labels: integers only. With classes == 0
// the count is inferred: labels in {-1, +1} are binary (-1 -> 0, +1 -> 1); otherwise
// labels must be in 0..k-1 and classes = max(2, max label + 1). With classes == 2 both
// 0/1 and -1/+1 are accepted.

struct LibSvmOptions {
  int64_t num_features = 0;  // ids (after the zero_based shift) must be in [0, num_features)
  bool zero_based = false;   // false: ids in the file start at 1 (LIBSVM's convention)
  int classes = 0;           // see label parsing above
  // Empty: one field. Otherwise one sparse field per entry: ascending, starting at 0,
  // each < num_features; id in [field_offsets[i], field_offsets[i+1]) (the last up to
  // num_features) goes to field i as the field-local id (id - field_offsets[i]).
  std::vector<int64_t> field_offsets;
};
// `label idx:val idx:val ...` per line; '#' starts a comment; blank lines are skipped.
// One sparse field named "features" with values, or with field_offsets one field per
// entry named "field_<i>" with vocabulary size field_offsets[i+1] - field_offsets[i]; ids
// keep their order of appearance within each field.
Result<ExampleTable> ReadLibSvm(const std::string& path, const LibSvmOptions& options);

struct CsvCategorical {
  std::string column;
  // Fixed vocabulary; when absent it is learned from the file (AdaptVocabulary).
  std::optional<std::vector<std::string>> vocabulary;
};
struct CsvOptions {
  std::string label;                        // label column name
  std::vector<std::string> dense;           // numeric columns, in dense feature order
  std::vector<CsvCategorical> categorical;  // one sparse field each, in this order
  // When set, the label column holds these strings (mapped to 0..k-1, unknown = error);
  // otherwise it holds integers (label parsing above).
  std::optional<std::vector<std::string>> label_vocabulary;
  int classes = 0;
  char delimiter = ',';
};
// The first line is the header. Fields may be double-quoted ("" is a quote) but not
// span lines. Empty lines are skipped. Columns not named in options are ignored.
// A categorical column becomes a sparse field with one id per example (id 0 = OOV,
// vocabulary size = tokens + 1); its field name is the column name.
Result<ExampleTable> ReadCsv(const std::string& path, const CsvOptions& options);

}  // namespace ps::data

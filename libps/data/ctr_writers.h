// The files `pstrain gen-ctr` writes, one writer per format (internal to ctr_gen.cc).
// Every format holds the same example the same way for a model: field-local ids of
// each field in ascending order, an id drawn n times
//   - LibSVM: once, as "global id + 1 : n" (field_offsets split the fields back);
//   - TFRecord (tf.Example): n times in the int64_list feature named after the field,
//     the label in the int64_list "label";
//   - Criteo TSV: n times, one hex id per column; field f owns max_ids_f consecutive
//     categorical columns (unused ones empty), the 13 integer columns are empty.
// With a "sum" or "mean" combiner the three give identical model inputs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <zlib.h>

#include "libps/core/status.h"
#include "libps/data/ctr_gen.h"
#include "libps/data/tf_example.h"

namespace ps::data {

// A file written through a buffer, plain or gzip; renamed from "<path>.tmp" on Close
// (removed if never closed).
class OutFile {
 public:
  ~OutFile();
  Status Open(const std::string& path, bool gzip);
  std::string& buffer() { return buf_; }
  Status MaybeFlush() { return buf_.size() >= kFlushBytes ? Flush() : Status::Ok(); }
  Status Close();
  bool is_open() const { return plain_ != nullptr || gz_ != nullptr; }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;
  Status Flush();

  std::string path_, tmp_;
  std::FILE* plain_ = nullptr;
  gzFile gz_ = nullptr;
  bool closed_ = false;
  std::string buf_;
};

// Criteo's layout.
inline constexpr int kCriteoIntegerColumns = 13;
inline constexpr int kCriteoCategoricalColumns = 26;

// Writes one format of one split, file after file. Not thread-safe.
class CtrFileWriter {
 public:
  CtrFileWriter(CtrFormat format, const CtrSpec& spec, const std::vector<int64_t>& offsets);
  Status Open(const std::string& path) { return out_.Open(path, spec_.gzip); }
  // ids: global, ascending, distinct; counts: how often each was drawn.
  Status Write(uint8_t label, std::span<const int64_t> ids, std::span<const float> counts);
  Status Close() { return out_.Close(); }

 private:
  CtrFormat format_;
  const CtrSpec& spec_;
  const std::vector<int64_t>& offsets_;
  std::vector<int> first_column_;  // [fields] Criteo: the field's first categorical column
  OutFile out_;
  TfExampleBuilder example_;
  std::vector<int64_t> local_;  // one field's ids, repeated by count
  std::string record_;
};

// Categorical columns the spec needs in Criteo TSV (Σ max_ids); error when over 26.
Status CheckCriteoColumns(const CtrSpec& spec);

// A ready-to-use data object (the job's train_data / eval_data) for files of a format.
Json CtrDataConfig(CtrFormat format, const CtrSpec& spec, const std::vector<int64_t>& offsets,
                   const std::vector<std::string>& files);

}  // namespace ps::data

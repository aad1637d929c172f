// Dataset: one worker's shard of a data set, cut into model::Batches — either loaded
// whole and fully shuffled per epoch (InMemoryDataset; "path"), or streamed from many
// files by a background reader through a shuffle buffer (stream.h; "files").
//
// Data set configuration (the "data" objects of a job file), read strictly: an unknown
// key is an error naming it. Relative paths resolve against DatasetOptions::base_dir
// (the job file's directory). Files may be gzip-compressed (detected by the 1f 8b magic).
// docs/reference/job.md documents every key; in short:
//
//   common to every format
//     "format"       string, required: "idx" | "libsvm" | "csv" | "string_features" |
//                    "tfrecord" | "criteo_tsv"
//     "limit"        integer >= 0, default 0: keep only the first `limit` examples of the
//                    data set (before sharding); 0 keeps all (not with "files")
//     "on_error"     "fail" (default) | "skip": bad records (tfrecord, criteo_tsv, and
//                    every streamed format) stop the read or are counted and logged
//   streamed ("libsvm", "tfrecord", "criteo_tsv" with "files" instead of "path")
//     "files"        string or [string]: names or glob patterns, sorted; none may match
//                    nothing
//     "shuffle_buffer" integer in 0..2^27, default 10000 (examples)
//     "prefetch_batches" integer in 0..1024, default 0 (automatic: ~16384 examples)
//   "tfrecord" — TFRecord files of tf.Example (tf_example.h): "label", "classes",
//           "dense": [{"feature", "shape"}], "sparse": [{"feature", "name", "type":
//           "int64" | "bytes", one of "vocab" | "hash_buckets" | "vocabulary",
//           "weights", "optional"}]
//   "criteo_tsv" — label, I1..I13, C1..C26 tab-separated (criteo.cc):
//           "integer_columns", "categorical_columns", "dense": "log1p" | "raw" | "drop",
//           "categorical_ids": "hash" | "hex", "buckets" or "fields": [{"name",
//           "columns", "buckets"}]
//   "idx" — MNIST / Fashion-MNIST: dense features = pixels / 255, labels = class index
//     "images"       string, required: idx3 file (magic 0x00000803)
//     "labels"       string, required: idx1 file (magic 0x00000801), same count
//     "classes"      integer, default 0 = max label + 1 (10 for Fashion-MNIST)
//   "libsvm" — `label id:value id:value ...`, '#' comments: one sparse field "features"
//           (or one per field_offsets entry)
//     "path"         string, required
//     "num_features" integer > 0, required: feature ids lie in [0, num_features)
//     "zero_based"   bool, default false: ids in the file start at 1 (LIBSVM convention)
//     "field_offsets" [integer], optional, non-empty: splits the (0-based, after the
//                    zero_based shift) id space into fields: offsets ascend strictly
//                    from 0, each below num_features; id in [offsets[i], offsets[i+1])
//                    (the last field up to num_features) becomes field i's id
//                    id - offsets[i], so field i is named "field_<i>" with vocabulary
//                    size offsets[i+1] - offsets[i]: ids are field-local, ready for an
//                    embedding table per field (`pstrain gen-ctr` data). Without the key:
//                    one field "features" of the global ids
//     "classes"      integer, default 0 = inferred: -1/+1 → binary (-1 → 0), else
//                    labels 0..k-1 with k = max label + 1 (at least 2)
//   "csv" — header line first; numeric columns → dense features, string columns →
//           sparse fields through a vocabulary (id 0 = out-of-vocabulary)
//     "path"         string, required
//     "label"        string, required: label column name
//     "dense"        [string], default []: numeric columns, in dense feature order
//     "categorical"  array, default []: one sparse field per entry, in this order; an
//                    entry is a column name (vocabulary learned from the file: tokens by
//                    descending count, ties in byte order) or
//                    {"column": string, "vocabulary": [string]}
//     "label_vocabulary" [string], optional: label strings, mapped to 0..k-1 in order
//                    (an unknown label is an error); without it labels are integers as
//                    for libsvm
//     "classes"      integer, default 0: as for libsvm
//     "delimiter"    one-character string, default ","
//   "string_features" — TensorFlow's parameter-server tutorial data (synthetic.h): 3 of
//           {"avenger", "ironman", "batman", "hulk", "spiderman", "kingkong",
//           "wonder_woman"} per example, label "yes" (0) iff "avenger" is among them,
//           else "no" (1); one sparse field "features" of vocabulary size 8 (0 = OOV)
//     "examples"     integer > 0, required
//     "seed"         integer >= 0, default 0: generator seed (not the shuffle seed)
//     "oov_rate"     number in [0, 1], default 0: chance that each feature is replaced
//                    by an out-of-vocabulary string
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/data/examples.h"
#include "libps/model/batch.h"

namespace ps::data {

struct DatasetOptions {
  std::string base_dir;     // relative paths in the config resolve against this directory
  int64_t shard_index = 0;  // in memory: example i belongs to shard i % num_shards;
                            // streamed: files (or records) are split, see stream.h
  int64_t num_shards = 1;
  bool shuffle = true;  // reshuffle the shard every epoch
  uint64_t seed = 0;    // shuffle seed; epoch e uses DeriveSeed(seed, e, shard_index)
                        // (streamed: for the file order; the buffer has its own stream)
  bool repeat = true;   // true: endless epochs (training); false: one pass (evaluation)
};

// What the trainer and the evaluation read batches from. Not thread-safe: one reading
// thread per Dataset (a streaming one reads ahead in its own thread; see stream.h).
class Dataset {
 public:
  virtual ~Dataset() = default;
  // Up to batch_size examples of this shard. With repeat, always exactly batch_size (a
  // batch may span two epochs). Without repeat, the last batch may be short, and after
  // the pass every call returns an empty batch (size 0, done()). Errors:
  // InvalidArgument when batch_size <= 0; a streaming reader's error (a corrupt or
  // mismatched record; the file and record are named) from then on.
  virtual Result<model::Batch> Next(int64_t batch_size) = 0;
  // The schema. info().examples is the data set's size when it is in memory, 0 when it
  // streams (not known before the end).
  virtual const DatasetInfo& info() const = 0;
  // Examples returned by Next so far.
  virtual int64_t examples_seen() const = 0;
  // True once a single pass (repeat == false) has returned every example.
  virtual bool done() const = 0;
  // Records skipped so far under "on_error": "skip" (always 0 in memory).
  virtual int64_t skipped() const { return 0; }
};

// One worker's shard of an in-memory data set: example i belongs to shard
// i % num_shards; the whole shard is reshuffled every epoch.
class InMemoryDataset : public Dataset {
 public:
  // Errors: InvalidArgument for a bad shard_index/num_shards, or when repeat is set and
  // the shard is empty (Next could never fill a batch).
  static Result<std::unique_ptr<InMemoryDataset>> Create(ExampleTable table,
                                                         DatasetOptions options);

  Result<model::Batch> Next(int64_t batch_size) override;
  const DatasetInfo& info() const override { return table_.info; }
  int64_t examples_seen() const override { return seen_; }
  bool done() const override { return !options_.repeat && seen_ >= shard_size(); }

  const DatasetOptions& options() const { return options_; }
  // Examples in this shard (one epoch).
  int64_t shard_size() const { return static_cast<int64_t>(shard_.size()); }
  // The epoch the next example comes from: examples_seen / shard_size (0-based; after a
  // complete single pass it is 1).
  int64_t epoch() const;
  // Positions the dataset as if Next had returned `examples` examples, so a restarted
  // worker could continue the same sequence. Without repeat, `examples` must not exceed
  // shard_size(). Error: InvalidArgument.
  Status SkipTo(int64_t examples);

  const ExampleTable& table() const { return table_; }

 private:
  InMemoryDataset(ExampleTable table, DatasetOptions options);
  void StartEpoch(int64_t epoch);

  ExampleTable table_;
  DatasetOptions options_;
  std::vector<int64_t> shard_;  // this shard's example indices, ascending
  std::vector<int64_t> order_;  // the current epoch's permutation of shard_
  int64_t order_epoch_ = -1;    // the epoch order_ belongs to
  int64_t seen_ = 0;
  std::vector<int64_t> picked_;  // Next's examples (kept: its capacity is reused)
};

// Wraps an in-memory data set for training: while the caller uses a batch, a thread of
// its own fills the next one (tf.data's prefetch(1)), so reading a batch overlaps the
// step that uses the one before. Batches come in the same order with the same contents
// as from `inner`; done(), examples_seen() and skipped() describe the batches returned,
// not the one read ahead. Every call must ask for the batch size of the first
// (InvalidArgument otherwise: the batch read ahead has that size). Not for streamed data
// sets: their readers already run ahead on threads of their own. Destroying it waits for
// a read under way.
std::unique_ptr<Dataset> ReadAhead(std::unique_ptr<Dataset> inner);

// Opens this worker's shard of the data set `config` describes (see the top of this
// file): loads it whole ("path"), or starts streaming it ("files": the first record is
// parsed before this returns, so an unreadable or mismatched first record fails here).
// `path` names config in error messages ("job.train_data").
Result<std::unique_ptr<Dataset>> OpenDataset(const Json& config, const std::string& path,
                                             DatasetOptions options);

// For a streamed data set ("files"): reads the config and lists its files, opening
// none (a job-start check: a pattern that matches no file is an InvalidArgument naming
// it). Ok for an in-memory one (only loading it checks it).
Status CheckStreamedData(const Json& config, const std::string& path, const std::string& base_dir);

// What can be checked of a data set without reading it (--check-config): a streamed one
// as CheckStreamedData; an in-memory one's files ("path", "images", "labels") must be
// regular files this process can open: InvalidArgument naming the key otherwise ("is a
// directory", "no such file").
Status CheckDataFiles(const Json& config, const std::string& path, const std::string& base_dir);

// The loading half of OpenDataset: the whole data set, unsharded.
Result<ExampleTable> LoadExamples(const Json& config, const std::string& path,
                                  const std::string& base_dir);

}  // namespace ps::data

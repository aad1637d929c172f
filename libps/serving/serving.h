// PUBLIC API — pstrain's serving API: load an inference bundle written by
// `pstrain export` and score batches of examples inside your own process.
//
// This is the one public header of libps/serving (as libps/model/plugin_api.h is the
// plug-in API): a serving process includes it, links libps (Meson: the `libps_dep`
// dependency, as examples/serving/ does) and needs nothing else from pstrain. Besides
// the standard library it includes only libps/core/status.h (Status, Result<T>) and
// libps/model/batch.h (model::Batch, a plain struct of vectors).
//
//   auto bundle = ps::serving::Bundle::Load("/srv/models/ctr");   // Result<shared_ptr>
//   if (!bundle.ok()) { log(bundle.status().ToString()); ... }
//   auto scorer = (*bundle)->NewScorer();                         // one per thread
//   ps::model::Batch batch = ...;                                 // or ExampleReader
//   auto scores = (*scorer)->Score(batch);   // scores->heads[0][i]: example i's P(click)
//
// Bundles (the format is documented in libps/serving/bundle.h): a directory holding
// bundle.json (format version, the checkpoint it came from, the job and its model
// graph, the variables with their shapes, a checksum of every file) and weights.shard
// (every variable's values, and of a lazy embedding table only the rows that were live
// in the checkpoint; no optimizer slots). Load verifies every checksum: a damaged bundle
// is a DataLoss status naming the file, never a model with wrong weights.
//
// Scores are bit-identical to the evaluator's (pstrain-evaluator, the chief's final
// evaluation) on the checkpoint the bundle was exported from: both load the same values
// into the same in-process parameter store and score through the same forward pass
// (worker::ScoreBatch). Rows of a lazy table absent from the bundle (ids never trained,
// or evicted) score with their initial values, as they would in training and
// evaluation. "The same" means the same batches: the evaluator scores its data in
// order, in batches of BundleInfo::eval_batch_size (BLAS kernels may round differently
// for another batch size, so only then is equality guaranteed), with OpenBLAS on one
// thread per call as the evaluator and `pstrain predict` run it (OPENBLAS_NUM_THREADS=1;
// scale out with one Scorer per thread instead).
//
// Thread safety: a Bundle is immutable and shared (shared_ptr<const Bundle>); a Scorer
// keeps scratch buffers and is used by one thread at a time: make one per thread. Any
// number of Scorers of one Bundle may score concurrently; they share its parameters.
//
// Not implemented yet: refreshing a loaded bundle from incremental checkpoints. The
// design leaves room for it: the parameters live in a ps::server::Store, whose rows are
// updated atomically while other threads pull them, so a future Bundle::ApplyDelta
// (records of changed rows, checked against BundleInfo::source_step) can write into the
// store under Scorers that keep running; bundle.json's "version" lets a delta-aware
// format be told apart.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/model/batch.h"

namespace ps::serving {

struct VariableInfo {
  std::string name;            // e.g. "dense_0/kernel", "user/embeddings"
  std::vector<int64_t> shape;  // the full shape (a lazy table: its whole id space)
  bool lazy = false;           // rows created on first push in training
  int shards = 1;              // partitions it was split into in training
  int64_t stored_rows = 0;     // rows held in the bundle: shape[0], or a lazy table's live rows
};

struct HeadInfo {
  std::string name;
  std::string loss;     // "softmax_cross_entropy", "sigmoid_cross_entropy", "mean_squared_error"
  int64_t outputs = 1;  // scores per example: classes for softmax, else 1
};

struct BundleInfo {
  std::string dir;
  int format_version = 0;
  std::string source_model_dir;  // where it was exported from
  int64_t source_step = 0;       // the checkpoint's global step
  bool source_final = false;     // it was the final checkpoint of its run
  std::vector<VariableInfo> variables;  // in the model's order
  std::vector<HeadInfo> heads;          // heads[0] is the model's main output
  int64_t eval_batch_size = 256;        // the evaluator's batch size for this job
};

// The scores of one batch.
struct Scores {
  int64_t examples = 0;
  // Per head, in BundleInfo::heads order: [examples * outputs], row-major — the sigmoid
  // probability P(label = 1), the softmax class probabilities, or the regression output.
  std::vector<std::vector<float>> heads;
};

class Scorer;

class Bundle : public std::enable_shared_from_this<Bundle> {
 public:
  // Reads and verifies the bundle in `dir` and loads its parameters. Errors: NotFound
  // (no bundle.json); DataLoss naming a damaged or missing file of the bundle (a plug-in's
  // copy included); InvalidArgument for a bundle of an unknown format version, a manifest
  // naming files outside the bundle, or a model this build cannot construct (a plug-in
  // built against another plug-in API, a layer type no plug-in provides).
  static Result<std::shared_ptr<const Bundle>> Load(const std::string& dir);
  ~Bundle();

  const BundleInfo& info() const;
  // A scorer for one thread; it keeps this bundle alive.
  Result<std::unique_ptr<Scorer>> NewScorer() const;

  struct Impl;  // private (libps/serving/serving.cc)

 private:
  explicit Bundle(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Scorer {
 public:
  ~Scorer();
  // The batch's features must fit the model (dense_dim, sparse fields, ids within the
  // tables): InvalidArgument otherwise. Labels are optional; the scores do not depend
  // on them.
  Result<Scores> Score(const model::Batch& batch);

  struct Impl;  // private

 private:
  friend class Bundle;
  explicit Scorer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Reads examples with pstrain's data readers, in file order, for scoring: `config_json`
// is a data object as in a job file ("format", "path", ...; configs/README.md), whose
// relative paths resolve against `base_dir`.
class ExampleReader {
 public:
  static Result<std::unique_ptr<ExampleReader>> Open(const std::string& config_json, const std::string& base_dir);
  ~ExampleReader();
  // Up to max_examples examples; an empty batch (size 0) after the last.
  Result<model::Batch> Next(int64_t max_examples);

  struct Impl;  // private

 private:
  explicit ExampleReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps::serving

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
//   auto fresh = (*bundle)->Refresh("/data/ctr-model");           // from any thread, any time
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
// (scoring::ScoreBatch). Rows of a lazy table absent from the bundle (ids never trained,
// or evicted) score with their initial values, as they would in training and
// evaluation. "The same" means the same batches: the evaluator scores its data in
// order, in batches of BundleInfo::eval_batch_size (BLAS kernels may round differently
// for another batch size, so only then is equality guaranteed), with OpenBLAS on one
// thread per call as the evaluator and `pstrain predict` run it (OPENBLAS_NUM_THREADS=1;
// scale out with one Scorer per thread instead).
//
// Refreshing: while a trainer keeps writing delta checkpoints into
// its model dir (checkpoint_dir.h: ckpt-<base>/delta-<step>), Bundle::Refresh(model_dir)
// brings a loaded bundle up to the newest committed delta of its base checkpoint
// without reloading: each newer delta of the chain, in order (changed rows and dense rows
// replaced, evicted rows dropped so they score with their initial values again;
// optimizer slots never loaded). The result is bit-identical to a bundle exported at that
// delta (`pstrain export --step <delta's step>`). The integrity rules are the restore's
// (ckpt::FindRestorable and ckpt::LoadDeltaChain; one mechanism): a delta without its
// MANIFEST does not exist, and each new delta is read into memory with every checksum
// verified before any of it is applied, so a damaged one stops the refresh at the last
// good delta and is named in RefreshStats::warnings. A newer full checkpoint in the model
// dir is FailedPrecondition for Refresh ("newer full checkpoint ckpt-N ...: reload the
// bundle"); Bundle::Update follows it instead (below). A bundle knows its state by step
// and by the digests of its checkpoint's files (BundleInfo::source_*, updated by each
// refresh): Refresh takes the model dir it was exported from, or a copy, and refuses
// (FailedPrecondition) one whose job.json has another model graph (read as plain JSON:
// the training job's plug-ins are never loaded), and one whose checkpoints of the
// bundle's steps are another training run's (a model dir wiped and trained again).
// Bundles exported before the digests were recorded load and score, but Refresh refuses
// them: export anew.
//
// Versions (read-copy-update; libps/serving/params.h, docs/design/serving-refresh.md): a
// bundle's parameters are immutable versions. A refresh builds the next version beside
// the current one while scorers go on scoring, then publishes it with one pointer swap;
// each batch takes the version current when it starts and scores wholly with it. So no
// batch ever waits for a refresh, and every batch sees the bundle wholly before or after
// it. Versions share their unchanged rows: rows are held in blocks (16 rows of an
// embedding table, a lazy table's bucket of about 16 ids, a dense variable whole) and a
// version copies only the blocks in which a row changed. Memory: the current version,
// plus while a refresh runs the blocks it copies and the deltas it read, plus the old
// version's blocks until the batches holding it finish (the refresh waits for them and
// frees them: RefreshStats::grace_seconds). A failed refresh publishes nothing: the
// bundle stays as it was.
//
// Bundle::Update(model_dir) is Refresh that also follows a newer full checkpoint of the
// same model (job.json's model graph as the bundle's; any training run): it streams the
// checkpoint's files record by record into the next version, copying only the blocks whose
// rows differ, then applies its deltas. Peak memory: the current version, plus the blocks
// copied, plus 1 MiB of reading (a lazy record's row ids besides: 8 bytes a row). A model
// whose rows all changed (a new training run) therefore peaks at twice its size; one
// checkpoint apart a trainer usually changes a small part of a large embedding table.
// Bundle::LoadNewer does the same into a new Bundle and leaves this one serving its
// version: two versions side by side share their unchanged blocks.
//
// Thread safety: a Bundle is shared (shared_ptr); a Scorer keeps scratch buffers and is
// used by one thread at a time: make one per thread. Any number of Scorers of one Bundle
// may score concurrently; they share its parameters. info(), status(), parameter_bytes(),
// Refresh, Update and LoadNewer may be called from any thread; refreshes run one at a
// time. status() is always OK: a refresh either publishes a whole new version or none.
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
  // Which state exactly (bundle.json's source): the full checkpoint of source_step's
  // chain and the digests of its shard files (its MANIFEST's: they fingerprint the files'
  // contents), and when source_step is a delta's, that delta's. Refresh follows only that
  // very chain: a model dir wiped and trained again has checkpoints of the same steps with
  // other digests. A bundle exported before they were recorded has none (Refresh refuses
  // it). Refresh updates source_delta_digests.
  int64_t source_base_step = 0;
  std::vector<uint32_t> source_base_digests;
  std::vector<uint32_t> source_delta_digests;  // empty when source_step is source_base_step
  std::vector<VariableInfo> variables;         // in the model's order
  std::vector<HeadInfo> heads;                 // heads[0] is the model's main output
  int64_t eval_batch_size = 256;               // the evaluator's batch size for this job
};

// What Bundle::Refresh did.
struct RefreshStats {
  int64_t base_step = 0;         // the full checkpoint of the chain followed
  int64_t from_step = 0;         // the bundle's step before
  int64_t to_step = 0;           // and after (from_step when nothing newer was applied)
  std::vector<int64_t> applied;  // the steps of the deltas applied, in order
  // A newer full checkpoint was followed (Update, LoadNewer): base_step is its step.
  bool new_base = false;
  // Building the next version beside the current one (after the deltas were read; a new
  // base's streaming included), and the bytes of blocks it copied rather than shared.
  double build_seconds = 0;
  uint64_t copied_bytes = 0;
  // After the new version was published: waiting for the batches that held the old one
  // to finish (the refresh's thread only; no batch waits), then freeing what only it held.
  double grace_seconds = 0;
  // Why the chain stopped early (a delta that failed verification, naming its file) and
  // other problems the model dir has (a damaged newer full checkpoint skipped, a missing
  // pointer file): one line each.
  std::vector<std::string> warnings;
};

// The scores of one batch.
struct Scores {
  int64_t examples = 0;
  // The state that scored them (BundleInfo's source_base_step and source_step at the
  // time: a refresh changes parameters and step together).
  int64_t base_step = 0;
  int64_t step = 0;
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
  static Result<std::shared_ptr<Bundle>> Load(const std::string& dir);
  // A training model dir's newest checkpoint that verifies, loaded as `pstrain predict
  // --model DIR` loads it (a bundle exported in memory; info().dir is empty). Newer
  // damaged checkpoints skipped are named in `warnings`. Errors: NotFound (no job.json, no
  // checkpoint), DataLoss (none verifies).
  static Result<std::shared_ptr<Bundle>> LoadModelDir(const std::string& model_dir,
                                                      std::vector<std::string>* warnings);
  // The state at `step` of a training model dir: a full checkpoint alone (not its
  // deltas), or a delta's whole chain. Errors: NotFound (no job.json, no committed
  // checkpoint at step), DataLoss (a file of it, or of its chain, fails verification).
  static Result<std::shared_ptr<Bundle>> LoadModelDir(const std::string& model_dir, int64_t step,
                                                      std::vector<std::string>* warnings);
  ~Bundle();

  // A snapshot: a refresh in another thread changes what the next call returns.
  BundleInfo info() const;
  // OK: every refresh publishes a whole version or none (kept for callers that check).
  Status status() const;
  // Bytes of the current version's parameter values (and lazy row ids).
  uint64_t parameter_bytes() const;
  // The training job the parameters belong to (bundle.json's "job", a model dir's
  // job.json), as JSON text: its model graph and data formats.
  std::string job_json() const;
  // Applies model_dir's committed delta checkpoints newer than info().source_step, of
  // the bundle's base checkpoint, in order (see "Refreshing" above); nothing to apply is
  // OK (applied empty). Errors: FailedPrecondition for a newer full checkpoint, for a
  // model dir of another model, of another training run or whose newest chain does not
  // hold the bundle's step, for a bundle without source digests (exported by an older
  // pstrain); NotFound for a model dir without job.json or checkpoints; DataLoss when no
  // checkpoint of it verifies; IoError (a delta deleted while it was being read, say:
  // nothing was applied, try again). Failing, it leaves the bundle as it was.
  Result<RefreshStats> Refresh(const std::string& model_dir);
  // Refresh, or when model_dir has a newer full checkpoint, that checkpoint and its deltas
  // (new_base; see "Versions" above). Refresh's errors but that one; a damaged newer
  // full checkpoint is passed over for the newest that verifies (named in warnings).
  Result<RefreshStats> Update(const std::string& model_dir);
  // Update into a new Bundle, sharing this one's unchanged blocks; this one keeps its
  // version. Nothing newer: a Bundle of the same version. `stats`, when set, says what
  // was applied.
  Result<std::shared_ptr<Bundle>> LoadNewer(const std::string& model_dir,
                                            RefreshStats* stats = nullptr) const;
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
// is a data object as in a job file ("format", "path", ...; docs/reference/job.md), whose
// relative paths resolve against `base_dir`.
class ExampleReader {
 public:
  static Result<std::unique_ptr<ExampleReader>> Open(const std::string& config_json,
                                                     const std::string& base_dir);
  ~ExampleReader();
  // Up to max_examples examples; an empty batch (size 0) after the last.
  Result<model::Batch> Next(int64_t max_examples);

  struct Impl;  // private

 private:
  explicit ExampleReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps::serving

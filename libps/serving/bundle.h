// Inference bundles: what `pstrain export` writes and the serving API (serving.h) loads.
//
//   <bundle>/
//     bundle.json     the manifest (below), written last
//     weights.shard   one shard file (libps/ckpt/shard_file.h; ps index 0, the source
//                     step) with one record per variable shard of the training layout:
//                     dense shards whole, lazy shards as sparse records of their live
//                     rows (ids + values). Values only: records have no slot blocks.
//     plugins/<i>-<name>  copies of the job's layer plug-ins, when it has any
//
// bundle.json:
//   {"format": "pstrain-bundle", "version": 1,
//    "source": {"model_dir": "/abs/model", "checkpoint": "ckpt-700", "global_step": 700,
//               "final": true, "base_step": 700, "base_digests": [3735928559, ...],
//               "delta_digests": []},      "checkpoint": the directory of model_dir that
//                                          holds global_step (ckpt::CheckpointRelPath):
//                                          "ckpt-<step>", or for a delta
//                                          "ckpt-<base_step>/delta-<step>" (bundles
//                                          exported at a delta before said
//                                          "ckpt-<step>"; readers do not rely on it).
//                                          The rest is the identity of the state (BundleInfo): the
//                                          digests of its full checkpoint's shard files
//                                          and, exported at a delta, of that delta's (as
//                                          their MANIFESTs list them). Optional: bundles
//                                          written before have none and are not refreshed
//    "unix_time": 1764116400.5,            when it was exported
//    "num_ps": 2,                          ps tasks of the training cluster: with the
//                                          job's partitioner they fix the shard layout
//    "job": {...},                         the job file as the chief wrote it (the model
//                                          graph under "model"), without "base_dir";
//                                          "plugins" name the copies in plugins/
//    "variables": [{"name": "dense_0/kernel", "shape": [784, 256], "lazy": false,
//                   "shards": 1, "stored_rows": 784}, ...],   in the model's order
//    "files": [{"name": "weights.shard", "bytes": 812345, "crc32c": 3735928559}, ...],
//    "checksum": 123456789}
// "files" lists every other file of the bundle with its size and masked CRC-32C (of the
// whole file; a shard file's records are also checksummed inside it). "checksum" is the
// masked CRC-32C of the manifest without that key, serialised compactly in file order
// (Json::dump()), so a bit flip in bundle.json is caught too.
//
// Writing: into a fresh sibling directory "<bundle>.tmp-XXXXXX", every file fsynced,
// bundle.json last, the directory fsynced, then renamed to <bundle> (which must not exist,
// or be an empty directory) and the parent fsynced. A crash leaves either no <bundle> or
// a complete one; a stray .tmp-* directory is never loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "libps/ckpt/store_io.h"
#include "libps/core/status.h"
#include "libps/scoring/loaded_model.h"
#include "libps/serving/serving.h"

namespace ps::serving {

inline constexpr char kBundleManifest[] = "bundle.json";
inline constexpr char kBundleWeights[] = "weights.shard";
inline constexpr char kBundleFormat[] = "pstrain-bundle";
inline constexpr int kBundleVersion = 1;

struct ExportOptions {
  std::string model_dir;
  std::optional<int64_t> step;  // default: the newest checkpoint that verifies
  std::string out_dir;
};

struct ExportResult {
  BundleInfo info;
  std::vector<std::string> warnings;  // newer checkpoints skipped because damaged
  uint64_t bytes = 0;                 // all files of the bundle
};

// Loads the checkpoint (scoring::LoadCheckpoint: the evaluator's load) and writes its values as a
// bundle. Errors: NotFound (no job.json, no checkpoint at --step), DataLoss (the
// checkpoint is damaged: named), AlreadyExists (out_dir exists and is not empty),
// IoError.
Result<ExportResult> ExportBundle(const ExportOptions& options);

// Parameters ready to score, with what they are (from a bundle or a checkpoint).
struct LoadedBundle {
  BundleInfo info;  // from a checkpoint: format_version 0, dir empty
  scoring::LoadedModel loaded;
  std::unique_ptr<model::Model> model;  // one instance built from the job's graph
};
// Reads and verifies `dir`'s manifest and files and loads its values (scoring::LoadValues).
Result<LoadedBundle> LoadBundle(const std::string& dir);
// The checkpoint at `step` of model_dir, or without a step the newest one that loads
// with every checksum passing (damaged newer ones are skipped and named in `warnings`;
// each is read once), loaded as the evaluator loads it (scoring::LoadCheckpoint).
Result<LoadedBundle> LoadModelDir(const std::string& model_dir, std::optional<int64_t> step,
                                  std::vector<std::string>* warnings);

// Bundle::Refresh in parts (serving.h), so that the slow, read-only one runs while
// scorers keep scoring. First: the committed deltas of model_dir newer than b.info's
// state, read into memory (ckpt::ReadDelta, values only: every checksum verified). The
// chain is the one a restore takes (ckpt::FindRestorable: the newest full checkpoint
// whose files verify; its deltas by ckpt::LoadDeltaChain, those up to the bundle's step
// by their MANIFESTs alone, the newer ones read): a delta that fails stops it there,
// named in stats->warnings. Sets stats' base_step, from_step, to_step (from_step),
// warnings. FailedPrecondition when model_dir's job.json (read as plain JSON) has
// another model graph than b's job, or b has no source identity (an older bundle), both
// before any checkpoint is looked at; when the chain's full checkpoint is newer ("reload
// the bundle": its deltas are not read), or its files, or those of the delta of the
// bundle's step, are not the ones b came from (another training run in the model dir:
// its newer deltas have been read by then, and are dropped); when the bundle's step is
// not in the chain.
Result<std::vector<ckpt::DeltaRecords>> NewerDeltas(const LoadedBundle& b,
                                                    const std::string& model_dir,
                                                    RefreshStats* stats);
// Second, the only part that must not run beside scoring: writes them into b's store
// (ckpt::ApplyDeltas, values only; no file is read). *store_changed says whether anything
// was written (after an error: false leaves the store as it was, true holds part of a
// delta).
Status WriteBundleDeltas(LoadedBundle& b, std::span<const ckpt::DeltaRecords> deltas,
                         bool* store_changed);
// Third, after a successful write: the next BundleInfo (`info`, b.info's copy; b.info is
// left alone): source_step, source_final, source_delta_digests, the lazy tables'
// stored_rows; and stats' to_step and applied.
void RecordBundleDeltas(const LoadedBundle& b, std::span<const ckpt::DeltaRecords> deltas,
                        RefreshStats* stats, BundleInfo* info);

}  // namespace ps::serving

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
//               "final": true},
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
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/serving/loaded_model.h"
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

// Loads the checkpoint (LoadCheckpoint: the evaluator's load) and writes its values as a
// bundle. Errors: NotFound (no job.json, no checkpoint at --step), DataLoss (the
// checkpoint is damaged: named), AlreadyExists (out_dir exists and is not empty),
// IoError.
Result<ExportResult> ExportBundle(const ExportOptions& options);

// Parameters ready to score, with what they are (from a bundle or a checkpoint).
struct LoadedBundle {
  BundleInfo info;  // from a checkpoint: format_version 0, dir empty
  LoadedModel loaded;
  std::unique_ptr<model::Model> model;  // one instance built from the job's graph
};
// Reads and verifies `dir`'s manifest and files and loads its values (LoadValues).
Result<LoadedBundle> LoadBundle(const std::string& dir);
// The checkpoint at `step` of model_dir, or without a step the newest one that loads
// with every checksum passing (damaged newer ones are skipped and named in `warnings`;
// each is read once), loaded as the evaluator loads it (LoadCheckpoint).
Result<LoadedBundle> LoadModelDir(const std::string& model_dir, std::optional<int64_t> step,
                                  std::vector<std::string>* warnings);

// Bundle::Refresh in two halves (serving.h), so that the slow, read-only one runs while
// scorers keep scoring. First: the committed deltas of model_dir newer than `step` (the
// bundle's state) in the chain of the newest restorable full checkpoint (ckpt::
// FindRestorable and its delta chain, verified at kFooters, as a restore finds them),
// each newer one verified in full (every record's checksums): the chain stops before the
// first that fails, named in stats->warnings. Sets stats' base_step, from_step,
// warnings. FailedPrecondition when model_dir's job.json has another model graph than
// b's job, and when `step` (b.info.source_step) is not in that chain: a newer full
// checkpoint ("reload the bundle"), or a model_dir whose chain never held the bundle's
// state.
Result<std::vector<ckpt::CheckpointInfo>> NewerDeltas(const LoadedBundle& b, const std::string& model_dir,
                                                      int64_t step, RefreshStats* stats);
// Second: applies them to b's store (ckpt::ApplyDeltas, values only) and sets, in `info`
// (b.info's next version; b.info is left alone), source_step, source_final and the lazy
// tables' stored_rows, and stats' to_step and applied. On an error the store holds part
// of a delta.
Status ApplyBundleDeltas(LoadedBundle& b, const std::vector<ckpt::CheckpointInfo>& deltas, RefreshStats* stats,
                         BundleInfo* info);

}  // namespace ps::serving

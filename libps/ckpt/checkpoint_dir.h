// A model directory's checkpoints: the MANIFEST that commits one, the `checkpoint`
// pointer file, listing, choosing what to restore, and cleaning up.
//
//   model_dir/
//     ckpt-<global_step>/       no zero padding ("ckpt-1200"); listings sort numerically
//        ps-<i>.shard           written by ps i (shard_file.h)
//        MANIFEST               JSON, written last by the chief (tmp + fsync + rename)
//        delta-<step>/          a delta checkpoint on top of this one (below)
//           ps-<i>.shard, MANIFEST
//     checkpoint                pointer to the newest committed full checkpoint, TF's text form:
//                                 model_checkpoint_path: "ckpt-1200"
//
// A ckpt-* directory without a MANIFEST does not exist as a checkpoint. The directory
// scan, not the pointer file, is the authority on what is committed: the pointer is kept
// for tools and cheap polling (ReadCheckpointPointer), and a missing or garbled pointer
// only costs a warning — never a restart from scratch (TensorFlow #35148).
//
// MANIFEST (a delta's also has "base": <step>, "parent": <step>):
//   {"format": "pstrain-checkpoint", "version": 1, "global_step": 1200,
//    "unix_time": 1732268000.5, "final": false, "num_ps": 2,
//    "shards": [{"name": "ps-0.shard", "bytes": 123456, "digest": 3735928559}, ...],
//    "extra": {...}}
// extra is the chief's: "variables" lists each variable's name, shape, sparse-ness and
// shards ({"shard", "ps", "row_begin", "rows"}). The chief checks a job's variables against
// it before a restore, and each ps uses the shards to open only the files that hold rows
// of its own (store_io.h: RestoreStore).
//
// Delta checkpoints. Between full checkpoints the chief may commit deltas: each ps writes
// only what changed since the previous checkpoint of the chain (shard_file.h, kind-3
// records) into ckpt-<base>/delta-<step>/, and the chief commits it with a MANIFEST that
// also names "base" (the full checkpoint) and "parent" (the checkpoint it is a delta
// of: the base or the previous delta). A delta-* directory without a MANIFEST does not
// exist. The state at a delta's step is its base plus every delta of the chain from the
// base to it, applied in order (CheckpointInfo::deltas); the chain is followed by parent
// links from the base, and stops, with a warning naming the file, at the first delta
// that fails verification (or whose MANIFEST is damaged): the state restored is then the
// last good one. Deltas live and die with their base: ApplyMaxToKeep counts full
// checkpoints only and deletes a base with its deltas.
//
// Functions here take no locks: one process (the chief) manages a model_dir; readers
// such as the evaluator only read. All are safe to call from any one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libps/ckpt/shard_file.h"
#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::ckpt {

inline constexpr char kManifestFile[] = "MANIFEST";
inline constexpr char kPointerFile[] = "checkpoint";

struct Manifest {
  int64_t global_step = 0;
  double unix_time = 0;  // seconds since the epoch when the chief committed
  bool final = false;    // written at the end of training (or on stop)
  int num_ps = 0;
  std::vector<ShardFileInfo> shards;  // [num_ps]; shards[i].name == ShardFileName(i)
  Json extra = Json::object();        // the chief's job/placement info; must be an object
  // Deltas only ("base", "parent" in the JSON; absent for a full checkpoint): the full
  // checkpoint's step, and the step of the checkpoint this is a delta of
  // (base <= parent < global_step).
  std::optional<int64_t> base = std::nullopt;
  int64_t parent = 0;
};

Json ManifestToJson(const Manifest& manifest);
// Strict (unknown keys rejected); errors are InvalidArgument "<what>.<key>: <problem>".
Result<Manifest> ManifestFromJson(const Json& json, const std::string& what);
// Reads ckpt_dir/MANIFEST. NotFound when absent; DataLoss when unparseable or
// inconsistent (including a global_step that disagrees with the directory name).
Result<Manifest> ReadManifest(const std::string& ckpt_dir);

struct CheckpointInfo {
  int64_t global_step = 0;
  std::string dir;  // model_dir + "/ckpt-<step>" (a delta: ckpt-<base>/delta-<step>)
  Manifest manifest;
  // A full checkpoint's committed, verified deltas to apply on top of it, oldest first
  // (filled by FindRestorable, LoadDeltaChain and LoadCheckpointAt; empty otherwise).
  std::vector<CheckpointInfo> deltas = {};
  // The step of the state base + deltas restore.
  int64_t restored_step() const { return deltas.empty() ? global_step : deltas.back().global_step; }
};

// "ckpt-<step>", no padding.
std::string CheckpointDirName(int64_t step);
// The step of a canonical "ckpt-<step>" name; nullopt for anything else ("ckpt-01", "ckpt-x").
std::optional<int64_t> ParseCheckpointDirName(std::string_view name);
// model_dir + "/" + CheckpointDirName(step)
std::string CheckpointPath(const std::string& model_dir, int64_t step);
// "delta-<step>"; the step of a canonical one, else nullopt.
std::string DeltaDirName(int64_t step);
std::optional<int64_t> ParseDeltaDirName(std::string_view name);
// model_dir/ckpt-<base>/delta-<step>
std::string DeltaPath(const std::string& model_dir, int64_t base, int64_t step);
// The directory that holds the checkpoint of `step`, relative to the model dir: "ckpt-<step>"
// for a full checkpoint (base == step), "ckpt-<base>/delta-<step>" for a delta on the full
// checkpoint of `base`. What logs and bundle.json's source.checkpoint name.
std::string CheckpointRelPath(int64_t base, int64_t step);
// Where a manifest's files go: CheckpointPath, or DeltaPath for a delta.
std::string ManifestDir(const std::string& model_dir, const Manifest& manifest);
// Creates DeltaPath(model_dir, base, step) (the base directory must exist) and fsyncs
// its parent; returns its path. Harmless to call again.
Result<std::string> CreateDeltaDir(const std::string& model_dir, int64_t base, int64_t step);

// Creates model_dir (with parents) and model_dir/ckpt-<step> if missing, fsyncs model_dir,
// and returns the checkpoint directory's path. Each ps task may call it before writing
// its shard; calling it again is harmless.
Result<std::string> CreateCheckpointDir(const std::string& model_dir, int64_t step);

// Commits the checkpoint whose shard files are already in ckpt-<step>/: checks every
// listed shard file against the manifest (size, and the header/footer's ps index, step
// and digest — 64 bytes read per file), writes MANIFEST atomically, then atomically
// replaces model_dir/checkpoint to name the newest committed checkpoint.
// InvalidArgument for a malformed manifest, FailedPrecondition when the files disagree.
// A delta's manifest (base set) is committed in its DeltaPath and leaves the pointer alone.
Status CommitCheckpoint(const std::string& model_dir, const Manifest& manifest);

// Committed checkpoints (MANIFEST present and valid), oldest first. A model_dir that does
// not exist has none.
Result<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& model_dir);

// The pointer file's step. NotFound when there is none, DataLoss when it is garbled.
Result<int64_t> ReadCheckpointPointer(const std::string& model_dir);

enum class Verify {
  kSizes,    // every shard file exists with the manifest's size
  kFooters,  // and its header and footer are intact and match (ps index, step, digest)
  kFull,     // and every record's checksums pass (reads all the data)
};

// DataLoss naming the bad file, e.g. "<dir>/ps-1.shard: record 3 (var ...): values
// checksum mismatch" or "<dir>/ps-0.shard: missing (listed in the MANIFEST)".
Status VerifyCheckpoint(const CheckpointInfo& checkpoint, Verify level);
// DataLoss naming the file unless the file `reader` opened is the one a MANIFEST lists as
// `info`, shard file `ps` of the checkpoint of `step`: its size, digest, ps index and step.
Status CheckAgainstManifest(const ShardReader& reader, const ShardFileInfo& info, int ps,
                            int64_t step);
// Reads ckpt_dir/MANIFEST and verifies against it.
Status VerifyCheckpoint(const std::string& ckpt_dir, Verify level = Verify::kFull);

// How LoadDeltaChain follows a chain, beyond the defaults (every committed delta of the
// chain verified at the call's level).
struct DeltaChainOptions {
  // Stop after the delta of this step.
  std::optional<int64_t> upto = std::nullopt;
  // Deltas of steps <= this join the chain by their MANIFEST's parent link alone, their
  // files unverified: the caller holds their state already (a refreshed serving bundle).
  std::optional<int64_t> verify_after = std::nullopt;
  // Called for each delta verified (VerifyCheckpoint(level) passed) before it joins the
  // chain: e.g. to read its records into memory (store_io.h: ReadDelta, which checks every
  // checksum). A DataLoss from it breaks the chain there, as a failed verification does;
  // any other error fails the call.
  std::function<Status(const CheckpointInfo& delta)> read = nullptr;
};

// The newest committed checkpoint that passes VerifyCheckpoint(level). Newer ones that
// fail, unreadable MANIFESTs and a missing/garbled/stale pointer file are reported in
// `warnings` (one line each, naming the file; logged instead when warnings is null).
// nullopt only when the directory holds no committed checkpoint and no damaged one: a
// fresh start. When checkpoints exist but none passes: DataLoss — the caller must not
// silently start from scratch. The chosen checkpoint's delta chain is LoadDeltaChain's
// with `chain`.
Result<std::optional<CheckpointInfo>> FindRestorable(const std::string& model_dir,
                                                     std::vector<std::string>* warnings,
                                                     Verify level = Verify::kFooters,
                                                     const DeltaChainOptions& chain = {});

// Sets base->deltas to the chain of base's committed deltas that pass
// VerifyCheckpoint(level) (see "Delta checkpoints"; `options` above). A delta that
// breaks the chain is reported in `warnings` (logged when null), naming its file:
// "<problem>; delta delta-<step> is corrupt; the delta chain of ckpt-<base> stops at
// step <n>". Only I/O errors (and options.read's other errors) fail. The one owner of
// the chain rules: restores, exports and serving refreshes all follow chains with it.
Status LoadDeltaChain(CheckpointInfo* base, Verify level, std::vector<std::string>* warnings,
                      const DeltaChainOptions& options = {});

// The committed state of step `step`: the full checkpoint ckpt-<step>, or the chain to
// the delta of that step (verified at level kFooters). NotFound when there is none;
// DataLoss when its chain is broken before it.
Result<CheckpointInfo> LoadCheckpointAt(const std::string& model_dir, int64_t step);

// Removes what an interrupted save leaves: ckpt-<step> and delta-<step> directories without a MANIFEST
// (only the files we write there: ps-<i>.shard, ps-<i>.shard.tmp, MANIFEST.tmp; a
// directory holding anything else is left in place with a warning), stray ps-<i>.shard.tmp
// and MANIFEST.tmp in committed directories, and model_dir/checkpoint.tmp. Only call when
// no save is in progress (at chief start-up, or after a failed save that every ps answered). `removed` gets the removed paths.
Status CleanUncommitted(const std::string& model_dir, std::vector<std::string>* removed = nullptr);

// Deletes the oldest committed checkpoints so that max_to_keep remain (max_to_keep <= 0:
// keep all). Each is first decommitted (MANIFEST unlinked, directory fsynced), then its
// files removed, so a crash midway leaves an uncommitted directory, never a half-deleted
// committed one. Directories with damaged MANIFESTs are neither counted nor deleted.
// Readers (the evaluator) must tolerate a checkpoint vanishing while they read it.
Status ApplyMaxToKeep(const std::string& model_dir, int max_to_keep,
                      std::vector<std::string>* removed = nullptr);

}  // namespace ps::ckpt

// Saving a ps::server::Store to a shard file and restoring it from a checkpoint, whatever
// cluster layout wrote it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_file.h"
#include "libps/core/status.h"
#include "libps/server/store.h"

namespace ps::ckpt {

// Writes every shard of `store` (values and optimizer slots; for a lazy shard only its
// created rows, as a sparse record) to
// <model_dir>/ckpt-<step>/ps-<ps_index>.shard (tmp + fsync + rename). Training must be
// paused: each shard is read under its locks, but shards are read one after another.
Result<ShardFileInfo> SaveStore(const ps::server::Store& store, const std::string& model_dir,
                                int ps_index, int64_t global_step);
// The same into the shard file `path` (tmp + fsync + rename), wherever it is: SaveStore
// and the serving bundle (libps/serving) write stores through this one function. A store
// configured without optimizer slots (plain SGD) writes records without slot blocks.
//
// With `changed_since` set (a delta, checkpoint_dir.h), only what changed after the
// checkpoint whose change epoch ended at *changed_since (Store::BeginEpoch) is written:
// per shard one kind-3 record of its rows stamped later and (lazy) the rows evicted
// later, as deleted; a shard with neither gets no record.
Result<ShardFileInfo> WriteStoreFile(const ps::server::Store& store, const std::string& path,
                                     int ps_index, int64_t global_step,
                                     std::optional<uint32_t> changed_since = std::nullopt);

// What RestoreStore reads of each record.
enum class RestoreSlots {
  kAll,   // every block; a slot the store's optimizer lacks is read and verified, not stored
  kSkip,  // values only: slot blocks are read and verified but not stored (for a store
          // configured without slots: inference needs no optimizer state)
};

// What RestoreStore read, for its log line and tests.
struct RestoreStats {
  int files_listed = 0;     // shard files in the MANIFEST
  int files_read = 0;       // of them, opened and walked
  int records_read = 0;     // records with rows this store holds: their data was read
  int records_skipped = 0;  // records of the files read that hold none: skipped unread
  int shards = 0;           // shards of the store restored
  int deltas = 0;           // delta checkpoints applied on top of the base
  // Some record did not land 1:1 on one shard of the store (another ps count or
  // partitioning wrote the checkpoint).
  bool resharded = false;
  // Another optimizer wrote the checkpoint: its slots this store's optimizer lacks (read,
  // verified, not stored), and this store's slots it lacks (started at their initial value).
  std::set<std::string> slots_dropped;
  std::set<std::string> slots_initialised;
  // Something was written into the store (set before the first write).
  bool store_changed = false;
};

// Restores every shard of `store` from `checkpoint`: its values, its optimizer slots and,
// for a lazy shard, exactly the created rows the checkpoint holds in its row range (rows
// it had before are dropped). The checkpoint may have been written by any number of ps
// tasks and any partitioning of the same variables, as TensorFlow's sharded variables
// allow: a shard holds global rows [row_begin, row_begin + rows) of its variable, and
// takes them from every record (of every shard file) that overlaps them. Files that hold
// no such row (by the placement the MANIFEST's extra.variables records; every file when it
// records none) are not opened, records that hold none are skipped unread, and a record's
// rows are read straight into the shards' memory (the rows of a record this store needs
// only part of are read too, into scratch: one checksum covers a whole block) (a record that is exactly one shard of
// the store, the same-layout case, is read as one block per slot, as before).
//
// Every file read must match the MANIFEST (size, digest, ps index, step) and every block
// read must pass its checksum, else DataLoss naming the file. A variable whose full shape
// or lazy-ness differs from the store's is FailedPrecondition naming the record and the
// variable; so is a row of the store that no record holds (a variable the checkpoint
// lacks), once every file was read (the placement in the MANIFEST is not checksummed, so
// the files it rules out are read before a row is called missing). Optimizer slots may
// differ (another optimizer wrote the checkpoint): the record's slots the store lacks are
// read and verified but dropped, and the store's slots the record lacks start at their
// initial values (RestoreStats names both). Records of variables the store does not hold are ignored (the chief
// checks the variables against the MANIFEST before it restores). On any error the
// shards hold partial data: restore another checkpoint. Training must be paused, and
// so must a store's handed-over eviction sweeps (Store::PauseSweeps) until its row clock
// is reset (Store::ResetRowClock): restored rows are stamped 0 until then.
//
// With RestoreSlots::kSkip (a store configured without slots) the records' slots are not
// compared with the store's, and their blocks are read and verified but not stored.
//
// Then each of checkpoint.deltas, in order, is applied on top (shard_file.h: kind-3
// records), with the same checks of the files against their MANIFEST; stats count the
// files and records of the base and every delta.
Status RestoreStore(ps::server::Store* store, const CheckpointInfo& checkpoint,
                    RestoreStats* stats = nullptr, RestoreSlots slots = RestoreSlots::kAll);

// A delta checkpoint's records, read into memory by ReadDelta so that ApplyDeltas can
// write them without touching the disk (a serving bundle's refresh reads beside its
// scorers and pauses them only for the writing; a delta that the chief's max_to_keep
// deletes meanwhile is already read).
struct DeltaRecords {
  CheckpointInfo checkpoint;                    // the delta (its deltas empty)
  std::vector<std::string> paths;               // its shard files, by ps index
  std::vector<std::vector<ShardRecord>> files;  // each file's records, in file order
};
// Reads every shard file of `delta`: each checked against its MANIFEST (size, digest, ps
// index, step) and every checksum verified (DataLoss naming the file), as
// VerifyCheckpoint(kFull) does. With RestoreSlots::kSkip the slot blocks are verified and
// not kept (memory: the delta's values).
Result<DeltaRecords> ReadDelta(const CheckpointInfo& delta,
                               RestoreSlots slots = RestoreSlots::kAll);

// Applies `deltas` (ReadDelta's, of one chain, oldest first) on top of what `store`
// holds, exactly as RestoreStore applies a checkpoint's deltas after its base (the same
// record rules, one Restorer): changed rows overwritten (dense and lazy), lazy rows
// created, rows a delta deleted (evicted) dropped; the lazy shards keep their other rows.
// No file is read. stats->deltas counts the deltas applied, and stats->store_changed says
// whether anything was written: after an error with it false the store holds what it held
// before the call, with it true part of a delta. The serving bundle's refresh
// (libps/serving) calls it while no batch is being scored; each shard is written under
// all its stripe locks (Store::ShardFill) all the same.
Status ApplyDeltas(ps::server::Store* store, std::span<const DeltaRecords> deltas,
                   RestoreStats* stats = nullptr, RestoreSlots slots = RestoreSlots::kAll);

}  // namespace ps::ckpt

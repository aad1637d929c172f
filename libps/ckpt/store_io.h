// Saving a ps::server::Store to a shard file and restoring it from one.
#pragma once

#include <set>
#include <string>

#include "libps/ckpt/shard_file.h"
#include "libps/core/status.h"
#include "libps/server/store.h"

namespace ps::ckpt {

// Writes every shard of `store` (values and optimizer slots; for a lazy shard only its
// created rows, as a sparse record) to
// <model_dir>/ckpt-<step>/ps-<ps_index>.shard (tmp + fsync + rename). Training must be
// paused: each shard is read under its locks, but shards are read one after another.
Result<ShardFileInfo> SaveStore(const ps::server::Store& store, const std::string& model_dir, int ps_index,
                                int64_t global_step);
// The same into the shard file `path` (tmp + fsync + rename), wherever it is: SaveStore
// and the serving bundle (libps/serving) write stores through this one function. A store
// configured without optimizer slots (plain SGD) writes records without slot blocks.
Result<ShardFileInfo> WriteStoreFile(const ps::server::Store& store, const std::string& path, int ps_index,
                                     int64_t global_step);

// What RestoreStore reads of each record.
enum class RestoreSlots {
  kAll,   // every block; a slot the store's optimizer lacks is an error
  kSkip,  // values only: slot blocks are read and verified but not stored (for a store
          // configured without slots: inference needs no optimizer state)
};

// Reads `shard_path` straight into `store`'s memory; its shards must already exist with
// the same rows and columns, and lazy exactly when the record is sparse (a lazy shard
// then holds exactly the rows of the record; rows it had before are dropped). Adds every key restored to `restored`. A record for a shard
// the store lacks, or of another shape, is FailedPrecondition; corruption is DataLoss
// naming the file (the shards read so far then hold partial data: restore another
// checkpoint). Training must be paused.
// With RestoreSlots::kSkip the slots of the checkpoint are verified and dropped.
Status RestoreStore(ps::server::Store* store, const std::string& shard_path, std::set<ps::server::ShardKey>* restored,
                    RestoreSlots slots = RestoreSlots::kAll);

}  // namespace ps::ckpt

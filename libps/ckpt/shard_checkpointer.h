// The ps task's side of a checkpoint: saves and restores its shard file
// (ckpt-<step>/ps-<index>.shard) in the checkpoint directory the chief names.
#pragma once

#include "libps/server/service.h"
#include "libps/server/store.h"

namespace ps::ckpt {

class ShardCheckpointer : public server::Checkpointer {
 public:
  // `store` outlives this object; `ps_index` is this ps task's index (its file name).
  ShardCheckpointer(server::Store* store, int ps_index);

  Result<proto::SaveReply> Save(const proto::Save& m) override;
  // Every shard the store holds must have a record in the file: FailedPrecondition names
  // the first one missing.
  Status Restore(const proto::Restore& m) override;

 private:
  server::Store* store_;
  int index_;
};

}  // namespace ps::ckpt

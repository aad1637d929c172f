// The ps task's side of a checkpoint: saves its shard file (ckpt-<step>/ps-<index>.shard)
// in the checkpoint directory the chief names, and restores its shards from that
// checkpoint's shard files.
#pragma once

#include "libps/server/service.h"
#include "libps/server/store.h"

namespace ps::ckpt {

class ShardCheckpointer : public server::Checkpointer {
 public:
  // `store` outlives this object; `ps_index` is this ps task's index (its file name).
  ShardCheckpointer(server::Store* store, int ps_index);

  Result<proto::SaveReply> Save(const proto::Save& m) override;
  // Reads ckpt-<step>/MANIFEST and restores every shard of the store from the files it
  // lists (RestoreStore: any ps count and partitioning), then sets the store's global step
  // and stamps the restored lazy rows as pushed at it.
  Status Restore(const proto::Restore& m) override;

 private:
  server::Store* store_;
  int index_;
};

}  // namespace ps::ckpt

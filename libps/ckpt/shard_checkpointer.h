// The ps task's side of a checkpoint: saves its shard file (ckpt-<step>/ps-<index>.shard)
// in the checkpoint directory the chief names, and restores its shards from that
// checkpoint's shard files.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "libps/server/service.h"
#include "libps/server/store.h"

namespace ps::ckpt {

class ShardCheckpointer : public server::Checkpointer {
 public:
  // `store` outlives this object; `ps_index` is this ps task's index (its file name).
  ShardCheckpointer(server::Store* store, int ps_index);

  // A full checkpoint, or with m.delta_base >= 0 a delta (checkpoint_dir.h) of what
  // changed since the checkpoint of step m.delta_parent, which this ps must have written
  // or restored itself and still remember (kKeptEpochs; else FailedPrecondition: the
  // chief then saves a full one). Ends
  // the store's change epoch (Store::BeginEpoch) and remembers it for that step, whether
  // or not the chief commits the checkpoint: nothing is cleared, so a delta that is
  // never committed costs nothing (the next one against the same parent rewrites its rows).
  Result<proto::SaveReply> Save(const proto::Save& m) override;
  // Restores the committed state of step m.global_step (LoadCheckpointAt: a full
  // checkpoint, or a base and its deltas up to that step) into every shard of the store
  // (RestoreStore: any ps count and partitioning), then sets the store's global step and
  // stamps the restored lazy rows as pushed at it. Later deltas may build on it.
  Status Restore(const proto::Restore& m) override;

  // The parents a delta may name: the newest steps saved or restored. The chief names the
  // newest committed one, which is one of these unless two saves in a row were not
  // committed (then this ps refuses and the chief saves in full). It bounds the eviction
  // log (Store::ForgetEvictions) to what these checkpoints' deltas need: 16 bytes per row
  // evicted over about two checkpoint intervals, whether or not deltas are used.
  static constexpr size_t kKeptEpochs = 2;

  // Tests: called by Restore after it filled the store, before it restamps the rows.
  void SetRestoreHookForTesting(std::function<void()> hook) { restore_hook_ = std::move(hook); }

 private:
  std::function<void()> restore_hook_;
  server::Store* store_;
  int index_;
  // Step of a checkpoint this ps saved or restored -> the change epoch that ended then.
  // Save and Restore run under the ps's long-operation gate, one at a time.
  std::map<int64_t, uint32_t> epochs_;
};

}  // namespace ps::ckpt

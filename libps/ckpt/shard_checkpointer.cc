#include "libps/ckpt/shard_checkpointer.h"

#include <chrono>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/store_io.h"
#include "libps/core/log.h"

namespace ps::ckpt {

ShardCheckpointer::ShardCheckpointer(server::Store* store, int ps_index)
    : store_(store), index_(ps_index) {}

Result<proto::SaveReply> ShardCheckpointer::Save(const proto::Save& m) {
  auto t0 = std::chrono::steady_clock::now();
  const bool delta = m.delta_base >= 0;
  std::optional<uint32_t> since;
  if (delta) {
    auto it = epochs_.find(m.delta_parent);
    if (it == epochs_.end()) {
      return FailedPrecondition(
          "delta checkpoint " + std::to_string(m.global_step) + " against step " +
          std::to_string(m.delta_parent) +
          ": this ps keeps no record of that checkpoint (it saved two since that were not "
          "committed, or never wrote or restored it); a full checkpoint is needed");
    }
    since = it->second;
  }
  store_
      ->EvictRows();  // a checkpoint holds only live rows (server/store.h); a delta logs the evicted ones
  PS_ASSIGN_OR_RETURN(std::string dir,
                      delta ? CreateDeltaDir(m.model_dir, m.delta_base, m.global_step)
                            : CreateCheckpointDir(m.model_dir, m.global_step));
  // Training is paused: the rows written are exactly those stamped <= epoch.
  const uint32_t epoch = store_->BeginEpoch();
  PS_ASSIGN_OR_RETURN(ShardFileInfo info, WriteStoreFile(*store_, dir + "/" + ShardFileName(index_),
                                                         index_, m.global_step, since));
  epochs_[m.global_step] = epoch;
  while (epochs_.size() > kKeptEpochs) epochs_.erase(epochs_.begin());
  store_->ForgetEvictions(epochs_.begin()->second);  // no delta can be based on anything older
  store_->SetGlobalStep(m.global_step);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  PS_LOG(Info) << "saved " << CheckpointRelPath(delta ? m.delta_base : m.global_step, m.global_step)
               << "/" << info.name << " (" << info.bytes / 1048576.0 << " MiB in " << sec << " s)";
  return proto::SaveReply{info.name, info.bytes, info.digest};
}

Status ShardCheckpointer::Restore(const proto::Restore& m) {
  // The ps reads the MANIFESTs itself: they list the shard files (of the checkpoint and
  // of its deltas) and what each must be, and the placement (extra.variables) says which
  // of the checkpoint's files hold rows of this ps's shards, whatever ps count wrote it
  // (RestoreStore).
  PS_ASSIGN_OR_RETURN(CheckpointInfo c, LoadCheckpointAt(m.model_dir, m.global_step));
  RestoreStats stats;
  epochs_.clear();  // the store's rows are replaced: no delta may build on what it saved before
  // No eviction sweep until the restored rows are stamped with the checkpoint's step.
  auto sweeps_paused = store_->PauseSweeps();
  PS_RETURN_IF_ERROR(RestoreStore(store_, c, &stats));
  if (restore_hook_) restore_hook_();
  store_->SetGlobalStep(m.global_step);
  store_->ResetRowClock(m.global_step);  // restored rows count as pushed at the checkpoint's step
  epochs_[m.global_step] = store_->BeginEpoch();
  store_->ForgetEvictions(epochs_.begin()->second);
  PS_LOG(Info) << "restored " << stats.shards << " shard(s) from " << c.dir
               << (c.deltas.empty() ? std::string()
                                    : " + " + std::to_string(c.deltas.size()) + " delta(s)")
               << ": " << stats.records_read << " record(s) of " << stats.files_read << " of "
               << stats.files_listed << " shard file(s)"
               << (stats.resharded ? ", resharded (another ps count or partitioning wrote it)"
                                   : "");
  if (!stats.slots_dropped.empty() || !stats.slots_initialised.empty()) {
    auto names = [](const std::set<std::string>& set) {
      std::string s = "[";
      for (const auto& n : set) s += (s.size() > 1 ? ", " : "") + n;
      return s + "]";
    };
    PS_LOG(Warning) << c.dir << " was written by another optimizer: its slots "
                    << names(stats.slots_dropped) << " dropped, this job's slots "
                    << names(stats.slots_initialised) << " started at their initial values";
  }
  return Status::Ok();
}

}  // namespace ps::ckpt

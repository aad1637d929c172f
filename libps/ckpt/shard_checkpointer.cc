#include "libps/ckpt/shard_checkpointer.h"

#include <chrono>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/store_io.h"
#include "libps/core/log.h"

namespace ps::ckpt {

ShardCheckpointer::ShardCheckpointer(server::Store* store, int ps_index) : store_(store), index_(ps_index) {}

Result<proto::SaveReply> ShardCheckpointer::Save(const proto::Save& m) {
  auto t0 = std::chrono::steady_clock::now();
  store_->EvictRows();  // a checkpoint holds only live rows (server/store.h)
  PS_ASSIGN_OR_RETURN(ShardFileInfo info, SaveStore(*store_, m.model_dir, index_, m.global_step));
  store_->SetGlobalStep(m.global_step);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  PS_LOG(Info) << "saved " << CheckpointDirName(m.global_step) << "/" << info.name << " ("
               << info.bytes / 1048576.0 << " MiB in " << sec << " s)";
  return proto::SaveReply{info.name, info.bytes, info.digest};
}

Status ShardCheckpointer::Restore(const proto::Restore& m) {
  const std::string dir = CheckpointPath(m.model_dir, m.global_step);
  // The ps reads the MANIFEST itself: it lists the shard files and what each must be, and
  // its placement (extra.variables) says which of them hold rows of this ps's shards,
  // whatever ps count wrote the checkpoint (RestoreStore).
  PS_ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(dir));
  RestoreStats stats;
  PS_RETURN_IF_ERROR(RestoreStore(store_, CheckpointInfo{m.global_step, dir, std::move(manifest)}, &stats));
  store_->SetGlobalStep(m.global_step);
  store_->ResetRowClock(m.global_step);  // restored rows count as pushed at the checkpoint's step
  PS_LOG(Info) << "restored " << stats.shards << " shard(s) from " << dir << ": " << stats.records_read
               << " record(s) of " << stats.files_read << " of " << stats.files_listed << " shard file(s)"
               << (stats.resharded ? ", resharded (another ps count or partitioning wrote it)" : "");
  if (!stats.slots_dropped.empty() || !stats.slots_initialised.empty()) {
    auto names = [](const std::set<std::string>& set) {
      std::string s = "[";
      for (const auto& n : set) s += (s.size() > 1 ? ", " : "") + n;
      return s + "]";
    };
    PS_LOG(Warning) << dir << " was written by another optimizer: its slots " << names(stats.slots_dropped)
                    << " dropped, this job's slots " << names(stats.slots_initialised) << " started at their initial values";
  }
  return Status::Ok();
}

}  // namespace ps::ckpt

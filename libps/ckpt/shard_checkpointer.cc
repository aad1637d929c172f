#include "libps/ckpt/shard_checkpointer.h"

#include <chrono>
#include <set>

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
  std::string path = CheckpointPath(m.model_dir, m.global_step) + "/" + ShardFileName(index_);
  std::set<ps::server::ShardKey> restored;
  PS_RETURN_IF_ERROR(RestoreStore(store_, path, &restored));
  for (const auto& key : store_->Keys()) {
    if (!restored.contains(key)) {
      return FailedPrecondition(path + ": has no record for " + key.ToString() +
                                " (was it written by another cluster layout?)");
    }
  }
  store_->SetGlobalStep(m.global_step);
  store_->ResetRowClock(m.global_step);  // restored rows count as pushed at the checkpoint's step
  PS_LOG(Info) << "restored " << restored.size() << " shard(s) from " << path;
  return Status::Ok();
}

}  // namespace ps::ckpt

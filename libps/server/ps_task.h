// pstrain-ps: serves its shards until the chief's Shutdown (exit 0) or a signal.
#pragma once

#include <functional>
#include <memory>

#include "libps/core/status.h"
#include "libps/daemon/daemon.h"
#include "libps/server/service.h"
#include "libps/server/store.h"

namespace ps::server {

// Makes the checkpointer of a ps task: `store` is its store, `ps_index` its task index.
// (The daemon's main passes ckpt::ShardCheckpointer's; the server module does not know
// the file format.)
using CheckpointerFactory =
    std::function<std::unique_ptr<Checkpointer>(Store* store, int ps_index)>;

// What pstrain-ps's own flags set.
struct PsTaskOptions {
  uint64_t inline_max_bytes = Service::kDefaultInlineBytes;           // --inline-max-kib
  uint64_t early_apply_min_bytes = Service::kDefaultEarlyApplyBytes;  // --early-apply-min-kib
};

Status RunPsTask(const daemon::DaemonContext& ctx, const PsTaskOptions& options,
                 const CheckpointerFactory& make_checkpointer, daemon::SignalWatcher& signals);

}  // namespace ps::server

// pstrain-ps: holds variable shards, applies pushed gradients, serves pulls; exits 0
// when the chief sends Shutdown.
#include <cstdio>
#include <memory>

#include <boost/program_options.hpp>

#include "libps/ckpt/shard_checkpointer.h"
#include "libps/daemon/daemon.h"
#include "libps/server/ps_task.h"

int main(int argc, char** argv) {
  using namespace ps;
  daemon::SignalWatcher signals;  // first: blocks SIGINT/SIGTERM before any thread starts
  daemon::DaemonFlags flags;
  boost::program_options::options_description desc("Options");
  daemon::AddDaemonOptions(desc, &flags);
  daemon::AddServingTaskOptions(desc, &flags);
  if (auto rc = daemon::ParseCommandLine(argc, argv,
                                 "Usage: pstrain-ps [options]\n"
                                 "A parameter-server task. Reads TF_CONFIG (task type \"ps\").",
                                 desc)) {
    return *rc;
  }
  auto ctx = daemon::Bootstrap(flags, ps::cluster::TaskType::kPs);
  if (!ctx.ok()) {
    std::fprintf(stderr, "pstrain-ps: %s\n", ctx.status().message().c_str());
    return daemon::ExitCodeFor(ctx.status());
  }
  if (flags.check_config) return daemon::CheckedConfig("pstrain-ps", *ctx);
  return daemon::FinishDaemon("pstrain-ps", server::RunPsTask(*ctx,
                                                       [](server::Store* store, int index) {
                                                         return std::make_unique<ckpt::ShardCheckpointer>(store, index);
                                                       },
                                                       signals), signals);
}

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
  int64_t inline_max_kib = static_cast<int64_t>(server::Service::kDefaultInlineBytes >> 10);
  desc.add_options()(
      "inline-max-kib",
      boost::program_options::value(&inline_max_kib)
          ->value_name("KIB")
          ->default_value(inline_max_kib),
      "async-mode pulls and pushes of at most this many tensor KiB run on the I/O thread that "
      "read them instead of the handler pool (0: none); with many cores and few --io-threads, "
      "lower it so the optimizer's work spreads over the pool");
  int64_t early_apply_min_kib =
      static_cast<int64_t>(server::Service::kDefaultEarlyApplyBytes >> 10);
  desc.add_options()(
      "early-apply-min-kib",
      boost::program_options::value(&early_apply_min_kib)
          ->value_name("KIB")
          ->default_value(early_apply_min_kib),
      "async-mode pushes of whole dense shards with at least this many tensor KiB are applied "
      "on the I/O thread while they arrive, overlapping the optimizer with the transfer (0: "
      "never; a push cut off mid-way keeps the rows that arrived)");
  if (auto rc =
          daemon::ParseCommandLine(argc, argv,
                                   "Usage: pstrain-ps [options]\n"
                                   "A parameter-server task. Reads TF_CONFIG (task type \"ps\").",
                                   desc)) {
    return *rc;
  }
  // At ~60 us per MiB of Adam, 64 MiB holds an I/O thread (and every connection on it)
  // for ~4 ms: the most that is still "quick".
  if (inline_max_kib < 0 || inline_max_kib > 65536) {
    std::fprintf(stderr, "pstrain-ps: --inline-max-kib: must be in 0..65536 (see --help)\n");
    return daemon::kExitUsage;
  }
  if (early_apply_min_kib < 0 || early_apply_min_kib > (int64_t{1} << 30)) {
    std::fprintf(stderr, "pstrain-ps: --early-apply-min-kib: must be in 0..%lld (see --help)\n",
                 static_cast<long long>(int64_t{1} << 30));
    return daemon::kExitUsage;
  }
  auto ctx = daemon::Bootstrap(flags, ps::cluster::TaskType::kPs);
  if (!ctx.ok()) return daemon::FailStart("pstrain-ps", ctx.status());
  if (flags.check_config) return daemon::CheckedConfig("pstrain-ps", *ctx);
  const server::PsTaskOptions ps_options{static_cast<uint64_t>(inline_max_kib) << 10,
                                         static_cast<uint64_t>(early_apply_min_kib) << 10};
  return daemon::FinishDaemon("pstrain-ps",
                              server::RunPsTask(
                                  *ctx, ps_options,
                                  [](server::Store* store, int index) {
                                    return std::make_unique<ckpt::ShardCheckpointer>(store, index);
                                  },
                                  signals),
                              signals);
}

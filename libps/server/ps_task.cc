#include "libps/server/ps_task.h"

#include <chrono>
#include <cstdlib>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "libps/core/log.h"
#include "libps/daemon/fault_hold.h"
#include "libps/server/ps_status.h"

namespace ps::server {

Status RunPsTask(const daemon::DaemonContext& ctx, const PsTaskOptions& ps_options,
                 const CheckpointerFactory& make_checkpointer, daemon::SignalWatcher& signals) {
  Store store;
  // Eviction sweeps of lazy shards run on a thread of their own, so the push that finds
  // one due does not wait for a scan of its whole shard. Declared after the store and
  // before the server: it stops (a sweep under way finishes) once no push can come.
  boost::asio::thread_pool sweeper(1);
  store.SetSweepRunner(
      [&sweeper](std::function<void()> work) { boost::asio::post(sweeper, std::move(work)); });
  std::unique_ptr<Checkpointer> checkpointer = make_checkpointer(&store, ctx.tf.task.index);
  Service service(&store, checkpointer.get());
  service.SetInlineMaxBytes(ps_options.inline_max_bytes);
  net::Runtime runtime(ctx.io_threads);
  auto options = ctx.ServerFor({proto::Role::kChief, proto::Role::kWorker});
  service.Attach(options, ps_options.early_apply_min_bytes);
  // Testing hook: PSTRAIN_FAULT_IGNORE_SHUTDOWN=1 leaves the chief's Shutdown unanswered
  // (a ps that does not acknowledge), so the chief's timeout path can be tested.
  const bool ignore_shutdown = std::getenv("PSTRAIN_FAULT_IGNORE_SHUTDOWN") != nullptr;
  std::mutex held_mu;
  std::vector<net::Responder> held;  // unanswered Shutdowns; guarded by held_mu
  PS_ASSIGN_OR_RETURN(auto fault_hold,
                      daemon::FaultHold::FromEnv([&service](net::Request req, net::Responder resp) {
                        service.Handle(std::move(req), std::move(resp));
                      }));
  // The time a handler thread spends on a request, by operation: [pull, push, other].
  prom::Registry& metrics = *ctx.metrics.registry;
  const char* latency_help =
      "Time a ps handler thread spent on a request (a pull that must wait counts until parked).";
  prom::Histogram* latency[3];
  for (int op = 0; op < 3; ++op) {
    static constexpr const char* kOps[] = {"pull", "push", "other"};
    latency[op] = &metrics.Histogram("pstrain_ps_request_duration_seconds", latency_help,
                                     prom::LatencyBuckets(), {{"op", kOps[op]}});
  }
  PS_ASSIGN_OR_RETURN(
      auto server, net::Server::Start(runtime, options, [&](net::Request req, net::Responder resp) {
        if (ignore_shutdown && std::holds_alternative<proto::Shutdown>(req.envelope.body)) {
          PS_LOG(Warning) << "fault injection: not answering Shutdown";
          std::lock_guard lock(held_mu);
          held.push_back(std::move(resp));
          return;
        }
        if (fault_hold && fault_hold->Hold(req, resp)) return;
        const auto t0 = std::chrono::steady_clock::now();
        const auto& body = req.envelope.body;
        const int op = std::holds_alternative<proto::Pull>(body)   ? 0
                       : std::holds_alternative<proto::Push>(body) ? 1
                                                                   : 2;
        service.Handle(std::move(req), std::move(resp));
        latency[op]->Observe(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }));
  const auto started = std::chrono::steady_clock::now();
  // reset_max: false for a scrape, which must not shorten the chief's window of max_queue_depth.
  auto status_of = [&store, &service, s = server.get(), started](bool reset_max) {
    double uptime =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    proto::PsStatus status = PsStatusOf(store, s->stats(reset_max), service.generation(), uptime);
    status.update = UpdateFiguresOf(service.update_stats());
    return status;
  };
  service.SetStatusSource([status_of] { return status_of(true); });
  auto rpc_metrics = daemon::ExportServerStats(metrics, *server);
  auto ps_metrics = metrics.AddCollector([status_of, &service](prom::Writer& w) {
    WritePsMetrics(w, status_of(false));
    WriteUpdateModeMetric(w, service.update_stats());
    w.Counter(
        "pstrain_ps_early_applied_pushes_total",
        "Pushes taken on to be applied while their payload arrived (--early-apply-min-kib), repeats "
        "and failed ones included.",
        static_cast<double>(service.early_pushes()));
    w.Counter(
        "pstrain_ps_push_pulls_total",
        "Pushes answered with a pull after them (a worker's combine_push_pull): one request for both.",
        static_cast<double>(service.push_pulls()));
    w.Counter(
        "pstrain_ps_early_apply_cut_total",
        "Of them, pushes cut off before their payload was in (the rows that arrived stay applied).",
        static_cast<double>(service.early_cut()));
  });
  bool by_signal = false;
  auto watching_signals = signals.Start([&](int sig) {
    by_signal = true;
    service.RequestStop({daemon::TerminateReason(sig)});
  });
  auto chief_watch = daemon::WatchChief(
      ctx, *server, [&](proto::Shutdown why) { service.RequestStop(std::move(why)); });
  PS_LOG(Info) << "serving on " << ctx.listen_host << ":" << server->port();
  const proto::Shutdown shutdown = service.WaitForShutdown();
  const std::string& reason = shutdown.reason;
  server->Close();
  service.SetStatusSource(nullptr);
  if (by_signal) return daemon::SignalStatus(reason);
  auto stats = store.stats();
  PS_LOG(Info) << "shut down (" << reason << "); served " << stats.pull_requests << " pulls, "
               << stats.push_requests << " pushes (" << service.push_pulls()
               << " with a pull after them, " << service.early_pushes()
               << " applied while they arrived, " << service.early_cut()
               << " of them cut off), ignored " << service.skipped_pushes()
               << " repeated push item(s)";
  if (stats.rows_admitted + stats.rows_evicted_ttl + stats.rows_evicted_max_rows > 0) {
    PS_LOG(Info) << "lazy rows: " << stats.live_rows << " live, " << stats.rows_admitted
                 << " admitted (" << stats.rows_not_admitted
                 << " gradient row(s) dropped before admission), evicted " << stats.rows_evicted_ttl
                 << " by ttl_steps and " << stats.rows_evicted_max_rows << " by max_rows";
  }
  if (const std::string summary = UpdateSummary(service.update_stats()); !summary.empty())
    PS_LOG(Info) << summary;
  return daemon::ShutdownStatus(shutdown);
}

}  // namespace ps::server

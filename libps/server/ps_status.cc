#include "libps/server/ps_status.h"

namespace ps::server {

proto::PsStatus PsStatusOf(const Store& store, const net::Server::Stats& server,
                           uint64_t generation, double uptime_sec) {
  int64_t shards = 0;
  uint64_t floats = 0;
  store.ForEachShard([&](const ShardView& v) {
    ++shards;
    floats += v.values.size();
    for (const auto& slot : v.slots) floats += slot.second.size();
  });
  const StoreStats st = store.stats();
  return proto::PsStatus{.generation = generation,
                         .global_step = store.global_step(),
                         .uptime_sec = uptime_sec,
                         .shards = shards,
                         .bytes_held = floats * sizeof(float),
                         .pull_requests = st.pull_requests,
                         .push_requests = st.push_requests,
                         .failed_requests = st.failed_requests,
                         .bytes_pulled = st.bytes_pulled,
                         .bytes_pushed = st.bytes_pushed,
                         .rows_pulled = st.rows_pulled,
                         .rows_pushed = st.rows_pushed,
                         .requests = server.requests,
                         .queue_depth = server.queue_depth,
                         .max_queue_depth = server.max_queue_depth,
                         .bytes_received = server.bytes_received,
                         .bytes_sent = server.bytes_sent,
                         .update = {},
                         .rows = {.lazy_shards = st.lazy_shards,
                                  .live_rows = st.live_rows,
                                  .admitted = st.rows_admitted,
                                  .not_admitted = st.rows_not_admitted,
                                  .evicted_ttl = st.rows_evicted_ttl,
                                  .evicted_max_rows = st.rows_evicted_max_rows}};
}

proto::PsUpdateFigures UpdateFiguresOf(const Service::UpdateStats& u) {
  return proto::PsUpdateFigures{.mode = u.spec.Describe(),
                                .stale_dropped = static_cast<int64_t>(u.stale_dropped),
                                .waited_pulls = static_cast<int64_t>(u.waited_pulls),
                                .max_lead = u.max_lead,
                                .min_version = u.min_version,
                                .max_version = u.max_version,
                                .applied_on_arrival = static_cast<int64_t>(u.applied_on_arrival)};
}

void WritePsMetrics(prom::Writer& w, const proto::PsStatus& s) {
  auto d = [](auto v) { return static_cast<double>(v); };
  w.Counter("pstrain_ps_pull_requests_total", "Pull requests served.", d(s.pull_requests));
  w.Counter("pstrain_ps_push_requests_total", "Push requests applied.", d(s.push_requests));
  w.Counter("pstrain_ps_failed_requests_total", "Pull and push requests that failed.",
            d(s.failed_requests));
  w.Counter("pstrain_ps_pulled_bytes_total", "Parameter bytes sent in pull replies.",
            d(s.bytes_pulled));
  w.Counter("pstrain_ps_pushed_bytes_total", "Gradient bytes received in pushes.",
            d(s.bytes_pushed));
  w.Counter("pstrain_ps_pulled_rows_total", "Rows sent in pull replies.", d(s.rows_pulled));
  w.Counter("pstrain_ps_pushed_rows_total", "Rows updated by pushes.", d(s.rows_pushed));
  w.Gauge("pstrain_ps_global_step", "The highest global step pushed to this ps.", d(s.global_step));
  w.Gauge("pstrain_ps_shards", "Variable shards this ps holds.", d(s.shards));
  w.Gauge("pstrain_ps_held_bytes", "Bytes of parameters and optimizer slots this ps holds.",
          d(s.bytes_held));
  w.Counter("pstrain_ps_stale_gradients_total", "Sync mode: gradients dropped as stale.",
            d(s.update.stale_dropped));
  w.Gauge("pstrain_ps_lazy_rows", "Created rows of the lazy tables this ps holds.",
          d(s.rows.live_rows));
  w.Counter("pstrain_ps_admitted_rows_total",
            "Lazy rows created by the admit_min_count-th push of their id.", d(s.rows.admitted));
  w.Counter("pstrain_ps_not_admitted_rows_total",
            "Gradient rows dropped because their lazy row was not admitted yet.",
            d(s.rows.not_admitted));
  w.Counter("pstrain_ps_evicted_rows_total", "Lazy rows evicted, by reason.", d(s.rows.evicted_ttl),
            {{"reason", "ttl"}});
  w.Counter("pstrain_ps_evicted_rows_total", "Lazy rows evicted, by reason.",
            d(s.rows.evicted_max_rows), {{"reason", "max_rows"}});
  w.Counter("pstrain_ps_waited_pulls_total",
            "Sync and bounded-staleness modes: pulls that had to wait.", d(s.update.waited_pulls));
}

void WriteUpdateModeMetric(prom::Writer& w, const Service::UpdateStats& stats) {
  if (!stats.configured) return;  // a fresh or restarted ps: the default says nothing
  const UpdateSpec& spec = stats.spec;
  for (const bool sparse : {false, true}) {
    w.Gauge(
        "pstrain_ps_update_mode", "The update mode of each variable class (1 per class).", 1,
        {{"class", sparse ? "sparse" : "dense"}, {"mode", UpdateModeName(spec.ModeOf(sparse))}});
  }
}

std::string UpdateSummary(const Service::UpdateStats& u) {
  if (u.spec.StepMode() == UpdateMode::kSync) {
    std::string what =
        u.spec.hybrid() ? u.spec.Describe() + " updates: " : std::string("sync updates: ");
    // A hybrid ps may hold only the async class (placement puts a variable's shards anywhere).
    what += u.sync_shards == 0
                ? std::string("no sync shards")
                : std::string(u.spec.hybrid() ? "sync shards" : "shards") + " at update " +
                      std::to_string(u.min_version) + ".." + std::to_string(u.max_version);
    if (u.spec.hybrid())
      what += ", " + std::to_string(u.applied_on_arrival) + " async gradient(s) applied";
    return what + ", " + std::to_string(u.stale_dropped) + " stale gradient(s) dropped, " +
           std::to_string(u.waited_pulls) + " pull(s) waited";
  }
  if (u.spec.mode == UpdateMode::kBoundedStaleness) {
    return "bounded staleness: largest lead " + std::to_string(u.max_lead) + " step(s) (bound " +
           std::to_string(u.spec.staleness) + "), " + std::to_string(u.waited_pulls) +
           " pull(s) waited";
  }
  return "";
}

}  // namespace ps::server

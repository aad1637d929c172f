#include "libps/server/ps_status.h"

namespace ps::server {

proto::PsStatus PsStatusOf(const Store& store, const net::Server::Stats& server, uint64_t generation,
                           double uptime_sec) {
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
                         .update = {}};
}

proto::PsUpdateFigures UpdateFiguresOf(const Service::UpdateStats& u) {
  return proto::PsUpdateFigures{.mode = UpdateModeName(u.spec.mode),
                                .stale_dropped = static_cast<int64_t>(u.stale_dropped),
                                .waited_pulls = static_cast<int64_t>(u.waited_pulls),
                                .max_lead = u.max_lead,
                                .min_version = u.min_version,
                                .max_version = u.max_version};
}

}  // namespace ps::server

// What a ps task answers to GetStatus (proto::PsStatus, documented in
// libps/proto/messages.h): its store's and server's counters, passed on by the chief,
// which turns consecutive samples into rates (libps/obs/figures.h).
#pragma once

#include <cstdint>
#include <string>

#include "libps/net/transport.h"
#include "libps/prom/registry.h"
#include "libps/proto/messages.h"
#include "libps/server/service.h"
#include "libps/server/store.h"

namespace ps::server {

// Walks every shard through Store::ForEachShard, which for a lazy shard locks all its
// stripes and gathers (and sorts) its created rows: time grows with the rows held, and
// pulls and pushes of that shard wait meanwhile. Any thread except an I/O thread:
// GetStatus is therefore never handled inline (Service::Inline), always on the pool.
proto::PsStatus PsStatusOf(const Store& store, const net::Server::Stats& server,
                           uint64_t generation, double uptime_sec);
// The update-mode figures of `stats` (Service::update_stats()).
proto::PsUpdateFigures UpdateFiguresOf(const Service::UpdateStats& stats);
// The store's part of `status` as pstrain_ps_* Prometheus metrics (the server's part is
// daemon::ExportServerStats's pstrain_rpc_*).
void WritePsMetrics(prom::Writer& w, const proto::PsStatus& status);
// pstrain_ps_update_mode{class="dense"|"sparse", mode="async"|"sync"|"bounded_staleness"}
// = 1: each variable class's update mode (both alike unless the job is hybrid). Nothing
// until a CreateShards configured the mode (stats.configured).
void WriteUpdateModeMetric(prom::Writer& w, const Service::UpdateStats& stats);
// The ps's closing log line on its updates: sync steps (sync mode, hybrid), bounded
// staleness; empty in async mode.
std::string UpdateSummary(const Service::UpdateStats& stats);

}  // namespace ps::server

// What a ps task answers to GetStatus: a JSON object of its counters, passed through by
// the chief (which turns consecutive samples into rates, libps/train/load.h).
//
//   {"generation": 1732268000123, "global_step": 500, "uptime_sec": 12.5,
//    "shards": 3, "bytes_held": 1234560,
//    "store":  {"pull_requests", "push_requests", "failed_requests", "bytes_pulled",
//               "bytes_pushed", "rows_pulled", "rows_pushed"},
//    "server": {"requests", "queue_depth", "max_queue_depth", "bytes_received", "bytes_sent"}}
//
// Counters are monotonic since the ps started (uptime_sec ago; a restarted ps starts
// again from 0). bytes_held: values and optimizer slots of every shard, 4 bytes a float.
// Keys may be added; readers must ignore the ones they do not know.
#pragma once

#include <cstdint>

#include "libps/core/json.h"
#include "libps/net/transport.h"
#include "libps/server/store.h"

namespace ps::server {

// Takes each shard's lock briefly (Store::ForEachShard). Any thread.
Json PsStatusJson(const Store& store, const net::Server::Stats& server, uint64_t generation, double uptime_sec);

}  // namespace ps::server

// Where training time goes: the per-ps and per-worker load figures of the chief's status
// reply and of every train_metrics.jsonl progress line, and the rules behind the hints
// `pstrain status` prints. Pure functions; safe from any thread.
//
// A sample is taken at every log interval and on every GetStatus from an operator; the
// figures cover the time since the newest earlier sample (of either kind) that is at
// least 1 s old, or since the chief started when there is none.
//
//   "workers": [{"task": "worker:0", "state": "running", "steps": 1200, "examples_per_s": 4000,
//                "step_ms": 12.5, "data_s": 0.01, "pull_s": 0.3, "compute_s": 0.5,
//                "push_s": 0.2, "data_frac": 0.01, "pull_frac": 0.3, "compute_frac": 0.49,
//                "push_frac": 0.2}]
//   "ps":      [{"task": "ps:0", "address": "10.0.0.5:2222", "state": "ok",
//                "requests": 5000, "bytes_in": 9000000, "bytes_out": 9100000,
//                "requests_per_s": 800, "bytes_in_per_s": 1.4e6, "bytes_out_per_s": 1.5e6,
//                "rows_per_s": 51200, "queue_depth": 0, "max_queue_depth": 1,
//                "bytes_held": 1234560, "shards": 3, "window_sec": 1.6}]
// Worker figures are over the window: steps is the total so far; *_s are seconds spent
// in the window (summed over the steps the worker finished in it), *_frac their share
// of the sum of the four, step_ms that sum per step; examples_per_s is steps in the
// window x batch_size / window. With no step in the window the per-step figures are null.
// Ps figures: requests, bytes_in and bytes_out are totals since the ps started; the
// rates are over window_sec by the ps's own clock; max_queue_depth is the deepest its
// handler queue got since the previous sample. A ps that did not answer in time has
// {"task", "address", "state": "no answer", "error"}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libps/proto/messages.h"

namespace ps::obs {

// One worker as the chief's coordinator sees it: counters since the chief started.
struct WorkerSnapshot {
  std::string name;
  bool alive = true;
  int in_flight = 0;
  int64_t packs_done = 0;
  int64_t steps_done = 0;
  double data_seconds = 0, pull_seconds = 0, compute_seconds = 0, push_seconds = 0;
  std::string last_error;
};

// The "ps" entry: rates over cur.uptime_sec - prev.uptime_sec; over the whole uptime when
// there is no prev, or prev is from before a restart of the ps (its uptime or a counter
// went down). window_sec 0 gives rates of 0. `update` is cur's update figures.
proto::PsLoad PsLoadOf(const std::string& task, const std::string& address,
                       const proto::PsStatus& cur, const std::optional<proto::PsStatus>& prev);
proto::PsLoad PsNoAnswer(const std::string& task, const std::string& address,
                         const std::string& error);

// The "workers" entry. `prev`: the same worker at the previous sample (nullptr: none, the
// window is since training began); a steps_done lower than prev's counts as no prev.
// `window_sec`: wall time since that sample.
proto::WorkerLoad WorkerLoadOf(const WorkerSnapshot& cur, const WorkerSnapshot* prev,
                               double window_sec, int64_t batch_size);

// The hint rules, over a status's (or a metrics line's) workers and ps:
//  - hot ps: among >= 2 answering ps with a mean of >= kHintMinRequestsPerSec requests/s,
//    one whose requests/s or bytes/s (in + out) is >= kHintFactor x the mean;
//  - straggler: among >= 2 workers with a step_ms, one whose step_ms is >= kHintFactor x
//    the median;
//  - network-bound: workers spend more than half their step time pulling and pushing
//    (summed over workers) while every answering ps kept max_queue_depth <= 1;
//  - ps-bound: the same share of pulling and pushing while some ps queued >= 2 requests.
// One line per finding, "hint: ...", in this order; none when nothing applies.
inline constexpr double kHintFactor = 1.5;
inline constexpr double kHintMinRequestsPerSec = 10;
std::vector<std::string> LoadHints(const std::vector<proto::WorkerLoad>& workers,
                                   const std::vector<proto::PsLoad>& ps);

}  // namespace ps::obs

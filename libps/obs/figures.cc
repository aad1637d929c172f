#include "libps/obs/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "libps/core/text.h"

namespace ps::obs {

namespace {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string Rate(double bytes_per_s) {
  return HumanBytes(static_cast<uint64_t>(std::llround(std::max(0.0, bytes_per_s)))) + "/s";
}

}  // namespace

proto::PsLoad PsLoadOf(const std::string& task, const std::string& address,
                       const proto::PsStatus& cur, const std::optional<proto::PsStatus>& prev) {
  proto::PsStatus base;  // zeros: since the ps started
  const uint64_t rows = cur.rows_pulled + cur.rows_pushed;
  if (prev && prev->uptime_sec <= cur.uptime_sec && prev->requests <= cur.requests &&
      prev->bytes_received <= cur.bytes_received && prev->bytes_sent <= cur.bytes_sent &&
      prev->rows_pulled + prev->rows_pushed <= rows) {
    base = *prev;
  }
  const double window = cur.uptime_sec - base.uptime_sec;
  auto rate = [&](uint64_t now, uint64_t then) {
    return window > 0 ? static_cast<double>(now - then) / window : 0.0;
  };
  return proto::PsLoad{.task = task,
                       .address = address,
                       .state = "ok",
                       .error = "",
                       .requests = cur.requests,
                       .bytes_in = cur.bytes_received,
                       .bytes_out = cur.bytes_sent,
                       .requests_per_s = rate(cur.requests, base.requests),
                       .bytes_in_per_s = rate(cur.bytes_received, base.bytes_received),
                       .bytes_out_per_s = rate(cur.bytes_sent, base.bytes_sent),
                       .rows_per_s = rate(rows, base.rows_pulled + base.rows_pushed),
                       .queue_depth = cur.queue_depth,
                       .max_queue_depth = cur.max_queue_depth,
                       .bytes_held = cur.bytes_held,
                       .shards = cur.shards,
                       .window_sec = window,
                       .update = cur.update,
                       .rows = cur.rows.lazy_shards > 0 ? std::optional(cur.rows) : std::nullopt};
}

proto::PsLoad PsNoAnswer(const std::string& task, const std::string& address,
                         const std::string& error) {
  proto::PsLoad p;
  p.task = task;
  p.address = address;
  p.state = "no answer";
  p.error = error;
  return p;
}

proto::WorkerLoad WorkerLoadOf(const WorkerSnapshot& cur, const WorkerSnapshot* prev,
                               double window_sec, int64_t batch_size) {
  WorkerSnapshot base;
  if (prev != nullptr && prev->steps_done <= cur.steps_done) base = *prev;
  const int64_t steps = cur.steps_done - base.steps_done;
  proto::WorkerLoad w;
  w.task = cur.name;
  w.state = cur.alive ? (cur.in_flight > 0 ? "running" : "idle") : "lost";
  w.steps = cur.steps_done;
  w.examples_per_s = window_sec > 0 ? static_cast<double>(steps * batch_size) / window_sec : 0.0;
  w.data_s = std::max(0.0, cur.data_seconds - base.data_seconds);
  w.pull_s = std::max(0.0, cur.pull_seconds - base.pull_seconds);
  w.compute_s = std::max(0.0, cur.compute_seconds - base.compute_seconds);
  w.push_s = std::max(0.0, cur.push_seconds - base.push_seconds);
  const double total = w.data_s + w.pull_s + w.compute_s + w.push_s;
  if (steps > 0 && total > 0) w.step_ms = 1000 * total / static_cast<double>(steps);
  if (total > 0) {
    w.data_frac = w.data_s / total;
    w.pull_frac = w.pull_s / total;
    w.compute_frac = w.compute_s / total;
    w.push_frac = w.push_s / total;
  }
  return w;
}

std::vector<std::string> LoadHints(const std::vector<proto::WorkerLoad>& workers,
                                   const std::vector<proto::PsLoad>& ps) {
  std::vector<std::string> hints;

  // Hot ps.
  std::vector<const proto::PsLoad*> answered;
  for (const auto& p : ps) {
    if (p.answered()) answered.push_back(&p);
  }
  if (answered.size() >= 2) {
    double req_mean = 0, bytes_mean = 0;
    for (const proto::PsLoad* p : answered) {
      req_mean += p->requests_per_s;
      bytes_mean += p->bytes_in_per_s + p->bytes_out_per_s;
    }
    req_mean /= static_cast<double>(answered.size());
    bytes_mean /= static_cast<double>(answered.size());
    if (req_mean >= kHintMinRequestsPerSec) {
      for (const proto::PsLoad* p : answered) {
        const double req = p->requests_per_s;
        const double bytes = p->bytes_in_per_s + p->bytes_out_per_s;
        const double req_x = req / req_mean;
        const double bytes_x = bytes_mean > 0 ? bytes / bytes_mean : 0;
        if (std::max(req_x, bytes_x) < kHintFactor) continue;
        std::string what = req_x >= bytes_x
                               ? Fmt("%.1fx", req_x) + " the mean requests/s (" + Fmt("%.0f", req) +
                                     " vs " + Fmt("%.0f", req_mean) + ")"
                               : Fmt("%.1fx", bytes_x) + " the mean bytes/s (" + Rate(bytes) +
                                     " vs " + Rate(bytes_mean) + ")";
        hints.push_back(
            "hint: " + p->task + " carries more load than the other ps tasks: " + what +
            "; a hot-spot variable? partition big variables or spread them over the ps tasks");
      }
    }
  }

  // Stragglers.
  std::vector<double> step_ms;
  for (const auto& w : workers) {
    if (w.step_ms && *w.step_ms > 0) step_ms.push_back(*w.step_ms);
  }
  if (step_ms.size() >= 2) {
    std::vector<double> sorted = step_ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    for (const auto& w : workers) {
      const auto& v = w.step_ms;
      if (!v || *v <= 0 || *v < kHintFactor * median) continue;
      hints.push_back("hint: " + w.task + " is a straggler: " + Fmt("%.1f", *v) + " ms per step, " +
                      Fmt("%.1fx", *v / median) + " the median " + Fmt("%.1f", median) +
                      " ms (a slow or busy host?)");
    }
  }

  // Network- or ps-bound.
  double wire = 0, total = 0;
  for (const auto& w : workers) {
    const double pp = w.pull_s + w.push_s;
    wire += pp;
    total += pp + w.data_s + w.compute_s;
  }
  if (total > 0 && wire / total > 0.5 && !answered.empty()) {
    const proto::PsLoad* deepest = answered.front();
    for (const proto::PsLoad* p : answered) {
      if (p->max_queue_depth > deepest->max_queue_depth) deepest = p;
    }
    const double depth = static_cast<double>(deepest->max_queue_depth);
    const std::string share = Fmt("%.0f%%", 100 * wire / total);
    if (depth <= 1) {
      hints.push_back("hint: network-bound: workers spend " + share +
                      " of their step time pulling and pushing while the ps queues stay near empty "
                      "(max depth <= 1): the network, not the ps, limits training");
    } else {
      hints.push_back(
          "hint: ps-bound: workers spend " + share +
          " of their step time pulling and pushing and " + deepest->task + " queued up to " +
          Fmt("%.0f", depth) +
          " requests: the ps tasks are the bottleneck (add ps tasks or partition the busiest variables)");
    }
  }
  return hints;
}

}  // namespace ps::obs

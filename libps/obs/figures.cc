#include "libps/obs/figures.h"

#include <algorithm>
#include <cstdio>

#include "libps/core/text.h"

namespace ps::obs {

namespace {

double Num(const Json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  return it->get<double>();
}

uint64_t Count(const Json& j, const char* key) {
  double v = Num(j, key);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

const Json& Child(const Json& j, const char* key) {
  static const Json kEmpty = Json::object();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : kEmpty;
}

std::optional<double> OptNum(const Json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string Rate(double bytes_per_s) {
  return HumanBytes(static_cast<uint64_t>(std::max(0.0, bytes_per_s) + 0.5)) + "/s";
}

std::string Name(const Json& entry) {
  auto it = entry.find("task");
  return it != entry.end() && it->is_string() ? it->get<std::string>() : "?";
}

bool Answered(const Json& ps) {
  if (!ps.is_object()) return false;
  auto it = ps.find("state");
  return it == ps.end() || (it->is_string() && it->get<std::string>() == "ok");
}

const Json& Array(const Json& status, const char* key) {
  static const Json kEmpty = Json::array();
  if (!status.is_object()) return kEmpty;
  auto it = status.find(key);
  return it != status.end() && it->is_array() ? *it : kEmpty;
}

}  // namespace

PsCounters ParsePsCounters(const Json& status) {
  const Json& server = Child(status, "server");
  const Json& store = Child(status, "store");
  PsCounters c;
  c.uptime_sec = Num(status, "uptime_sec");
  c.requests = Count(server, "requests");
  c.bytes_in = Count(server, "bytes_received");
  c.bytes_out = Count(server, "bytes_sent");
  c.rows = Count(store, "rows_pulled") + Count(store, "rows_pushed");
  c.queue_depth = Count(server, "queue_depth");
  c.max_queue_depth = Count(server, "max_queue_depth");
  c.bytes_held = Count(status, "bytes_held");
  c.shards = static_cast<int64_t>(Num(status, "shards"));
  return c;
}

Json PsLoadEntry(const std::string& task, const std::string& address, const PsCounters& cur,
                 const std::optional<PsCounters>& prev) {
  PsCounters base;  // zeros: since the ps started
  if (prev && prev->uptime_sec <= cur.uptime_sec && prev->requests <= cur.requests &&
      prev->bytes_in <= cur.bytes_in && prev->bytes_out <= cur.bytes_out && prev->rows <= cur.rows) {
    base = *prev;
  }
  const double window = cur.uptime_sec - base.uptime_sec;
  auto rate = [&](uint64_t now, uint64_t then) {
    return window > 0 ? static_cast<double>(now - then) / window : 0.0;
  };
  return Json{{"task", task},
              {"address", address},
              {"state", "ok"},
              {"requests", cur.requests},
              {"bytes_in", cur.bytes_in},
              {"bytes_out", cur.bytes_out},
              {"requests_per_s", rate(cur.requests, base.requests)},
              {"bytes_in_per_s", rate(cur.bytes_in, base.bytes_in)},
              {"bytes_out_per_s", rate(cur.bytes_out, base.bytes_out)},
              {"rows_per_s", rate(cur.rows, base.rows)},
              {"queue_depth", cur.queue_depth},
              {"max_queue_depth", cur.max_queue_depth},
              {"bytes_held", cur.bytes_held},
              {"shards", cur.shards},
              {"window_sec", window}};
}

Json PsNoAnswerEntry(const std::string& task, const std::string& address, const std::string& error) {
  return Json{{"task", task}, {"address", address}, {"state", "no answer"}, {"error", error}};
}

Json WorkerLoadEntry(const WorkerSnapshot& cur, const WorkerSnapshot* prev, double window_sec,
                     int64_t batch_size) {
  WorkerSnapshot base;
  if (prev != nullptr && prev->steps_done <= cur.steps_done) base = *prev;
  const int64_t steps = cur.steps_done - base.steps_done;
  const double data = std::max(0.0, cur.data_seconds - base.data_seconds);
  const double pull = std::max(0.0, cur.pull_seconds - base.pull_seconds);
  const double compute = std::max(0.0, cur.compute_seconds - base.compute_seconds);
  const double push = std::max(0.0, cur.push_seconds - base.push_seconds);
  const double total = data + pull + compute + push;
  Json j = {{"task", cur.name},
            {"state", cur.alive ? (cur.in_flight > 0 ? "running" : "idle") : "lost"},
            {"steps", cur.steps_done},
            {"examples_per_s", window_sec > 0 ? static_cast<double>(steps * batch_size) / window_sec : 0.0}};
  if (steps > 0 && total > 0) {
    j["step_ms"] = 1000 * total / static_cast<double>(steps);
  } else {
    j["step_ms"] = nullptr;
  }
  j["data_s"] = data;
  j["pull_s"] = pull;
  j["compute_s"] = compute;
  j["push_s"] = push;
  const char* fracs[] = {"data_frac", "pull_frac", "compute_frac", "push_frac"};
  const double parts[] = {data, pull, compute, push};
  for (int i = 0; i < 4; ++i) {
    if (total > 0) {
      j[fracs[i]] = parts[i] / total;
    } else {
      j[fracs[i]] = nullptr;
    }
  }
  return j;
}

std::vector<std::string> LoadHints(const Json& status) {
  std::vector<std::string> hints;
  const Json& ps = Array(status, "ps");
  const Json& workers = Array(status, "workers");

  // Hot ps.
  std::vector<const Json*> answered;
  for (const auto& p : ps) {
    if (Answered(p)) answered.push_back(&p);
  }
  if (answered.size() >= 2) {
    double req_mean = 0, bytes_mean = 0;
    for (const Json* p : answered) {
      req_mean += Num(*p, "requests_per_s");
      bytes_mean += Num(*p, "bytes_in_per_s") + Num(*p, "bytes_out_per_s");
    }
    req_mean /= static_cast<double>(answered.size());
    bytes_mean /= static_cast<double>(answered.size());
    if (req_mean >= kHintMinRequestsPerSec) {
      for (const Json* p : answered) {
        const double req = Num(*p, "requests_per_s");
        const double bytes = Num(*p, "bytes_in_per_s") + Num(*p, "bytes_out_per_s");
        const double req_x = req / req_mean;
        const double bytes_x = bytes_mean > 0 ? bytes / bytes_mean : 0;
        if (std::max(req_x, bytes_x) < kHintFactor) continue;
        std::string what = req_x >= bytes_x
                               ? Fmt("%.1fx", req_x) + " the mean requests/s (" + Fmt("%.0f", req) + " vs " +
                                     Fmt("%.0f", req_mean) + ")"
                               : Fmt("%.1fx", bytes_x) + " the mean bytes/s (" + Rate(bytes) + " vs " +
                                     Rate(bytes_mean) + ")";
        hints.push_back("hint: " + Name(*p) + " carries more load than the other ps tasks: " + what +
                        "; a hot-spot variable? partition big variables or spread them over the ps tasks");
      }
    }
  }

  // Stragglers.
  std::vector<double> step_ms;
  for (const auto& w : workers) {
    if (auto v = OptNum(w, "step_ms"); v && *v > 0) step_ms.push_back(*v);
  }
  if (step_ms.size() >= 2) {
    std::vector<double> sorted = step_ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    for (const auto& w : workers) {
      auto v = OptNum(w, "step_ms");
      if (!v || *v <= 0 || *v < kHintFactor * median) continue;
      hints.push_back("hint: " + Name(w) + " is a straggler: " + Fmt("%.1f", *v) + " ms per step, " +
                      Fmt("%.1fx", *v / median) + " the median " + Fmt("%.1f", median) +
                      " ms (a slow or busy host?)");
    }
  }

  // Network- or ps-bound.
  double wire = 0, total = 0;
  for (const auto& w : workers) {
    const double pp = Num(w, "pull_s") + Num(w, "push_s");
    wire += pp;
    total += pp + Num(w, "data_s") + Num(w, "compute_s");
  }
  if (total > 0 && wire / total > 0.5 && !answered.empty()) {
    const Json* deepest = answered.front();
    for (const Json* p : answered) {
      if (Num(*p, "max_queue_depth") > Num(*deepest, "max_queue_depth")) deepest = p;
    }
    const double depth = Num(*deepest, "max_queue_depth");
    const std::string share = Fmt("%.0f%%", 100 * wire / total);
    if (depth <= 1) {
      hints.push_back("hint: network-bound: workers spend " + share +
                      " of their step time pulling and pushing while the ps queues stay near empty "
                      "(max depth <= 1): the network, not the ps, limits training");
    } else {
      hints.push_back("hint: ps-bound: workers spend " + share + " of their step time pulling and pushing and " +
                      Name(*deepest) + " queued up to " + Fmt("%.0f", depth) +
                      " requests: the ps tasks are the bottleneck (add ps tasks or partition the busiest variables)");
    }
  }
  return hints;
}

}  // namespace ps::obs

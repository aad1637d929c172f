#include "launcher/status_text.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "libps/core/text.h"
#include "libps/obs/figures.h"

namespace ps::launcher {

namespace {

std::string Cell(const std::optional<double>& v, const char* format, double scale = 1) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, *v * scale);
  return buf;
}

std::string WorkersTable(const std::vector<proto::WorkerLoad>& workers) {
  std::vector<std::vector<std::string>> rows = {
      {"worker", "state", "steps", "ex/s", "step_ms", "data", "pull", "compute", "push"}};
  for (const auto& w : workers) {
    rows.push_back({w.task, w.state, std::to_string(w.steps), Cell(w.examples_per_s, "%.0f"),
                    Cell(w.step_ms, "%.1f"), Cell(w.data_frac, "%.0f%%", 100),
                    Cell(w.pull_frac, "%.0f%%", 100), Cell(w.compute_frac, "%.0f%%", 100),
                    Cell(w.push_frac, "%.0f%%", 100)});
  }
  return TableText(rows);
}

std::string PsTable(const std::vector<proto::PsLoad>& ps) {
  std::vector<std::vector<std::string>> rows = {{"ps", "address", "state", "req/s", "in/s", "out/s",
                                                 "rows/s", "queue", "max_queue", "held", "shards"}};
  std::string errors;
  for (const auto& p : ps) {
    if (!p.answered()) {
      rows.push_back({p.task, p.address, p.state, "-", "-", "-", "-", "-", "-", "-", "-"});
      errors += p.task + ": " + p.error + "\n";
      continue;
    }
    auto rate = [](double bytes_per_s) {
      return HumanBytes(static_cast<uint64_t>(std::llround(bytes_per_s))) + "/s";
    };
    rows.push_back({p.task, p.address, p.state, Cell(p.requests_per_s, "%.0f"),
                    rate(p.bytes_in_per_s), rate(p.bytes_out_per_s), Cell(p.rows_per_s, "%.0f"),
                    std::to_string(p.queue_depth), std::to_string(p.max_queue_depth),
                    HumanBytes(p.bytes_held), std::to_string(p.shards)});
  }
  // Lazy tables' row life cycle (admission and eviction), for the ps that hold any.
  std::vector<std::vector<std::string>> lazy = {
      {"ps", "lazy_rows", "admitted", "not_admitted", "evicted_ttl", "evicted_max_rows"}};
  for (const auto& p : ps) {
    if (!p.answered() || !p.rows) continue;
    lazy.push_back({p.task, std::to_string(p.rows->live_rows), std::to_string(p.rows->admitted),
                    std::to_string(p.rows->not_admitted), std::to_string(p.rows->evicted_ttl),
                    std::to_string(p.rows->evicted_max_rows)});
  }
  std::string out = TableText(rows) + errors;
  // Appended, not "\n" + TableText(lazy): GCC 12 warns (-Wrestrict, a false positive fixed
  // in GCC 13) on inserting a literal before a temporary string.
  if (lazy.size() > 1) out.append("\n").append(TableText(lazy));
  return out;
}

}  // namespace

std::string FormatStatus(const proto::ChiefStatus& s) {
  std::vector<std::pair<std::string, std::string>> head = {
      {"state:", s.state},
      {"global_step:", std::to_string(s.global_step)},
      {"total_steps:", std::to_string(s.total_steps)},
      {"examples_per_sec:", Fixed(s.examples_per_sec, 0)},
      {"elapsed:", FormatDuration(s.elapsed_sec)}};
  // The fraction done, and the epoch, after total_steps.
  auto at = head.begin() + 3;
  if (s.total_steps > 0) {
    at = head.insert(at, {"done:", Fixed(100.0 * static_cast<double>(s.global_step) /
                                             static_cast<double>(s.total_steps),
                                         1) +
                                       " %"}) +
         1;
  } else if (s.epoch >= 0 && s.epochs > 0) {  // epochs of streamed data: steps not known
    at = head.insert(at, {"done:", Fixed(100.0 * s.epoch / static_cast<double>(s.epochs), 1) +
                                       " % (by epochs)"}) +
         1;
  }
  if (s.files_done >= 0) {
    at = head.insert(at, {"files:", std::to_string(s.files_done) + " trained, " +
                                        std::to_string(s.files_waiting) + " waiting"}) +
         1;
    at = head.insert(at, {"data_lag:", s.data_lag_sec >= 0 ? FormatDuration(s.data_lag_sec)
                                                           : std::string("-")}) +
         1;
  }
  if (s.epoch >= 0) {
    head.insert(at, {"epoch:",
                     Fixed(s.epoch, 2) + (s.epochs > 0 ? " of " + std::to_string(s.epochs) : "")});
  }
  // The update mode(s) as the ps tasks apply them (every ps has the job's): e.g. "sync",
  // or a hybrid's "dense sync, sparse async".
  for (const auto& p : s.ps) {
    if (!p.answered() || !p.update) continue;
    head.emplace_back("update:", p.update->mode);
    break;
  }
  if (!s.stop_reason.empty()) head.emplace_back("stop_reason:", s.stop_reason);
  std::string out;
  for (const auto& [key, value] : head) {
    out += key;
    out += ' ';
    out += value;
    out += '\n';
  }
  if (!s.tasks.empty()) {
    std::vector<std::vector<std::string>> rows = {{"task", "state", "last_error"}};
    bool errors = false;
    for (const auto& t : s.tasks) {
      rows.push_back({t.task, t.state, t.last_error.empty() ? "-" : t.last_error});
      errors = errors || !t.last_error.empty();
    }
    if (!errors) {
      for (auto& row : rows) row.pop_back();
    }
    out += "\n";
    out += TableText(rows);
  }
  if (!s.workers.empty()) {
    out += "\n";
    out += WorkersTable(s.workers);
  }
  if (!s.ps.empty()) {
    out += "\n";
    out += PsTable(s.ps);
  }
  std::string hints;
  for (const auto& h : obs::LoadHints(s.workers, s.ps)) hints += h + "\n";
  if (!hints.empty()) {
    out += "\n";
    out += hints;
  }
  return out;
}

std::string WatchScreen(const proto::ChiefStatus& s, const std::string& chief, double every_sec,
                        const std::string& time) {
  return "\x1b[H\x1b[2J\x1b[1mpstrain status\x1b[0m  " + chief + "  every " + Fixed(every_sec, 1) +
         " s  " + time + "  (Ctrl-C quits; the job is not affected)\n\n" + FormatStatus(s);
}

std::string WatchLines(const proto::ChiefStatus& s, const std::string& time) {
  std::string line = time + " state " + s.state + "  step " + std::to_string(s.global_step) + "/" +
                     std::to_string(s.total_steps) +
                     (s.epoch >= 0 ? "  epoch " + Fixed(s.epoch, 2) : "") + "  ex/s " +
                     Fixed(s.examples_per_sec, 0);
  for (const auto& w : s.workers) {
    line += "  " + w.task + " ";
    if (w.step_ms) {
      line += Fixed(*w.step_ms, 1) + " ms/step (data " + Cell(w.data_frac, "%.0f%%", 100) +
              " pull " + Cell(w.pull_frac, "%.0f%%", 100) + " compute " +
              Cell(w.compute_frac, "%.0f%%", 100) + " push " + Cell(w.push_frac, "%.0f%%", 100) +
              ")";
    } else {
      line += w.state;
    }
  }
  for (const auto& p : s.ps) {
    line += "  " + p.task + " ";
    if (!p.answered()) {
      line += p.state;
      continue;
    }
    line += Fixed(p.requests_per_s, 0) + " req/s " +
            HumanBytes(static_cast<uint64_t>(std::llround(p.bytes_in_per_s + p.bytes_out_per_s))) +
            "/s q" + std::to_string(p.max_queue_depth);
  }
  line += "\n";
  for (const auto& h : obs::LoadHints(s.workers, s.ps)) line += time + " " + h + "\n";
  return line;
}

}  // namespace ps::launcher

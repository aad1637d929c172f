#include "launcher/status_text.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/text.h"
#include "libps/obs/figures.h"

namespace ps::launcher {

namespace {

std::string ScalarText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A cell of the workers/ps tables: "-" unless `key` holds a number.
std::string NumCell(const Json& entry, const char* key, const char* format, double scale = 1) {
  auto it = entry.find(key);
  if (it == entry.end() || !it->is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, it->get<double>() * scale);
  return buf;
}

std::string BytesCell(const Json& entry, const char* key, const char* suffix = "") {
  auto it = entry.find(key);
  if (it == entry.end() || !it->is_number() || it->get<double>() < 0) return "-";
  return HumanBytes(static_cast<uint64_t>(it->get<double>() + 0.5)) + suffix;
}

std::string TextCell(const Json& entry, const char* key) {
  auto it = entry.find(key);
  return it == entry.end() ? "-" : ScalarText(*it);
}

std::string WorkersTable(const Json& workers) {
  std::vector<std::vector<std::string>> rows = {
      {"worker", "state", "steps", "ex/s", "step_ms", "data", "pull", "compute", "push"}};
  for (const auto& w : workers) {
    if (!w.is_object()) continue;
    rows.push_back({TextCell(w, "task"), TextCell(w, "state"), TextCell(w, "steps"),
                    NumCell(w, "examples_per_s", "%.0f"), NumCell(w, "step_ms", "%.1f"),
                    NumCell(w, "data_frac", "%.0f%%", 100), NumCell(w, "pull_frac", "%.0f%%", 100),
                    NumCell(w, "compute_frac", "%.0f%%", 100), NumCell(w, "push_frac", "%.0f%%", 100)});
  }
  return TableText(rows);
}

std::string PsTable(const Json& ps) {
  std::vector<std::vector<std::string>> rows = {{"ps", "address", "state", "req/s", "in/s", "out/s", "rows/s",
                                                 "queue", "max_queue", "held", "shards"}};
  std::string errors;
  for (const auto& p : ps) {
    if (!p.is_object()) continue;
    rows.push_back({TextCell(p, "task"), TextCell(p, "address"), TextCell(p, "state"),
                    NumCell(p, "requests_per_s", "%.0f"), BytesCell(p, "bytes_in_per_s", "/s"),
                    BytesCell(p, "bytes_out_per_s", "/s"), NumCell(p, "rows_per_s", "%.0f"),
                    TextCell(p, "queue_depth"), TextCell(p, "max_queue_depth"), BytesCell(p, "bytes_held"),
                    TextCell(p, "shards")});
    if (p.contains("error")) errors += TextCell(p, "task") + ": " + TextCell(p, "error") + "\n";
  }
  return TableText(rows) + errors;
}

}  // namespace

Result<std::string> FormatStatus(std::string_view json_text) {
  PS_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, "status reply"));
  if (!root.is_object()) return InvalidArgument("status reply: not a JSON object");
  std::string out;
  const Json* tasks = nullptr;
  std::string load;  // the workers and ps tables, then the hints
  for (const auto& [key, value] : root.items()) {
    if (key == "tasks" && value.is_array()) {
      tasks = &value;
      continue;
    }
    if ((key == "workers" || key == "ps") && value.is_array()) {
      // append, not "\n" + ...: GCC 12 warns falsely under -Wrestrict.
      if (!value.empty()) load.append("\n").append(key == "workers" ? WorkersTable(value) : PsTable(value));
      continue;
    }
    out += key + ": " + ScalarText(value) + "\n";
  }
  std::string hints;
  for (const auto& h : obs::LoadHints(root)) hints += h + "\n";
  if (!hints.empty()) load += "\n" + hints;
  if (tasks == nullptr) return out + load;
  if (tasks->empty()) return out + "tasks: none\n" + load;
  std::vector<std::string> columns;
  for (const auto& t : *tasks) {
    if (!t.is_object()) continue;
    for (const auto& [key, value] : t.items()) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back(columns);
  std::string odd;
  size_t i = 0;
  for (const auto& t : *tasks) {
    if (!t.is_object()) {
      odd += "tasks[" + std::to_string(i) + "]: " + ScalarText(t) + "\n";
    } else {
      std::vector<std::string> row;
      for (const auto& c : columns) row.push_back(t.contains(c) ? ScalarText(t[c]) : "-");
      rows.push_back(std::move(row));
    }
    ++i;
  }
  out += "\n";
  if (rows.size() > 1) out += TableText(rows);
  return out + odd + load;
}

}  // namespace ps::launcher

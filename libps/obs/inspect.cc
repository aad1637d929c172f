#include "libps/obs/inspect.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_file.h"
#include "libps/cluster/shard_layout.h"
#include "libps/core/json.h"
#include "libps/core/text.h"
#include "libps/obs/metrics.h"
#include "libps/obs/status.h"

namespace ps::obs {

namespace fs = std::filesystem;

namespace {

std::string UtcTime(double unix_time) {
  auto t = static_cast<std::time_t>(std::floor(unix_time));
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "-";
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

uint64_t TotalBytes(const ckpt::Manifest& m) {
  uint64_t total = 0;
  for (const auto& s : m.shards) total += s.bytes;
  return total;
}

std::string ScalarStep(const Json& step) { return step.is_number() ? step.dump() : "?"; }

// The last progress line of train_metrics.jsonl with a "ps" array (figures.h), if any.
// An unreadable file counts as one without such a line.
std::optional<Json> LastLoadLine(const std::string& model_dir) {
  std::optional<Json> last;
  LineStats skipped;
  (void)ForEachJsonLine((fs::path(model_dir) / kTrainMetricsFile).string(), &skipped,
                        [&](const Json& j, int) {
                          auto ps = j.find("ps");
                          if (ps != j.end() && ps->is_array() && j.contains("step")) last = j;
                        });
  return last;
}

}  // namespace

Result<InspectReport> InspectModelDir(const std::string& model_dir, const InspectOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) return NotFound(model_dir + ": no such model directory");
  PS_ASSIGN_OR_RETURN(std::vector<ckpt::CheckpointInfo> list, ckpt::ListCheckpoints(model_dir));

  InspectReport report;
  std::ostringstream o;
  o << "model dir: " << model_dir << "\n";
  auto pointer = ckpt::ReadCheckpointPointer(model_dir);
  if (pointer.ok()) {
    o << "pointer:   " << ckpt::CheckpointDirName(*pointer) << "\n";
  } else {
    o << "pointer:   " << pointer.status().message() << "\n";
  }
  // Damaged checkpoints (unreadable MANIFEST, newest failing its footers) are not in the
  // listing; FindRestorable names them.
  std::vector<std::string> warnings;
  auto restorable = ckpt::FindRestorable(model_dir, &warnings, ckpt::Verify::kSizes);
  if (!restorable.ok()) warnings.push_back(restorable.status().message());
  if (list.empty()) {
    std::string msg = model_dir + ": no committed checkpoint";
    for (const auto& w : warnings) msg += "; " + w;
    return NotFound(msg);
  }

  o << list.size() << (list.size() == 1 ? " committed checkpoint:\n" : " committed checkpoints:\n");
  // "deltas": the committed deltas restore would apply on top (ckpt-<step>/delta-<s>),
  // their count, newest step and size; a delta that breaks the chain is a warning.
  std::vector<std::vector<std::string>> rows = {
      {"step", "time (UTC)", "size", "ps", "final", "deltas"}};
  for (const auto& c : list) {
    ckpt::CheckpointInfo chain = c;
    PS_RETURN_IF_ERROR(ckpt::LoadDeltaChain(&chain, ckpt::Verify::kFooters, &warnings));
    std::string deltas = "-";
    if (!chain.deltas.empty()) {
      uint64_t bytes = 0;
      for (const auto& d : chain.deltas) bytes += TotalBytes(d.manifest);
      deltas = std::to_string(chain.deltas.size()) + " to step " +
               std::to_string(chain.restored_step()) + ", " + HumanBytes(bytes);
    }
    rows.push_back({std::to_string(c.global_step), UtcTime(c.manifest.unix_time),
                    HumanBytes(TotalBytes(c.manifest)), std::to_string(c.manifest.num_ps),
                    c.manifest.final ? "yes" : "no", deltas});
  }
  o << TableText(rows, "  ");
  if (!warnings.empty()) {
    o << "warnings:\n";
    for (const auto& w : warnings) o << "  " << w << "\n";
  }

  const ckpt::CheckpointInfo* chosen = &list.back();
  if (options.step) {
    auto it = std::find_if(list.begin(), list.end(),
                           [&](const auto& c) { return c.global_step == *options.step; });
    if (it == list.end()) {
      std::string have;
      for (const auto& c : list) have += (have.empty() ? "" : ", ") + std::to_string(c.global_step);
      return NotFound(model_dir + ": no committed checkpoint at step " +
                      std::to_string(*options.step) + " (have " + have + ")");
    }
    chosen = &*it;
  }
  const ckpt::Manifest& m = chosen->manifest;
  o << "\ncheckpoint " << ckpt::CheckpointDirName(chosen->global_step) << ": step "
    << chosen->global_step << ", " << UtcTime(m.unix_time) << " UTC, "
    << (m.final ? "final" : "not final") << ", " << m.num_ps
    << (m.num_ps == 1 ? " ps task, " : " ps tasks, ") << HumanBytes(TotalBytes(m)) << "\n";
  Status files = ckpt::VerifyCheckpoint(*chosen, ckpt::Verify::kFooters);
  if (files.ok()) {
    o << "shard files: ok (sizes, headers and footers match the MANIFEST)\n";
  } else {
    o << "shard files: DAMAGED: " << files.message() << "\n";
    report.healthy = false;
  }

  struct Row {
    ckpt::RecordSummary rec;
    int ps = 0;
  };
  std::vector<Row> records;
  for (const auto& shard : m.shards) {
    std::string path = (fs::path(chosen->dir) / shard.name).string();
    auto summary = ckpt::Inspect(path, options.verify);
    if (!summary.ok()) {
      o << shard.name << ": DAMAGED: " << summary.status().message() << "\n";
      report.healthy = false;
      continue;
    }
    for (auto& r : summary->records) records.push_back(Row{std::move(r), summary->ps_index});
  }
  std::stable_sort(records.begin(), records.end(), [](const Row& a, const Row& b) {
    return std::tie(a.rec.meta.layout.var, a.rec.meta.layout.shard) <
           std::tie(b.rec.meta.layout.var, b.rec.meta.layout.shard);
  });

  std::vector<std::vector<std::string>> vrows = {
      {"variable", "part", "rows", "shape", "ps", "slots", "bytes", "data"}};
  std::map<std::string, int> vars;
  std::map<int, uint64_t> ps_data;  // data bytes per ps
  uint64_t data_bytes = 0;
  int failed = 0;
  for (const auto& [rec, ps] : records) {
    const auto& meta = rec.meta;
    const cluster::ShardLayout& l = meta.layout;
    ++vars[l.var];
    data_bytes += rec.data_bytes;
    ps_data[ps] += rec.data_bytes;
    std::string slots;
    for (const auto& s : meta.slot_names) slots += (slots.empty() ? "" : ",") + s;
    std::string rows_text = l.num_shards > 1 ? std::to_string(l.row_begin) + "-" +
                                                   std::to_string(l.row_begin + l.rows - 1)
                                             : "all";
    if (l.lazy) rows_text += " (lazy: " + std::to_string(meta.stored_rows) + " created)";
    std::string data = "unchecked";
    if (!rec.data_error.empty()) {
      data = "CORRUPT: " + ckpt::ShardFileName(ps) + ": " + rec.data_error;
      ++failed;
    } else if (rec.data_checked) {
      data = "ok";
    }
    vrows.push_back({l.var, std::to_string(l.shard) + "/" + std::to_string(l.num_shards), rows_text,
                     cluster::ShapeString(l.full_shape, ","), std::to_string(ps),
                     slots.empty() ? "-" : slots, HumanBytes(rec.data_bytes), data});
  }
  o << TableText(vrows, "  ");
  o << vars.size() << (vars.size() == 1 ? " variable, " : " variables, ") << records.size()
    << (records.size() == 1 ? " record, " : " records, ") << HumanBytes(data_bytes) << " of data; ";
  if (!options.verify) {
    o << "data checksums not verified (use --verify)\n";
  } else if (failed == 0) {
    o << "data checksums: all ok\n";
  } else {
    o << "data checksums: " << failed << (failed == 1 ? " record" : " records") << " CORRUPT\n";
    report.healthy = false;
  }

  // Per ps: what it holds in this checkpoint, and its load at the last metrics line.
  const std::optional<Json> load = LastLoadLine(model_dir);
  const proto::ChiefStatus load_status = load ? ChiefStatusFromJson(*load) : proto::ChiefStatus{};
  std::vector<std::vector<std::string>> prows = {{"ps", "file", "size", "data"}};
  if (load) {
    for (const char* c : {"requests", "req/s", "in/s", "out/s"}) prows[0].push_back(c);
  }
  for (int i = 0; i < static_cast<int>(m.shards.size()); ++i) {
    std::vector<std::string> row = {std::to_string(i), m.shards[i].name,
                                    HumanBytes(m.shards[i].bytes),
                                    ps_data.contains(i) ? HumanBytes(ps_data[i]) : "-"};
    if (load) {
      const std::string task = "ps:" + std::to_string(i);
      const proto::PsLoad* entry = nullptr;
      for (const auto& e : load_status.ps) {
        if (e.task == task && e.answered()) entry = &e;
      }
      if (entry == nullptr) {
        row.insert(row.end(), {"-", "-", "-", "-"});
      } else {
        row.push_back(std::to_string(entry->requests));
        row.push_back(Fixed(entry->requests_per_s, 0));
        row.push_back(HumanBytes(static_cast<uint64_t>(std::llround(entry->bytes_in_per_s))) +
                      "/s");
        row.push_back(HumanBytes(static_cast<uint64_t>(std::llround(entry->bytes_out_per_s))) +
                      "/s");
      }
    }
    prows.push_back(std::move(row));
  }
  o << "\nps tasks (size: shard file, data: values and slots";
  if (load) o << "; load at step " << ScalarStep((*load)["step"]) << " of " << kTrainMetricsFile;
  o << "):\n" << TableText(prows, "  ");
  report.text = o.str();
  return report;
}

}  // namespace ps::obs

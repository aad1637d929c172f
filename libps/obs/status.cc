#include "libps/obs/status.h"

#include <optional>
#include <string>

namespace ps::obs {

namespace {

Json Opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

template <typename T>
T Get(const Json& j, const char* key, T fallback = T{}) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else {
    return it->is_number() ? it->template get<T>() : fallback;
  }
}

std::optional<double> GetOpt(const Json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

const Json& Array(const Json& j, const char* key) {
  static const Json kEmpty = Json::array();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

Json ToJson(const proto::PsUpdateFigures& u) {
  return Json{{"mode", u.mode},
              {"stale_dropped", u.stale_dropped},
              {"waited_pulls", u.waited_pulls},
              {"max_lead", u.max_lead},
              {"min_version", u.min_version},
              {"max_version", u.max_version},
              {"applied_on_arrival", u.applied_on_arrival}};
}

proto::PsUpdateFigures UpdateFromJson(const Json& j) {
  return proto::PsUpdateFigures{.mode = Get<std::string>(j, "mode"),
                                .stale_dropped = Get<int64_t>(j, "stale_dropped"),
                                .waited_pulls = Get<int64_t>(j, "waited_pulls"),
                                .max_lead = Get<int64_t>(j, "max_lead"),
                                .min_version = Get<int64_t>(j, "min_version"),
                                .max_version = Get<int64_t>(j, "max_version"),
                                .applied_on_arrival = Get<int64_t>(j, "applied_on_arrival")};
}

Json ToJson(const proto::PsRowFigures& r) {
  return Json{{"lazy_shards", r.lazy_shards}, {"live_rows", r.live_rows},
              {"admitted", r.admitted},       {"not_admitted", r.not_admitted},
              {"evicted_ttl", r.evicted_ttl}, {"evicted_max_rows", r.evicted_max_rows}};
}

proto::PsRowFigures RowsFromJson(const Json& j) {
  return proto::PsRowFigures{.lazy_shards = Get<int64_t>(j, "lazy_shards"),
                             .live_rows = Get<int64_t>(j, "live_rows"),
                             .admitted = Get<uint64_t>(j, "admitted"),
                             .not_admitted = Get<uint64_t>(j, "not_admitted"),
                             .evicted_ttl = Get<uint64_t>(j, "evicted_ttl"),
                             .evicted_max_rows = Get<uint64_t>(j, "evicted_max_rows")};
}

}  // namespace

Json ToJson(const proto::WorkerLoad& w) {
  return Json{{"task", w.task},
              {"state", w.state},
              {"steps", w.steps},
              {"examples_per_s", w.examples_per_s},
              {"step_ms", Opt(w.step_ms)},
              {"data_s", w.data_s},
              {"pull_s", w.pull_s},
              {"compute_s", w.compute_s},
              {"push_s", w.push_s},
              {"data_frac", Opt(w.data_frac)},
              {"pull_frac", Opt(w.pull_frac)},
              {"compute_frac", Opt(w.compute_frac)},
              {"push_frac", Opt(w.push_frac)}};
}

Json ToJson(const proto::PsLoad& p) {
  if (!p.answered())
    return Json{{"task", p.task}, {"address", p.address}, {"state", p.state}, {"error", p.error}};
  Json j = {{"task", p.task},
            {"address", p.address},
            {"state", p.state},
            {"requests", p.requests},
            {"bytes_in", p.bytes_in},
            {"bytes_out", p.bytes_out},
            {"requests_per_s", p.requests_per_s},
            {"bytes_in_per_s", p.bytes_in_per_s},
            {"bytes_out_per_s", p.bytes_out_per_s},
            {"rows_per_s", p.rows_per_s},
            {"queue_depth", p.queue_depth},
            {"max_queue_depth", p.max_queue_depth},
            {"bytes_held", p.bytes_held},
            {"shards", p.shards},
            {"window_sec", p.window_sec}};
  if (p.update) j["update"] = ToJson(*p.update);
  if (p.rows) j["rows"] = ToJson(*p.rows);
  return j;
}

Json LoadJson(const proto::ChiefStatus& s) {
  Json workers = Json::array();
  for (const auto& w : s.workers) workers.push_back(ToJson(w));
  Json ps = Json::array();
  for (const auto& p : s.ps) ps.push_back(ToJson(p));
  return Json{{"load_window_sec", s.load_window_sec},
              {"workers", std::move(workers)},
              {"ps", std::move(ps)}};
}

Json ToJson(const proto::ChiefStatus& s) {
  Json j = {{"state", s.state},
            {"global_step", s.global_step},
            {"total_steps", s.total_steps},
            {"examples_per_sec", s.examples_per_sec},
            {"elapsed_sec", s.elapsed_sec}};
  if (s.epoch >= 0) j["epoch"] = s.epoch;
  if (s.epochs > 0) j["epochs"] = s.epochs;
  if (s.files_done >= 0) {
    j["files_done"] = s.files_done;
    j["files_waiting"] = s.files_waiting;
    if (s.data_lag_sec >= 0) j["data_lag_sec"] = s.data_lag_sec;
  }
  if (!s.stop_reason.empty()) j["stop_reason"] = s.stop_reason;
  Json tasks = Json::array();
  for (const auto& t : s.tasks) {
    Json x = {{"task", t.task}, {"state", t.state}};
    if (!t.last_error.empty()) x["last_error"] = t.last_error;
    tasks.push_back(std::move(x));
  }
  j["tasks"] = std::move(tasks);
  Json load = LoadJson(s);
  j["load_window_sec"] = std::move(load["load_window_sec"]);
  j["workers"] = std::move(load["workers"]);
  j["ps"] = std::move(load["ps"]);
  return j;
}

proto::WorkerLoad WorkerLoadFromJson(const Json& j) {
  return proto::WorkerLoad{.task = Get<std::string>(j, "task", "?"),
                           .state = Get<std::string>(j, "state"),
                           .steps = Get<int64_t>(j, "steps"),
                           .examples_per_s = Get<double>(j, "examples_per_s"),
                           .step_ms = GetOpt(j, "step_ms"),
                           .data_s = Get<double>(j, "data_s"),
                           .pull_s = Get<double>(j, "pull_s"),
                           .compute_s = Get<double>(j, "compute_s"),
                           .push_s = Get<double>(j, "push_s"),
                           .data_frac = GetOpt(j, "data_frac"),
                           .pull_frac = GetOpt(j, "pull_frac"),
                           .compute_frac = GetOpt(j, "compute_frac"),
                           .push_frac = GetOpt(j, "push_frac")};
}

proto::PsLoad PsLoadFromJson(const Json& j) {
  proto::PsLoad p{.task = Get<std::string>(j, "task", "?"),
                  .address = Get<std::string>(j, "address"),
                  .state = Get<std::string>(j, "state", "ok"),
                  .error = Get<std::string>(j, "error"),
                  .requests = Get<uint64_t>(j, "requests"),
                  .bytes_in = Get<uint64_t>(j, "bytes_in"),
                  .bytes_out = Get<uint64_t>(j, "bytes_out"),
                  .requests_per_s = Get<double>(j, "requests_per_s"),
                  .bytes_in_per_s = Get<double>(j, "bytes_in_per_s"),
                  .bytes_out_per_s = Get<double>(j, "bytes_out_per_s"),
                  .rows_per_s = Get<double>(j, "rows_per_s"),
                  .queue_depth = Get<uint64_t>(j, "queue_depth"),
                  .max_queue_depth = Get<uint64_t>(j, "max_queue_depth"),
                  .bytes_held = Get<uint64_t>(j, "bytes_held"),
                  .shards = Get<int64_t>(j, "shards"),
                  .window_sec = Get<double>(j, "window_sec"),
                  .update = std::nullopt,
                  .rows = std::nullopt};
  if (j.is_object() && j.contains("update") && j["update"].is_object())
    p.update = UpdateFromJson(j["update"]);
  if (j.is_object() && j.contains("rows") && j["rows"].is_object())
    p.rows = RowsFromJson(j["rows"]);
  return p;
}

proto::ChiefStatus ChiefStatusFromJson(const Json& j) {
  proto::ChiefStatus s{
      .state = Get<std::string>(j, "state"),
      .global_step = Get<int64_t>(j, "global_step"),
      .total_steps = Get<int64_t>(j, "total_steps"),
      .examples_per_sec = Get<double>(j, "examples_per_sec"),
      .elapsed_sec = Get<double>(j, "elapsed_sec"),
      .stop_reason = Get<std::string>(j, "stop_reason"),
      .tasks = {},
      .load_window_sec = Get<double>(j, "load_window_sec"),
      .workers = {},
      .ps = {},
      .epoch = j.contains("epoch") ? Get<double>(j, "epoch") : -1.0,
      .epochs = Get<int64_t>(j, "epochs"),
      .files_done = j.contains("files_done") ? Get<int64_t>(j, "files_done") : -1,
      .files_waiting = Get<int64_t>(j, "files_waiting"),
      .data_lag_sec = j.contains("data_lag_sec") ? Get<double>(j, "data_lag_sec") : -1.0};
  for (const auto& t : Array(j, "tasks")) {
    s.tasks.push_back({.task = Get<std::string>(t, "task", "?"),
                       .state = Get<std::string>(t, "state"),
                       .last_error = Get<std::string>(t, "last_error")});
  }
  for (const auto& w : Array(j, "workers")) s.workers.push_back(WorkerLoadFromJson(w));
  for (const auto& p : Array(j, "ps")) s.ps.push_back(PsLoadFromJson(p));
  return s;
}

Status AddLoadScalars(EventWriter& events, const proto::ChiefStatus& s, int64_t step, double wall) {
  auto add = [&](const std::string& tag, double v) { return events.AddScalar(tag, step, v, wall); };
  for (const auto& w : s.workers) {
    const std::string base = "step_time/" + w.task + "/";
    const std::pair<const char*, const std::optional<double>*> parts[] = {
        {"data", &w.data_frac},
        {"pull", &w.pull_frac},
        {"compute", &w.compute_frac},
        {"push", &w.push_frac},
        {"step_ms", &w.step_ms}};
    for (const auto& [name, value] : parts) {
      if (*value) PS_RETURN_IF_ERROR(add(base + name, **value));
    }
  }
  for (const auto& p : s.ps) {
    if (!p.answered()) continue;
    const std::string base = "ps_load/" + p.task + "/";
    PS_RETURN_IF_ERROR(add(base + "requests_per_s", p.requests_per_s));
    PS_RETURN_IF_ERROR(add(base + "bytes_in_per_s", p.bytes_in_per_s));
    PS_RETURN_IF_ERROR(add(base + "bytes_out_per_s", p.bytes_out_per_s));
    PS_RETURN_IF_ERROR(add(base + "rows_per_s", p.rows_per_s));
    PS_RETURN_IF_ERROR(add(base + "max_queue_depth", static_cast<double>(p.max_queue_depth)));
    if (!p.rows) continue;
    const std::string rows = "ps_rows/" + p.task + "/";
    PS_RETURN_IF_ERROR(add(rows + "live", static_cast<double>(p.rows->live_rows)));
    PS_RETURN_IF_ERROR(add(rows + "admitted", static_cast<double>(p.rows->admitted)));
    PS_RETURN_IF_ERROR(add(rows + "not_admitted", static_cast<double>(p.rows->not_admitted)));
    PS_RETURN_IF_ERROR(add(rows + "evicted_ttl", static_cast<double>(p.rows->evicted_ttl)));
    PS_RETURN_IF_ERROR(
        add(rows + "evicted_max_rows", static_cast<double>(p.rows->evicted_max_rows)));
  }
  return Status::Ok();
}

Status AddEvalScalars(EventWriter& events, int64_t step, double accuracy, double loss, double auc,
                      double wall) {
  PS_RETURN_IF_ERROR(events.AddScalar("accuracy", step, accuracy, wall));
  PS_RETURN_IF_ERROR(events.AddScalar("loss", step, loss, wall));
  if (auc >= 0) PS_RETURN_IF_ERROR(events.AddScalar("auc", step, auc, wall));
  return Status::Ok();
}

Status AddCheckpointScalars(EventWriter& events, int64_t step, double seconds, int64_t bytes,
                            double wall) {
  PS_RETURN_IF_ERROR(events.AddScalar("checkpoint/seconds", step, seconds, wall));
  return events.AddScalar("checkpoint/mib", step, static_cast<double>(bytes) / 1048576.0, wall);
}

}  // namespace ps::obs

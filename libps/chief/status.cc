// What the chief tells people: status for `pstrain status`, load samples, progress lines
// in the log, train_metrics.jsonl and TensorBoard.
#include <cmath>

#include "libps/chief/shell.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/obs/status.h"

namespace ps::chief {

void Chief::Report(const Window& w, int64_t total) {
  double now = std::chrono::duration<double>(Clock::now() - start_).count();
  double window_sec = std::chrono::duration<double>(w.end - w.start).count();
  double eps = window_sec > 0 ? w.examples / window_sec : 0;
  double loss = w.examples > 0 ? w.loss_sum / w.examples : 0;
  double acc = w.examples > 0 ? static_cast<double>(w.correct) / w.examples : 0;
  double sps = window_sec > 0 ? w.steps / window_sec : 0;
  double eta = sps > 0 ? (total - global_step_) / sps : NAN;
  const std::optional<double> epoch_now = EpochNow();
  // job.epochs over streamed data without job.steps: the steps are not known before the
  // data ends; the time left comes from the epochs done.
  // Followed data without job.steps: the job runs until it is stopped.
  const bool steps_known = (!steps_from_data_ && !follow_endless_) || total < job_.steps;
  if (!steps_known) {
    eta = steps_from_data_ && epoch_now && *epoch_now > 0
              ? now * (*job_.epochs - *epoch_now) / *epoch_now
              : NAN;
  }
  const std::optional<FollowFigures> follow = FollowNow();
  {
    std::lock_guard lock(mu_);
    examples_per_sec_ = eps;
  }
  // Appended, not "  epoch " + Fixed(...): GCC 12 warns (-Wrestrict, a false positive fixed
  // in GCC 13) on inserting a literal before a temporary string.
  std::string epoch;
  if (epoch_now) {
    epoch.append("  epoch ").append(Fixed(*epoch_now, 2));
    if (job_.epochs) epoch.append(1, '/').append(std::to_string(*job_.epochs));
  }
  if (follow) {
    epoch.append("  files ").append(std::to_string(follow->files_done)).append(" trained, ");
    epoch.append(std::to_string(follow->files_waiting)).append(" waiting");
    if (follow->lag_sec >= 0) epoch.append("  data lag ").append(FormatDuration(follow->lag_sec));
  }
  std::string of_total;
  if (steps_known) of_total.append(1, '/').append(std::to_string(total));
  PS_LOG(Info) << "step " << global_step_ << of_total << epoch << "  loss " << Fixed(loss, 4)
               << "  acc " << Fixed(acc, 4) << "  " << Fixed(eps, 0) << " ex/s  "
               << (job_.update.StepMode() == ps::server::UpdateMode::kSync
                       ? "stale " + std::to_string(w.stale) + "  "
                       : "")
               << "elapsed " << FormatDuration(now) << "  eta " << FormatDuration(eta);
  Json line = {{"step", global_step_.load()}, {"loss", loss},       {"accuracy", acc},
               {"examples_per_sec", eps},     {"elapsed_sec", now}, {"unix_time", UnixTime()}};
  if (job_.update.StepMode() == ps::server::UpdateMode::kSync) line["stale_steps"] = w.stale;
  if (steps_known) line["total_steps"] = total;
  if (epoch_now) line["epoch"] = *epoch_now;
  if (follow) {
    line["files_done"] = follow->files_done;
    line["files_waiting"] = follow->files_waiting;
    if (follow->lag_sec >= 0) line["data_lag_sec"] = follow->lag_sec;
  }
  // Bad records the workers skipped (data "on_error": "skip"): in this window and so far.
  skipped_records_ += w.skipped_records;
  if (skipped_records_ > 0) {
    line["skipped_records"] = w.skipped_records;
    line["skipped_records_total"] = skipped_records_;
    if (w.skipped_records > 0) {
      PS_LOG(Warning) << w.skipped_records
                      << " bad record(s) skipped since the last progress line (" << skipped_records_
                      << " in all)";
    }
  }
  // The load figures wait for the ps tasks' answers: the line is completed and written
  // off the training thread.
  WaitMetrics();
  pending_metrics_ = std::async(std::launch::async, [this, line]() mutable {
    const proto::ChiefStatus status = CurrentStatus();
    Json load = obs::LoadJson(status);
    for (const char* key : {"load_window_sec", "workers", "ps"}) line[key] = std::move(load[key]);
    if (Clock::now() - last_hint_log_ >= kHintLogInterval) {
      auto hints = obs::LoadHints(status.workers, status.ps);
      for (const auto& hint : hints) PS_LOG(Info) << hint;
      if (!hints.empty()) last_hint_log_ = Clock::now();
    }
    AppendMetrics(line.dump(-1, ' ', false, Json::error_handler_t::replace));
    std::lock_guard lock(events_mu_);
    if (events_) {
      Status st = obs::AddLoadScalars(*events_, status, line["step"].get<int64_t>(),
                                      line["unix_time"].get<double>());
      EventsWritten(st);
    }
  });
  std::lock_guard lock(events_mu_);
  if (events_) {
    const double wall = line["unix_time"].get<double>();
    Status st = events_->AddScalar("loss", global_step_, loss, wall);
    if (st.ok()) st = events_->AddScalar("accuracy", global_step_, acc, wall);
    if (st.ok()) st = events_->AddScalar("examples_per_sec", global_step_, eps, wall);
    if (st.ok() && follow && follow->lag_sec >= 0)
      st = events_->AddScalar("data_lag_seconds", global_step_, follow->lag_sec, wall);
    EventsWritten(st);
  }
}

void Chief::EventsWritten(const Status& st) {
  if (st.ok() && events_failing_) PS_LOG(Info) << "TensorBoard events: writing again";
  if (!st.ok() && !events_failing_)
    PS_LOG(Warning) << "TensorBoard events: " << st.message()
                    << ": scalars are lost until it works again";
  events_failing_ = !st.ok();
}

void Chief::WaitMetrics() {
  if (pending_metrics_.valid()) pending_metrics_.get();
}

void Chief::WriteMetricsLine(const Json& line) {
  WaitMetrics();
  AppendMetrics(line.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void Chief::AppendMetrics(const std::string& line) {
  std::lock_guard lock(metrics_mu_);
  Status st = metrics_.Append(line + "\n");
  if (st.ok() && metrics_failing_) PS_LOG(Info) << metrics_.path() << ": writing again";
  if (!st.ok() && !metrics_failing_)
    PS_LOG(Warning) << st.message() << ": metrics lines are lost until it works again";
  metrics_failing_ = !st.ok();
}

void Chief::RecordEvent(const std::string& kind, const std::string& task,
                        const std::string& detail) {
  Json e = {{"kind", kind}, {"step", global_step_.load()}, {"unix_time", UnixTime()}};
  if (!task.empty()) e["task"] = task;
  if (!detail.empty()) e["detail"] = detail;
  AppendMetrics(Json{{"event", e}}.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void Chief::SampleLoad(proto::ChiefStatus* status) {
  std::lock_guard sample_lock(load_mu_);
  std::vector<std::shared_ptr<net::Client>> ps;
  std::vector<obs::WorkerSnapshot> workers;
  {
    std::lock_guard lock(mu_);
    if (state_ != "starting" && state_ != "connecting") ps = ps_;  // ps_ is complete
    if (coordinator_) workers = coordinator_->Snapshot();
  }
  std::vector<std::future<Result<net::Reply>>> futs;
  futs.reserve(ps.size());
  for (const auto& c : ps) futs.push_back(c->Call(proto::GetStatus{}, {}, {}, kPsStatusTimeout));
  const auto now = Clock::now();
  const LoadSample* base = nullptr;
  for (auto it = load_history_.rbegin(); it != load_history_.rend(); ++it) {
    base = &*it;
    if (now - it->at >= kMinLoadWindow) break;
  }
  LoadSample sample{now, std::vector<std::optional<proto::PsStatus>>(ps.size()), workers};
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::string address =
        ctx_.tf.cluster.address({cluster::TaskType::kPs, static_cast<int>(i)}).ToString();
    auto r = futs[i].get();
    if (!r.ok()) {
      status->ps.push_back(obs::PsNoAnswer(ps[i]->peer_name(), address, r.status().message()));
    } else if (const auto* reply = std::get_if<proto::PsStatusReply>(&r->envelope.body)) {
      std::optional<proto::PsStatus> prev;
      if (base != nullptr && i < base->ps.size()) prev = base->ps[i];
      status->ps.push_back(obs::PsLoadOf(ps[i]->peer_name(), address, reply->status, prev));
      sample.ps[i] = reply->status;
    } else {
      status->ps.push_back(obs::PsNoAnswer(
          ps[i]->peer_name(), address,
          std::string("answered GetStatus with ") + proto::BodyName(r->envelope.body)));
    }
  }
  const double window =
      std::chrono::duration<double>(now - (base != nullptr ? base->at : start_)).count();
  for (size_t w = 0; w < workers.size(); ++w) {
    const obs::WorkerSnapshot* prev =
        base != nullptr && w < base->workers.size() ? &base->workers[w] : nullptr;
    status->workers.push_back(obs::WorkerLoadOf(workers[w], prev, window, job_.batch_size));
  }
  status->load_window_sec = window;
  load_history_.push_back(std::move(sample));
  // Keep the newest sample at least kMinLoadWindow old and everything after it.
  while (load_history_.size() >= 2 && now - load_history_[1].at >= kMinLoadWindow)
    load_history_.pop_front();
}

double Chief::UnixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

proto::ChiefStatus Chief::CurrentStatus() {
  proto::ChiefStatus s;
  {
    std::lock_guard lock(mu_);
    s.state = state_;
    s.global_step = global_step_.load();
    s.total_steps = steps_from_data_ || follow_endless_ ? 0 : job_.steps;
    s.epochs = job_.epochs.value_or(0);
    s.examples_per_sec = examples_per_sec_;
    s.elapsed_sec = std::chrono::duration<double>(Clock::now() - start_).count();
    if (stop_reason_) s.stop_reason = *stop_reason_;
    s.tasks = TaskStates();
  }
  if (auto e = EpochNow()) s.epoch = *e;  // takes data_mu_: not under mu_
  if (auto f = FollowNow()) {
    s.files_done = f->files_done;
    s.files_waiting = f->files_waiting;
    s.data_lag_sec = f->lag_sec;
  }
  SampleLoad(&s);
  return s;
}

std::vector<proto::TaskState> Chief::TaskStates() {
  std::vector<proto::TaskState> tasks;
  for (const auto& p : ps_)
    tasks.push_back(
        {.task = p->peer_name(), .state = p->health().ok() ? "ready" : "lost", .last_error = ""});
  if (coordinator_) {
    for (const auto& w : coordinator_->Snapshot()) {
      tasks.push_back({.task = w.name,
                       .state = w.alive ? (w.in_flight > 0 ? "running" : "idle") : "lost",
                       .last_error = w.last_error});
    }
  } else {
    for (const auto& w : workers_)
      tasks.push_back({.task = w->peer_name(), .state = "connected", .last_error = ""});
  }
  return tasks;
}

}  // namespace ps::chief

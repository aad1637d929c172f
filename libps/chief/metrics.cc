// The chief's Prometheus metrics (libps/prom): lost and recovered tasks and committed
// checkpoints counted from the machine's events; step, rate, state and task health read
// where the chief keeps them, at each scrape.

#include "libps/chief/shell.h"

namespace ps::chief {

namespace {

prom::Counter& Lost(prom::Registry& r, const char* type) {
  return r.Counter("pstrain_chief_lost_tasks_total", "Times a ps or worker task was declared lost.",
                   {{"peer_type", type}});
}
prom::Counter& Recovered(prom::Registry& r, const char* type) {
  return r.Counter(
      "pstrain_chief_recovered_tasks_total",
      "Times a lost task came back (a ps reconnected and restored, a worker rejoined).",
      {{"peer_type", type}});
}
prom::Counter& Checkpoints(prom::Registry& r) {
  return r.Counter("pstrain_chief_checkpoints_total", "Checkpoints this chief committed.");
}

}  // namespace

void Chief::CountEvent(const Event& e) {
  prom::Registry& r = *ctx_.metrics.registry;
  if (std::holds_alternative<ev::Start>(e)) {
    // Every counter from 0 on, so that rate() and increase() see the first event.
    for (const char* type : {"ps", "worker"}) {
      Lost(r, type).Add(0);
      Recovered(r, type).Add(0);
    }
    Checkpoints(r).Add(0);
  } else if (std::holds_alternative<ev::PsLost>(e)) {
    Lost(r, "ps").Add();
  } else if (std::holds_alternative<ev::WorkerLost>(e)) {
    Lost(r, "worker").Add();
  } else if (std::holds_alternative<ev::PsBack>(e)) {
    Recovered(r, "ps").Add();
  } else if (std::holds_alternative<ev::WorkerBack>(e)) {
    Recovered(r, "worker").Add();
  } else if (std::holds_alternative<ev::CheckpointCommitted>(e) ||
             (std::holds_alternative<ev::Restored>(e) && std::get<ev::Restored>(e).found)) {
    // last_saved_ was set on the I/O thread before it posted the event.
    if (std::holds_alternative<ev::CheckpointCommitted>(e)) Checkpoints(r).Add();
    if (last_saved_) last_checkpoint_unix_ = last_saved_->unix_time;
  }
}

void Chief::WriteMetrics(prom::Writer& w) {
  std::string state;
  double examples_per_sec = 0;
  std::vector<proto::TaskState> tasks;
  {
    std::lock_guard lock(mu_);
    state = state_;
    examples_per_sec = examples_per_sec_;
    tasks = TaskStates();
  }
  w.Gauge("pstrain_chief_global_step", "Steps completed (the global step).",
          static_cast<double>(global_step_.load()));
  w.Gauge(
      "pstrain_chief_total_steps",
      "The job's last step (0 while epochs of streamed data end it, or followed data without steps).",
      steps_from_data_ || follow_endless_ ? 0.0 : static_cast<double>(job_.steps));
  w.Gauge("pstrain_chief_examples_per_second",
          "Examples per second over the last progress window (log_every_steps).", examples_per_sec);
  w.Gauge("pstrain_chief_state", "The chief's state: 1 for the current one.", 1,
          {{"state", state}});
  for (const auto& t : tasks) {
    const char* type = t.task.rfind("ps:", 0) == 0 ? "ps" : "worker";
    w.Gauge("pstrain_chief_task_up",
            "1 while the chief's connection to the task is healthy, 0 when it is lost.",
            t.state == "lost" ? 0 : 1, {{"peer", t.task}, {"peer_type", type}});
  }
  if (auto f = FollowNow()) {
    w.Gauge("pstrain_chief_data_files_trained",
            "train_data.follow: files whose every record is trained (over the job).",
            static_cast<double>(f->files_done));
    w.Gauge("pstrain_chief_data_files_waiting",
            "train_data.follow: files taken in whose records are not all trained yet.",
            static_cast<double>(f->files_waiting));
    if (f->lag_sec >= 0) {
      w.Gauge("pstrain_chief_data_lag_seconds",
              "train_data.follow: the data lag of the file trained last: from its arrival (its "
              "modification time, or its done marker's) to its last record trained.",
              f->lag_sec);
    }
  }
  const double last = last_checkpoint_unix_.load();
  if (last > 0) {
    w.Gauge("pstrain_chief_last_checkpoint_timestamp_seconds",
            "Unix time the newest checkpoint (committed or restored) was committed.", last);
  }
  const double since =
      last > 0 ? last : UnixTime() - std::chrono::duration<double>(Clock::now() - start_).count();
  w.Gauge(
      "pstrain_chief_checkpoint_age_seconds",
      "Seconds since the newest checkpoint was committed (since the chief started when there is none).",
      UnixTime() - since);
}

}  // namespace ps::chief

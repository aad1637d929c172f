// The chief's run: start-up in order, the training loop, the final hook, shutdown.
#include "libps/chief/chief.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "libps/chief/shell.h"
#include "libps/core/log.h"
#include "libps/data/dataset.h"

namespace ps::chief {

Status Chief::Run(daemon::SignalWatcher& signals) {
  start_ = Clock::now();
  signals.Start([this](int sig) {
    RequestStop(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM"));
  });
  job_.update.num_workers = ctx_.tf.cluster.count(cluster::TaskType::kWorker);
  PS_RETURN_IF_ERROR(ps::server::ValidateUpdate(job_.update, "job.update"));
  PS_RETURN_IF_ERROR(PrepareModelDir());
  PS_RETURN_IF_ERROR(StartControl());
  Status st = Connect();
  if (st.ok()) st = data::CheckStreamedData(job_.eval_data, "job.eval_data", job_.base_dir);  // for FinalHook
  if (st.ok()) st = CreateVariables();
  if (st.ok()) st = RestoreNewest();
  if (st.ok() && !last_saved_) st = SaveCheckpoint(false);  // step 0: recovery always has a checkpoint
  if (st.ok()) st = StartWorkers();
  if (st.ok()) st = Train();
  if (st.ok()) st = FinalHook();
  SetState("shutting down");
  Status down = ShutdownCluster(st);
  control_->Close();
  if (!st.ok()) return st;
  return down;
}

void Chief::SetState(std::string s) {
  std::lock_guard lock(mu_);
  state_ = std::move(s);
}

void Chief::RequestStop(std::string reason) {
  std::lock_guard lock(mu_);
  if (stop_reason_) {
    PS_LOG(Info) << "already stopping (" << *stop_reason_ << ")";
    return;
  }
  stop_reason_ = reason;
  PS_LOG(Info) << "stop requested (" << reason << "): finishing the steps in flight";
  cv_.notify_all();
}

bool Chief::Stopping() {
  std::lock_guard lock(mu_);
  return stop_reason_.has_value();
}

Status Chief::Train() {
  SetState("training");
  Coordinator::Options copts;
  copts.max_in_flight_per_worker = job_.dispatches_per_worker;
  {
    std::lock_guard lock(mu_);  // the status thread reads coordinator_
    coordinator_ = std::make_unique<Coordinator>(workers_, copts);
  }
  for (size_t w = 0; w < workers_.size(); ++w) {
    workers_[w]->OnBroken([this, w](const Status& why) { coordinator_->MarkLost(static_cast<int>(w), why); });
  }
  std::thread rejoiner([this] { RejoinLoop(); });
  struct StopRejoiner {
    Chief* chief;
    std::thread* thread;
    ~StopRejoiner() {
      {
        std::lock_guard lock(chief->mu_);
        chief->rejoin_stop_ = true;
        chief->cv_.notify_all();
      }
      thread->join();
    }
  } stop_rejoiner{this, &rejoiner};
  const int64_t total = job_.steps;
  const size_t max_outstanding = workers_.size() * static_cast<size_t>(job_.dispatches_per_worker) + workers_.size();
  // A range of steps in flight: one pack, or in sync mode one pinned pack per worker, of
  // which `need` must succeed (every update of the range is then applied).
  struct Group {
    int64_t first = 0;
    int count = 0;
    int need = 1;
    std::vector<std::future<Result<PackResult>>> futures;
    std::vector<Result<PackResult>> results;
    int ok = 0;
    // Collects what has finished; true once the group is decided.
    bool Poll() {
      for (auto& f : futures) {
        if (!f.valid() || f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
        results.push_back(f.get());
        ok += results.back().ok() ? 1 : 0;
      }
      return ok >= need || results.size() == futures.size();
    }
    void Wait(std::chrono::milliseconds d) {
      for (auto& f : futures) {
        if (f.valid()) {
          f.wait_for(d);
          return;
        }
      }
    }
  };
  const bool sync = job_.update.mode == ps::server::UpdateMode::kSync;
  auto schedule = [&](int64_t first, int count) {
    Group g;
    g.first = first;
    g.count = count;
    if (!sync) {
      g.futures.push_back(coordinator_->Schedule(first, count));
      return g;
    }
    // Every live worker runs every update; R of them must finish it. With fewer live
    // than R, the lost ones' packs wait for them to rejoin.
    g.need = job_.update.replicas();
    auto snap = coordinator_->Snapshot();
    int alive = 0;
    for (const auto& w : snap) alive += w.alive ? 1 : 0;
    for (size_t w = 0; w < snap.size(); ++w) {
      if (snap[w].alive || alive < g.need) g.futures.push_back(coordinator_->Schedule(first, count, static_cast<int>(w)));
    }
    return g;
  };
  std::deque<Group> outstanding;
  int64_t next = global_step_;
  Window window;
  window.start = Clock::now();
  int64_t next_log = (global_step_ / job_.log_every_steps + 1) * job_.log_every_steps;
  const int64_t every = job_.checkpoint.every_steps;
  int64_t next_ckpt = every > 0 ? (global_step_ / every + 1) * every : INT64_MAX;
  auto last_ckpt_time = Clock::now();
  bool ckpt_due = false;  // stop dispatching, drain, save, go on
  Status result;
  bool draining = false;
  bool recovering = false;  // a ps is down: drain, then RecoverPs()
  auto last_progress = Clock::now();
  auto last_watchdog = Clock::now();
  PS_LOG(Info) << "training " << total << " steps of batch " << job_.batch_size << " on " << workers_.size()
               << " worker(s), " << job_.steps_per_dispatch << " steps per dispatch";
  for (;;) {
    if (!draining && Stopping()) {
      draining = true;
      // Sync mode: the ranges already given out run to the end on every worker (a
      // worker whose pack was cancelled would leave the others waiting for its
      // gradients); nothing new is given out.
      if (!sync) coordinator_->CancelQueued(Aborted("stopping"));
    }
    if (!recovering && !LostPs().empty()) {
      recovering = true;
      coordinator_->Pause(Aborted("a ps is down"));
    }
    if (recovering && outstanding.empty()) {
      const int64_t before = global_step_;
      Status recovered = RecoverPs();
      if (!recovered.ok()) return recovered;
      coordinator_->Resume();
      SetState("training");
      recovering = false;
      ckpt_due = false;
      next = global_step_;
      next_ckpt = every > 0 ? (global_step_ / every + 1) * every : INT64_MAX;
      next_log = (global_step_ / job_.log_every_steps + 1) * job_.log_every_steps;
      window = Window();
      window.start = last_progress = last_ckpt_time = Clock::now();
      PS_LOG(Warning) << "recovered: resuming at step " << global_step_ << " (" << before - global_step_
                      << " step(s) since the checkpoint are run again)";
      continue;
    }
    if (outstanding.empty() && recovering) continue;
    if (!ckpt_due && !draining && next < total) {
      bool by_time = job_.checkpoint.every_seconds > 0 &&
                     std::chrono::duration<double>(Clock::now() - last_ckpt_time).count() >= job_.checkpoint.every_seconds;
      ckpt_due = next >= next_ckpt || by_time;
    }
    while (!draining && !recovering && !ckpt_due && next < total && outstanding.size() < max_outstanding) {
      int64_t limit = std::min(total, next_ckpt);
      int count = static_cast<int>(std::min<int64_t>(job_.steps_per_dispatch, limit - next));
      outstanding.push_back(schedule(next, count));
      next += count;
      // The last step's checkpoint is the final one, saved by FinalHook.
      if (next >= next_ckpt && next < total) ckpt_due = true;
    }
    if (outstanding.empty() && ckpt_due && !draining && !recovering) {
      // Everything dispatched so far is applied: the checkpoint holds exactly steps < next.
      Status saved = SaveCheckpoint(false);
      if (!saved.ok() && !LostPs().empty()) {
        // A ps was lost during the save: this checkpoint is not committed; recover from
        // the newest committed one, as for a loss during training.
        PS_LOG(Warning) << "checkpoint " << global_step_ << " not committed: " << saved.message();
        recovering = true;
        coordinator_->Pause(Aborted("a ps is down"));
        continue;
      }
      if (!saved.ok()) return saved;
      SetState("training");
      ckpt_due = false;
      last_ckpt_time = Clock::now();
      while (next_ckpt <= global_step_) next_ckpt += every;
      continue;
    }
    if (outstanding.empty()) break;
    // Any decided range, not only the oldest: in bounded-staleness mode the oldest may be
    // waiting for a worker that needs more work to catch up.
    auto decided = std::find_if(outstanding.begin(), outstanding.end(), [](Group& g) { return g.Poll(); });
    if (decided == outstanding.end()) {
      outstanding.front().Wait(std::chrono::milliseconds(outstanding.size() > 1 ? 5 : 100));
      Watchdog(last_progress, &last_watchdog);
      continue;
    }
    Group group = std::move(*decided);
    outstanding.erase(decided);
    last_progress = Clock::now();
    Status failed;  // the group's first error, when it failed
    for (auto& x : group.results) {
      if (group.ok < group.need && !x.ok() && failed.ok()) failed = x.status();
    }
    if (!failed.ok()) {
      if (draining && failed.code() == Code::kAborted) continue;  // cancelled by the stop
      if (recovering) continue;  // the steps after the checkpoint are run again anyway
      if (failed.code() == Code::kUnavailable || failed.code() == Code::kAborted) {
        // A worker could not reach a ps: if one is down, recover instead of failing.
        if (!LostPs().empty()) {
          recovering = true;
          coordinator_->Pause(Aborted("a ps is down"));
          continue;
        }
      }
      if (result.ok()) result = failed;
      if (!draining) {
        draining = true;
        coordinator_->CancelQueued(Aborted("stopping after a failure"));
      }
      continue;
    }
    global_step_ += group.count;
    window.steps += group.count;
    for (auto& x : group.results) {
      if (x.ok()) window.Add(x->reply);
    }
    if (global_step_ >= next_log || global_step_ == total) {
      Report(window, total);
      window = Window();
      window.start = Clock::now();
      while (next_log <= global_step_) next_log += job_.log_every_steps;
    }
  }
  // Sync mode: packs of backups (or of a lost worker) for ranges already decided are
  // not needed any more.
  if (sync) coordinator_->CancelQueued(Aborted("the job's steps are done"));
  coordinator_->Join().ok();  // errors were taken from the futures above
  if (!result.ok()) return result;
  std::lock_guard lock(mu_);
  if (stop_reason_) PS_LOG(Info) << "stopped at step " << global_step_ << " of " << total;
  return Status::Ok();
}

void Chief::Watchdog(Clock::time_point last_progress, Clock::time_point* last_warning) {
  auto now = Clock::now();
  if (now - last_progress < options_.watchdog || now - *last_warning < options_.watchdog) return;
  *last_warning = now;
  std::string waiting;
  for (const auto& s : coordinator_->Snapshot()) {
    if (s.in_flight > 0) waiting += (waiting.empty() ? "" : ", ") + s.name + " (" + std::to_string(s.in_flight) + " pack(s))";
    else if (!s.alive) waiting += (waiting.empty() ? "" : ", ") + s.name + " (lost)";
  }
  for (const auto& p : ps_) {
    if (!p->health().ok()) waiting += (waiting.empty() ? "" : ", ") + p->peer_name() + " (lost)";
  }
  PS_LOG(Warning) << "watchdog: no step completed for "
                  << std::chrono::duration_cast<std::chrono::seconds>(now - last_progress).count()
                  << " s; waiting on " << (waiting.empty() ? "nothing in flight" : waiting);
}

Status RunChief(const daemon::DaemonContext& ctx, job::JobSpec job, const ChiefOptions& options, daemon::SignalWatcher& signals) {
  Chief chief(ctx, std::move(job), options);
  return chief.Run(signals);
}

}  // namespace ps::chief

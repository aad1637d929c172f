// ChiefMachine: starting, checkpoints and training (scheduling steps); the recovery of a
// lost ps is in state_machine_recovery.cc, stopping and finishing in state_machine_finish.cc.
#include "libps/chief/state_machine.h"

#include <algorithm>
#include <climits>

namespace ps::chief {

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting:
      return "starting";
    case Phase::kTraining:
      return "training";
    case Phase::kCheckpointing:
      return "checkpointing";
    case Phase::kEvaluating:
      return "evaluating";
    case Phase::kRecovering:
      return "recovering";
    case Phase::kDraining:
      return "draining";
    case Phase::kFinishing:
      return "finishing";
    case Phase::kStopping:
      return "stopping";
    case Phase::kDone:
      return "done";
  }
  return "?";
}

ChiefMachine::ChiefMachine(MachineConfig config)
    : config_(config),
      total_(config.total_steps),
      worker_alive_(static_cast<size_t>(std::max(config.num_workers, 0)), true) {}

bool ChiefMachine::dispatching() const {
  return phase_ == Phase::kTraining || phase_ == Phase::kCheckpointing ||
         phase_ == Phase::kEvaluating || phase_ == Phase::kRecovering || phase_ == Phase::kDraining;
}

std::vector<Action> ChiefMachine::Step(Time now, const Event& event) {
  out_.clear();
  if (phase_ == Phase::kDone) return {};
  now_ = std::max(now_, now);
  std::visit([this](const auto& e) { On(e); }, event);
  Advance();
  return std::move(out_);
}

bool ChiefMachine::Answer(Io io) {
  if (io_ != io) return false;
  io_ = Io::kNone;
  return true;
}

// --- Starting ---------------------------------------------------------------------

void ChiefMachine::On(const ev::Start&) {
  if (phase_ != Phase::kStarting || io_ != Io::kNone) return;
  io_ = Io::kConnect;
  Emit(act::Connect{});
}

void ChiefMachine::On(const ev::Connected&) {
  if (!Answer(Io::kConnect)) return;
  if (stop_reason_) {
    StopBeforeTraining("connected");
    return;
  }
  io_ = Io::kRestore;
  Emit(act::RestoreNewest{});
}

void ChiefMachine::On(const ev::StartFailed& e) {
  if (!Answer(Io::kConnect) && !Answer(Io::kStartWorkers)) return;
  if (CutShortByStop(e.why)) {
    StopBeforeTraining(e.why.message());
    return;
  }
  Fail(e.why);
}

void ChiefMachine::On(const ev::Restored& e) {
  if (!Answer(Io::kRestore)) return;
  if (e.found) {
    step_ = e.step;
    if (e.warm)
      committed_.reset();  // saved into model_dir first, as ckpt-0 is
    else
      committed_ = Committed{e.step, e.final};
  } else {
    committed_.reset();  // the step stays: nothing was restored
  }
  if (phase_ == Phase::kStarting) {
    if (stop_reason_) {
      StopBeforeTraining(committed_ ? "restored step " + std::to_string(step_)
                                    : std::string("no checkpoint to restore"));
      return;
    }
    if (!committed_) {
      // Step 0: recovery always has a checkpoint to go back to.
      io_ = Io::kSave;
      Emit(act::SaveCheckpoint{step_, false, false});
    } else {
      io_ = Io::kStartWorkers;
      Emit(act::StartWorkers{});
    }
    return;
  }
  // Recovering: a ps lost meanwhile means another round (unless stopped meanwhile).
  if (!lost_ps_.empty() && stop_reason_) {
    StopDuringRecovery("a ps was lost again");
    return;
  }
  if (!lost_ps_.empty())
    ReconnectNext();
  else
    FinishRecovery();
}

void ChiefMachine::On(const ev::RestoreFailed& e) {
  if (!Answer(Io::kRestore)) return;
  if (CutShortByStop(e.why)) {
    if (phase_ == Phase::kStarting)
      StopBeforeTraining("the restore ended, the model dir is unchanged");
    else
      StopDuringRecovery("the restore ended");
    return;
  }
  if (phase_ == Phase::kRecovering && !lost_ps_.empty()) {
    ReconnectNext();  // it failed because another ps went: reconnect that one too
    return;
  }
  Fail(e.why);
}

void ChiefMachine::On(const ev::WorkersStarted&) {
  if (!Answer(Io::kStartWorkers)) return;
  if (stop_reason_) {
    StopBeforeTraining("workers started");
    return;
  }
  Emit(act::OpenDispatch{});
  phase_ = Phase::kTraining;
  next_ = step_;
  ResetTimers();
  last_watchdog_ = now_;
  if (draining_) {
    // Stopped while starting: nothing is scheduled; the final checkpoint follows.
    if (!config_.sync) Emit(act::CancelQueued{Aborted("stopping")});
    phase_ = Phase::kDraining;
  }
  if (!lost_ps_.empty()) EnterRecovering();
}

// --- Checkpoints --------------------------------------------------------------------

void ChiefMachine::On(const ev::CheckpointCommitted& e) {
  if (!Answer(Io::kSave)) return;
  committed_ = Committed{e.step, e.final};
  checkpoint_failures_ = 0;
  switch (phase_) {
    case Phase::kStarting:
      if (stop_reason_) {
        StopBeforeTraining("checkpoint " + std::to_string(e.step) + " committed");
        return;
      }
      io_ = Io::kStartWorkers;
      Emit(act::StartWorkers{});
      return;
    case Phase::kCheckpointing:
      last_ckpt_time_ = now_;
      if (!e.delta) last_full_time_ = now_;
      if (config_.checkpoint_every_steps > 0) {
        while (next_ckpt_ <= step_) next_ckpt_ += config_.checkpoint_every_steps;
      }
      phase_ = Phase::kTraining;
      if (stop_reason_) StartDraining(Status::Ok());  // stopped during the save
      if (!lost_ps_.empty()) EnterRecovering();       // lost after it answered the save
      return;
    case Phase::kFinishing:
      AfterFinalCheckpoint();
      return;
    default:
      return;
  }
}

void ChiefMachine::On(const ev::CheckpointFailed& e) {
  if (!Answer(Io::kSave)) return;
  const std::string step = std::to_string(step_);
  if (!lost_ps_.empty() && (phase_ == Phase::kCheckpointing || phase_ == Phase::kFinishing)) {
    // This checkpoint is not committed; recover from the newest committed one, as for a
    // loss during training.
    RecoverFromFailedIo(("checkpoint " + step + " not committed").c_str(), e.why);
    return;
  }
  if (phase_ == Phase::kCheckpointing && ++checkpoint_failures_ < config_.max_checkpoint_failures) {
    // Every ps is up: the model dir failed (full, read-only, gone). Training goes on; the
    // checkpoints committed before are untouched, and the next one is tried at its time.
    last_ckpt_time_ = now_;
    if (!delta_due_) last_full_time_ = now_;
    if (config_.checkpoint_every_steps > 0) {
      while (next_ckpt_ <= step_) next_ckpt_ += config_.checkpoint_every_steps;
    }
    Log(log::Level::kWarning,
        "checkpoint " + step + " failed (" + std::to_string(checkpoint_failures_) + " in a row, " +
            std::to_string(config_.max_checkpoint_failures) + " stop the run): " + e.why.message() +
            "; training goes on, the newest committed checkpoint is " +
            (committed_ ? "step " + std::to_string(committed_->step) : std::string("none")));
    phase_ = Phase::kTraining;
    if (stop_reason_) StartDraining(Status::Ok());
    return;
  }
  if (phase_ == Phase::kCheckpointing) {
    Log(log::Level::kError, "checkpoint " + step + " failed " +
                                std::to_string(checkpoint_failures_) +
                                " times in a row: stopping the run");
  }
  if (phase_ == Phase::kFinishing && stop_reason_) {
    // Not retryable: a restarted chief would resume from the newest committed checkpoint
    // and train past the stop that was asked for.
    Fail(FailedPrecondition(
        "stopped (" + *stop_reason_ + "), but the final checkpoint " + step +
        " failed: " + e.why.message() + "; the newest committed checkpoint is " +
        (committed_ ? "step " + std::to_string(committed_->step) : std::string("none"))));
    return;
  }
  // At the start, or the final checkpoint with every ps up.
  Fail(e.why);
}

void ChiefMachine::RecoverFromFailedIo(const char* what, const Status& why) {
  Log(log::Level::kWarning, std::string(what) + ": " + why.message());
  if (phase_ == Phase::kFinishing) Emit(act::OpenDispatch{});  // closed for the final checkpoint
  phase_ = Phase::kTraining;
  if (stop_reason_) StartDraining(Status::Ok());
  EnterRecovering();
}

// --- Training -----------------------------------------------------------------------

void ChiefMachine::ResetTimers() {
  const int64_t every = config_.checkpoint_every_steps;
  next_ckpt_ = every > 0 ? (step_ / every + 1) * every : INT64_MAX;
  const int64_t eval = config_.eval_every_steps;
  next_eval_ = eval > 0 ? (step_ / eval + 1) * eval : INT64_MAX;
  next_log_ = (step_ / config_.log_every_steps + 1) * config_.log_every_steps;
  window_ = Window{};
  window_.start = now_;
  last_progress_ = last_ckpt_time_ = last_full_time_ = now_;
}

void ChiefMachine::ScheduleOne() {
  const int64_t limit = std::min({total_, next_ckpt_, next_eval_});
  Range r;
  r.id = next_range_id_++;
  r.first = next_;
  r.count = static_cast<int>(std::min<int64_t>(config_.steps_per_dispatch, limit - next_));
  act::ScheduleRange s{r.id, r.first, r.count, {}};
  if (config_.sync) {
    // Every live worker runs every update; R of them must finish it. With fewer live
    // than R, the lost ones' packs wait for them to rejoin.
    r.need = config_.replicas;
    const int alive =
        static_cast<int>(std::count(worker_alive_.begin(), worker_alive_.end(), true));
    for (size_t w = 0; w < worker_alive_.size(); ++w) {
      if (worker_alive_[w] || alive < r.need) s.workers.push_back(static_cast<int>(w));
    }
    r.packs = static_cast<int>(s.workers.size());
  }
  next_ += r.count;
  ranges_.push_back(r);
  Emit(std::move(s));
}

void ChiefMachine::Advance() {
  if (!dispatching()) return;
  if (!ranges_.empty() && now_ - last_progress_ >= config_.watchdog &&
      now_ - last_watchdog_ >= config_.watchdog) {
    last_watchdog_ = now_;
    Emit(act::Watchdog{now_ - last_progress_});
  }
  const int64_t total = total_;
  if (phase_ == Phase::kTraining && next_ < total) {
    const bool by_time = config_.checkpoint_every_seconds > 0 &&
                         std::chrono::duration<double>(now_ - last_full_time_).count() >=
                             config_.checkpoint_every_seconds;
    const bool by_delta = config_.checkpoint_delta_every_seconds > 0 &&
                          std::chrono::duration<double>(now_ - last_ckpt_time_).count() >=
                              config_.checkpoint_delta_every_seconds;
    if (next_ >= next_ckpt_ || by_time || by_delta) {
      phase_ = Phase::kCheckpointing;
      delta_due_ = !(next_ >= next_ckpt_ || by_time);
    } else if (next_ >= next_eval_) {
      phase_ = Phase::kEvaluating;
    }
  }
  const size_t max_outstanding = static_cast<size_t>(config_.num_workers) *
                                 static_cast<size_t>(config_.dispatches_per_worker + 1);
  while (phase_ == Phase::kTraining && next_ < total && ranges_.size() < max_outstanding) {
    ScheduleOne();
    // The last step's checkpoint (evaluation) is the final one (Finishing).
    if (next_ >= next_ckpt_ && next_ < total) {
      phase_ = Phase::kCheckpointing;
      delta_due_ = false;
    } else if (next_ >= next_eval_ && next_ < total) {
      phase_ = Phase::kEvaluating;
    }
  }
  if (!ranges_.empty() || busy()) return;
  switch (phase_) {
    case Phase::kTraining:
      if (next_ >= total) CloseDispatch();
      return;
    case Phase::kCheckpointing:
      // Everything scheduled so far is applied: the checkpoint holds exactly steps < next_.
      io_ = Io::kSave;
      Emit(act::SaveCheckpoint{step_, false, delta_due_});
      return;
    case Phase::kEvaluating:
      // Everything scheduled so far is applied: the evaluation sees exactly steps < next_.
      io_ = Io::kEvaluateWorkers;
      Emit(act::EvaluateOnWorkers{step_});
      return;
    case Phase::kRecovering:
      if (stop_reason_ && !recovery_started_) {
        StopDuringRecovery("before reconnecting");
        return;
      }
      if (!recovery_started_) {
        recovery_started_ = true;
        recovery_deadline_ = now_ + config_.ps_recovery_timeout;
        step_before_recovery_ = step_;
        ReconnectNext();
      }
      return;
    case Phase::kDraining:
      CloseDispatch();
      return;
    default:
      return;
  }
}

void ChiefMachine::On(const ev::PackDone& e) {
  auto it =
      std::find_if(ranges_.begin(), ranges_.end(), [&](const Range& r) { return r.id == e.range; });
  if (it == ranges_.end()) return;  // a backup's pack of a range already decided
  Range& r = *it;
  r.reported += 1;
  if (e.status.ok()) {
    r.ok += 1;
    r.sums.Add(e.stats);
  } else if (r.failed.ok()) {
    r.failed = e.status;
  }
  // Any decided range, not only the oldest: in bounded-staleness mode the oldest may be
  // waiting for a worker that needs more work to catch up.
  if (r.ok < r.need && r.reported < r.packs) return;
  Range decided = r;
  ranges_.erase(it);
  last_progress_ = now_;
  RangeDecided(decided);
}

void ChiefMachine::RangeDecided(Range& r) {
  if (r.ok < r.need) {
    const Status& failed = r.failed;
    if (draining_ && failed.code() == Code::kAborted) return;  // cancelled by the stop
    if (dropping_ranges_) return;
    if (phase_ == Phase::kRecovering)
      return;  // the steps after the checkpoint are run again anyway
    if (error_.ok()) error_ = failed;
    if (!draining_) StartDraining(Aborted("stopping after a failure"));
    return;
  }
  step_ += r.count;
  window_.steps += r.count;
  window_.Add({.examples = r.sums.examples,
               .correct = r.sums.correct,
               .stale = r.sums.stale,
               .loss_sum = r.sums.loss_sum,
               .skipped_records = r.sums.skipped_records});
  if (step_ >= next_log_ || step_ == total_) {
    window_.end = now_;
    Emit(act::Report{step_, total_, window_});
    window_ = Window{};
    window_.start = now_;
    while (next_log_ <= step_) next_log_ += config_.log_every_steps;
  }
}

// Nothing new is scheduled from here on. `why` non-OK: a failure, and what is queued is
// cancelled in every mode; OK: a stop, and in sync mode the ranges already given out
// run to the end on every worker (a worker whose pack was cancelled would leave the
// others waiting for its gradients).
void ChiefMachine::StartDraining(Status why) {
  draining_ = true;
  if (!why.ok())
    Emit(act::CancelQueued{std::move(why)});
  else if (!config_.sync)
    Emit(act::CancelQueued{Aborted("stopping")});
  if (phase_ == Phase::kTraining || phase_ == Phase::kCheckpointing ||
      phase_ == Phase::kEvaluating) {
    phase_ = Phase::kDraining;
  }
  DropStuckSyncRanges();
}

void ChiefMachine::DropStuckSyncRanges() {
  if (!config_.sync || !draining_ || !stop_reason_ || !error_.ok() || dropping_ranges_) return;
  const int alive = static_cast<int>(std::count(worker_alive_.begin(), worker_alive_.end(), true));
  auto stuck =
      std::find_if(ranges_.begin(), ranges_.end(), [&](const Range& r) { return r.need > alive; });
  if (stuck == ranges_.end()) return;
  dropping_ranges_ = true;
  Log(log::Level::kWarning, "stopping with " + std::to_string(alive) + " live worker(s) of the " +
                                std::to_string(stuck->need) +
                                " a synchronous update needs: steps " +
                                std::to_string(stuck->first) + " and later are not applied");
  Emit(act::PauseDispatch{Aborted("stopping with too few live workers")});
}

void ChiefMachine::On(const ev::WorkerLost& e) {
  if (e.worker >= 0 && static_cast<size_t>(e.worker) < worker_alive_.size())
    worker_alive_[static_cast<size_t>(e.worker)] = false;
  DropStuckSyncRanges();
}

void ChiefMachine::On(const ev::DataEnd&) {
  if (phase_ != Phase::kTraining && phase_ != Phase::kCheckpointing && phase_ != Phase::kEvaluating)
    return;
  if (next_ < total_) {
    total_ = next_;
    Log(log::Level::kInfo,
        "the training data is all given out: the job ends at step " + std::to_string(total_));
  }
}

void ChiefMachine::On(const ev::WorkerBack& e) {
  if (e.worker >= 0 && static_cast<size_t>(e.worker) < worker_alive_.size())
    worker_alive_[static_cast<size_t>(e.worker)] = true;
}

}  // namespace ps::chief

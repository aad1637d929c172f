// ChiefMachine: a stop in each phase, finishing (final checkpoint and evaluation) and
// shutting the cluster down.
#include "libps/chief/state_machine.h"

namespace ps::chief {

// --- Stopping -----------------------------------------------------------------------

void ChiefMachine::On(const ev::StopRequested& e) {
  // The waits a stop ends at once (the final evaluation also on a later stop: the first
  // one may be what led to it).
  switch (io_) {
    case Io::kConnect:
    case Io::kRestore:
    case Io::kStartWorkers:
    case Io::kReconnect:
    case Io::kEvaluate:
    case Io::kEvaluateWorkers:
      Emit(act::AbortIo{});
      break;
    default:
      break;
  }
  if (phase_ == Phase::kStopping) {
    Log(log::Level::kInfo, "stop requested (" + e.reason + "): already shutting the cluster down");
    return;
  }
  if (stop_reason_) {
    Log(log::Level::kInfo, "already stopping (" + *stop_reason_ + ")");
    return;
  }
  stop_reason_ = e.reason;
  if (phase_ == Phase::kStarting) {
    Log(log::Level::kInfo, "stop requested (" + e.reason + "): stopping before training starts");
    draining_ = true;  // nothing is scheduled
    return;
  }
  if (phase_ == Phase::kRecovering) {
    Log(log::Level::kInfo, "stop requested (" + e.reason +
                               "): ending the recovery; the newest committed checkpoint stands");
  } else {
    Log(log::Level::kInfo, "stop requested (" + e.reason + "): finishing the steps in flight");
  }
  if (draining_) return;
  // A save in progress completes first (CheckpointCommitted drains).
  if (phase_ == Phase::kCheckpointing && io_ == Io::kSave) return;
  // An inline evaluation ends first (WorkersEvaluated or EvaluationFailed drains).
  if (phase_ == Phase::kEvaluating && io_ == Io::kEvaluateWorkers) return;
  if (dispatching()) StartDraining(Status::Ok());
}

void ChiefMachine::StopBeforeTraining(const std::string& what) {
  Log(log::Level::kInfo, "stopped (" + *stop_reason_ + ") before training started (" + what +
                             "): no checkpoint written");
  BeginShutdown();
}

void ChiefMachine::StopDuringRecovery(const std::string& what) {
  no_final_ = true;
  Log(log::Level::kWarning,
      "stopped (" + *stop_reason_ + ") while recovering a lost ps (" + what +
          "): no final checkpoint; the newest committed checkpoint is " +
          (committed_ ? "step " + std::to_string(committed_->step) : std::string("none")));
  if (dispatching())
    CloseDispatch();
  else
    BeginShutdown();
}

// --- Finishing and stopping ---------------------------------------------------------

void ChiefMachine::CloseDispatch() {
  phase_ = Phase::kFinishing;
  io_ = Io::kClose;
  Emit(act::CloseDispatch{});
}

void ChiefMachine::On(const ev::DispatchClosed&) {
  if (!Answer(Io::kClose)) return;
  if (!error_.ok() || no_final_) {
    BeginShutdown();
    return;
  }
  if (stop_reason_) {
    // 2^50 steps: the job's steps are not known (epochs of streamed data, followed data).
    const bool known = config_.total_steps < (int64_t{1} << 50);
    Log(log::Level::kInfo,
        "stopped at step " + std::to_string(step_) +
            (known ? " of " + std::to_string(config_.total_steps) : std::string()));
  }
  FinalCheckpoint();
}

void ChiefMachine::FinalCheckpoint() {
  if (committed_ && committed_->step == step_ && committed_->final) {
    AfterFinalCheckpoint();  // already there (restored a finished job)
    return;
  }
  io_ = Io::kSave;
  Emit(act::SaveCheckpoint{step_, true, false});
}

void ChiefMachine::AfterFinalCheckpoint() {
  if (!config_.evaluate_final) {
    BeginShutdown();
    return;
  }
  io_ = Io::kEvaluate;
  Emit(act::Evaluate{step_});
}

void ChiefMachine::On(const ev::Evaluated&) {
  if (Answer(Io::kEvaluate)) BeginShutdown();
}

void ChiefMachine::On(const ev::EvaluationFailed& e) {
  if (Answer(Io::kEvaluate)) {
    if (CutShortByStop(e.why)) {
      Log(log::Level::kInfo, "final evaluation ended by the stop (" + e.why.message() + ")");
      BeginShutdown();
      return;
    }
    // The final checkpoint is committed; a lost ps is restored from it and evaluated again.
    if (!lost_ps_.empty())
      RecoverFromFailedIo("final evaluation failed", e.why);
    else
      Fail(e.why);
    return;
  }
  if (!Answer(Io::kEvaluateWorkers)) return;
  if (CutShortByStop(e.why)) {
    Log(log::Level::kInfo, "evaluation at step " + std::to_string(step_) + " ended by the stop (" +
                               e.why.message() + ")");
    AfterInlineEvaluation();
    return;
  }
  Log(log::Level::kWarning, "evaluation at step " + std::to_string(step_) +
                                " failed: " + e.why.message() + "; training goes on");
  AfterInlineEvaluation();
}

void ChiefMachine::On(const ev::WorkersEvaluated& e) {
  if (!Answer(Io::kEvaluateWorkers)) return;
  if (!e.early_stop.empty() && !stop_reason_) {
    stop_reason_ = "early stopping: " + e.early_stop;
    Log(log::Level::kInfo, "stop requested (" + *stop_reason_ + ")");
  }
  AfterInlineEvaluation();
}

void ChiefMachine::AfterInlineEvaluation() {
  const int64_t every = config_.eval_every_steps;
  while (next_eval_ <= step_) next_eval_ += every;
  phase_ = Phase::kTraining;
  if (stop_reason_) StartDraining(Status::Ok());
  if (!lost_ps_.empty()) EnterRecovering();
}

void ChiefMachine::Fail(Status why) {
  if (error_.ok()) error_ = std::move(why);
  if (dispatching()) {
    CloseDispatch();
    return;
  }
  BeginShutdown();
}

void ChiefMachine::BeginShutdown() {
  phase_ = Phase::kStopping;
  if (!error_.ok())
    shutdown_reason_ = "job failed: " + error_.message();
  else if (stop_reason_)
    shutdown_reason_ = "stopped: " + *stop_reason_;
  else
    shutdown_reason_ = "job finished";
  io_ = Io::kShutdownWorkers;
  Emit(act::Shutdown{TaskGroup::kWorkers, shutdown_reason_, error_});
}

void ChiefMachine::On(const ev::ShutdownReplied& e) {
  const bool workers = e.group == TaskGroup::kWorkers;
  if (!Answer(workers ? Io::kShutdownWorkers : Io::kShutdownPs)) return;
  shutdown_asked_[workers ? 0 : 1] = e.asked;
  not_acknowledged_.insert(not_acknowledged_.end(), e.failed.begin(), e.failed.end());
  if (workers) {
    io_ = Io::kShutdownPs;
    Emit(act::Shutdown{TaskGroup::kPs, shutdown_reason_, error_});
    return;
  }
  phase_ = Phase::kDone;
  if (!not_acknowledged_.empty()) {
    std::string names;
    for (const auto& f : not_acknowledged_) names += (names.empty() ? "" : ", ") + f;
    // Not retryable (exit 1): the job is over, a restart would not make the task listen.
    Emit(act::Exit{error_.ok() ? FailedPrecondition("did not acknowledge Shutdown: " + names)
                               : error_});
    return;
  }
  Log(log::Level::kInfo, "cluster shut down: " + std::to_string(shutdown_asked_[0]) +
                             " worker(s) and " + std::to_string(shutdown_asked_[1]) +
                             " ps task(s) acknowledged");
  Emit(act::Exit{error_});
}

}  // namespace ps::chief

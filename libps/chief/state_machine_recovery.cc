// ChiefMachine: recovering a lost ps (reconnect, restore, resume).
#include "libps/chief/state_machine.h"

namespace ps::chief {

// --- Recovering ---------------------------------------------------------------------

void ChiefMachine::On(const ev::PsLost& e) {
  if (!lost_ps_.insert(e.ps).second) return;
  // Starting, Finishing, Stopping: noted only (the start or the final checkpoint fails
  // instead). A save in progress answers first.
  // An inline evaluation fails or ends first (AfterInlineEvaluation recovers).
  if (!dispatching() || phase_ == Phase::kRecovering || io_ == Io::kSave ||
      io_ == Io::kEvaluateWorkers)
    return;
  EnterRecovering();
}

void ChiefMachine::EnterRecovering() {
  phase_ = Phase::kRecovering;
  recovery_started_ = false;
  Emit(act::PauseDispatch{Aborted("a ps is down")});
}

void ChiefMachine::ReconnectNext() {
  if (!lost_ps_.empty()) {
    io_ = Io::kReconnect;
    Emit(act::ReconnectPs{*lost_ps_.begin(), recovery_deadline_});
    return;
  }
  // Every ps is back: restore them all from the newest checkpoint so all shards agree.
  io_ = Io::kRestore;
  Emit(act::RestoreNewest{});
}

void ChiefMachine::On(const ev::PsBack& e) {
  if (io_ != Io::kReconnect) return;
  lost_ps_.erase(e.ps);
  io_ = Io::kNone;
  if (stop_reason_) {
    StopDuringRecovery("ps:" + std::to_string(e.ps) + " came back, not restored");
    return;
  }
  ReconnectNext();
}

void ChiefMachine::On(const ev::RecoveryFailed& e) {
  if (!Answer(Io::kReconnect)) return;
  if (CutShortByStop(e.why)) {
    StopDuringRecovery(e.why.message());
    return;
  }
  Fail(e.why);
}

void ChiefMachine::FinishRecovery() {
  recovery_started_ = false;
  Emit(act::ResumeDispatch{});
  Log(log::Level::kWarning, "recovered: resuming at step " + std::to_string(step_) + " (" +
                                std::to_string(step_before_recovery_ - step_) +
                                " step(s) since the checkpoint are run again)");
  phase_ = draining_ ? Phase::kDraining : Phase::kTraining;
  next_ = step_;
  total_ = config_.total_steps;  // the data position was rolled back too
  ResetTimers();
}

}  // namespace ps::chief

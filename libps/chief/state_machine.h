// ChiefMachine: the chief's control flow as a pure state machine (after etcd raft's
// Step(message)). Plain state; Step(now, event) returns the actions the shell (Chief,
// shell.h) must carry out. No sockets, threads, clocks or I/O of its own: time comes in
// as event data, and every I/O action is answered by an event (SaveCheckpoint by
// CheckpointCommitted or CheckpointFailed, ...). At most one such I/O action is
// outstanding at a time, and only while no range of steps is outstanding.
//
//   Starting ──────► Training ───── due (steps, time) ─────► Checkpointing
//      │               │ ▲  ▲ └──── last step done ──┐             │  │
//      │       ps lost │ │  └──────── committed ─────┼─────────────┘  │ ps lost, or the save
//      │               ▼ │ recovered                 │                │ fails with a ps lost
//      │             Recovering ◄────────────────────┼────────────────┘
//      │               ▲ │ recovered after a stop    │
//      │       ps lost │ ▼                           ▼
//      │             Draining ── nothing in flight ─► Finishing ──► Stopping ──► Done
//      │               ▲                                              ▲
//      │               └── a stop, or a range failed                  │
//      │                   (from Training or Checkpointing)           │
//      └──────────────── start failed ────────────────────────────────┘
//   Training ── eval due (eval_every_steps) ──► Evaluating ── evaluated ──► Training
//   (Draining when the evaluation asked for an early stop, or a stop came meanwhile;
//   Recovering when a ps was lost meanwhile.)
// An I/O error (a restore, a ps not back, a final save with every ps up, or more than
// max_checkpoint_failures periodic saves in a row) goes to Finishing and, with the error,
// on to Stopping: no final checkpoint. A periodic save that fails with every ps up is
// logged and training goes on (earlier checkpoints are untouched); the next one is tried
// at its usual time. A save (the final one too) or the final evaluation that fails
// because a ps was lost is recovered like a loss during training: the dispatch is
// reopened if it was closed, and the run goes on from the newest committed checkpoint.
//
// Starting: connect and create the variables, restore the newest checkpoint (or save
//   step 0), start the workers.
// Training: ranges of steps are scheduled, at most workers × (dispatches_per_worker+1)
//   outstanding; a range never crosses a checkpoint boundary (every_steps).
// Checkpointing: the checkpoint is due (by steps or by time): nothing new is scheduled;
//   once every outstanding range is decided the checkpoint holds exactly the steps
//   before it. A stop before the save starts skips it (the final checkpoint follows).
// Evaluating: inline evaluation is due (every eval_every_steps, never at the last step,
//   whose final evaluation follows anyway): nothing new is scheduled; once every range is
//   decided the workers evaluate the parameters of exactly the steps before it. A failed
//   evaluation is logged and training goes on; a checkpoint due at the same step comes
//   first.
// Recovering: a ps is down: dispatch pauses, ranges still outstanding finish (their
//   failures are ignored: the steps after the checkpoint are run again), every lost ps
//   is reconnected, every ps restored from the newest committed checkpoint, and training
//   resumes at the restored step (a stop ends the recovery: see below).
// Draining: a stop or a failed range: nothing new is scheduled (async and bounded
//   staleness: queued packs are cancelled; sync: ranges given out run to the end), and
//   ranges cancelled by the stop (Aborted) are not errors.
// Finishing: wait for every pack, then (no error) the final checkpoint and the final
//   evaluation.
// A stop (StopRequested) is honoured in every phase, and a wait it would otherwise sit in
// is ended at once (AbortIo: the I/O's answer comes back as an Aborted failure, which
// after a stop is no error). Starting: connecting, creating, restoring or starting the
//   workers ends; nothing was trained, so no checkpoint is written (a restore that ends
//   leaves the model dir as it was), and the tasks reached are shut down.
// Training, Checkpointing, Draining: the steps in flight finish, a save in progress
//   commits, then the final checkpoint (the newest one marked final when nothing was
//   trained since).
// Evaluating: the inline evaluation ends; then as in Training.
// Recovering: the wait for a lost ps (or the restore after it) ends; with a ps down the
//   final checkpoint cannot be written: the newest committed one stands.
// Finishing: the final evaluation ends (also on a second stop, when the first one led to
//   it). Stopping: nothing changes.
// A stopped run exits OK.
// Stopping: Shutdown to the workers, then to the ps tasks; exit with the first error,
//   or naming the tasks that did not acknowledge.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "libps/core/log.h"
#include "libps/core/status.h"

namespace ps::chief {

// Milliseconds since the chief started (the shell's monotonic clock).
using Time = std::chrono::milliseconds;

struct MachineConfig {
  int64_t total_steps = 0;        // the job's last step is total_steps - 1
  int steps_per_dispatch = 1;     // steps per range (one RunSteps)
  int dispatches_per_worker = 1;  // packs in flight per worker
  int num_workers = 1;
  // Sync: every range is pinned to every live worker and `replicas` of its packs must
  // succeed. Otherwise (async, bounded staleness) a range is one pack for any worker.
  bool sync = false;
  int replicas = 1;
  int64_t checkpoint_every_steps = 0;   // 0: never by steps
  double checkpoint_every_seconds = 0;  // 0: never by time
  // Delta checkpoints: due this long after the previous checkpoint of any kind (0: none),
  // unless a full one is due. The shell may write a full one instead (CheckpointCommitted.delta).
  double checkpoint_delta_every_seconds = 0;
  // Periodic saves that may fail in a row with every ps up (a full disk, a lost mount):
  // training goes on and the next checkpoint is tried at its usual time; one more stops
  // the run with that error.
  int max_checkpoint_failures = 3;
  int64_t log_every_steps = 100;
  Time watchdog{300000};             // warn when no range was decided for this long
  Time ps_recovery_timeout{600000};  // how long a lost ps may take to come back
  bool evaluate_final = false;       // job.eval_data is set
  int64_t eval_every_steps = 0;      // inline evaluation on the workers; 0: never
};

enum class Phase {
  kStarting,
  kTraining,
  kCheckpointing,
  kEvaluating,
  kRecovering,
  kDraining,
  kFinishing,
  kStopping,
  kDone
};
const char* PhaseName(Phase phase);

enum class TaskGroup { kWorkers, kPs };

// What one successful pack reports (RunStepsReply's sums).
struct PackStats {
  int64_t examples = 0, correct = 0, stale = 0;
  double loss_sum = 0;
  int64_t skipped_records = 0;  // bad records the worker's reader skipped
};

// Progress between two progress lines.
struct Window {
  Time start{0}, end{0};
  int64_t steps = 0, examples = 0, correct = 0, stale = 0;
  double loss_sum = 0;
  int64_t skipped_records = 0;
  void Add(const PackStats& s) {
    examples += s.examples;
    correct += s.correct;
    stale += s.stale;
    loss_sum += s.loss_sum;
    skipped_records += s.skipped_records;
  }
};

namespace ev {
struct Start {};      // the control server is up
struct Connected {};  // every task connected, variables created
struct StartFailed {
  Status why;
};  // connecting, creating variables or StartJob failed
// found: a checkpoint was restored. warm: from checkpoint.init_from, not model_dir (which
// then holds none yet: one is saved at `step` before the workers start).
struct Restored {
  bool found = false;
  int64_t step = 0;
  bool final = false;
  bool warm = false;
};
struct RestoreFailed {
  Status why;
};
struct CheckpointCommitted {
  int64_t step = 0;
  bool final = false;
  bool delta = false;
};
struct CheckpointFailed {
  Status why;
};
struct WorkersStarted {};
struct PackDone {
  uint64_t range = 0;
  Status status;
  PackStats stats;
};  // one pack of a range
struct WorkerLost {
  int worker = 0;
};
struct WorkerBack {
  int worker = 0;
};  // rejoined: it may get pinned packs again
struct PsLost {
  int ps = 0;
};
struct PsBack {
  int ps = 0;
};  // reconnected, its shards recreated
struct RecoveryFailed {
  Status why;
};  // a lost ps did not come back in time
struct StopRequested {
  std::string reason;
};               // operator (`pstrain stop`) or a signal
struct Tick {};  // nothing happened; time passed
// Streamed training data: every record of the job's epochs is given out. No range is
// scheduled after those scheduled already; once they are decided the run finishes as at
// its last step. Ignored unless training (Training, Checkpointing, Evaluating); a
// recovery rolls the data back with the parameters and undoes it.
struct DataEnd {};
struct DispatchClosed {};  // every pack finished
struct Evaluated {};
struct EvaluationFailed {
  Status why;
};  // the final or an inline evaluation
// The inline evaluation at `step` is done; `early_stop`: why training should end (early
// stopping on its metric), empty to go on.
struct WorkersEvaluated {
  int64_t step = 0;
  std::string early_stop;
};
// `failed`: "ps:1 (why)" per task that did not acknowledge; `asked`: the live tasks asked.
struct ShutdownReplied {
  TaskGroup group = TaskGroup::kWorkers;
  int asked = 0;
  std::vector<std::string> failed;
};
}  // namespace ev

using Event =
    std::variant<ev::Start, ev::Connected, ev::StartFailed, ev::Restored, ev::RestoreFailed,
                 ev::CheckpointCommitted, ev::CheckpointFailed, ev::WorkersStarted, ev::PackDone,
                 ev::WorkerLost, ev::WorkerBack, ev::PsLost, ev::PsBack, ev::RecoveryFailed,
                 ev::StopRequested, ev::Tick, ev::DataEnd, ev::DispatchClosed, ev::Evaluated,
                 ev::EvaluationFailed, ev::WorkersEvaluated, ev::ShutdownReplied>;

namespace act {
// I/O: each is answered by the events named.
struct Connect {};        // → Connected | StartFailed
struct RestoreNewest {};  // → Restored | RestoreFailed
// delta: a delta checkpoint may be written (the shell decides: the chain's bounds).
struct SaveCheckpoint {
  int64_t step = 0;
  bool final = false;
  bool delta = false;
};                       // → CheckpointCommitted | CheckpointFailed
struct StartWorkers {};  // → WorkersStarted | StartFailed
struct ReconnectPs {
  int ps = 0;
  Time deadline{0};
};                        // → PsBack | RecoveryFailed
struct CloseDispatch {};  // cancel what is queued, wait for every pack → DispatchClosed
// A stop: the I/O outstanding (Connect, RestoreNewest, StartWorkers, ReconnectPs, Evaluate,
// EvaluateOnWorkers) is not wanted any more and ends as soon as it can; it is still
// answered by its usual events (a failure with Code::kAborted when it was cut short).
struct AbortIo {};
struct Evaluate {
  int64_t step = 0;
};  // → Evaluated | EvaluationFailed
struct EvaluateOnWorkers {
  int64_t step = 0;
};  // → WorkersEvaluated | EvaluationFailed
// `outcome`: the run's error (OK: finished or stopped); a retryable one makes the tasks
// exit retryable too.
struct Shutdown {
  TaskGroup group = TaskGroup::kWorkers;
  std::string reason;
  Status outcome;
};  // → ShutdownReplied
// Immediate.
struct OpenDispatch {};  // create the coordinator; workers may rejoin
// One pack for any worker (`workers` empty), or one pinned pack per listed worker.
// Each pack is answered by a PackDone carrying `id`.
struct ScheduleRange {
  uint64_t id = 0;
  int64_t first = 0;
  int count = 0;
  std::vector<int> workers;
};
struct CancelQueued {
  Status why;
};  // queued packs fail with `why`
struct PauseDispatch {
  Status why;
};  // cancel queued, send nothing, retry nothing
struct ResumeDispatch {};
struct Report {
  int64_t step = 0;
  int64_t total = 0;
  Window window;
};  // a progress line
struct Watchdog {
  Time silent_for{0};
};  // name what is in flight
struct Log {
  log::Level level = log::Level::kInfo;
  std::string text;
};
struct Exit {
  Status status;
};  // the run's outcome; nothing follows
}  // namespace act

using Action = std::variant<act::Connect, act::RestoreNewest, act::SaveCheckpoint,
                            act::StartWorkers, act::ReconnectPs, act::CloseDispatch, act::AbortIo,
                            act::Evaluate, act::EvaluateOnWorkers, act::Shutdown, act::OpenDispatch,
                            act::ScheduleRange, act::CancelQueued, act::PauseDispatch,
                            act::ResumeDispatch, act::Report, act::Watchdog, act::Log, act::Exit>;

class ChiefMachine {
 public:
  explicit ChiefMachine(MachineConfig config);

  // Feeds one event that happened at `now` (never earlier than the previous one).
  // An event that does not fit the state (a reply nobody asked for, a pack of a range
  // already decided) changes nothing.
  std::vector<Action> Step(Time now, const Event& event);

  Phase phase() const { return phase_; }
  int64_t step() const { return step_; }  // steps applied: the next range starts here after a drain
  int64_t total() const { return total_; }  // the job's steps (fewer once the data ended)
  const std::optional<std::string>& stop_reason() const { return stop_reason_; }
  // An I/O action is outstanding.
  bool busy() const { return io_ != Io::kNone; }
  // Ranges are being scheduled or drained (Training, Checkpointing, Recovering, Draining).
  bool dispatching() const;

 private:
  enum class Io {
    kNone,
    kConnect,
    kRestore,
    kSave,
    kStartWorkers,
    kReconnect,
    kClose,
    kEvaluate,
    kEvaluateWorkers,
    kShutdownWorkers,
    kShutdownPs
  };
  // A range of steps in flight: one pack, or in sync mode one pinned pack per worker, of
  // which `need` must succeed (every update of the range is then applied).
  struct Range {
    uint64_t id = 0;
    int64_t first = 0;
    int count = 0;
    int need = 1, packs = 1, reported = 0, ok = 0;
    Status failed;  // the first failure reported
    Window sums;    // of the packs that succeeded
  };

  void On(const ev::Start&);
  void On(const ev::Connected&);
  void On(const ev::StartFailed& e);
  void On(const ev::Restored& e);
  void On(const ev::RestoreFailed& e);
  void On(const ev::CheckpointCommitted& e);
  void On(const ev::CheckpointFailed& e);
  void On(const ev::WorkersStarted&);
  void On(const ev::PackDone& e);
  void On(const ev::WorkerLost& e);
  void On(const ev::WorkerBack& e);
  void On(const ev::PsLost& e);
  void On(const ev::PsBack& e);
  void On(const ev::RecoveryFailed& e);
  void On(const ev::StopRequested& e);
  void On(const ev::Tick&) {}
  void On(const ev::DataEnd&);
  void On(const ev::DispatchClosed&);
  void On(const ev::Evaluated&);
  void On(const ev::EvaluationFailed& e);
  void On(const ev::WorkersEvaluated& e);
  void On(const ev::ShutdownReplied& e);

  // True (and no I/O outstanding any more) when `io` is the I/O outstanding.
  bool Answer(Io io);
  void Emit(Action a) { out_.push_back(std::move(a)); }
  void Log(log::Level level, std::string text) { Emit(act::Log{level, std::move(text)}); }
  // After every event: checkpoint due, scheduling, and what follows once nothing is outstanding.
  void Advance();
  void ScheduleOne();
  void RangeDecided(Range& r);
  void StartDraining(Status why);
  // Stopping in sync mode while fewer workers are alive than a range needs: the ranges
  // given out cannot complete until a worker rejoins. They are dropped (their updates are
  // not applied) and the final checkpoint follows at once.
  void DropStuckSyncRanges();
  void EnterRecovering();
  void ReconnectNext();
  void FinishRecovery();
  void ResetTimers();
  // After an inline evaluation (done or failed): the next one's step, then training, or
  // draining (stop) or recovering (a ps lost meanwhile).
  void AfterInlineEvaluation();
  void CloseDispatch();
  void FinalCheckpoint();
  void AfterFinalCheckpoint();
  // A save or the final evaluation failed because a ps was lost: recover from the newest
  // committed checkpoint (reopening the dispatch closed for the final checkpoint).
  void RecoverFromFailedIo(const char* what, const Status& why);
  // Records `why` (the first error wins) and heads for the exit: closes dispatch when it
  // is open, else shuts the cluster down.
  void Fail(Status why);
  void BeginShutdown();
  // Stopped while starting: nothing trained, no checkpoint; shut down the tasks reached.
  void StopBeforeTraining(const std::string& what);
  // Stopped while recovering a lost ps: no final checkpoint (a ps is down or not restored).
  void StopDuringRecovery(const std::string& what);
  // A failure `why` of the I/O a stop cut short (AbortIo), not an error of the run.
  bool CutShortByStop(const Status& why) const {
    return stop_reason_.has_value() && why.code() == Code::kAborted;
  }

  const MachineConfig config_;
  Phase phase_ = Phase::kStarting;
  Io io_ = Io::kNone;
  Time now_{0};
  std::vector<Action> out_;

  int64_t total_ = 0;  // config_.total_steps, or fewer after DataEnd
  int64_t step_ = 0;   // every step before it is applied
  int64_t next_ = 0;   // the first step not yet scheduled
  int64_t next_ckpt_ = 0, next_log_ = 0, next_eval_ = 0;
  Time last_ckpt_time_{0}, last_progress_{0}, last_watchdog_{0};
  Time last_full_time_{0};  // of the last full checkpoint (every_seconds counts from it)
  bool delta_due_ = false;  // the checkpoint due (kCheckpointing) is a delta
  Window window_;
  std::deque<Range> ranges_;  // outstanding, oldest first
  uint64_t next_range_id_ = 1;
  std::vector<bool> worker_alive_;  // [worker]
  std::set<int> lost_ps_;
  bool draining_ = false;         // a stop or a failure: nothing new is scheduled
  bool dropping_ranges_ = false;  // DropStuckSyncRanges: failed ranges are not errors
  std::optional<std::string> stop_reason_;
  Status error_;  // the run's first error
  struct Committed {
    int64_t step;
    bool final;
  };
  std::optional<Committed> committed_;  // the newest committed checkpoint
  int checkpoint_failures_ = 0;         // periodic saves failed in a row (every ps up)
  bool no_final_ = false;          // stopped while recovering: no final checkpoint can be written
  bool recovery_started_ = false;  // Recovering: reconnecting or restoring
  Time recovery_deadline_{0};
  int64_t step_before_recovery_ = 0;
  std::string shutdown_reason_;
  int shutdown_asked_[2] = {0, 0};  // [TaskGroup]
  std::vector<std::string> not_acknowledged_;
};

}  // namespace ps::chief

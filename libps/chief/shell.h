// The chief's I/O shell (private to libps/chief): one Chief object per run. It feeds
// what happens (signals, `pstrain stop`, packs done, lost tasks, I/O results, time) to
// the ChiefMachine (state_machine.h) as events, one at a time on the run's thread, and
// carries out the actions it returns: quick ones at once, slow I/O (connect, restore,
// save, reconnect a ps, evaluate, shut down) on one I/O thread that posts the result
// back as an event. Its member functions live in one file per job: chief.cc (the event
// loop and the actions), connections.cc (control server, connections, lost tasks,
// shutdown), variables.cc (creating the variables), checkpoints.cc (model dir, restore,
// save, final evaluation), evaluation.cc (inline evaluation on the workers) and status.cc (status, load samples, progress lines).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "libps/chief/chief.h"
#include "libps/chief/coordinator.h"
#include "libps/chief/early_stopping.h"
#include "libps/chief/state_machine.h"
#include "libps/ckpt/checkpoint_dir.h"
#include "libps/core/files.h"
#include "libps/core/json.h"
#include "libps/data/follow.h"
#include "libps/data/shards.h"
#include "libps/data/step_order.h"
#include "libps/obs/eval_log.h"
#include "libps/obs/events.h"
#include "libps/obs/figures.h"
#include "libps/prom/registry.h"

namespace ps::chief {

using Clock = std::chrono::steady_clock;

// How long a load sample waits for a ps's GetStatus answer before showing "no answer".
constexpr net::Millis kPsStatusTimeout{2000};
// Load figures cover at least this long: from the newest earlier sample this old.
constexpr std::chrono::seconds kMinLoadWindow{1};
// The chief logs the load hints at most this often.
constexpr std::chrono::seconds kHintLogInterval{60};

// Events posted from any thread, taken by the run's thread. Thread-safe.
class Inbox {
 public:
  void Post(Event e);
  // The oldest event, or nullopt after `timeout` without one.
  std::optional<Event> Wait(Clock::duration timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;  // guarded by mu_
};

class Chief {
 public:
  Chief(const daemon::DaemonContext& ctx, job::JobSpec job, const ChiefOptions& options)
      : ctx_(ctx), job_(std::move(job)), options_(options), runtime_(ctx.io_threads) {}
  ~Chief();

  Status Run(daemon::SignalWatcher& signals);

 private:
  void SetState(std::string s);
  // Any thread: hands the stop to the machine.
  void RequestStop(std::string reason);
  MachineConfig MachineConfigFor() const;
  Time Now() const;
  // The event loop: runs until the machine exits; returns its outcome.
  Status Drive();
  // Feeds what ObserveCluster sees, then `e`, to the machine and carries out the actions.
  void Deliver(const Event& e);
  void Apply(const Event& e);
  // Lost ps tasks, and workers lost or back, not yet told to the machine.
  std::vector<Event> ObserveCluster();
  void Execute(const Action& a);
  // Runs `op` on the I/O thread (after the previous one ended); posts its event. `op`'s
  // token is requested to stop by act::AbortIo: every wait of `op` then ends at once.
  void RunIo(std::function<Event(std::stop_token)> op);
  void OpenDispatch();
  void Schedule(const act::ScheduleRange& a);
  // Cancels what is queued, waits for every pack, stops the rejoiner. I/O thread.
  void CloseDispatch();
  // Warns that no step completed for `silent_for`, naming what is in flight.
  void Watchdog(Time silent_for);

  // connections.cc
  Status StartControl();
  Status Connect(std::stop_token stop);
  net::ClientOptions ClientOptionsFor(cluster::TaskId t) const;
  // A lost ps pauses training until it is back and every ps is restored (Recovering).
  void WatchPs(size_t i);
  // The ps tasks whose connection broke. A broken client's health() fails before its
  // OnBroken callback has run: both count.
  std::set<size_t> LostPs();
  // Tells every live ps to fail the pulls waiting for an update, and those that would
  // wait, until the restore (proto::ReleasePulls): with a ps down, a worker's pull for the
  // next sync update can wait for a gradient that a worker whose step failed never
  // pushes, and the packs in flight must end before the chief restores. No reply awaited.
  void ReleasePulls(const Status& why);
  // Waits until `deadline` for lost ps `i` to come back and recreates its shards.
  // I/O thread. PsBack or RecoveryFailed.
  Event ReconnectPs(int i, Time deadline, std::stop_token stop);
  // Reconnects lost workers (a restarted worker rejoins): once a second, until stopped.
  void RejoinLoop();
  // Calls `msg` on every client at once and waits for every reply, or until `stop` is
  // requested: the calls not answered by then fail Aborted (their replies are dropped).
  // [client]
  static std::vector<Result<net::Reply>> CallEach(
      const std::vector<std::shared_ptr<net::Client>>& clients, const proto::Body& msg,
      net::Millis timeout, std::stop_token stop = {});
  // The same with message msgs[i] to clients[i].
  static std::vector<Result<net::Reply>> CallEach(
      const std::vector<std::shared_ptr<net::Client>>& clients, std::vector<proto::Body> msgs,
      net::Millis timeout, std::stop_token stop);
  // CallEach; the first error names the task.
  static Status CallAll(const std::vector<std::shared_ptr<net::Client>>& clients,
                        const proto::Body& msg, net::Millis timeout,
                        std::vector<std::string>* failed = nullptr, std::stop_token stop = {});
  Status StartWorkers(std::stop_token stop);
  // Shutdown to every live worker (the first call: after detaching the failure callbacks
  // and ending the coordinator), then to every ps that was live then; the second call
  // closes every connection. I/O thread.
  ev::ShutdownReplied ShutdownTasks(TaskGroup group, const proto::Shutdown& msg);

  // variables.cc
  Status CreateVariables(std::stop_token stop);

  // checkpoints.cc
  Status PrepareModelDir();
  // In-memory train_data: counts its examples (the chief reads it once), fixes the step
  // order the workers follow and, with job.epochs, the job's steps. Streamed: nothing.
  Status PlanData();
  // data_queue.cc: streamed train_data read by lease (async and bounded staleness): the
  // shard queue (data/shards.h) is the data position. PlanStreamed cuts the files into
  // shards (PlanData); LeaseFor and LeaseDone serve the coordinator (its lock held);
  // DataPosition is what a checkpoint records, RestoreDataPosition puts it back (nullptr:
  // the start of the first epoch). Any thread.
  Status PlanStreamed();
  proto::DataLease LeaseFor(int worker, int count);
  void LeaseDone(const proto::DataLease& lease, const proto::RunStepsReply* reply);
  std::optional<Json> DataPosition();
  void RestoreDataPosition(const ckpt::Manifest* manifest);
  // With epochs: every record is given out (the machine is told: ev::DataEnd).
  bool DataGivenOut();
  // A whole pass over the streamed files read and not one record in them: an error.
  Status DataHoldsRecords();
  // Passes over the training data done so far (in memory: by the global step; streamed:
  // by shards done); nullopt when not known.
  std::optional<double> EpochNow();

  // follow.cc: train_data.follow. A follower thread lists the patterns every poll_seconds
  // (from the first OpenDispatch until the run ends) and appends the files that arrived
  // to the shard queue, then wakes the coordinator, whose packs wait while DataReady is
  // false. follow_mu_ is taken before data_mu_, so that a checkpoint's data position
  // holds the follower's record and the queue as of the same scan.
  void StartFollowing();
  void StopFollowing();
  void FollowLoop();
  bool DataReady();  // the coordinator's lease_ready (its lock held)
  // After an Ack (data_mu_ held): the lag of the files done, and the line when the last
  // file waiting is trained.
  void NoteFilesDone();
  // Follow figures for status, metrics and progress lines; nullopt without follow.
  struct FollowFigures {
    int64_t files_done = 0;
    int64_t files_waiting = 0;
    double lag_sec = -1;  // the last file done's; -1: none yet
  };
  std::optional<FollowFigures> FollowNow();

  // Restores every ps from the newest checkpoint that restores cleanly; a corrupt one is
  // reported and the one before it is used. Never starts from scratch when checkpoints
  // exist but none can be read. With none in model_dir, from job.checkpoint.init_from's
  // (warm_started_), the same way. Aborted when `stop` ends the wait (the model dir is
  // not touched).
  Status RestoreNewest(std::stop_token stop);
  // The variables and their shards as the MANIFEST records them (plan_).
  Json PlanJson() const;
  // FailedPrecondition naming the first variable of plan_ that checkpoint `c` lacks or
  // holds with another shape or sparse-ness, or a variable of `c` that plan_ lacks (a
  // changed model). Its ps count, partitioner and placement may differ: the ps tasks
  // reshard on restore.
  Status CheckVariablesMatch(const ckpt::CheckpointInfo& c) const;
  // Every ps writes its shard file, then the chief commits the MANIFEST and the pointer.
  // `delta`: a delta checkpoint of what changed since last_saved_, when the chain's
  // bounds allow (job.checkpoint.max_deltas, delta_max_fraction) and every ps can write
  // one; else a full one. last_saved_->base tells which was committed.
  Status SaveCheckpoint(bool final, bool delta = false);
  // After a failed save: removes its uncommitted files when every ps is connected.
  void RemoveFailedCheckpoint();
  // Runs after the last step or on stop, after the final checkpoint, before the cluster
  // is shut down: evaluates the final model on job.eval_data, pulling its parameters
  // from the ps tasks. Aborted when `stop` is requested (no pull starts after it).
  Status FinalEvaluation(std::stop_token stop);

  // evaluation.cc: inline distributed evaluation at `step` (training is paused): every
  // live worker evaluates its shard of job.eval_data; the sums are merged exactly,
  // logged, written to train_metrics.jsonl and the eval run, and fed to early stopping.
  // I/O thread. `stop` ends it (EvaluationFailed, Aborted).
  Event EvaluateOnWorkers(int64_t step, std::stop_token stop);

  // status.cc. Report runs on the run's thread, WriteMetricsLine on the I/O thread, never
  // at once: the machine asks for I/O only when no range is outstanding, so no progress
  // line is due meanwhile.
  void Report(const Window& w, int64_t total);
  // Waits until the progress line being completed (Report) is written.
  void WaitMetrics();
  // Appends a line to train_metrics.jsonl after any progress line still pending.
  void WriteMetricsLine(const Json& line);
  // One whole line into train_metrics.jsonl; a failure is logged once until it works again.
  void AppendMetrics(const std::string& line);
  // After a TensorBoard write: logs a failure once, and that it works again. events_mu_ held.
  void EventsWritten(const Status& st);
  // Appends {"event": {kind, task, step, unix_time, detail}} (obs/metrics.h) at once, for
  // the report's markers: a task lost or back, the chief starting or rolling back. Any thread.
  void RecordEvent(const std::string& kind, const std::string& task, const std::string& detail);
  // One load sample (obs/figures.h): polls every ps for its status at once
  // (kPsStatusTimeout) and snapshots the workers; the figures cover the time since the
  // newest earlier sample at least kMinLoadWindow old (or since the start).
  // max_queue_depth is the ps's own: since its previous sample. Fills `status`'s
  // load_window_sec, workers and ps. Any thread; samples are serialised.
  void SampleLoad(proto::ChiefStatus* status);
  static double UnixTime();
  // The whole status, filled once: what `pstrain status` shows and each progress line of
  // train_metrics.jsonl records. Asks every ps for its figures (SampleLoad). Any thread.
  proto::ChiefStatus CurrentStatus();
  // Every ps and worker connection and its state, as CurrentStatus shows them. mu_ held.
  std::vector<proto::TaskState> TaskStates();

  // metrics.cc: the chief's Prometheus metrics. Counts lost and recovered tasks and
  // committed checkpoints from the events the machine is given (the run's thread).
  void CountEvent(const Event& e);
  // The figures kept elsewhere (step, rate, state, tasks, checkpoint age), at each scrape.
  void WriteMetrics(prom::Writer& w);

  const daemon::DaemonContext& ctx_;
  job::JobSpec job_;
  // In-memory train_data: which examples each step trains (PlanData); the epoch shown in
  // progress lines and status comes from it. Read-only once set.
  std::optional<data::StepOrder> order_;
  // Streamed train_data read by lease: its files and shards, and the queue (data_mu_).
  std::vector<std::string> data_files_;
  std::vector<data::Shard> data_shards_;
  std::mutex data_mu_;
  std::optional<data::ShardQueue> shard_queue_;
  // train_data.follow (follow.cc): the follower (follow_mu_), how files are cut into
  // shards, and the lag of the file done last (data_mu_).
  std::mutex follow_mu_;
  std::condition_variable follow_cv_;
  std::optional<data::FileFollower> follower_;
  bool follow_text_ = false;
  int64_t follow_shard_bytes_ = 0;
  bool follow_stop_ = false;      // follow_mu_
  bool warned_no_match_ = false;  // the follower thread
  std::thread follow_thread_;
  double data_lag_sec_ = -1;      // data_mu_
  bool steps_from_data_ = false;  // job.epochs without job.steps: the data ends the job
  bool follow_endless_ = false;   // train_data.follow without job.steps: runs until stopped
  Status plan_error_;             // PlanData's; reported when the tasks are connected
  ChiefOptions options_;
  Inbox inbox_;  // outlives everything that posts to it
  const uint64_t generation_ =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  net::Runtime runtime_;
  std::unique_ptr<net::Server> control_;
  std::vector<std::shared_ptr<net::Client>> ps_, workers_;
  job::VariablePlan plan_;
  std::vector<proto::CreateShards> create_msgs_;  // [ps]: recreates a restarted ps's shards
  std::optional<ckpt::Manifest> last_saved_;      // the newest committed checkpoint (or delta)
  // The delta chain last_saved_ ends: its base's bytes, the deltas after it and their bytes.
  struct Chain {
    uint64_t base_bytes = 0;
    int deltas = 0;
    uint64_t delta_bytes = 0;
  } chain_;
  bool warm_started_ = false;  // the last RestoreNewest restored from job.checkpoint.init_from
  std::unique_ptr<Coordinator> coordinator_;  // written by the run's thread, read under mu_
  std::optional<ChiefMachine> machine_;       // the run's thread only
  std::optional<Status> exit_;                // the machine's outcome (act::Exit)
  std::set<size_t> reported_lost_ps_;         // told to the machine as lost; the run's thread
  std::vector<bool> reported_alive_;          // [worker] as told to the machine; the run's thread
  bool dispatch_opened_ = false;              // OpenDispatch ran before (the next one reopens)
  std::thread rejoiner_;                      // RejoinLoop while dispatch is open
  std::vector<std::shared_ptr<net::Client>> shutdown_ps_;  // the ps tasks live when shutdown began
  AppendOnlyFile metrics_;  // train_metrics.jsonl, guarded by metrics_mu_
  bool metrics_failing_ = false;
  bool events_failing_ =
      false;  // guarded by events_mu_             // the last append failed (logged once), metrics_mu_
  int64_t skipped_records_ = 0;  // bad records the workers skipped; the run's thread (Report)
  EarlyStopper early_stopper_{job_.early_stopping};  // the I/O thread (EvaluateOnWorkers)
  // model_dir/eval_inline (inline and final evaluations); the I/O thread
  std::optional<obs::EvalLog> eval_log_;
  std::mutex metrics_mu_;  // held while a line is written to metrics_
  bool started_ = false;   // the first restore was recorded; the I/O action thread
  std::mutex events_mu_;   // the training and metrics threads both write events
  std::optional<obs::EventWriter>
      events_;  // model_dir/events.out.tfevents.*; optional; guarded by events_mu_
  Clock::time_point start_;
  std::atomic<int64_t> global_step_{0};
  std::atomic<double> last_checkpoint_unix_{
      0};  // the newest committed checkpoint's MANIFEST time; 0: none

  std::mutex mu_;
  std::condition_variable cv_;
  std::string state_ = "starting";          // guarded by mu_
  std::optional<std::string> stop_reason_;  // guarded by mu_
  std::set<size_t> lost_ps_;                // guarded by mu_
  bool rejoin_stop_ = false;                // guarded by mu_
  double examples_per_sec_ = 0;             // guarded by mu_

  struct LoadSample {
    Clock::time_point at;
    std::vector<std::optional<proto::PsStatus>> ps;  // [ps]; nullopt: no answer
    std::vector<obs::WorkerSnapshot> workers;
  };
  std::mutex load_mu_;                   // serialises SampleLoad; taken before mu_
  std::deque<LoadSample> load_history_;  // oldest first; guarded by load_mu_
  Clock::time_point last_hint_log_;      // metrics thread only (one at a time)
  // The progress line being completed off the training thread (Report).
  std::future<void> pending_metrics_;
  std::thread io_;            // the I/O action in progress (RunIo); joined by Drive and ~Chief
  std::stop_source io_stop_;  // io_'s (act::AbortIo); the run's thread
};

}  // namespace ps::chief

// The chief's insides (private to libps/chief): one Chief object per run. Its member
// functions live in one file per job: chief.cc (the run and the training loop),
// connections.cc (control server, connections, lost tasks, shutdown), variables.cc
// (creating the variables), checkpoints.cc (model dir, restore, save, final hook) and
// status.cc (status, load samples, progress lines).
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
#include <string>
#include <vector>

#include "libps/chief/chief.h"
#include "libps/chief/coordinator.h"
#include "libps/ckpt/checkpoint_dir.h"
#include "libps/core/json.h"
#include "libps/obs/events.h"
#include "libps/obs/figures.h"

namespace ps::chief {

using Clock = std::chrono::steady_clock;

// How long a load sample waits for a ps's GetStatus answer before showing "no answer".
constexpr net::Millis kPsStatusTimeout{2000};
// Load figures cover at least this long: from the newest earlier sample this old.
constexpr std::chrono::seconds kMinLoadWindow{1};
// The chief logs the load hints at most this often.
constexpr std::chrono::seconds kHintLogInterval{60};

class Chief {
 public:
  Chief(const daemon::DaemonContext& ctx, job::JobSpec job, const ChiefOptions& options)
      : ctx_(ctx), job_(std::move(job)), options_(options), runtime_(2) {}

  Status Run(daemon::SignalWatcher& signals);

 private:
  // Progress since the last progress line.
  struct Window {
    Clock::time_point start;
    int64_t steps = 0, examples = 0, correct = 0, stale = 0;
    double loss_sum = 0;
    void Add(const proto::RunStepsReply& r) {
      stale += r.stale;
      examples += r.examples;
      correct += r.correct;
      loss_sum += r.loss_sum;
    }
  };

  void SetState(std::string s);
  void RequestStop(std::string reason);
  bool Stopping();
  Status Train();
  // Warns when no pack has completed for options_.watchdog, naming what is in flight.
  void Watchdog(Clock::time_point last_progress, Clock::time_point* last_warning);

  // connections.cc
  Status StartControl();
  Status Connect();
  net::ClientOptions ClientOptionsFor(cluster::TaskId t) const;
  // A lost ps pauses training until it is back and every ps is restored (Train()).
  void WatchPs(size_t i);
  // The ps tasks whose connection broke. A broken client's health() fails before its
  // OnBroken callback has run: both count.
  std::set<size_t> LostPs();
  // Waits (up to --ps-recovery-timeout) for every lost ps to come back, recreates its
  // shards, and restores every ps from the newest checkpoint so all shards agree.
  Status RecoverPs();
  // Reconnects lost workers (a restarted worker rejoins): once a second, until stopped.
  void RejoinLoop();
  // Calls `msg` on every client at once; the first error names the task.
  static Status CallAll(const std::vector<std::shared_ptr<net::Client>>& clients, const proto::Body& msg,
                        net::Millis timeout, std::vector<std::string>* failed = nullptr);
  Status StartWorkers();
  Status ShutdownCluster(const Status& outcome);

  // variables.cc
  Status CreateVariables();

  // checkpoints.cc
  Status PrepareModelDir();
  // Restores every ps from the newest checkpoint that restores cleanly; a corrupt one is
  // reported and the one before it is used. Never starts from scratch when checkpoints
  // exist but none can be read.
  Status RestoreNewest();
  // Every ps writes its shard file, then the chief commits the MANIFEST and the pointer.
  Status SaveCheckpoint(bool final);
  // Runs after the last step or on stop, before the cluster is shut down: evaluates the
  // final model on job.eval_data, pulling its parameters from the ps tasks. (The final
  // checkpoint goes here too.)
  Status FinalHook();

  // status.cc
  void Report(const Window& w, int64_t total);
  // Waits until the progress line being completed (Report) is written. Training thread.
  void WaitMetrics();
  // Appends a line to train_metrics.jsonl after any progress line still pending.
  // Training thread.
  void WriteMetricsLine(const Json& line);
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
  // After a failed write: no more TensorBoard events. events_mu_ held.
  void DisableEvents(const Status& why);

  const daemon::DaemonContext& ctx_;
  job::JobSpec job_;
  ChiefOptions options_;
  const uint64_t generation_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  net::Runtime runtime_;
  std::unique_ptr<net::Server> control_;
  std::vector<std::shared_ptr<net::Client>> ps_, workers_;
  job::VariablePlan plan_;
  std::vector<proto::CreateShards> create_msgs_;  // [ps]: recreates a restarted ps's shards
  std::optional<ckpt::Manifest> last_saved_;  // the newest committed checkpoint
  std::unique_ptr<Coordinator> coordinator_;
  std::ofstream metrics_;
  std::mutex events_mu_;                     // the training and metrics threads both write events
  std::optional<obs::EventWriter> events_;  // model_dir/events.out.tfevents.*; optional; guarded by events_mu_
  Clock::time_point start_;
  std::atomic<int64_t> global_step_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::string state_ = "starting";            // guarded by mu_
  std::optional<std::string> stop_reason_;    // guarded by mu_
  std::set<size_t> lost_ps_;                  // guarded by mu_
  bool rejoin_stop_ = false;                  // guarded by mu_
  double examples_per_sec_ = 0;               // guarded by mu_

  struct LoadSample {
    Clock::time_point at;
    std::vector<std::optional<proto::PsStatus>> ps;  // [ps]; nullopt: no answer
    std::vector<obs::WorkerSnapshot> workers;
  };
  std::mutex load_mu_;  // serialises SampleLoad; taken before mu_
  std::deque<LoadSample> load_history_;  // oldest first; guarded by load_mu_
  Clock::time_point last_hint_log_;      // metrics thread only (one at a time)
  // The progress line being completed off the training thread (Report). Last member:
  // destroyed (waited for) first.
  std::future<void> pending_metrics_;
};

}  // namespace ps::chief

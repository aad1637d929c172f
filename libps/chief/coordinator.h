// Coordinator: schedules packs of steps on workers, like TensorFlow's ClusterCoordinator.
// Schedule() returns a future at once; a pack runs on any free worker, at most
// `max_in_flight_per_worker` packs per worker at a time. A pack whose worker fails
// (connection lost, heartbeat or deadline) is re-queued on another worker, up to
// `max_attempts`; an error the worker reports (bad data, bad model) fails the pack.
// With no live worker at all (the chief cut off from everyone, every worker restarting)
// packs wait, queued, for a worker to rejoin; only after `worker_recovery_timeout` with
// none alive do they fail (Unavailable: a restarted chief resumes from its checkpoint).
// A worker that refuses a pack because it is stopping (Draining) gets no more packs until
// it rejoins; the refusal costs the pack no attempt.
// The failure that lost the last worker costs a pack no attempt; after CancelQueued (a
// stop, an earlier failure) such a pack fails Aborted at once instead of waiting.
// A pack pinned to a worker (sync mode: every worker runs every update) runs only there,
// after that worker's earlier pinned packs, one at a time; when the worker is lost it waits, queued, for
// the worker to rejoin.
// Streamed training data: a pack not pinned gets its data lease (Options::lease) when it is
// first sent, and keeps it through its retries; Options::lease_done hears how each such
// pack ended (its reply, or nullptr when it was given up) before the pack's callback runs.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "libps/net/transport.h"
#include "libps/obs/figures.h"

namespace ps::chief {

struct PackResult {
  int64_t first_step = 0;
  int count = 0;
  int worker = -1;
  int attempts = 0;
  proto::RunStepsReply reply;
};

class Coordinator {
 public:
  struct Options {
    int max_in_flight_per_worker = 2;
    int max_attempts = 3;
    net::Millis pack_timeout{std::chrono::minutes(30)};
    net::Millis worker_recovery_timeout{std::chrono::minutes(10)};
    // Called with the coordinator's lock held: they must not call the coordinator.
    std::function<proto::DataLease(int worker, int count)> lease;
    std::function<void(const proto::DataLease&, const proto::RunStepsReply*)> lease_done;
    // Data that keeps arriving: a pack that needs a lease waits, queued, while this
    // returns false (nothing to give out now); Wake() has it asked again. Lock held.
    std::function<bool()> lease_ready;
  };
  Coordinator(std::vector<std::shared_ptr<net::Client>> workers, Options options);
  ~Coordinator();  // cancels what is queued and waits for what is in flight

  // `worker` >= 0 pins the pack to that worker.
  std::future<Result<PackResult>> Schedule(int64_t first_step, int count, int worker = -1);
  // The same, answered through `done` (once, with the coordinator's lock held: it must
  // not call the coordinator).
  using PackCallback = std::function<void(Result<PackResult>)>;
  void Schedule(int64_t first_step, int count, int worker, PackCallback done);

  // Waits for every scheduled pack; returns the first error (then cancels the queue).
  Status Join();
  // True when nothing is queued or in flight.
  bool Done() const;
  // Fails every queued pack with `why` (Aborted); in-flight packs finish, and a pinned
  // one that fails is not queued again (until Resume).
  void CancelQueued(const Status& why);
  // A worker's connection broke: nothing more is sent to it.
  void MarkLost(int worker, const Status& why);
  // Stops dispatching: queued packs fail with `why` (Aborted), and packs in flight that
  // fail are not retried. Resume() dispatches again. (A ps is down: the chief drains.)
  void Pause(const Status& why);
  void Resume();
  // lease_ready may have changed (data arrived): queued packs are looked at again.
  void Wake();
  // Packs queued for a lease that lease_ready refuses now end at once as done with no
  // steps run (an empty reply), so that the ranges before a checkpoint are decided while
  // no data arrives. Returns how many.
  int ReturnWaiting();
  // A lost worker is back (reconnected, job started): it gets work again.
  void Rejoin(int worker, std::shared_ptr<net::Client> client);
  std::vector<obs::WorkerSnapshot> Snapshot() const;

 private:
  struct Pack {
    int64_t first_step;
    int count;
    int attempts = 0;
    PackCallback done;
    int pinned = -1;
    std::optional<proto::DataLease> lease;
  };
  // Tells lease_done how the pack ended (reply, or nullptr: given up). mu_ held.
  void EndLease(Pack& pack, const proto::RunStepsReply* reply);
  // The pack needs a lease and none can be given now. mu_ held.
  bool Starved(const Pack& pack) const;
  // The worker that may run `pack` now, or -1. mu_ held.
  int Choose(const Pack& pack) const;
  void DispatchLoop();
  void OnReply(int worker, Pack pack, Result<net::Reply> reply);
  void Finish(Pack& pack, Result<PackResult> result);  // mu_ held
  bool AnyAlive() const;                               // mu_ held
  double TimeoutSeconds() const;                       // worker_recovery_timeout
  // Starts the no-live-worker clock when the last worker is gone. mu_ held.
  void NoteLoss(const Status& why);
  // With no live worker for worker_recovery_timeout: fails what is queued. mu_ held.
  void FailIfAbandoned();

  std::vector<std::shared_ptr<net::Client>> workers_;
  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pack> queue_;                  // guarded by mu_
  std::vector<obs::WorkerSnapshot> state_;  // guarded by mu_
  int outstanding_ = 0;                     // queued + in flight; guarded by mu_
  Status first_error_;                      // guarded by mu_
  bool closing_ = false;                    // guarded by mu_
  bool paused_ = false;                     // guarded by mu_
  bool cancelled_ = false;                  // CancelQueued since the last Resume; guarded by mu_
  // Since when no worker is alive, and the last loss's reason; guarded by mu_.
  std::optional<std::chrono::steady_clock::time_point> none_alive_since_;
  Status last_loss_;
  std::thread dispatcher_;
};

}  // namespace ps::chief

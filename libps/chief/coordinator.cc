#include "libps/chief/coordinator.h"

#include <algorithm>

#include "libps/core/log.h"
#include "libps/core/text.h"

namespace ps::chief {

namespace {
// Failures of the path to a worker, not of the work: worth another worker.
bool Retryable(const Status& st) {
  return st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded ||
         st.code() == Code::kAborted || st.code() == Code::kDraining;
}
}  // namespace

Coordinator::Coordinator(std::vector<std::shared_ptr<net::Client>> workers, Options options)
    : workers_(std::move(workers)), options_(options) {
  for (const auto& w : workers_) {
    obs::WorkerSnapshot s;
    s.name = w->peer_name();
    state_.push_back(s);
  }
  dispatcher_ = std::thread([this] { DispatchLoop(); });
}

Coordinator::~Coordinator() {
  CancelQueued(Aborted("coordinator shut down"));
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    closing_ = true;
    cv_.notify_all();
  }
  dispatcher_.join();
}

std::future<Result<PackResult>> Coordinator::Schedule(int64_t first_step, int count, int worker) {
  auto promise = std::make_shared<std::promise<Result<PackResult>>>();
  auto fut = promise->get_future();
  Schedule(first_step, count, worker,
           [promise](Result<PackResult> r) { promise->set_value(std::move(r)); });
  return fut;
}

void Coordinator::Schedule(int64_t first_step, int count, int worker, PackCallback done) {
  Pack pack{first_step, count, 0, std::move(done), worker, std::nullopt};
  std::lock_guard lock(mu_);
  ++outstanding_;
  queue_.push_back(std::move(pack));
  cv_.notify_all();
}

Status Coordinator::Join() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return outstanding_ == 0 || !first_error_.ok(); });
  if (!first_error_.ok()) {
    Status err = first_error_;
    lock.unlock();
    CancelQueued(Aborted("cancelled after an earlier failure: " + err.message()));
    lock.lock();
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    return err;
  }
  return Status::Ok();
}

bool Coordinator::Done() const {
  std::lock_guard lock(mu_);
  return outstanding_ == 0;
}

void Coordinator::CancelQueued(const Status& why) {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  while (!queue_.empty()) {
    Pack p = std::move(queue_.front());
    queue_.pop_front();
    EndLease(p, nullptr);
    p.done(why);
    --outstanding_;
  }
  cv_.notify_all();
}

void Coordinator::EndLease(Pack& pack, const proto::RunStepsReply* reply) {
  if (!pack.lease) return;
  if (options_.lease_done) options_.lease_done(*pack.lease, reply);
  pack.lease.reset();
}

void Coordinator::MarkLost(int worker, const Status& why) {
  std::lock_guard lock(mu_);
  auto& s = state_.at(static_cast<size_t>(worker));
  if (!s.alive) return;
  s.alive = false;
  s.last_error = why.message();
  PS_LOG(Warning) << s.name << " lost: " << why.message();
  NoteLoss(why);
  cv_.notify_all();
}

double Coordinator::TimeoutSeconds() const {
  return std::chrono::duration<double>(options_.worker_recovery_timeout).count();
}

bool Coordinator::AnyAlive() const {
  return std::any_of(state_.begin(), state_.end(),
                     [](const obs::WorkerSnapshot& w) { return w.alive; });
}

void Coordinator::NoteLoss(const Status& why) {
  last_loss_ = why;
  if (AnyAlive() || none_alive_since_) return;
  none_alive_since_ = std::chrono::steady_clock::now();
  PS_LOG(Warning) << "no live worker: steps wait up to " << FormatDuration(TimeoutSeconds())
                  << " for one to rejoin";
}

void Coordinator::FailIfAbandoned() {
  if (!none_alive_since_ ||
      std::chrono::steady_clock::now() - *none_alive_since_ < options_.worker_recovery_timeout) {
    return;
  }
  while (!queue_.empty()) {
    Pack p = std::move(queue_.front());
    queue_.pop_front();
    Finish(p, Unavailable("no worker came back within " + FormatDuration(TimeoutSeconds()) +
                          " (last lost: " + last_loss_.message() + ")"));
  }
}

void Coordinator::Pause(const Status& why) {
  {
    std::lock_guard lock(mu_);
    paused_ = true;
  }
  CancelQueued(why);
}

void Coordinator::Resume() {
  std::lock_guard lock(mu_);
  paused_ = false;
  cancelled_ = false;
  // The wait for a worker starts again with the new packs (a pause for a ps can be long).
  if (none_alive_since_) none_alive_since_ = std::chrono::steady_clock::now();
  cv_.notify_all();
}

void Coordinator::Rejoin(int worker, std::shared_ptr<net::Client> client) {
  std::lock_guard lock(mu_);
  workers_.at(static_cast<size_t>(worker)) = std::move(client);
  auto& s = state_[static_cast<size_t>(worker)];
  s.alive = true;
  s.in_flight = 0;  // its old calls all failed when the connection broke
  s.last_error.clear();
  none_alive_since_.reset();
  cv_.notify_all();
}

std::vector<obs::WorkerSnapshot> Coordinator::Snapshot() const {
  std::lock_guard lock(mu_);
  return state_;
}

void Coordinator::Finish(Pack& pack, Result<PackResult> result) {
  if (!result.ok() && first_error_.ok()) first_error_ = result.status();
  EndLease(pack, result.ok() ? &result->reply : nullptr);
  pack.done(std::move(result));
  --outstanding_;
  cv_.notify_all();
}

bool Coordinator::Starved(const Pack& pack) const {
  return !pack.lease && pack.pinned < 0 && options_.lease && options_.lease_ready &&
         !options_.lease_ready();
}

void Coordinator::Wake() {
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

int Coordinator::ReturnWaiting() {
  std::lock_guard lock(mu_);
  int returned = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!Starved(*it)) {
      ++it;
      continue;
    }
    Pack p = std::move(*it);
    it = queue_.erase(it);
    Finish(p, PackResult{p.first_step, p.count, -1, p.attempts, proto::RunStepsReply{}});
    ++returned;
  }
  return returned;
}

int Coordinator::Choose(const Pack& pack) const {
  auto free = [&](size_t w) {
    return state_[w].alive && state_[w].in_flight < options_.max_in_flight_per_worker;
  };
  if (Starved(pack)) return -1;
  if (pack.pinned >= 0) {
    // One at a time: a worker may run two packs it holds in either order, and pinned
    // (sync) packs must run in step order.
    const auto& s = state_[static_cast<size_t>(pack.pinned)];
    return s.alive && s.in_flight == 0 ? pack.pinned : -1;
  }
  // The live worker with the fewest packs in flight, below the limit.
  int chosen = -1;
  for (size_t w = 0; w < state_.size(); ++w) {
    if (!free(w)) continue;
    if (chosen < 0 || state_[w].in_flight < state_[static_cast<size_t>(chosen)].in_flight)
      chosen = static_cast<int>(w);
  }
  return chosen;
}

void Coordinator::DispatchLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    int chosen = -1;
    size_t index = 0;
    auto ready = [&] {
      if (closing_) return true;
      if (queue_.empty() || paused_) return false;
      // The first pack some worker can take (a pinned pack may wait for its worker).
      for (index = 0; index < queue_.size(); ++index) {
        chosen = Choose(queue_[index]);
        if (chosen >= 0) return true;
      }
      return false;
    };
    // Which wait applies is decided again after every wake-up: the last worker may be lost
    // while this thread waits.
    while (!ready()) {
      if (none_alive_since_ && !queue_.empty()) {
        // Nobody can take the queue: wait for a rejoin, then give up on it.
        if (cv_.wait_until(lock, *none_alive_since_ + options_.worker_recovery_timeout) ==
            std::cv_status::timeout) {
          FailIfAbandoned();
        }
      } else {
        cv_.wait(lock);
      }
    }
    if (closing_) return;
    Pack pack = std::move(queue_[index]);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(index));
    pack.attempts += 1;
    state_[static_cast<size_t>(chosen)].in_flight += 1;
    auto client = workers_[static_cast<size_t>(chosen)];
    if (!pack.lease && pack.pinned < 0 && options_.lease)
      pack.lease = options_.lease(chosen, pack.count);
    proto::RunSteps msg{pack.first_step, pack.count, pack.lease};
    lock.unlock();
    client->CallAsync(msg, {}, {}, options_.pack_timeout,
                      [this, chosen, pack = std::move(pack)](Result<net::Reply> r) mutable {
                        OnReply(chosen, std::move(pack), std::move(r));
                      });
    lock.lock();
  }
}

void Coordinator::OnReply(int worker, Pack pack, Result<net::Reply> reply) {
  std::lock_guard lock(mu_);
  auto& s = state_[static_cast<size_t>(worker)];
  s.in_flight -= 1;
  if (reply.ok()) {
    const auto* r = std::get_if<proto::RunStepsReply>(&reply->envelope.body);
    if (r == nullptr) {
      Finish(pack, ProtocolError(s.name + " answered RunSteps with " +
                                 proto::BodyName(reply->envelope.body)));
      return;
    }
    s.packs_done += 1;
    s.steps_done += r->steps;
    s.data_seconds += r->data_seconds;
    s.pull_seconds += r->pull_seconds;
    s.compute_seconds += r->compute_seconds;
    s.push_seconds += r->push_seconds;
    Finish(pack, PackResult{pack.first_step, pack.count, worker, pack.attempts, *r});
    return;
  }
  const Status& st = reply.status();
  s.last_error = st.message();
  // A worker that is stopping refuses new packs: it gets none until it rejoins, and the
  // refusal costs the pack no attempt.
  const bool refused = st.code() == Code::kDraining;
  if (refused) pack.attempts -= 1;
  if (s.alive && (refused || !workers_[static_cast<size_t>(worker)]->health().ok())) {
    s.alive = false;
    if (refused) {
      PS_LOG(Info) << st.message() << ": its packs go to the other workers";
    } else {
      PS_LOG(Warning) << s.name << " lost: " << st.message();
    }
    NoteLoss(st);
  }
  if (pack.pinned >= 0 && Retryable(st) && !closing_ && !paused_ && !cancelled_) {
    // Only this worker can run it: wait for it to rejoin, in step order among its packs.
    auto pos = std::find_if(queue_.begin(), queue_.end(),
                            [&](const Pack& q) { return q.first_step > pack.first_step; });
    queue_.insert(pos, std::move(pack));
    cv_.notify_all();
    return;
  }
  if (!AnyAlive()) {
    // Not this pack's fault: the failure that lost the last worker costs it no attempt.
    if (!refused) pack.attempts -= 1;
    if (cancelled_) {
      // A stop or an earlier failure drains the dispatch: nobody is left to run it.
      Finish(pack,
             Aborted("no live worker to run steps " + std::to_string(pack.first_step) + ".." +
                     std::to_string(pack.first_step + pack.count - 1) + " (" + st.message() + ")"));
      return;
    }
  }
  // With no live worker the pack waits for a rejoin (FailIfAbandoned bounds the wait).
  if (Retryable(st) && pack.attempts < options_.max_attempts && !closing_ && !paused_) {
    PS_LOG(Warning) << "steps " << pack.first_step << ".." << pack.first_step + pack.count - 1
                    << " failed on " << s.name << " (" << st.message() << "); re-queued";
    queue_.push_front(std::move(pack));
    cv_.notify_all();
    return;
  }
  Finish(pack, st.WithContext("steps " + std::to_string(pack.first_step) + ".." +
                              std::to_string(pack.first_step + pack.count - 1) + " on " + s.name));
}

}  // namespace ps::chief

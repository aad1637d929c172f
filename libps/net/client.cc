// Client: calls with deadlines, the reader, heartbeats, breaking the connection.
#include "libps/net/client_impl.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "libps/core/log.h"

namespace ps::net {

using asio::use_awaitable;

void Client::Impl::Start() {
  name = options.peer_name + " (" + options.host + ":" + std::to_string(options.port) + ")";
  last_rx = Clock::now();
  sweep_timer = std::make_unique<asio::steady_timer>(conn->executor());
  park_timer = std::make_unique<asio::steady_timer>(conn->executor());
  {
    // Parked from the start: the first CallSync need not race ReadLoop's first Park().
    std::lock_guard lock(mu);
    if (options.caller_reads && conn->blocking_fd() >= 0) read_owner = ReadOwner::kParked;
  }
  conn->StartWriter();
  auto self = shared_from_this();
  asio::co_spawn(
      conn->executor(), [self] { return self->ReadLoop(); }, asio::detached);
  asio::co_spawn(
      conn->executor(), [self] { return self->SweepLoop(); }, asio::detached);
  if (options.heartbeat_interval.count() > 0) {
    asio::co_spawn(
        conn->executor(), [self] { return self->HeartbeatLoop(); }, asio::detached);
  }
}

bool Client::Impl::FitsInto(const std::vector<std::span<std::byte>>& into,
                            const proto::Envelope& env, uint64_t bytes) {
  if (into.empty() || !env.reply) return false;
  uint64_t total = 0;
  for (auto s : into) total += s.size();
  return total == bytes;
}

std::optional<std::vector<std::span<std::byte>>> Client::Impl::Sink(const proto::Envelope& env,
                                                                    uint64_t bytes) {
  std::lock_guard lock(mu);
  auto it = pending.find(env.request_id);
  if (it == pending.end() || !FitsInto(it->second.into, env, bytes)) return std::nullopt;
  it->second.receiving = true;
  return it->second.into;
}

Status Client::Impl::Expired(const char* what, Millis timeout, const std::string& why) const {
  return DeadlineExceeded(name + ": " + what + " did not complete within " +
                          std::to_string(timeout.count()) + " ms" + why);
}

void Client::Impl::Deliver(InFrame& frame, bool on_strand) {
  if (!frame.status.ok() || !frame.env.reply) {
    PS_LOG(Warning) << name << " sent a bad frame: "
                    << (frame.status.ok() ? "a request on a client connection"
                                          : frame.status.message());
    return;
  }
  const auto* error = BodyAs<proto::Error>(frame);
  if (frame.env.request_id == 0) {
    if (error != nullptr) {
      PS_LOG(Warning) << name << " reported: " << error->message;
    } else if (BodyAs<proto::Ack>(frame) != nullptr) {
      std::lock_guard lock(mu);
      if (pings_unanswered > 0) --pings_unanswered;
    }
    return;  // heartbeat replies and connection-level errors
  }
  Pending p;
  {
    std::lock_guard lock(mu);
    auto it = pending.find(frame.env.request_id);
    if (it == pending.end()) return;  // timed out earlier
    p = std::move(it->second);
    pending.erase(it);
  }
  Result<Reply> r =
      error != nullptr
          ? Result<Reply>(StatusFromError(*error))
          : Result<Reply>(Reply{std::move(frame.env), std::move(frame.payload), frame.in_place});
  if (on_strand) return p.done(std::move(r));
  asio::post(conn->executor(),
             [done = std::move(p.done), r = std::move(r)]() mutable { done(std::move(r)); });
}

awaitable<void> Client::Impl::ReadLoop() {
  auto self = shared_from_this();
  Status why;
  PayloadSink sink = [this](const proto::Envelope& env, uint64_t n) { return Sink(env, n); };
  // Without caller reads nobody else ever reads: no need to ask (the worker's and the
  // chief's clients, after their first CallAsync).
  bool mine_for_good = !options.caller_reads || conn->blocking_fd() < 0;
  try {
    for (;;) {
      if (!mine_for_good) mine_for_good = co_await Park();
      auto frame = co_await conn->ReadFrame(sink);
      last_rx = Clock::now();
      if (!frame.ok()) {
        why = frame.status().WithContext(name);
        break;
      }
      Deliver(*frame, /*on_strand=*/true);
    }
  } catch (const boost::system::system_error& e) {
    why = Unavailable(name + ": connection lost: " + e.code().message());
  } catch (const std::bad_alloc&) {
    why = Unavailable(name + ": out of memory reading a reply");
  }
  reader_done = true;
  Break(closing ? Aborted(name + ": connection closed") : why);
}

awaitable<void> Client::Impl::HeartbeatLoop() {
  auto self = shared_from_this();
  asio::steady_timer timer(conn->executor());
  while (!broken) {
    timer.expires_after(options.heartbeat_interval);
    error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
    if (broken) co_return;
    auto silent = std::chrono::duration_cast<Millis>(Clock::now() - last_rx.load());
    if (silent > options.heartbeat_timeout) {
      Break(DeadlineExceeded(name + " did not answer for " + std::to_string(silent.count()) +
                             " ms (heartbeat timeout " +
                             std::to_string(options.heartbeat_timeout.count()) + " ms)"));
      co_return;
    }
    bool parked = false;
    {
      std::lock_guard lock(mu);
      ++pings_unanswered;
      parked = read_owner == ReadOwner::kParked;
    }
    conn->Send(proto::Envelope{0, false, options.generation, proto::Ping{}}, {});
    if (parked) park_timer->cancel();  // its reply needs a reader
  }
}

awaitable<void> Client::Impl::SweepLoop() {
  auto self = shared_from_this();
  std::vector<std::pair<std::function<void(Result<Reply>)>, Status>> expired;
  while (!broken) {
    sweeps.fetch_add(1, std::memory_order_relaxed);
    const auto now = Clock::now();
    {
      std::lock_guard lock(mu);
      auto next = now + std::chrono::seconds(1);
      for (auto it = pending.begin(); it != pending.end();) {
        Pending& p = it->second;
        if (p.receiving) {
          // Only the reader may finish it, whatever its deadline: it must not set the
          // next wake-up (a deadline already passed would fire the timer at once, over
          // and over, until the reply is in).
          ++it;
          continue;
        }
        if (p.deadline > now) {
          next = std::min(next, p.deadline);
          ++it;
          continue;
        }
        expired.emplace_back(std::move(p.done), Expired(p.what, p.timeout));
        it = pending.erase(it);
      }
      sweep_at = next;
      // Armed before the lock is released: a call registered later that is due earlier
      // than `next` posts a cancel, which runs after this wait has begun.
      sweep_timer->expires_at(next);
    }
    for (auto& [done, why] : expired) done(why);
    expired.clear();
    error_code ec;
    co_await sweep_timer->async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

void Client::Impl::Break(const Status& why) {
  conn->CloseOnStrand();
  std::function<void(const Status&)> cb;
  std::vector<std::function<void(Result<Reply>)>> failed;
  {
    std::lock_guard lock(mu);
    if (!broken) {
      broken = true;
      health_ = why;  // before failing calls: their callbacks may ask health()
      if (!closing) cb = on_broken;
    }
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second.receiving && !reader_done) {
        ++it;
        continue;
      }
      failed.push_back(std::move(it->second.done));
      it = pending.erase(it);
    }
  }
  if (sweep_timer) sweep_timer->cancel();
  if (park_timer) park_timer->cancel();  // a parked reader exits (reader_done)
  for (auto& done : failed) done(why);
  if (cb) cb(why);
}

void Client::Impl::Call(proto::Body body, OutPayload payload,
                        std::vector<std::span<std::byte>> reply_into, Millis timeout,
                        std::function<void(Result<Reply>)> done) {
  Pending p;
  p.into = std::move(reply_into);
  p.what = proto::BodyName(body);
  p.done = std::move(done);
  // Back-pressure: off the I/O threads a caller waits for room in the write queue.
  if (!runtime.impl().RunningInThisThread()) conn->WaitForRoom();
  uint64_t id = next_id.fetch_add(1);
  if (timeout.count() <= 0) timeout = options.call_timeout;
  p.timeout = timeout;
  p.deadline = Clock::now() + timeout;
  StartCall(id, std::move(p), proto::Envelope{id, false, generation.load(), std::move(body)},
            std::move(payload));
}

void Client::Impl::StartCall(uint64_t id, Pending p, const proto::Envelope& env,
                             OutPayload payload) {
  bool wake_sweeper = false, wake_reader = false;
  Status why;
  std::function<void(Result<Reply>)> refused;  // the call's callback when it is not sent
  {
    std::lock_guard lock(mu);
    if (broken) {
      why = health_.ok() ? Unavailable(name + ": not connected") : health_;
      refused = std::move(p.done);
    } else {
      wake_sweeper = p.deadline < sweep_at;
      wake_reader = read_owner == ReadOwner::kParked;  // its reply needs a reader
      pending.emplace(id, std::move(p));
    }
  }
  if (!why.ok()) {
    asio::post(conn->executor(), [done = std::move(refused), why]() { done(why); });
    return;
  }
  if (wake_sweeper)
    asio::post(conn->executor(), [self = shared_from_this()] { self->sweep_timer->cancel(); });
  if (wake_reader) WakeReader();
  conn->Send(env, std::move(payload));  // dropped if the connection is closed by then
}

Client::~Client() { Close(); }

const std::string& Client::peer_name() const { return impl_->options.peer_name; }

uint64_t Client::peak_queued_bytes() const { return impl_->conn->peak_queued_bytes(); }

void Client::SetGeneration(uint64_t generation) { impl_->generation.store(generation); }

Status Client::health() const {
  std::lock_guard lock(impl_->mu);
  return impl_->health_;
}

void Client::OnBroken(const std::function<void(const Status&)>& callback) {
  Status already;
  {
    std::lock_guard lock(impl_->mu);
    impl_->on_broken = callback;
    already = impl_->health_;
  }
  if (!already.ok() && callback) callback(already);
}

void Client::Close() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->on_broken = nullptr;
  }
  impl_->closed_by_user = true;
  asio::post(impl_->conn->executor(), [impl = impl_] {
    impl->closing = true;
    impl->conn->CloseOnStrand();
    impl->park_timer->cancel();  // a parked reader exits (Break: Aborted)
  });
}

void Client::CallAsync(proto::Body body, OutPayload payload,
                       std::vector<std::span<std::byte>> reply_into, Millis timeout,
                       std::function<void(Result<Reply>)> done) {
  if (impl_->sync_only.load(std::memory_order_relaxed)) {
    // For good: the reader stops parking (the call's registration wakes a parked one).
    std::lock_guard lock(impl_->mu);
    impl_->sync_only = false;
  }
  impl_->Call(std::move(body), std::move(payload), std::move(reply_into), timeout, std::move(done));
}

uint64_t Client::sweeps_for_testing() const { return impl_->sweeps.load(); }

uint64_t Client::caller_reads_for_testing() const { return impl_->caller_read_calls.load(); }

std::future<Result<Reply>> Client::Call(proto::Body body, OutPayload payload,
                                        std::vector<std::span<std::byte>> reply_into,
                                        Millis timeout) {
  auto promise = std::make_shared<std::promise<Result<Reply>>>();
  auto fut = promise->get_future();
  CallAsync(std::move(body), std::move(payload), std::move(reply_into), timeout,
            [promise](Result<Reply> r) { promise->set_value(std::move(r)); });
  return fut;
}

}  // namespace ps::net

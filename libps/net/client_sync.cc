// Client: synchronous calls, and their fast path in which the calling thread reads.
#include "libps/net/client_impl.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ps::net {

using asio::use_awaitable;

awaitable<bool> Client::Impl::Park() {
  for (;;) {
    {
      std::lock_guard lock(mu);
      if (!ShouldPark()) {
        read_owner = ReadOwner::kLoop;
        co_return !sync_only.load(std::memory_order_relaxed) || broken || closing;
      }
      if (read_owner == ReadOwner::kLoop) read_owner = ReadOwner::kParked;
      // Set before mu is released: a wake-up posted by whoever changes the state later
      // runs after this wait has begun.
      park_timer->expires_at(Clock::time_point::max());
    }
    error_code ec;
    co_await park_timer->async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

Clock::time_point Client::Impl::DeadlineOf(uint64_t id) const {
  std::lock_guard lock(mu);
  auto it = pending.find(id);
  return it == pending.end() ? Clock::time_point::min() : it->second.deadline;
}

bool Client::Impl::TakeReads() {
  std::lock_guard lock(mu);
  if (read_owner != ReadOwner::kParked || !sync_only.load(std::memory_order_relaxed) || broken ||
      read_failed || closed_by_user) {
    return false;
  }
  read_owner = ReadOwner::kCaller;
  return true;
}

Result<Reply> Client::Impl::CallReading(proto::Body body, OutPayload payload,
                                        std::vector<std::span<std::byte>>& into, Millis timeout) {
  caller_read_calls.fetch_add(1, std::memory_order_relaxed);
  const std::shared_ptr<Conn> c = conn;  // blocking_fd() stays open while we hold it
  const char* what = proto::BodyName(body);
  if (timeout.count() <= 0) timeout = options.call_timeout;
  const auto deadline = Clock::now() + timeout;
  const uint64_t id = next_id.fetch_add(1);
  c->Send(proto::Envelope{id, false, generation.load(), std::move(body)}, std::move(payload));
  uint64_t receiving = 0;  // another call whose reply_into the current frame fills
  // A frame that has begun is read to its end, by this call's deadline only if it is
  // this call's reply: another call's reply must not be cut off by this call's deadline
  // (the connection would have to go, failing that call). A peer that stalls inside a
  // frame is ended by the heartbeat (its Break shuts the socket down, which ends the
  // read). Without heartbeats a frame's deadline is its call's (another call's: the later
  // of both), and when it passes the connection is dropped.
  const bool heartbeats = options.heartbeat_interval.count() > 0;
  const Clock::time_point own_frame = heartbeats ? Clock::time_point::max() : deadline;
  BlockingDeadlines deadlines{deadline, own_frame};
  const PayloadSink sink = [&](const proto::Envelope& env,
                               uint64_t n) -> std::optional<std::vector<std::span<std::byte>>> {
    if (env.request_id == id) return FitsInto(into, env, n) ? std::optional(into) : std::nullopt;
    if (!heartbeats) deadlines.frame = std::max(deadlines.frame, DeadlineOf(env.request_id));
    auto spans = Sink(env, n);
    if (spans) receiving = env.request_id;
    return spans;
  };
  std::optional<Result<Reply>> result;
  Status failed;
  while (!result) {
    receiving = 0;
    deadlines.frame = own_frame;
    auto frame = c->ReadFrameBlocking(sink, deadlines);
    if (!frame.ok()) {
      failed = frame.status();
      break;
    }
    if (!frame->has_value()) {  // at a frame boundary: the connection stays in sync
      result = Expired(what, timeout);
      break;
    }
    last_rx = Clock::now();
    InFrame& f = **frame;
    if (f.status.ok() && f.env.reply && f.env.request_id == id) {
      if (const auto* e = BodyAs<proto::Error>(f)) {
        result = StatusFromError(*e);
      } else {
        result = Reply{std::move(f.env), std::move(f.payload), f.in_place};
      }
    } else {
      Deliver(f, /*on_strand=*/false);
    }
  }
  if (!failed.ok()) {
    if (failed.code() == Code::kDeadlineExceeded) {
      // Heartbeats off: this call's deadline passed inside a frame (perhaps another
      // call's reply). The call says so; the others learn only that the connection went.
      result = Expired(
          what, timeout,
          ", and the deadline passed in the middle of a frame: the connection is dropped (the stream "
          "cannot be resynchronised)");
      failed = Unavailable(name + ": connection dropped: a reply stopped in the middle of a frame");
    } else {
      failed = closed_by_user ? Aborted(name + ": connection closed") : failed.WithContext(name);
      result = failed;
    }
  }
  bool wake = false;
  {
    std::lock_guard lock(mu);
    if (!failed.ok()) {
      // Broken meanwhile (a heartbeat timeout, say: its Break shut the socket down,
      // which ended our read): the call fails for the reason the others did.
      if (broken && !health_.ok() && !closed_by_user) result = health_;
      read_failed = true;  // nobody reads until Break has closed the socket
      if (receiving != 0) {
        auto it = pending.find(receiving);  // its reply was cut off: Break may fail it
        if (it != pending.end()) it->second.receiving = false;
      }
    }
    read_owner = ReadOwner::kParked;
    wake = failed.ok() && (!pending.empty() || pings_unanswered > 0 || broken ||
                           !sync_only.load() || closed_by_user || c->closed());
  }
  if (!failed.ok()) {
    // Break wakes the reader, which then exits.
    asio::post(c->executor(), [self = shared_from_this(), failed] { self->Break(failed); });
  } else if (wake) {
    WakeReader();
  }
  return std::move(*result);
}

Result<Reply> Client::CallSync(proto::Body body, OutPayload payload,
                               std::vector<std::span<std::byte>> reply_into, Millis timeout) {
  // std::promise::set_value costs a futex system call (call_once) on top of the wake-up.
  struct Waiter {
    std::atomic<uint32_t> done{0};
    std::optional<Result<Reply>> result;
    void Finish(Result<Reply> r) {
      result.emplace(std::move(r));
      done.store(1, std::memory_order_release);
      done.notify_one();
    }
  };
  // Owned by the callback: finishes the call with Aborted if the callback is destroyed
  // without having run (a post dropped by a stopped io_context), as std::promise's
  // broken_promise did.
  struct Guard {
    std::shared_ptr<Waiter> w;  // null once the callback ran (or moved from)
    explicit Guard(std::shared_ptr<Waiter> waiter) : w(std::move(waiter)) {}
    Guard(Guard&&) = default;
    Guard& operator=(Guard&&) = delete;
    ~Guard() {
      if (w) w->Finish(Aborted("the call was dropped without an answer (transport shut down)"));
    }
  };
  if (impl_->options.caller_reads && !impl_->runtime.impl().RunningInThisThread()) {
    impl_->conn->WaitForRoom();
    if (impl_->TakeReads())
      return impl_->CallReading(std::move(body), std::move(payload), reply_into, timeout);
  }
  auto w = std::make_shared<Waiter>();      // the callback may still run its notify after we return
  auto guard = std::make_shared<Guard>(w);  // std::function needs a copyable callable
  impl_->Call(std::move(body), std::move(payload), std::move(reply_into), timeout,
              [guard](Result<Reply> r) {
                if (auto w = std::move(guard->w)) w->Finish(std::move(r));
              });
  while (w->done.load(std::memory_order_acquire) == 0) w->done.wait(0, std::memory_order_acquire);
  return std::move(*w->result);
}

}  // namespace ps::net

// The transport's bounds that are not per frame: a daemon's budget of inbound payload
// memory and the rate limit of log lines about unauthenticated peers. Asio-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "libps/net/buffer.h"

namespace ps::net {

// Bytes of inbound payload a server may hold at once. A frame reserves its payload's
// size before the buffer is allocated and returns it when that buffer is freed or
// recycled (through the BufferLease attached to it). Waiters are served first come,
// first served, so a big frame is not starved by small ones. Thread-safe.
class PayloadBudget : public std::enable_shared_from_this<PayloadBudget> {
 public:
  explicit PayloadBudget(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;
  size_t waiters() const;

  // Reserves `bytes` (<= capacity()) now and returns true, or queues the request and
  // returns false: `on_grant` then runs exactly once, on the thread of the Release that
  // made room, after the bytes were reserved for it; it must not block. `*ticket` names
  // the queued request for Cancel.
  bool Acquire(uint64_t bytes, std::function<void()> on_grant, uint64_t* ticket);
  // Withdraws a queued request: true when it was still queued (nothing reserved), false
  // when it had already been granted (the caller now owns the bytes and must Release).
  bool Cancel(uint64_t ticket);
  void Release(uint64_t bytes);
  // A lease that Releases `bytes` (already reserved) when destroyed.
  std::unique_ptr<BufferLease> Lease(uint64_t bytes);

 private:
  struct Waiter {
    uint64_t ticket;
    uint64_t bytes;
    std::function<void()> on_grant;
  };
  const uint64_t capacity_;
  mutable std::mutex mu_;
  uint64_t in_use_ = 0;         // guarded by mu_
  uint64_t next_ticket_ = 1;    // guarded by mu_
  std::deque<Waiter> waiting_;  // oldest first; guarded by mu_
};

// Decides whether a log line about `key` (a peer's IP address) may be written: at most
// one per key per `interval`. The lines held back are counted and reported with the next
// one. At most `max_keys` keys are remembered; when they are all recent, every other key
// shares one slot, so a flood from many addresses still logs one line per interval.
// Thread-safe.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogLimiter(Clock::duration interval = std::chrono::seconds(10), size_t max_keys = 1024)
      : interval_(interval), max_keys_(max_keys) {}
  // True when a line may be written at `now`; `*suppressed` is then the number of lines
  // about this key that were held back since its previous line.
  bool Allow(const std::string& key, Clock::time_point now, uint64_t* suppressed);

 private:
  struct Entry {
    Clock::time_point last;
    uint64_t suppressed = 0;
  };
  const Clock::duration interval_;
  const size_t max_keys_;
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // guarded by mu_
};

}  // namespace ps::net

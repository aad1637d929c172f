// Client::Impl: the state of a client connection and the rules of who reads it, shared by
// the files that implement it (private to libps/net):
//   client_dial.cc  connecting with backoff, TLS and the Hello/secret handshake
//   client.cc       calls (registration, replies, deadlines), the reader, heartbeats,
//                   breaking the connection, and the public Client methods
//   client_sync.cc  synchronous calls, including the fast path in which the calling
//                   thread reads its own reply
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "libps/net/conn.h"

namespace ps::net {

struct Client::Impl : std::enable_shared_from_this<Client::Impl> {
  Impl(Runtime& rt, ClientOptions o)
      : runtime(rt), options(std::move(o)), generation(options.generation) {}

  struct Pending {
    std::function<void(Result<Reply>)> done;  // runs on the connection's strand
    std::vector<std::span<std::byte>> into;
    Clock::time_point deadline;
    Millis timeout{0};
    bool receiving = false;  // the reader writes into `into`: only the reader may finish it
    const char* what = "";
  };

  Runtime& runtime;
  ClientOptions options;
  std::shared_ptr<Conn> conn;
  std::string name;  // "ps:1 (127.0.0.1:2224)"
  std::atomic<uint64_t> next_id{1};
  std::atomic<uint64_t> generation{0};     // stamped on every request; starts at options.generation
  std::atomic<Clock::time_point> last_rx;  // a frame last arrived (the reader or a caller)
  bool closing = false;                    // strand only
  std::atomic<bool> closed_by_user{false};  // Close() was called (read by a reading caller)
  // A call is registered by the calling thread and finished on the strand (reply, break
  // or deadline), so the map is shared; every critical section is a lookup or two.
  mutable std::mutex mu;
  std::unordered_map<uint64_t, Pending> pending;  // guarded by mu
  std::atomic<bool> broken{false};                // written under mu
  Status health_;                                 // guarded by mu
  std::function<void(const Status&)> on_broken;   // guarded by mu
  // The deadline sweeper's timer (strand only) and when it fires next (guarded by mu): a
  // call due earlier wakes it.
  std::unique_ptr<asio::steady_timer> sweep_timer;
  Clock::time_point sweep_at = Clock::time_point::max();
  std::atomic<uint64_t> sweeps{0};  // passes of the sweeper (Client::sweeps_for_testing)

  // Who reads the connection (plain TCP, after the handshake). kLoop: ReadLoop (always,
  // over TLS or without options.caller_reads). kParked: nobody; ReadLoop waits on
  // park_timer, parked at a frame boundary while there is nothing to read for (ShouldPark).
  // kCaller: a thread in CallSync, which reads until its own reply is in (CallReading),
  // while ReadLoop stays parked. Changes under mu, only at frame boundaries; Conn's
  // read-ahead buffer is used by the owner alone (mu orders its uses).
  enum class ReadOwner { kLoop, kParked, kCaller };
  ReadOwner read_owner = ReadOwner::kLoop;  // guarded by mu
  // No CallAsync or Call was made (set false for good by the first; CallSync's own
  // fallback does not count): only then does the reader park. Written under mu.
  std::atomic<bool> sync_only{true};
  // Guarded by mu: Pings sent whose Ack (a reply with request id 0) nobody has read yet;
  // the reader does not park while there are any, so every Ack is read when it comes.
  uint64_t pings_unanswered = 0;
  bool read_failed = false;  // guarded by mu: a caller's read broke the stream; Break comes
  std::unique_ptr<asio::steady_timer> park_timer;  // strand only
  std::atomic<uint64_t> caller_read_calls{0};      // Client::caller_reads_for_testing

  // mu held. Whether ReadLoop should wait (at a frame boundary) rather than read: only a
  // sync-only client's, with no call or Ping waiting for an answer and nothing broken.
  bool ShouldPark() const {
    return read_owner == ReadOwner::kCaller ||
           (options.caller_reads && conn->blocking_fd() >= 0 &&
            sync_only.load(std::memory_order_relaxed) && pending.empty() && pings_unanswered == 0 &&
            !broken && !read_failed && !closing && !conn->closed()) ||
           (read_failed && !broken);
  }
  // Wakes ReadLoop if parked: it re-checks ShouldPark. Any thread.
  void WakeReader() {
    asio::post(conn->executor(), [self = shared_from_this()] { self->park_timer->cancel(); });
  }

  // Set when the reader loop has exited: only then may a call being received into fail.
  bool reader_done = false;  // strand only

  // One connection attempt within `budget`: resolve, connect, TLS, Handshake (client_dial.cc).
  awaitable<Status> Attempt(Millis budget);
  // Hello, HelloReply and the secret's proofs both ways (client_dial.cc).
  awaitable<Status> Handshake();
  // After a successful Attempt: starts the writer, ReadLoop, SweepLoop and heartbeats.
  void Start();
  // Whether a reply's payload of `bytes` goes straight into a call's `into`: a reply, and
  // `into` given with exactly that size.
  static bool FitsInto(const std::vector<std::span<std::byte>>& into, const proto::Envelope& env,
                       uint64_t bytes);
  std::optional<std::vector<std::span<std::byte>>> Sink(const proto::Envelope& env, uint64_t bytes);
  // DeadlineExceeded for call `what` after `timeout` (+ why, when there is more to say).
  Status Expired(const char* what, Millis timeout, const std::string& why = "") const;
  // Strand only: returns once ReadLoop owns the reads (at once unless ShouldPark).
  // Returns true when it will own them for good: no caller can take them any more.
  awaitable<bool> Park();
  // A frame read by ReadLoop (on_strand) or by a caller that owns the reads, not the
  // caller's own reply: a reply goes to its call (whose `done` runs on the strand).
  void Deliver(InFrame& frame, bool on_strand);
  awaitable<void> ReadLoop();
  awaitable<void> HeartbeatLoop();
  // Fails the calls whose deadline has passed, every time the earliest deadline comes
  // (and at least every second). Strand only.
  awaitable<void> SweepLoop();
  // Marks the connection broken and fails every call except one being received into
  // (the reader finishes that one once the socket is closed). Strand only.
  void Break(const Status& why);
  // Client::CallAsync, without ending sync_only (CallSync's fallback uses it too).
  void Call(proto::Body body, OutPayload payload, std::vector<std::span<std::byte>> reply_into,
            Millis timeout, std::function<void(Result<Reply>)> done);
  // The deadline of pending call `id` (min() when there is none).
  Clock::time_point DeadlineOf(uint64_t id) const;
  // CallSync's fast path (client_sync.cc, with Park, DeadlineOf and CallReading): the
  // calling thread takes the reads from a parked ReadLoop (false: someone else reads,
  // take the ordinary path).
  bool TakeReads();
  // CallSync on the calling thread, which owns the reads (TakeReads): sends the request,
  // then reads frames until its own reply is in, handing other calls' replies over as
  // ReadLoop would. The call is not in `pending`: its deadline is this thread's (poll's
  // timeout), and so is its failure when the connection breaks.
  Result<Reply> CallReading(proto::Body body, OutPayload payload,
                            std::vector<std::span<std::byte>>& into, Millis timeout);
  // Registers the call on the calling thread, then sends its frame (from this thread
  // when nothing is queued ahead of it: Conn::Send), so the call is known before its
  // reply can arrive; the frame is counted in the write queue at once (WaitForRoom sees
  // it). A broken connection fails the call on the strand.
  void StartCall(uint64_t id, Pending p, const proto::Envelope& env, OutPayload payload);
};

}  // namespace ps::net

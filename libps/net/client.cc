// Client: connect with backoff, handshake, calls with deadlines, heartbeats.
#include "libps/net/conn.h"

#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <unordered_map>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include "libps/core/log.h"
#include "libps/net/auth.h"

namespace ps::net {

using asio::use_awaitable;

// ---------------------------------------------------------------- Client

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

  awaitable<Status> Attempt(Millis budget) {
    auto ex = co_await asio::this_coro::executor;
    tcp::resolver resolver(ex);
    error_code ec;
    auto results = co_await resolver.async_resolve(options.host, std::to_string(options.port),
                                                   asio::redirect_error(use_awaitable, ec));
    if (ec) co_return Unavailable("cannot resolve " + options.host + ": " + ec.message());
    conn = std::make_shared<Conn>(
        tcp::socket(ex), ConnOptions{options.limits, options.max_write_queue_bytes, 0, nullptr,
                                     nullptr, options.tls, options.caller_reads});
    auto watchdog = Watchdog(conn, budget);
    co_await asio::async_connect(conn->socket(), results, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      watchdog->cancel();
      co_return Unavailable(ec == asio::error::operation_aborted ? "connect timed out"
                                                                 : ec.message());
    }
    // Conn's constructor could not set this: the socket opens in async_connect.
    conn->socket().set_option(tcp::no_delay(true), ec);
    Status st = co_await conn->SecureHandshake(/*as_server=*/false);
    if (!st.ok()) st = Status(st.code(), options.peer_name + ": " + st.message());
    try {
      if (st.ok()) st = co_await Handshake();
    } catch (const boost::system::system_error& e) {
      // Under TLS 1.3 a server that rejects our certificate says so (an alert) only
      // after our side of the TLS handshake completed: we read it here.
      if (e.code().category() == asio::error::get_ssl_category()) {
        st = PermissionDenied(options.peer_name +
                              " refused the TLS connection: " + e.code().message());
      } else if (e.code() == asio::error::eof && !options.tls) {
        st = Unavailable("handshake failed: " + options.peer_name +
                         " closed the connection (does it require TLS, --tls-cert?)");
      } else {
        st = Unavailable(std::string("handshake failed: ") + e.what());
      }
    }
    watchdog->cancel();
    if (!st.ok()) conn->CloseOnStrand();
    if (st.ok()) conn->Authenticated();
    co_return st;
  }

  awaitable<Status> Handshake() {
    const Identity& me = options.identity;
    proto::Hello hello{.version = proto::kProtocolVersion,
                       .role = me.role,
                       .task_index = me.task_index,
                       .cluster_id = me.cluster_id,
                       .nonce = RandomNonce()};
    proto::Envelope hello_env{1, false, options.generation, hello};
    co_await conn->WriteNow(hello_env);
    auto first = co_await conn->ReadFrame(nullptr);
    if (!first.ok()) co_return first.status();
    if (!first->status.ok()) co_return first->status;
    if (const auto* e = BodyAs<proto::Error>(*first)) {
      // Unavailable (too many connections) is worth retrying; anything else is final.
      Status st = StatusFromError(*e);
      Code code = st.code() == Code::kProtocol || st.code() == Code::kUnavailable
                      ? st.code()
                      : Code::kPermissionDenied;
      co_return Status(code, options.peer_name + " refused the connection: " + st.message());
    }
    const auto* reply = BodyAs<proto::HelloReply>(*first);
    if (reply == nullptr) co_return ProtocolError(options.peer_name + ": expected HelloReply");
    const proto::Hello& server = reply->identity;
    if (server.version != proto::kProtocolVersion) {
      co_return ProtocolError(options.peer_name + " speaks protocol version " +
                              std::to_string(server.version) + ", this build " +
                              std::to_string(proto::kProtocolVersion));
    }
    bool operator_tool = me.role == proto::Role::kClient && me.cluster_id == 0;
    if (!operator_tool && server.cluster_id != me.cluster_id) {
      co_return PermissionDenied(options.peer_name +
                                 " belongs to a different cluster (different TF_CONFIG)");
    }
    proto::HelloProof proof;
    Status verdict;
    if (me.secret && !reply->secret_required) {
      verdict = PermissionDenied("cluster secret mismatch: " + options.peer_name +
                                 " has no secret configured");
    } else if (!me.secret && reply->secret_required) {
      verdict = PermissionDenied("cluster secret mismatch: " + options.peer_name +
                                 " requires a cluster secret (--secret-file)");
    } else if (me.secret) {
      auto want = Proof(*me.secret, "pstrain-server", hello.nonce, server.nonce, me.cluster_id);
      if (!ProofEquals(want, reply->proof)) {
        verdict = PermissionDenied("cluster secret mismatch: " + options.peer_name +
                                   " did not prove the secret");
      }
      proof.proof = Proof(*me.secret, "pstrain-client", hello.nonce, server.nonce, me.cluster_id);
    }
    if (!verdict.ok()) {
      proto::Envelope err = ErrorEnvelope(2, verdict);
      co_await conn->WriteNow(err);
      co_return verdict;
    }
    proto::Envelope proof_env{2, false, options.generation, proof};
    co_await conn->WriteNow(proof_env);
    auto second = co_await conn->ReadFrame(nullptr);
    if (!second.ok()) co_return second.status();
    if (!second->status.ok()) co_return second->status;
    if (const auto* e = BodyAs<proto::Error>(*second)) {
      co_return PermissionDenied(options.peer_name +
                                 " refused the connection: " + StatusFromError(*e).message());
    }
    if (BodyAs<proto::Ack>(*second) == nullptr)
      co_return ProtocolError(options.peer_name + ": expected Ack");
    co_return Status::Ok();
  }

  void Start() {
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

  // Whether a reply's payload of `bytes` goes straight into a call's `into`: a reply, and
  // `into` given with exactly that size.
  static bool FitsInto(const std::vector<std::span<std::byte>>& into, const proto::Envelope& env,
                       uint64_t bytes) {
    if (into.empty() || !env.reply) return false;
    uint64_t total = 0;
    for (auto s : into) total += s.size();
    return total == bytes;
  }

  std::optional<std::vector<std::span<std::byte>>> Sink(const proto::Envelope& env,
                                                        uint64_t bytes) {
    std::lock_guard lock(mu);
    auto it = pending.find(env.request_id);
    if (it == pending.end() || !FitsInto(it->second.into, env, bytes)) return std::nullopt;
    it->second.receiving = true;
    return it->second.into;
  }

  // DeadlineExceeded for call `what` after `timeout` (+ why, when there is more to say).
  Status Expired(const char* what, Millis timeout, const std::string& why = "") const {
    return DeadlineExceeded(name + ": " + what + " did not complete within " +
                            std::to_string(timeout.count()) + " ms" + why);
  }

  // Strand only: returns once ReadLoop owns the reads (at once unless ShouldPark).
  // Returns true when it will own them for good: no caller can take them any more.
  awaitable<bool> Park() {
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

  // A frame read by ReadLoop (on_strand) or by a caller that owns the reads, not the
  // caller's own reply: a reply goes to its call (whose `done` runs on the strand).
  void Deliver(InFrame& frame, bool on_strand) {
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

  awaitable<void> ReadLoop() {
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

  awaitable<void> HeartbeatLoop() {
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

  // Fails the calls whose deadline has passed, every time the earliest deadline comes
  // (and at least every second). Strand only.
  awaitable<void> SweepLoop() {
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

  // Marks the connection broken and fails every call except one being received into
  // (the reader finishes that one once the socket is closed). Strand only.
  void Break(const Status& why) {
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
  // Set when the reader loop has exited: only then may a call being received into fail.
  bool reader_done = false;  // strand only

  // Client::CallAsync, without ending sync_only (CallSync's fallback uses it too).
  void Call(proto::Body body, OutPayload payload, std::vector<std::span<std::byte>> reply_into,
            Millis timeout, std::function<void(Result<Reply>)> done) {
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

  // The deadline of pending call `id` (min() when there is none).
  Clock::time_point DeadlineOf(uint64_t id) const {
    std::lock_guard lock(mu);
    auto it = pending.find(id);
    return it == pending.end() ? Clock::time_point::min() : it->second.deadline;
  }

  // CallSync's fast path: the calling thread takes the reads from a parked ReadLoop
  // (false: someone else reads, take the ordinary path).
  bool TakeReads() {
    std::lock_guard lock(mu);
    if (read_owner != ReadOwner::kParked || !sync_only.load(std::memory_order_relaxed) || broken ||
        read_failed || closed_by_user) {
      return false;
    }
    read_owner = ReadOwner::kCaller;
    return true;
  }

  // CallSync on the calling thread, which owns the reads (TakeReads): sends the request,
  // then reads frames until its own reply is in, handing other calls' replies over as
  // ReadLoop would. The call is not in `pending`: its deadline is this thread's (poll's
  // timeout), and so is its failure when the connection breaks.
  Result<Reply> CallReading(proto::Body body, OutPayload payload,
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
        failed =
            Unavailable(name + ": connection dropped: a reply stopped in the middle of a frame");
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

  // Registers the call on the calling thread, then sends its frame (from this thread
  // when nothing is queued ahead of it: Conn::Send), so the call is known before its
  // reply can arrive; the frame is counted in the write queue at once (WaitForRoom sees
  // it). A broken connection fails the call on the strand.
  void StartCall(uint64_t id, Pending p, const proto::Envelope& env, OutPayload payload) {
    bool wake_sweeper = false, wake_reader = false;
    Status why;
    {
      std::lock_guard lock(mu);
      if (broken) {
        why = health_.ok() ? Unavailable(name + ": not connected") : health_;
      } else {
        wake_sweeper = p.deadline < sweep_at;
        wake_reader = read_owner == ReadOwner::kParked;  // its reply needs a reader
        pending.emplace(id, std::move(p));
      }
    }
    if (!why.ok()) {
      asio::post(conn->executor(), [done = std::move(p.done), why]() { done(why); });
      return;
    }
    if (wake_sweeper)
      asio::post(conn->executor(), [self = shared_from_this()] { self->sweep_timer->cancel(); });
    if (wake_reader) WakeReader();
    conn->Send(env, std::move(payload));  // dropped if the connection is closed by then
  }
};

Result<std::shared_ptr<Client>> Client::Connect(Runtime& runtime, ClientOptions options) {
  const auto deadline = Clock::now() + options.connect_deadline;
  Millis backoff = options.backoff_initial;
  const std::string who =
      options.peer_name + " at " + options.host + ":" + std::to_string(options.port);
  const std::stop_token stop = options.stop;
  int attempts = 0;
  auto aborted = [&] {
    return Aborted("stopped while connecting to " + who + " (" + std::to_string(attempts) +
                   (attempts == 1 ? " attempt)" : " attempts)"));
  };
  std::mutex wait_mu;
  std::condition_variable_any wait_cv;
  for (;;) {
    if (stop.stop_requested()) return aborted();
    ++attempts;
    auto impl = std::make_shared<Impl>(runtime, options);
    auto remaining = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    Millis budget = std::max(Millis{100}, std::min(options.handshake_timeout, remaining));
    auto strand = asio::make_strand(runtime.impl().Next());
    std::future<Status> fut = asio::co_spawn(
        strand, [impl, budget] { return impl->Attempt(budget); }, asio::use_future);
    Status st;
    {
      // A stop during the attempt closes its socket: the connect or handshake ends at once.
      std::stop_callback on_stop(stop, [impl, strand] {
        asio::post(strand, [impl] {
          if (impl->conn) impl->conn->CloseOnStrand();
        });
      });
      try {
        st = fut.get();
      } catch (const std::exception& e) {
        st = Unavailable(e.what());
      }
    }
    if (st.ok() && stop.stop_requested()) {
      impl->conn->Close();
      return aborted();
    }
    if (st.ok()) {
      impl->Start();
      PS_LOG(Debug) << "connected to " << who << " after " << attempts << " attempt(s)";
      return std::shared_ptr<Client>(new Client(std::move(impl)));
    }
    if (stop.stop_requested()) return aborted();
    if (st.code() == Code::kPermissionDenied || st.code() == Code::kProtocol) return st;
    if (Clock::now() + backoff >= deadline) {
      return Unavailable("cannot reach " + who + " within " +
                         std::to_string(options.connect_deadline.count() / 1000.0).substr(0, 5) +
                         " s (" + std::to_string(attempts) + " attempts): " + st.message());
    }
    std::unique_lock lock(wait_mu);
    wait_cv.wait_for(lock, stop, backoff, [] { return false; });
    backoff = std::min(options.backoff_max, backoff * 2);
  }
}

Client::~Client() { Close(); }

const std::string& Client::peer_name() const { return impl_->options.peer_name; }

uint64_t Client::peak_queued_bytes() const { return impl_->conn->peak_queued_bytes(); }

void Client::SetGeneration(uint64_t generation) { impl_->generation.store(generation); }

Status Client::health() const {
  std::lock_guard lock(impl_->mu);
  return impl_->health_;
}

void Client::OnBroken(std::function<void(const Status&)> callback) {
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

// Asio TCP transport: framed, verified, authenticated request/reply connections.
// This header is Asio-free (pimpl) so the ps, worker and chief code compile fast.
//
// Threading: a Runtime owns one io_context per I/O thread, each run by its thread alone
// (connections are spread over them round robin). Each connection lives on its own strand with one reader and one writer coroutine. Server request handlers
// run on a separate handler pool, except requests that ServerOptions::run_inline accepts
// (cheap ones: small pulls and pushes), whose handler runs on the I/O thread that read
// them and must not block. A reply (or a call) sent while nothing is queued ahead of it
// is written at once by the thread that sends it, with a non-blocking send over plain
// TCP (on the connection's strand; for a client call, on the calling thread); only what
// the socket does not take, and everything over TLS, goes through the writer coroutine.
// An inline handler may build such a reply while sending it (DirectReply): memory it may
// use only for a while (a store shard's values under its locks) is written at once, and
// only what the socket does not take is copied for the writer.
// A client's replies are read by its reader coroutine, except that over plain TCP a
// CallSync on a client that never made a Call or CallAsync, made while no other call or
// heartbeat waits for an answer, reads its own reply on the calling thread (poll and
// recv; ClientOptions::caller_reads): the reader stays parked meanwhile, and replies to
// other calls that the caller reads first are handed to them on the strand.
// Client::Call is thread-safe; never block on its future from a Runtime thread or a
// handler of the same Runtime.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/net/buffer.h"
#include "libps/net/frame.h"
#include "libps/net/tls.h"
#include "libps/proto/messages.h"

namespace ps::net {

using Millis = std::chrono::milliseconds;

// Payload buffers of 1 MiB and more are recycled process-wide instead of freed: on a
// VM a fresh 64 MiB buffer costs ~30 ms of page faults, more than moving it over
// loopback (~20 ms; see scripts/bench-pushpull.sh). At most 256 MiB stay idle (least
// recently returned evicted first). Thread-safe.
// An idle buffer of exactly `bytes`, else a new one; uninitialised either way.
Buffer TakeBuffer(size_t bytes);
// Hands a buffer back for TakeBuffer (small or moved-from buffers are just freed).
void RecycleBuffer(Buffer buffer);
// A payload owning `buffer` that is recycled once the frame has been written.
OutPayload RecycledPayload(Buffer buffer);

// Owns the io_contexts (one per I/O thread) and their threads. Destroy it after every
// Server and Client of it.
class Runtime {
 public:
  explicit Runtime(int io_threads = 2);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Who this process is in the handshake.
struct Identity {
  proto::Role role = proto::Role::kUnknown;
  int32_t task_index = 0;
  uint64_t cluster_id = 0;
  std::optional<std::string> secret;  // cluster secret; nullopt = none configured
};

struct PeerInfo {
  proto::Role role = proto::Role::kUnknown;
  int32_t task_index = 0;
  std::string address;       // "127.0.0.1:53122"
  std::string Name() const;  // "worker:1"
};

// A reply written while its payload is assembled, part by part in payload order, so that
// memory valid only for a while (a store shard's values, under its locks) goes to the
// socket without being copied first (Responder::BeginDirect). Move-only; used on the
// thread that began it, which holds the connection's write lock until Finish or Fail:
// nothing else is written to the connection in between.
class DirectReply {
 public:
  struct Impl;
  explicit DirectReply(std::unique_ptr<Impl> impl);
  DirectReply(DirectReply&&) noexcept;
  DirectReply& operator=(DirectReply&&) noexcept;
  // Unfinished: Fail(Internal("request dropped without a reply")).
  ~DirectReply();

  // The reply's own memory for payload bytes [offset, offset + bytes): the caller fills
  // it, then appends it with Add. Valid until Finish or Fail.
  std::span<std::byte> Owned(uint64_t offset, size_t bytes);
  // The next part of the payload, from Owned: written with the next borrowed part, or by
  // Finish.
  void Add(std::span<const std::byte> part);
  // The next part of the payload, from memory valid only during this call: written now,
  // after everything before it, as far as the socket takes it without blocking; what it
  // does not take is copied into the reply's own memory before this returns.
  void Borrow(std::span<const std::byte> part);
  // Every payload byte was appended: the rest of the frame goes to the writer.
  void Finish();
  // Answers with `status` instead: an error frame when nothing of this one was written
  // yet, else (the frame cannot be cut short) the connection is closed.
  void Fail(const Status& status);

 private:
  std::unique_ptr<Impl> impl_;
};

// Answers one request exactly once. A Responder destroyed without answering replies
// Internal("request dropped"). Move-only; any thread may use it.
class Responder {
 public:
  struct State;
  explicit Responder(std::shared_ptr<State> state) : state_(std::move(state)) {}
  Responder(Responder&&) = default;
  Responder& operator=(Responder&&) = default;
  ~Responder();
  void Reply(proto::Body body, OutPayload payload = {});
  void Fail(const Status& status);
  // Reply(body, <payload_bytes of payload>) as a DirectReply, which then answers the
  // request, when the frame can be written at once: on the connection's strand (an
  // inline handler), over plain TCP, with nothing queued or being written. nullopt
  // otherwise (use Reply; the same bytes reach the wire either way).
  std::optional<DirectReply> BeginDirect(const proto::Body& body, uint64_t payload_bytes);

 private:
  std::shared_ptr<State> state_;
};

// Sees a request's payload while it arrives (ServerOptions::watch_payload), so that work
// on its first bytes overlaps receiving the rest.
class PayloadWatcher {
 public:
  virtual ~PayloadWatcher() = default;
  // Called on the I/O thread after each read of the payload with the bytes received so
  // far (a prefix of the payload; the last call has all of it). Must not block.
  virtual void Arrived(std::span<const std::byte> received) = 0;
};

struct Request {
  PeerInfo peer;
  proto::Envelope envelope;
  Buffer payload;
  // The watcher ServerOptions::watch_payload gave this request (its last Arrived call
  // had the whole payload); null when none watched it.
  std::shared_ptr<PayloadWatcher> watcher = nullptr;
};
using RequestHandler = std::function<void(Request request, Responder responder)>;

// Until its handshake has passed, a peer may send only frames within kHandshakeLimits;
// one that announces more is dropped before anything is allocated for it.
struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the kernel picks one; see Server::port()
  Identity identity;
  Limits limits;  // per frame, after the handshake
  int handler_threads = 2;
  // Requests for which this returns a token (non-null) are handled right on the I/O
  // thread that read them, without a hand-off to the handler pool (small pulls and
  // pushes: see server::Service::Inline); the server drops the token once the handler
  // has returned, so a token that holds a lock (shared) keeps whatever takes it
  // exclusively from starting while an inline handler runs. Called on the I/O thread;
  // must be quick and must not block. Each I/O thread runs one io_context alone, so a
  // handler that blocks stalls every connection of that thread, heartbeats included: it
  // must not wait on a lock that may be held for long, touch the disk or compute much
  // (it may still keep its Responder and answer later from any thread).
  // Unset: every request goes to the pool.
  std::function<std::shared_ptr<void>(const Request&)> run_inline;
  // Called on the I/O thread once a request's envelope is read, before its payload (only
  // for payloads of at least watch_payload_min_bytes): a watcher returned is told as the
  // payload arrives (PayloadWatcher::Arrived) and handed to the handler with the
  // request. If the connection breaks first, the watcher is dropped without the whole
  // payload (and the request never reaches a handler). Same rules as run_inline: quick,
  // never blocking. Unset or null: the payload is read whole first.
  std::function<std::shared_ptr<PayloadWatcher>(const PeerInfo&, const proto::Envelope&,
                                                uint64_t payload_bytes)>
      watch_payload;
  uint64_t watch_payload_min_bytes = uint64_t{1} << 20;
  Millis handshake_timeout{10000};
  // Open connections, handshakes in progress included; more are refused (an Error frame
  // saying so, then closed) and logged, rate-limited per address.
  int max_connections = 1024;
  // Per connection: requests being handled at once; no further request is read from
  // that peer until one is answered.
  int max_in_flight = 64;
  // Per connection: no further request is read while this many bytes of replies wait
  // to be written. (Replies of requests already in flight are still queued, so a
  // queue holds at most this plus max_in_flight replies.)
  uint64_t max_write_queue_bytes = uint64_t{64} << 20;
  // Inbound payload bytes held at once over all connections (until the handler frees or
  // recycles the payload). A frame waits for room before its payload is allocated; a
  // frame whose payload alone exceeds the budget is answered with an error.
  uint64_t payload_budget_bytes = uint64_t{1} << 30;
  // Mutual TLS before the Hello; null: plain TCP. Refused peers get no reason over a
  // TLS server (the connection is closed before its TLS handshake).
  std::shared_ptr<TlsContext> tls;
  // Called once a peer's Hello is verified; a non-OK status refuses it with that message.
  std::function<Status(const proto::Hello&)> admit;
};

class Server {
 public:
  // Binds and listens (SO_REUSEADDR); fails naming the address when it cannot.
  static Result<std::unique_ptr<Server>> Start(Runtime& runtime, ServerOptions options,
                                               RequestHandler handler);
  ~Server();
  uint16_t port() const;

  // Counters since Start, over every connection after its handshake. Heartbeat Pings
  // are answered on the I/O thread: their bytes count, they are not requests.
  struct Stats {
    uint64_t requests = 0;         // requests handed to a handler (the pool's or inline)
    uint64_t inline_requests = 0;  // of them, handled on the I/O thread (run_inline)
    uint64_t queue_depth = 0;      // requests admitted but not yet started by a handler thread
    uint64_t max_queue_depth = 0;  // the highest queue_depth since the previous stats() call
    uint64_t bytes_received = 0;   // whole frames read (header + envelope + payload)
    uint64_t bytes_sent = 0;       // whole frames queued for sending (replies, errors, Ping acks)
    // The bounds, now: open connections (handshakes included) and those refused since
    // Start; connections not reading because of max_in_flight or the write queue; frames
    // waiting for payload budget; inbound payload bytes held; bytes waiting to be written.
    uint64_t connections = 0;
    uint64_t refused_connections = 0;
    uint64_t paused_readers = 0;
    uint64_t budget_waiters = 0;
    uint64_t payload_bytes = 0;
    uint64_t write_queue_bytes = 0;
    uint64_t peak_write_queue_bytes = 0;  // the most any one connection had queued, since Start
    // Bytes of buffers allocated for inbound envelopes and payloads since Start, the
    // handshake's frames (and strangers') included; not the 32 KiB read-ahead buffer each
    // authenticated connection holds (docs/design/protocol.md, Bounds).
    uint64_t inbound_buffer_bytes = 0;
  };
  // Thread-safe. Resets max_queue_depth to the current depth: the window of the maximum
  // is the time between two calls. With reset_max false (a scraper that must not steal
  // the chief's window) it is left as it is.
  Stats stats(bool reset_max = true) const;
  // When a frame from a chief (a request or a heartbeat) last arrived, or since Start when
  // none has. Thread-safe.
  std::chrono::steady_clock::time_point last_chief_frame() const;

  // Stops accepting, waits for running handlers, flushes their replies and closes every
  // connection (at most ~3 s for peers that do not read). Idempotent. Not from a handler.
  void Close();
  struct Impl;

 private:
  explicit Server(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

struct ClientOptions {
  std::string host;
  uint16_t port = 0;
  std::string peer_name;  // "ps:1"; every error names it
  Identity identity;
  Limits limits;
  // Connect: retry refused/unreachable with exponential backoff until the deadline.
  Millis connect_deadline{60000};
  // Connect gives up (Aborted) as soon as a stop is requested on it: between attempts at
  // once, during an attempt by closing its socket. Default: never.
  std::stop_token stop;
  Millis backoff_initial{20};
  Millis backoff_max{2000};
  Millis handshake_timeout{10000};
  Millis call_timeout{120000};      // default deadline of a call
  Millis heartbeat_interval{1000};  // 0: no heartbeat
  Millis heartbeat_timeout{5000};   // silence longer than this breaks the connection
  uint64_t generation = 0;          // stamped on every request
  // A call made off the Runtime's threads blocks while this many bytes wait to be
  // written to the peer (calls made on them are queued regardless). 0: no bound.
  uint64_t max_write_queue_bytes = uint64_t{64} << 20;
  std::shared_ptr<TlsContext> tls;  // mutual TLS before the Hello; null: plain TCP
  // Over plain TCP, while no Call or CallAsync has been made on this client: a CallSync
  // made when no other call is waiting for a reply reads its reply on the calling thread
  // (poll and recv) instead of being handed it by an I/O thread, which saves a thread
  // wake-up per call (~the cost of a small call's transport: docs/design/performance.md,
  // "Push and pull"). The I/O thread's reader then waits (parked) while nothing is expected,
  // so a peer that closes the connection is noticed at the next call or heartbeat rather
  // than at once.
  // false: every reply is read by the I/O thread (and no extra descriptor is held).
  bool caller_reads = true;
};

struct Reply {
  proto::Envelope envelope;
  Buffer payload;  // empty when the payload went into the call's reply_into
  bool payload_in_place = false;
};

class Client {
 public:
  // Blocks until connected and the handshake passed, or fails: Unavailable naming the
  // peer after the deadline; PermissionDenied at once when the peer refuses us; Aborted
  // when options.stop is requested first.
  static Result<std::shared_ptr<Client>> Connect(Runtime& runtime, const ClientOptions& options);
  ~Client();

  // Sends a request. The reply's Error body becomes the Status. When `reply_into` is
  // given and its total size equals the reply payload, the payload is read straight
  // into it (the spans must stay valid until the future is ready). Thread-safe.
  std::future<Result<Reply>> Call(proto::Body body, OutPayload payload = {},
                                  std::vector<std::span<std::byte>> reply_into = {},
                                  Millis timeout = Millis{0});
  // The same with a callback instead of a future: `done` runs exactly once, on an I/O
  // thread, and must not block.
  void CallAsync(proto::Body body, OutPayload payload, std::vector<std::span<std::byte>> reply_into,
                 Millis timeout, std::function<void(Result<Reply>)> done);
  // Call and wait for the reply (lighter than Call(...).get(): no std::promise). Not on a
  // Runtime thread. Aborted if the call is dropped unanswered (its Runtime stopped).
  // With ClientOptions::caller_reads (plain TCP, no Call/CallAsync ever made on this
  // client, the reader parked) the calling thread reads the reply itself; the results
  // are the same: DeadlineExceeded at the deadline (the connection stays up; a frame
  // that has begun is read to its end first, and a peer that stalls inside one is ended
  // by the heartbeat; without heartbeats a deadline inside a frame drops the connection,
  // as the stream cannot be resynchronised), Unavailable when the connection is lost,
  // Aborted after Close().
  Result<Reply> CallSync(proto::Body body, OutPayload payload = {},
                         std::vector<std::span<std::byte>> reply_into = {},
                         Millis timeout = Millis{0});

  const std::string& peer_name() const;
  // The most bytes that waited to be written at once, since Connect.
  uint64_t peak_queued_bytes() const;
  // Passes of the deadline sweeper since Connect (one per wake-up). Testing.
  uint64_t sweeps_for_testing() const;
  // CallSync calls that read their reply on the calling thread (ClientOptions::caller_reads)
  // since Connect. Testing.
  uint64_t caller_reads_for_testing() const;
  // The generation stamped on requests sent from now on (a worker stamps its pushes with
  // the generation of the chief that started its job). Thread-safe.
  void SetGeneration(uint64_t generation);
  // OK while the connection is up; afterwards the reason it broke.
  Status health() const;
  // Called once, on an I/O thread, when the connection breaks (not on Close()); nullptr
  // detaches. Set after the break, it is called at once.
  void OnBroken(const std::function<void(const Status&)>& callback);
  void Close();
  struct Impl;

 private:
  explicit Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace ps::net

// Internal to libps/net: the framed connection under Server and Client, and the Asio
// pieces they share. Nothing outside libps/net includes this header.
//
// The I/O model: over plain TCP every byte of a frame is moved by a non-blocking system
// call (recv, sendmsg: Conn::Recv, Conn::SendSome) made by the thread that has the work
// at that moment: the thread that sends a frame writes it when nothing is ahead of it, the
// strand's reader (or a client's calling thread, ReadFrameBlocking) reads it. Only when
// the socket has no bytes (or no room) does that thread wait for readiness: a coroutine
// on the strand through Asio's reactor (async_wait), a calling thread through poll().
// Bytes go to another thread only when their own cannot move them: what the socket did
// not take, and frames behind others, go to the writer coroutine on the strand.
// Why this model: a 4 KiB round trip on a VM is bound by thread wake-ups (~15-20 us each;
// the push/pull benchmark's small sizes, scripts/bench-pushpull.sh), and a reply handed
// from an I/O thread to the caller that waits for it, or a frame handed to a writer
// coroutine, costs one wake-up more than the call itself.
// One exception on plain TCP: a read on the strand into a span of kReactorReadBytes or
// more (a big payload) is Asio's async_read, whose reactor performs each recv as the
// socket turns readable; resuming the reader's coroutine for every socket buffer instead
// made a 64 MiB push 13 % slower (scripts/bench-pushpull.sh --compare). Writes need no
// such exception (a 64 MiB pull through the writer coroutine is as fast as before).
// TLS is the other exception: OpenSSL owns its records and their retries, so a TLS
// connection's bytes go through asio::ssl::stream's reads and writes on the strand (no
// direct writes, no reads on the calling thread).
#pragma once

#include <utility>  // before Boost's coroutine headers under GCC 12 (STYLE.md)

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "libps/net/bounds.h"
#include "libps/net/frame.h"
#include "libps/net/tls.h"
#include "libps/net/transport.h"
#include "libps/proto/codec.h"

namespace ps::net {

namespace asio = boost::asio;
using asio::awaitable;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// One io_context per I/O thread, each run by that thread alone: a completion never wakes
// another I/O thread to take over the reactor (with one io_context run by two threads,
// asio does that on every event: ~15 us per small round trip on a 2-core VM, see
// docs/design/protocol.md, "Threading"). Connections are spread over them round robin.
// An io_context whose services can be shut down before any io_context is destroyed:
// shutting one down destroys the handlers queued on it, which may hold the last reference
// to an object (a Server::Impl, a Conn) whose socket belongs to another io_context.
class IoContext : public asio::io_context {
 public:
  using asio::io_context::io_context;
  using asio::io_context::shutdown;
};

struct Runtime::Impl {
  std::vector<std::unique_ptr<IoContext>> ios;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  std::vector<std::thread> threads;
  std::atomic<size_t> next{0};
  // The io_context for the next connection (or acceptor, resolver).
  asio::io_context& Next() {
    return *ios[next.fetch_add(1, std::memory_order_relaxed) % ios.size()];
  }
  bool RunningInThisThread() const {
    for (const auto& io : ios) {
      if (io->get_executor().running_in_this_thread()) return true;
    }
    return false;
  }
};

struct TlsContext::Impl {
  asio::ssl::context ctx{asio::ssl::context::tls};
};

inline constexpr int kMaxBadFrames = 64;  // recoverable bad frames before a connection is dropped

proto::Envelope ErrorEnvelope(uint64_t request_id, const Status& st);
Status StatusFromError(const proto::Error& e);

// One inbound frame. `status` not OK: the envelope was bad (or its payload over the
// budget) but the frame was consumed, so the connection is still in sync.
struct InFrame {
  Status status;
  proto::Envelope env;
  Buffer payload;
  bool in_place = false;
  uint64_t wire_bytes = 0;                  // header + envelope + payload as read
  std::shared_ptr<PayloadWatcher> watcher;  // what the PayloadWatch chose (null: none)
};

template <typename T>
const T* BodyAs(const InFrame& f) {
  return std::get_if<T>(&f.env.body);
}

// Chooses where a frame's payload goes: a list of spans whose sizes sum to the payload
// length, or nullopt for a fresh Buffer. Runs on the thread that reads the frame: the
// connection's strand, or a client's caller that reads its own reply.
using PayloadSink = std::function<std::optional<std::vector<std::span<std::byte>>>(
    const proto::Envelope&, uint64_t)>;
// Chooses whether a payload read into a fresh Buffer is watched as it arrives (a server's
// ServerOptions::watch_payload): null, or the watcher to tell. Runs on the strand.
using PayloadWatch =
    std::function<std::shared_ptr<PayloadWatcher>(const proto::Envelope&, uint64_t)>;

// Figures a server shares with its connections (relaxed atomics; Server::Stats).
struct ConnCounters {
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> inbound_buffer_bytes{0};
  std::atomic<uint64_t> write_queue_bytes{0};
  std::atomic<uint64_t> peak_write_queue_bytes{0};
  std::atomic<uint64_t> paused_readers{0};
  std::atomic<uint64_t> budget_waiters{0};
};

struct ConnOptions {
  Limits limits;  // after Authenticated(); kHandshakeLimits before
  // Server: no new request is read while this many bytes wait to be written. Client:
  // Call blocks (off the Runtime's threads) while they do. 0: no bound.
  uint64_t max_write_queue_bytes = 0;
  // Server: no new request is read while this many are being handled. 0: no cap.
  int max_in_flight = 0;
  std::shared_ptr<PayloadBudget> budget;   // null: payloads are not budgeted (clients)
  std::shared_ptr<ConnCounters> counters;  // null: not counted
  std::shared_ptr<TlsContext> tls;         // null: plain TCP
  // Client: callers may read their replies themselves (ReadFrameBlocking), so Authenticated
  // makes blocking_fd() (plain TCP).
  bool caller_reads = false;
};

// ReadFrameBlocking's deadlines: until the frame's first byte, and after it (max: none).
struct BlockingDeadlines {
  Clock::time_point start;
  Clock::time_point frame = Clock::time_point::max();
};

// Bytes read ahead per connection once its handshake passed: a small frame (header,
// envelope and payload) usually arrives whole in one read system call.
inline constexpr size_t kReadAheadBytes = size_t{32} << 10;
// A read on the strand into at least this many bytes goes through Asio's reactor whole.
inline constexpr size_t kReactorReadBytes = size_t{1} << 20;

// A framed TCP connection on a strand (the socket's executor must be one), in the I/O
// model above. Reading is done by its owner's loop (or, on a client, by a caller that
// took the reads over: ReadFrameBlocking), through a read-ahead buffer after the
// handshake. Writes go through a queue drained by one writer coroutine, except that over
// plain TCP, once the handshake passed, a frame sent while nothing else is queued or
// being written is written at once by the sending thread (the writer takes over whatever
// the socket did not accept): on the strand always, from other threads on connections
// whose reader never waits for the writer (no max_in_flight, no payload budget: a client's).
// Files: conn.cc (lifecycle, the byte layer), conn_read.cc, conn_write.cc, direct_reply.cc.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(tcp::socket socket, ConnOptions options);
  ~Conn();

  tcp::socket& socket() { return socket_; }
  const std::string& address() const { return address_; }  // "127.0.0.1:53122"
  const std::string& host() const { return host_; }        // "127.0.0.1"
  auto executor() { return socket_.get_executor(); }
  // True on a thread that is running this connection's strand.
  bool OnStrand() const { return strand_ && strand_->running_in_this_thread(); }
  // With TLS: the TLS handshake, as the accepting or the dialing side; OK at once
  // without. PermissionDenied when the peer's certificate (or ours) is not accepted,
  // Unavailable when the connection broke.
  awaitable<Status> SecureHandshake(bool as_server);
  // The handshake passed: frames may now use the full limits, reads go through the
  // read-ahead buffer and (plain TCP) frames may be written directly. Strand only.
  void Authenticated();

  // Reads one frame. Returns a non-OK Result when the stream cannot continue (bad
  // header); throws boost::system::system_error on socket errors and when the
  // connection closes while the frame waits for payload budget.
  awaitable<Result<InFrame>> ReadFrame(const PayloadSink& sink,
                                       const PayloadWatch& watch = nullptr);
  // The same on the calling thread, blocking (poll, then a non-blocking recv) on
  // blocking_fd(): for a client's caller that owns the reads (Client::Impl::read_owner;
  // the caller keeps a reference to this Conn). Returns nullopt when `deadline.start`
  // passes before the frame's first byte (nothing consumed: the stream is still in sync);
  // DeadlineExceeded when `deadline.frame` passes in the middle of a frame, Unavailable ("connection
  // lost: ...") on a socket error or EOF, and ReadFrame's status for a bad header (the
  // stream cannot continue after any of these). Not with a payload budget (servers).
  Result<std::optional<InFrame>> ReadFrameBlocking(const PayloadSink& sink,
                                                   const BlockingDeadlines& deadline);
  // A dup() of the socket (close-on-exec) that Authenticated() makes for a client with
  // options.caller_reads over plain TCP (-1 otherwise), closed
  // only by the destructor: a thread reading it never sees its number reused, while
  // CloseOnStrand's shutdown() still ends its reads (EOF).
  int blocking_fd() const { return read_fd_; }
  // Server reader: returns once a new request may be read (fewer than max_in_flight
  // being handled and the write queue under its bound) or the connection closed.
  awaitable<void> WaitReadable();
  // A request read from this connection is now being handled; Send(..., ends_request)
  // of its reply ends it. Strand only.
  void BeginRequest() { ++in_flight_; }

  // Writes one frame now; only for the handshake, before the writer runs.
  awaitable<void> WriteNow(const proto::Envelope& env);
  // Queues a frame. Thread-safe. The envelope is encoded on the calling thread. On the
  // connection's strand the frame is queued (or written) at once, else posted there.
  void Send(const proto::Envelope& env, OutPayload payload, bool close_after = false,
            bool ends_request = false);
  // A frame for DirectReply (Responder::BeginDirect): the reply to `request_id`, header
  // and envelope encoded now, its payload of `payload_bytes` written as it is assembled.
  // Only on the strand, over plain TCP after the handshake, with nothing queued or being
  // written (null otherwise: use Send); holds write_mu_ until the reply is finished.
  std::unique_ptr<DirectReply::Impl> BeginDirect(uint64_t request_id, const proto::Body& body,
                                                 uint64_t payload_bytes);
  // Blocks while the write queue is at its bound and the connection is open. Not on a
  // Runtime thread (only the writer there drains the queue).
  void WaitForRoom();
  uint64_t queued_bytes() const { return queued_bytes_.load(); }
  uint64_t peak_queued_bytes() const { return peak_queued_bytes_.load(); }

  void StartWriter();
  // Closes the socket; pending reads and writes fail. Call on the strand.
  void CloseOnStrand();
  void Close();
  // Closes once every frame queued before this call has been written. Thread-safe.
  void CloseAfterFlush();
  bool closed() const { return closed_.load(); }

 private:
  friend class DirectReply;  // writes its frame with TryWrite and hands the rest to the writer
  friend struct DirectReply::Impl;
  struct Out {
    std::array<uint8_t, kFrameHeaderBytes> header;
    std::vector<uint8_t> env;
    OutPayload payload;
    uint64_t bytes = 0;  // header + envelope + payload
    uint64_t sent = 0;   // bytes of it already written (a direct write the socket cut short)
    bool close_after = false;
  };

  // A frame of `env` and a payload of `payload_bytes` (parts not set), encoded.
  static Out Frame(const proto::Envelope& env, uint64_t payload_bytes);
  // `bytes` of a frame are now queued (or being written): the queue's size and peak, the
  // counters.
  void Queued(uint64_t bytes);
  // Strand only: a request being handled is answered (BeginRequest).
  void EndRequest();
  // Strand only: queues `out` (ends_request: it answers a request being handled), or
  // writes it at once when the writer is idle and nothing is queued. `posted`: Send
  // posted it from another thread (counted in posted_).
  void Enqueue(Out out, bool ends_request, bool posted);
  // write_mu_ held, nothing queued or being written: writes what the socket takes of
  // `out` now. Returns false on a socket error.
  bool TryWrite(Out& out);
  // Bytes [out.sent, end) of `out` as gather buffers, appended to `bufs`.
  static void AppendBuffers(const Out& out, std::vector<asio::const_buffer>& bufs, uint64_t end);
  // How much of `out` may be written now: all of it, or with a PayloadProgress the frame
  // up to the payload bytes it has published.
  static uint64_t Writable(const Out& out);
  // The writer, after writing `out` (a payload with a PayloadProgress, the last of its
  // batch) up to `sent`: writes the rest as it is published; ec set when the connection
  // closed or the payload failed first.
  awaitable<void> FinishProgressive(Out& out, uint64_t sent, error_code& ec);
  // Fills `dst` from the read-ahead buffer, then from the stream.
  awaitable<void> ReadSpan(std::span<std::byte> dst);
  // ReadSpan that tells `watcher` what has arrived after each read of at least
  // kWatchStepBytes (and once at the end, with all of `dst`).
  awaitable<void> ReadSpanWatched(std::span<std::byte> dst, PayloadWatcher& watcher);
  // ReadSpan on the calling thread (ReadFrameBlocking). `started`: set once a byte of
  // the frame is consumed. DeadlineExceeded once the deadline for where it is passes.
  Status ReadSpanBlocking(std::span<std::byte> dst, const BlockingDeadlines& deadlines,
                          bool& started);
  // Moves what the read-ahead buffer holds of `dst` into it and drops that part of `dst`.
  size_t TakeReadAhead(std::span<std::byte>& dst);
  // The steps ReadFrame and ReadFrameBlocking share; only moving the bytes differs.
  // The header: checked against the limits (with a hint for a peer that speaks TLS).
  Result<FrameHeader> CheckHeader(const std::array<uint8_t, kFrameHeaderBytes>& hb);
  // The envelope's bytes into `frame`; false when they do not decode (frame.status says
  // why, with the request id if it could be read): the payload is then to be discarded.
  bool DecodeEnvelope(const FrameHeader& header, const std::vector<uint8_t>& env_bytes,
                      InFrame& frame);
  // Where the payload goes when the sink takes it (frame.in_place); nullopt: a fresh
  // buffer (AllocatePayload).
  static std::optional<std::vector<std::span<std::byte>>> SinkSpans(const PayloadSink& sink,
                                                                    InFrame& frame,
                                                                    uint64_t payload_bytes);
  void AllocatePayload(InFrame& frame, uint64_t payload_bytes, std::unique_ptr<BufferLease> lease);
  // The byte layer (the I/O model above). One recv on `fd` (the socket, or blocking_fd()),
  // non-blocking whatever the socket's mode: the bytes it put at the front of `into`; ec
  // would_block when there were none yet, eof when the peer closed, else the socket's error.
  static size_t Recv(int fd, std::span<std::byte> into, error_code& ec);
  // One sendmsg of `bufs` (the first 64 non-empty ones) on the socket, non-blocking: the
  // bytes it took; ec would_block when it took none, else the socket's error. Strand, or
  // write_mu_ held.
  size_t SendSome(std::span<const asio::const_buffer> bufs, error_code& ec);
  // Strand only: waits until the socket is readable (or writable); throws
  // boost::system::system_error when the connection closes meanwhile.
  awaitable<void> WaitReady(tcp::socket::wait_type what);
  // Reads into `into` until at least `at_least` bytes came, without the read-ahead: Recv
  // and WaitReady, or the TLS stream; how many came. Throws as ReadFrame does.
  awaitable<size_t> ReadAtLeast(std::span<std::byte> into, size_t at_least);
  // Writes all of `bufs`: SendSome, waiting for room when the socket is full, or the TLS
  // stream. ec set when the connection broke or closed.
  awaitable<void> WriteAll(std::span<const asio::const_buffer> bufs, error_code& ec);
  awaitable<void> Discard(uint64_t bytes);
  awaitable<void> Reserve(uint64_t bytes);
  awaitable<void> WaitGate();
  awaitable<void> WriteLoop();
  bool ReadBlocked() const;
  void Dequeued(uint64_t bytes);       // strand only
  void DequeuedBytes(uint64_t bytes);  // the counters only: any thread

  tcp::socket socket_;
  std::optional<asio::strand<asio::io_context::executor_type>> strand_;  // the socket's executor
  const ConnOptions options_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;  // null: plain TCP
  Limits limits_ = kHandshakeLimits;
  bool authenticated_ = false;  // strand only
  asio::steady_timer wake_;     // the writer waits on it for frames
  asio::steady_timer gate_;     // the reader waits on it for room, in-flight slots or budget
  std::string address_ = "?";
  std::string host_ = "?";
  // Guards queue_ and writing_, and the socket against being closed during a direct
  // write from another thread. Held for a non-blocking send at most, never across an
  // asynchronous operation.
  std::mutex write_mu_;
  std::deque<Out> queue_;  // guarded by write_mu_
  bool writing_ = false;   // guarded by write_mu_: the writer is writing frames
  // Guarded by write_mu_: frames Send posted to the strand that Enqueue has not taken
  // yet. While there are any, no frame is written directly from another thread: it would
  // overtake them (one thread's frames reach the wire in the order it sent them).
  uint64_t posted_ = 0;
  bool direct_writes_ = false;                  // strand only: plain TCP, authenticated
  std::atomic<bool> direct_any_thread_{false};  // direct writes off the strand too (set once)
  // Read-ahead (allocated by Authenticated): bytes [read_pos_, read_end_) are unread.
  std::unique_ptr<std::byte[]> read_buf_;
  // Strand only, or the caller that owns a client's reads (the owner changes under the
  // client's mutex, which orders these).
  size_t read_pos_ = 0, read_end_ = 0;
  int read_fd_ = -1;                       // blocking_fd()
  bool reader_waiting_ = false;            // strand only
  int in_flight_ = 0;                      // strand only
  std::atomic<bool> closed_{false};        // written on the strand
  std::atomic<uint64_t> queued_bytes_{0};  // Send adds, the writer subtracts once written
  std::atomic<uint64_t> peak_queued_bytes_{0};
};

// DirectReply's state: one frame, written on the connection's strand with its write_mu_
// held from Conn::BeginDirect to Finish or Fail. out.payload.parts are the parts appended
// so far; a borrowed part the socket did not wholly take is replaced by its copy in
// `owned` (at its payload offset, its written prefix skipped by out.sent, never read).
struct DirectReply::Impl {
  std::shared_ptr<Conn> conn;
  std::unique_lock<std::mutex> lock;  // conn->write_mu_
  Conn::Out out;                      // out.bytes: the whole frame, as announced
  uint64_t request_id = 0;
  uint64_t payload_bytes = 0;
  uint64_t appended = 0;  // payload bytes given so far
  // [payload_bytes], taken at the first need: the size the copy path takes (Service
  // Pull), so a recycled buffer of that size serves both.
  Buffer owned;
  bool broken = false;  // a write failed: the frame is dropped and the connection closed
  bool done = false;    // Finish or Fail ran
};

// Arms a timer that closes the connection unless cancelled first.
std::shared_ptr<asio::steady_timer> Watchdog(const std::shared_ptr<Conn>& c, Millis after);

}  // namespace ps::net

#include "libps/net/conn.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "libps/core/log.h"

namespace ps::net {

using asio::use_awaitable;

proto::Envelope ErrorEnvelope(uint64_t request_id, const Status& st) {
  return proto::Envelope{request_id, true, 0,
                         proto::Error{static_cast<int32_t>(st.code()), st.message()}};
}

Status StatusFromError(const proto::Error& e) {
  Code code = Code::kInternal;
  if (e.code > 0 && e.code <= static_cast<int>(Code::kInternal)) code = static_cast<Code>(e.code);
  return Status(code, e.message);
}

namespace {

// asio::transfer_all moves at most 64 KiB per system call; big payloads go in as few
// calls as the socket takes (bench_pushpull, 64 MiB: push and pull went from 0.54-0.73
// to 0.80-0.85 of raw TCP's throughput).
struct TransferAllLarge {
  size_t operator()(const error_code& ec, size_t) const { return ec ? 0 : size_t{1} << 30; }
};

void RaiseMax(std::atomic<uint64_t>& max, uint64_t value) {
  uint64_t m = max.load(std::memory_order_relaxed);
  while (value > m && !max.compare_exchange_weak(m, value, std::memory_order_relaxed)) {}
}

// A hint for a peer that fails the very first header: it may speak TLS when we do not.
std::string FirstHeaderHint(const std::array<uint8_t, kFrameHeaderBytes>& hb, bool tls) {
  if (tls) return "";
  if (hb[0] == 0x16 && hb[1] == 0x03)
    return " (the peer speaks TLS; this task runs without --tls-cert)";
  if (hb[0] == 0x15 && hb[1] == 0x03) return " (a TLS alert; the peer requires TLS)";
  return "";
}

}  // namespace

Conn::Conn(tcp::socket socket, ConnOptions options)
    : socket_(std::move(socket)),
      options_(std::move(options)),
      wake_(socket_.get_executor()),
      gate_(socket_.get_executor()) {
  error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) {
    host_ = ep.address().to_string();
    address_ = host_ + ":" + std::to_string(ep.port());
  }
  if (options_.tls)
    tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, options_.tls->impl().ctx);
  const auto ex = socket_.get_executor();  // target() points into this copy
  if (const auto* s = ex.target<asio::strand<asio::io_context::executor_type>>()) strand_ = *s;
}

Conn::~Conn() {
  // Before the socket: its destructor then closes the last descriptor of the socket,
  // which takes it out of the reactor's epoll set (Asio relies on that).
  if (read_fd_ >= 0) ::close(read_fd_);
}

void Conn::Authenticated() {
  limits_ = options_.limits;
  authenticated_ = true;
  read_buf_ = std::make_unique_for_overwrite<std::byte[]>(kReadAheadBytes);
  if (!tls_) {
    error_code ec;
    socket_.non_blocking(true, ec);
    direct_writes_ = !ec;
    direct_any_thread_ = direct_writes_ && options_.max_in_flight == 0 && !options_.budget;
    if (direct_any_thread_ && options_.caller_reads)
      read_fd_ = ::fcntl(socket_.native_handle(), F_DUPFD_CLOEXEC, 0);
  }
}

awaitable<Status> Conn::SecureHandshake(bool as_server) {
  if (!tls_) co_return Status::Ok();
  error_code ec;
  co_await tls_->async_handshake(
      as_server ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
      asio::redirect_error(use_awaitable, ec));
  if (!ec) co_return Status::Ok();
  if (ec.category() != asio::error::get_ssl_category()) {
    if (closed_) co_return Unavailable("TLS handshake timed out");
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated ||
        ec == asio::error::connection_reset) {
      co_return Unavailable(
          "the peer closed the connection in the TLS handshake (does it use TLS?)");
    }
    co_return Unavailable("TLS handshake: " + ec.message());
  }
  std::string why = ec.message();
  long verify = SSL_get_verify_result(tls_->native_handle());
  if (verify != X509_V_OK) why += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
  co_return PermissionDenied("TLS handshake failed: " + why);
}

template <typename Buffers>
awaitable<void> Conn::ReadAll(const Buffers& buffers) {
  if (tls_) {
    co_await asio::async_read(*tls_, buffers, TransferAllLarge(), use_awaitable);
  } else {
    co_await asio::async_read(socket_, buffers, TransferAllLarge(), use_awaitable);
  }
}

awaitable<size_t> Conn::ReadAtLeast(asio::mutable_buffer into, size_t at_least) {
  if (tls_)
    co_return co_await asio::async_read(*tls_, into, asio::transfer_at_least(at_least),
                                        use_awaitable);
  co_return co_await asio::async_read(socket_, into, asio::transfer_at_least(at_least),
                                      use_awaitable);
}

template <typename Buffers>
awaitable<void> Conn::WriteAll(const Buffers& buffers, error_code& ec) {
  if (tls_) {
    co_await asio::async_write(*tls_, buffers, TransferAllLarge(),
                               asio::redirect_error(use_awaitable, ec));
  } else {
    co_await asio::async_write(socket_, buffers, TransferAllLarge(),
                               asio::redirect_error(use_awaitable, ec));
  }
}

size_t Conn::TakeReadAhead(std::span<std::byte>& dst) {
  const size_t n = std::min(dst.size(), read_end_ - read_pos_);
  if (n > 0) {
    std::memcpy(dst.data(), read_buf_.get() + read_pos_, n);
    read_pos_ += n;
    dst = dst.subspan(n);
  }
  return n;
}

awaitable<void> Conn::ReadSpan(std::span<std::byte> dst) {
  for (;;) {
    TakeReadAhead(dst);
    if (dst.empty()) co_return;
    // The read-ahead is empty. Big reads go straight into `dst`.
    if (!read_buf_ || dst.size() >= kReadAheadBytes) {
      co_await ReadAll(asio::buffer(dst.data(), dst.size()));
      co_return;
    }
    read_pos_ = read_end_ = 0;
    auto into = asio::buffer(read_buf_.get(), kReadAheadBytes);
    // (An async read first tries the socket at once; data already there completes it
    // through this thread's own queue, since each io_context has one thread.)
    read_end_ = co_await ReadAtLeast(into, dst.size());
  }
}

awaitable<void> Conn::ReadSpanWatched(std::span<std::byte> dst, PayloadWatcher& watcher) {
  // Small enough that the watcher's work on one step overlaps the peer's sending of the
  // next, large enough that a step costs little beside its bytes.
  constexpr size_t kWatchStepBytes = 256 * 1024;
  const std::span<const std::byte> all = dst;
  TakeReadAhead(dst);
  for (;;) {
    if (!dst.empty()) {
      dst = dst.subspan(co_await ReadAtLeast(asio::buffer(dst.data(), dst.size()),
                                             std::min(dst.size(), kWatchStepBytes)));
    }
    watcher.Arrived(all.first(all.size() - dst.size()));
    if (dst.empty()) co_return;
  }
}

Result<FrameHeader> Conn::CheckHeader(const std::array<uint8_t, kFrameHeaderBytes>& hb) {
  auto header = DecodeHeader(hb, limits_);
  if (!header.ok()) {
    if (authenticated_) return header.status();
    return Status(header.status().code(),
                  header.status().message() + FirstHeaderHint(hb, tls_ != nullptr));
  }
  if (ConnCounters* counters = options_.counters.get()) {
    counters->inbound_buffer_bytes.fetch_add(header->envelope_bytes, std::memory_order_relaxed);
  }
  return header;
}

bool Conn::DecodeEnvelope(const FrameHeader& header, const std::vector<uint8_t>& env_bytes,
                          InFrame& frame) {
  frame.wire_bytes = kFrameHeaderBytes + uint64_t{header.envelope_bytes} + header.payload_bytes;
  uint64_t request_id = 0;
  auto env = proto::Decode(env_bytes, {}, &request_id);
  if (!env.ok()) {
    frame.status = env.status();
    frame.env.request_id = request_id;  // the error reply answers the request
    return false;
  }
  frame.env = std::move(*env);
  return true;
}

std::optional<std::vector<std::span<std::byte>>> Conn::SinkSpans(const PayloadSink& sink,
                                                                 InFrame& frame,
                                                                 uint64_t payload_bytes) {
  std::optional<std::vector<std::span<std::byte>>> into;
  if (sink) into = sink(frame.env, payload_bytes);
  frame.in_place = into.has_value();
  return into;
}

void Conn::AllocatePayload(InFrame& frame, uint64_t payload_bytes,
                           std::unique_ptr<BufferLease> lease) {
  if (ConnCounters* counters = options_.counters.get()) {
    counters->inbound_buffer_bytes.fetch_add(payload_bytes, std::memory_order_relaxed);
  }
  frame.payload = TakeBuffer(payload_bytes);
  frame.payload.SetLease(std::move(lease));
}

awaitable<Result<InFrame>> Conn::ReadFrame(const PayloadSink& sink, const PayloadWatch& watch) {
  std::array<uint8_t, kFrameHeaderBytes> hb;
  co_await ReadSpan(std::as_writable_bytes(std::span(hb)));
  auto header = CheckHeader(hb);
  if (!header.ok()) co_return header.status();
  std::vector<uint8_t> env_bytes(header->envelope_bytes);
  co_await ReadSpan(std::as_writable_bytes(std::span(env_bytes)));
  InFrame frame;
  const uint64_t payload_bytes = header->payload_bytes;
  if (!DecodeEnvelope(*header, env_bytes, frame)) {
    co_await Discard(payload_bytes);
    co_return frame;
  }
  if (payload_bytes == 0) co_return frame;
  if (auto into = SinkSpans(sink, frame, payload_bytes)) {
    for (auto s : *into) co_await ReadSpan(s);
    co_return frame;
  }
  std::unique_ptr<BufferLease> lease;
  if (options_.budget) {
    if (payload_bytes > options_.budget->capacity()) {
      co_await Discard(payload_bytes);
      frame.status = InvalidArgument("payload of " + std::to_string(payload_bytes) +
                                     " bytes exceeds the payload memory budget of " +
                                     std::to_string(options_.budget->capacity()) +
                                     " bytes (--payload-budget-mb)");
      co_return frame;
    }
    co_await Reserve(payload_bytes);
    lease = options_.budget->Lease(payload_bytes);
  }
  AllocatePayload(frame, payload_bytes, std::move(lease));
  if (watch) frame.watcher = watch(frame.env, payload_bytes);
  if (frame.watcher) {
    co_await ReadSpanWatched(frame.payload.bytes(), *frame.watcher);
  } else {
    co_await ReadSpan(frame.payload.bytes());
  }
  co_return frame;
}

Status Conn::ReadSpanBlocking(std::span<std::byte> dst, const BlockingDeadlines& deadlines,
                              bool& started) {
  // Right after a request its reply is not there yet, and a recv would only say so: the
  // frame's first byte is polled for first. Within a frame the socket is read at once,
  // and polled only when it has nothing.
  bool wait = !started;
  for (;;) {
    if (TakeReadAhead(dst) > 0) started = true;
    if (dst.empty()) return Status::Ok();
    if (wait) {
      const Clock::time_point until = started ? deadlines.frame : deadlines.start;
      int ms = -1;  // no deadline
      if (until != Clock::time_point::max()) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
        ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
      }
      pollfd pfd{read_fd_, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, ms);
      if (ready < 0 && errno != EINTR) {
        return Unavailable("connection lost: " +
                           error_code(errno, boost::system::system_category()).message());
      }
      if (ready == 0) return DeadlineExceeded("the deadline passed in the middle of a frame");
      if (ready < 0) continue;  // EINTR
    }
    // The read-ahead is empty. Big reads go straight into `dst`.
    const bool direct = dst.size() >= kReadAheadBytes;
    std::byte* to = direct ? dst.data() : read_buf_.get();
    const ssize_t got = ::recv(read_fd_, to, direct ? dst.size() : kReadAheadBytes, MSG_DONTWAIT);
    if (got == 0) return Unavailable("connection lost: " + error_code(asio::error::eof).message());
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait = true;
        continue;
      }
      return Unavailable("connection lost: " +
                         error_code(errno, boost::system::system_category()).message());
    }
    wait = false;
    if (direct) {
      dst = dst.subspan(static_cast<size_t>(got));
      started = true;
    } else {
      read_pos_ = 0;
      read_end_ = static_cast<size_t>(got);
    }
  }
}

Result<std::optional<InFrame>> Conn::ReadFrameBlocking(const PayloadSink& sink,
                                                       const BlockingDeadlines& deadline) {
  if (read_fd_ < 0 || options_.budget)
    return Internal("a blocking read needs plain TCP after the handshake, no budget");
  bool started = false;
  std::array<uint8_t, kFrameHeaderBytes> hb;
  Status st = ReadSpanBlocking(std::as_writable_bytes(std::span(hb)), deadline, started);
  if (!st.ok() && !started && st.code() == Code::kDeadlineExceeded) return std::optional<InFrame>();
  if (!st.ok()) return st;
  auto header = CheckHeader(hb);
  if (!header.ok()) return header.status();
  std::vector<uint8_t> env_bytes(header->envelope_bytes);
  st = ReadSpanBlocking(std::as_writable_bytes(std::span(env_bytes)), deadline, started);
  if (!st.ok()) return st;
  InFrame frame;
  uint64_t payload_bytes = header->payload_bytes;
  if (!DecodeEnvelope(*header, env_bytes, frame)) {
    std::array<std::byte, 16 * 1024> scratch;  // discarded
    while (payload_bytes > 0 && st.ok()) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(payload_bytes, scratch.size()));
      st = ReadSpanBlocking(std::span(scratch.data(), k), deadline, started);
      payload_bytes -= k;
    }
  } else if (payload_bytes > 0) {
    if (auto into = SinkSpans(sink, frame, payload_bytes)) {
      for (auto s : *into) {
        if (st.ok()) st = ReadSpanBlocking(s, deadline, started);
      }
    } else {
      AllocatePayload(frame, payload_bytes, nullptr);
      st = ReadSpanBlocking(frame.payload.bytes(), deadline, started);
    }
  }
  if (!st.ok()) return st;
  return std::optional<InFrame>(std::move(frame));
}

awaitable<void> Conn::Discard(uint64_t bytes) {
  std::array<std::byte, 64 * 1024> scratch;
  while (bytes > 0) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, scratch.size()));
    co_await ReadSpan(std::span(scratch.data(), n));
    bytes -= n;
  }
}

awaitable<void> Conn::WaitGate() {
  error_code ec;
  reader_waiting_ = true;
  gate_.expires_at(Clock::time_point::max());
  co_await gate_.async_wait(asio::redirect_error(use_awaitable, ec));
  reader_waiting_ = false;
}

awaitable<void> Conn::Reserve(uint64_t bytes) {
  auto granted = std::make_shared<bool>(false);  // strand only
  uint64_t ticket = 0;
  auto self = shared_from_this();
  auto on_grant = [self, granted] {
    asio::post(self->executor(), [self, granted] {
      *granted = true;
      self->gate_.cancel();
    });
  };
  if (options_.budget->Acquire(bytes, on_grant, &ticket)) co_return;
  ConnCounters* counters = options_.counters.get();
  if (counters != nullptr) counters->budget_waiters.fetch_add(1);
  while (!*granted && !closed_) co_await WaitGate();
  if (counters != nullptr) counters->budget_waiters.fetch_sub(1);
  if (*granted) co_return;
  if (!options_.budget->Cancel(ticket)) options_.budget->Release(bytes);  // granted meanwhile
  throw boost::system::system_error(asio::error::operation_aborted);
}

bool Conn::ReadBlocked() const {
  return (options_.max_in_flight > 0 && in_flight_ >= options_.max_in_flight) ||
         (options_.max_write_queue_bytes > 0 &&
          queued_bytes_.load() >= options_.max_write_queue_bytes);
}

awaitable<void> Conn::WaitReadable() {
  if (!ReadBlocked() || closed_) co_return;
  ConnCounters* counters = options_.counters.get();
  if (counters != nullptr) counters->paused_readers.fetch_add(1);
  while (!closed_ && ReadBlocked()) co_await WaitGate();
  if (counters != nullptr) counters->paused_readers.fetch_sub(1);
}

awaitable<void> Conn::WriteNow(const proto::Envelope& env) {
  auto bytes = proto::Encode(env);
  auto header = EncodeHeader({static_cast<uint32_t>(bytes.size()), 0});
  std::array<asio::const_buffer, 2> bufs{asio::buffer(header), asio::buffer(bytes)};
  error_code ec;
  co_await WriteAll(bufs, ec);
  if (ec) throw boost::system::system_error(ec);
}

Conn::Out Conn::Frame(const proto::Envelope& env, uint64_t payload_bytes) {
  Out out;
  out.env = proto::Encode(env);
  out.header = EncodeHeader({static_cast<uint32_t>(out.env.size()), payload_bytes});
  out.bytes = kFrameHeaderBytes + out.env.size() + payload_bytes;
  return out;
}

void Conn::Queued(uint64_t bytes) {
  const uint64_t queued = queued_bytes_.fetch_add(bytes) + bytes;
  RaiseMax(peak_queued_bytes_, queued);
  if (ConnCounters* counters = options_.counters.get()) {
    counters->bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
    counters->write_queue_bytes.fetch_add(bytes, std::memory_order_relaxed);
    RaiseMax(counters->peak_write_queue_bytes, queued);
  }
}

void Conn::Send(const proto::Envelope& env, OutPayload payload, bool close_after,
                bool ends_request) {
  Out out = Frame(env, payload.size());
  out.payload = std::move(payload);
  out.close_after = close_after;
  Queued(out.bytes);
  if (OnStrand()) return Enqueue(std::move(out), ends_request, /*posted=*/false);
  std::unique_lock lock(write_mu_);
  if (!ends_request && !close_after && direct_any_thread_.load(std::memory_order_acquire)) {
    // A client's call: written from the calling thread when nothing is ahead of it.
    if (!closed_ && !writing_ && queue_.empty() && posted_ == 0 && !out.env.empty() &&
        !out.payload.progress) {
      const bool ok = TryWrite(out);
      if (ok && out.sent == out.bytes) {
        lock.unlock();
        const uint64_t bytes = out.bytes;
        out = Out{};  // the payload's owner may recycle it now
        return DequeuedBytes(bytes);
      }
      if (ok) {
        queue_.push_back(std::move(out));  // the writer sends the rest
        lock.unlock();
        asio::post(executor(), [self = shared_from_this()] { self->wake_.cancel(); });
        return;
      }
      lock.unlock();
      DequeuedBytes(out.bytes);
      asio::post(executor(), [self = shared_from_this()] { self->CloseOnStrand(); });
      return;
    }
  }
  ++posted_;
  lock.unlock();
  asio::post(executor(), [self = shared_from_this(), out = std::move(out), ends_request]() mutable {
    self->Enqueue(std::move(out), ends_request, /*posted=*/true);
  });
}

uint64_t Conn::Writable(const Out& out) {
  const PayloadProgress* progress = out.payload.progress.get();
  if (progress == nullptr) return out.bytes;
  const uint64_t payload = out.bytes - out.header.size() - out.env.size();
  return out.bytes - payload + std::min(progress->ready(), payload);
}

void Conn::AppendBuffers(const Out& out, std::vector<asio::const_buffer>& bufs, uint64_t end) {
  uint64_t skip = out.sent;
  uint64_t room = end - std::min(end, out.sent);
  auto add = [&](const void* data, size_t size) {
    if (skip >= size) {
      skip -= size;
      return;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size - skip, room));
    if (n > 0) bufs.emplace_back(static_cast<const std::byte*>(data) + skip, n);
    room -= n;
    skip = 0;
  };
  add(out.header.data(), out.header.size());
  add(out.env.data(), out.env.size());
  for (auto p : out.payload.parts) add(p.data(), p.size());
}

void Conn::EndRequest() {
  if (in_flight_ > 0) {
    --in_flight_;
    if (reader_waiting_) gate_.cancel();
  }
}

void Conn::Enqueue(Out out, bool ends_request, bool posted) {
  if (ends_request) EndRequest();
  {
    std::unique_lock lock(write_mu_);
    // Taken off posted_ in the same critical section that queues or writes it, so a
    // direct write from another thread sees either this frame queued or posted_ > 0.
    if (posted) --posted_;
    if (closed_) {
      lock.unlock();
      return Dequeued(out.bytes);
    }
    if (direct_writes_ && !writing_ && queue_.empty() && !out.env.empty() &&
        !out.payload.progress) {
      // Nothing ahead of it: write what the socket takes now, without waking the writer.
      if (!TryWrite(out)) {
        lock.unlock();
        Dequeued(out.bytes);
        return CloseOnStrand();
      }
      if (out.sent == out.bytes) {
        lock.unlock();
        const bool close = out.close_after;
        const uint64_t bytes = out.bytes;
        out = Out{};  // the payload's owner may recycle it now
        Dequeued(bytes);
        if (close) CloseOnStrand();
        return;
      }
    }
    if (out.payload.progress) {
      // The writer waits on wake_ for the rest of this payload.
      out.payload.progress->SetWaker([weak = weak_from_this(), ex = executor()] {
        asio::post(ex, [weak] {
          if (auto self = weak.lock()) self->wake_.cancel();
        });
      });
    }
    queue_.push_back(std::move(out));
  }
  wake_.cancel();
}

std::unique_ptr<DirectReply::Impl> Conn::BeginDirect(uint64_t request_id, const proto::Body& body,
                                                     uint64_t payload_bytes) {
  // On the strand nothing can be queued meanwhile (Enqueue and the writer run there), and
  // direct_writes_ is strand-only state; write_mu_ also keeps out a client's direct write
  // from another thread for the whole frame.
  if (!OnStrand() || !direct_writes_) return nullptr;
  std::unique_lock lock(write_mu_);
  if (closed_ || writing_ || !queue_.empty()) return nullptr;
  auto d = std::make_unique<DirectReply::Impl>();
  d->conn = shared_from_this();
  d->lock = std::move(lock);
  d->out = Frame(proto::Envelope{request_id, true, 0, body}, payload_bytes);
  d->request_id = request_id;
  d->payload_bytes = payload_bytes;
  return d;
}

DirectReply::DirectReply(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectReply::DirectReply(DirectReply&&) noexcept = default;
DirectReply& DirectReply::operator=(DirectReply&&) noexcept = default;

DirectReply::~DirectReply() {
  if (impl_ && !impl_->done) Fail(Internal("request dropped without a reply"));
}

std::span<std::byte> DirectReply::Owned(uint64_t offset, size_t bytes) {
  Impl& d = *impl_;
  PS_ASSERT(offset <= d.payload_bytes && bytes <= d.payload_bytes - offset);
  if (d.owned.empty()) d.owned = TakeBuffer(d.payload_bytes);
  return d.owned.bytes().subspan(offset, bytes);
}

void DirectReply::Add(std::span<const std::byte> part) {
  Impl& d = *impl_;
  PS_ASSERT(part.size() <= d.payload_bytes - d.appended);
  if (part.empty()) return;
  d.out.payload.parts.push_back(part);
  d.appended += part.size();
}

void DirectReply::Borrow(std::span<const std::byte> part) {
  Impl& d = *impl_;
  const uint64_t offset = d.appended;
  Add(part);
  if (part.empty() || d.broken) return;  // a broken frame is dropped: nothing to keep
  // Everything before `part` goes in the same system call, so a frame of small owned
  // parts and one borrowed part costs one.
  d.broken = !d.conn->TryWrite(d.out);
  if (d.broken) return;
  const uint64_t head = kFrameHeaderBytes + d.out.env.size();
  const uint64_t written = d.out.sent > head ? d.out.sent - head : 0;  // payload bytes
  if (written >= d.appended) return;
  // The socket is full: keep the rest of `part` before its owner may change it.
  const size_t from = static_cast<size_t>(std::max(written, offset) - offset);
  std::span<std::byte> copy = Owned(offset, part.size());
  std::memcpy(copy.data() + from, part.data() + from, part.size() - from);
  d.out.payload.parts.back() = copy;
}

void DirectReply::Finish() {
  Impl& d = *impl_;
  PS_ASSERT(!d.done && d.appended == d.payload_bytes);
  d.done = true;
  Conn& c = *d.conn;
  // Owned parts after the last borrowed one (or a frame without any) are written here.
  if (!d.broken && d.out.sent < d.out.bytes) d.broken = !c.TryWrite(d.out);
  c.Queued(d.out.bytes);  // counted as Send counts a frame, once it is whole
  c.EndRequest();
  const uint64_t bytes = d.out.bytes;
  if (d.broken || d.out.sent == d.out.bytes) {
    d.lock.unlock();
    d.out = {};
    RecycleBuffer(std::move(d.owned));
    c.Dequeued(bytes);
    if (d.broken) c.CloseOnStrand();
    return;
  }
  // The writer sends the rest (from `owned`, recycled once written), as for a frame the
  // socket cut short in Enqueue.
  if (!d.owned.empty()) d.out.payload.keep_alive = RecycledPayload(std::move(d.owned)).keep_alive;
  c.queue_.push_back(std::move(d.out));
  d.lock.unlock();
  c.wake_.cancel();
}

void DirectReply::Fail(const Status& status) {
  Impl& d = *impl_;
  PS_ASSERT(!d.done);
  d.done = true;
  Conn& c = *d.conn;
  d.lock.unlock();
  RecycleBuffer(std::move(d.owned));
  if (d.out.sent == 0 && !d.broken) {
    // Nothing of the frame is on the wire: the error replaces it.
    return c.Send(ErrorEnvelope(d.request_id, status), {}, false, /*ends_request=*/true);
  }
  PS_LOG(Warning) << "closing connection of " << c.address() << ": its reply " << d.request_id
                  << " failed after part of it was written: " << status.message();
  c.Queued(d.out.bytes);
  c.EndRequest();
  c.Dequeued(d.out.bytes);
  c.CloseOnStrand();
}

bool Conn::TryWrite(Out& out) {
  std::array<asio::const_buffer, 8> small;
  std::vector<asio::const_buffer> bufs;
  size_t n = 0;
  error_code ec;
  if (out.sent == 0 && out.payload.parts.size() + 2 <= small.size()) {
    size_t k = 0;  // the common case, without allocating
    small[k++] = asio::buffer(out.header);
    small[k++] = asio::buffer(out.env);
    for (auto p : out.payload.parts) small[k++] = asio::buffer(p.data(), p.size());
    n = socket_.write_some(std::span(small.data(), k), ec);
  } else {
    AppendBuffers(out, bufs, out.bytes);
    n = socket_.write_some(bufs, ec);
  }
  if (ec == asio::error::would_block || ec == asio::error::try_again) return true;
  if (ec) return false;
  out.sent += n;
  return true;
}

void Conn::Dequeued(uint64_t bytes) {
  DequeuedBytes(bytes);
  if (reader_waiting_) gate_.cancel();
}

void Conn::DequeuedBytes(uint64_t bytes) {
  queued_bytes_.fetch_sub(bytes);
  queued_bytes_.notify_all();
  if (ConnCounters* counters = options_.counters.get()) {
    counters->write_queue_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  }
}

void Conn::WaitForRoom() {
  if (options_.max_write_queue_bytes == 0) return;
  uint64_t q = queued_bytes_.load();
  while (q >= options_.max_write_queue_bytes && !closed_) {
    queued_bytes_.wait(q);
    q = queued_bytes_.load();
  }
}

void Conn::StartWriter() {
  asio::co_spawn(
      executor(), [self = shared_from_this()] { return self->WriteLoop(); }, asio::detached);
}

awaitable<void> Conn::WriteLoop() {
  // Frames queued back to back go out in one gather write, up to this many.
  constexpr size_t kMaxBatch = 16;
  std::vector<Out> batch;
  std::vector<asio::const_buffer> bufs;
  while (!closed_) {
    bool idle = false, sentinel = false, close = false;
    {
      std::lock_guard lock(write_mu_);
      if (queue_.empty()) {
        idle = true;
      } else if (queue_.front().env.empty()) {
        sentinel = true;  // CloseAfterFlush's
      } else {
        // Taken off the queue while being written: CloseOnStrand counts only what is queued.
        // A payload still being filled ends the batch: what follows it waits for it.
        while (!queue_.empty() && batch.size() < kMaxBatch && !queue_.front().env.empty() &&
               !close && (batch.empty() || !batch.back().payload.progress)) {
          close = queue_.front().close_after;
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        writing_ = true;
      }
    }
    if (idle) {
      error_code ec;
      wake_.expires_at(Clock::time_point::max());
      co_await wake_.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    if (sentinel) {
      CloseOnStrand();
      co_return;
    }
    bufs.clear();
    uint64_t end = 0;  // of the batch's last frame: what of it the write below sends
    for (const Out& out : batch) {
      end = Writable(out);
      AppendBuffers(out, bufs, end);
    }
    error_code ec;
    co_await WriteAll(bufs, ec);
    if (!ec && batch.back().payload.progress) co_await FinishProgressive(batch.back(), end, ec);
    {
      std::lock_guard lock(write_mu_);
      writing_ = false;
    }
    uint64_t bytes = 0;
    for (const Out& out : batch) bytes += out.bytes;
    batch.clear();  // the payloads' owners may recycle them now
    Dequeued(bytes);
    if (ec || close) {
      CloseOnStrand();
      co_return;
    }
  }
}

awaitable<void> Conn::FinishProgressive(Out& out, uint64_t sent, error_code& ec) {
  const PayloadProgress& progress = *out.payload.progress;
  std::vector<asio::const_buffer> bufs;
  out.sent = sent;
  while (out.sent < out.bytes) {
    if (closed_ || progress.failed()) {
      ec = asio::error::operation_aborted;  // the frame cannot be finished: closed after
      co_return;
    }
    const uint64_t end = Writable(out);
    if (end == out.sent) {
      // Publish posts wake_'s cancel to this strand, where it runs only once this wait
      // has begun: no wake-up is lost between the check above and the wait.
      wake_.expires_at(Clock::time_point::max());
      error_code wait;
      co_await wake_.async_wait(asio::redirect_error(use_awaitable, wait));
      continue;
    }
    bufs.clear();
    AppendBuffers(out, bufs, end);
    co_await WriteAll(bufs, ec);
    if (ec) co_return;
    out.sent = end;
  }
}

void Conn::CloseOnStrand() {
  if (closed_) return;
  closed_ = true;
  uint64_t dropped = 0;
  std::deque<Out> queue;  // freed after unlocking
  {
    std::lock_guard lock(write_mu_);  // no direct write is under way from another thread
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    if (read_fd_ >= 0) {
      // blocking_fd() keeps the socket open, so closing our descriptor would leave it in
      // the reactor's epoll set (Asio's close() counts on the kernel removing it):
      // release() deregisters it first (and fails pending operations, as close() does).
      const int fd = socket_.release(ec);
      if (!ec) ::close(fd);
    } else {
      socket_.close(ec);
    }
    for (const auto& out : queue_) dropped += out.bytes;
    queue.swap(queue_);
  }
  wake_.cancel();
  gate_.cancel();
  // A frame being written is subtracted when its write fails, which wakes WaitForRoom.
  Dequeued(dropped);
}

void Conn::Close() {
  asio::post(executor(), [self = shared_from_this()] { self->CloseOnStrand(); });
}

void Conn::CloseAfterFlush() {
  asio::post(executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    Out sentinel;
    sentinel.close_after = true;  // an Out without an envelope writes nothing
    std::lock_guard lock(self->write_mu_);
    self->queue_.push_back(std::move(sentinel));
    self->wake_.cancel();
  });
}

std::shared_ptr<asio::steady_timer> Watchdog(const std::shared_ptr<Conn>& c, Millis after) {
  auto t = std::make_shared<asio::steady_timer>(c->executor());
  t->expires_after(after);
  t->async_wait([c](error_code ec) {
    if (!ec) c->CloseOnStrand();
  });
  return t;
}

}  // namespace ps::net

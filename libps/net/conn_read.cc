// The framed connection (conn.h), frames in: the read-ahead, ReadFrame on the strand and
// ReadFrameBlocking on a client's calling thread over the same steps, the payload budget
// and the reader's gate (in-flight requests, write-queue bound).
#include "libps/net/conn.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>

#include <poll.h>

namespace ps::net {

using asio::use_awaitable;

namespace {

// A hint for a peer that fails the very first header: it may speak TLS when we do not.
std::string FirstHeaderHint(const std::array<uint8_t, kFrameHeaderBytes>& hb, bool tls) {
  if (tls) return "";
  if (hb[0] == 0x16 && hb[1] == 0x03)
    return " (the peer speaks TLS; this task runs without --tls-cert)";
  if (hb[0] == 0x15 && hb[1] == 0x03) return " (a TLS alert; the peer requires TLS)";
  return "";
}

}  // namespace

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
      co_await ReadAtLeast(dst, dst.size());
      co_return;
    }
    read_pos_ = read_end_ = 0;
    read_end_ = co_await ReadAtLeast(std::span(read_buf_.get(), kReadAheadBytes), dst.size());
  }
}

awaitable<void> Conn::ReadSpanWatched(std::span<std::byte> dst, PayloadWatcher& watcher) {
  // Small enough that the watcher's work on one step overlaps the peer's sending of the
  // next, large enough that a step costs little beside its bytes.
  constexpr size_t kWatchStepBytes = size_t{256} << 10;
  const std::span<const std::byte> all = dst;
  TakeReadAhead(dst);
  for (;;) {
    if (!dst.empty()) {
      dst = dst.subspan(co_await ReadAtLeast(dst, std::min(dst.size(), kWatchStepBytes)));
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
    error_code ec;
    const size_t got =
        Recv(read_fd_, direct ? dst : std::span(read_buf_.get(), kReadAheadBytes), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      wait = true;
      continue;
    }
    if (ec) return Unavailable("connection lost: " + ec.message());
    wait = false;
    if (direct) {
      dst = dst.subspan(got);
      started = true;
    } else {
      read_pos_ = 0;
      read_end_ = got;
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
    std::array<std::byte, size_t{16} << 10> scratch;  // discarded
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
  std::array<std::byte, size_t{64} << 10> scratch;
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

}  // namespace ps::net

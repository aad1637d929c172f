// The framed connection (conn.h), frames out: encoding, Send and its direct write when
// nothing is ahead, the write queue and its bound, the writer coroutine (batches,
// payloads written as they are published).
#include "libps/net/conn.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ps::net {

using asio::use_awaitable;

namespace {

void RaiseMax(std::atomic<uint64_t>& max, uint64_t value) {
  uint64_t m = max.load(std::memory_order_relaxed);
  while (value > m && !max.compare_exchange_weak(m, value, std::memory_order_relaxed)) {}
}

}  // namespace

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
    n = SendSome(std::span(small.data(), k), ec);
  } else {
    AppendBuffers(out, bufs, out.bytes);
    n = SendSome(bufs, ec);
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

}  // namespace ps::net

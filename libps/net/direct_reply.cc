// A reply written while it is assembled (transport.h: DirectReply; conn.h:
// DirectReply::Impl): borrowed parts go to the socket at once, what it does not take is
// copied for the writer.
#include <algorithm>
#include <cstring>

#include "libps/core/log.h"
#include "libps/net/conn.h"

namespace ps::net {

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

}  // namespace ps::net

// The transport's fast paths beside the Service's routing: inline handling on an I/O
// thread (Inline), pushes applied while they arrive (WatchPush, EarlyPush), and pull
// replies written straight from the store (PullDirect) or sent while being copied
// (PullProgressive). Every ordering check they make is a call to the UpdateMachine; the
// locks that keep its answers true (the inline gate, the fence) are the Service's.
#include <algorithm>
#include <cstring>

#include "libps/core/log.h"
#include "libps/server/service.h"

namespace ps::server {

// A push applied while its payload arrives (Service::WatchPush). Arrived applies each
// item's rows once they are all in, at least kMinPartBytes at a time (an item's last rows
// whatever their size), through Store::PushPart: every row whole, under the fence, with
// the machine's ticket checked again for each part (UpdateMachine::CheckPart), exactly as
// a push the pool handles is checked once for the whole gradient. On the I/O thread it never
// waits: like an inline handler it applies a part only with the inline gate and the
// fence taken at once (no CreateShards, Save or Restore pending or running); otherwise
// the rest is deferred to Finish, which Handle runs on the handler pool with the whole
// payload. The at-most-once marks were set when the push began (an item already applied
// is skipped whole), so a push cut off mid-payload keeps the rows applied so far and a
// retry of its step is acknowledged as applied: no gradient value is applied twice.
class Service::EarlyPush final : public net::PayloadWatcher {
 public:
  struct Item {
    ShardKey key;
    uint64_t offset = 0;  // first float of the item's gradient in the payload
    int64_t rows = 0, cols = 0;
    int64_t rows_done = 0;  // rows applied (or skipped)
    bool fresh = true;      // not applied before (UpdateMachine::Mark)
  };
  static constexpr uint64_t kMinPartBytes = uint64_t{256} << 10;

  EarlyPush(Service* service, const net::PeerInfo& peer, const proto::Push& msg,
            UpdateMachine::EarlyTicket ticket, std::vector<Item> items, uint64_t payload_bytes)
      : service_(service),
        peer_(peer.Name()),
        global_step_(msg.global_step),
        step_id_(msg.step_id),
        ticket_(ticket),
        payload_bytes_(payload_bytes),
        items_(std::move(items)) {}

  ~EarlyPush() override {
    if (received_ == payload_bytes_) return;
    service_->early_cut_.fetch_add(1, std::memory_order_relaxed);
    PS_LOG(Warning)
        << "push of step " << step_id_ << " from " << peer_ << " was cut off after " << received_
        << " of " << payload_bytes_
        << " bytes: the rows applied while it arrived stay applied, the rest is dropped (a retry of "
           "the step is acknowledged as applied: at most once)";
  }

  void Arrived(std::span<const std::byte> received) override {
    received_ = received.size();
    if (!deferred_) ApplyArrived(received, /*on_pool=*/false);
  }

  // The rest of the rows must be applied on the handler pool (Finish).
  bool deferred() const { return deferred_ && status_.ok(); }

  // The whole payload is in: applies what is left (on the handler pool) and answers.
  void Finish(const net::Buffer& payload, net::Responder& responder) {
    if (deferred_ && status_.ok()) ApplyArrived(payload.bytes(), /*on_pool=*/true);
    if (!status_.ok()) return responder.Fail(status_);
    int32_t skipped = 0;
    for (const Item& it : items_) skipped += it.fresh ? 0 : 1;
    service_->CountSkipped(step_id_, -1, skipped);
    responder.Reply(proto::PushReply{service_->store_->global_step(), skipped, 0});
  }

 private:
  void ApplyArrived(std::span<const std::byte> received, bool on_pool) {
    const uint64_t floats_in = received.size() / sizeof(float);
    const auto* grad = reinterpret_cast<const float*>(received.data());
    for (; next_ < items_.size(); ++next_) {
      Item& it = items_[next_];
      const uint64_t item_floats = static_cast<uint64_t>(it.rows * it.cols);
      const auto rows_in = static_cast<int64_t>(
          (std::min(floats_in, it.offset + item_floats) - std::min(floats_in, it.offset)) /
          static_cast<uint64_t>(it.cols));
      const int64_t n = rows_in - it.rows_done;
      if (rows_in < it.rows && static_cast<uint64_t>(n * it.cols) * sizeof(float) < kMinPartBytes)
        return;
      if (n > 0 && it.fresh && status_.ok() &&
          !Apply(it, grad + it.offset + it.rows_done * it.cols, n, on_pool)) {
        return;  // deferred: these rows are applied by Finish
      }
      it.rows_done = rows_in;
      if (rows_in < it.rows) return;
    }
  }

  // False when it would have to wait (not on the pool): nothing applied, deferred_ set.
  bool Apply(const Item& it, const float* grad, int64_t rows, bool on_pool) {
    std::shared_lock gate(service_->inline_gate_, std::defer_lock);
    std::shared_lock fence(service_->fence_, std::defer_lock);
    if (on_pool) {
      fence.lock();  // as a push on the pool: it runs beside a Save, and waits for a Restore
    } else if (!gate.try_lock() || !service_->machine_.EarlyPartOpen() || !fence.try_lock()) {
      deferred_ = true;
      return false;
    }
    switch (service_->machine_.CheckPart(ticket_)) {
      case UpdateMachine::PartCheck::kOk:
        break;
      case UpdateMachine::PartCheck::kNewChief:
        status_ = Aborted(peer_ + "'s push of step " + std::to_string(step_id_) +
                          " is work of a previous chief (a newer one took over while it arrived)");
        return true;
      case UpdateMachine::PartCheck::kRestored:
        status_ = Aborted("the ps was restored while " + peer_ + "'s push of step " +
                          std::to_string(step_id_) + " arrived");
        return true;
    }
    status_ = service_->store_->PushPart(it.key, it.rows_done,
                                         std::span(grad, static_cast<size_t>(rows * it.cols)),
                                         global_step_, it.rows_done == 0);
    if (status_.ok() && it.rows_done + rows == it.rows) {
      service_->applied_on_arrival_.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }

  Service* service_;
  std::string peer_;
  int64_t global_step_, step_id_;
  UpdateMachine::EarlyTicket ticket_;  // what each part is checked against
  uint64_t payload_bytes_;
  std::vector<Item> items_;
  size_t next_ = 0;        // the item whose rows arrive now
  uint64_t received_ = 0;  // payload bytes in
  bool deferred_ = false;  // a part would have had to wait: the rest is Finish's
  Status status_;          // the first failure; nothing is applied after it
};

std::shared_ptr<void> Service::Inline(const net::Request& request) {
  const auto& body = request.envelope.body;
  const bool push = std::holds_alternative<proto::Push>(body);
  if (!push && !std::holds_alternative<proto::Pull>(body)) return nullptr;
  // A push applied while it arrived (WatchPush) has only its reply left, unless some of
  // its rows were deferred to the pool.
  const auto* early = dynamic_cast<const EarlyPush*>(request.watcher.get());
  if (!machine_.InlineCandidate({.push = push,
                                 .payload_bytes = request.payload.size(),
                                 .early = early != nullptr,
                                 .early_deferred = early != nullptr && early->deferred(),
                                 .push_hook = static_cast<bool>(push_hook_),
                                 .generation = request.envelope.generation})) {
    return nullptr;
  }
  if (!inline_gate_.try_lock_shared()) return nullptr;
  // From here until the token is dropped no CreateShards, Save or Restore runs, so the
  // mode read below stays true for the handler.
  std::shared_ptr<void> token(this, [](Service* self) { self->inline_gate_.unlock_shared(); });
  if (!machine_.InlineOpen()) return nullptr;
  // What the request pulls: a pull's items, or a push's pull after it (its reply), which
  // counts with the push's own payload.
  const std::vector<proto::Slice>* pulled = nullptr;
  if (const auto* m = std::get_if<proto::Pull>(&body)) pulled = &m->items;
  if (const auto* m = std::get_if<proto::Push>(&body); m != nullptr && m->pull)
    pulled = &m->pull->items;
  if (pulled != nullptr) {
    const uint64_t pushed = push ? request.payload.size() : 0;
    uint64_t floats = 0;
    for (const auto& item : *pulled) {
      auto n = SliceOf(item);
      if (!n.ok()) break;  // answered with the error at once
      floats += n->floats;
      if (!machine_.InlineFits(pushed + floats * sizeof(float))) return nullptr;
    }
  }
  inline_accepted_.fetch_add(1, std::memory_order_relaxed);
  return token;
}

void Service::Attach(net::ServerOptions& options, uint64_t early_apply_min_bytes) {
  options.run_inline = [this](const net::Request& req) { return Inline(req); };
  options.watch_payload = nullptr;
  if (early_apply_min_bytes > 0) {
    options.watch_payload_min_bytes = early_apply_min_bytes;
    options.watch_payload = [this](const net::PeerInfo& peer, const proto::Envelope& env,
                                   uint64_t payload_bytes) {
      return WatchPush(peer, env, payload_bytes);
    };
  }
}

std::shared_ptr<net::PayloadWatcher> Service::WatchPush(const net::PeerInfo& peer,
                                                        const proto::Envelope& env,
                                                        uint64_t payload_bytes) {
  const auto* msg = std::get_if<proto::Push>(&env.body);
  if (msg == nullptr || !machine_.EarlyCandidate(*msg, env.reply, peer.role == proto::Role::kChief,
                                                 static_cast<bool>(push_hook_))) {
    return nullptr;
  }
  std::vector<EarlyPush::Item> items;
  uint64_t floats = 0;
  for (const auto& slice : msg->items) {
    if (!slice.all_rows) return nullptr;
    auto def = store_->GetDef({slice.var, slice.shard});
    if (!def.ok() || def->layout.lazy) return nullptr;
    items.push_back({.key = {slice.var, slice.shard},
                     .offset = floats,
                     .rows = def->layout.rows,
                     .cols = def->layout.cols});
    floats += static_cast<uint64_t>(def->layout.rows * def->layout.cols);
  }
  if (floats * sizeof(float) != payload_bytes) return nullptr;
  // The ticket and the marks under the fence, as one step against a Restore (which
  // forgets the marks with the fence held exclusively): a Restore from here on makes the
  // push fail in Apply and clears the marks it set. Never waits: a Restore or a new
  // generation under way leaves the push to the pool.
  std::shared_lock fence(fence_, std::try_to_lock);
  if (!fence.owns_lock()) return nullptr;
  const std::optional<UpdateMachine::EarlyTicket> ticket = machine_.EarlyBegin(env.generation);
  if (!ticket) return nullptr;
  {
    std::lock_guard lock(marks_mu_);
    for (size_t i = 0; i < items.size(); ++i) {
      auto fresh = machine_.Mark(items[i].key, -1, msg->step_id);
      if (!fresh.ok()) {
        for (size_t j = 0; j < i; ++j) {
          if (items[j].fresh) machine_.Unmark(items[j].key, -1, msg->step_id);
        }
        return nullptr;
      }
      items[i].fresh = *fresh;
    }
  }
  early_pushes_.fetch_add(1, std::memory_order_relaxed);
  return std::make_shared<EarlyPush>(this, peer, *msg, *ticket, std::move(items), payload_bytes);
}

bool Service::FinishEarly(net::Request& request, net::Responder& responder) {
  auto* early = dynamic_cast<EarlyPush*>(request.watcher.get());
  if (early == nullptr) return false;
  early->Finish(request.payload, responder);
  net::RecycleBuffer(std::move(request.payload));
  return true;
}

bool Service::PullProgressive(const proto::Pull& msg, const SliceInfos& info, proto::Body& body,
                              net::Buffer& buffer, net::Responder& responder) {
  if (buffer.size() < kProgressivePullBytes) return false;
  // A frame on the wire cannot wait: copied only while no CreateShards, Save or Restore
  // (which may hold a shard's locks for long) is pending or running, as an inline handler
  // runs; the gate is held until the copy is done. Otherwise copied first, then sent.
  std::shared_lock gate(inline_gate_, std::try_to_lock);
  if (!gate.owns_lock() || !machine_.ProgressiveOpen()) return false;
  // Whole dense shards only: they cannot fail once their slices were found (shards are
  // never dropped), and a frame on its way cannot turn into an error.
  for (size_t i = 0; i < msg.items.size(); ++i) {
    if (!msg.items[i].all_rows || info[i].lazy) return false;
  }
  progressive_pulls_.fetch_add(1, std::memory_order_relaxed);
  std::span<float> out = buffer.floats();
  auto progress = std::make_shared<net::PayloadProgress>();
  net::OutPayload payload = net::RecycledPayload(std::move(buffer));
  payload.progress = progress;
  // The buffer is recycled once the frame and this copy are both done with it.
  const std::shared_ptr<const void> hold = payload.keep_alive;
  responder.Reply(std::move(body), std::move(payload));
  uint64_t offset = 0;
  for (size_t i = 0; i < msg.items.size(); ++i) {
    Status st =
        store_->Pull({msg.items[i].var, msg.items[i].shard}, out.subspan(offset, info[i].floats),
                     [&](size_t copied) { progress->Publish((offset + copied) * sizeof(float)); });
    if (!st.ok()) {
      PS_LOG(Error) << "a pull reply failed after it was queued, closing the connection: "
                    << st.ToString();
      progress->Fail();
      return true;
    }
    offset += info[i].floats;
  }
  return true;
}

bool Service::PullDirect(const proto::Pull& msg, const SliceInfos& info, const proto::Body& body,
                         net::Responder& responder) {
  // Async only: the other modes go to the pool, where BeginDirect says no anyway.
  if (!machine_.DirectOpen()) return false;
  auto borrowed = [&](size_t i) {
    return msg.items[i].all_rows && !info[i].lazy &&
           info[i].floats * sizeof(float) >= kDirectPullBytes;
  };
  uint64_t total = 0;
  bool any = false;
  for (size_t i = 0; i < info.size(); ++i) {
    total += info[i].floats * sizeof(float);
    any = any || borrowed(i);
  }
  if (!any) return false;
  std::optional<net::DirectReply> direct = responder.BeginDirect(body, total);
  if (!direct) return false;  // not on the I/O thread, TLS, or replies queued: copy
  direct_pulls_.fetch_add(1, std::memory_order_relaxed);
  // The copied items first, into the reply's own memory at their offsets, so that an
  // error (a row out of range) is still answered with an error frame: nothing is written
  // before the first borrowed item. (A pull promises nothing across rows: reading these
  // before the borrowed items changes no guarantee.)
  std::vector<std::span<const std::byte>> copied(msg.items.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < msg.items.size(); ++i) {
    const uint64_t bytes = info[i].floats * sizeof(float);
    if (!borrowed(i)) {
      std::span<std::byte> dst = direct->Owned(offset, bytes);
      Status st = PullItem(msg.items[i], {reinterpret_cast<float*>(dst.data()), info[i].floats});
      if (!st.ok()) {
        direct->Fail(st);
        return true;
      }
      copied[i] = dst;
    }
    offset += bytes;
  }
  // In payload order, one shard's locks at a time. A borrowed item cannot fail: its shard
  // exists (shards are never removed) and is dense; if it did anyway, Fail closes the
  // connection once part of the frame is out.
  for (size_t i = 0; i < msg.items.size(); ++i) {
    if (!borrowed(i)) {
      direct->Add(copied[i]);
      continue;
    }
    Status st = store_->PullBorrowed(
        {msg.items[i].var, msg.items[i].shard},
        [&](std::span<const float> values) { direct->Borrow(std::as_bytes(values)); });
    if (!st.ok()) {
      direct->Fail(st);
      return true;
    }
  }
  direct->Finish();
  return true;
}

}  // namespace ps::server

#include "libps/server/service.h"

#include <algorithm>
#include <cstring>

#include "libps/core/log.h"
#include "libps/server/store_shard.h"
#include "libps/server/wire_specs.h"

namespace ps::server {

Status Service::CheckGeneration(const net::Request& request) {
  const uint64_t gen = request.envelope.generation;
  if (request.peer.role == proto::Role::kChief) {
    uint64_t cur = generation_.load();
    while (gen > cur && !generation_.compare_exchange_weak(cur, gen)) {}
    if (gen < cur) {
      return Aborted("stale chief: generation " + std::to_string(gen) + " < " +
                     std::to_string(cur) + " (a newer chief has taken over)");
    }
    // A new generation: wait for the pushes that passed the old one's check.
    if (gen > cur) std::unique_lock drained(fence_);
    return Status::Ok();
  }
  if (gen < generation_.load()) {
    return Aborted(request.peer.Name() + " sent generation " + std::to_string(gen) + " < " +
                   std::to_string(generation_.load()) + " (work of a previous chief)");
  }
  return Status::Ok();
}

Result<bool> Service::MarkApplied(const ShardKey& key, int32_t worker, int64_t step) {
  if (step < 0) return true;  // untracked
  std::lock_guard lock(applied_mu_);
  AppliedMarks& marks = applied_[{key, worker}];
  // Below the last checkpoint: the chief saves only when every step before it is
  // applied, so this is a repeat.
  if (step < marks.base) return false;
  if (step - marks.base >= kTrackedSteps) {
    const std::string why = "Push: step " + std::to_string(step) + " for " + key.ToString() +
                            " is 2^28 or more steps past the last checkpoint (step " +
                            std::to_string(marks.base) +
                            "): its at-most-once marks would be lost; save checkpoints more often";
    if (!window_logged_) {
      window_logged_ = true;
      PS_LOG(Error) << why << " (logged once)";
    }
    return FailedPrecondition(why);
  }
  const auto offset = static_cast<uint64_t>(step - marks.base);
  const size_t word = offset / 64;
  const uint64_t bit = uint64_t{1} << (offset % 64);
  auto& bits = marks.bits;
  if (bits.size() <= word) bits.resize(std::max(word + 1, bits.size() * 2), 0);
  if (bits[word] & bit) return false;
  bits[word] |= bit;
  return true;
}

void Service::UnmarkApplied(const ShardKey& key, int32_t worker, int64_t step) {
  std::lock_guard lock(applied_mu_);
  auto it = applied_.find({key, worker});
  if (step < 0 || it == applied_.end() || step < it->second.base) return;
  const auto offset = static_cast<uint64_t>(step - it->second.base);
  auto& bits = it->second.bits;
  if (offset / 64 < bits.size()) bits[offset / 64] &= ~(uint64_t{1} << (offset % 64));
}

void Service::TrimApplied(int64_t step) {
  const int64_t base = step - step % 64;  // whole words
  std::lock_guard lock(applied_mu_);
  for (auto& [key, marks] : applied_) {
    if (base <= marks.base) continue;
    const auto drop = static_cast<size_t>((base - marks.base) / 64);
    auto& bits = marks.bits;
    bits.erase(bits.begin(),
               bits.begin() + static_cast<std::ptrdiff_t>(std::min(drop, bits.size())));
    bits.shrink_to_fit();
    marks.base = base;
  }
}

size_t Service::applied_mark_words() const {
  std::lock_guard lock(applied_mu_);
  size_t n = 0;
  for (const auto& [key, marks] : applied_) n += marks.bits.size();
  return n;
}

// A push applied while its payload arrives (Service::WatchPush). Arrived applies each
// item's rows once they are all in, at least kMinPartBytes at a time (an item's last rows
// whatever their size), through Store::PushPart: every row whole, under the fence, with
// the generation and the Restore count checked again for each part, exactly as a push the
// pool handles checks them once for the whole gradient. On the I/O thread it never
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
    bool fresh = true;      // not applied before (MarkApplied)
  };
  static constexpr uint64_t kMinPartBytes = 256 * 1024;

  EarlyPush(Service* service, const net::PeerInfo& peer, const proto::Push& msg,
            uint64_t generation, uint64_t restores, std::vector<Item> items, uint64_t payload_bytes)
      : service_(service),
        peer_(peer.Name()),
        global_step_(msg.global_step),
        step_id_(msg.step_id),
        generation_(generation),
        restores_(restores),
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
    } else if (!gate.try_lock() || service_->long_ops_.load() > 0 || !fence.try_lock()) {
      deferred_ = true;
      return false;
    }
    if (service_->generation_.load() != generation_) {
      status_ = Aborted(peer_ + "'s push of step " + std::to_string(step_id_) +
                        " is work of a previous chief (a newer one took over while it arrived)");
      return true;
    }
    if (service_->restores_.load() != restores_) {
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
  uint64_t generation_, restores_, payload_bytes_;
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
  const uint64_t max_bytes = inline_max_bytes_.load(std::memory_order_relaxed);
  // A push applied while it arrived (WatchPush) has only its reply left, unless some of
  // its rows were deferred to the pool.
  const auto* early = dynamic_cast<const EarlyPush*>(request.watcher.get());
  if (early != nullptr && early->deferred()) return nullptr;
  if (push && (request.payload.size() > max_bytes || push_hook_) && early == nullptr)
    return nullptr;
  // A newer generation: its check may wait for the fence exclusively.
  if (request.envelope.generation > generation_.load()) return nullptr;
  if (!inline_gate_.try_lock_shared()) return nullptr;
  // From here until the token is dropped no CreateShards, Save or Restore runs, so the
  // mode read below stays true for the handler.
  std::shared_ptr<void> token(this, [](Service* self) { self->inline_gate_.unlock_shared(); });
  // A long op waiting for the gate: let it have it (glibc's rwlock prefers readers).
  if (long_ops_.load() > 0) return nullptr;
  if (mode_.load() != UpdateMode::kAsync) return nullptr;
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
      if (pushed + floats * sizeof(float) > max_bytes) return nullptr;
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
  // What the pool would handle otherwise (and the errors it answers with): an untracked
  // step (a retry could not be told from a first push), another mode, a chief's request,
  // a reply frame, a generation other than the ps's, a testing hook.
  // A push with a pull after it is small (the worker combines only those): the pool's
  // path or an inline handler answers both.
  if (msg == nullptr || env.reply || msg->step_id < 0 || msg->items.empty() || msg->pull ||
      peer.role == proto::Role::kChief || push_hook_ || mode_.load() != UpdateMode::kAsync) {
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
  // The marks and the Restore count under the fence, as one step against a Restore (which
  // forgets the marks with the fence held exclusively): a Restore from here on makes the
  // push fail in Apply and clears the marks it set. Never waits: a Restore or a new
  // generation under way leaves the push to the pool.
  std::shared_lock fence(fence_, std::try_to_lock);
  // The generation under the fence too, as the pool's check: a takeover either happened
  // before (refused here) or waits for this push's parts (Apply checks it again).
  if (!fence.owns_lock() || env.generation != generation_.load()) return nullptr;
  const uint64_t restores = restores_.load();
  for (size_t i = 0; i < items.size(); ++i) {
    auto fresh = MarkApplied(items[i].key, -1, msg->step_id);
    if (!fresh.ok()) {
      for (size_t j = 0; j < i; ++j) {
        if (items[j].fresh) UnmarkApplied(items[j].key, -1, msg->step_id);
      }
      return nullptr;
    }
    items[i].fresh = *fresh;
  }
  early_pushes_.fetch_add(1, std::memory_order_relaxed);
  return std::make_shared<EarlyPush>(this, peer, *msg, env.generation, restores, std::move(items),
                                     payload_bytes);
}

Result<proto::Body> Service::HandleLongOp(const proto::Body& body, const net::PeerInfo& peer) {
  if (const auto* m = std::get_if<proto::CreateShards>(&body)) {
    Status st = CreateShards(*m);
    if (!st.ok()) {
      PS_LOG(Error) << "CreateShards from " << peer.Name() << " failed: " << st.ToString();
      return st;
    }
    return proto::Body(proto::Ack{});
  }
  if (const auto* m = std::get_if<proto::Save>(&body)) {
    if (checkpointer_ == nullptr) return FailedPrecondition("this ps cannot save checkpoints");
    auto r = checkpointer_->Save(*m);
    if (!r.ok()) {
      PS_LOG(Error) << "saving checkpoint " << m->global_step
                    << " failed: " << r.status().ToString();
      return r.status();
    }
    // Saved only once every step before it was applied: no push below it can come.
    if (m->global_step >= 0) TrimApplied(m->global_step);
    return proto::Body(*r);
  }
  const auto& m = std::get<proto::Restore>(body);
  if (checkpointer_ == nullptr) return FailedPrecondition("this ps cannot restore checkpoints");
  Status st = checkpointer_->Restore(m);
  if (!st.ok()) {
    PS_LOG(Error) << "restoring checkpoint " << m.global_step << " failed: " << st.ToString();
    return st;
  }
  {
    std::lock_guard lock(applied_mu_);
    applied_.clear();  // the steps after the checkpoint will be run again
  }
  {
    std::lock_guard lock(mode_mu_);
    base_version_ = m.global_step;
    sync_.clear();
    pulls_released_.reset();
    // Workers keep counting their steps across a restore (a restarted ps knows none):
    // until a worker is heard from again it holds nobody back.
    clocks_.assign(clocks_.size(), -1);
    offsets_.assign(offsets_.size(), 0);
    seen_.assign(seen_.size(), -1);
    idle_at_.assign(idle_at_.size(), -1);
  }
  FailParked(Aborted("the ps was restored to checkpoint " + std::to_string(m.global_step)));
  return proto::Body(proto::Ack{});
}

void Service::Handle(net::Request request, net::Responder responder) {
  auto& body = request.envelope.body;
  if (std::holds_alternative<proto::CreateShards>(body) ||
      std::holds_alternative<proto::Save>(body) || std::holds_alternative<proto::Restore>(body)) {
    // They may hold store locks for long or change the mode: from here Inline() says no,
    // and once the inline handlers under way have returned they run alone (with the
    // pool's requests). The gate opens again before the reply leaves.
    Result<proto::Body> r = [&]() -> Result<proto::Body> {
      long_ops_.fetch_add(1);
      std::unique_lock gate(inline_gate_);
      struct Done {
        std::atomic<int>& n;
        ~Done() { n.fetch_sub(1); }
      } done{long_ops_};
      // CreateShards never reads the hook: a test sets it after its CreateShards, and a read
      // then would race with that write (no happens-before through the socket).
      if (!std::holds_alternative<proto::CreateShards>(body) && long_op_hook_) long_op_hook_();
      PS_RETURN_IF_ERROR(CheckGeneration(request));
      // The gate keeps out inline pushes only; the pool's go on (a worker's pushes in
      // flight when the chief restores after a ps failure). A restore fills a shard piece
      // by piece (Store::CreatedRows) and must run alone: hold the fence exclusively too
      // (after the generation check, which may take it itself).
      std::unique_lock pushes(fence_, std::defer_lock);
      if (std::holds_alternative<proto::Restore>(body)) pushes.lock();
      Result<proto::Body> r = HandleLongOp(body, request.peer);
      // A Restore that happened (its marks forgotten) fails the pushes being applied
      // while they arrive; the fence is still held, so no part of one runs in between.
      if (r.ok() && std::holds_alternative<proto::Restore>(body)) restores_.fetch_add(1);
      return r;
    }();
    if (!r.ok()) return responder.Fail(r.status());
    return responder.Reply(std::move(*r));
  }
  if (auto* early = dynamic_cast<EarlyPush*>(request.watcher.get())) {
    early->Finish(request.payload, responder);
    net::RecycleBuffer(std::move(request.payload));
    return;
  }
  if (auto* m = std::get_if<proto::Push>(&body)) {
    SliceInfos pull_info;
    auto r = [&]() -> Result<proto::PushReply> {
      std::shared_lock fence(fence_);  // from the generation check until applied
      PS_RETURN_IF_ERROR(CheckGeneration(request));
      if (push_hook_) push_hook_();
      return Push(*m, request.payload, &pull_info);
    }();
    net::RecycleBuffer(std::move(request.payload));
    if (!r.ok()) return responder.Fail(r.status());
    if (!m->pull) return responder.Reply(*r);
    push_pulls_.fetch_add(1, std::memory_order_relaxed);  // its items were checked with the push's
    // The pull after it (async mode, checked by Push): served now, so it sees this
    // push's gradient applied; answered in the PushReply.
    return Pull(*m->pull, pull_info, responder, std::move(*r));
  }
  if (Status st = CheckGeneration(request); !st.ok()) return responder.Fail(st);
  if (auto* m = std::get_if<proto::Pull>(&body))
    return PullOrWait(std::move(*m), std::move(responder));
  if (auto* m = std::get_if<proto::ReleasePulls>(&body)) {
    const Status why =
        Aborted("pull released: " + (m->reason.empty() ? "the chief is recovering" : m->reason));
    {
      std::lock_guard lock(mode_mu_);
      pulls_released_ = why;
    }
    FailParked(why);
    return responder.Reply(proto::Ack{});
  }
  if (std::holds_alternative<proto::GetStatus>(body)) {
    std::function<proto::PsStatus()> source;
    {
      std::lock_guard lock(mu_);
      source = status_source_;
    }
    if (!source) return responder.Fail(Unavailable("this ps has no status yet"));
    return responder.Reply(proto::PsStatusReply{source()});
  }
  if (auto* m = std::get_if<proto::Shutdown>(&body)) {
    responder.Reply(proto::Ack{});
    RequestStop(
        {m->reason.empty() ? "Shutdown from " + request.peer.Name() : m->reason, m->retryable});
    return;
  }
  responder.Fail(ProtocolError(std::string("a ps does not handle ") + proto::BodyName(body)));
}

proto::Shutdown Service::WaitForShutdown() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return shutdown_.has_value(); });
  return *shutdown_;
}

void Service::SetStatusSource(std::function<proto::PsStatus()> source) {
  std::lock_guard lock(mu_);
  status_source_ = std::move(source);
}

void Service::RequestStop(proto::Shutdown why) {
  {
    std::lock_guard lock(mu_);
    if (!shutdown_) shutdown_ = std::move(why);
    cv_.notify_all();
  }
  FailParked(Aborted("the ps is shutting down"));
}

Status Service::CreateShards(const proto::CreateShards& msg) {
  PS_ASSIGN_OR_RETURN(OptimizerSpec spec,
                      OptimizerFromWire(msg.optimizer, "CreateShards.optimizer"));
  PS_RETURN_IF_ERROR(store_->Configure(spec));
  PS_ASSIGN_OR_RETURN(UpdateSpec update, UpdateFromWire(msg.update, "CreateShards.update"));
  bool changed = false;
  {
    std::lock_guard lock(mode_mu_);
    pulls_released_.reset();  // a new chief's job, or a ps being recreated
    configured_ = true;
    if (!(update == update_)) {
      update_ = update;
      mode_.store(update.StepMode());
      base_version_ = 0;
      sync_.clear();
      clocks_.assign(static_cast<size_t>(update.num_workers), 0);
      offsets_.assign(static_cast<size_t>(update.num_workers), 0);
      seen_.assign(static_cast<size_t>(update.num_workers), -1);
      idle_at_.assign(static_cast<size_t>(update.num_workers), -1);
      changed = true;
      const UpdateMode steps = update.StepMode();
      PS_LOG(Info) << "update mode " << update.Describe()
                   << (steps == UpdateMode::kSync
                           ? ", " + std::to_string(update.replicas()) + " of " +
                                 std::to_string(update.num_workers) + " workers per update"
                       : steps == UpdateMode::kBoundedStaleness
                           ? ", staleness " + std::to_string(update.staleness)
                           : std::string());
    }
  }
  if (changed) FailParked(Aborted("the update mode changed"));
  for (const auto& d : msg.shards) {
    auto def = ShardDefFromWire(d);
    if (!def.ok()) return def.status().WithContext("CreateShards");
    PS_RETURN_IF_ERROR(store_->Create(*def).WithContext("CreateShards"));
  }
  return Status::Ok();
}

Result<Service::SliceInfo> Service::SliceOf(const proto::Slice& slice) {
  PS_ASSIGN_OR_RETURN(ShardDef def, store_->GetDef({slice.var, slice.shard}));
  uint64_t rows = slice.all_rows ? static_cast<uint64_t>(def.layout.rows) : slice.rows.size();
  return SliceInfo{.floats = rows * static_cast<uint64_t>(def.layout.cols),
                   .rows = def.layout.rows,
                   .cols = def.layout.cols,
                   .sparse = def.sparse_class(),
                   .lazy = def.layout.lazy};
}

Result<Service::SliceInfos> Service::SlicesOf(const std::vector<proto::Slice>& items) {
  SliceInfos info;
  info.reserve(items.size());
  for (const auto& item : items) {
    PS_ASSIGN_OR_RETURN(SliceInfo i, SliceOf(item));
    info.push_back(i);
  }
  return info;
}

void Service::Pull(const proto::Pull& msg, const SliceInfos& info, net::Responder& responder,
                   std::optional<proto::PushReply> pushed) {
  proto::PullReply reply;
  uint64_t total = 0;
  for (const SliceInfo& i : info) {
    reply.item_floats.push_back(i.floats);
    total += i.floats;
  }
  {
    // Before the data: the data is at least as new as the versions reported.
    std::lock_guard lock(mode_mu_);
    if (update_.StepMode() == UpdateMode::kSync) {
      for (size_t i = 0; i < msg.items.size(); ++i) {
        if (!SyncClass(info[i].sparse)) {  // hybrid: no step waits for this shard
          reply.versions.push_back(INT64_MAX);
          continue;
        }
        auto it = sync_.find({msg.items[i].var, msg.items[i].shard});
        reply.versions.push_back(it == sync_.end() ? base_version_ : it->second.version);
      }
    }
  }
  proto::Body body;
  if (pushed) {
    pushed->pull = std::move(reply);
    body = std::move(*pushed);
  } else {
    body = std::move(reply);
  }
  if (PullDirect(msg, info, body, responder)) return;
  net::Buffer buffer = net::TakeBuffer(total * sizeof(float));
  std::span<float> out = buffer.floats();
  if (PullProgressive(msg, info, body, buffer, responder)) return;
  uint64_t offset = 0;
  for (size_t i = 0; i < msg.items.size(); ++i) {
    Status st = PullItem(msg.items[i], out.subspan(offset, info[i].floats));
    if (!st.ok()) return responder.Fail(st);
    offset += info[i].floats;
  }
  responder.Reply(std::move(body), net::RecycledPayload(std::move(buffer)));
}

bool Service::PullProgressive(const proto::Pull& msg, const SliceInfos& info, proto::Body& body,
                              net::Buffer& buffer, net::Responder& responder) {
  if (buffer.size() < kProgressivePullBytes) return false;
  // A frame on the wire cannot wait: copied only while no CreateShards, Save or Restore
  // (which may hold a shard's locks for long) is pending or running, as an inline handler
  // runs; the gate is held until the copy is done. Otherwise copied first, then sent.
  std::shared_lock gate(inline_gate_, std::try_to_lock);
  if (!gate.owns_lock() || long_ops_.load() > 0) return false;
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

Status Service::PullItem(const proto::Slice& item, std::span<float> dst) {
  ShardKey key{item.var, item.shard};
  return item.all_rows ? store_->Pull(key, dst) : store_->PullRows(key, item.rows, dst);
}

bool Service::PullDirect(const proto::Pull& msg, const SliceInfos& info, const proto::Body& body,
                         net::Responder& responder) {
  // Async only: the other modes go to the pool, where BeginDirect says no anyway.
  if (mode_.load() != UpdateMode::kAsync) return false;
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

Status Service::CheckTag(const char* op, int32_t worker, int64_t clock) const {
  if (update_.StepMode() == UpdateMode::kAsync ||
      (worker >= 0 && worker < update_.num_workers && clock >= 0)) {
    return Status::Ok();
  }
  return InvalidArgument(std::string(op) + ": " + update_.Describe() +
                         " mode needs the worker (0.." + std::to_string(update_.num_workers - 1) +
                         ") and its clock, got worker " + std::to_string(worker) + " clock " +
                         std::to_string(clock));
}

Result<proto::PushReply> Service::Push(const proto::Push& msg, const net::Buffer& payload,
                                       SliceInfos* pull_info) {
  PS_ASSIGN_OR_RETURN(SliceInfos info, SlicesOf(msg.items));
  if (msg.pull) {
    // The pull after it is checked before anything is applied, as the push itself.
    PS_ASSIGN_OR_RETURN(*pull_info, SlicesOf(msg.pull->items));
    for (size_t i = 0; i < msg.pull->items.size(); ++i) {
      const auto& item = msg.pull->items[i];
      const ShardKey key{item.var, item.shard};
      if (item.all_rows && (*pull_info)[i].lazy) return LazyWhole("Pull", key);
      PS_RETURN_IF_ERROR(CheckRows("Pull", key, item.rows, (*pull_info)[i].rows));
    }
  }
  uint64_t total = 0;
  for (const SliceInfo& i : info) total += i.floats;
  if (payload.size() != total * sizeof(float)) {
    return InvalidArgument("Push: payload has " + std::to_string(payload.size()) +
                           " bytes but its items need " + std::to_string(total * sizeof(float)));
  }
  // The payload cut into the items' gradients.
  std::vector<std::span<const float>> grads;
  std::span<const float> rest = payload.floats();
  for (const SliceInfo& i : info) {
    grads.push_back(rest.first(i.floats));
    rest = rest.subspan(i.floats);
  }
  UpdateMode mode;
  std::vector<bool> on_arrival(msg.items.size(),
                               true);  // [item] applied on arrival (not a sync step's sum)
  {
    std::lock_guard lock(mode_mu_);
    mode = update_.StepMode();
    PS_RETURN_IF_ERROR(CheckTag("Push", msg.worker, msg.clock));
    // Elsewhere a pull may have to wait for other workers' steps, and this push's reply
    // with it.
    if (msg.pull && mode != UpdateMode::kAsync) {
      return FailedPrecondition("Push: a pull after a push needs async mode; this ps trains in " +
                                update_.Describe() + " mode");
    }
    if (mode == UpdateMode::kSync) {
      for (size_t i = 0; i < msg.items.size(); ++i) on_arrival[i] = !SyncClass(info[i].sparse);
    }
  }
  // What the push itself can get wrong is checked before anything is added, so a
  // malformed push changes nothing: the rows of every item, and for the items applied on
  // arrival (the store applies them one by one) that no row appears twice; a sync step's
  // sum adds repeated rows up. (A push the state refuses later, too far past the last
  // checkpoint or ahead of a shard a Restore moved back, keeps the items applied before.)
  for (size_t i = 0; i < msg.items.size(); ++i) {
    const auto& item = msg.items[i];
    const ShardKey key{item.var, item.shard};
    PS_RETURN_IF_ERROR(CheckRows("Push", key, item.rows, info[i].rows));
    if (on_arrival[i]) PS_RETURN_IF_ERROR(CheckUnique("Push", key, item.rows));
  }
  if (mode == UpdateMode::kSync) return PushSync(msg, grads, info, on_arrival);
  PS_ASSIGN_OR_RETURN(const int32_t skipped, ApplyOnArrival(msg, grads, -1, msg.step_id, {}));
  if (mode == UpdateMode::kBoundedStaleness) {
    {
      std::lock_guard lock(mode_mu_);
      const auto w = static_cast<size_t>(msg.worker);
      if (w < clocks_.size()) {
        const int64_t step = WorkerClock(msg.worker, msg.clock);
        if (msg.idle) {
          // Out of work: hold nobody back, unless a later step of it has already arrived
          // (on the other connection).
          if (seen_[w] < step) idle_at_[w] = step;
        } else {
          Seen(msg.worker, step);
          clocks_[w] = std::max(clocks_[w], step + 1);
        }
      }
    }
    ServeReady();
  }
  return proto::PushReply{store_->global_step(), skipped, 0};
}

Result<int32_t> Service::ApplyOnArrival(const proto::Push& msg,
                                        const std::vector<std::span<const float>>& grads,
                                        int32_t worker, int64_t step,
                                        const std::vector<bool>& only) {
  int32_t skipped = 0;
  for (size_t i = 0; i < msg.items.size(); ++i) {
    if (!only.empty() && !only[i]) continue;
    const auto& item = msg.items[i];
    const auto g = grads[i];
    // No rows (the worker's batch touched none here): nothing to apply, mark or count.
    if (!item.all_rows && item.rows.empty()) continue;
    ShardKey key{item.var, item.shard};
    PS_ASSIGN_OR_RETURN(const bool fresh, MarkApplied(key, worker, step));
    if (!fresh) {
      ++skipped;
      continue;
    }
    Status st = item.all_rows ? store_->Push(key, g, msg.global_step)
                              : store_->PushRows(key, item.rows, g, msg.global_step);
    if (!st.ok()) {
      UnmarkApplied(key, worker, step);
      return st;
    }
    applied_on_arrival_.fetch_add(1, std::memory_order_relaxed);
  }
  CountSkipped(step, worker, skipped);
  return skipped;
}

void Service::CountSkipped(int64_t step, int32_t worker, int32_t skipped) {
  if (skipped == 0) return;
  skipped_ += static_cast<uint64_t>(skipped);
  PS_LOG(Info) << "step " << step
               << (worker >= 0 ? " of worker " + std::to_string(worker) : std::string())
               << " was already applied to " << skipped
               << " shard(s): the repeated push is ignored";
}

Service::SyncShard& Service::SyncState(const ShardKey& key) {
  auto [it, inserted] = sync_.try_emplace(key);
  if (inserted) it->second.version = base_version_;
  return it->second;
}

Status Service::CheckNotAhead(const proto::Push& msg, const SliceInfos& info) {
  for (size_t i = 0; i < msg.items.size(); ++i) {
    if (!SyncClass(info[i].sparse)) continue;
    const auto& item = msg.items[i];
    const SyncShard& ss = SyncState({item.var, item.shard});
    if (msg.clock > ss.version) {
      return FailedPrecondition("Push: update " + std::to_string(msg.clock) + " for " + item.var +
                                "/part_" + std::to_string(item.shard) +
                                ", which is still at update " + std::to_string(ss.version));
    }
  }
  return Status::Ok();
}

Result<proto::PushReply> Service::PushSync(const proto::Push& msg,
                                           const std::vector<std::span<const float>>& grads,
                                           const SliceInfos& info,
                                           const std::vector<bool>& on_arrival) {
  proto::PushReply reply;
  // Hybrid: the async class's items, applied on arrival (outside mode_mu_: they are the
  // big embedding pushes), once per (shard, step, worker): every worker runs every step.
  const bool any_on_arrival =
      std::find(on_arrival.begin(), on_arrival.end(), true) != on_arrival.end();
  {
    std::lock_guard lock(mode_mu_);
    PS_RETURN_IF_ERROR(CheckNotAhead(msg, info));
  }
  if (any_on_arrival) {
    PS_ASSIGN_OR_RETURN(reply.skipped,
                        ApplyOnArrival(msg, grads, msg.worker, msg.clock, on_arrival));
  }
  Status failed;
  bool advanced = false;
  {
    std::lock_guard lock(mode_mu_);
    // Again: a Restore may have moved a shard back meanwhile.
    PS_RETURN_IF_ERROR(CheckNotAhead(msg, info));
    for (size_t i = 0; i < msg.items.size(); ++i) {
      if (on_arrival[i]) continue;
      const auto& item = msg.items[i];
      const auto g = grads[i];
      ShardKey key{item.var, item.shard};
      const auto cols = static_cast<size_t>(info[i].cols);
      SyncShard& ss = SyncState(key);
      if (msg.clock < ss.version) {  // computed for an update this shard has applied: too late
        ++reply.stale;
        continue;
      }
      if (std::find(ss.workers.begin(), ss.workers.end(), msg.worker) != ss.workers.end()) {
        ++reply.skipped;  // a resent push
        continue;
      }
      if (item.all_rows) {
        if (ss.dense_sum.empty()) {
          ss.dense_sum.assign(g.begin(), g.end());
        } else {
          for (size_t k = 0; k < g.size(); ++k) ss.dense_sum[k] += g[k];
        }
      } else {
        for (size_t j = 0; j < item.rows.size(); ++j) {
          auto [it, inserted] = ss.row_index.try_emplace(item.rows[j], ss.rows.size());
          if (inserted) {
            ss.rows.push_back(item.rows[j]);
            ss.row_sum.resize(ss.row_sum.size() + cols, 0.0f);
          }
          float* dst = ss.row_sum.data() + it->second * cols;
          const float* src = g.data() + j * cols;
          for (size_t k = 0; k < cols; ++k) dst[k] += src[k];
        }
      }
      ss.workers.push_back(msg.worker);
      if (static_cast<int>(ss.workers.size()) < update_.replicas()) continue;
      // The update is complete: apply the average once (a worker that did not touch a
      // row contributed zero to it), then collect the next one. If the store cannot apply
      // it (out of memory), the update is dropped rather than left half-collected: the
      // shard moves on either way, so no worker waits for it forever.
      const float scale = 1.0f / static_cast<float>(ss.workers.size());
      Status st;
      if (!ss.dense_sum.empty()) {
        for (float& x : ss.dense_sum) x *= scale;
        st = store_->Push(key, ss.dense_sum, ss.version);
      }
      if (st.ok() && !ss.rows.empty()) {
        for (float& x : ss.row_sum) x *= scale;
        st = store_->PushRows(key, ss.rows, ss.row_sum, ss.version);
      }
      if (!st.ok()) {
        PS_LOG(Error) << "update " << ss.version << " of " << key.ToString()
                      << " not applied: " << st.ToString();
        if (failed.ok()) failed = st;
      }
      ss.version += 1;
      ss.workers.clear();
      ss.dense_sum.clear();
      ss.row_index.clear();
      ss.rows.clear();
      ss.row_sum.clear();
      advanced = true;
    }
  }
  if (reply.stale > 0) stale_ += static_cast<uint64_t>(reply.stale);
  if (advanced) ServeReady();
  if (!failed.ok()) return failed;
  reply.global_step = store_->global_step();
  return reply;
}

void Service::Seen(int32_t w, int64_t step) {
  const auto i = static_cast<size_t>(w);
  seen_[i] = std::max(seen_[i], step);
  if (idle_at_[i] >= 0 && step >= idle_at_[i]) idle_at_[i] = -1;  // busy again
}

bool Service::Ready(const proto::Pull& msg, const SliceInfos& info, int64_t step) {
  const UpdateMode steps = update_.StepMode();
  if (steps == UpdateMode::kSync) {
    for (size_t i = 0; i < msg.items.size(); ++i) {
      if (!SyncClass(info[i].sparse)) continue;  // hybrid: the async class never waits
      auto it = sync_.find({msg.items[i].var, msg.items[i].shard});
      if ((it == sync_.end() ? base_version_ : it->second.version) < msg.clock) return false;
    }
    return true;
  }
  if (steps == UpdateMode::kBoundedStaleness) {
    int64_t slowest = INT64_MAX;
    for (size_t w = 0; w < clocks_.size(); ++w) {
      if (static_cast<int32_t>(w) == msg.worker || clocks_[w] < 0 || idle_at_[w] >= 0) continue;
      slowest = std::min(slowest, clocks_[w]);
    }
    if (slowest == INT64_MAX) return true;  // the only worker
    if (step - slowest > update_.staleness) return false;
    max_lead_ = std::max(max_lead_, step - slowest);
  }
  return true;
}

int64_t Service::WorkerClock(int32_t w, int64_t clock) {
  auto& known = clocks_[static_cast<size_t>(w)];
  auto& offset = offsets_[static_cast<size_t>(w)];
  if (known < 0) {
    known = clock;  // first heard of since a restore
    offset = 0;
  } else if (clock + offset + 1 < known) {
    // A pull or push for a step before the last one the worker pushed: only a new
    // process counts again from below (one process's steps only go up; the last push
    // may be resent).
    offset = known - clock;
  }
  return clock + offset;
}

void Service::PullOrWait(proto::Pull msg, net::Responder responder) {
  auto info = SlicesOf(msg.items);
  if (!info.ok()) return responder.Fail(info.status());
  {
    std::lock_guard lock(mode_mu_);
    // A pull without a clock (evaluation, the chief's final eval) reads what is there.
    if (update_.StepMode() != UpdateMode::kAsync && msg.clock >= 0) {
      if (Status st = CheckTag("Pull", msg.worker, msg.clock); !st.ok()) return responder.Fail(st);
      int64_t step = msg.clock;
      if (update_.StepMode() == UpdateMode::kBoundedStaleness) {
        step = WorkerClock(msg.worker, msg.clock);
        Seen(msg.worker, step);
      }
      if (!Ready(msg, *info, step)) {
        if (pulls_released_) return responder.Fail(*pulls_released_);
        ++waited_pulls_;
        parked_.push_back({std::move(msg), std::move(*info), step, std::move(responder)});
        return;
      }
    }
  }
  Pull(msg, *info, responder);
}

void Service::ServeReady() {
  std::vector<Parked> ready;
  {
    std::lock_guard lock(mode_mu_);
    for (size_t i = 0; i < parked_.size();) {
      if (Ready(parked_[i].msg, parked_[i].info, parked_[i].step)) {
        ready.push_back(std::move(parked_[i]));
        parked_[i] = std::move(parked_.back());
        parked_.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (auto& p : ready) Pull(p.msg, p.info, p.responder);
}

void Service::FailParked(const Status& why) {
  std::vector<Parked> parked;
  {
    std::lock_guard lock(mode_mu_);
    parked.swap(parked_);
  }
  for (auto& p : parked) p.responder.Fail(why);
}

Service::UpdateStats Service::update_stats() const {
  std::lock_guard lock(mode_mu_);
  UpdateStats s;
  s.spec = update_;
  s.stale_dropped = stale_.load();
  s.waited_pulls = waited_pulls_;
  s.max_lead = max_lead_;
  s.configured = configured_;
  s.applied_on_arrival = applied_on_arrival_.load();
  s.min_version = s.max_version = base_version_;
  if (update_.StepMode() == UpdateMode::kSync) {
    for (const ShardKey& key : store_->Keys()) {
      auto def = store_->GetDef(key);
      if (def.ok() && SyncClass(def->sparse_class())) ++s.sync_shards;
    }
  }
  bool first = true;
  for (const auto& [key, ss] : sync_) {
    s.min_version = first ? ss.version : std::min(s.min_version, ss.version);
    s.max_version = first ? ss.version : std::max(s.max_version, ss.version);
    first = false;
  }
  return s;
}

}  // namespace ps::server

#include "libps/server/service.h"

#include <algorithm>
#include <cstring>

#include "libps/core/log.h"
#include "libps/server/store_shard.h"
#include "libps/server/wire_specs.h"

namespace ps::server {

Status Service::CheckGeneration(const net::Request& request) {
  const uint64_t gen = request.envelope.generation;
  const bool chief = request.peer.role == proto::Role::kChief;
  switch (machine_.CheckGeneration(gen, chief)) {
    case UpdateMachine::GenCheck::kOk:
      return Status::Ok();
    case UpdateMachine::GenCheck::kRaised: {
      // Wait for the pushes that passed the old generation's check.
      std::unique_lock drained(fence_);
      return Status::Ok();
    }
    case UpdateMachine::GenCheck::kStale:
      break;
  }
  const std::string cur = std::to_string(machine_.generation());
  if (chief) {
    return Aborted("stale chief: generation " + std::to_string(gen) + " < " + cur +
                   " (a newer chief has taken over)");
  }
  return Aborted(request.peer.Name() + " sent generation " + std::to_string(gen) + " < " + cur +
                 " (work of a previous chief)");
}

size_t Service::applied_mark_words() const {
  std::lock_guard lock(marks_mu_);
  return machine_.mark_words();
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
    {
      // Saved only once every step before it was applied: no push below it can come.
      std::lock_guard lock(marks_mu_);
      machine_.Saved(m->global_step);
    }
    return proto::Body(*r);
  }
  const auto& m = std::get<proto::Restore>(body);
  if (checkpointer_ == nullptr) return FailedPrecondition("this ps cannot restore checkpoints");
  Status st = checkpointer_->Restore(m);
  if (!st.ok()) {
    PS_LOG(Error) << "restoring checkpoint " << m.global_step << " failed: " << st.ToString();
    return st;
  }
  UpdateMachine::Waiting failed;
  {
    std::scoped_lock lock(mode_mu_, marks_mu_);
    machine_.Restored(m.global_step, &failed);
  }
  const Status why = Aborted("the ps was restored to checkpoint " + std::to_string(m.global_step));
  Answer(failed, &why);
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
      machine_.LongOpBegin();
      std::unique_lock gate(inline_gate_);
      struct Done {
        UpdateMachine& m;
        ~Done() { m.LongOpEnd(); }
      } done{machine_};
      // CreateShards never reads the hook: a test sets it after its CreateShards, and a read
      // then would race with that write (no happens-before through the socket).
      if (!std::holds_alternative<proto::CreateShards>(body) && long_op_hook_) long_op_hook_();
      PS_RETURN_IF_ERROR(CheckGeneration(request));
      // The gate keeps out inline pushes only; the pool's go on (a worker's pushes in
      // flight when the chief restores after a ps failure). A restore fills a shard piece
      // by piece (Store::CreatedRows) and must run alone: hold the fence exclusively too
      // (after the generation check, which may take it itself). A Restore that happened
      // (Restored) fails the pushes being applied while they arrive; the fence is still
      // held, so no part of one runs in between.
      std::unique_lock pushes(fence_, std::defer_lock);
      if (std::holds_alternative<proto::Restore>(body)) pushes.lock();
      return HandleLongOp(body, request.peer);
    }();
    if (!r.ok()) return responder.Fail(r.status());
    return responder.Reply(std::move(*r));
  }
  if (FinishEarly(request, responder)) return;
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
    UpdateMachine::Waiting failed;
    {
      std::lock_guard lock(mode_mu_);
      machine_.ReleasePulls(why, &failed);
    }
    Answer(failed, &why);
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
  UpdateMachine::Waiting failed;
  {
    std::lock_guard lock(mode_mu_);
    machine_.ReleaseAll(&failed);
  }
  const Status st = Aborted("the ps is shutting down");
  Answer(failed, &st);
}

Status Service::CreateShards(const proto::CreateShards& msg) {
  PS_ASSIGN_OR_RETURN(OptimizerSpec spec,
                      OptimizerFromWire(msg.optimizer, "CreateShards.optimizer"));
  PS_RETURN_IF_ERROR(store_->Configure(spec));
  PS_ASSIGN_OR_RETURN(UpdateSpec update, UpdateFromWire(msg.update, "CreateShards.update"));
  UpdateMachine::Waiting failed;
  bool changed = false;
  {
    std::lock_guard lock(mode_mu_);
    changed = machine_.Configure(update, &failed);
  }
  if (changed) {
    const UpdateMode steps = update.StepMode();
    PS_LOG(Info) << "update mode " << update.Describe()
                 << (steps == UpdateMode::kSync
                         ? ", " + std::to_string(update.replicas()) + " of " +
                               std::to_string(update.num_workers) + " workers per update"
                     : steps == UpdateMode::kBoundedStaleness
                         ? ", staleness " + std::to_string(update.staleness)
                         : std::string());
    const Status why = Aborted("the update mode changed");
    Answer(failed, &why);
  }
  for (const auto& d : msg.shards) {
    auto def = ShardDefFromWire(d);
    if (!def.ok()) return def.status().WithContext("CreateShards");
    PS_RETURN_IF_ERROR(store_->Create(*def).WithContext("CreateShards"));
  }
  return Status::Ok();
}

Result<SliceInfo> Service::SliceOf(const proto::Slice& slice) {
  PS_ASSIGN_OR_RETURN(ShardDef def, store_->GetDef({slice.var, slice.shard}));
  uint64_t rows = slice.all_rows ? static_cast<uint64_t>(def.layout.rows) : slice.rows.size();
  return SliceInfo{.floats = rows * static_cast<uint64_t>(def.layout.cols),
                   .rows = def.layout.rows,
                   .cols = def.layout.cols,
                   .sparse = def.sparse_class(),
                   .lazy = def.layout.lazy};
}

Result<SliceInfos> Service::SlicesOf(const std::vector<proto::Slice>& items) {
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
    machine_.Versions(msg, info, &reply.versions);
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

Status Service::PullItem(const proto::Slice& item, std::span<float> dst) {
  ShardKey key{item.var, item.shard};
  return item.all_rows ? store_->Pull(key, dst) : store_->PullRows(key, item.rows, dst);
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
  std::vector<bool> on_arrival;  // [item] applied on arrival (not a sync step's sum)
  UpdateMode mode;
  {
    std::lock_guard lock(mode_mu_);
    PS_ASSIGN_OR_RETURN(mode, machine_.BeginPush(msg, info, &on_arrival));
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
      machine_.Pushed(msg.worker, msg.clock, msg.idle);
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
    bool fresh = false;
    {
      std::lock_guard lock(marks_mu_);
      PS_ASSIGN_OR_RETURN(fresh, machine_.Mark(key, worker, step));
    }
    if (!fresh) {
      ++skipped;
      continue;
    }
    Status st = item.all_rows ? store_->Push(key, g, msg.global_step)
                              : store_->PushRows(key, item.rows, g, msg.global_step);
    if (!st.ok()) {
      std::lock_guard lock(marks_mu_);
      machine_.Unmark(key, worker, step);
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
    PS_RETURN_IF_ERROR(machine_.CheckNotAhead(msg, info));
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
    PS_RETURN_IF_ERROR(machine_.CheckNotAhead(msg, info));
    for (size_t i = 0; i < msg.items.size(); ++i) {
      if (on_arrival[i]) continue;
      const auto& item = msg.items[i];
      ShardKey key{item.var, item.shard};
      UpdateMachine::Average avg;
      switch (machine_.Contribute(key, item, msg.clock, msg.worker, grads[i],
                                  static_cast<size_t>(info[i].cols), &avg)) {
        case UpdateMachine::Contribution::kStale:
          ++reply.stale;
          continue;
        case UpdateMachine::Contribution::kRepeat:
          ++reply.skipped;
          continue;
        case UpdateMachine::Contribution::kAdded:
          continue;
        case UpdateMachine::Contribution::kComplete:
          break;
      }
      // Apply the average once. If the store cannot (out of memory), the update is
      // dropped rather than left half-collected (Advance either way).
      Status st;
      if (!avg.dense.empty()) st = store_->Push(key, avg.dense, avg.version);
      if (st.ok() && !avg.rows.empty())
        st = store_->PushRows(key, avg.rows, avg.row_values, avg.version);
      if (!st.ok()) {
        PS_LOG(Error) << "update " << avg.version << " of " << key.ToString()
                      << " not applied: " << st.ToString();
        if (failed.ok()) failed = st;
      }
      machine_.Advance(key);
      advanced = true;
    }
  }
  if (advanced) ServeReady();
  if (!failed.ok()) return failed;
  reply.global_step = store_->global_step();
  return reply;
}

void Service::PullOrWait(proto::Pull msg, net::Responder responder) {
  auto info = SlicesOf(msg.items);
  if (!info.ok()) return responder.Fail(info.status());
  Status why;
  {
    std::lock_guard lock(mode_mu_);
    switch (machine_.ArrivePull(msg, *info, next_ticket_, &why)) {
      case UpdateMachine::PullVerdict::kServe:
        break;
      case UpdateMachine::PullVerdict::kWait:
        waiting_.emplace(next_ticket_++, std::move(responder));
        return;
      case UpdateMachine::PullVerdict::kFail:
        return responder.Fail(why);
    }
  }
  Pull(msg, *info, responder);
}

void Service::ServeReady() {
  UpdateMachine::Waiting ready;
  {
    std::lock_guard lock(mode_mu_);
    if (machine_.waiting() == 0) return;
    machine_.ReleaseReady(&ready);
  }
  Answer(ready, nullptr);
}

void Service::Answer(UpdateMachine::Waiting& pulls, const Status* why) {
  if (pulls.empty()) return;
  std::vector<net::Responder> responders;
  responders.reserve(pulls.size());
  {
    std::lock_guard lock(mode_mu_);
    for (const auto& p : pulls) {
      auto it = waiting_.find(p.ticket);
      PS_ASSERT(it != waiting_.end());  // parked with its responder, under mode_mu_
      responders.push_back(std::move(it->second));
      waiting_.erase(it);
    }
  }
  for (size_t i = 0; i < pulls.size(); ++i) {
    if (why != nullptr) {
      responders[i].Fail(*why);
    } else {
      Pull(pulls[i].msg, pulls[i].info, responders[i]);
    }
  }
}

Service::UpdateStats Service::update_stats() const {
  std::lock_guard lock(mode_mu_);
  UpdateStats s = machine_.Stats();
  s.applied_on_arrival = applied_on_arrival_.load();
  if (s.spec.StepMode() == UpdateMode::kSync) {
    for (const ShardKey& key : store_->Keys()) {
      auto def = store_->GetDef(key);
      if (def.ok() && s.spec.ModeOf(def->sparse_class()) == UpdateMode::kSync) ++s.sync_shards;
    }
  }
  return s;
}

}  // namespace ps::server

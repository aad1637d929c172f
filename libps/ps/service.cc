#include "libps/ps/service.h"

#include <cstring>

#include "libps/core/json.h"
#include "libps/core/log.h"

namespace ps::ps {

namespace {
constexpr int64_t kMaxTrackedStep = int64_t{1} << 28;
}  // namespace

Status Service::CheckGeneration(const net::Request& request) {
  const uint64_t gen = request.envelope.generation;
  if (request.peer.role == proto::Role::kChief) {
    uint64_t cur = generation_.load();
    while (gen > cur && !generation_.compare_exchange_weak(cur, gen)) {
    }
    if (gen < cur) {
      return Aborted("stale chief: generation " + std::to_string(gen) + " < " + std::to_string(cur) +
                     " (a newer chief has taken over)");
    }
    return Status::Ok();
  }
  if (gen < generation_.load()) {
    return Aborted(request.peer.Name() + " sent generation " + std::to_string(gen) + " < " +
                   std::to_string(generation_.load()) + " (work of a previous chief)");
  }
  return Status::Ok();
}

bool Service::MarkApplied(const ShardKey& key, int64_t step) {
  if (step < 0 || step >= kMaxTrackedStep) return true;
  std::lock_guard lock(applied_mu_);
  auto& bits = applied_[key];
  size_t word = static_cast<size_t>(step / 64);
  uint64_t bit = uint64_t{1} << (step % 64);
  if (bits.size() <= word) bits.resize(std::max(word + 1, bits.size() * 2), 0);
  if (bits[word] & bit) return false;
  bits[word] |= bit;
  return true;
}

void Service::UnmarkApplied(const ShardKey& key, int64_t step) {
  if (step < 0 || step >= kMaxTrackedStep) return;
  std::lock_guard lock(applied_mu_);
  auto& bits = applied_[key];
  size_t word = static_cast<size_t>(step / 64);
  if (word < bits.size()) bits[word] &= ~(uint64_t{1} << (step % 64));
}

void Service::Handle(net::Request request, net::Responder responder) {
  auto& body = request.envelope.body;
  if (Status st = CheckGeneration(request); !st.ok()) return responder.Fail(st);
  if (auto* m = std::get_if<proto::Pull>(&body)) {
    auto r = Pull(*m);
    if (!r.ok()) return responder.Fail(r.status());
    return responder.Reply(std::move(r->first), net::RecycledPayload(std::move(r->second)));
  }
  if (auto* m = std::get_if<proto::Push>(&body)) {
    auto r = Push(*m, request.payload);
    net::RecycleBuffer(std::move(request.payload));
    if (!r.ok()) return responder.Fail(r.status());
    return responder.Reply(*r);
  }
  if (auto* m = std::get_if<proto::CreateShards>(&body)) {
    Status st = CreateShards(*m);
    if (!st.ok()) {
      PS_LOG(Error) << "CreateShards from " << request.peer.Name() << " failed: " << st.ToString();
      return responder.Fail(st);
    }
    return responder.Reply(proto::Ack{});
  }
  if (auto* m = std::get_if<proto::Save>(&body)) {
    if (checkpointer_ == nullptr) return responder.Fail(FailedPrecondition("this ps cannot save checkpoints"));
    auto r = checkpointer_->Save(*m);
    if (!r.ok()) {
      PS_LOG(Error) << "saving checkpoint " << m->global_step << " failed: " << r.status().ToString();
      return responder.Fail(r.status());
    }
    return responder.Reply(*r);
  }
  if (auto* m = std::get_if<proto::Restore>(&body)) {
    if (checkpointer_ == nullptr) return responder.Fail(FailedPrecondition("this ps cannot restore checkpoints"));
    Status st = checkpointer_->Restore(*m);
    if (!st.ok()) {
      PS_LOG(Error) << "restoring checkpoint " << m->global_step << " failed: " << st.ToString();
      return responder.Fail(st);
    }
    {
      std::lock_guard lock(applied_mu_);
      applied_.clear();  // the steps after the checkpoint will be run again
    }
    return responder.Reply(proto::Ack{});
  }
  if (std::holds_alternative<proto::GetStatus>(body)) {
    std::function<std::string()> source;
    {
      std::lock_guard lock(mu_);
      source = status_source_;
    }
    if (!source) return responder.Fail(Unavailable("this ps has no status yet"));
    return responder.Reply(proto::StatusReply{source()});
  }
  if (auto* m = std::get_if<proto::Shutdown>(&body)) {
    responder.Reply(proto::Ack{});
    RequestStop(m->reason.empty() ? "Shutdown from " + request.peer.Name() : m->reason);
    return;
  }
  responder.Fail(ProtocolError(std::string("a ps does not handle ") + proto::BodyName(body)));
}

std::string Service::WaitForShutdown() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return shutdown_.has_value(); });
  return *shutdown_;
}

void Service::SetStatusSource(std::function<std::string()> source) {
  std::lock_guard lock(mu_);
  status_source_ = std::move(source);
}

void Service::RequestStop(std::string reason) {
  std::lock_guard lock(mu_);
  if (!shutdown_) shutdown_ = std::move(reason);
  cv_.notify_all();
}

Status Service::CreateShards(const proto::CreateShards& msg) {
  PS_ASSIGN_OR_RETURN(Json opt_json, ParseJson(msg.optimizer_json, "CreateShards.optimizer"));
  PS_ASSIGN_OR_RETURN(OptimizerSpec spec, ParseOptimizer(opt_json, "optimizer"));
  PS_RETURN_IF_ERROR(store_->Configure(spec));
  for (const auto& d : msg.shards) {
    std::string where = "CreateShards: " + d.var + "/part_" + std::to_string(d.shard);
    PS_ASSIGN_OR_RETURN(Json init_json, ParseJson(d.init_json, where + ".init"));
    auto init = model::ParseInit(init_json, where + ".init");
    if (!init.ok()) return init.status();
    ShardDef def{d.var, d.shard, d.row_begin, d.rows, d.cols, d.full_shape, *init, d.seed, d.num_shards};
    PS_RETURN_IF_ERROR(store_->Create(def).WithContext(where));
  }
  return Status::Ok();
}

Result<uint64_t> Service::SliceFloats(const proto::Slice& slice) {
  PS_ASSIGN_OR_RETURN(ShardDef def, store_->GetDef({slice.var, slice.shard}));
  uint64_t rows = slice.all_rows ? static_cast<uint64_t>(def.rows) : slice.rows.size();
  return rows * static_cast<uint64_t>(def.cols);
}

Result<std::pair<proto::PullReply, net::Buffer>> Service::Pull(const proto::Pull& msg) {
  proto::PullReply reply;
  uint64_t total = 0;
  for (const auto& item : msg.items) {
    PS_ASSIGN_OR_RETURN(uint64_t n, SliceFloats(item));
    reply.item_floats.push_back(n);
    total += n;
  }
  net::Buffer buffer = net::TakeBuffer(total * sizeof(float));
  std::span<float> out = buffer.floats();
  uint64_t offset = 0;
  for (size_t i = 0; i < msg.items.size(); ++i) {
    const auto& item = msg.items[i];
    auto dst = out.subspan(offset, reply.item_floats[i]);
    ShardKey key{item.var, item.shard};
    PS_RETURN_IF_ERROR(item.all_rows ? store_->Pull(key, dst) : store_->PullRows(key, item.rows, dst));
    offset += reply.item_floats[i];
  }
  return std::make_pair(std::move(reply), std::move(buffer));
}

Result<proto::PushReply> Service::Push(const proto::Push& msg, const net::Buffer& payload) {
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& item : msg.items) {
    PS_ASSIGN_OR_RETURN(uint64_t n, SliceFloats(item));
    sizes.push_back(n);
    total += n;
  }
  if (payload.size() != total * sizeof(float)) {
    return InvalidArgument("Push: payload has " + std::to_string(payload.size()) +
                           " bytes but its items need " + std::to_string(total * sizeof(float)));
  }
  std::span<const float> grads = payload.floats();
  uint64_t offset = 0;
  int32_t skipped = 0;
  for (size_t i = 0; i < msg.items.size(); ++i) {
    const auto& item = msg.items[i];
    auto g = grads.subspan(offset, sizes[i]);
    offset += sizes[i];
    ShardKey key{item.var, item.shard};
    if (!MarkApplied(key, msg.step_id)) {
      ++skipped;
      continue;
    }
    Status st = item.all_rows ? store_->Push(key, g, msg.global_step)
                              : store_->PushRows(key, item.rows, g, msg.global_step);
    if (!st.ok()) {
      UnmarkApplied(key, msg.step_id);
      return st;
    }
  }
  if (skipped > 0) {
    skipped_ += static_cast<uint64_t>(skipped);
    PS_LOG(Info) << "step " << msg.step_id << " was already applied to " << skipped
                 << " shard(s): the repeated push is ignored";
  }
  return proto::PushReply{store_->global_step(), skipped};
}

}  // namespace ps::ps

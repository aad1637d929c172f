#include "libps/server/update_machine.h"

#include <algorithm>
#include <string>

#include "libps/core/log.h"

namespace ps::server {

// ---- Fence part ----

UpdateMachine::GenCheck UpdateMachine::CheckGeneration(uint64_t gen, bool from_chief) {
  uint64_t cur = generation_.load();
  if (!from_chief) return gen < cur ? GenCheck::kStale : GenCheck::kOk;
  while (gen > cur && !generation_.compare_exchange_weak(cur, gen)) {}
  if (gen < cur) return GenCheck::kStale;
  return gen > cur ? GenCheck::kRaised : GenCheck::kOk;
}

bool UpdateMachine::InlineCandidate(const InlineAsk& ask) const {
  if (ask.early && ask.early_deferred) return false;
  if (ask.push && !ask.early && (ask.payload_bytes > inline_max_bytes() || ask.push_hook))
    return false;
  return ask.generation <= generation_.load();
}

bool UpdateMachine::EarlyCandidate(const proto::Push& msg, bool reply_frame, bool from_chief,
                                   bool push_hook) const {
  // An untracked step (a retry could not be told from a first push), a push with a pull
  // after it (small: the worker combines only those), another mode, a chief's request,
  // a reply frame or a testing hook: the pool handles it, as any request.
  return !reply_frame && msg.step_id >= 0 && !msg.items.empty() && !msg.pull && !from_chief &&
         !push_hook && step_mode() == UpdateMode::kAsync;
}

std::optional<UpdateMachine::EarlyTicket> UpdateMachine::EarlyBegin(uint64_t gen) const {
  // Under the fence, as the pool's check: a takeover either happened before (refused
  // here) or waits for this push's parts (CheckPart).
  if (gen != generation_.load()) return std::nullopt;
  return EarlyTicket{gen, restores_.load()};
}

UpdateMachine::PartCheck UpdateMachine::CheckPart(const EarlyTicket& ticket) const {
  if (generation_.load() != ticket.generation) return PartCheck::kNewChief;
  if (restores_.load() != ticket.restores) return PartCheck::kRestored;
  return PartCheck::kOk;
}

// ---- Marks part ----

Result<bool> UpdateMachine::Mark(const ShardKey& key, int32_t worker, int64_t step) {
  if (step < 0) return true;  // untracked
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

void UpdateMachine::Unmark(const ShardKey& key, int32_t worker, int64_t step) {
  auto it = applied_.find({key, worker});
  if (step < 0 || it == applied_.end() || step < it->second.base) return;
  const auto offset = static_cast<uint64_t>(step - it->second.base);
  auto& bits = it->second.bits;
  if (offset / 64 < bits.size()) bits[offset / 64] &= ~(uint64_t{1} << (offset % 64));
}

void UpdateMachine::Saved(int64_t step) {
  if (step < 0) return;
  const int64_t base = step - step % 64;  // whole words
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

size_t UpdateMachine::mark_words() const {
  size_t n = 0;
  for (const auto& [key, marks] : applied_) n += marks.bits.size();
  return n;
}

// ---- Mode part ----

bool UpdateMachine::Configure(const UpdateSpec& spec, Waiting* failed) {
  pulls_released_.reset();  // a new chief's job, or a ps being recreated
  configured_ = true;
  if (spec == update_) return false;
  update_ = spec;
  mode_.store(spec.StepMode());
  base_version_ = 0;
  sync_.clear();
  const auto n = static_cast<size_t>(spec.num_workers);
  clocks_.assign(n, 0);
  offsets_.assign(n, 0);
  seen_.assign(n, -1);
  idle_at_.assign(n, -1);
  TakeParked(failed);
  return true;
}

Status UpdateMachine::CheckTag(const char* op, int32_t worker, int64_t clock) const {
  if (update_.StepMode() == UpdateMode::kAsync ||
      (worker >= 0 && worker < update_.num_workers && clock >= 0)) {
    return Status::Ok();
  }
  return InvalidArgument(std::string(op) + ": " + update_.Describe() +
                         " mode needs the worker (0.." + std::to_string(update_.num_workers - 1) +
                         ") and its clock, got worker " + std::to_string(worker) + " clock " +
                         std::to_string(clock));
}

Result<UpdateMode> UpdateMachine::BeginPush(const proto::Push& msg, const SliceInfos& info,
                                            std::vector<bool>* on_arrival) const {
  const UpdateMode mode = update_.StepMode();
  PS_RETURN_IF_ERROR(CheckTag("Push", msg.worker, msg.clock));
  // Elsewhere a pull may have to wait for other workers' steps, and this push's reply
  // with it.
  if (msg.pull && mode != UpdateMode::kAsync) {
    return FailedPrecondition("Push: a pull after a push needs async mode; this ps trains in " +
                              update_.Describe() + " mode");
  }
  on_arrival->assign(msg.items.size(), true);
  if (mode == UpdateMode::kSync) {
    for (size_t i = 0; i < msg.items.size(); ++i) (*on_arrival)[i] = !SyncClass(info[i].sparse);
  }
  return mode;
}

UpdateMachine::SyncShard& UpdateMachine::SyncState(const ShardKey& key) {
  auto [it, inserted] = sync_.try_emplace(key);
  if (inserted) it->second.version = base_version_;
  return it->second;
}

Status UpdateMachine::CheckNotAhead(const proto::Push& msg, const SliceInfos& info) {
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

UpdateMachine::Contribution UpdateMachine::Contribute(const ShardKey& key, const proto::Slice& item,
                                                      int64_t update, int32_t worker,
                                                      std::span<const float> grad, size_t cols,
                                                      Average* average) {
  SyncShard& ss = SyncState(key);
  if (update < ss.version) {  // computed for an update this shard has applied: too late
    ++stale_;
    return Contribution::kStale;
  }
  if (std::find(ss.workers.begin(), ss.workers.end(), worker) != ss.workers.end()) {
    return Contribution::kRepeat;  // a resent push
  }
  if (item.all_rows) {
    if (ss.dense_sum.empty()) {
      ss.dense_sum.assign(grad.begin(), grad.end());
    } else {
      for (size_t k = 0; k < grad.size(); ++k) ss.dense_sum[k] += grad[k];
    }
  } else {
    for (size_t j = 0; j < item.rows.size(); ++j) {
      auto [it, inserted] = ss.row_index.try_emplace(item.rows[j], ss.rows.size());
      if (inserted) {
        ss.rows.push_back(item.rows[j]);
        ss.row_sum.resize(ss.row_sum.size() + cols, 0.0f);
      }
      float* dst = ss.row_sum.data() + it->second * cols;
      const float* src = grad.data() + j * cols;
      for (size_t k = 0; k < cols; ++k) dst[k] += src[k];
    }
  }
  ss.workers.push_back(worker);
  if (static_cast<int>(ss.workers.size()) < update_.replicas()) return Contribution::kAdded;
  // The update is complete: its average (a worker that did not touch a row contributed
  // zero to it).
  const float scale = 1.0f / static_cast<float>(ss.workers.size());
  for (float& x : ss.dense_sum) x *= scale;
  for (float& x : ss.row_sum) x *= scale;
  *average = Average{ss.version, ss.dense_sum, ss.rows, ss.row_sum};
  return Contribution::kComplete;
}

void UpdateMachine::Advance(const ShardKey& key) {
  SyncShard& ss = SyncState(key);
  ss.version += 1;
  ss.workers.clear();
  ss.dense_sum.clear();
  ss.row_index.clear();
  ss.rows.clear();
  ss.row_sum.clear();
}

void UpdateMachine::Seen(int32_t w, int64_t step) {
  const auto i = static_cast<size_t>(w);
  seen_[i] = std::max(seen_[i], step);
  if (idle_at_[i] >= 0 && step >= idle_at_[i]) idle_at_[i] = -1;  // busy again
}

void UpdateMachine::Pushed(int32_t worker, int64_t clock, bool idle) {
  const auto w = static_cast<size_t>(worker);
  if (update_.StepMode() != UpdateMode::kBoundedStaleness || worker < 0 || w >= clocks_.size())
    return;
  const int64_t step = WorkerClock(worker, clock);
  if (idle) {
    // Out of work: hold nobody back, unless a later step of it has already arrived (on
    // the other connection).
    if (seen_[w] < step) idle_at_[w] = step;
  } else {
    Seen(worker, step);
    clocks_[w] = std::max(clocks_[w], step + 1);
  }
}

int64_t UpdateMachine::WorkerClock(int32_t w, int64_t clock) {
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

int64_t UpdateMachine::VersionOf(const proto::Slice& item) const {
  auto it = sync_.find({item.var, item.shard});
  return it == sync_.end() ? base_version_ : it->second.version;
}

bool UpdateMachine::Ready(const proto::Pull& msg, const SliceInfos& info, int64_t step) {
  const UpdateMode steps = update_.StepMode();
  if (steps == UpdateMode::kSync) {
    for (size_t i = 0; i < msg.items.size(); ++i) {
      if (!SyncClass(info[i].sparse)) continue;  // hybrid: the async class never waits
      if (VersionOf(msg.items[i]) < msg.clock) return false;
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

UpdateMachine::PullVerdict UpdateMachine::ArrivePull(proto::Pull& msg, SliceInfos& info,
                                                     uint64_t ticket, Status* why) {
  // A pull without a clock (evaluation, the chief's final eval) reads what is there.
  if (update_.StepMode() == UpdateMode::kAsync || msg.clock < 0) return PullVerdict::kServe;
  if (Status st = CheckTag("Pull", msg.worker, msg.clock); !st.ok()) {
    *why = std::move(st);
    return PullVerdict::kFail;
  }
  int64_t step = msg.clock;
  if (update_.StepMode() == UpdateMode::kBoundedStaleness) {
    step = WorkerClock(msg.worker, msg.clock);
    Seen(msg.worker, step);
  }
  if (Ready(msg, info, step)) return PullVerdict::kServe;
  if (pulls_released_) {
    *why = *pulls_released_;
    return PullVerdict::kFail;
  }
  ++waited_pulls_;
  parked_.push_back({std::move(msg), std::move(info), step, ticket});
  return PullVerdict::kWait;
}

void UpdateMachine::Versions(const proto::Pull& msg, const SliceInfos& info,
                             std::vector<int64_t>* out) const {
  if (update_.StepMode() != UpdateMode::kSync) return;
  for (size_t i = 0; i < msg.items.size(); ++i) {
    // Hybrid: no step waits for an async-class shard.
    out->push_back(SyncClass(info[i].sparse) ? VersionOf(msg.items[i]) : INT64_MAX);
  }
}

void UpdateMachine::ReleaseReady(Waiting* ready) {
  for (size_t i = 0; i < parked_.size();) {
    if (Ready(parked_[i].msg, parked_[i].info, parked_[i].step)) {
      ready->push_back(std::move(parked_[i]));
      parked_[i] = std::move(parked_.back());
      parked_.pop_back();
    } else {
      ++i;
    }
  }
}

void UpdateMachine::TakeParked(Waiting* out) {
  for (auto& p : parked_) out->push_back(std::move(p));
  parked_.clear();
}

void UpdateMachine::ReleasePulls(Status why, Waiting* failed) {
  pulls_released_ = std::move(why);
  TakeParked(failed);
}

void UpdateMachine::ReleaseAll(Waiting* failed) { TakeParked(failed); }

void UpdateMachine::Restored(int64_t step, Waiting* failed) {
  applied_.clear();  // the steps after the checkpoint will be run again
  base_version_ = step;
  sync_.clear();
  pulls_released_.reset();
  // Workers keep counting their steps across a restore (a restarted ps knows none):
  // until a worker is heard from again it holds nobody back.
  clocks_.assign(clocks_.size(), -1);
  offsets_.assign(offsets_.size(), 0);
  seen_.assign(seen_.size(), -1);
  idle_at_.assign(idle_at_.size(), -1);
  restores_.fetch_add(1);
  TakeParked(failed);
}

UpdateStats UpdateMachine::Stats() const {
  UpdateStats s;
  s.spec = update_;
  s.stale_dropped = stale_;
  s.waited_pulls = waited_pulls_;
  s.max_lead = max_lead_;
  s.configured = configured_;
  s.min_version = s.max_version = base_version_;
  bool first = true;
  for (const auto& [key, ss] : sync_) {
    s.min_version = first ? ss.version : std::min(s.min_version, ss.version);
    s.max_version = first ? ss.version : std::max(s.max_version, ss.version);
    first = false;
  }
  return s;
}

}  // namespace ps::server

#include "libps/client/param_fetcher.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace ps::client {

// Waits for a number of completions; keeps the first error.
class Latch {
 public:
  explicit Latch(int n) : left_(n) {}
  void Done(Status st) {
    std::lock_guard lock(mu_);
    if (!st.ok() && first_.ok()) first_ = std::move(st);
    if (--left_ == 0) cv_.notify_all();
  }
  Status Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return left_ == 0; });
    return first_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
  Status first_;
};

// A variable and its shards, in shard order (row ranges ascending).
struct ParamFetcher::Var {
  std::string name;
  bool sparse = false;
  int64_t cols = 0;
  int64_t elements = 0;
  std::vector<cluster::ShardPlacement> shards;
};

ParamFetcher::~ParamFetcher() = default;

Result<std::unique_ptr<ParamFetcher>> ParamFetcher::Create(
    const job::VariablePlan& plan, std::vector<std::unique_ptr<PsLink>> links) {
  std::unique_ptr<ParamFetcher> f(new ParamFetcher());
  f->links_ = std::move(links);
  for (const auto& v : plan.variables) {
    Var var;
    var.name = v.name;
    var.sparse = v.sparse;
    var.cols = v.row_elements();
    var.elements = v.num_elements();
    for (const auto& s : plan.shards) {
      if (s.layout.var != v.name) continue;
      if (s.ps < 0 || static_cast<size_t>(s.ps) >= f->links_.size()) {
        return Internal("plan places " + s.layout.var + " on ps " + std::to_string(s.ps) + " of " +
                        std::to_string(f->links_.size()));
      }
      var.shards.push_back(s);
    }
    std::sort(var.shards.begin(), var.shards.end(),
              [](const auto& a, const auto& b) { return a.layout.row_begin < b.layout.row_begin; });
    f->vars_.push_back(std::move(var));
  }
  const size_t n = f->vars_.size(), num_ps = f->links_.size();
  for (auto& st : f->stages_) {
    st.rows.resize(n);
    st.values.resize(n);
    st.params.values.resize(n);
    st.params.rows.resize(n);
    st.pulls.resize(num_ps);
    st.pull_into.resize(num_ps);
    st.slice_refs.resize(num_ps);
  }
  return f;
}

void ParamFetcher::SetUpdateMode(ps::server::UpdateMode mode, int worker) {
  mode_ = mode;
  worker_ = worker;
}

Status ParamFetcher::StartFetch(int stage, model::Model& model, const model::Batch& batch,
                                int64_t clock) {
  PS_RETURN_IF_ERROR(PlanFetch(stage, model, batch, clock));
  const Stage& st = stages_[stage];
  for (size_t p = 0; p < links_.size(); ++p) {
    if (Pulls(st, p)) links_[p]->Pull(st.pulls[p], st.pull_into[p], PullDone(st));
  }
  return Status::Ok();
}

std::function<void(Status, int64_t)> ParamFetcher::PullDone(const Stage& st) const {
  return [latch = st.pull_in_flight, version = st.version](Status s, int64_t v) {
    int64_t cur = version->load();
    while (v < cur && !version->compare_exchange_weak(cur, v)) {}
    latch->Done(std::move(s));
  };
}

Status ParamFetcher::PlanFetch(int stage, model::Model& model, const model::Batch& batch,
                               int64_t clock) {
  Stage& st = stages_[stage];
  const bool every_shard = EveryShard();
  PS_RETURN_IF_ERROR(WaitFetch(stage));  // never two pulls into one stage
  PS_RETURN_IF_ERROR(model.RowsNeeded(batch, &st.rows));
  // Plan the slices: for each ps, the items to pull (and later push) and where they go.
  for (size_t p = 0; p < links_.size(); ++p) {
    st.pulls[p].items.clear();
    st.pull_into[p].clear();
    st.slice_refs[p].clear();
  }
  for (size_t v = 0; v < vars_.size(); ++v) {
    const Var& var = vars_[v];
    const auto& rows = st.rows[v];
    size_t needed = var.sparse ? rows.size() * var.cols : var.elements;
    st.values[v].resize(needed);
    size_t begin = 0;  // first entry of rows in the current shard (sparse)
    for (const auto& placed : var.shards) {
      const cluster::ShardLayout& s = placed.layout;
      proto::Slice slice;
      slice.var = var.name;
      slice.shard = s.shard;
      size_t offset, count;
      if (!var.sparse) {
        offset = static_cast<size_t>(s.row_begin * var.cols);
        count = static_cast<size_t>(s.rows * var.cols);
      } else {
        size_t end = begin;
        while (end < rows.size() && rows[end] < s.row_begin + s.rows) ++end;
        if (end == begin && !every_shard) continue;
        slice.all_rows = false;
        slice.rows.reserve(end - begin);
        for (size_t i = begin; i < end; ++i) slice.rows.push_back(rows[i] - s.row_begin);
        offset = begin * var.cols;
        count = (end - begin) * var.cols;
        begin = end;
      }
      st.pulls[placed.ps].items.push_back(std::move(slice));
      st.pull_into[placed.ps].push_back(
          std::as_writable_bytes(std::span(st.values[v]).subspan(offset, count)));
      st.slice_refs[placed.ps].push_back({v, offset, count});
    }
    st.params.values[v] = st.values[v];
    st.params.rows[v] = var.sparse ? std::span<const int64_t>(rows) : std::span<const int64_t>();
  }
  int active = 0;
  for (size_t p = 0; p < links_.size(); ++p) {
    st.pulls[p].worker = every_shard ? worker_ : -1;
    st.pulls[p].clock = every_shard ? clock : -1;
    active += Pulls(st, p) ? 1 : 0;
  }
  st.pull_in_flight = std::make_shared<Latch>(active);
  st.version = std::make_shared<std::atomic<int64_t>>(INT64_MAX);
  return Status::Ok();
}

Status ParamFetcher::WaitFetch(int stage) {
  Stage& st = stages_[stage];
  if (st.pull_in_flight == nullptr) return Status::Ok();
  Status s = st.pull_in_flight->Wait();
  st.pull_in_flight.reset();
  st.min_version = st.version->load();
  return s;
}

Status ParamFetcher::Fetch(model::Model& model, const model::Batch& batch) {
  PS_RETURN_IF_ERROR(StartFetch(0, model, batch));
  return WaitFetch(0);
}

Status ParamFetcher::Push(const model::Grads& grads, int64_t step) {
  StartPush(0, grads, step);
  return WaitPush();
}

Status ParamFetcher::SendIdle(int64_t next_clock) {
  PS_RETURN_IF_ERROR(WaitPush());
  auto latch = std::make_shared<Latch>(static_cast<int>(links_.size()));
  for (auto& link : links_) {
    proto::Push idle;
    idle.worker = worker_;
    idle.clock = next_clock;
    idle.idle = true;
    link->Push(std::move(idle), {}, [latch](Status st) { latch->Done(std::move(st)); });
  }
  return latch->Wait();
}

Status ParamFetcher::WaitPush() {
  if (push_in_flight_ == nullptr) return Status::Ok();
  Status st = push_in_flight_->Wait();
  push_in_flight_.reset();
  return st;
}

std::vector<std::optional<ParamFetcher::PushRequest>> ParamFetcher::PushRequests(
    int stage, const model::Grads& grads, int64_t step, int64_t clock) {
  const Stage& st = stages_[stage];
  const bool every_shard = EveryShard();
  std::vector<std::optional<PushRequest>> out(links_.size());
  int count = 0;
  for (size_t p = 0; p < links_.size(); ++p) {
    if (!Pulls(st, p)) continue;
    ++count;
    PushRequest& r = out[p].emplace();
    r.push.items = st.pulls[p].items;
    r.push.global_step = step;
    r.push.step_id = step;
    r.push.worker = every_shard ? worker_ : -1;
    r.push.clock = every_shard ? clock : -1;
    for (const auto& ref : st.slice_refs[p]) {
      r.grads.Add(std::span<const float>(grads.values[ref.var]).subspan(ref.offset, ref.count));
    }
  }
  push_in_flight_ = std::make_shared<Latch>(count);
  return out;
}

void ParamFetcher::StartPush(int stage, const model::Grads& grads, int64_t step, int64_t clock) {
  auto pushes = PushRequests(stage, grads, step, clock);
  for (size_t p = 0; p < links_.size(); ++p) {
    if (!pushes[p]) continue;
    links_[p]->Push(std::move(pushes[p]->push), std::move(pushes[p]->grads),
                    [latch = push_in_flight_](Status st) { latch->Done(std::move(st)); });
  }
}

bool ParamFetcher::CombinesPushOf(int stage) const {
  const Stage& st = stages_[stage];
  for (size_t p = 0; p < links_.size(); ++p) {
    uint64_t bytes = 0;  // of ps p's push: its gradients are laid out like the pull
    for (const auto& ref : st.slice_refs[p]) bytes += ref.count * sizeof(float);
    if (Pulls(st, p) && bytes < kCombineMaxPushBytes) return true;
  }
  return false;
}

Status ParamFetcher::StartPushFetch(int stage, const model::Grads& grads, int64_t step, int into,
                                    model::Model& model, const model::Batch& batch) {
  PS_ASSERT(!EveryShard());
  auto pushes = PushRequests(stage, grads, step, -1);
  auto push_done = [latch = push_in_flight_](Status st) { latch->Done(std::move(st)); };
  Status planned = PlanFetch(into, model, batch, -1);
  const Stage& st = stages_[into];
  for (size_t p = 0; p < links_.size(); ++p) {
    const bool pull = planned.ok() && Pulls(st, p);
    if (pushes[p] && pull && pushes[p]->grads.size() < kCombineMaxPushBytes) {
      ++combined_;
      links_[p]->PushPull(std::move(pushes[p]->push), std::move(pushes[p]->grads), st.pulls[p],
                          st.pull_into[p], [push_done, pull_done = PullDone(st)](Status s) {
                            push_done(s);
                            pull_done(std::move(s), INT64_MAX);
                          });
      continue;
    }
    if (pushes[p])
      links_[p]->Push(std::move(pushes[p]->push), std::move(pushes[p]->grads), push_done);
    if (pull) links_[p]->Pull(st.pulls[p], st.pull_into[p], PullDone(st));
  }
  return planned;
}

}  // namespace ps::client

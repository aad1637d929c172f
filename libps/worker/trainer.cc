#include "libps/worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "libps/core/log.h"

namespace ps::worker {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

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

void PsLink::PushPull(proto::Push push, net::OutPayload grads, proto::Pull pull,
                      std::vector<std::span<std::byte>> into, std::function<void(Status)> done) {
  Push(std::move(push), std::move(grads),
       [this, pull = std::move(pull), into = std::move(into),
        done = std::move(done)](Status st) mutable {
         if (!st.ok()) return done(std::move(st));
         Pull(std::move(pull), std::move(into),
              [done = std::move(done)](Status s, int64_t) { done(std::move(s)); });
       });
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A pull's reply (or a push's with its pull) must have put `want` bytes in place.
Status CheckPulled(const Result<net::Reply>& r, uint64_t want) {
  if (!r.ok()) return r.status();
  if (!r->payload_in_place && !(want == 0 && r->payload.size() == 0)) {
    return ProtocolError("pull reply of " + std::to_string(r->payload.size()) +
                         " bytes, expected " + std::to_string(want));
  }
  return Status::Ok();
}

uint64_t Bytes(const std::vector<std::span<std::byte>>& into) {
  uint64_t n = 0;
  for (auto s : into) n += s.size();
  return n;
}

class RemoteLink : public PsLink {
 public:
  RemoteLink(std::shared_ptr<net::Client> c, std::shared_ptr<net::Client> push, LinkTimers timers)
      : client_(std::move(c)), push_client_(push ? std::move(push) : client_), timers_(timers) {}
  void Pull(proto::Pull req, std::vector<std::span<std::byte>> into,
            std::function<void(Status, int64_t)> done) override {
    const uint64_t want = Bytes(into);
    client_->CallAsync(std::move(req), {}, std::move(into), net::Millis{0},
                       [done = std::move(done), want, timer = timers_.pull,
                        t0 = std::chrono::steady_clock::now()](Result<net::Reply> r) {
                         if (timer != nullptr) timer->Observe(SecondsSince(t0));
                         if (Status st = CheckPulled(r, want); !st.ok())
                           return done(std::move(st), INT64_MAX);
                         int64_t version = INT64_MAX;
                         if (const auto* m = std::get_if<proto::PullReply>(&r->envelope.body)) {
                           for (int64_t v : m->versions) version = std::min(version, v);
                         }
                         done(Status::Ok(), version);
                       });
  }
  void Push(proto::Push req, net::OutPayload grads, std::function<void(Status)> done) override {
    SendPush(push_client_, std::move(req), std::move(grads), {},
             [done = std::move(done), timer = timers_.push,
              t0 = std::chrono::steady_clock::now()](Result<net::Reply> r) {
               if (timer != nullptr) timer->Observe(SecondsSince(t0));
               done(r.status());
             });
  }
  // On the pulls' connection: the worker waits for the pull in it.
  void PushPull(proto::Push push, net::OutPayload grads, proto::Pull pull,
                std::vector<std::span<std::byte>> into, std::function<void(Status)> done) override {
    const uint64_t want = Bytes(into);
    push.pull = std::move(pull);
    SendPush(client_, std::move(push), std::move(grads), std::move(into),
             [done = std::move(done), want, timers = timers_,
              t0 = std::chrono::steady_clock::now()](Result<net::Reply> r) {
               // The round trip of both: the push's and the pull's.
               for (prom::Histogram* h : {timers.push, timers.pull}) {
                 if (h != nullptr) h->Observe(SecondsSince(t0));
               }
               done(CheckPulled(r, want));
             });
  }

 private:
  std::shared_ptr<net::Client> client_;       // pulls
  std::shared_ptr<net::Client> push_client_;  // pushes
  LinkTimers timers_;
  // Testing hook: PSTRAIN_FAULT_REPEAT_PUSH_EVERY=N sends every Nth push twice.
  const int64_t repeat_every_ = [] {
    const char* v = std::getenv("PSTRAIN_FAULT_REPEAT_PUSH_EVERY");
    return v == nullptr ? int64_t{0} : std::max<int64_t>(0, std::atoll(v));
  }();
  int64_t pushes_ = 0;  // the trainer's thread only

  // Sends a push (`into`: where its pull's rows go, if it has one), and with the fault
  // injection every Nth one twice: the first reply is "lost".
  void SendPush(const std::shared_ptr<net::Client>& client, proto::Push req, net::OutPayload grads,
                std::vector<std::span<std::byte>> into,
                std::function<void(Result<net::Reply>)> done) {
    if (repeat_every_ > 0 && ++pushes_ % repeat_every_ == 0) {
      proto::Push again = req;
      net::OutPayload payload = grads;
      auto into_again = into;
      client->CallAsync(std::move(req), std::move(grads), std::move(into), net::Millis{0},
                        [client, again = std::move(again), payload = std::move(payload),
                         into_again = std::move(into_again),
                         done = std::move(done)](Result<net::Reply> first) mutable {
                          if (!first.ok()) return done(std::move(first));
                          client->CallAsync(std::move(again), std::move(payload),
                                            std::move(into_again), net::Millis{0}, std::move(done));
                        });
      return;
    }
    client->CallAsync(std::move(req), std::move(grads), std::move(into), net::Millis{0},
                      std::move(done));
  }
};

class LocalLink : public PsLink {
 public:
  explicit LocalLink(ps::server::Store* s) : store_(s) {}
  void Pull(proto::Pull req, std::vector<std::span<std::byte>> into,
            std::function<void(Status, int64_t)> done) override {
    for (size_t i = 0; i < req.items.size(); ++i) {
      const auto& it = req.items[i];
      std::span<float> out(reinterpret_cast<float*>(into[i].data()),
                           into[i].size() / sizeof(float));
      ps::server::ShardKey key{it.var, it.shard};
      Status st = it.all_rows ? store_->Pull(key, out) : store_->PullRows(key, it.rows, out);
      if (!st.ok()) return done(st, INT64_MAX);
    }
    done(Status::Ok(), INT64_MAX);
  }
  void Push(proto::Push req, net::OutPayload grads, std::function<void(Status)> done) override {
    for (size_t i = 0; i < req.items.size(); ++i) {
      const auto& it = req.items[i];
      auto part = grads.parts[i];
      std::span<const float> g(reinterpret_cast<const float*>(part.data()),
                               part.size() / sizeof(float));
      ps::server::ShardKey key{it.var, it.shard};
      Status st = it.all_rows ? store_->Push(key, g, req.global_step)
                              : store_->PushRows(key, it.rows, g, req.global_step);
      if (!st.ok()) return done(st);
    }
    done(Status::Ok());
  }

 private:
  ps::server::Store* store_;
};

}  // namespace

std::unique_ptr<PsLink> RemotePsLink(std::shared_ptr<net::Client> client,
                                     std::shared_ptr<net::Client> push_client, LinkTimers timers) {
  return std::make_unique<RemoteLink>(std::move(client), std::move(push_client), timers);
}
std::unique_ptr<PsLink> LocalPsLink(ps::server::Store* store) {
  return std::make_unique<LocalLink>(store);
}

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

Status Trainer::Idle() {
  if (mode_ != ps::server::UpdateMode::kBoundedStaleness) return Status::Ok();
  return fetcher_->SendIdle(clock_);
}

int64_t Trainer::SlowStepHook() {
  const char* v = std::getenv("PSTRAIN_FAULT_SLOW_STEP_MS");
  return v == nullptr ? 0 : std::max<int64_t>(0, std::atoll(v));
}

model::StepOutput Trainer::FakeCompute(const model::Batch& batch, const model::Params& params,
                                       model::Grads* grads) const {
  // Only this function writes the gradients of a fake-compute trainer, so resizing keeps
  // them zero (a sparse variable's rows change size from batch to batch).
  grads->values.resize(params.values.size());
  for (size_t v = 0; v < params.values.size(); ++v)
    grads->values[v].resize(params.values[v].size());
  if (*fake_compute_ms_ > 0)
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(*fake_compute_ms_));
  return {.loss_sum = 0, .examples = batch.size, .correct = 0};
}

int64_t Trainer::Tag(int64_t step, int64_t clock) const {
  switch (mode_) {
    case ps::server::UpdateMode::kSync:
      return step;
    case ps::server::UpdateMode::kBoundedStaleness:
      return clock;
    case ps::server::UpdateMode::kAsync:
      break;
  }
  return -1;
}

Status Trainer::RunSteps(int64_t first_step, int count, StepStats* stats) {
  const int64_t skipped_before = dataset_->skipped();
  Status st = Pipeline(first_step, count, stats);
  stats->skipped_records += dataset_->skipped() - skipped_before;
  // Nothing may stay in flight past the pack (a failure included): the buffers are reused.
  auto t0 = Clock::now();
  Status pushed = fetcher_->WaitPush();
  for (int stage = 0; stage < 2; ++stage) fetcher_->WaitFetch(stage).ok();
  stats->push_seconds += Seconds(t0, Clock::now());
  return st.ok() ? pushed : st;
}

Status Trainer::Pipeline(int64_t first_step, int count, StepStats* stats) {
  if (count <= 0) return Status::Ok();
  const int64_t clock = clock_;
  int stage = 0;
  bool fetching = false;  // the pull for `stage` has been started
  bool ahead = false;     // prefetch: the pull for step i + 1 went with step i - 1's push
  for (int i = 0; i < count; ++i) {
    if (!fetching) {
      auto t = Clock::now();
      PS_ASSIGN_OR_RETURN(batches_[stage], dataset_->Next(batch_size_));
      stats->data_seconds += Seconds(t, Clock::now());
      PS_RETURN_IF_ERROR(
          fetcher_->StartFetch(stage, *model_, batches_[stage], Tag(first_step + i, clock + i)));
    }
    auto t0 = Clock::now();
    PS_RETURN_IF_ERROR(fetcher_->WaitFetch(stage));
    auto t1 = Clock::now();
    fetching = prefetch_ && i + 1 < count;
    if (fetching &&
        !std::exchange(ahead,
                       false)) {  // the next step's data and pull run during this step's compute
      PS_ASSIGN_OR_RETURN(batches_[stage ^ 1], dataset_->Next(batch_size_));
      PS_RETURN_IF_ERROR(fetcher_->StartFetch(stage ^ 1, *model_, batches_[stage ^ 1],
                                              Tag(first_step + i + 1, clock + i + 1)));
    }
    auto t2 = Clock::now();
    const int64_t version = fetcher_->fetched_version(stage);
    if (mode_ == ps::server::UpdateMode::kSync && version != INT64_MAX &&
        version > first_step + i) {
      // Every shard has applied this update without us (we are a late backup): a
      // gradient for it would only be dropped.
      stage ^= 1;
      clock_ = clock + i + 1;
      stats->steps += 1;
      stats->stale += 1;
      stats->pull_seconds += Seconds(t0, t1);
      stats->data_seconds += Seconds(t1, t2);
      continue;
    }
    model::Grads& grads = grads_[current_];
    model::StepOutput out;
    if (fake_compute_ms_) {
      out = FakeCompute(batches_[stage], fetcher_->params(stage), &grads);
    } else {
      PS_ASSIGN_OR_RETURN(
          out, model_->ForwardBackward(batches_[stage], fetcher_->params(stage), &grads));
    }
    if (slow_step_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_step_ms_));
    auto t3 = Clock::now();
    // Combined: this push carries the pull of step `next`, whose stage (`into`) is free
    // now: this step's own (prefetch: step i + 1's pull is under way into the other), or
    // the other one (no prefetch: nothing is). Its data is read first, while the previous
    // step's push is still on its way.
    const int next = prefetch_ ? i + 2 : i + 1;
    const bool combine = combine_ && next < count && fetcher_->CombinesPushOf(stage);
    Result<model::Batch> next_batch = combine ? dataset_->Next(batch_size_) : model::Batch{};
    const auto td = Clock::now();
    PS_RETURN_IF_ERROR(fetcher_->WaitPush());  // the previous step's push overlapped this step
    if (combine && next_batch.ok()) {
      const int into = prefetch_ ? stage : stage ^ 1;
      batches_[into] = std::move(*next_batch);
      PS_RETURN_IF_ERROR(
          fetcher_->StartPushFetch(stage, grads, first_step + i, into, *model_, batches_[into]));
      (prefetch_ ? ahead : fetching) = true;
    } else {
      fetcher_->StartPush(stage, grads, first_step + i, Tag(first_step + i, clock + i));
      PS_RETURN_IF_ERROR(next_batch.status());  // this step's gradient went all the same
    }
    auto t4 = Clock::now();
    current_ ^= 1;
    stage ^= 1;
    clock_ = clock + i + 1;
    stats->steps += 1;
    stats->examples += out.examples;
    stats->loss_sum += out.loss_sum;
    stats->correct += out.correct;
    stats->pull_seconds += Seconds(t0, t1);
    stats->data_seconds += Seconds(t1, t2);
    stats->compute_seconds += Seconds(t2, t3);
    stats->data_seconds += Seconds(t3, td);
    stats->push_seconds += Seconds(td, t4);
  }
  return Status::Ok();
}

Result<model::EvalOutput> ScoreBatch(model::Model& model, ParamFetcher& fetcher,
                                     const model::Batch& batch) {
  PS_RETURN_IF_ERROR(fetcher.Fetch(model, batch));
  return model.Forward(batch, fetcher.params());
}

int64_t EvalBatchSize(const job::JobSpec& job) { return std::max<int64_t>(job.batch_size, 256); }

Result<std::vector<model::HeadMetrics::Sums>> EvaluateShard(
    const job::JobSpec& job, const Json& config, model::Model& model, ParamFetcher& fetcher,
    int shard, int num_shards, const BatchObserver& observe, const std::string& where) {
  data::DatasetOptions opts;
  opts.base_dir = job.base_dir;
  opts.shuffle = false;
  opts.repeat = false;
  opts.shard_index = shard;
  opts.num_shards = num_shards;
  PS_ASSIGN_OR_RETURN(auto dataset, data::OpenDataset(config, where, opts));
  model::HeadMetrics heads(model.heads());
  for (;;) {
    PS_ASSIGN_OR_RETURN(model::Batch batch, dataset->Next(EvalBatchSize(job)));
    if (batch.size == 0) break;
    PS_ASSIGN_OR_RETURN(model::EvalOutput out, ScoreBatch(model, fetcher, batch));
    if (observe) PS_RETURN_IF_ERROR(observe(batch, out));
    if (out.has_labels) {
      heads.Add(out);
    } else if (!observe) {
      return InvalidArgument(where + ": the data has no labels");
    }
  }
  return heads.sums();
}

Result<EvalMetrics> Evaluate(const job::JobSpec& job, const Json& config, model::Model& model,
                             ParamFetcher& fetcher) {
  PS_ASSIGN_OR_RETURN(auto sums, EvaluateShard(job, config, model, fetcher, 0, 1));
  return EvalFigures(model, sums);
}

Json EvalMetricsToJson(const EvalMetrics& m) {
  Json j = {{"accuracy", m.accuracy}, {"loss", m.loss}, {"examples", m.examples}};
  if (m.auc >= 0) j["auc"] = m.auc;
  if (!m.heads.is_null()) j["heads"] = m.heads;
  return j;
}

Result<EvalMetrics> EvalFigures(const model::Model& model,
                                const std::vector<model::HeadMetrics::Sums>& sums) {
  model::HeadMetrics heads(model.heads());
  PS_RETURN_IF_ERROR(heads.Merge(sums));
  EvalMetrics m;
  // The model's loss: the heads' weighted losses summed (EvalOutput::loss_sum).
  double loss_sum = 0;
  for (size_t h = 0; h < sums.size(); ++h) loss_sum += model.heads()[h].weight * sums[h].loss_sum;
  m.examples = sums.empty() ? 0 : sums[0].examples;
  if (m.examples == 0) return InvalidArgument("job.eval_data: no examples");
  m.loss = loss_sum / static_cast<double>(m.examples);
  const std::vector<model::HeadFigures> figures = heads.Finish();
  m.accuracy = figures[0].accuracy.value_or(0.0);
  m.auc = figures[0].auc.value_or(-1.0);
  if (figures.size() > 1) m.heads = model::HeadMetrics::ToJson(figures);
  return m;
}

Result<std::unique_ptr<Trainer>> MakeTrainer(const job::JobSpec& job, int worker_index,
                                             int num_workers, int num_ps,
                                             std::vector<std::unique_ptr<PsLink>> links) {
  PS_ASSIGN_OR_RETURN(auto model, model::BuildModel(job.model, "job.model"));
  PS_ASSIGN_OR_RETURN(job::VariablePlan plan, job::PlanVariables(job, *model, num_ps));
  data::DatasetOptions opts;
  opts.base_dir = job.base_dir;
  opts.shard_index = worker_index;
  opts.num_shards = num_workers;
  opts.seed = job.seed;
  PS_ASSIGN_OR_RETURN(auto dataset, data::OpenDataset(job.train_data, "job.train_data", opts));
  // In memory (its size known): the next batch is filled while a step runs. A streamed
  // data set's readers run ahead already.
  if (dataset->info().examples > 0) dataset = data::ReadAhead(std::move(dataset));
  PS_ASSIGN_OR_RETURN(auto fetcher, ParamFetcher::Create(plan, std::move(links)));
  fetcher->SetUpdateMode(job.update.StepMode(), worker_index);
  if (job.fake_compute_ms) {
    PS_LOG(Warning)
        << "job.fake_compute_ms = " << *job.fake_compute_ms
        << ": a benchmarking aid; every step sleeps instead of computing and pushes zero gradients "
           "(the model does not train)";
  }
  return std::make_unique<Trainer>(job.batch_size, job.prefetch, std::move(model),
                                   std::move(dataset), std::move(fetcher), job.update.StepMode(),
                                   job.fake_compute_ms, job.combine_push_pull);
}

}  // namespace ps::worker

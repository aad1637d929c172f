// Routing a batch's parameters to and from the ps tasks: which slices of which variable
// each ps holds (the job's variable plan), pulled straight into place and pushed
// straight from the model's buffers, with the tags the update modes need.
#pragma once

#include <array>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "libps/client/ps_link.h"
#include "libps/job/job.h"
#include "libps/model/model.h"
#include "libps/server/store.h"

namespace ps::client {

// Pushes of at least this many bytes to one ps are not combined with a pull
// (PsLink::PushPull): in one request the push's transfer and the pull's no longer overlap
// each other, which from about 0.5 MB up costs more than the request saved
// (measured with scripts/bench-scale.sh fanout). A push carrying a pull is
// also never applied while it arrives (pstrain-ps --early-apply-min-kib, 1 MiB by default).
inline constexpr uint64_t kCombineMaxPushBytes = uint64_t{256} << 10;

// The parameters one batch needs, pulled from the ps tasks straight into place, and
// the push of its gradients straight from the model's buffers. Not thread-safe.
class ParamFetcher {
 public:
  // `links[p]` reaches ps task p of the plan.
  static Result<std::unique_ptr<ParamFetcher>> Create(const job::VariablePlan& plan,
                                                      std::vector<std::unique_ptr<PsLink>> links);
  // `mode`: the job's UpdateSpec::StepMode() (sync for a hybrid job).
  // Sync and bounded-staleness modes: every step pulls from and pushes to every shard
  // (empty slices where the batch touches none of a shard's rows), tagged with `worker`
  // and the step's clock, so each ps can count the step. Before the first StartFetch.
  void SetUpdateMode(ps::server::UpdateMode mode, int worker);
  ~ParamFetcher();

  // Two staging areas (0 and 1), so the pull for the next batch can run while the
  // current one is computed.
  // Starts pulling what `batch` needs into `stage`; WaitFetch(stage) completes it.
  // `clock`: the step's tag in sync / bounded-staleness mode (see SetUpdateMode).
  Status StartFetch(int stage, model::Model& model, const model::Batch& batch, int64_t clock = -1);
  Status WaitFetch(int stage);
  // After WaitFetch(stage): the smallest shard version the pull saw (sync), else INT64_MAX.
  int64_t fetched_version(int stage) const { return stages_[stage].min_version; }
  // Valid after WaitFetch(stage), until the next StartFetch(stage).
  const model::Params& params(int stage) const { return stages_[stage].params; }
  // Starts pushing `grads` (laid out like params(stage)) for global step `step`. `grads`
  // must stay untouched until WaitPush() returns; at most one push is in flight.
  void StartPush(int stage, const model::Grads& grads, int64_t step, int64_t clock = -1);
  Status WaitPush();
  // Async mode: StartPush(stage, grads, step) and StartFetch(into, model, batch) at once,
  // each ps's push and pull as one request where it gets both (PsLink::PushPull; a push of
  // kCombineMaxPushBytes or more goes alone), so the pull sees that push applied. `into`
  // may be `stage`: the push takes its items before the stage is planned again. When
  // planning the pull fails, the pushes still go (alone) and its error is returned.
  Status StartPushFetch(int stage, const model::Grads& grads, int64_t step, int into,
                        model::Model& model, const model::Batch& batch);
  // Would StartPushFetch(stage, ...) combine any ps's push with its pull? (Not when every
  // push of the stage is kCombineMaxPushBytes or more: then StartPush, and the next pull
  // when the trainer would send it anyway, keep the push and the pull apart in time.)
  bool CombinesPushOf(int stage) const;
  // Requests that carried a push and a pull (StartPushFetch). Testing.
  int64_t combined_requests() const { return combined_; }
  // Bounded staleness: tells every ps this worker has no steps for now (`next_clock` is
  // its next step), so it holds no other worker back meanwhile. Waits for the replies.
  Status SendIdle(int64_t next_clock);

  // Synchronous forms on stage 0 (evaluation, tests).
  Status Fetch(model::Model& model, const model::Batch& batch);
  const model::Params& params() const { return params(0); }
  Status Push(const model::Grads& grads, int64_t step);

  // Replaces the link to ps `p` (a restarted ps the worker reconnected to). Only while
  // nothing is in flight.
  void ReplaceLink(size_t p, std::unique_ptr<PsLink> link) { links_.at(p) = std::move(link); }

 private:
  struct Var;
  struct SliceRef {
    size_t var;
    size_t offset;
    size_t count;
  };
  struct Stage {
    std::vector<std::vector<int64_t>> rows;  // [var] sorted unique rows the batch needs
    std::vector<std::vector<float>> values;  // [var] pulled parameters
    model::Params params;
    std::vector<proto::Pull> pulls;                            // [ps] the batch's items
    std::vector<std::vector<std::span<std::byte>>> pull_into;  // [ps]
    std::vector<std::vector<SliceRef>> slice_refs;             // [ps] where each item lives
    std::shared_ptr<class Latch> pull_in_flight;               // null when none
    std::shared_ptr<std::atomic<int64_t>> version;             // min over the pull's replies
    int64_t min_version = INT64_MAX;
  };
  ParamFetcher() = default;
  // StartFetch without sending: plans what `batch` needs into `stage` (after its
  // WaitFetch) and arms its latch for the ps tasks it pulls from (Pulls).
  Status PlanFetch(int stage, model::Model& model, const model::Batch& batch, int64_t clock);
  bool Pulls(const Stage& st, size_t p) const { return EveryShard() || !st.pulls[p].items.empty(); }
  // What a pull of `st` calls when ps p answers (its version and status).
  std::function<void(Status, int64_t)> PullDone(const Stage& st) const;
  // The pushes of `grads` laid out like `stage`'s pull, by ps (none where it pulled
  // nothing), with push_in_flight_ armed for them.
  struct PushRequest {
    proto::Push push;
    net::OutPayload grads;
  };
  std::vector<std::optional<PushRequest>> PushRequests(int stage, const model::Grads& grads,
                                                       int64_t step, int64_t clock);

  std::vector<std::unique_ptr<PsLink>> links_;
  std::vector<Var> vars_;
  ps::server::UpdateMode mode_ = ps::server::UpdateMode::kAsync;
  int worker_ = -1;
  // Sync and bounded staleness: every step reaches every shard (see SetUpdateMode).
  bool EveryShard() const { return mode_ != ps::server::UpdateMode::kAsync; }
  std::array<Stage, 2> stages_;
  std::shared_ptr<class Latch> push_in_flight_;  // null when none
  int64_t combined_ = 0;
};

}  // namespace ps::client

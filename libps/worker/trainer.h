// The worker's step loop: next batch → pull what the batch needs → forward/backward
// (OpenBLAS) → push gradients. Shared by pstrain-worker (parameters on remote ps tasks)
// and the no-network baseline of the benchmarks (parameters in a local Store).
#pragma once

#include <array>
#include <atomic>
#include <climits>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "libps/data/dataset.h"
#include "libps/job/job.h"
#include "libps/model/metrics.h"
#include "libps/model/model.h"
#include "libps/net/transport.h"
#include "libps/prom/registry.h"
#include "libps/server/store.h"

namespace ps::worker {

// One ps task as the trainer sees it. Calls may complete on any thread.
class PsLink {
 public:
  virtual ~PsLink() = default;
  // Pulls `req`'s slices into `into` (its spans, in item order, sum to the reply size).
  // `done` gets the smallest shard version the reply reports (sync mode), else INT64_MAX.
  virtual void Pull(proto::Pull req, std::vector<std::span<std::byte>> into,
                    std::function<void(Status, int64_t)> done) = 0;
  // Pushes `req` with the gradients in `grads` (in item order).
  virtual void Push(proto::Push req, net::OutPayload grads, std::function<void(Status)> done) = 0;
  // Push(push, grads), then, once the ps has applied it, Pull(pull, into): async mode
  // only. `done` once, for both. A remote link sends both as one request (the push
  // carries the pull; its reply the rows); this default runs one after the other.
  virtual void PushPull(proto::Push push, net::OutPayload grads, proto::Pull pull,
                        std::vector<std::span<std::byte>> into, std::function<void(Status)> done);
};

// Pushes of at least this many bytes to one ps are not combined with a pull
// (PsLink::PushPull): in one request the push's transfer and the pull's no longer overlap
// each other, which from about 0.5 MB up costs more than the request saved
// (measured with scripts/bench-scale.sh fanout). A push carrying a pull is
// also never applied while it arrives (pstrain-ps --early-apply-min-kib, 1 MiB by default).
inline constexpr uint64_t kCombineMaxPushBytes = uint64_t{256} << 10;

// Where a remote link records the round trip of each pull and push (seconds, from the
// call to its reply); null: not recorded. The histograms must outlive the link.
struct LinkTimers {
  prom::Histogram* pull = nullptr;
  prom::Histogram* push = nullptr;
};

// A link to a remote ps over the network (the payloads go in place both ways). With a
// second connection for pushes, a pull is not queued behind a push it overlaps with.
std::unique_ptr<PsLink> RemotePsLink(std::shared_ptr<net::Client> client,
                                     std::shared_ptr<net::Client> push_client = nullptr,
                                     LinkTimers timers = {});
// A link to a Store in this process: the same math with no network.
std::unique_ptr<PsLink> LocalPsLink(ps::server::Store* store);

struct StepStats {
  int64_t steps = 0;
  int64_t examples = 0;
  double loss_sum = 0;
  int64_t correct = 0;
  double data_seconds = 0, pull_seconds = 0, compute_seconds = 0, push_seconds = 0;
  int64_t stale = 0;            // sync mode: steps skipped because every shard had moved past them
  int64_t skipped_records = 0;  // bad records skipped (data "on_error": "skip") during these steps
};

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

// Not thread-safe: one Trainer per worker, used by one thread at a time.
class Trainer {
 public:
  Trainer(int64_t batch_size, bool prefetch, std::unique_ptr<model::Model> model,
          std::unique_ptr<data::Dataset> dataset, std::unique_ptr<ParamFetcher> fetcher,
          ps::server::UpdateMode mode = ps::server::UpdateMode::kAsync,
          std::optional<double> fake_compute_ms = std::nullopt, bool combine_push_pull = true)
      : batch_size_(batch_size),
        prefetch_(prefetch),
        mode_(mode),
        combine_(combine_push_pull && mode == ps::server::UpdateMode::kAsync),
        model_(std::move(model)),
        dataset_(std::move(dataset)),
        fetcher_(std::move(fetcher)),
        fake_compute_ms_(fake_compute_ms),
        slow_step_ms_(SlowStepHook()) {}
  // Runs steps [first_step, first_step + count) and adds to `stats`. A step's push
  // overlaps the next step. With prefetch, within a pack the next step's data and pull also
  // overlap this step's compute: in async mode parameters may then be up to two steps stale.
  // In bounded-staleness mode each step is tagged with this worker's own count of steps
  // run (its clock). In sync mode step s is update s; a step whose shards have all
  // applied it already is skipped (counted in stats->stale).
  Status RunSteps(int64_t first_step, int count, StepStats* stats);
  // Bounded staleness: tells the ps tasks this worker has no steps to run for now (it
  // holds no other worker back until its next step). A no-op in the other modes.
  Status Idle();
  ParamFetcher& fetcher() { return *fetcher_; }

 private:
  Status Pipeline(int64_t first_step, int count, StepStats* stats);
  // The job's fake_compute_ms instead of ForwardBackward: sleeps, and leaves `grads` zero
  // in the shapes of `params` (loss 0, no correct answers).
  model::StepOutput FakeCompute(const model::Batch& batch, const model::Params& params,
                                model::Grads* grads) const;
  static int64_t SlowStepHook();
  int64_t Tag(int64_t step, int64_t clock) const;

  int64_t batch_size_;
  bool prefetch_;
  ps::server::UpdateMode mode_;
  // Async mode and job.combine_push_pull: a step's push carries the pull of step + 1
  // (without prefetch) or step + 2 (with), ParamFetcher::StartPushFetch.
  bool combine_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<data::Dataset> dataset_;
  std::unique_ptr<ParamFetcher> fetcher_;
  // Double buffers: step t computes on batch/params stage t%2 while step t+1's pull fills
  // the other, and into one gradient buffer while step t-1's push sends the other.
  std::array<model::Batch, 2> batches_;
  std::array<model::Grads, 2> grads_;
  int current_ = 0;
  int64_t clock_ = 0;  // steps run so far (bounded staleness)
  // Benchmarking aid (job.fake_compute_ms): every step sleeps this long instead of
  // computing and pushes zero gradients. nullopt: real compute.
  const std::optional<double> fake_compute_ms_;
  // Testing hook: PSTRAIN_FAULT_SLOW_STEP_MS=N makes every step's compute N ms longer (a
  // straggler).
  const int64_t slow_step_ms_;
};

struct EvalMetrics {
  int64_t examples = 0;
  double loss = 0;  // mean
  double accuracy = 0;
  double auc = -1;  // the first head's, sigmoid heads only; -1 otherwise
  Json heads;       // models with several heads: model::HeadMetrics::ToJson; else null
};

// Area under the ROC curve (libps/model/metrics.h).
using model::Auc;

// One pass over `config` (the job's eval_data) with the parameters behind `fetcher`.
Result<EvalMetrics> Evaluate(const job::JobSpec& job, const Json& config, model::Model& model,
                             ParamFetcher& fetcher);

// The sums of a pass over shard `shard` of `num_shards` of the eval data (the same split
// as the training data's between workers: by file, or by record when there are fewer
// files than shards). A shard may be empty. Inline distributed evaluation: every worker
// evaluates its shard and the chief merges the sums (EvalFigures) into exactly the
// figures of one pass over everything.
//
// This is the one scoring pass of pstrain: the evaluator, the chief's final evaluation,
// inline evaluation and `pstrain predict` (libps/serving) all score through it. The
// evaluator, the final evaluation and `predict` score the whole data set (shard 0 of 1)
// in batches of EvalBatchSize, so for the same parameters their scores and figures are
// bit-identical; inline evaluation's shards cut the batches elsewhere and its sums are
// merged in another order, so its figures agree with theirs to rounding only (a BLAS
// kernel may round differently for another batch size). `observe`, when set, sees every batch
// with its EvalOutput in data order (`pstrain predict` writes the scores); with an
// observer, unlabelled data is scored too (its batches add nothing to the sums), without
// one it is InvalidArgument. `where` names `config` in errors.
using BatchObserver =
    std::function<Status(const model::Batch& batch, const model::EvalOutput& out)>;
Result<std::vector<model::HeadMetrics::Sums>> EvaluateShard(
    const job::JobSpec& job, const Json& config, model::Model& model, ParamFetcher& fetcher,
    int shard, int num_shards, const BatchObserver& observe = {},
    const std::string& where = "job.eval_data");
// The scores of one batch: pulls what it needs through `fetcher` and runs the model's
// forward pass. EvaluateShard's step, and the serving API's (libps/serving/serving.h).
Result<model::EvalOutput> ScoreBatch(model::Model& model, ParamFetcher& fetcher,
                                     const model::Batch& batch);
// The batch size of evaluation passes: max(job.batch_size, 256).
int64_t EvalBatchSize(const job::JobSpec& job);
// {"accuracy", "loss", "examples", and "auc" / "heads" when set}: the figures as
// eval/metrics.jsonl and `pstrain predict --metrics` write them.
Json EvalMetricsToJson(const EvalMetrics& m);
// The figures of (merged) sums; InvalidArgument when they hold no example.
Result<EvalMetrics> EvalFigures(const model::Model& model,
                                const std::vector<model::HeadMetrics::Sums>& sums);

// Builds model, dataset shard and plan for a worker of `num_workers`, ready to train.
Result<std::unique_ptr<Trainer>> MakeTrainer(const job::JobSpec& job, int worker_index,
                                             int num_workers, int num_ps,
                                             std::vector<std::unique_ptr<PsLink>> links);

}  // namespace ps::worker

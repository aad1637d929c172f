// The worker's step loop: next batch → pull what the batch needs → forward/backward
// (OpenBLAS) → push gradients. Shared by pstrain-worker (parameters on remote ps tasks)
// and the no-network baseline of the benchmarks (parameters in a local Store).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "libps/client/param_fetcher.h"
#include "libps/client/ps_link.h"
#include "libps/data/dataset.h"
#include "libps/data/lease_reader.h"
#include "libps/data/step_order.h"
#include "libps/job/job.h"
#include "libps/model/model.h"
#include "libps/server/store.h"

namespace ps::worker {

struct StepStats {
  int64_t steps = 0;
  int64_t examples = 0;
  double loss_sum = 0;
  int64_t correct = 0;
  double data_seconds = 0, pull_seconds = 0, compute_seconds = 0, push_seconds = 0;
  int64_t stale = 0;            // sync mode: steps skipped because every shard had moved past them
  int64_t skipped_records = 0;  // bad records skipped (data "on_error": "skip") during these steps
};

// In-memory training data read by step: the whole table, and which of its examples each
// step trains (data/step_order.h). `slot`: this worker's batch of a step (sync mode: its
// worker index; otherwise 0).
struct StepData {
  data::ExampleTable table;
  data::StepOrder order;
  int slot = 0;
};

// Streamed training data read by lease (data/shards.h): the records each pack names.
struct LeaseData {
  std::unique_ptr<data::LeaseReader> reader;
  const data::RecordFormat* format = nullptr;  // the reader's
  uint64_t seed = 0;
  bool shuffle = true;
};

// Not thread-safe: one Trainer per worker, used by one thread at a time.
class Trainer {
 public:
  Trainer(int64_t batch_size, bool prefetch, std::unique_ptr<model::Model> model,
          std::unique_ptr<data::Dataset> dataset, std::unique_ptr<client::ParamFetcher> fetcher,
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
  ~Trainer();
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
  client::ParamFetcher& fetcher() { return *fetcher_; }
  // From now on step s trains the examples `data` gives it (instead of the data set's
  // next batch): a step computes on the same examples whoever runs it. Testing hook:
  // PSTRAIN_TEST_TRACE_IDS=FILE appends "<step> <slot> <table index>..." per step read
  // to FILE (one write per line, O_APPEND: several workers may share the file).
  Status ReadByStep(std::unique_ptr<StepData> data);
  // From now on a pack trains the records of its lease (RunLease). Testing hook: as for
  // ReadByStep, "<step> 0 <first sparse id of each example>..." per step, and
  // "pack <first_step> <count>" before the steps of each pack (its steps read before are
  // superseded).
  Status ReadByLease(std::unique_ptr<LeaseData> data);
  bool by_lease() const { return by_lease_ != nullptr; }
  // Reads the lease's records, shuffles them (seeded by (seed, lease.seq, lease.start): the
  // same on every worker) and trains them in batches as steps first_step...: as many steps
  // as there are batches, at most `count` (the last batch may be short; no step without
  // an example). Where the lease ended goes to *end.
  Status RunLease(int64_t first_step, int count, const data::LeaseSpec& lease, StepStats* stats,
                  data::PackEnd* end);

 private:
  Status Pipeline(int64_t first_step, int count, StepStats* stats);
  // The batch of step `step`: by step (ReadByStep), or the data set's next one.
  Result<model::Batch> NextBatch(int64_t step);
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
  std::unique_ptr<client::ParamFetcher> fetcher_;
  Status OpenTrace();
  Status Trace(const std::string& line);
  std::unique_ptr<StepData> by_step_;  // null: batches come from dataset_
  std::unique_ptr<LeaseData> by_lease_;
  std::vector<data::Row> rows_;     // RunLease's records
  std::vector<model::Batch> pack_;  // RunLease's batches, [step - pack_first_]
  int64_t pack_first_ = 0;
  std::vector<int64_t> picked_;  // NextBatch's table indices
  int trace_fd_ = -1;            // PSTRAIN_TEST_TRACE_IDS, or -1
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

// Builds model, dataset shard and plan for a worker of `num_workers`, ready to train.
Result<std::unique_ptr<Trainer>> MakeTrainer(const job::JobSpec& job, int worker_index,
                                             int num_workers, int num_ps,
                                             std::vector<std::unique_ptr<client::PsLink>> links);

}  // namespace ps::worker

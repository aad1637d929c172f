#include "libps/worker/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include <cerrno>

#include "libps/core/files.h"
#include "libps/core/log.h"

namespace ps::worker {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Trainer::~Trainer() {
  if (trace_fd_ >= 0) ::close(trace_fd_);
}

Status Trainer::OpenTrace() {
  if (const char* trace = std::getenv("PSTRAIN_TEST_TRACE_IDS"); trace != nullptr && *trace) {
    trace_fd_ = ::open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (trace_fd_ < 0) return ErrnoStatus(trace, "PSTRAIN_TEST_TRACE_IDS: open", errno);
  }
  return Status::Ok();
}

Status Trainer::Trace(const std::string& line) {
  if (trace_fd_ < 0) return Status::Ok();
  if (::write(trace_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return ErrnoStatus("PSTRAIN_TEST_TRACE_IDS", "write", errno);
  return Status::Ok();
}

Status Trainer::ReadByStep(std::unique_ptr<StepData> data) {
  PS_RETURN_IF_ERROR(OpenTrace());
  by_step_ = std::move(data);
  return Status::Ok();
}

Status Trainer::ReadByLease(std::unique_ptr<LeaseData> data) {
  PS_RETURN_IF_ERROR(OpenTrace());
  by_lease_ = std::move(data);
  return Status::Ok();
}

Status Trainer::RunLease(int64_t first_step, int count, const data::LeaseSpec& lease,
                         StepStats* stats, data::PackEnd* end) {
  const auto t0 = Clock::now();
  const int64_t skipped_before = by_lease_->reader->skipped();
  PS_ASSIGN_OR_RETURN(*end, by_lease_->reader->Read(lease, &rows_));
  stats->skipped_records += by_lease_->reader->skipped() - skipped_before;
  if (by_lease_->shuffle) {
    data::Rng rng(data::DeriveSeed(by_lease_->seed, static_cast<uint64_t>(lease.lease.seq),
                                   static_cast<uint64_t>(lease.lease.start)));
    data::Shuffle(rows_, rng);
  }
  const data::RecordFormat& format = *by_lease_->format;
  pack_.clear();
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (r % static_cast<size_t>(batch_size_) == 0) {
      if (static_cast<int>(pack_.size()) == count) break;
      pack_.push_back(data::StartBatch(format.info()));
    }
    data::AppendRow(rows_[r], format.has_values(), &pack_.back());
  }
  pack_first_ = first_step;
  stats->data_seconds += Seconds(t0, Clock::now());
  PS_RETURN_IF_ERROR(
      Trace("pack " + std::to_string(first_step) + " " + std::to_string(count) + "\n"));
  return RunSteps(first_step, static_cast<int>(pack_.size()), stats);
}

Result<model::Batch> Trainer::NextBatch(int64_t step) {
  if (by_lease_ != nullptr) {
    model::Batch batch = std::move(pack_.at(static_cast<size_t>(step - pack_first_)));
    if (trace_fd_ >= 0) {
      std::string line = std::to_string(step) + " 0";
      if (!batch.sparse.empty()) {
        const auto& f = batch.sparse[0];
        for (int64_t r = 0; r < batch.size; ++r)
          line.append(1, ' ').append(f.offsets[r] < f.offsets[r + 1]
                                         ? std::to_string(f.ids[static_cast<size_t>(f.offsets[r])])
                                         : std::string("-1"));
      }
      PS_RETURN_IF_ERROR(Trace(line + "\n"));
    }
    return batch;
  }
  if (by_step_ == nullptr) return dataset_->Next(batch_size_);
  by_step_->order.Indices(step, by_step_->slot, &picked_);
  model::Batch batch = by_step_->table.StartBatch();
  batch.labels.reserve(picked_.size());
  by_step_->table.AppendTo(picked_, &batch);
  if (trace_fd_ >= 0) {
    std::string line = std::to_string(step) + " " + std::to_string(by_step_->slot);
    // Appended, not " " + std::to_string(id): GCC 12 warns (-Wrestrict, a false positive
    // fixed in GCC 13) on inserting a literal before a temporary string.
    for (int64_t id : picked_) line.append(1, ' ').append(std::to_string(id));
    line += "\n";
    PS_RETURN_IF_ERROR(Trace(line));
  }
  return batch;
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
  const int64_t skipped_before = dataset_ ? dataset_->skipped() : 0;
  Status st = Pipeline(first_step, count, stats);
  if (dataset_) stats->skipped_records += dataset_->skipped() - skipped_before;
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
      PS_ASSIGN_OR_RETURN(batches_[stage], NextBatch(first_step + i));
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
      PS_ASSIGN_OR_RETURN(batches_[stage ^ 1], NextBatch(first_step + i + 1));
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
    Result<model::Batch> next_batch = combine ? NextBatch(first_step + next) : model::Batch{};
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

Result<std::unique_ptr<Trainer>> MakeTrainer(const job::JobSpec& job, int worker_index,
                                             int num_workers, int num_ps,
                                             std::vector<std::unique_ptr<client::PsLink>> links) {
  PS_ASSIGN_OR_RETURN(auto model, model::BuildModel(job.model, "job.model"));
  PS_ASSIGN_OR_RETURN(job::VariablePlan plan, job::PlanVariables(job, *model, num_ps));
  // In memory: every worker holds the whole table and trains, at step s, the examples the
  // chief's StepOrder gives step s (the chief builds the same order from the same job).
  // Streamed: this worker's files (stream.h), read ahead by the data set's own threads.
  std::unique_ptr<data::Dataset> dataset;
  std::unique_ptr<StepData> by_step;
  std::unique_ptr<LeaseData> by_lease;
  const bool sync = job.update.StepMode() == ps::server::UpdateMode::kSync;
  const bool streamed = job.train_data.is_object() && job.train_data.contains("files");
  if (streamed && !sync) {
    // Async and bounded staleness: each pack names the records it trains (a lease of the
    // chief's shard queue, data/shards.h).
    PS_ASSIGN_OR_RETURN(
        data::StreamedData d,
        data::PlanStreamedData(job.train_data, "job.train_data", job.base_dir, false));
    by_lease = std::make_unique<LeaseData>();
    by_lease->format = d.format.get();
    by_lease->reader =
        std::make_unique<data::LeaseReader>(d.format, d.options.skip_errors, "job.train_data");
    by_lease->seed = job.seed;
    by_lease->shuffle = d.options.shuffle_buffer > 1;
  } else if (streamed) {
    data::DatasetOptions opts;
    opts.base_dir = job.base_dir;
    opts.shard_index = worker_index;
    opts.num_shards = num_workers;
    opts.seed = job.seed;
    PS_ASSIGN_OR_RETURN(dataset, data::OpenDataset(job.train_data, "job.train_data", opts));
  } else {
    PS_ASSIGN_OR_RETURN(data::ExampleTable table,
                        data::LoadExamples(job.train_data, "job.train_data", job.base_dir));
    PS_RETURN_IF_ERROR(table.Validate().WithContext("job.train_data"));
    data::StepOrder::Options o;
    o.examples = table.size();
    o.batch_size = job.batch_size;
    o.slots = sync ? std::max(1, num_workers) : 1;
    o.seed = job.seed;
    if (job.epochs) o.limit = *job.epochs * table.size();
    auto order = data::StepOrder::Create(o);
    if (!order.ok()) return order.status().WithContext("job.train_data");
    by_step = std::make_unique<StepData>(
        StepData{std::move(table), std::move(*order), sync ? worker_index : 0});
  }
  PS_ASSIGN_OR_RETURN(auto fetcher, client::ParamFetcher::Create(plan, std::move(links)));
  fetcher->SetUpdateMode(job.update.StepMode(), worker_index);
  if (job.fake_compute_ms) {
    PS_LOG(Warning)
        << "job.fake_compute_ms = " << *job.fake_compute_ms
        << ": a benchmarking aid; every step sleeps instead of computing and pushes zero gradients "
           "(the model does not train)";
  }
  auto trainer = std::make_unique<Trainer>(
      job.batch_size, job.prefetch, std::move(model), std::move(dataset), std::move(fetcher),
      job.update.StepMode(), job.fake_compute_ms, job.combine_push_pull);
  if (by_step) PS_RETURN_IF_ERROR(trainer->ReadByStep(std::move(by_step)));
  if (by_lease) PS_RETURN_IF_ERROR(trainer->ReadByLease(std::move(by_lease)));
  return trainer;
}

}  // namespace ps::worker

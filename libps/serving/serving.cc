#include "libps/serving/serving.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "libps/data/dataset.h"
#include "libps/serving/bundle.h"

namespace ps::serving {

// Per-batch consistency between scorers and a refresh: a batch holds the gate shared for
// its whole pass, a refresh holds it exclusively while it writes into the store. It
// prefers the writer (std::shared_mutex on glibc prefers readers, so scorers that keep
// overlapping would starve a refresh): once a refresh waits, new batches wait for it.
class BatchGate {
 public:
  void EnterBatch() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !writer_; });
    ++batches_;
  }
  void LeaveBatch() {
    std::lock_guard lock(mu_);
    if (--batches_ == 0 && writer_) cv_.notify_all();
  }
  void Lock() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !writer_; });
    writer_ = true;
    cv_.wait(lock, [&] { return batches_ == 0; });
  }
  void Unlock() {
    {
      std::lock_guard lock(mu_);
      writer_ = false;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t batches_ = 0;
  bool writer_ = false;
};

struct Bundle::Impl {
  LoadedBundle b;             // b.info is guarded by info_mu; the store by gate
  mutable std::mutex info_mu;
  BatchGate gate;
  std::mutex refresh_mu;      // one refresh at a time; guards broken
  Status broken;              // a refresh that failed while writing: the store holds part of a delta
};

struct Scorer::Impl {
  std::shared_ptr<const Bundle> bundle;  // keeps the parameters alive
  Bundle::Impl* shared = nullptr;        // bundle's: its gate
  std::unique_ptr<model::Model> model;   // this thread's instance (scratch buffers)
  std::unique_ptr<worker::ParamFetcher> fetcher;
};

struct ExampleReader::Impl {
  std::unique_ptr<data::Dataset> dataset;
};

Bundle::Bundle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Bundle::~Bundle() = default;

Result<std::shared_ptr<Bundle>> Bundle::Load(const std::string& dir) {
  auto impl = std::make_unique<Impl>();
  PS_ASSIGN_OR_RETURN(impl->b, LoadBundle(dir));
  return std::shared_ptr<Bundle>(new Bundle(std::move(impl)));
}

BundleInfo Bundle::info() const {
  std::lock_guard lock(impl_->info_mu);
  return impl_->b.info;
}

Result<RefreshStats> Bundle::Refresh(const std::string& model_dir) {
  std::lock_guard serial(impl_->refresh_mu);
  if (!impl_->broken.ok()) {
    return FailedPrecondition(impl_->b.info.dir + ": an earlier refresh failed while applying deltas (" +
                              impl_->broken.ToString() + "): reload the bundle");
  }
  BundleInfo next = info();  // only refreshes change it, and this is the one
  RefreshStats stats;
  // The reading and verifying, beside the scorers.
  PS_ASSIGN_OR_RETURN(auto deltas, NewerDeltas(impl_->b, model_dir, next.source_step, &stats));
  if (deltas.empty()) return stats;
  const auto t0 = std::chrono::steady_clock::now();
  impl_->gate.Lock();
  Status st = ApplyBundleDeltas(impl_->b, deltas, &stats, &next);
  if (st.ok()) {
    std::lock_guard lock(impl_->info_mu);
    impl_->b.info = std::move(next);
  }
  stats.paused_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  impl_->gate.Unlock();
  if (!st.ok()) {
    impl_->broken = st;
    return Status(st.code(), st.message() + "; the bundle now holds part of the deltas after step " +
                                 std::to_string(stats.from_step) + ": reload it");
  }
  return stats;
}

Result<std::unique_ptr<Scorer>> Bundle::NewScorer() const {
  auto s = std::make_unique<Scorer::Impl>();
  s->bundle = shared_from_this();
  s->shared = impl_.get();
  PS_ASSIGN_OR_RETURN(s->model, model::BuildModel(impl_->b.loaded.job.model, "job.model"));
  PS_ASSIGN_OR_RETURN(s->fetcher, impl_->b.loaded.NewFetcher());
  return std::unique_ptr<Scorer>(new Scorer(std::move(s)));
}

Scorer::Scorer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Scorer::~Scorer() = default;

Result<Scores> Scorer::Score(const model::Batch& batch) {
  if (batch.size <= 0) return InvalidArgument("Score: the batch has no examples");
  // The whole pass inside the gate: the batch sees the bundle before or after a refresh.
  BatchGate& gate = impl_->shared->gate;
  gate.EnterBatch();
  struct Leave {
    BatchGate& gate;
    ~Leave() { gate.LeaveBatch(); }
  } leave{gate};
  PS_ASSIGN_OR_RETURN(model::EvalOutput out, worker::ScoreBatch(*impl_->model, *impl_->fetcher, batch));
  Scores scores;
  scores.examples = out.examples;
  for (auto& h : out.heads) scores.heads.push_back(std::move(h.predictions));
  return scores;
}

ExampleReader::ExampleReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExampleReader::~ExampleReader() = default;

Result<std::unique_ptr<ExampleReader>> ExampleReader::Open(const std::string& config_json,
                                                           const std::string& base_dir) {
  PS_ASSIGN_OR_RETURN(Json config, ParseJson(config_json, "data"));
  data::DatasetOptions opts;
  opts.base_dir = base_dir;
  opts.shuffle = false;
  opts.repeat = false;
  auto impl = std::make_unique<Impl>();
  PS_ASSIGN_OR_RETURN(impl->dataset, data::OpenDataset(config, "data", opts));
  return std::unique_ptr<ExampleReader>(new ExampleReader(std::move(impl)));
}

Result<model::Batch> ExampleReader::Next(int64_t max_examples) { return impl_->dataset->Next(max_examples); }

}  // namespace ps::serving

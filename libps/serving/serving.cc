#include "libps/serving/serving.h"

#include <chrono>
#include <exception>
#include <mutex>
#include <shared_mutex>

#include "libps/client/param_fetcher.h"
#include "libps/data/dataset.h"
#include "libps/scoring/scoring.h"
#include "libps/serving/batch_gate.h"
#include "libps/serving/bundle.h"

namespace ps::serving {

struct Bundle::Impl {
  LoadedBundle b;  // b.info is guarded by info_mu; the store by gate
  mutable std::mutex info_mu;
  BatchGate gate;
  std::mutex refresh_mu;  // one refresh at a time
  // A refresh that failed after writing into the store: it holds part of a delta (OK
  // otherwise). Written under refresh_mu and info_mu, read under either.
  Status broken;
};

struct Scorer::Impl {
  std::shared_ptr<const Bundle> bundle;  // keeps the parameters alive
  Bundle::Impl* shared = nullptr;        // bundle's: its gate
  std::unique_ptr<model::Model> model;   // this thread's instance (scratch buffers)
  std::unique_ptr<client::ParamFetcher> fetcher;
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

Result<std::shared_ptr<Bundle>> Bundle::LoadModelDir(const std::string& model_dir,
                                                     std::vector<std::string>* warnings) {
  auto impl = std::make_unique<Impl>();
  PS_ASSIGN_OR_RETURN(impl->b, serving::LoadModelDir(model_dir, std::nullopt, warnings));
  return std::shared_ptr<Bundle>(new Bundle(std::move(impl)));
}

Result<std::shared_ptr<Bundle>> Bundle::LoadModelDir(const std::string& model_dir, int64_t step,
                                                     std::vector<std::string>* warnings) {
  auto impl = std::make_unique<Impl>();
  PS_ASSIGN_OR_RETURN(impl->b, serving::LoadModelDir(model_dir, step, warnings));
  return std::shared_ptr<Bundle>(new Bundle(std::move(impl)));
}

std::string Bundle::job_json() const { return impl_->b.loaded.job.raw.dump(); }

BundleInfo Bundle::info() const {
  std::lock_guard lock(impl_->info_mu);
  return impl_->b.info;
}

Status Bundle::status() const {
  std::lock_guard lock(impl_->info_mu);
  return impl_->broken;
}

Result<RefreshStats> Bundle::Refresh(const std::string& model_dir) {
  std::lock_guard serial(impl_->refresh_mu);
  if (!impl_->broken.ok()) {
    return FailedPrecondition(impl_->b.info.dir + ": an earlier refresh failed while writing (" +
                              impl_->broken.message() + ")");
  }
  RefreshStats stats;
  // Finding, reading and verifying the deltas, beside the scorers (b.info changes only
  // under refresh_mu: this refresh's).
  PS_ASSIGN_OR_RETURN(auto deltas, NewerDeltas(impl_->b, model_dir, &stats));
  if (deltas.empty()) return stats;
  // The writing, from memory, while no batch is being scored.
  const auto t0 = std::chrono::steady_clock::now();
  bool changed = false;
  Status st;
  {
    std::unique_lock gate(impl_->gate);  // released on any exit, a throw included
    try {
      st = WriteBundleDeltas(impl_->b, deltas, &changed);
    } catch (const std::exception& e) {  // bad_alloc: how much was written is unknown
      st = Internal(impl_->b.info.dir + ": refresh: " + e.what());
      changed = true;
    }
    if (st.ok()) {
      // Still inside the gate: a batch that sees the new parameters sees their step too
      // (Scores::step).
      BundleInfo next = impl_->b.info;
      RecordBundleDeltas(impl_->b, deltas, &stats, &next);
      std::lock_guard lock(impl_->info_mu);
      impl_->b.info = std::move(next);
    }
  }
  stats.paused_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) {
    if (!changed) return st;  // nothing written: the bundle is as it was
    Status broken(st.code(), st.message() + "; the bundle holds part of the deltas after step " +
                                 std::to_string(stats.from_step) + ": reload it");
    std::lock_guard lock(impl_->info_mu);
    impl_->broken = broken;
    return broken;
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
  std::shared_lock gate(impl_->shared->gate);
  PS_ASSIGN_OR_RETURN(model::EvalOutput out,
                      scoring::ScoreBatch(*impl_->model, *impl_->fetcher, batch));
  Scores scores;
  {
    std::lock_guard lock(impl_->shared->info_mu);
    scores.base_step = impl_->shared->b.info.source_base_step;
    scores.step = impl_->shared->b.info.source_step;
  }
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

Result<model::Batch> ExampleReader::Next(int64_t max_examples) {
  return impl_->dataset->Next(max_examples);
}

}  // namespace ps::serving

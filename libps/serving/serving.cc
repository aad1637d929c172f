#include "libps/serving/serving.h"

#include <chrono>
#include <mutex>
#include <thread>

#include "libps/data/dataset.h"
#include "libps/serving/bundle.h"
#include "libps/serving/params.h"

namespace ps::serving {

namespace {

std::vector<uint32_t> DigestsOf(const ckpt::Manifest& m) {
  std::vector<uint32_t> out;
  for (const auto& f : m.shards) out.push_back(f.digest);
  return out;
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct Bundle::Impl {
  // The job, model and plan; b.info is the newest version's state (read and written
  // under refresh_mu only); b.loaded.store is released once the first version is built.
  LoadedBundle b;
  std::mutex refresh_mu;          // one refresh at a time
  mutable std::mutex version_mu;  // guards `current`, held only to copy or swap it
  std::shared_ptr<const ParamVersion> current;

  std::shared_ptr<const ParamVersion> Current() const {
    std::lock_guard lock(version_mu);
    return current;
  }

  // Makes `next` the version new batches take; then waits (this thread only) until the
  // batches holding the old one have finished, and frees what only it held here, not in
  // a scoring thread.
  void Publish(std::shared_ptr<const ParamVersion> next, RefreshStats* stats) {
    {
      std::lock_guard lock(version_mu);
      current.swap(next);
    }
    const auto t0 = std::chrono::steady_clock::now();
    while (next.use_count() > 1 && Since(t0) < kGraceLimitSeconds)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (stats != nullptr) stats->grace_seconds = Since(t0);
    next.reset();
  }
  static constexpr double kGraceLimitSeconds = 10;

  static Result<std::shared_ptr<Bundle>> Make(LoadedBundle b) {
    auto impl = std::make_unique<Impl>();
    PS_ASSIGN_OR_RETURN(impl->current, VersionFromStore(b.loaded, b.info));
    b.loaded.store.reset();  // the version holds the values now
    impl->b = std::move(b);
    return std::shared_ptr<Bundle>(new Bundle(std::move(impl)));
  }

  // The version after `from`: model_dir's newer deltas of its chain or, with
  // follow_full, a newer full checkpoint streamed in (its changed rows) with its deltas.
  // Null when there is nothing newer. Under refresh_mu.
  Result<std::shared_ptr<const ParamVersion>> Next(const ParamVersion& from,
                                                   const std::string& model_dir, bool follow_full,
                                                   RefreshStats* stats) {
    auto deltas = NewerDeltas(b, model_dir, stats);
    const auto t0 = std::chrono::steady_clock::now();
    if (deltas.ok()) {
      if (deltas->empty()) return std::shared_ptr<const ParamVersion>();
      VersionBuilder next(from);
      PS_RETURN_IF_ERROR(ApplyDeltaRecords(*deltas, next));
      BundleInfo info = from.info;
      for (const auto& d : *deltas) stats->applied.push_back(d.checkpoint.global_step);
      const ckpt::Manifest& newest = deltas->back().checkpoint.manifest;
      stats->to_step = info.source_step = newest.global_step;
      info.source_final = newest.final;
      info.source_delta_digests = DigestsOf(newest);
      stats->copied_bytes = next.copied_bytes();
      auto v = next.Finish(std::move(info));
      stats->build_seconds = Since(t0);
      return v;
    }
    // NewerDeltas sets base_step before it refuses a newer full checkpoint.
    if (!follow_full || stats->base_step <= from.info.source_base_step) return deltas.status();
    return NewBase(from, model_dir, stats);
  }

  Result<std::shared_ptr<const ParamVersion>> NewBase(const ParamVersion& from,
                                                      const std::string& model_dir,
                                                      RefreshStats* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<ckpt::DeltaRecords> read;
    ckpt::DeltaChainOptions chain{
        .upto = std::nullopt,
        .verify_after = std::nullopt,
        .read = [&](const ckpt::CheckpointInfo& d) -> Status {
          PS_ASSIGN_OR_RETURN(ckpt::DeltaRecords r, ckpt::ReadDelta(d, ckpt::RestoreSlots::kSkip));
          read.push_back(std::move(r));
          return Status::Ok();
        }};
    stats->warnings.clear();
    PS_ASSIGN_OR_RETURN(auto found, ckpt::FindRestorable(model_dir, &stats->warnings,
                                                         ckpt::Verify::kFooters, chain));
    if (!found) return NotFound(model_dir + ": no committed checkpoint");
    const ckpt::CheckpointInfo& c = *found;
    // Deltas read for a candidate FindRestorable then passed over are not c's.
    std::erase_if(read, [&](const ckpt::DeltaRecords& d) {
      return d.checkpoint.manifest.base != c.global_step;
    });
    if (read.size() != c.deltas.size()) {
      return Internal(model_dir + ": " + std::to_string(read.size()) + " deltas read, " +
                      ckpt::CheckpointDirName(c.global_step) + "'s chain has " +
                      std::to_string(c.deltas.size()));
    }
    VersionBuilder next(from);
    PS_RETURN_IF_ERROR(StreamCheckpoint(c, next));
    PS_RETURN_IF_ERROR(ApplyDeltaRecords(read, next));
    BundleInfo info = from.info;
    info.source_base_step = stats->base_step = c.global_step;
    info.source_base_digests = DigestsOf(c.manifest);
    info.source_step = stats->to_step = c.restored_step();
    info.source_final = (c.deltas.empty() ? c.manifest : c.deltas.back().manifest).final;
    info.source_delta_digests.clear();
    if (!c.deltas.empty()) info.source_delta_digests = DigestsOf(c.deltas.back().manifest);
    for (const auto& d : read) stats->applied.push_back(d.checkpoint.global_step);
    stats->new_base = true;
    stats->copied_bytes = next.copied_bytes();
    auto v = next.Finish(std::move(info));
    stats->build_seconds = Since(t0);
    return v;
  }

  Result<RefreshStats> Advance(const std::string& model_dir, bool follow_full) {
    std::lock_guard serial(refresh_mu);
    RefreshStats stats;
    auto from = Current();
    PS_ASSIGN_OR_RETURN(auto next, Next(*from, model_dir, follow_full, &stats));
    if (!next) return stats;
    from.reset();  // Publish waits for the old version's other holders
    b.info = next->info;
    Publish(std::move(next), &stats);
    return stats;
  }
};

struct Scorer::Impl {
  std::shared_ptr<const Bundle> bundle;     // keeps the versions' owner alive
  Bundle::Impl* shared = nullptr;           // bundle's: its current version
  std::unique_ptr<model::Model> model;      // this thread's instance (scratch buffers)
  std::vector<std::vector<int64_t>> rows;   // [var] the batch's rows
  std::vector<std::vector<float>> scratch;  // [var] their values (sparse variables)
  model::Params params;
};

struct ExampleReader::Impl {
  std::unique_ptr<data::Dataset> dataset;
};

Bundle::Bundle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Bundle::~Bundle() = default;

Result<std::shared_ptr<Bundle>> Bundle::Load(const std::string& dir) {
  PS_ASSIGN_OR_RETURN(LoadedBundle b, LoadBundle(dir));
  return Impl::Make(std::move(b));
}

Result<std::shared_ptr<Bundle>> Bundle::LoadModelDir(const std::string& model_dir,
                                                     std::vector<std::string>* warnings) {
  PS_ASSIGN_OR_RETURN(LoadedBundle b, serving::LoadModelDir(model_dir, std::nullopt, warnings));
  return Impl::Make(std::move(b));
}

Result<std::shared_ptr<Bundle>> Bundle::LoadModelDir(const std::string& model_dir, int64_t step,
                                                     std::vector<std::string>* warnings) {
  PS_ASSIGN_OR_RETURN(LoadedBundle b, serving::LoadModelDir(model_dir, step, warnings));
  return Impl::Make(std::move(b));
}

std::string Bundle::job_json() const { return impl_->b.loaded.job.raw.dump(); }

BundleInfo Bundle::info() const { return impl_->Current()->info; }

Status Bundle::status() const { return Status::Ok(); }

uint64_t Bundle::parameter_bytes() const { return UnsharedBytes(*impl_->Current(), nullptr); }

Result<RefreshStats> Bundle::Refresh(const std::string& model_dir) {
  return impl_->Advance(model_dir, false);
}

Result<RefreshStats> Bundle::Update(const std::string& model_dir) {
  return impl_->Advance(model_dir, true);
}

Result<std::shared_ptr<Bundle>> Bundle::LoadNewer(const std::string& model_dir,
                                                  RefreshStats* stats) const {
  std::lock_guard serial(impl_->refresh_mu);
  RefreshStats local;
  RefreshStats& s = stats != nullptr ? *stats : local;
  s = RefreshStats{};
  const auto from = impl_->Current();
  PS_ASSIGN_OR_RETURN(auto next, impl_->Next(*from, model_dir, true, &s));
  auto impl = std::make_unique<Impl>();
  impl->b.loaded.job = impl_->b.loaded.job;
  impl->b.loaded.num_ps = impl_->b.loaded.num_ps;
  impl->b.loaded.plan = impl_->b.loaded.plan;
  PS_ASSIGN_OR_RETURN(impl->b.model, model::BuildModel(impl->b.loaded.job.model, "job.model"));
  // Nothing newer: a version of its own all the same (its blocks shared), so that
  // neither bundle's refresh waits for the other's holding it.
  impl->current = next ? std::move(next) : std::make_shared<const ParamVersion>(*from);
  impl->b.info = impl->current->info;
  return std::shared_ptr<Bundle>(new Bundle(std::move(impl)));
}

Result<std::unique_ptr<Scorer>> Bundle::NewScorer() const {
  auto s = std::make_unique<Scorer::Impl>();
  s->bundle = shared_from_this();
  s->shared = impl_.get();
  PS_ASSIGN_OR_RETURN(s->model, model::BuildModel(impl_->b.loaded.job.model, "job.model"));
  return std::unique_ptr<Scorer>(new Scorer(std::move(s)));
}

Scorer::Scorer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Scorer::~Scorer() = default;

Result<Scores> Scorer::Score(const model::Batch& batch) {
  if (batch.size <= 0) return InvalidArgument("Score: the batch has no examples");
  // One version for the whole batch: it sees the bundle wholly before or after a refresh.
  const std::shared_ptr<const ParamVersion> v = impl_->shared->Current();
  PS_RETURN_IF_ERROR(impl_->model->RowsNeeded(batch, &impl_->rows));
  PS_RETURN_IF_ERROR(GatherParams(*v, impl_->rows, &impl_->scratch, &impl_->params));
  PS_ASSIGN_OR_RETURN(model::EvalOutput out, impl_->model->Forward(batch, impl_->params));
  Scores scores;
  scores.base_step = v->info.source_base_step;
  scores.step = v->info.source_step;
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

#include "libps/serving/serving.h"

#include "libps/data/dataset.h"
#include "libps/serving/bundle.h"

namespace ps::serving {

struct Bundle::Impl {
  LoadedBundle b;
};

struct Scorer::Impl {
  std::shared_ptr<const Bundle> bundle;  // keeps the parameters alive
  std::unique_ptr<model::Model> model;   // this thread's instance (scratch buffers)
  std::unique_ptr<worker::ParamFetcher> fetcher;
};

struct ExampleReader::Impl {
  std::unique_ptr<data::Dataset> dataset;
};

Bundle::Bundle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Bundle::~Bundle() = default;

Result<std::shared_ptr<const Bundle>> Bundle::Load(const std::string& dir) {
  auto impl = std::make_unique<Impl>();
  PS_ASSIGN_OR_RETURN(impl->b, LoadBundle(dir));
  return std::shared_ptr<const Bundle>(new Bundle(std::move(impl)));
}

const BundleInfo& Bundle::info() const { return impl_->b.info; }

Result<std::unique_ptr<Scorer>> Bundle::NewScorer() const {
  auto s = std::make_unique<Scorer::Impl>();
  s->bundle = shared_from_this();
  PS_ASSIGN_OR_RETURN(s->model, model::BuildModel(impl_->b.loaded.job.model, "job.model"));
  PS_ASSIGN_OR_RETURN(s->fetcher, impl_->b.loaded.NewFetcher());
  return std::unique_ptr<Scorer>(new Scorer(std::move(s)));
}

Scorer::Scorer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Scorer::~Scorer() = default;

Result<Scores> Scorer::Score(const model::Batch& batch) {
  if (batch.size <= 0) return InvalidArgument("Score: the batch has no examples");
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

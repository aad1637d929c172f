#include "libps/scoring/loaded_model.h"

#include <algorithm>

#include "libps/ckpt/store_io.h"

namespace ps::scoring {

Result<std::unique_ptr<client::ParamFetcher>> LoadedModel::NewFetcher() const {
  std::vector<std::unique_ptr<client::PsLink>> links;
  links.reserve(static_cast<size_t>(num_ps));
  for (int p = 0; p < num_ps; ++p) links.push_back(client::LocalPsLink(store.get()));
  return client::ParamFetcher::Create(plan, std::move(links));
}

Result<LoadedModel> LoadValues(const job::JobSpec& job, const model::Model& model, int num_ps,
                               const ckpt::CheckpointInfo& files) {
  LoadedModel loaded;
  loaded.job = job;
  loaded.num_ps = num_ps;
  PS_ASSIGN_OR_RETURN(loaded.plan, job::PlanVariables(job, model, num_ps));
  loaded.store = std::make_unique<ps::server::Store>();
  // Plain SGD has no slots: the store holds values only, a third of what Adam's would.
  PS_RETURN_IF_ERROR(loaded.store->Configure(ps::server::OptimizerSpec{}));
  for (const auto& s : loaded.plan.shards) {
    const auto& v = *std::find_if(loaded.plan.variables.begin(), loaded.plan.variables.end(),
                                  [&](const auto& d) { return d.name == s.layout.var; });
    // A lazy shard pulls rows the files lack at their initial values: it needs v.init.
    PS_RETURN_IF_ERROR(loaded.store->Create(ps::server::ShardDef{
        .layout = s.layout, .init = v.lazy ? v.init : model::InitSpec{}, .seed = job.seed}));
  }
  // Whatever layout wrote the files (RestoreStore reshards); a row of the model that no
  // record holds is an error naming it.
  PS_RETURN_IF_ERROR(
      ckpt::RestoreStore(loaded.store.get(), files, nullptr, ckpt::RestoreSlots::kSkip));
  return loaded;
}

Result<LoadedModel> LoadCheckpoint(const job::JobSpec& job, const model::Model& model,
                                   const ckpt::CheckpointInfo& c) {
  return LoadValues(job, model, c.manifest.num_ps, c);
}

Result<job::JobSpec> ReadModelDirJob(const std::string& model_dir) {
  const std::string path = model_dir + "/job.json";
  PS_ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  std::string base_dir = json.contains("base_dir") && json["base_dir"].is_string()
                             ? json["base_dir"].get<std::string>()
                             : model_dir;
  auto job = job::ParseJob(json, base_dir);
  if (!job.ok()) return job.status().WithContext(path);
  return job;
}

Result<PassResult> ScoreData(const LoadedModel& loaded, model::Model& model, const Json& data,
                             const std::string& base_dir, const std::string& where,
                             const BatchObserver& observe) {
  PS_ASSIGN_OR_RETURN(auto fetcher, loaded.NewFetcher());
  job::JobSpec job = loaded.job;  // EvaluateShard reads base_dir and the batch size from it
  job.base_dir = base_dir;
  PassResult result;
  auto count = [&](const model::Batch& batch, const model::EvalOutput& out) -> Status {
    result.examples += batch.size;
    return observe(batch, out);
  };
  PS_ASSIGN_OR_RETURN(auto sums, EvaluateShard(job, data, model, *fetcher, 0, 1,
                                               observe ? BatchObserver(count) : nullptr, where));
  if (!observe) result.examples = sums.empty() ? 0 : sums[0].examples;
  if (result.examples == 0) return InvalidArgument(where + ": no examples");  // as the evaluator
  if (!sums.empty() && sums[0].examples > 0) {
    PS_ASSIGN_OR_RETURN(result.metrics, EvalFigures(model, sums));
  }
  return result;
}

}  // namespace ps::scoring

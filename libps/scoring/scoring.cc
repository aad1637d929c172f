#include "libps/scoring/scoring.h"

#include <algorithm>

#include "libps/data/dataset.h"

namespace ps::scoring {

Result<model::EvalOutput> ScoreBatch(model::Model& model, client::ParamFetcher& fetcher,
                                     const model::Batch& batch) {
  PS_RETURN_IF_ERROR(fetcher.Fetch(model, batch));
  return model.Forward(batch, fetcher.params());
}

int64_t EvalBatchSize(const job::JobSpec& job) { return std::max<int64_t>(job.batch_size, 256); }

Result<std::vector<model::HeadMetrics::Sums>> EvaluateShard(
    const job::JobSpec& job, const Json& config, model::Model& model, client::ParamFetcher& fetcher,
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
                             client::ParamFetcher& fetcher) {
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

}  // namespace ps::scoring

// The one scoring pass of pstrain: parameters pulled through a ParamFetcher, the model's
// forward pass, and the figures (loss, accuracy, AUC, per-head metrics) of the scores.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libps/client/param_fetcher.h"
#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/job/job.h"
#include "libps/model/metrics.h"
#include "libps/model/model.h"

namespace ps::scoring {

struct EvalMetrics {
  int64_t examples = 0;
  double loss = 0;  // mean
  double accuracy = 0;
  double auc = -1;  // the first head's, sigmoid heads only; -1 otherwise
  Json heads;       // models with several heads: model::HeadMetrics::ToJson; else null
};

// One pass over `config` (the job's eval_data) with the parameters behind `fetcher`.
Result<EvalMetrics> Evaluate(const job::JobSpec& job, const Json& config, model::Model& model,
                             client::ParamFetcher& fetcher);

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
    const job::JobSpec& job, const Json& config, model::Model& model, client::ParamFetcher& fetcher,
    int shard, int num_shards, const BatchObserver& observe = {},
    const std::string& where = "job.eval_data");
// The scores of one batch: pulls what it needs through `fetcher` and runs the model's
// forward pass. EvaluateShard's step, and the serving API's (libps/serving/serving.h).
Result<model::EvalOutput> ScoreBatch(model::Model& model, client::ParamFetcher& fetcher,
                                     const model::Batch& batch);
// The batch size of evaluation passes: max(job.batch_size, 256).
int64_t EvalBatchSize(const job::JobSpec& job);
// {"accuracy", "loss", "examples", and "auc" / "heads" when set}: the figures as
// eval/metrics.jsonl and `pstrain predict --metrics` write them.
Json EvalMetricsToJson(const EvalMetrics& m);
// The figures of (merged) sums; InvalidArgument when they hold no example.
Result<EvalMetrics> EvalFigures(const model::Model& model,
                                const std::vector<model::HeadMetrics::Sums>& sums);

}  // namespace ps::scoring

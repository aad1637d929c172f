// Parameters loaded into this process for scoring, from a checkpoint or a bundle: the
// one loading path of pstrain-evaluator, `pstrain export`, `pstrain predict` and the
// serving API (libps/serving/serving.h, the public API; this header is internal).
//
// A checkpoint and a bundle load the same way: the job's variable plan for the number of
// ps tasks that trained it, an in-process Store with every shard of that plan (no
// optimizer slots: scoring needs none), shard files read into it with every checksum
// verified (ckpt::RestoreStore), and a check that every shard was restored. They score
// the same way too: EvaluateShard over ParamFetchers with in-process links to
// that Store. So a bundle exported from a checkpoint scores bit-identically to the
// evaluator on that checkpoint.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/job/job.h"
#include "libps/model/model.h"
#include "libps/scoring/scoring.h"
#include "libps/server/store.h"

namespace ps::scoring {

struct LoadedModel {
  job::JobSpec job;
  int num_ps = 0;                            // ps tasks of the training cluster: the plan's layout
  job::VariablePlan plan;                    // for num_ps
  std::unique_ptr<ps::server::Store> store;  // every shard of plan; values only

  // A fetcher over in-process links to `store` (one per ps of the plan). Not
  // thread-safe; one per scoring thread.
  Result<std::unique_ptr<client::ParamFetcher>> NewFetcher() const;
};

// Loads the values (not the optimizer slots) of the shard files `files` lists (a
// checkpoint, or a bundle's weights.shard described as a one-file checkpoint) into a fresh
// store laid out as `job`'s plan for `num_ps` ps tasks, whatever layout wrote them
// (ckpt::RestoreStore). A row of the plan that no record holds is FailedPrecondition
// naming it; damage is DataLoss naming the file.
Result<LoadedModel> LoadValues(const job::JobSpec& job, const model::Model& model, int num_ps,
                               const ckpt::CheckpointInfo& files);

// The committed checkpoint `c` of the job (what pstrain-evaluator evaluates).
Result<LoadedModel> LoadCheckpoint(const job::JobSpec& job, const model::Model& model,
                                   const ckpt::CheckpointInfo& c);

// The job file of a model dir (model_dir/job.json, with its base_dir), as the evaluator
// reads it.
Result<job::JobSpec> ReadModelDirJob(const std::string& model_dir);

// The figures of a pass, and how many examples it scored.
struct PassResult {
  int64_t examples = 0;                // scored
  std::optional<EvalMetrics> metrics;  // when the data has labels
};

// One pass of `model` with `loaded`'s parameters over the data set `data` (relative paths
// against `base_dir`; `where` names it in errors), through EvaluateShard: the
// evaluator's pass. `observe`, when set, sees every batch and its output in data order;
// then unlabelled data is scored too (metrics nullopt). Data without examples is
// InvalidArgument "<where>: no examples", as in the evaluator.
Result<PassResult> ScoreData(const LoadedModel& loaded, model::Model& model, const Json& data,
                             const std::string& base_dir, const std::string& where,
                             const BatchObserver& observe = {});

}  // namespace ps::scoring

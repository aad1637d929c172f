#include "libps/job/job.h"

#include <filesystem>

#include "libps/core/text.h"
#include "libps/model/plugins.h"

namespace ps::job {

namespace {
Status Range(const JsonReader& r, const char* key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return InvalidArgument(r.Path(key) + ": must be in " + std::to_string(lo) + ".." +
                           std::to_string(hi) + ", got " + std::to_string(v));
  }
  return Status::Ok();
}

Status ParseEarlyStopping(JsonReader& r, JobSpec& job) {
  JsonReader e = r.Child("early_stopping");
  PS_RETURN_IF_ERROR(e.status());
  EarlyStoppingSpec& s = job.early_stopping;
  PS_RETURN_IF_ERROR(e.Get("metric", &s.metric));
  if (s.metric != "auc" && s.metric != "accuracy" && s.metric != "loss") {
    return InvalidArgument(e.Path("metric") + ": must be \"auc\", \"accuracy\" or \"loss\", got " +
                           QuoteInput(s.metric, '"'));
  }
  std::string mode = s.metric == "loss" ? "min" : "max";
  PS_RETURN_IF_ERROR(e.GetOr("mode", &mode));
  if (mode != "min" && mode != "max")
    return InvalidArgument(e.Path("mode") + ": must be \"min\" or \"max\"");
  s.maximize = mode == "max";
  PS_RETURN_IF_ERROR(e.GetOr("patience", &s.patience));
  PS_RETURN_IF_ERROR(Range(e, "patience", s.patience, 1, 1000000));
  PS_RETURN_IF_ERROR(e.GetOr("min_delta", &s.min_delta));
  if (!(s.min_delta >= 0)) return InvalidArgument(e.Path("min_delta") + ": must be >= 0");
  PS_RETURN_IF_ERROR(e.Finish());
  if (job.eval_every_steps == 0) {
    return InvalidArgument(
        "job.early_stopping: needs job.eval_every_steps (the evaluations it watches)");
  }
  return Status::Ok();
}
}  // namespace

Result<JobSpec> ParseJob(const Json& json, const std::string& default_base_dir) {
  JsonReader r(json, "job");
  PS_RETURN_IF_ERROR(r.status());
  JobSpec job;
  const Json* model = r.Find("model");
  if (model == nullptr) return InvalidArgument("job.model: required key is missing");
  job.model = *model;
  const Json* train = r.Find("train_data");
  if (train == nullptr) return InvalidArgument("job.train_data: required key is missing");
  job.train_data = *train;
  if (const Json* eval = r.Find("eval_data")) job.eval_data = *eval;
  const Json* opt = r.Find("optimizer");
  if (opt == nullptr) return InvalidArgument("job.optimizer: required key is missing");
  PS_ASSIGN_OR_RETURN(job.optimizer, ps::server::ParseOptimizer(*opt, "job.optimizer"));

  if (r.Has("epochs")) {
    int64_t epochs = 0;
    PS_RETURN_IF_ERROR(r.Get("epochs", &epochs));
    PS_RETURN_IF_ERROR(Range(r, "epochs", epochs, 1, 1000000));
    job.epochs = epochs;
  }
  // train_data.follow: the data keeps arriving, the job runs until stopped (or `steps`).
  const bool follow = job.train_data.is_object() && job.train_data.contains("files") &&
                      job.train_data.contains("follow");
  if (follow && job.epochs) {
    return InvalidArgument(
        "job.epochs: job.train_data.follow trains each file once as it arrives; there are no "
        "epochs (use job.steps, or stop the job with pstrain stop)");
  }
  if ((!job.epochs && !follow) || r.Has("steps")) {
    PS_RETURN_IF_ERROR(r.Get("steps", &job.steps));
    PS_RETURN_IF_ERROR(Range(r, "steps", job.steps, 1, int64_t{1} << 50));
  }
  PS_RETURN_IF_ERROR(r.GetOr("batch_size", &job.batch_size));
  PS_RETURN_IF_ERROR(Range(r, "batch_size", job.batch_size, 1, 1 << 20));
  PS_RETURN_IF_ERROR(r.GetOr("steps_per_dispatch", &job.steps_per_dispatch));
  PS_RETURN_IF_ERROR(Range(r, "steps_per_dispatch", job.steps_per_dispatch, 1, 100000));
  PS_RETURN_IF_ERROR(r.GetOr("dispatches_per_worker", &job.dispatches_per_worker));
  PS_RETURN_IF_ERROR(Range(r, "dispatches_per_worker", job.dispatches_per_worker, 1, 64));
  PS_RETURN_IF_ERROR(r.GetOr("prefetch", &job.prefetch));
  PS_RETURN_IF_ERROR(r.GetOr("combine_push_pull", &job.combine_push_pull));
  if (const Json* u = r.Find("update")) {
    PS_ASSIGN_OR_RETURN(job.update, ps::server::ParseUpdate(*u, "job.update"));
  }
  if (job.epochs && job.train_data.is_object() && job.train_data.contains("files") &&
      job.update.StepMode() == ps::server::UpdateMode::kSync) {
    return InvalidArgument(
        "job.epochs: streamed job.train_data (\"files\") counts epochs in async and "
        "bounded-staleness mode only (in sync mode each worker streams its own files): use "
        "job.steps");
  }
  if (job.eval_data.is_object() && job.eval_data.contains("follow")) {
    return InvalidArgument(
        "job.eval_data.follow: only job.train_data can follow files as they arrive");
  }
  if (follow && job.update.StepMode() == ps::server::UpdateMode::kSync) {
    return InvalidArgument(
        "job.train_data.follow: data that keeps arriving is leased by the chief, in async and "
        "bounded-staleness mode only");
  }
  PS_RETURN_IF_ERROR(r.GetOr("seed", &job.seed));
  PS_RETURN_IF_ERROR(r.GetOr("log_every_steps", &job.log_every_steps));
  PS_RETURN_IF_ERROR(Range(r, "log_every_steps", job.log_every_steps, 1, int64_t{1} << 50));
  PS_RETURN_IF_ERROR(r.GetOr("model_dir", &job.model_dir));
  job.base_dir = default_base_dir;
  PS_RETURN_IF_ERROR(r.GetOr("base_dir", &job.base_dir));
  // Layer plug-ins, loaded before the model is built (relative paths: against base_dir).
  std::vector<std::string> plugins;
  PS_RETURN_IF_ERROR(r.GetOr("plugins", &plugins));
  for (size_t i = 0; i < plugins.size(); ++i) {
    std::filesystem::path p(plugins[i]);
    if (p.is_relative()) p = std::filesystem::path(job.base_dir) / p;
    PS_RETURN_IF_ERROR(model::LoadPlugin(p.string(), "job.plugins[" + std::to_string(i) + "]"));
  }
  if (const Json* p = r.Find("partitioner")) {
    PS_ASSIGN_OR_RETURN(job.partitioner, cluster::ParsePartitioner(*p, "job.partitioner"));
  }
  std::string placement = cluster::PlacementStrategyName(job.placement);
  PS_RETURN_IF_ERROR(r.GetOr("placement", &placement));
  auto strategy = cluster::ParsePlacementStrategy(placement);
  if (!strategy) {
    return InvalidArgument(
        "job.placement: must be \"balanced\", \"round_robin\" or \"greedy_bytes\", got \"" +
        placement + "\"");
  }
  job.placement = *strategy;
  if (r.Has("checkpoint")) {
    JsonReader c = r.Child("checkpoint");
    PS_RETURN_IF_ERROR(c.status());
    PS_RETURN_IF_ERROR(c.GetOr("every_steps", &job.checkpoint.every_steps));
    PS_RETURN_IF_ERROR(Range(c, "every_steps", job.checkpoint.every_steps, 0, int64_t{1} << 50));
    PS_RETURN_IF_ERROR(c.GetOr("every_seconds", &job.checkpoint.every_seconds));
    if (job.checkpoint.every_seconds < 0) {
      return InvalidArgument(c.Path("every_seconds") + ": must be >= 0");
    }
    PS_RETURN_IF_ERROR(c.GetOr("delta_every_seconds", &job.checkpoint.delta_every_seconds));
    if (job.checkpoint.delta_every_seconds < 0) {
      return InvalidArgument(c.Path("delta_every_seconds") + ": must be >= 0");
    }
    PS_RETURN_IF_ERROR(c.GetOr("max_deltas", &job.checkpoint.max_deltas));
    PS_RETURN_IF_ERROR(Range(c, "max_deltas", job.checkpoint.max_deltas, 1, 1000000));
    PS_RETURN_IF_ERROR(c.GetOr("delta_max_fraction", &job.checkpoint.delta_max_fraction));
    if (!(job.checkpoint.delta_max_fraction > 0)) {
      return InvalidArgument(c.Path("delta_max_fraction") + ": must be > 0");
    }
    PS_RETURN_IF_ERROR(c.GetOr("max_to_keep", &job.checkpoint.max_to_keep));
    PS_RETURN_IF_ERROR(Range(c, "max_to_keep", job.checkpoint.max_to_keep, 1, 1000000));
    PS_RETURN_IF_ERROR(
        c.GetOr("max_consecutive_failures", &job.checkpoint.max_consecutive_failures));
    PS_RETURN_IF_ERROR(
        Range(c, "max_consecutive_failures", job.checkpoint.max_consecutive_failures, 1, 1000000));
    PS_RETURN_IF_ERROR(c.GetOr("init_from", &job.checkpoint.init_from));
    PS_RETURN_IF_ERROR(c.Finish());
  }
  PS_RETURN_IF_ERROR(r.GetOr("eval_every_steps", &job.eval_every_steps));
  PS_RETURN_IF_ERROR(Range(r, "eval_every_steps", job.eval_every_steps, 0, int64_t{1} << 50));
  if (job.eval_every_steps > 0 && job.eval_data.is_null()) {
    return InvalidArgument("job.eval_every_steps: needs job.eval_data (what to evaluate on)");
  }
  if (r.Has("early_stopping")) PS_RETURN_IF_ERROR(ParseEarlyStopping(r, job));
  if (r.Has("fake_compute_ms")) {
    double ms = 0;
    PS_RETURN_IF_ERROR(r.Get("fake_compute_ms", &ms));
    if (!(ms >= 0 && ms <= 60000)) {
      return InvalidArgument(r.Path("fake_compute_ms") + ": must be in 0..60000 (milliseconds)");
    }
    job.fake_compute_ms = ms;
  }
  PS_RETURN_IF_ERROR(r.Finish());

  // The model must build; data is checked by the workers that load it.
  PS_RETURN_IF_ERROR(model::BuildModel(job.model, "job.model").status());

  job.raw = json;
  job.raw["base_dir"] = job.base_dir;
  return job;
}

Result<JobSpec> ReadJobFile(const std::string& path) {
  auto read = ReadJsonFile(path);
  if (!read.ok()) return InvalidArgument(read.status().message());
  const Json& json = *read;
  std::error_code ec;
  auto dir = std::filesystem::absolute(std::filesystem::path(path), ec).parent_path();
  auto job = ParseJob(json, dir.string());
  if (!job.ok()) return job.status().WithContext(path);
  return job;
}

Result<VariablePlan> PlanVariables(const JobSpec& job, const model::Model& model, int num_ps) {
  VariablePlan plan;
  plan.variables = model.variables();
  std::vector<cluster::VarShape> shapes;
  // A sparse table's rows per step: one id per example (a one-hot field), at most its rows.
  for (const auto& v : plan.variables) {
    shapes.push_back({.name = v.name,
                      .shape = v.shape,
                      .elem_bytes = 4,
                      .lazy = v.lazy,
                      .sparse = v.sparse,
                      .rows_per_step = v.sparse ? job.batch_size : 0});
  }
  PS_ASSIGN_OR_RETURN(plan.shards, cluster::Place(shapes, job.partitioner, num_ps, job.placement));
  return plan;
}

}  // namespace ps::job

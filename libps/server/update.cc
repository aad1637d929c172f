#include "libps/server/update.h"
#include "libps/core/text.h"

namespace ps::server {

const char* UpdateModeName(UpdateMode mode) {
  switch (mode) {
    case UpdateMode::kAsync:
      return "async";
    case UpdateMode::kSync:
      return "sync";
    case UpdateMode::kBoundedStaleness:
      return "bounded_staleness";
  }
  return "?";
}

std::string UpdateSpec::Describe() const {
  if (!sparse_mode) return UpdateModeName(mode);
  return std::string("dense ") + UpdateModeName(mode) + ", sparse " + UpdateModeName(*sparse_mode);
}

namespace {

// The only mix of two modes: one class sync, the other async.
bool SyncAsyncPair(UpdateMode dense, UpdateMode sparse) {
  return (dense == UpdateMode::kSync && sparse == UpdateMode::kAsync) ||
         (dense == UpdateMode::kAsync && sparse == UpdateMode::kSync);
}

// One mode object: the whole "update" of the single form (`mode` optional, default
// async) or one class's (`mode` required). Finishes `r`.
Result<UpdateSpec> ParseMode(JsonReader& r, bool mode_required) {
  PS_RETURN_IF_ERROR(r.status());
  UpdateSpec spec;
  std::string mode = "async";
  PS_RETURN_IF_ERROR(mode_required ? r.Get("mode", &mode) : r.GetOr("mode", &mode));
  if (mode == "async") {
    spec.mode = UpdateMode::kAsync;
  } else if (mode == "sync") {
    spec.mode = UpdateMode::kSync;
  } else if (mode == "bounded_staleness") {
    spec.mode = UpdateMode::kBoundedStaleness;
  } else {
    return InvalidArgument(r.Path("mode") + ": " + QuoteInput(mode, '"') +
                           " is not one of \"async\", \"sync\", \"bounded_staleness\"");
  }
  if (spec.mode == UpdateMode::kSync) {
    const bool given = r.Has("replicas_to_aggregate");
    PS_RETURN_IF_ERROR(r.GetOr("replicas_to_aggregate", &spec.replicas_to_aggregate));
    if (spec.replicas_to_aggregate < (given ? 1 : 0)) {
      return InvalidArgument(r.Path("replicas_to_aggregate") + ": must be at least 1");
    }
  }
  if (spec.mode == UpdateMode::kBoundedStaleness) {
    PS_RETURN_IF_ERROR(r.GetOr("staleness", &spec.staleness));
    if (spec.staleness < 0) return InvalidArgument(r.Path("staleness") + ": must be >= 0");
  }
  PS_RETURN_IF_ERROR(r.Finish());
  return spec;
}

}  // namespace

Result<UpdateSpec> ParseUpdate(const Json& json, const std::string& path) {
  JsonReader r(json, path);
  PS_RETURN_IF_ERROR(r.status());
  if (!r.Has("dense") && !r.Has("sparse")) return ParseMode(r, false);
  // The per-class form: exactly "dense" and "sparse".
  for (const char* key : {"mode", "replicas_to_aggregate", "staleness"}) {
    if (r.Has(key)) {
      return InvalidArgument(
          r.Path(key) + ": not allowed beside \"dense\" and \"sparse\" (give each class its own)");
    }
  }
  JsonReader d = r.Child("dense");
  PS_ASSIGN_OR_RETURN(UpdateSpec dense, ParseMode(d, true));
  JsonReader s = r.Child("sparse");
  PS_ASSIGN_OR_RETURN(UpdateSpec sparse, ParseMode(s, true));
  PS_RETURN_IF_ERROR(r.Finish());
  if (dense.mode == sparse.mode) {
    // One mode for both classes: the single form, so its settings must agree.
    if (dense.replicas_to_aggregate != sparse.replicas_to_aggregate) {
      return InvalidArgument(s.Path("replicas_to_aggregate") + ": " +
                             std::to_string(sparse.replicas_to_aggregate) + " differs from " +
                             d.Path("replicas_to_aggregate") + " " +
                             std::to_string(dense.replicas_to_aggregate) +
                             " (0: every worker); both classes sync are one sync update");
    }
    if (dense.staleness != sparse.staleness) {
      return InvalidArgument(s.Path("staleness") + ": " + std::to_string(sparse.staleness) +
                             " differs from " + d.Path("staleness") + " " +
                             std::to_string(dense.staleness) +
                             "; both classes bounded_staleness share one bound");
    }
    dense.per_class = true;  // later errors name the class objects the user wrote
    return dense;
  }
  if (!SyncAsyncPair(dense.mode, sparse.mode)) {
    const bool sparse_odd = sparse.mode == UpdateMode::kBoundedStaleness;
    return InvalidArgument(
        (sparse_odd ? s : d).Path("mode") + ": \"bounded_staleness\" cannot be mixed with \"" +
        UpdateModeName(sparse_odd ? dense.mode : sparse.mode) +
        "\" in the other class; a hybrid update is one class \"sync\" and the other \"async\"");
  }
  UpdateSpec spec;
  spec.mode = dense.mode;
  spec.sparse_mode = sparse.mode;
  spec.replicas_to_aggregate =
      dense.mode == UpdateMode::kSync ? dense.replicas_to_aggregate : sparse.replicas_to_aggregate;
  return spec;
}

Status ValidateUpdate(const UpdateSpec& spec, const std::string& path) {
  // Where the settings live: a hybrid spec's in the sync class's object; a per-class spec
  // folded to one mode's in both (they agree), named by "dense".
  const std::string sync_path = spec.hybrid()
                                    ? path + (spec.mode == UpdateMode::kSync ? ".dense" : ".sparse")
                                : spec.per_class ? path + ".dense"
                                                 : path;
  if (spec.replicas_to_aggregate < 0) {
    return InvalidArgument(sync_path +
                           ".replicas_to_aggregate: must be >= 0 (0: every worker), got " +
                           std::to_string(spec.replicas_to_aggregate));
  }
  if (spec.staleness < 0) {
    return InvalidArgument(sync_path + ".staleness: must be >= 0, got " +
                           std::to_string(spec.staleness));
  }
  if (spec.hybrid()) {
    if (!SyncAsyncPair(spec.mode, *spec.sparse_mode)) {
      return InvalidArgument(
          path + ": a hybrid update is one class \"sync\" and the other \"async\", got " +
          spec.Describe());
    }
  }
  if (spec.StepMode() == UpdateMode::kAsync) return Status::Ok();
  if (spec.num_workers < 1)
    return InvalidArgument(path + ": " + spec.Describe() + " mode needs workers");
  if (spec.replicas_to_aggregate > spec.num_workers) {
    return InvalidArgument(
        sync_path + ".replicas_to_aggregate: " + std::to_string(spec.replicas_to_aggregate) +
        " is more than the cluster's " + std::to_string(spec.num_workers) + " worker(s)");
  }
  if (spec.hybrid() && spec.replicas() < spec.num_workers) {
    return InvalidArgument(
        sync_path + ".replicas_to_aggregate: " + std::to_string(spec.replicas()) + " of " +
        std::to_string(spec.num_workers) +
        " workers: a hybrid update cannot have backup workers (a backup's gradient for the "
        "async class could be applied after its update was decided, outside the checkpoint "
        "that holds it)");
  }
  return Status::Ok();
}

std::string OneClassWarning(const UpdateSpec& spec, int64_t dense_vars, int64_t sparse_vars,
                            const std::string& path) {
  if (!spec.hybrid() || (dense_vars > 0 && sparse_vars > 0)) return "";
  const bool sparse_only = dense_vars == 0;
  return path + ": a hybrid update (" + spec.Describe() + ") but the model has no " +
         (sparse_only ? "dense" : "sparse") + " variable: this is plain " +
         UpdateModeName(spec.ModeOf(sparse_only)) + " training";
}

}  // namespace ps::server

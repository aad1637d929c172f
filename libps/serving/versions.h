// Which versions of a served model to load and unload, and whether a config's version
// labels may be applied: pstrain-serve's bookkeeping as pure functions (no disk, no
// clocks), after TensorFlow Serving's (serving_config.md). A version is the step of a
// full checkpoint of a training model dir.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/serving/model_config.h"

namespace ps::serving {

struct VersionPlan {
  std::vector<int64_t> load;    // newest first: the newest serves as soon as it is loaded
  std::vector<int64_t> unload;  // ascending
  bool operator==(const VersionPlan&) const = default;
};

// One step of following a model dir. The versions `policy` wants are
// SelectVersions(policy, available - skipped, keep) (`keep`: --keep-versions, the count
// of a `latest` policy without num_versions). Plan: load the wanted ones not `loaded`,
// unload the loaded ones not wanted — except that a model never drops its last loaded
// versions for nothing: while no wanted version is loaded, nothing is unloaded. The
// caller loads first (a version that fails joins `skipped`) and plans again before it
// unloads, so that the versions a new one replaces serve until it does.
VersionPlan PlanVersions(const VersionPolicy& policy, const std::vector<int64_t>& available,
                         const std::set<int64_t>& skipped, const std::set<int64_t>& loaded,
                         int keep);

// Whether a config's labels for `model` may replace `current`, TF Serving's rule: a
// label may only name a version that is loaded, except that with
// allow_unavailable (--allow-version-labels-for-unavailable-models) a label that is new,
// or already names that version, may name one that is not loaded yet (a label in use is
// only ever moved to a loaded version, so that requests for it never fail during a
// version swap). FailedPrecondition with TF Serving's message otherwise.
Status CheckLabels(const std::string& model, const std::map<std::string, int64_t>& next,
                   const std::map<std::string, int64_t>& current, const std::set<int64_t>& loaded,
                   bool allow_unavailable);

// The version a request names: `version` (digits) or `label`, or with neither the newest
// loaded; nullopt when it names none that is loaded (or an unknown label: *unknown_label).
std::optional<int64_t> ResolveVersion(const std::string& version, const std::string& label,
                                      const std::map<std::string, int64_t>& labels,
                                      const std::set<int64_t>& loaded, bool* unknown_label);

}  // namespace ps::serving

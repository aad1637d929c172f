#include "libps/serving/versions.h"

#include <algorithm>

namespace ps::serving {

VersionPlan PlanVersions(const VersionPolicy& policy, const std::vector<int64_t>& available,
                         const std::set<int64_t>& skipped, const std::set<int64_t>& loaded,
                         int keep) {
  std::vector<int64_t> usable;
  for (int64_t v : available) {
    if (skipped.count(v) == 0) usable.push_back(v);
  }
  const std::vector<int64_t> wanted = SelectVersions(policy, std::move(usable), keep);
  VersionPlan plan;
  bool any_wanted_loaded = false;
  for (auto it = wanted.rbegin(); it != wanted.rend(); ++it) {
    if (loaded.count(*it) == 0) {
      plan.load.push_back(*it);
    } else {
      any_wanted_loaded = true;
    }
  }
  if (!any_wanted_loaded) return plan;
  for (int64_t v : loaded) {
    if (!std::binary_search(wanted.begin(), wanted.end(), v)) plan.unload.push_back(v);
  }
  return plan;
}

Status CheckLabels(const std::string& model, const std::map<std::string, int64_t>& next,
                   const std::map<std::string, int64_t>& current, const std::set<int64_t>& loaded,
                   bool allow_unavailable) {
  for (const auto& [label, version] : next) {
    if (loaded.count(version) > 0) continue;
    auto was = current.find(label);
    if (allow_unavailable && (was == current.end() || was->second == version)) continue;
    return FailedPrecondition("Request to assign label " + label + " to version " +
                              std::to_string(version) + " of model " + model +
                              ", which is not currently available for inference" +
                              (allow_unavailable && was != current.end()
                                   ? " (a label in use moves only to a loaded version)"
                                   : ""));
  }
  return Status::Ok();
}

std::optional<int64_t> ResolveVersion(const std::string& version, const std::string& label,
                                      const std::map<std::string, int64_t>& labels,
                                      const std::set<int64_t>& loaded, bool* unknown_label) {
  *unknown_label = false;
  int64_t want = 0;
  if (!version.empty()) {
    want = std::stoll(version);
  } else if (!label.empty()) {
    auto it = labels.find(label);
    if (it == labels.end()) {
      *unknown_label = true;
      return std::nullopt;
    }
    want = it->second;
  } else {
    if (loaded.empty()) return std::nullopt;
    return *loaded.rbegin();
  }
  if (loaded.count(want) == 0) return std::nullopt;
  return want;
}

}  // namespace ps::serving

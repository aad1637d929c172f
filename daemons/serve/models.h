// pstrain-serve's models, as a model config names them (--model NAME=PATH, or
// --model-config-file: libps/serving/model_config.h): each a bundle (one version) or a
// training model dir, followed while serving. A model dir's versions are its full
// checkpoints; the model's policy (default: the last --keep-versions) chooses which are
// loaded (libps/serving/versions.h: PlanVersions). The newest loaded version follows the
// deltas of its checkpoint (applied in place by Bundle::Refresh); older ones stay as they
// were. A version that fails to load (a damaged checkpoint, more than the host's
// MemAvailable) is logged once, counted and skipped until the config is applied again;
// the versions loaded before serve on. Apply and Poll are called from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/prom/registry.h"
#include "libps/serving/model_config.h"
#include "libps/serving/rest.h"

namespace ps::serve {

class Models {
 public:
  struct Options {
    int keep_versions = 2;                      // --keep-versions
    bool allow_labels_for_unavailable = false;  // --allow-version-labels-for-unavailable-models
  };
  Models(Options options, std::shared_ptr<prom::Registry> registry);
  ~Models();

  // What the REST layer serves: the models of the config applied.
  const std::shared_ptr<serving::ServedModels>& served() const { return served_; }
  // Checks every base_path is a bundle or a model dir (NotFound naming it otherwise).
  static Status Check(const std::vector<serving::ModelSpec>& specs);
  // Serves what `specs` names: new models are added and loaded, models it does not name
  // are removed (requests under way finish with the version they hold), changed ones
  // (path, policy) follow their new spec; then each model's labels are applied (CheckLabels:
  // refused labels leave the model's previous ones). Returns the first problem: with
  // `startup`, a model with no version loaded; always, labels refused.
  Status Apply(const std::vector<serving::ModelSpec>& specs, bool startup);
  // One look at every model dir: new full checkpoints (loaded, older ones unloaded as the
  // policy says), new deltas of the newest loaded version. Problems are logged (once
  // while they repeat) and counted; the model serves on as it was.
  void Poll();

 private:
  struct Slot;
  // Loads and unloads `slot`'s versions as its policy says, then refreshes the newest.
  void Sync(Slot& slot);
  Status LoadVersion(Slot& slot, int64_t version);
  void Refresh(Slot& slot);
  void Problem(Slot& slot, const Status& st);

  Options options_;
  std::shared_ptr<prom::Registry> registry_;
  std::shared_ptr<serving::ServedModels> served_ = std::make_shared<serving::ServedModels>();
  mutable std::mutex mu_;  // slots_ (the collector reads it)
  std::vector<std::unique_ptr<Slot>> slots_;
  prom::Registry::Collection gauges_;
};

// The host's MemAvailable (/proc/meminfo), bytes; nullopt when it cannot be read.
// PSTRAIN_SERVE_MEM_AVAILABLE (bytes), when set, stands for it (tests).
Result<uint64_t> MemAvailable();
// The bytes a model's files take: a bundle's, or a model dir's full checkpoint at
// `version` (optimizer slots included: an upper bound of what loading takes).
Result<uint64_t> ModelBytes(const std::string& path, bool model_dir, int64_t version);

}  // namespace ps::serve

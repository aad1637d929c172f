// pstrain-serve's models: each --model NAME=PATH loaded (a bundle, or a training model dir
// exported in memory at its newest checkpoint), followed while serving (a model dir:
// new deltas or a newer full checkpoint applied by Bundle::Update: a new version built
// beside the served one, sharing its unchanged rows, and swapped in), and their metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/prom/registry.h"
#include "libps/serving/rest.h"

namespace ps::serve {

class Models {
 public:
  struct Entry {
    std::string name, path;
    bool model_dir = false;  // else a bundle
  };
  Models(std::vector<Entry> entries, std::shared_ptr<prom::Registry> registry);
  ~Models();

  // For the REST layer: one per entry, empty until loaded.
  const std::vector<std::shared_ptr<serving::ServedModel>>& served() const { return served_; }
  // Checks every PATH is a bundle or a model dir (NotFound naming it otherwise).
  Status Check() const;
  // Loads every model (refusing one whose files are larger than MemAvailable, named with
  // both sizes). The first failure is returned.
  Status LoadAll();
  // One look at every model dir: new deltas, or a newer full checkpoint. Failures are
  // logged (once while they repeat) and counted, and the model serves on as it was.
  void Poll();

 private:
  struct Slot;
  Status Load(Slot& slot);
  void Publish(Slot& slot);
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::shared_ptr<serving::ServedModel>> served_;
  std::shared_ptr<prom::Registry> registry_;
  prom::Registry::Collection ages_;
};

// The host's MemAvailable (/proc/meminfo), bytes; nullopt when it cannot be read.
// PSTRAIN_SERVE_MEM_AVAILABLE (bytes), when set, stands for it (tests).
Result<uint64_t> MemAvailable();
// The bytes a model's files take: a bundle's, or a model dir's newest full checkpoint's
// (optimizer slots included: an upper bound of what loading takes).
Result<uint64_t> ModelBytes(const std::string& path, bool model_dir);

}  // namespace ps::serve

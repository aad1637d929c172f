#include "libps/chief/early_stopping.h"

#include "libps/core/text.h"

namespace ps::chief {

std::string EarlyStopper::Observe(int64_t step, std::optional<double> value) {
  if (!enabled() || !value) return "";
  const double v = *value;
  const bool better =
      !best_ || (spec_.maximize ? v > *best_ + spec_.min_delta : v < *best_ - spec_.min_delta);
  if (better) {
    best_ = v;
    best_step_ = step;
    waited_ = 0;
    return "";
  }
  if (++waited_ < spec_.patience) return "";
  return spec_.metric + " did not improve on " + Fixed(*best_, 4) + " (step " +
         std::to_string(best_step_) + ") for " + std::to_string(waited_) + " evaluation(s)";
}

}  // namespace ps::chief

#include "libps/data/step_order.h"

#include <algorithm>
#include <numeric>

#include "libps/data/random.h"

namespace ps::data {
namespace {
// DeriveSeed's shard argument for the whole data set's per-epoch permutation; no worker
// shard index reaches it.
constexpr uint64_t kWholeDataSet = ~uint64_t{0} - 1;
}  // namespace

Result<StepOrder> StepOrder::Create(Options options) {
  if (options.examples <= 0)
    return InvalidArgument("the data set has no examples to order for training");
  if (options.batch_size <= 0 || options.slots <= 0)
    return InvalidArgument("batch size and batches per step must be positive");
  if (options.limit && *options.limit < 0)
    return InvalidArgument("the position limit must not be negative");
  return StepOrder(options);
}

int64_t StepOrder::Position(int64_t step, int slot) const {
  return (step * options_.slots + slot) * options_.batch_size;
}

int64_t StepOrder::BatchSize(int64_t step, int slot) const {
  const int64_t begin = Position(step, slot);
  if (!options_.limit) return options_.batch_size;
  return std::clamp<int64_t>(*options_.limit - begin, 0, options_.batch_size);
}

int64_t StepOrder::StepsFor(int64_t epochs) const {
  const int64_t per_step = options_.slots * options_.batch_size;
  return (epochs * options_.examples + per_step - 1) / per_step;
}

double StepOrder::EpochsAt(int64_t step) const {
  return static_cast<double>(step) * static_cast<double>(options_.slots * options_.batch_size) /
         static_cast<double>(options_.examples);
}

int64_t StepOrder::Index(int64_t position) {
  const int64_t epoch = position / options_.examples;
  if (epoch != perm_epoch_) {
    perm_.resize(static_cast<size_t>(options_.examples));
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    if (options_.shuffle) {
      Rng rng(DeriveSeed(options_.seed, static_cast<uint64_t>(epoch), kWholeDataSet));
      Shuffle(perm_, rng);
    }
    perm_epoch_ = epoch;
  }
  return perm_[static_cast<size_t>(position % options_.examples)];
}

void StepOrder::Indices(int64_t step, int slot, std::vector<int64_t>* out) {
  out->clear();
  const int64_t begin = Position(step, slot);
  const int64_t n = BatchSize(step, slot);
  out->reserve(static_cast<size_t>(n));
  for (int64_t p = begin; p < begin + n; ++p) out->push_back(Index(p));
}

}  // namespace ps::data

// StepOrder: which examples of an in-memory data set a step trains, as a pure function
// of the step id. The chief owns the data position this way: it owns the step ids (and
// checkpoints the global step), so a pack of steps computes on the same examples on
// whichever worker runs it, a retried pack trains what the failed one would have, and a
// restore to a checkpoint rolls the data position back with the parameters.
//
// The examples of all epochs form one endless sequence of positions: position p is
// example perm_e[p mod N] of epoch e = p div N, where perm_e is a permutation of the
// whole data set (N examples) drawn from (seed, e); identity order without shuffling.
// A step has `slots` batches of batch_size positions (sync mode: one per worker, slot =
// worker index; otherwise one): step s, slot k covers positions
// [(s * slots + k) * batch_size, + batch_size). With a position limit (epochs * N) the
// batches stop there: the last one is short, and none is empty as long as the step is
// below StepsFor(epochs) and slots == 1.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "libps/core/status.h"

namespace ps::data {

class StepOrder {
 public:
  struct Options {
    int64_t examples = 0;    // N > 0
    int64_t batch_size = 1;  // > 0
    int slots = 1;           // batches per step, > 0
    uint64_t seed = 0;
    bool shuffle = true;
    // Positions at or past this are not trained (epochs * N); nullopt: endless.
    std::optional<int64_t> limit;
  };
  // Errors: InvalidArgument for a non-positive examples, batch_size or slots.
  static Result<StepOrder> Create(Options options);

  // The first position of step `step`, slot `slot`.
  int64_t Position(int64_t step, int slot) const;
  // The examples of that batch: batch_size, fewer at the limit (0 past it).
  int64_t BatchSize(int64_t step, int slot) const;
  // Steps that train `epochs` whole passes: ceil(epochs * N / (slots * batch_size)).
  int64_t StepsFor(int64_t epochs) const;
  // Epochs done before step `step`: step * slots * batch_size / N (1.5: half way through
  // the second pass).
  double EpochsAt(int64_t step) const;
  // The example (table index) at position `position` >= 0. Keeps the permutation of the
  // last epoch asked for: not thread-safe.
  int64_t Index(int64_t position);
  // The table indices of step `step`, slot `slot`, in order (BatchSize of them).
  void Indices(int64_t step, int slot, std::vector<int64_t>* out);

  const Options& options() const { return options_; }

 private:
  explicit StepOrder(Options options) : options_(options) {}
  Options options_;
  std::vector<int64_t> perm_;  // [examples] of epoch perm_epoch_
  int64_t perm_epoch_ = -1;
};

}  // namespace ps::data

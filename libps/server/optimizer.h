// Optimizers applied on the ps to pushed gradients, and learning-rate schedules.
//
// JSON form of an optimizer (ParseOptimizer; strict: unknown keys and keys of another
// optimizer type are errors naming "<path>.<key>"). Defaults are Keras's.
//
//   {
//     "type": "sgd" | "adagrad" | "rmsprop" | "adam" | "ftrl",            required
//     "learning_rate": 0.01 for sgd, 0.001 otherwise                       >= 0
//     "schedule": {...},           optional, default {"type": "constant"}; see below
//     "warmup_steps": 0,           >= 0; linear warm-up in front of the schedule
//
//     sgd:      "momentum": 0.0 (in [0, 1]), "nesterov": false
//     adagrad:  "initial_accumulator_value": 0.1 (>= 0), "epsilon": 1e-7 (>= 0)
//     rmsprop:  "rho": 0.9 (in [0, 1)), "momentum": 0.0 (in [0, 1]), "epsilon": 1e-7,
//               "centered": false
//     adam:     "beta_1": 0.9, "beta_2": 0.999 (each in [0, 1)), "epsilon": 1e-7
//     ftrl:     "learning_rate_power": -0.5 (<= 0), "initial_accumulator_value": 0.1 (>= 0),
//               "l1_regularization_strength": 0.0, "l2_regularization_strength": 0.0,
//               "l2_shrinkage_regularization_strength": 0.0, "beta": 0.0 (all >= 0)
//   }
//
// Schedules (the initial learning rate is the optimizer's "learning_rate"; `step` is the
// global step of the push, Keras LearningRateSchedule semantics):
//   {"type": "constant"}
//   {"type": "exponential", "decay_steps": N (> 0), "decay_rate": r (> 0), "staircase": false}
//       lr = learning_rate * r ^ (step / N)      (step / N floored when staircase)
//   {"type": "cosine", "decay_steps": N (> 0), "alpha": 0.0 (in [0, 1])}
//       lr = learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, N) / N)) + alpha)
//   "exponential_decay" and "cosine_decay" are accepted as spellings of the two.
// Warm-up: with "warmup_steps": W > 0, steps 0 .. W-1 use learning_rate * (step + 1) / W
// (so step 0 already learns and step W-1 reaches learning_rate), and step s >= W uses the
// schedule at s - W: the decay starts when the warm-up ends.
//
// Update rules (float32, per element, in the order of TF's CPU kernels in
// tensorflow/core/kernels/training_ops.cc; lr is the scheduled learning rate):
//   sgd, momentum == 0    var -= lr * g                              (ApplyGradientDescent)
//   sgd, momentum > 0     m = m * momentum - lr * g;                 (ApplyKerasMomentum)
//                         var += nesterov ? m * momentum - lr * g : m
//   adagrad               acc += g * g; var -= lr * g / (sqrt(acc) + epsilon)   (ApplyAdagradV2)
//   rmsprop, momentum > 0 (ApplyRMSProp / ApplyCenteredRMSProp, epsilon inside the sqrt)
//                         rms += (g * g - rms) * (1 - rho); [mg += (g - mg) * (1 - rho)]
//                         mom = mom * momentum + lr * g / sqrt(rms [- mg * mg] + epsilon)
//                         var -= mom
//   rmsprop, momentum == 0 (Keras RMSprop's own dense path, epsilon outside the sqrt)
//                         rms = rho * rms + (1 - rho) * g * g; [mg = rho * mg + (1 - rho) * g]
//                         var -= lr * g / (sqrt(rms [- mg * mg]) + epsilon)
//   adam                  (ApplyAdam, Keras Adam: epsilon is "epsilon hat")
//                         t = step + 1; alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
//                         m += (g - m) * (1 - beta_1); v += (g * g - v) * (1 - beta_2)
//                         var -= m * alpha / (sqrt(v) + epsilon)
//   ftrl                  (ApplyFtrlV2; Keras Ftrl passes l2 + beta / (2 * lr) as l2)
//                         gs = g + 2 * l2_shrinkage * var; n = acc + g * g
//                         linear += gs - (n^-p - acc^-p) / lr * var      (p = learning_rate_power)
//                         var = |linear| > l1 ? (sign(linear) * l1 - linear) / (n^-p / lr + 2 * l2) : 0
//                         acc = n
//
// Adam's step: bias correction uses the global step of the push (t = step + 1, as Keras's
// `iterations + 1`), not a per-row count. With sparse pushes only the pushed rows' slots
// change ("lazy Adam", like tfa.optimizers.LazyAdam): a row that is seldom pushed keeps
// its m and v undecayed between pushes, while the bias correction follows the global
// step. Likewise sparse RMSprop decays `rms` only for pushed rows (Keras decays all rows),
// and sparse SGD-momentum decays only the pushed rows' momentum (as TF's
// SparseApplyKerasMomentum does).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::server {

enum class OptimizerKind { kSgd, kAdagrad, kRmsprop, kAdam, kFtrl };
enum class ScheduleKind { kConstant, kExponential, kCosine };

const char* OptimizerKindName(OptimizerKind kind);
const char* ScheduleKindName(ScheduleKind kind);

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::kConstant;
  int64_t decay_steps = 0;  // exponential, cosine; > 0
  double decay_rate = 0.0;  // exponential
  bool staircase = false;   // exponential
  double alpha = 0.0;       // cosine: the final fraction of learning_rate
  bool operator==(const ScheduleSpec&) const = default;
};

// One struct for all optimizers; fields of other kinds are ignored (and keep defaults
// when parsed). Field names are the JSON keys.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kSgd;
  double learning_rate = 0.01;
  ScheduleSpec schedule;
  int64_t warmup_steps = 0;
  double momentum = 0.0;                   // sgd, rmsprop
  bool nesterov = false;                   // sgd
  double initial_accumulator_value = 0.1;  // adagrad, ftrl
  double epsilon = 1e-7;                   // adagrad, rmsprop, adam
  double rho = 0.9;                        // rmsprop
  bool centered = false;                   // rmsprop
  double beta_1 = 0.9;                     // adam
  double beta_2 = 0.999;                   // adam
  double learning_rate_power = -0.5;       // ftrl
  double l1 = 0.0;                         // ftrl: l1_regularization_strength
  double l2 = 0.0;                         // ftrl: l2_regularization_strength
  double l2_shrinkage = 0.0;               // ftrl: l2_shrinkage_regularization_strength
  double beta = 0.0;                       // ftrl
  bool operator==(const OptimizerSpec&) const = default;
};

// A spec of `kind` with Keras's defaults (learning_rate 0.01 for sgd, 0.001 otherwise).
OptimizerSpec DefaultOptimizer(OptimizerKind kind);

Result<OptimizerSpec> ParseOptimizer(const Json& json, const std::string& path);
// The range checks ParseOptimizer makes, for specs built in code.
Status ValidateOptimizer(const OptimizerSpec& spec, const std::string& path);

// The scheduled learning rate at global step `step` (negative steps count as 0).
double LearningRate(const OptimizerSpec& spec, int64_t step);

// The optimizer's slot variables, each shaped like the variable, in Keras's names:
//   sgd: "momentum" (only when momentum > 0) · adagrad: "accumulator" ·
//   rmsprop: "rms", "momentum" (momentum > 0), "mg" (centered) · adam: "m", "v" ·
//   ftrl: "accumulator", "linear".
// The order is the order of SlotRows::data.
struct SlotDef {
  std::string name;
  float initial;  // every element starts at this value
};
inline constexpr int kMaxSlots = 3;
std::vector<SlotDef> SlotDefs(const OptimizerSpec& spec);

// The slot rows matching one run of value rows: data[i] points at value_rows.size()
// floats of slot i (SlotDefs order); unused entries are null.
struct SlotRows {
  std::array<float*, kMaxSlots> data{};
};

// Applies one update to a run of contiguous elements (whole rows or a whole shard):
// value[i], the slots' [i] and grad[i] for i < value.size(). `lr` is LearningRate(spec,
// step); `step` is the global step of the push (Adam's bias correction).
// Precondition: grad.size() == value.size(); value, slots and grad do not overlap.
// FTRL with lr <= 0 leaves everything unchanged (its update divides by lr).
// Not synchronised: the caller holds the lock of these rows.
void ApplyRows(const OptimizerSpec& spec, float lr, int64_t step, std::span<float> value,
               SlotRows slots, std::span<const float> grad);

}  // namespace ps::server

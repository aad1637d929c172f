#include "libps/server/optimizer.h"
#include "libps/core/text.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace ps::server {

const char* OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kRmsprop:
      return "rmsprop";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kFtrl:
      return "ftrl";
  }
  return "?";
}

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kConstant:
      return "constant";
    case ScheduleKind::kExponential:
      return "exponential";
    case ScheduleKind::kCosine:
      return "cosine";
  }
  return "?";
}

OptimizerSpec DefaultOptimizer(OptimizerKind kind) {
  OptimizerSpec spec;
  spec.kind = kind;
  spec.learning_rate = kind == OptimizerKind::kSgd ? 0.01 : 0.001;
  return spec;
}

namespace {

Status CheckRange(const std::string& path, const char* key, double v, double lo, double hi,
                  bool hi_open) {
  if (!std::isfinite(v) || v < lo || (hi_open ? v >= hi : v > hi)) {
    std::string range = std::isinf(hi) ? ">= " + std::to_string(lo)
                                       : "in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                             (hi_open ? ")" : "]");
    return InvalidArgument(path + "." + key + ": must be " + range + ", got " + std::to_string(v));
  }
  return Status::Ok();
}

constexpr double kInf = std::numeric_limits<double>::infinity();

Result<ScheduleSpec> ParseSchedule(const Json& json, const std::string& path) {
  JsonReader r(json, path);
  PS_RETURN_IF_ERROR(r.status());
  std::string type;
  PS_RETURN_IF_ERROR(r.Get("type", &type));
  ScheduleSpec s;
  if (type == "constant") {
    s.kind = ScheduleKind::kConstant;
  } else if (type == "exponential" || type == "exponential_decay") {
    s.kind = ScheduleKind::kExponential;
    PS_RETURN_IF_ERROR(r.Get("decay_steps", &s.decay_steps));
    PS_RETURN_IF_ERROR(r.Get("decay_rate", &s.decay_rate));
    PS_RETURN_IF_ERROR(r.GetOr("staircase", &s.staircase));
  } else if (type == "cosine" || type == "cosine_decay") {
    s.kind = ScheduleKind::kCosine;
    PS_RETURN_IF_ERROR(r.Get("decay_steps", &s.decay_steps));
    PS_RETURN_IF_ERROR(r.GetOr("alpha", &s.alpha));
  } else {
    return InvalidArgument(r.Path("type") + ": unknown schedule " + QuoteInput(type, '"') +
                           " (expected constant, exponential or cosine)");
  }
  PS_RETURN_IF_ERROR(r.Finish());
  return s;
}

Status ValidateSchedule(const ScheduleSpec& s, const std::string& path) {
  if (s.kind == ScheduleKind::kConstant) return Status::Ok();
  if (s.decay_steps <= 0)
    return InvalidArgument(path + ".decay_steps: must be > 0, got " +
                           std::to_string(s.decay_steps));
  if (s.kind == ScheduleKind::kExponential && (!std::isfinite(s.decay_rate) || s.decay_rate <= 0))
    return InvalidArgument(path + ".decay_rate: must be > 0, got " + std::to_string(s.decay_rate));
  if (s.kind == ScheduleKind::kCosine)
    PS_RETURN_IF_ERROR(CheckRange(path, "alpha", s.alpha, 0, 1, false));
  return Status::Ok();
}

}  // namespace

Status ValidateOptimizer(const OptimizerSpec& s, const std::string& path) {
  PS_RETURN_IF_ERROR(CheckRange(path, "learning_rate", s.learning_rate, 0, kInf, false));
  if (s.warmup_steps < 0)
    return InvalidArgument(path + ".warmup_steps: must be >= 0, got " +
                           std::to_string(s.warmup_steps));
  PS_RETURN_IF_ERROR(ValidateSchedule(s.schedule, path + ".schedule"));
  switch (s.kind) {
    case OptimizerKind::kSgd:
      PS_RETURN_IF_ERROR(CheckRange(path, "momentum", s.momentum, 0, 1, false));
      break;
    case OptimizerKind::kAdagrad:
      PS_RETURN_IF_ERROR(CheckRange(path, "initial_accumulator_value", s.initial_accumulator_value,
                                    0, kInf, false));
      PS_RETURN_IF_ERROR(CheckRange(path, "epsilon", s.epsilon, 0, kInf, false));
      break;
    case OptimizerKind::kRmsprop:
      PS_RETURN_IF_ERROR(CheckRange(path, "rho", s.rho, 0, 1, true));
      PS_RETURN_IF_ERROR(CheckRange(path, "momentum", s.momentum, 0, 1, false));
      PS_RETURN_IF_ERROR(CheckRange(path, "epsilon", s.epsilon, 0, kInf, false));
      break;
    case OptimizerKind::kAdam:
      PS_RETURN_IF_ERROR(CheckRange(path, "beta_1", s.beta_1, 0, 1, true));
      PS_RETURN_IF_ERROR(CheckRange(path, "beta_2", s.beta_2, 0, 1, true));
      PS_RETURN_IF_ERROR(CheckRange(path, "epsilon", s.epsilon, 0, kInf, false));
      break;
    case OptimizerKind::kFtrl:
      if (!std::isfinite(s.learning_rate_power) || s.learning_rate_power > 0)
        return InvalidArgument(path + ".learning_rate_power: must be <= 0, got " +
                               std::to_string(s.learning_rate_power));
      PS_RETURN_IF_ERROR(CheckRange(path, "initial_accumulator_value", s.initial_accumulator_value,
                                    0, kInf, false));
      PS_RETURN_IF_ERROR(CheckRange(path, "l1_regularization_strength", s.l1, 0, kInf, false));
      PS_RETURN_IF_ERROR(CheckRange(path, "l2_regularization_strength", s.l2, 0, kInf, false));
      PS_RETURN_IF_ERROR(
          CheckRange(path, "l2_shrinkage_regularization_strength", s.l2_shrinkage, 0, kInf, false));
      PS_RETURN_IF_ERROR(CheckRange(path, "beta", s.beta, 0, kInf, false));
      break;
  }
  return Status::Ok();
}

Result<OptimizerSpec> ParseOptimizer(const Json& json, const std::string& path) {
  JsonReader r(json, path);
  PS_RETURN_IF_ERROR(r.status());
  std::string type;
  PS_RETURN_IF_ERROR(r.Get("type", &type));
  OptimizerKind kind;
  if (type == "sgd") {
    kind = OptimizerKind::kSgd;
  } else if (type == "adagrad") {
    kind = OptimizerKind::kAdagrad;
  } else if (type == "rmsprop") {
    kind = OptimizerKind::kRmsprop;
  } else if (type == "adam") {
    kind = OptimizerKind::kAdam;
  } else if (type == "ftrl") {
    kind = OptimizerKind::kFtrl;
  } else {
    return InvalidArgument(r.Path("type") + ": unknown optimizer " + QuoteInput(type, '"') +
                           " (expected sgd, adagrad, rmsprop, adam or ftrl)");
  }
  OptimizerSpec s = DefaultOptimizer(kind);
  PS_RETURN_IF_ERROR(r.GetOr("learning_rate", &s.learning_rate));
  PS_RETURN_IF_ERROR(r.GetOr("warmup_steps", &s.warmup_steps));
  if (const Json* sched = r.Find("schedule"); sched != nullptr && !sched->is_null()) {
    PS_ASSIGN_OR_RETURN(s.schedule, ParseSchedule(*sched, r.Path("schedule")));
  }
  switch (kind) {
    case OptimizerKind::kSgd:
      PS_RETURN_IF_ERROR(r.GetOr("momentum", &s.momentum));
      PS_RETURN_IF_ERROR(r.GetOr("nesterov", &s.nesterov));
      break;
    case OptimizerKind::kAdagrad:
      PS_RETURN_IF_ERROR(r.GetOr("initial_accumulator_value", &s.initial_accumulator_value));
      PS_RETURN_IF_ERROR(r.GetOr("epsilon", &s.epsilon));
      break;
    case OptimizerKind::kRmsprop:
      PS_RETURN_IF_ERROR(r.GetOr("rho", &s.rho));
      PS_RETURN_IF_ERROR(r.GetOr("momentum", &s.momentum));
      PS_RETURN_IF_ERROR(r.GetOr("epsilon", &s.epsilon));
      PS_RETURN_IF_ERROR(r.GetOr("centered", &s.centered));
      break;
    case OptimizerKind::kAdam:
      PS_RETURN_IF_ERROR(r.GetOr("beta_1", &s.beta_1));
      PS_RETURN_IF_ERROR(r.GetOr("beta_2", &s.beta_2));
      PS_RETURN_IF_ERROR(r.GetOr("epsilon", &s.epsilon));
      break;
    case OptimizerKind::kFtrl:
      PS_RETURN_IF_ERROR(r.GetOr("learning_rate_power", &s.learning_rate_power));
      PS_RETURN_IF_ERROR(r.GetOr("initial_accumulator_value", &s.initial_accumulator_value));
      PS_RETURN_IF_ERROR(r.GetOr("l1_regularization_strength", &s.l1));
      PS_RETURN_IF_ERROR(r.GetOr("l2_regularization_strength", &s.l2));
      PS_RETURN_IF_ERROR(r.GetOr("l2_shrinkage_regularization_strength", &s.l2_shrinkage));
      PS_RETURN_IF_ERROR(r.GetOr("beta", &s.beta));
      break;
  }
  PS_RETURN_IF_ERROR(r.Finish());
  PS_RETURN_IF_ERROR(ValidateOptimizer(s, path));
  return s;
}

double LearningRate(const OptimizerSpec& spec, int64_t step) {
  if (step < 0) step = 0;
  const double lr0 = spec.learning_rate;
  if (spec.warmup_steps > 0) {
    if (step < spec.warmup_steps)
      return lr0 * static_cast<double>(step + 1) / static_cast<double>(spec.warmup_steps);
    step -= spec.warmup_steps;
  }
  const ScheduleSpec& s = spec.schedule;
  switch (s.kind) {
    case ScheduleKind::kConstant:
      return lr0;
    case ScheduleKind::kExponential: {
      double p = static_cast<double>(step) / static_cast<double>(s.decay_steps);
      if (s.staircase) p = std::floor(p);
      return lr0 * std::pow(s.decay_rate, p);
    }
    case ScheduleKind::kCosine: {
      double done =
          static_cast<double>(std::min(step, s.decay_steps)) / static_cast<double>(s.decay_steps);
      double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * done));
      return lr0 * ((1.0 - s.alpha) * cosine + s.alpha);
    }
  }
  return lr0;
}

std::vector<SlotDef> SlotDefs(const OptimizerSpec& spec) {
  switch (spec.kind) {
    case OptimizerKind::kSgd:
      if (spec.momentum > 0) return {{"momentum", 0.0f}};
      return {};
    case OptimizerKind::kAdagrad:
      return {{"accumulator", static_cast<float>(spec.initial_accumulator_value)}};
    case OptimizerKind::kRmsprop: {
      std::vector<SlotDef> slots{{"rms", 0.0f}};
      if (spec.momentum > 0) slots.push_back({"momentum", 0.0f});
      if (spec.centered) slots.push_back({"mg", 0.0f});
      return slots;
    }
    case OptimizerKind::kAdam:
      return {{"m", 0.0f}, {"v", 0.0f}};
    case OptimizerKind::kFtrl:
      return {{"accumulator", static_cast<float>(spec.initial_accumulator_value)},
              {"linear", 0.0f}};
  }
  return {};
}

namespace {

// The kernels. Each is one plain loop over contiguous floats; comments name the TF kernel
// each follows. GCC 12 -O3 vectorises SGD and momentum as is, and Adagrad, RMSprop and
// Adam too when built with -fno-math-errno (otherwise std::sqrt keeps an errno branch).

// ApplyGradientDescent: var -= grad * lr.
void Sgd(size_t n, float lr, float* __restrict var, const float* __restrict g) {
  for (size_t i = 0; i < n; ++i) var[i] -= g[i] * lr;
}

// ApplyKerasMomentum.
void KerasMomentum(size_t n, float lr, float momentum, bool nesterov, float* __restrict var,
                   float* __restrict accum, const float* __restrict g) {
  if (nesterov) {
    for (size_t i = 0; i < n; ++i) {
      accum[i] = accum[i] * momentum - g[i] * lr;
      var[i] += accum[i] * momentum - g[i] * lr;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      accum[i] = accum[i] * momentum - g[i] * lr;
      var[i] += accum[i];
    }
  }
}

// ApplyAdagradV2 (update_slots = true).
void AdagradV2(size_t n, float lr, float epsilon, float* __restrict var, float* __restrict accum,
               const float* __restrict g) {
  for (size_t i = 0; i < n; ++i) {
    accum[i] += g[i] * g[i];
    var[i] -= g[i] * lr / (std::sqrt(accum[i]) + epsilon);
  }
}

// ApplyRMSProp / ApplyCenteredRMSProp (mg == nullptr for the uncentered form).
void RmspropMomentum(size_t n, float lr, float rho, float momentum, float epsilon,
                     float* __restrict var, float* __restrict ms, float* __restrict mom,
                     float* __restrict mg, const float* __restrict g) {
  const float one_minus_rho = 1.0f - rho;
  if (mg == nullptr) {
    for (size_t i = 0; i < n; ++i) {
      ms[i] += (g[i] * g[i] - ms[i]) * one_minus_rho;
      mom[i] = mom[i] * momentum + (g[i] * lr) / std::sqrt(ms[i] + epsilon);
      var[i] -= mom[i];
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      ms[i] += (g[i] * g[i] - ms[i]) * one_minus_rho;
      mg[i] += (g[i] - mg[i]) * one_minus_rho;
      float denom = (ms[i] - mg[i] * mg[i]) + epsilon;
      mom[i] = mom[i] * momentum + (g[i] * lr) / std::sqrt(denom);
      var[i] -= mom[i];
    }
  }
}

// Keras RMSprop without momentum (optimizer_v2/rmsprop.py _resource_apply_dense):
// rms_t = rho * rms + (1 - rho) * g^2; var -= lr * g / (sqrt(rms_t [- mg_t^2]) + epsilon).
void RmspropPlain(size_t n, float lr, float rho, float epsilon, float* __restrict var,
                  float* __restrict rms, float* __restrict mg, const float* __restrict g) {
  const float one_minus_rho = 1.0f - rho;
  if (mg == nullptr) {
    for (size_t i = 0; i < n; ++i) {
      rms[i] = rho * rms[i] + one_minus_rho * (g[i] * g[i]);
      var[i] -= lr * g[i] / (std::sqrt(rms[i]) + epsilon);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      rms[i] = rho * rms[i] + one_minus_rho * (g[i] * g[i]);
      mg[i] = rho * mg[i] + one_minus_rho * g[i];
      var[i] -= lr * g[i] / (std::sqrt(rms[i] - mg[i] * mg[i]) + epsilon);
    }
  }
}

// ApplyAdam (use_nesterov = false); alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t).
void Adam(size_t n, float alpha, float beta1, float beta2, float epsilon, float* __restrict var,
          float* __restrict m, float* __restrict v, const float* __restrict g) {
  const float one_minus_beta1 = 1.0f - beta1;
  const float one_minus_beta2 = 1.0f - beta2;
  for (size_t i = 0; i < n; ++i) {
    m[i] += (g[i] - m[i]) * one_minus_beta1;
    v[i] += (g[i] * g[i] - v[i]) * one_minus_beta2;
    var[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + epsilon);
  }
}

inline float Sign(float x) { return x == 0.0f ? 0.0f : (x < 0.0f ? -1.0f : 1.0f); }

// ApplyFtrlV2 (equal to ApplyFtrl when l2_shrinkage == 0); `l2` already includes Keras's
// beta / (2 * lr). The lr_power == -0.5 case uses sqrt as the kernel does.
void FtrlV2(size_t n, float lr, float l1, float l2, float l2_shrinkage, float lr_power,
            float* __restrict var, float* __restrict accum, float* __restrict linear,
            const float* __restrict g) {
  const float two_l2 = 2.0f * l2;
  const float two_shrink = 2.0f * l2_shrinkage;
  if (lr_power == -0.5f) {
    for (size_t i = 0; i < n; ++i) {
      float gs = g[i] + two_shrink * var[i];
      float new_accum = accum[i] + g[i] * g[i];
      float new_sqrt = std::sqrt(new_accum);
      linear[i] += gs - (new_sqrt - std::sqrt(accum[i])) / lr * var[i];
      float x = l1 * Sign(linear[i]) - linear[i];
      float y = new_sqrt / lr + two_l2;
      var[i] = std::fabs(linear[i]) > l1 ? x / y : 0.0f;
      accum[i] = new_accum;
    }
  } else {
    const float neg_p = -lr_power;
    for (size_t i = 0; i < n; ++i) {
      float gs = g[i] + two_shrink * var[i];
      float new_accum = accum[i] + g[i] * g[i];
      float new_pow = std::pow(new_accum, neg_p);
      linear[i] += gs - (new_pow - std::pow(accum[i], neg_p)) / lr * var[i];
      float x = l1 * Sign(linear[i]) - linear[i];
      float y = new_pow / lr + two_l2;
      var[i] = std::fabs(linear[i]) > l1 ? x / y : 0.0f;
      accum[i] = new_accum;
    }
  }
}

}  // namespace

// On x86-64 GCC also builds an AVX2 copy of ApplyRows with every kernel inlined into it
// (flatten): eight floats a step instead of SSE's four. The loader picks it on CPUs that
// have AVX2: whole-shard Adam ran 1.6-1.8x faster, lazy Adagrad row pushes ~8 % (the sparse
// bench). The copies agree bit for bit: every kernel is element-wise IEEE arithmetic, the
// AVX2 copy has no FMA, and the project builds with -ffp-contract=off (optimizer_test
// checks against scalar formulas). Not under the sanitizers: GCC instruments the copies'
// resolver, which the loader runs before the sanitizer's runtime is set up (TSan crashed).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define PS_OPTIMIZER_CLONES __attribute__((target_clones("avx2", "default"), flatten))
#else
#define PS_OPTIMIZER_CLONES
#endif

PS_OPTIMIZER_CLONES
void ApplyRows(const OptimizerSpec& spec, float lr, int64_t step, std::span<float> value,
               SlotRows slots, std::span<const float> grad) {
  PS_ASSERT(grad.size() == value.size());
  const size_t n = value.size();
  float* var = value.data();
  const float* g = grad.data();
  auto& s = slots.data;
  switch (spec.kind) {
    case OptimizerKind::kSgd:
      if (spec.momentum > 0) {
        KerasMomentum(n, lr, static_cast<float>(spec.momentum), spec.nesterov, var, s[0], g);
      } else {
        Sgd(n, lr, var, g);
      }
      return;
    case OptimizerKind::kAdagrad:
      AdagradV2(n, lr, static_cast<float>(spec.epsilon), var, s[0], g);
      return;
    case OptimizerKind::kRmsprop: {
      const float rho = static_cast<float>(spec.rho);
      const float eps = static_cast<float>(spec.epsilon);
      if (spec.momentum > 0) {
        float* mg = spec.centered ? s[2] : nullptr;
        RmspropMomentum(n, lr, rho, static_cast<float>(spec.momentum), eps, var, s[0], s[1], mg, g);
      } else {
        float* mg = spec.centered ? s[1] : nullptr;
        RmspropPlain(n, lr, rho, eps, var, s[0], mg, g);
      }
      return;
    }
    case OptimizerKind::kAdam: {
      // Keras computes beta^t in float32: beta_1_power = pow(beta_1_t, local_step).
      const float t = static_cast<float>(std::max<int64_t>(step, 0) + 1);
      const float b1 = static_cast<float>(spec.beta_1);
      const float b2 = static_cast<float>(spec.beta_2);
      const float b1_power = std::pow(b1, t);
      const float b2_power = std::pow(b2, t);
      const float alpha = lr * std::sqrt(1.0f - b2_power) / (1.0f - b1_power);
      Adam(n, alpha, b1, b2, static_cast<float>(spec.epsilon), var, s[0], s[1], g);
      return;
    }
    case OptimizerKind::kFtrl: {
      if (!(lr > 0.0f)) return;
      const float l2 = static_cast<float>(spec.l2 + spec.beta / (2.0 * lr));
      FtrlV2(n, lr, static_cast<float>(spec.l1), l2, static_cast<float>(spec.l2_shrinkage),
             static_cast<float>(spec.learning_rate_power), var, s[0], s[1], g);
      return;
    }
  }
}

}  // namespace ps::server

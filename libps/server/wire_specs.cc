#include "libps/server/wire_specs.h"

#include <variant>

namespace ps::server {

namespace {

using model::InitKind;

proto::InitKind InitKindToWire(InitKind kind) {
  switch (kind) {
    case InitKind::kZeros:
      return proto::InitKind::kZeros;
    case InitKind::kOnes:
      return proto::InitKind::kOnes;
    case InitKind::kConstant:
      return proto::InitKind::kConstant;
    case InitKind::kUniform:
      return proto::InitKind::kUniform;
    case InitKind::kNormal:
      return proto::InitKind::kNormal;
    case InitKind::kTruncatedNormal:
      return proto::InitKind::kTruncatedNormal;
    case InitKind::kGlorotUniform:
      return proto::InitKind::kGlorotUniform;
  }
  PS_ASSERT(false && "unknown InitKind");
  return proto::InitKind::kZeros;
}

Result<InitKind> InitKindFromWire(proto::InitKind kind, const std::string& path) {
  switch (kind) {
    case proto::InitKind::kZeros:
      return InitKind::kZeros;
    case proto::InitKind::kOnes:
      return InitKind::kOnes;
    case proto::InitKind::kConstant:
      return InitKind::kConstant;
    case proto::InitKind::kUniform:
      return InitKind::kUniform;
    case proto::InitKind::kNormal:
      return InitKind::kNormal;
    case proto::InitKind::kTruncatedNormal:
      return InitKind::kTruncatedNormal;
    case proto::InitKind::kGlorotUniform:
      return InitKind::kGlorotUniform;
  }
  return InvalidArgument(path + ".kind: unknown initializer " +
                         std::to_string(static_cast<int>(kind)));
}

// The wire fields that hold InitSpec's a and b for a kind (null: the kind has none).
struct InitParams {
  double proto::Initializer::*a = nullptr;
  double proto::Initializer::*b = nullptr;
};
InitParams ParamsOf(InitKind kind) {
  switch (kind) {
    case InitKind::kConstant:
      return {.a = &proto::Initializer::value, .b = nullptr};
    case InitKind::kUniform:
      return {.a = &proto::Initializer::minval, .b = &proto::Initializer::maxval};
    case InitKind::kNormal:
    case InitKind::kTruncatedNormal:
      return {.a = &proto::Initializer::mean, .b = &proto::Initializer::stddev};
    case InitKind::kZeros:
    case InitKind::kOnes:
    case InitKind::kGlorotUniform:
      break;
  }
  return {};
}

proto::Schedule ScheduleToWire(const ScheduleSpec& s) {
  switch (s.kind) {
    case ScheduleKind::kConstant:
      return proto::ConstantSchedule{};
    case ScheduleKind::kExponential:
      return proto::ExponentialSchedule{
          .decay_steps = s.decay_steps, .decay_rate = s.decay_rate, .staircase = s.staircase};
    case ScheduleKind::kCosine:
      return proto::CosineSchedule{.decay_steps = s.decay_steps, .alpha = s.alpha};
  }
  PS_ASSERT(false && "unknown ScheduleKind");
  return proto::ConstantSchedule{};
}

ScheduleSpec ScheduleFromWire(const proto::Schedule& wire) {
  ScheduleSpec s;
  if (const auto* e = std::get_if<proto::ExponentialSchedule>(&wire)) {
    s.kind = ScheduleKind::kExponential;
    s.decay_steps = e->decay_steps;
    s.decay_rate = e->decay_rate;
    s.staircase = e->staircase;
  } else if (const auto* c = std::get_if<proto::CosineSchedule>(&wire)) {
    s.kind = ScheduleKind::kCosine;
    s.decay_steps = c->decay_steps;
    s.alpha = c->alpha;
  }
  return s;
}

proto::OptimizerRule RuleToWire(const OptimizerSpec& s) {
  switch (s.kind) {
    case OptimizerKind::kSgd:
      return proto::Sgd{.momentum = s.momentum, .nesterov = s.nesterov};
    case OptimizerKind::kAdagrad:
      return proto::Adagrad{.initial_accumulator_value = s.initial_accumulator_value,
                            .epsilon = s.epsilon};
    case OptimizerKind::kRmsprop:
      return proto::Rmsprop{
          .rho = s.rho, .momentum = s.momentum, .epsilon = s.epsilon, .centered = s.centered};
    case OptimizerKind::kAdam:
      return proto::Adam{.beta_1 = s.beta_1, .beta_2 = s.beta_2, .epsilon = s.epsilon};
    case OptimizerKind::kFtrl:
      return proto::Ftrl{.learning_rate_power = s.learning_rate_power,
                         .initial_accumulator_value = s.initial_accumulator_value,
                         .l1 = s.l1,
                         .l2 = s.l2,
                         .l2_shrinkage = s.l2_shrinkage,
                         .beta = s.beta};
  }
  PS_ASSERT(false && "unknown OptimizerKind");
  return proto::Sgd{};
}

// An optimizer of the rule's type with the rule's parameters; learning rate, schedule and
// warm-up are left to the caller, other types' fields keep OptimizerSpec's defaults.
OptimizerSpec SpecOf(const proto::Sgd& r) {
  return {
      .kind = OptimizerKind::kSgd, .schedule = {}, .momentum = r.momentum, .nesterov = r.nesterov};
}
OptimizerSpec SpecOf(const proto::Adagrad& r) {
  return {.kind = OptimizerKind::kAdagrad,
          .schedule = {},
          .initial_accumulator_value = r.initial_accumulator_value,
          .epsilon = r.epsilon};
}
OptimizerSpec SpecOf(const proto::Rmsprop& r) {
  return {.kind = OptimizerKind::kRmsprop,
          .schedule = {},
          .momentum = r.momentum,
          .epsilon = r.epsilon,
          .rho = r.rho,
          .centered = r.centered};
}
OptimizerSpec SpecOf(const proto::Adam& r) {
  return {.kind = OptimizerKind::kAdam,
          .schedule = {},
          .epsilon = r.epsilon,
          .beta_1 = r.beta_1,
          .beta_2 = r.beta_2};
}
OptimizerSpec SpecOf(const proto::Ftrl& r) {
  return {.kind = OptimizerKind::kFtrl,
          .schedule = {},
          .initial_accumulator_value = r.initial_accumulator_value,
          .learning_rate_power = r.learning_rate_power,
          .l1 = r.l1,
          .l2 = r.l2,
          .l2_shrinkage = r.l2_shrinkage,
          .beta = r.beta};
}

}  // namespace

proto::Initializer InitToWire(const model::InitSpec& spec) {
  proto::Initializer wire{.kind = InitKindToWire(spec.kind)};
  const InitParams p = ParamsOf(spec.kind);
  if (p.a != nullptr) wire.*p.a = spec.a;
  if (p.b != nullptr) wire.*p.b = spec.b;
  return wire;
}

Result<model::InitSpec> InitFromWire(const proto::Initializer& wire, const std::string& path) {
  model::InitSpec spec;
  PS_ASSIGN_OR_RETURN(spec.kind, InitKindFromWire(wire.kind, path));
  const InitParams p = ParamsOf(spec.kind);
  if (p.a != nullptr) spec.a = wire.*p.a;
  if (p.b != nullptr) spec.b = wire.*p.b;
  PS_RETURN_IF_ERROR(model::ValidateInit(spec, path));
  return spec;
}

proto::Optimizer OptimizerToWire(const OptimizerSpec& spec) {
  return proto::Optimizer{.rule = RuleToWire(spec),
                          .learning_rate = spec.learning_rate,
                          .schedule = ScheduleToWire(spec.schedule),
                          .warmup_steps = spec.warmup_steps};
}

Result<OptimizerSpec> OptimizerFromWire(const proto::Optimizer& wire, const std::string& path) {
  OptimizerSpec spec = std::visit([](const auto& rule) { return SpecOf(rule); }, wire.rule);
  spec.learning_rate = wire.learning_rate;
  spec.schedule = ScheduleFromWire(wire.schedule);
  spec.warmup_steps = wire.warmup_steps;
  PS_RETURN_IF_ERROR(ValidateOptimizer(spec, path));
  return spec;
}

namespace {

proto::UpdateMode ModeToWire(UpdateMode m) {
  switch (m) {
    case UpdateMode::kAsync:
      return proto::UpdateMode::kAsync;
    case UpdateMode::kSync:
      return proto::UpdateMode::kSync;
    case UpdateMode::kBoundedStaleness:
      return proto::UpdateMode::kBoundedStaleness;
  }
  return proto::UpdateMode::kAsync;
}

Result<UpdateMode> ModeFromWire(proto::UpdateMode m, const std::string& path) {
  switch (m) {
    case proto::UpdateMode::kAsync:
      return UpdateMode::kAsync;
    case proto::UpdateMode::kSync:
      return UpdateMode::kSync;
    case proto::UpdateMode::kBoundedStaleness:
      return UpdateMode::kBoundedStaleness;
  }
  return InvalidArgument(path + ": unknown update mode " + std::to_string(static_cast<int>(m)));
}

}  // namespace

proto::Update UpdateToWire(const UpdateSpec& spec) {
  return proto::Update{.mode = ModeToWire(spec.mode),
                       .replicas_to_aggregate = spec.replicas_to_aggregate,
                       .staleness = spec.staleness,
                       .num_workers = spec.num_workers,
                       .sparse_mode = spec.sparse_mode
                                          ? std::optional(ModeToWire(*spec.sparse_mode))
                                          : std::nullopt};
}

Result<UpdateSpec> UpdateFromWire(const proto::Update& wire, const std::string& path) {
  UpdateSpec spec{.replicas_to_aggregate = wire.replicas_to_aggregate,
                  .staleness = wire.staleness,
                  .num_workers = wire.num_workers};
  PS_ASSIGN_OR_RETURN(spec.mode, ModeFromWire(wire.mode, path + ".mode"));
  if (wire.sparse_mode) {
    PS_ASSIGN_OR_RETURN(UpdateMode sparse, ModeFromWire(*wire.sparse_mode, path + ".sparse_mode"));
    spec.sparse_mode = sparse;
  }
  PS_RETURN_IF_ERROR(ValidateUpdate(spec, path));
  return spec;
}

proto::ShardDef ShardDefToWire(const ShardDef& def) {
  const model::RowPolicy& p = def.row_policy;
  return proto::ShardDef{.layout = def.layout,
                         .init = InitToWire(def.init),
                         .seed = def.seed,
                         .row_policy = {.admit_min_count = p.admit_min_count,
                                        .ttl_steps = p.ttl_steps,
                                        .max_rows = p.max_rows},
                         .sparse = def.sparse};
}

Result<ShardDef> ShardDefFromWire(const proto::ShardDef& wire) {
  const proto::RowPolicy& p = wire.row_policy;
  ShardDef def{.layout = wire.layout,
               .init = {},
               .seed = wire.seed,
               .row_policy = {.admit_min_count = p.admit_min_count,
                              .ttl_steps = p.ttl_steps,
                              .max_rows = p.max_rows},
               .sparse = wire.sparse};
  PS_ASSIGN_OR_RETURN(def.init, InitFromWire(wire.init, def.layout.Name() + ".init"));
  PS_RETURN_IF_ERROR(ValidateShardDef(def));
  return def;
}

}  // namespace ps::server

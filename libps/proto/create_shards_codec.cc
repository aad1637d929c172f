#include "libps/proto/create_shards_codec.h"

#include <string>
#include <type_traits>

namespace ps::proto {

namespace w = ::ps::wire;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

// The C++ enums carry the schema's values, so they convert by cast.
static_assert(static_cast<int>(InitKind::kZeros) == static_cast<int>(w::InitKind::Zeros) &&
              static_cast<int>(InitKind::kOnes) == static_cast<int>(w::InitKind::Ones) &&
              static_cast<int>(InitKind::kConstant) == static_cast<int>(w::InitKind::Constant) &&
              static_cast<int>(InitKind::kUniform) == static_cast<int>(w::InitKind::Uniform) &&
              static_cast<int>(InitKind::kNormal) == static_cast<int>(w::InitKind::Normal) &&
              static_cast<int>(InitKind::kTruncatedNormal) ==
                  static_cast<int>(w::InitKind::TruncatedNormal) &&
              static_cast<int>(InitKind::kGlorotUniform) ==
                  static_cast<int>(w::InitKind::GlorotUniform) &&
              w::InitKind::MAX == w::InitKind::GlorotUniform);
static_assert(static_cast<int>(UpdateMode::kAsync) == static_cast<int>(w::UpdateMode::Async) &&
              static_cast<int>(UpdateMode::kSync) == static_cast<int>(w::UpdateMode::Sync) &&
              static_cast<int>(UpdateMode::kBoundedStaleness) ==
                  static_cast<int>(w::UpdateMode::BoundedStaleness) &&
              w::UpdateMode::MAX == w::UpdateMode::BoundedStaleness);
// The variants' alternatives are declared in the unions' order.
static_assert(std::variant_size_v<Schedule> == static_cast<size_t>(w::Schedule::MAX));
static_assert(std::variant_size_v<OptimizerRule> == static_cast<size_t>(w::OptimizerRule::MAX));

Offset<w::ShardLayout> EncodeLayout(FlatBufferBuilder& fbb, const cluster::ShardLayout& l) {
  auto var = fbb.CreateString(l.var);
  auto full_shape = fbb.CreateVector(l.full_shape);
  w::ShardLayoutBuilder b(fbb);
  b.add_var(var);
  b.add_shard(l.shard);
  b.add_num_shards(l.num_shards);
  b.add_row_begin(l.row_begin);
  b.add_rows(l.rows);
  b.add_cols(l.cols);
  b.add_full_shape(full_shape);
  b.add_lazy(l.lazy);
  return b.Finish();
}

Offset<w::Initializer> EncodeInit(FlatBufferBuilder& fbb, const Initializer& i) {
  w::InitializerBuilder b(fbb);
  b.add_kind(static_cast<w::InitKind>(i.kind));
  b.add_value(i.value);
  b.add_minval(i.minval);
  b.add_maxval(i.maxval);
  b.add_mean(i.mean);
  b.add_stddev(i.stddev);
  return b.Finish();
}

Offset<void> EncodeSchedule(FlatBufferBuilder& fbb, const Schedule& schedule) {
  return std::visit(
      [&fbb](const auto& s) -> Offset<void> {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, ConstantSchedule>) {
          return w::CreateConstantSchedule(fbb).Union();
        } else if constexpr (std::is_same_v<S, ExponentialSchedule>) {
          w::ExponentialScheduleBuilder b(fbb);
          b.add_decay_steps(s.decay_steps);
          b.add_decay_rate(s.decay_rate);
          b.add_staircase(s.staircase);
          return b.Finish().Union();
        } else {
          static_assert(std::is_same_v<S, CosineSchedule>);
          w::CosineScheduleBuilder b(fbb);
          b.add_decay_steps(s.decay_steps);
          b.add_alpha(s.alpha);
          return b.Finish().Union();
        }
      },
      schedule);
}

Offset<void> EncodeRule(FlatBufferBuilder& fbb, const OptimizerRule& rule) {
  return std::visit(
      [&fbb](const auto& r) -> Offset<void> {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, Sgd>) {
          w::SgdBuilder b(fbb);
          b.add_momentum(r.momentum);
          b.add_nesterov(r.nesterov);
          return b.Finish().Union();
        } else if constexpr (std::is_same_v<R, Adagrad>) {
          w::AdagradBuilder b(fbb);
          b.add_initial_accumulator_value(r.initial_accumulator_value);
          b.add_epsilon(r.epsilon);
          return b.Finish().Union();
        } else if constexpr (std::is_same_v<R, Rmsprop>) {
          w::RmspropBuilder b(fbb);
          b.add_rho(r.rho);
          b.add_momentum(r.momentum);
          b.add_epsilon(r.epsilon);
          b.add_centered(r.centered);
          return b.Finish().Union();
        } else if constexpr (std::is_same_v<R, Adam>) {
          w::AdamBuilder b(fbb);
          b.add_beta_1(r.beta_1);
          b.add_beta_2(r.beta_2);
          b.add_epsilon(r.epsilon);
          return b.Finish().Union();
        } else {
          static_assert(std::is_same_v<R, Ftrl>);
          w::FtrlBuilder b(fbb);
          b.add_learning_rate_power(r.learning_rate_power);
          b.add_initial_accumulator_value(r.initial_accumulator_value);
          b.add_l1(r.l1);
          b.add_l2(r.l2);
          b.add_l2_shrinkage(r.l2_shrinkage);
          b.add_beta(r.beta);
          return b.Finish().Union();
        }
      },
      rule);
}

Offset<w::Optimizer> EncodeOptimizer(FlatBufferBuilder& fbb, const Optimizer& o) {
  auto rule = EncodeRule(fbb, o.rule);
  auto schedule = EncodeSchedule(fbb, o.schedule);
  w::OptimizerBuilder b(fbb);
  b.add_rule_type(static_cast<w::OptimizerRule>(o.rule.index() + 1));
  b.add_rule(rule);
  b.add_learning_rate(o.learning_rate);
  b.add_schedule_type(static_cast<w::Schedule>(o.schedule.index() + 1));
  b.add_schedule(schedule);
  b.add_warmup_steps(o.warmup_steps);
  return b.Finish();
}

Offset<w::Update> EncodeUpdate(FlatBufferBuilder& fbb, const Update& u) {
  w::UpdateBuilder b(fbb);
  b.add_mode(static_cast<w::UpdateMode>(u.mode));
  b.add_replicas_to_aggregate(u.replicas_to_aggregate);
  b.add_staleness(u.staleness);
  b.add_num_workers(u.num_workers);
  if (u.sparse_mode) b.add_sparse_mode(static_cast<w::UpdateMode>(*u.sparse_mode));
  return b.Finish();
}

template <typename E>
std::string EnumValue(E e) {
  return std::to_string(static_cast<int>(e));
}

Result<cluster::ShardLayout> DecodeLayout(const w::ShardLayout* l, const std::string& where) {
  if (l == nullptr) return ProtocolError(where + ".layout: missing");
  cluster::ShardLayout out{
      .var = Str(l->var()),
      .shard = l->shard(),
      .num_shards = l->num_shards(),
      .row_begin = l->row_begin(),
      .rows = l->rows(),
      .cols = l->cols(),
      .full_shape =
          l->full_shape() == nullptr ? std::vector<int64_t>() : CopyVector(l->full_shape()),
      .lazy = l->lazy(),
  };
  if (Status valid = cluster::ValidateShardLayout(out); !valid.ok()) {
    return ProtocolError(where + ": " + valid.message());
  }
  return out;
}

Result<Initializer> DecodeInit(const w::Initializer* i, const std::string& where) {
  if (i == nullptr) return ProtocolError(where + ".init: missing");
  if (i->kind() < w::InitKind::MIN || i->kind() > w::InitKind::MAX) {
    return ProtocolError(where + ".init.kind: unknown initializer " + EnumValue(i->kind()));
  }
  return Initializer{.kind = static_cast<InitKind>(i->kind()),
                     .value = i->value(),
                     .minval = i->minval(),
                     .maxval = i->maxval(),
                     .mean = i->mean(),
                     .stddev = i->stddev()};
}

Result<Schedule> DecodeSchedule(const w::Optimizer& o) {
  // A union type with no table (the verifier lets that pass, as for the envelope's body).
  if (o.schedule_type() != w::Schedule::NONE && o.schedule() == nullptr) {
    return ProtocolError(std::string("CreateShards.optimizer.schedule: a ") +
                         w::EnumNameSchedule(o.schedule_type()) + " without its table");
  }
  switch (o.schedule_type()) {
    case w::Schedule::ConstantSchedule:
      return Schedule(ConstantSchedule{});
    case w::Schedule::ExponentialSchedule: {
      const auto* s = o.schedule_as_ExponentialSchedule();
      return Schedule(ExponentialSchedule{.decay_steps = s->decay_steps(),
                                          .decay_rate = s->decay_rate(),
                                          .staircase = s->staircase()});
    }
    case w::Schedule::CosineSchedule: {
      const auto* s = o.schedule_as_CosineSchedule();
      return Schedule(CosineSchedule{.decay_steps = s->decay_steps(), .alpha = s->alpha()});
    }
    case w::Schedule::NONE:
      break;
  }
  return ProtocolError("CreateShards.optimizer.schedule: missing or unknown schedule type " +
                       EnumValue(o.schedule_type()));
}

Result<OptimizerRule> DecodeRule(const w::Optimizer& o) {
  if (o.rule_type() != w::OptimizerRule::NONE && o.rule() == nullptr) {
    return ProtocolError(std::string("CreateShards.optimizer.rule: a ") +
                         w::EnumNameOptimizerRule(o.rule_type()) + " without its table");
  }
  switch (o.rule_type()) {
    case w::OptimizerRule::Sgd: {
      const auto* r = o.rule_as_Sgd();
      return OptimizerRule(Sgd{.momentum = r->momentum(), .nesterov = r->nesterov()});
    }
    case w::OptimizerRule::Adagrad: {
      const auto* r = o.rule_as_Adagrad();
      return OptimizerRule(Adagrad{.initial_accumulator_value = r->initial_accumulator_value(),
                                   .epsilon = r->epsilon()});
    }
    case w::OptimizerRule::Rmsprop: {
      const auto* r = o.rule_as_Rmsprop();
      return OptimizerRule(Rmsprop{.rho = r->rho(),
                                   .momentum = r->momentum(),
                                   .epsilon = r->epsilon(),
                                   .centered = r->centered()});
    }
    case w::OptimizerRule::Adam: {
      const auto* r = o.rule_as_Adam();
      return OptimizerRule(
          Adam{.beta_1 = r->beta_1(), .beta_2 = r->beta_2(), .epsilon = r->epsilon()});
    }
    case w::OptimizerRule::Ftrl: {
      const auto* r = o.rule_as_Ftrl();
      return OptimizerRule(Ftrl{.learning_rate_power = r->learning_rate_power(),
                                .initial_accumulator_value = r->initial_accumulator_value(),
                                .l1 = r->l1(),
                                .l2 = r->l2(),
                                .l2_shrinkage = r->l2_shrinkage(),
                                .beta = r->beta()});
    }
    case w::OptimizerRule::NONE:
      break;
  }
  return ProtocolError("CreateShards.optimizer.rule: missing or unknown optimizer type " +
                       EnumValue(o.rule_type()));
}

Result<Optimizer> DecodeOptimizer(const w::Optimizer* o) {
  if (o == nullptr) return ProtocolError("CreateShards.optimizer: missing");
  PS_ASSIGN_OR_RETURN(OptimizerRule rule, DecodeRule(*o));
  PS_ASSIGN_OR_RETURN(Schedule schedule, DecodeSchedule(*o));
  return Optimizer{.rule = rule,
                   .learning_rate = o->learning_rate(),
                   .schedule = schedule,
                   .warmup_steps = o->warmup_steps()};
}

Result<Update> DecodeUpdate(const w::Update* u) {
  if (u == nullptr) return ProtocolError("CreateShards.update: missing");
  if (u->mode() < w::UpdateMode::MIN || u->mode() > w::UpdateMode::MAX) {
    return ProtocolError("CreateShards.update.mode: unknown update mode " + EnumValue(u->mode()));
  }
  std::optional<UpdateMode> sparse_mode;
  if (const auto m = u->sparse_mode(); m.has_value()) {
    if (*m < w::UpdateMode::MIN || *m > w::UpdateMode::MAX) {
      return ProtocolError("CreateShards.update.sparse_mode: unknown update mode " + EnumValue(*m));
    }
    sparse_mode = static_cast<UpdateMode>(*m);
  }
  return Update{.mode = static_cast<UpdateMode>(u->mode()),
                .replicas_to_aggregate = u->replicas_to_aggregate(),
                .staleness = u->staleness(),
                .num_workers = u->num_workers(),
                .sparse_mode = sparse_mode};
}

}  // namespace

Offset<w::CreateShards> EncodeCreateShards(FlatBufferBuilder& fbb, const CreateShards& msg) {
  std::vector<Offset<w::ShardDef>> defs;
  defs.reserve(msg.shards.size());
  for (const ShardDef& d : msg.shards) {
    auto layout = EncodeLayout(fbb, d.layout);
    auto init = EncodeInit(fbb, d.init);
    auto policy = d.row_policy == RowPolicy{}
                      ? Offset<w::RowPolicy>()
                      : w::CreateRowPolicy(fbb, d.row_policy.admit_min_count,
                                           d.row_policy.ttl_steps, d.row_policy.max_rows);
    defs.push_back(w::CreateShardDef(fbb, layout, init, d.seed, policy, d.sparse));
  }
  auto optimizer = EncodeOptimizer(fbb, msg.optimizer);
  auto shards = fbb.CreateVector(defs);
  auto update = EncodeUpdate(fbb, msg.update);
  w::CreateShardsBuilder b(fbb);
  b.add_optimizer(optimizer);
  b.add_shards(shards);
  b.add_update(update);
  return b.Finish();
}

Result<CreateShards> DecodeCreateShards(const w::CreateShards& msg) {
  CreateShards out;
  PS_ASSIGN_OR_RETURN(out.optimizer, DecodeOptimizer(msg.optimizer()));
  PS_ASSIGN_OR_RETURN(out.update, DecodeUpdate(msg.update()));
  if (msg.shards() == nullptr) return out;
  out.shards.reserve(msg.shards()->size());
  for (flatbuffers::uoffset_t i = 0; i < msg.shards()->size(); ++i) {
    const w::ShardDef* d = msg.shards()->Get(i);
    const std::string where = "CreateShards.shards[" + std::to_string(i) + "]";
    PS_ASSIGN_OR_RETURN(cluster::ShardLayout layout, DecodeLayout(d->layout(), where));
    PS_ASSIGN_OR_RETURN(Initializer init, DecodeInit(d->init(), where));
    RowPolicy policy;
    if (const w::RowPolicy* p = d->row_policy()) {
      policy = RowPolicy{.admit_min_count = p->admit_min_count(),
                         .ttl_steps = p->ttl_steps(),
                         .max_rows = p->max_rows()};
    }
    out.shards.push_back(ShardDef{.layout = std::move(layout),
                                  .init = init,
                                  .seed = d->seed(),
                                  .row_policy = policy,
                                  .sparse = d->sparse()});
  }
  return out;
}

}  // namespace ps::proto

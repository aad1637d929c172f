// The conversions between CreateShards' wire forms and the ps's specs: every initializer,
// optimizer, schedule and update mode survives ToWire -> Encode -> Decode -> FromWire
// unchanged, and FromWire applies the specs' own validators.
#include <catch2/catch.hpp>

#include "libps/proto/codec.h"
#include "libps/server/wire_specs.h"

using namespace ps;
using namespace ps::server;
using model::InitKind;
using model::InitSpec;

namespace {

// Through the real codec, as the chief sends it and the ps receives it.
proto::CreateShards ThroughCodec(const proto::CreateShards& cs) {
  auto env = proto::Decode(proto::Encode({1, false, 0, cs}));
  REQUIRE(env.ok());
  return std::get<proto::CreateShards>(env->body);
}

}  // namespace

TEST_CASE("wire specs: every initializer round-trips") {
  const std::vector<InitSpec> inits = {
      {InitKind::kZeros, 0, 0},         {InitKind::kOnes, 0, 0},
      {InitKind::kConstant, 0.25, 0},   {InitKind::kUniform, -0.05, 0.05},
      {InitKind::kNormal, 0.5, 0.125},  {InitKind::kTruncatedNormal, -1, 2},
      {InitKind::kGlorotUniform, 0, 0},
  };
  for (const InitSpec& init : inits) {
    INFO(model::InitKindName(init.kind));
    proto::CreateShards cs;
    cs.shards.push_back(ShardDefToWire({.layout = {.var = "w",
                                                   .shard = 0,
                                                   .num_shards = 1,
                                                   .row_begin = 0,
                                                   .rows = 2,
                                                   .cols = 3,
                                                   .full_shape = {2, 3},
                                                   .lazy = false},
                                        .init = init,
                                        .seed = 11,
                                        .sparse = init.kind == InitKind::kUniform}));
    auto back = ShardDefFromWire(ThroughCodec(cs).shards.at(0));
    REQUIRE(back.ok());
    CHECK(back->init == init);
    CHECK(back->seed == 11);
    CHECK(back->sparse == (init.kind == InitKind::kUniform));  // the variable's class
    CHECK(back->layout.full_shape == std::vector<int64_t>{2, 3});
  }
  // The named wire fields carry the kind's parameters.
  CHECK(InitToWire({InitKind::kUniform, -1, 1}).minval == -1);
  CHECK(InitToWire({InitKind::kUniform, -1, 1}).maxval == 1);
  CHECK(InitToWire({InitKind::kTruncatedNormal, 3, 4}).stddev == 4);
  CHECK(InitToWire({InitKind::kConstant, 7, 0}).value == 7);
}

TEST_CASE("wire specs: every optimizer, schedule and warm-up round-trips") {
  for (auto kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRmsprop,
                    OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    INFO(OptimizerKindName(kind));
    OptimizerSpec spec = DefaultOptimizer(kind);
    CHECK(*OptimizerFromWire(
              ThroughCodec({.optimizer = OptimizerToWire(spec), .shards = {}, .update = {}})
                  .optimizer,
              "optimizer") == spec);
    // Every parameter of the kind away from its default.
    spec.learning_rate = 0.3;
    spec.warmup_steps = 7;
    switch (kind) {
      case OptimizerKind::kSgd:
        spec.momentum = 0.5;
        spec.nesterov = true;
        spec.schedule = {.kind = ScheduleKind::kExponential,
                         .decay_steps = 100,
                         .decay_rate = 0.5,
                         .staircase = true,
                         .alpha = 0};
        break;
      case OptimizerKind::kAdagrad:
        spec.initial_accumulator_value = 0.2;
        spec.epsilon = 1e-5;
        spec.schedule = {.kind = ScheduleKind::kCosine,
                         .decay_steps = 50,
                         .decay_rate = 0,
                         .staircase = false,
                         .alpha = 0.25};
        break;
      case OptimizerKind::kRmsprop:
        spec.rho = 0.8;
        spec.momentum = 0.1;
        spec.epsilon = 1e-6;
        spec.centered = true;
        break;
      case OptimizerKind::kAdam:
        spec.beta_1 = 0.8;
        spec.beta_2 = 0.99;
        spec.epsilon = 1e-8;
        break;
      case OptimizerKind::kFtrl:
        spec.learning_rate_power = -0.25;
        spec.initial_accumulator_value = 0.3;
        spec.l1 = 0.01;
        spec.l2 = 0.02;
        spec.l2_shrinkage = 0.03;
        spec.beta = 0.04;
        break;
    }
    auto back = OptimizerFromWire(
        ThroughCodec({.optimizer = OptimizerToWire(spec), .shards = {}, .update = {}}).optimizer,
        "optimizer");
    REQUIRE(back.ok());
    CHECK(*back == spec);
  }
}

TEST_CASE("wire specs: every update mode round-trips, num_workers included") {
  const std::vector<UpdateSpec> updates = {
      {.mode = UpdateMode::kAsync, .replicas_to_aggregate = 0, .staleness = 4, .num_workers = 3},
      {.mode = UpdateMode::kSync, .replicas_to_aggregate = 2, .staleness = 4, .num_workers = 3},
      {.mode = UpdateMode::kBoundedStaleness,
       .replicas_to_aggregate = 0,
       .staleness = 0,
       .num_workers = 5},
      {.mode = UpdateMode::kSync,
       .replicas_to_aggregate = 0,
       .staleness = 4,
       .num_workers = 2,
       .sparse_mode = UpdateMode::kAsync},
      {.mode = UpdateMode::kAsync,
       .replicas_to_aggregate = 3,
       .staleness = 4,
       .num_workers = 3,
       .sparse_mode = UpdateMode::kSync},
  };
  for (const UpdateSpec& u : updates) {
    INFO(u.Describe());
    auto back = UpdateFromWire(
        ThroughCodec({.optimizer = {}, .shards = {}, .update = UpdateToWire(u)}).update, "update");
    REQUIRE(back.ok());
    CHECK(*back == u);
  }
}

TEST_CASE("wire specs: FromWire applies the specs' validators, naming the field") {
  proto::Optimizer opt = OptimizerToWire(DefaultOptimizer(OptimizerKind::kAdam));
  std::get<proto::Adam>(opt.rule).beta_1 = 1.5;
  auto o = OptimizerFromWire(opt, "CreateShards.optimizer");
  CHECK(o.status().code() == Code::kInvalidArgument);
  CHECK(o.status().message().starts_with("CreateShards.optimizer.beta_1: "));

  auto i = InitFromWire({.kind = proto::InitKind::kUniform,
                         .value = 0,
                         .minval = 1,
                         .maxval = -1,
                         .mean = 0,
                         .stddev = 0},
                        "w/part_0.init");
  CHECK(i.status().code() == Code::kInvalidArgument);
  CHECK(i.status().message().starts_with("w/part_0.init"));
  CHECK(InitFromWire({.kind = static_cast<proto::InitKind>(42),
                      .value = 0,
                      .minval = 0,
                      .maxval = 0,
                      .mean = 0,
                      .stddev = 0},
                     "init")
            .status()
            .message() == "init.kind: unknown initializer 42");

  CHECK(UpdateFromWire({.mode = proto::UpdateMode::kSync,
                        .replicas_to_aggregate = 0,
                        .staleness = 0,
                        .num_workers = 0},
                       "CreateShards.update")
            .status()
            .message() == "CreateShards.update: sync mode needs workers");
  CHECK(UpdateFromWire({.mode = proto::UpdateMode::kBoundedStaleness,
                        .replicas_to_aggregate = 0,
                        .staleness = -1,
                        .num_workers = 2},
                       "CreateShards.update")
            .status()
            .message() == "CreateShards.update.staleness: must be >= 0, got -1");
  // A hybrid spec from the wire is validated as the chief's is.
  CHECK(
      UpdateFromWire({.mode = proto::UpdateMode::kSync,
                      .replicas_to_aggregate = 1,
                      .staleness = 4,
                      .num_workers = 2,
                      .sparse_mode = proto::UpdateMode::kAsync},
                     "CreateShards.update")
          .status()
          .message()
          .starts_with(
              "CreateShards.update.dense.replicas_to_aggregate: 1 of 2 workers: a hybrid update cannot "
              "have backup workers"));
  CHECK(UpdateFromWire({.mode = proto::UpdateMode::kBoundedStaleness,
                        .replicas_to_aggregate = 0,
                        .staleness = 4,
                        .num_workers = 2,
                        .sparse_mode = proto::UpdateMode::kAsync},
                       "CreateShards.update")
            .status()
            .message() ==
        "CreateShards.update: a hybrid update is one class \"sync\" and the other \"async\", got "
        "dense bounded_staleness, sparse async");

  proto::ShardDef bad{.layout = {.var = "w",
                                 .shard = 0,
                                 .num_shards = 1,
                                 .row_begin = 0,
                                 .rows = 2,
                                 .cols = 3,
                                 .full_shape = {2, 4},
                                 .lazy = false},
                      .init = {},
                      .seed = 0};
  CHECK(ShardDefFromWire(bad).status().message() ==
        "w/part_0: cols 3 != product of full_shape[1:] = 4");
}

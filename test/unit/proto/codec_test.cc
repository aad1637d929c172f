#include <catch2/catch.hpp>

#include "libps/proto/codec.h"
#include "libps/proto/pstrain_generated.h"

using namespace ps;

TEST_CASE("every message round-trips through the codec") {
  proto::Push push;
  push.items.push_back({"emb", 2, false, {5, 7, 9}});
  push.items.push_back({"dense_0/kernel", 0, true, {}});
  push.global_step = 42;
  push.step_id = 17;
  auto bytes = proto::Encode({9, false, 3, push});
  auto env = proto::Decode(bytes);
  REQUIRE(env.ok());
  CHECK(env->request_id == 9);
  CHECK(env->generation == 3);
  CHECK_FALSE(env->reply);
  const auto& p = std::get<proto::Push>(env->body);
  REQUIRE(p.items.size() == 2);
  CHECK(p.items[0].var == "emb");
  CHECK(p.items[0].shard == 2);
  CHECK_FALSE(p.items[0].all_rows);
  CHECK(p.items[0].rows == std::vector<int64_t>{5, 7, 9});
  CHECK(p.items[1].all_rows);
  CHECK(p.global_step == 42);
  CHECK(p.step_id == 17);
  CHECK_FALSE(p.pull.has_value());

  // A push with a pull after it, and its reply with the pull's.
  push.pull = proto::Pull{{{"emb", 1, false, {3, 4}}, {"bias", 0, true, {}}}};
  auto combined = proto::Decode(proto::Encode({10, false, 3, push}));
  REQUIRE(combined.ok());
  const auto& c = std::get<proto::Push>(combined->body);
  REQUIRE(c.pull.has_value());
  REQUIRE(c.pull->items.size() == 2);
  CHECK(c.pull->items[0].rows == std::vector<int64_t>{3, 4});
  CHECK(c.pull->items[1].var == "bias");
  CHECK(c.pull->items[1].all_rows);
  CHECK(c.items.size() == 2);
  auto reply = proto::Decode(
      proto::Encode({10, true, 3, proto::PushReply{43, 1, 0, proto::PullReply{{32, 8}, {}}}}));
  REQUIRE(reply.ok());
  const auto& pr = std::get<proto::PushReply>(reply->body);
  CHECK(pr.skipped == 1);
  REQUIRE(pr.pull.has_value());
  CHECK(pr.pull->item_floats == std::vector<uint64_t>{32, 8});
  auto plain = proto::Decode(proto::Encode({11, true, 3, proto::PushReply{43, 0, 0}}));
  REQUIRE(plain.ok());
  CHECK_FALSE(std::get<proto::PushReply>(plain->body).pull.has_value());

  proto::CreateShards cs;
  cs.optimizer.rule = proto::Sgd{};
  cs.shards.push_back({.layout = {.var = "w",
                                  .shard = 1,
                                  .num_shards = 3,
                                  .row_begin = 5,
                                  .rows = 4,
                                  .cols = 8,
                                  .full_shape = {13, 8},
                                  .lazy = false},
                       .init = {},
                       .seed = 77});
  auto env2 = proto::Decode(proto::Encode({1, false, 0, cs}));
  REQUIRE(env2.ok());
  const auto& d = std::get<proto::CreateShards>(env2->body).shards.at(0);
  CHECK(d.layout.var == "w");
  CHECK(d.layout.row_begin == 5);
  CHECK(d.layout.full_shape == std::vector<int64_t>{13, 8});
  CHECK(d.seed == 77);

  auto env4 =
      proto::Decode(proto::Encode({3, true, 0, proto::SaveReply{"ps-1.shard", 1234, 0xDEADBEEF}}));
  REQUIRE(env4.ok());
  CHECK(std::get<proto::SaveReply>(env4->body).digest == 0xDEADBEEF);
  auto env5 = proto::Decode(proto::Encode({4, false, 0, proto::Restore{"/m", 1200}}));
  REQUIRE(env5.ok());
  CHECK(std::get<proto::Restore>(env5->body).global_step == 1200);

  proto::RunStepsReply r{4, 512, 1.5, 400, 0.1, 0.2, 0.3, 0.4};
  auto env3 = proto::Decode(proto::Encode({2, true, 0, r}));
  REQUIRE(env3.ok());
  CHECK(std::get<proto::RunStepsReply>(env3->body).push_seconds == 0.4);
  CHECK(std::string(proto::BodyName(env3->body)) == "RunStepsReply");

  for (bool retryable : {false, true}) {
    auto env6 =
        proto::Decode(proto::Encode({5, false, 0, proto::Shutdown{"job failed: x", retryable}}));
    REQUIRE(env6.ok());
    CHECK(std::get<proto::Shutdown>(env6->body).reason == "job failed: x");
    CHECK(std::get<proto::Shutdown>(env6->body).retryable == retryable);
  }
}

TEST_CASE("decode rejects garbage, truncation and unknown union tags") {
  auto good = proto::Encode({1, false, 0, proto::Ping{}});
  SECTION("truncated") {
    for (size_t n = 0; n < good.size(); ++n) {
      auto r = proto::Decode(std::span(good.data(), n));
      CHECK_FALSE(r.ok());
    }
  }
  SECTION("random bytes") {
    uint64_t x = 12345;
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<uint8_t> junk(8 + trial % 200);
      for (auto& b : junk) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        b = static_cast<uint8_t>(x >> 56);
      }
      auto r = proto::Decode(junk);
      if (!r.ok()) CHECK(r.status().code() == Code::kProtocol);
    }
  }
  SECTION("unknown union tag") {
    flatbuffers::FlatBufferBuilder fbb;
    auto ping = wire::CreatePing(fbb).Union();
    fbb.Finish(wire::CreateEnvelope(fbb, 5, false, 0, static_cast<wire::Body>(99), ping));
    auto r = proto::Decode(std::span(fbb.GetBufferPointer(), fbb.GetSize()));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kProtocol);
    CHECK(r.status().message() == "unknown message type 99");
  }
  SECTION("no body") {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateEnvelope(fbb, 5));
    auto r = proto::Decode(std::span(fbb.GetBufferPointer(), fbb.GetSize()));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "envelope has no body");
  }
  SECTION("depth and table limits are enforced") {
    proto::Pull pull;
    for (int i = 0; i < 100; ++i) pull.items.push_back({"v", i, true, {}});
    auto bytes = proto::Encode({1, false, 0, pull});
    CHECK(proto::Decode(bytes).ok());
    proto::DecodeLimits tight;
    tight.max_tables = 10;
    CHECK_FALSE(proto::Decode(bytes, tight).ok());
  }
}

TEST_CASE("status replies travel as tables: every field, optional figures absent or present") {
  proto::PsStatus ps;
  ps.generation = 99;
  ps.global_step = 1200;
  ps.uptime_sec = 12.5;
  ps.shards = 3;
  ps.bytes_held = 4096;
  ps.pull_requests = 1;
  ps.push_requests = 2;
  ps.failed_requests = 3;
  ps.bytes_pulled = 4;
  ps.bytes_pushed = 5;
  ps.rows_pulled = 6;
  ps.rows_pushed = 7;
  ps.requests = 8;
  ps.queue_depth = 9;
  ps.max_queue_depth = 10;
  ps.bytes_received = 11;
  ps.bytes_sent = 12;
  ps.update = {.mode = "sync",
               .stale_dropped = 13,
               .waited_pulls = 14,
               .max_lead = 15,
               .min_version = 16,
               .max_version = 17};
  ps.rows = {.lazy_shards = 18,
             .live_rows = 19,
             .admitted = 20,
             .not_admitted = 21,
             .evicted_ttl = 22,
             .evicted_max_rows = 23};
  auto e1 = proto::Decode(proto::Encode({5, true, 0, proto::PsStatusReply{ps}}));
  REQUIRE(e1.ok());
  const proto::PsStatus& p = std::get<proto::PsStatusReply>(e1->body).status;
  CHECK(p.generation == 99);
  CHECK(p.global_step == 1200);
  CHECK(p.uptime_sec == 12.5);
  CHECK(p.shards == 3);
  CHECK(p.bytes_held == 4096);
  CHECK(p.pull_requests + p.push_requests + p.failed_requests == 6);
  CHECK(p.bytes_pulled == 4);
  CHECK(p.bytes_pushed == 5);
  CHECK(p.rows_pulled == 6);
  CHECK(p.rows_pushed == 7);
  CHECK(p.requests == 8);
  CHECK(p.queue_depth == 9);
  CHECK(p.max_queue_depth == 10);
  CHECK(p.bytes_received == 11);
  CHECK(p.bytes_sent == 12);
  CHECK(p.update.mode == "sync");
  CHECK(p.update.stale_dropped == 13);
  CHECK(p.update.waited_pulls == 14);
  CHECK(p.update.max_lead == 15);
  CHECK(p.update.min_version == 16);
  CHECK(p.update.max_version == 17);
  CHECK(p.rows == ps.rows);

  proto::ChiefStatus s;
  s.state = "training";
  s.global_step = 500;
  s.total_steps = 9000;
  s.examples_per_sec = 35784.5;
  s.elapsed_sec = 3.25;
  s.stop_reason = "SIGTERM";
  s.tasks = {{.task = "ps:0", .state = "ready", .last_error = ""},
             {.task = "worker:1", .state = "lost", .last_error = "reset"}};
  s.load_window_sec = 1.5;
  proto::WorkerLoad busy;
  busy.task = "worker:0";
  busy.state = "running";
  busy.steps = 600;
  busy.examples_per_s = 4000;
  busy.step_ms = 8;
  busy.data_s = 0.1;
  busy.pull_s = 0.2;
  busy.compute_s = 0.3;
  busy.push_s = 0.4;
  busy.data_frac = 0.1;
  busy.pull_frac = 0.2;
  busy.compute_frac = 0.3;
  busy.push_frac = 0.4;
  proto::WorkerLoad idle;  // no step in the window: the optional figures stay absent
  idle.task = "worker:1";
  idle.state = "idle";
  s.workers = {busy, idle};
  proto::PsLoad ok;
  ok.task = "ps:0";
  ok.address = "127.0.0.1:2225";
  ok.state = "ok";
  ok.requests = 5000;
  ok.bytes_in = 1;
  ok.bytes_out = 2;
  ok.requests_per_s = 800;
  ok.bytes_in_per_s = 3;
  ok.bytes_out_per_s = 4;
  ok.rows_per_s = 5;
  ok.queue_depth = 6;
  ok.max_queue_depth = 7;
  ok.bytes_held = 8;
  ok.shards = 9;
  ok.window_sec = 1.25;
  ok.update = proto::PsUpdateFigures{.mode = "async",
                                     .stale_dropped = 0,
                                     .waited_pulls = 0,
                                     .max_lead = 0,
                                     .min_version = 0,
                                     .max_version = 0};
  ok.rows = proto::PsRowFigures{.lazy_shards = 2,
                                .live_rows = 3,
                                .admitted = 4,
                                .not_admitted = 5,
                                .evicted_ttl = 6,
                                .evicted_max_rows = 7};
  proto::PsLoad gone;
  gone.task = "ps:1";
  gone.address = "127.0.0.1:2226";
  gone.state = "no answer";
  gone.error = "timed out";
  s.ps = {ok, gone};
  s.files_done = 12;
  s.files_waiting = 3;
  s.data_lag_sec = 4.5;
  auto e2 = proto::Decode(proto::Encode({6, true, 0, proto::ChiefStatusReply{s}}));
  REQUIRE(e2.ok());
  const proto::ChiefStatus& c = std::get<proto::ChiefStatusReply>(e2->body).status;
  CHECK(c.state == "training");
  CHECK(c.global_step == 500);
  CHECK(c.total_steps == 9000);
  CHECK(c.examples_per_sec == 35784.5);
  CHECK(c.elapsed_sec == 3.25);
  CHECK(c.stop_reason == "SIGTERM");
  CHECK(c.files_done == 12);
  CHECK(c.files_waiting == 3);
  CHECK(c.data_lag_sec == 4.5);
  REQUIRE(c.tasks.size() == 2);
  CHECK(c.tasks[1].task == "worker:1");
  CHECK(c.tasks[1].state == "lost");
  CHECK(c.tasks[1].last_error == "reset");
  CHECK(c.load_window_sec == 1.5);
  REQUIRE(c.workers.size() == 2);
  CHECK(c.workers[0].task == "worker:0");
  CHECK(c.workers[0].steps == 600);
  CHECK(c.workers[0].examples_per_s == 4000);
  CHECK(c.workers[0].step_ms == 8.0);
  CHECK(c.workers[0].push_s == 0.4);
  CHECK(c.workers[0].data_frac == 0.1);
  CHECK(c.workers[0].push_frac == 0.4);
  CHECK_FALSE(c.workers[1].step_ms.has_value());
  CHECK_FALSE(c.workers[1].compute_frac.has_value());
  REQUIRE(c.ps.size() == 2);
  CHECK(c.ps[0].answered());
  CHECK(c.ps[0].requests == 5000);
  CHECK(c.ps[0].requests_per_s == 800);
  CHECK(c.ps[0].max_queue_depth == 7);
  CHECK(c.ps[0].shards == 9);
  CHECK(c.ps[0].window_sec == 1.25);
  REQUIRE(c.ps[0].update.has_value());
  CHECK(c.ps[0].update->mode == "async");
  REQUIRE(c.ps[0].rows.has_value());
  CHECK(*c.ps[0].rows == *ok.rows);
  CHECK_FALSE(c.ps[1].answered());
  CHECK(c.ps[1].error == "timed out");
  CHECK_FALSE(c.ps[1].update.has_value());
  CHECK_FALSE(c.ps[1].rows.has_value());
}

// ---- CreateShards: typed tables instead of JSON strings --------------------------------

namespace {

proto::ShardDef Def(int shard, int num_shards, int64_t row_begin, int64_t rows, bool lazy = false) {
  return {.layout = {.var = "emb",
                     .shard = shard,
                     .num_shards = num_shards,
                     .row_begin = row_begin,
                     .rows = rows,
                     .cols = 4,
                     .full_shape = {10, 2, 2},
                     .lazy = lazy},
          .init = {},
          .seed = 5};
}

proto::CreateShards Create() {
  proto::CreateShards cs;
  cs.optimizer.rule = proto::Sgd{.momentum = 0.9, .nesterov = true};
  cs.shards = {Def(0, 2, 0, 5), Def(1, 2, 5, 5)};
  return cs;
}

Result<proto::CreateShards> RoundTrip(const proto::CreateShards& cs) {
  PS_ASSIGN_OR_RETURN(proto::Envelope env, proto::Decode(proto::Encode({7, false, 1, cs})));
  return std::get<proto::CreateShards>(env.body);
}

// A CreateShards built by hand with the generated API, for tables the encoder never omits.
std::vector<uint8_t> RawCreate(bool with_optimizer, bool with_update, bool with_layout,
                               bool with_init,
                               wire::OptimizerRule rule_type = wire::OptimizerRule::Sgd,
                               wire::Schedule schedule_type = wire::Schedule::ConstantSchedule) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<int64_t> shape = {4};
  auto layout = wire::CreateShardLayoutDirect(fbb, "b", 0, 1, 0, 4, 1, &shape, false);
  auto init = wire::CreateInitializer(fbb, wire::InitKind::Ones);
  std::vector<flatbuffers::Offset<wire::ShardDef>> defs = {
      wire::CreateShardDef(fbb, with_layout ? layout : flatbuffers::Offset<wire::ShardLayout>(),
                           with_init ? init : flatbuffers::Offset<wire::Initializer>(), 1)};
  auto rule = wire::CreateSgd(fbb).Union();
  auto schedule = wire::CreateConstantSchedule(fbb).Union();
  auto optimizer = wire::CreateOptimizer(fbb, rule_type, rule, 0.1, schedule_type, schedule, 0);
  auto update = wire::CreateUpdate(fbb, wire::UpdateMode::Async);
  auto cs = wire::CreateCreateShardsDirect(
      fbb, with_optimizer ? optimizer : flatbuffers::Offset<wire::Optimizer>(), &defs,
      with_update ? update : flatbuffers::Offset<wire::Update>());
  fbb.Finish(wire::CreateEnvelope(fbb, 31, false, 0, wire::Body::CreateShards, cs.Union()));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

}  // namespace

TEST_CASE(
    "CreateShards: layouts, initializers, every optimizer and schedule, and the update mode round-trip") {
  const std::vector<proto::Initializer> inits = {
      {.kind = proto::InitKind::kZeros,
       .value = 0,
       .minval = 0,
       .maxval = 0,
       .mean = 0,
       .stddev = 0},
      {.kind = proto::InitKind::kConstant,
       .value = 0.25,
       .minval = 0,
       .maxval = 0,
       .mean = 0,
       .stddev = 0},
      {.kind = proto::InitKind::kUniform,
       .value = 0,
       .minval = -0.05,
       .maxval = 0.05,
       .mean = 0,
       .stddev = 0},
      {.kind = proto::InitKind::kTruncatedNormal,
       .value = 0,
       .minval = 0,
       .maxval = 0,
       .mean = 1,
       .stddev = 0.5},
      {.kind = proto::InitKind::kGlorotUniform,
       .value = 0,
       .minval = 0,
       .maxval = 0,
       .mean = 0,
       .stddev = 0},
  };
  const std::vector<proto::OptimizerRule> rules = {
      proto::Sgd{.momentum = 0.9, .nesterov = true},
      proto::Adagrad{.initial_accumulator_value = 0.1, .epsilon = 1e-7},
      proto::Rmsprop{.rho = 0.9, .momentum = 0.5, .epsilon = 1e-6, .centered = true},
      proto::Adam{.beta_1 = 0.9, .beta_2 = 0.999, .epsilon = 1e-7},
      proto::Ftrl{.learning_rate_power = -0.5,
                  .initial_accumulator_value = 0.1,
                  .l1 = 0.01,
                  .l2 = 0.02,
                  .l2_shrinkage = 0.03,
                  .beta = 0.04},
  };
  const std::vector<proto::Schedule> schedules = {
      proto::ConstantSchedule{},
      proto::ExponentialSchedule{.decay_steps = 1000, .decay_rate = 0.96, .staircase = true},
      proto::CosineSchedule{.decay_steps = 500, .alpha = 0.1},
  };
  for (size_t i = 0; i < rules.size(); ++i) {
    proto::CreateShards cs = Create();
    cs.optimizer = {.rule = rules[i],
                    .learning_rate = 0.125 * static_cast<double>(i + 1),
                    .schedule = schedules[i % schedules.size()],
                    .warmup_steps = static_cast<int64_t>(i)};
    cs.update = {.mode = static_cast<proto::UpdateMode>(i % 3),
                 .replicas_to_aggregate = 2,
                 .staleness = 3,
                 .num_workers = static_cast<int32_t>(4 + i)};
    cs.shards[0].init = inits[i];
    cs.shards[1].layout.lazy = i % 2 == 1;
    cs.shards[0].sparse = i % 2 == 0;  // the variable's class (hybrid update modes)
    if (i % 2 == 1) cs.update.sparse_mode = static_cast<proto::UpdateMode>((i + 1) % 3);
    auto back = RoundTrip(cs);
    INFO("optimizer #" << i);
    REQUIRE(back.ok());
    CHECK(*back == cs);
    CHECK(back->optimizer.rule.index() == i);
  }
  // An empty CreateShards (no shards) is fine: the ps only configures its optimizer.
  proto::CreateShards none;
  auto back = RoundTrip(none);
  REQUIRE(back.ok());
  CHECK(*back == none);
}

TEST_CASE("CreateShards: Decode rejects bad layouts and unknown kinds, naming the field") {
  auto rejected = [](const proto::CreateShards& cs) {
    auto r = RoundTrip(cs);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kProtocol);
    return r.status().message();
  };
  proto::CreateShards cs = Create();
  cs.shards[1].layout.shard = 2;
  CHECK(rejected(cs) == "CreateShards.shards[1]: emb/part_2: shard 2 is outside [0, num_shards 2)");
  cs = Create();
  cs.shards[0].layout.rows = 0;
  CHECK(rejected(cs) == "CreateShards.shards[0]: emb/part_0: rows and cols must be > 0, got 0 x 4");
  cs = Create();
  cs.shards[0].layout.cols = 3;
  CHECK(rejected(cs) ==
        "CreateShards.shards[0]: emb/part_0: cols 3 != product of full_shape[1:] = 4");
  cs = Create();
  cs.shards[1].layout.row_begin = 6;
  CHECK(rejected(cs) ==
        "CreateShards.shards[1]: emb/part_1: rows [6, 11) exceed full_shape[0] = 10");
  cs = Create();
  cs.shards[0].layout.var.clear();
  CHECK(rejected(cs) == "CreateShards.shards[0]: shard layout: var must not be empty");
  cs = Create();
  cs.shards[0].init.kind = static_cast<proto::InitKind>(42);
  CHECK(rejected(cs) == "CreateShards.shards[0].init.kind: unknown initializer 42");
  cs = Create();
  cs.update.mode = static_cast<proto::UpdateMode>(9);
  CHECK(rejected(cs) == "CreateShards.update.mode: unknown update mode 9");
  cs = Create();
  cs.update.sparse_mode = static_cast<proto::UpdateMode>(7);
  CHECK(rejected(cs) == "CreateShards.update.sparse_mode: unknown update mode 7");
}

TEST_CASE("CreateShards: missing tables and unknown union types are protocol errors") {
  auto message = [](const std::vector<uint8_t>& bytes) {
    auto r = proto::Decode(bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kProtocol);
    return r.status().message();
  };
  REQUIRE(proto::Decode(RawCreate(true, true, true, true)).ok());
  CHECK(message(RawCreate(false, true, true, true)) == "CreateShards.optimizer: missing");
  CHECK(message(RawCreate(true, false, true, true)) == "CreateShards.update: missing");
  CHECK(message(RawCreate(true, true, false, true)) == "CreateShards.shards[0].layout: missing");
  CHECK(message(RawCreate(true, true, true, false)) == "CreateShards.shards[0].init: missing");
  CHECK(message(RawCreate(true, true, true, true, static_cast<wire::OptimizerRule>(9))) ==
        "CreateShards.optimizer.rule: missing or unknown optimizer type 9");
  CHECK(message(RawCreate(true, true, true, true, wire::OptimizerRule::NONE)) ==
        "CreateShards.optimizer.rule: missing or unknown optimizer type 0");
  CHECK(message(RawCreate(true, true, true, true, wire::OptimizerRule::Sgd,
                          static_cast<wire::Schedule>(7))) ==
        "CreateShards.optimizer.schedule: missing or unknown schedule type 7");

  // Every truncation of a valid CreateShards fails verification.
  auto good = proto::Encode({1, false, 0, Create()});
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = proto::Decode(std::span(good.data(), n));
    CHECK_FALSE(r.ok());
  }
}

TEST_CASE("Decode reports the request id of a verified envelope whose body is rejected") {
  proto::CreateShards cs = Create();
  cs.shards[0].layout.num_shards = 0;
  uint64_t request_id = 0;
  auto r = proto::Decode(proto::Encode({77, false, 0, cs}), {}, &request_id);
  REQUIRE_FALSE(r.ok());
  CHECK(request_id == 77);
  // A buffer that fails verification has no request id to report.
  request_id = 5;
  std::vector<uint8_t> junk(64, 0xAB);
  CHECK_FALSE(proto::Decode(junk, {}, &request_id).ok());
  CHECK(request_id == 5);
}

TEST_CASE(
    "EvaluateShard and its reply round-trip; a shard outside [0, num_shards) is a protocol error") {
  auto e = proto::Decode(
      proto::Encode({3, false, 9, proto::EvaluateShard{.step = 500, .shard = 1, .num_shards = 3}}));
  REQUIRE(e.ok());
  const auto& m = std::get<proto::EvaluateShard>(e->body);
  CHECK(m.step == 500);
  CHECK(m.shard == 1);
  CHECK(m.num_shards == 3);
  proto::EvaluateShardReply r;
  r.heads = {{.examples = 10, .loss_sum = 2.5, .correct = 7, .scores = 10},
             {.examples = 10, .loss_sum = 1, .correct = 0, .scores = 0}};
  auto back = proto::Decode(proto::Encode({3, true, 9, r}));
  REQUIRE(back.ok());
  CHECK(std::get<proto::EvaluateShardReply>(back->body).heads == r.heads);
  auto bad = proto::Decode(
      proto::Encode({4, false, 9, proto::EvaluateShard{.step = 1, .shard = 3, .num_shards = 3}}));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kProtocol);
}

// A lazy table's "admit"/"evict" keys from a job file to the ps: ParseJob accepts and
// refuses them, PlanVariables carries them on the table's variable, and the chief's
// CreateShards (ShardDefToWire, the wire codec, ShardDefFromWire) delivers them intact.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "libps/core/json.h"
#include "libps/job/job.h"
#include "libps/proto/codec.h"
#include "libps/server/wire_specs.h"

using ps::Json;

namespace {

Json Job(const std::string& field) {
  return Json::parse(R"({"model":{"type":"embedding_mlp","fields":[)" + field + R"(],"classes":1},
    "train_data":{"format":"libsvm","path":"train.libsvm","num_features":100,"classes":2},
    "optimizer":{"type":"adagrad","learning_rate":0.05},"batch_size":8,"steps":10})");
}

}  // namespace

TEST_CASE("job: admit/evict on a lazy table reach the ps's ShardDef through CreateShards") {
  auto job = ps::job::ParseJob(Job(R"({"table":"ids","vocab":1000000,"dim":4,"lazy":true,
      "admit":{"min_count":5},"evict":{"ttl_steps":100,"max_rows":1000}})"),
                               "/tmp");
  REQUIRE(job.ok());
  auto model = ps::model::BuildModel(job->model, "job.model");
  REQUIRE(model.ok());
  auto plan = ps::job::PlanVariables(*job, **model, 2);
  REQUIRE(plan.ok());
  ps::proto::CreateShards msg;
  for (const auto& s : plan->shards) {
    for (const auto& v : plan->variables) {
      if (v.name != s.layout.var) continue;
      msg.shards.push_back(ps::server::ShardDefToWire(
          {.layout = s.layout, .init = v.init, .seed = 1, .row_policy = v.rows}));
    }
  }
  REQUIRE(!msg.shards.empty());
  msg.optimizer = ps::server::OptimizerToWire(job->optimizer);
  msg.update = ps::server::UpdateToWire(job->update);
  ps::proto::Envelope env;
  env.request_id = 1;
  env.body = msg;
  const std::vector<uint8_t> frame = ps::proto::Encode(env);
  auto back = ps::proto::Decode(frame);
  REQUIRE(back.ok());
  const auto& got = std::get<ps::proto::CreateShards>(back->body);
  REQUIRE(got.shards.size() == msg.shards.size());
  int lazy = 0;
  for (const auto& wire : got.shards) {
    auto def = ps::server::ShardDefFromWire(wire);
    REQUIRE(def.ok());
    if (def->layout.var != "ids/embeddings") {
      CHECK(def->row_policy == ps::model::RowPolicy{});
      continue;
    }
    ++lazy;
    CHECK(def->row_policy ==
          ps::model::RowPolicy{.admit_min_count = 5, .ttl_steps = 100, .max_rows = 1000});
  }
  CHECK(lazy >= 1);
}

TEST_CASE("job: admit/evict errors name the key") {
  auto bad = ps::job::ParseJob(
      Job(R"({"table":"ids","vocab":100,"dim":4,"evict":{"ttl_steps":100}})"), "/tmp");
  REQUIRE_FALSE(bad.ok());
  CHECK(
      bad.status().message() ==
      "job.model.fields[0].evict: applies to lazy tables only (set \"lazy\": true on this table)");
  bad = ps::job::ParseJob(
      Job(R"({"table":"ids","vocab":100,"dim":4,"lazy":true,"admit":{"min_count":1000}})"), "/tmp");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "job.model.fields[0].admit.min_count: must be in [1, 255], got 1000");
}

TEST_CASE("wire: a ShardDef's row policy on a dense layout is refused by the ps") {
  ps::server::ShardDef def;
  def.layout.var = "w";
  def.layout.rows = 4;
  def.layout.cols = 2;
  def.layout.full_shape = {4, 2};
  def.row_policy.ttl_steps = 3;
  auto back = ps::server::ShardDefFromWire(ps::server::ShardDefToWire(def));
  REQUIRE_FALSE(back.ok());
  CHECK(back.status().message() == "w/part_0: admission and eviction apply to lazy shards only");
}

TEST_CASE(
    "job: checkpoint.delta_every_seconds, max_deltas, delta_max_fraction parse; bad values name the key") {
  Json j = Job(R"({"table":"ids","vocab":1000,"dim":4})");
  auto plain = ps::job::ParseJob(j, "/tmp");
  REQUIRE(plain.ok());
  CHECK(plain->checkpoint.delta_every_seconds == 0);  // no deltas unless asked for
  CHECK(plain->checkpoint.max_deltas == 10);
  CHECK(plain->checkpoint.delta_max_fraction == 0.5);
  j["checkpoint"] = {{"delta_every_seconds", 30}, {"max_deltas", 4}, {"delta_max_fraction", 0.25}};
  auto job = ps::job::ParseJob(j, "/tmp");
  REQUIRE(job.ok());
  CHECK(job->checkpoint.delta_every_seconds == 30);
  CHECK(job->checkpoint.max_deltas == 4);
  CHECK(job->checkpoint.delta_max_fraction == 0.25);
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"delta_every_seconds", -1}, {"max_deltas", 0}, {"delta_max_fraction", 0}}) {
    Json bad = Job(R"({"table":"ids","vocab":1000,"dim":4})");
    bad["checkpoint"] = {{key, value}};
    auto st = ps::job::ParseJob(bad, "/tmp");
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.status().message(), Catch::Contains("job.checkpoint." + key));
  }
}

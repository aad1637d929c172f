// The job's "update" object: the single-mode form as before, the per-class (hybrid) form,
// and the errors, each naming its key; then ValidateUpdate's cluster-dependent rules.
#include <catch2/catch.hpp>

#include "libps/server/ps_status.h"
#include "libps/server/update.h"

using namespace ps;
using namespace ps::server;

namespace {

Result<UpdateSpec> Parse(const std::string& json) {
  auto parsed = ParseJson(json, "update");
  REQUIRE(parsed.ok());
  return ParseUpdate(*parsed, "job.update");
}

std::string Error(const std::string& json) {
  auto r = Parse(json);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

UpdateSpec WithWorkers(UpdateSpec spec, int workers) {
  spec.num_workers = workers;
  return spec;
}

}  // namespace

TEST_CASE("update: the single-mode form is unchanged") {
  auto a = Parse("{}");
  REQUIRE(a.ok());
  CHECK(*a == UpdateSpec{});
  CHECK(a->StepMode() == UpdateMode::kAsync);
  CHECK_FALSE(a->hybrid());
  CHECK(a->Describe() == "async");

  auto s = Parse(R"({"mode": "sync", "replicas_to_aggregate": 2})");
  REQUIRE(s.ok());
  CHECK(s->mode == UpdateMode::kSync);
  CHECK(s->replicas_to_aggregate == 2);
  CHECK_FALSE(s->sparse_mode.has_value());
  CHECK(s->ModeOf(true) == UpdateMode::kSync);
  CHECK(s->ModeOf(false) == UpdateMode::kSync);
  CHECK(s->Describe() == "sync");

  auto b = Parse(R"({"mode": "bounded_staleness", "staleness": 0})");
  REQUIRE(b.ok());
  CHECK(b->StepMode() == UpdateMode::kBoundedStaleness);
  CHECK(b->staleness == 0);

  CHECK(Error(R"({"mode": "fast"})") ==
        "job.update.mode: \"fast\" is not one of \"async\", \"sync\", \"bounded_staleness\"");
  CHECK(Error(R"({"mode": "sync", "replicas_to_aggregate": 0})") ==
        "job.update.replicas_to_aggregate: must be at least 1");
  CHECK(Error(R"({"mode": "async", "staleness": 2})") == "job.update.staleness: unknown key");
}

TEST_CASE("update: the per-class form, dense sync and sparse async (PERSIA's hybrid)") {
  auto h = Parse(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "async"}})");
  REQUIRE(h.ok());
  CHECK(h->hybrid());
  CHECK(h->mode == UpdateMode::kSync);
  CHECK(h->sparse_mode == UpdateMode::kAsync);
  CHECK(h->ModeOf(false) == UpdateMode::kSync);
  CHECK(h->ModeOf(true) == UpdateMode::kAsync);
  CHECK(h->StepMode() == UpdateMode::kSync);  // the chief schedules sync steps
  CHECK(h->Describe() == "dense sync, sparse async");
  CHECK(h->replicas_to_aggregate == 0);

  // The other way round, with the sync class's setting carried.
  auto r = Parse(
      R"({"dense": {"mode": "async"}, "sparse": {"mode": "sync", "replicas_to_aggregate": 3}})");
  REQUIRE(r.ok());
  CHECK(r->ModeOf(false) == UpdateMode::kAsync);
  CHECK(r->ModeOf(true) == UpdateMode::kSync);
  CHECK(r->StepMode() == UpdateMode::kSync);
  CHECK(r->replicas_to_aggregate == 3);
  CHECK(r->Describe() == "dense async, sparse sync");
}

TEST_CASE("update: both classes in one mode are that single mode") {
  auto s = Parse(R"({"dense": {"mode": "sync", "replicas_to_aggregate": 2},
                     "sparse": {"mode": "sync", "replicas_to_aggregate": 2}})");
  REQUIRE(s.ok());
  CHECK(*s == *Parse(R"({"mode": "sync", "replicas_to_aggregate": 2})"));
  CHECK_FALSE(s->hybrid());
  auto a = Parse(R"({"dense": {"mode": "async"}, "sparse": {"mode": "async"}})");
  REQUIRE(a.ok());
  CHECK(*a == UpdateSpec{});
  auto b = Parse(R"({"dense": {"mode": "bounded_staleness", "staleness": 2},
                     "sparse": {"mode": "bounded_staleness", "staleness": 2}})");
  REQUIRE(b.ok());
  CHECK(*b == *Parse(R"({"mode": "bounded_staleness", "staleness": 2})"));
  // Later errors still name the key the user wrote, not job.update.replicas_to_aggregate.
  CHECK(ValidateUpdate(WithWorkers(*s, 1), "job.update").message() ==
        "job.update.dense.replicas_to_aggregate: 2 is more than the cluster's 1 worker(s)");
  CHECK(ValidateUpdate(WithWorkers(*Parse(R"({"mode": "sync", "replicas_to_aggregate": 2})"), 1),
                       "job.update")
            .message() ==
        "job.update.replicas_to_aggregate: 2 is more than the cluster's 1 worker(s)");
}

TEST_CASE("update: per-class errors name update.dense / update.sparse") {
  CHECK(Error(R"({"dense": {"mode": "sync"}})") == "job.update.sparse: required key is missing");
  CHECK(Error(R"({"sparse": {"mode": "sync"}})") == "job.update.dense: required key is missing");
  CHECK(Error(R"({"dense": {}, "sparse": {"mode": "async"}})") ==
        "job.update.dense.mode: required key is missing");
  CHECK(
      Error(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "lazy"}})") ==
      "job.update.sparse.mode: \"lazy\" is not one of \"async\", \"sync\", \"bounded_staleness\"");
  CHECK(
      Error(R"({"dense": "sync", "sparse": {"mode": "async"}})").starts_with("job.update.dense: "));
  CHECK(
      Error(
          R"({"dense": {"mode": "sync", "replicas_to_aggregate": 0}, "sparse": {"mode": "async"}})") ==
      "job.update.dense.replicas_to_aggregate: must be at least 1");
  CHECK(Error(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "async", "staleness": 1}})") ==
        "job.update.sparse.staleness: unknown key");
  CHECK(Error(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "async"}, "embeddings": {}})") ==
        "job.update.embeddings: unknown key");
  CHECK(Error(R"({"mode": "sync", "dense": {"mode": "sync"}, "sparse": {"mode": "async"}})") ==
        "job.update.mode: not allowed beside \"dense\" and \"sparse\" (give each class its own)");
  // Combinations that cannot be made correct.
  CHECK(
      Error(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "bounded_staleness"}})") ==
      "job.update.sparse.mode: \"bounded_staleness\" cannot be mixed with \"sync\" in the other class; a hybrid "
      "update is one class \"sync\" and the other \"async\"");
  CHECK(
      Error(R"({"dense": {"mode": "bounded_staleness"}, "sparse": {"mode": "async"}})") ==
      "job.update.dense.mode: \"bounded_staleness\" cannot be mixed with \"async\" in the other class; a hybrid "
      "update is one class \"sync\" and the other \"async\"");
  CHECK(
      Error(
          R"({"dense": {"mode": "sync", "replicas_to_aggregate": 1}, "sparse": {"mode": "sync"}})") ==
      "job.update.sparse.replicas_to_aggregate: 0 differs from job.update.dense.replicas_to_aggregate 1 (0: every "
      "worker); both classes sync are one sync update");
  CHECK(
      Error(
          R"({"dense": {"mode": "bounded_staleness"}, "sparse": {"mode": "bounded_staleness", "staleness": 1}})") ==
      "job.update.sparse.staleness: 1 differs from job.update.dense.staleness 4; both classes bounded_staleness "
      "share one bound");
}

TEST_CASE("update: a hybrid job aggregates every worker (no backups) and needs workers") {
  auto h = Parse(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "async"}})");
  REQUIRE(h.ok());
  CHECK(ValidateUpdate(WithWorkers(*h, 3), "job.update").ok());
  CHECK(ValidateUpdate(*h, "job.update").message() ==
        "job.update: dense sync, sparse async mode needs workers");

  auto two = Parse(
      R"({"dense": {"mode": "sync", "replicas_to_aggregate": 2}, "sparse": {"mode": "async"}})");
  REQUIRE(two.ok());
  CHECK(ValidateUpdate(WithWorkers(*two, 2), "job.update").ok());
  CHECK(
      ValidateUpdate(WithWorkers(*two, 3), "job.update").message() ==
      "job.update.dense.replicas_to_aggregate: 2 of 3 workers: a hybrid update cannot have backup workers (a "
      "backup's gradient for the async class could be applied after its update was decided, outside the checkpoint "
      "that holds it)");
  CHECK(ValidateUpdate(WithWorkers(*two, 1), "job.update").message() ==
        "job.update.dense.replicas_to_aggregate: 2 is more than the cluster's 1 worker(s)");
  auto other = Parse(
      R"({"dense": {"mode": "async"}, "sparse": {"mode": "sync", "replicas_to_aggregate": 1}})");
  REQUIRE(other.ok());
  CHECK(
      ValidateUpdate(WithWorkers(*other, 2), "job.update")
          .message()
          .starts_with(
              "job.update.sparse.replicas_to_aggregate: 1 of 2 workers: a hybrid update cannot have backup workers"));

  // Backups stay allowed in plain sync mode; a spec from the wire is checked as well.
  auto sync = Parse(R"({"mode": "sync", "replicas_to_aggregate": 1})");
  REQUIRE(sync.ok());
  CHECK(ValidateUpdate(WithWorkers(*sync, 2), "job.update").ok());
  UpdateSpec bad = WithWorkers(*h, 2);
  bad.sparse_mode = UpdateMode::kBoundedStaleness;
  CHECK(
      ValidateUpdate(bad, "CreateShards.update").message() ==
      "CreateShards.update: a hybrid update is one class \"sync\" and the other \"async\", got dense sync, sparse "
      "bounded_staleness");
}

TEST_CASE("update: pstrain_ps_update_mode shows each class's mode, once a CreateShards set it") {
  auto text = [](const UpdateSpec& spec, bool configured = true) {
    prom::Writer w;
    Service::UpdateStats stats;
    stats.spec = spec;
    stats.configured = configured;
    WriteUpdateModeMetric(w, stats);
    return w.Text();
  };
  // A fresh or restarted ps holds the default (async): it is not the job's mode.
  CHECK_THAT(text(UpdateSpec{}, false), !Catch::Contains("pstrain_ps_update_mode"));
  auto h = Parse(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "async"}})");
  REQUIRE(h.ok());
  const std::string hybrid = text(*h);
  CHECK_THAT(hybrid, Catch::Contains("pstrain_ps_update_mode{class=\"dense\",mode=\"sync\"} 1\n"));
  CHECK_THAT(hybrid,
             Catch::Contains("pstrain_ps_update_mode{class=\"sparse\",mode=\"async\"} 1\n"));
  const std::string single = text(UpdateSpec{.mode = UpdateMode::kBoundedStaleness});
  CHECK_THAT(single, Catch::Contains(
                         "pstrain_ps_update_mode{class=\"dense\",mode=\"bounded_staleness\"} 1\n"));
  CHECK_THAT(
      single,
      Catch::Contains("pstrain_ps_update_mode{class=\"sparse\",mode=\"bounded_staleness\"} 1\n"));
}

TEST_CASE("update: the ps's closing summary says when it holds no sync shard") {
  auto h = Parse(R"({"dense": {"mode": "async"}, "sparse": {"mode": "sync"}})");
  REQUIRE(h.ok());
  Service::UpdateStats u;
  u.spec = WithWorkers(*h, 2);
  u.configured = true;
  u.applied_on_arrival = 12;
  CHECK(
      UpdateSummary(u) ==
      "dense async, sparse sync updates: no sync shards, 12 async gradient(s) applied, 0 stale gradient(s) dropped, "
      "0 pull(s) waited");
  u.sync_shards = 2;
  u.min_version = 3;
  u.max_version = 4;
  CHECK(
      UpdateSummary(u) ==
      "dense async, sparse sync updates: sync shards at update 3..4, 12 async gradient(s) applied, 0 stale "
      "gradient(s) dropped, 0 pull(s) waited");
  CHECK(UpdateSummary(Service::UpdateStats{}).empty());  // async
}

TEST_CASE("update: a hybrid job without variables of one class is warned about") {
  auto h = Parse(R"({"dense": {"mode": "sync"}, "sparse": {"mode": "async"}})");
  REQUIRE(h.ok());
  CHECK(OneClassWarning(*h, 3, 2, "job.update").empty());
  CHECK(
      OneClassWarning(*h, 3, 0, "job.update") ==
      "job.update: a hybrid update (dense sync, sparse async) but the model has no sparse variable: this is plain "
      "sync training");
  CHECK(
      OneClassWarning(*h, 0, 2, "job.update") ==
      "job.update: a hybrid update (dense sync, sparse async) but the model has no dense variable: this is plain "
      "async training");
  CHECK(OneClassWarning(UpdateSpec{.mode = UpdateMode::kSync}, 3, 0, "job.update")
            .empty());  // not hybrid
}

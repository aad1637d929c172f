// The load figures behind `pstrain status` and train_metrics.jsonl: a ps's status reply
// (hand-counted bytes held), rates from two samples, the per-worker step-time split, the
// hint rules and the status text, all from hand-written inputs checked exactly.
#include <catch2/catch.hpp>

#include "libps/obs/figures.h"
#include "libps/obs/status.h"
#include "libps/server/ps_status.h"

using ps::Json;
using namespace ps;

namespace {

proto::PsStatus PsStatus(double uptime, uint64_t requests, uint64_t in, uint64_t out,
                         uint64_t rows_pulled, uint64_t rows_pushed) {
  proto::PsStatus s;
  s.uptime_sec = uptime;
  s.shards = 3;
  s.bytes_held = 4096;
  s.rows_pulled = rows_pulled;
  s.rows_pushed = rows_pushed;
  s.requests = requests;
  s.queue_depth = 2;
  s.max_queue_depth = 5;
  s.bytes_received = in;
  s.bytes_sent = out;
  return s;
}

// The hint rules read a status; tests write its arrays as JSON, as a metrics line has them.
std::vector<std::string> Hints(const Json& status) {
  proto::ChiefStatus s = obs::ChiefStatusFromJson(status);
  return obs::LoadHints(s.workers, s.ps);
}

}  // namespace

TEST_CASE("ps status: the store's shards, bytes held (values + slots) and counters") {
  ::ps::server::Store store;
  auto adam = ::ps::server::DefaultOptimizer(::ps::server::OptimizerKind::kAdam);  // slots m and v
  REQUIRE(store.Configure(adam).ok());
  ::ps::server::ShardDef a{.layout = {.var = "emb",
                                      .shard = 0,
                                      .num_shards = 2,
                                      .row_begin = 0,
                                      .rows = 10,
                                      .cols = 4,
                                      .full_shape = {20, 4},
                                      .lazy = false},
                           .init = {},
                           .seed = 1};
  ::ps::server::ShardDef b{.layout = {.var = "bias",
                                      .shard = 0,
                                      .num_shards = 1,
                                      .row_begin = 0,
                                      .rows = 1,
                                      .cols = 1,
                                      .full_shape = {},
                                      .lazy = false},
                           .init = {},
                           .seed = 1};
  REQUIRE(store.Create(a).ok());
  REQUIRE(store.Create(b).ok());
  std::vector<float> out(40);
  REQUIRE(store.Pull({"emb", 0}, out).ok());
  std::vector<int64_t> rows = {1, 3};
  std::vector<float> two(8);
  REQUIRE(store.PullRows({"emb", 0}, rows, two).ok());

  ps::net::Server::Stats server{.requests = 7,
                                .queue_depth = 1,
                                .max_queue_depth = 4,
                                .bytes_received = 1000,
                                .bytes_sent = 2000};
  proto::PsStatus j = ::ps::server::PsStatusOf(store, server, 99, 12.5);
  CHECK(j.generation == 99);
  CHECK(j.uptime_sec == 12.5);
  CHECK(j.shards == 2);
  CHECK(j.bytes_held == (10 * 4 + 1) * 3 * 4);  // values, m and v: 41 floats each
  CHECK(j.pull_requests == 2);
  CHECK(j.rows_pulled == 12);
  CHECK(j.bytes_pulled == 48 * 4);
  CHECK(j.requests == 7);
  CHECK(j.queue_depth == 1);
  CHECK(j.max_queue_depth == 4);
  CHECK(j.bytes_received == 1000);
  CHECK(j.bytes_sent == 2000);
}

TEST_CASE("ps status: a lazy shard's row figures (admitted, not admitted, evicted, live)") {
  ::ps::server::Store store;
  REQUIRE(store.Configure(::ps::server::DefaultOptimizer(::ps::server::OptimizerKind::kSgd)).ok());
  ::ps::server::ShardDef lazy{.layout = {.var = "ids",
                                         .shard = 0,
                                         .num_shards = 1,
                                         .row_begin = 0,
                                         .rows = 1000,
                                         .cols = 2,
                                         .full_shape = {1000, 2},
                                         .lazy = true},
                              .init = {},
                              .seed = 1,
                              .row_policy = {.admit_min_count = 2, .ttl_steps = 0, .max_rows = 2}};
  REQUIRE(store.Create(lazy).ok());
  std::vector<float> grad(6, 1.0f);
  for (int64_t step = 0; step < 2; ++step) {
    REQUIRE(store.PushRows({"ids", 0}, std::vector<int64_t>{1, 2, 3}, grad, step).ok());
  }
  proto::PsStatus j = ::ps::server::PsStatusOf(store, {}, 1, 1.0);
  CHECK(j.rows == proto::PsRowFigures{.lazy_shards = 1,
                                      .live_rows = 2,
                                      .admitted = 3,
                                      .not_admitted = 3,
                                      .evicted_ttl = 0,
                                      .evicted_max_rows = 1});
}

TEST_CASE("ps load: rates between two samples, since start without one or after a restart") {
  proto::PsStatus prev = PsStatus(10, 1000, 50000, 80000, 300, 200);
  proto::PsStatus cur = PsStatus(12, 1400, 60000, 100000, 700, 600);
  cur.update.mode = "async";
  Json e = obs::ToJson(obs::PsLoadOf("ps:0", "10.0.0.5:2222", cur, prev));
  CHECK(
      e.dump() ==
      R"({"task":"ps:0","address":"10.0.0.5:2222","state":"ok","requests":1400,"bytes_in":60000,)"
      R"("bytes_out":100000,"requests_per_s":200.0,"bytes_in_per_s":5000.0,"bytes_out_per_s":10000.0,)"
      R"("rows_per_s":400.0,"queue_depth":2,"max_queue_depth":5,"bytes_held":4096,"shards":3,"window_sec":2.0,)"
      R"("update":{"mode":"async","stale_dropped":0,"waited_pulls":0,"max_lead":0,"min_version":0,"max_version":0,"applied_on_arrival":0}})");
  // The JSON reads back as the same figures (what inspect and the report do with metrics lines).
  CHECK(obs::ToJson(obs::PsLoadFromJson(e)) == e);
  CHECK_FALSE(e.contains("rows"));  // no lazy shard: no row figures

  // A ps with lazy shards: its row figures travel along, and read back.
  cur.rows = {.lazy_shards = 2,
              .live_rows = 30,
              .admitted = 40,
              .not_admitted = 50,
              .evicted_ttl = 6,
              .evicted_max_rows = 4};
  Json lazy = obs::ToJson(obs::PsLoadOf("ps:0", "10.0.0.5:2222", cur, prev));
  CHECK(
      lazy["rows"].dump() ==
      R"({"lazy_shards":2,"live_rows":30,"admitted":40,"not_admitted":50,"evicted_ttl":6,"evicted_max_rows":4})");
  CHECK(obs::ToJson(obs::PsLoadFromJson(lazy)) == lazy);
  cur.rows = {};

  proto::PsLoad first =
      obs::PsLoadOf("ps:0", "a", cur, std::nullopt);  // over the 12 s since the ps started
  CHECK(first.requests_per_s == Approx(1400.0 / 12));
  CHECK(first.rows_per_s == Approx(1300.0 / 12));
  CHECK(first.window_sec == 12.0);

  proto::PsStatus before_restart = PsStatus(500, 90000, 1, 1, 1, 1);
  proto::PsLoad restarted = obs::PsLoadOf("ps:0", "a", cur, before_restart);
  CHECK(restarted.requests_per_s == Approx(1400.0 / 12));

  proto::PsStatus same = cur;
  CHECK(obs::PsLoadOf("ps:0", "a", cur, same).requests_per_s == 0.0);  // a zero window

  CHECK(obs::ToJson(obs::PsNoAnswer("ps:1", "b:1", "timed out")).dump() ==
        R"({"task":"ps:1","address":"b:1","state":"no answer","error":"timed out"})");
  // Reading is lenient: mistyped keys read as zero.
  proto::PsLoad empty = obs::PsLoadFromJson(Json::parse(R"({"requests":"x","rows_per_s":[1]})"));
  CHECK(empty.requests == 0);
  CHECK(empty.rows_per_s == 0);
}

TEST_CASE("worker load: the window's split of step time") {
  obs::WorkerSnapshot prev;
  prev.name = "worker:1";
  prev.steps_done = 100;
  prev.data_seconds = 1;
  prev.pull_seconds = 2;
  prev.compute_seconds = 3;
  prev.push_seconds = 4;
  obs::WorkerSnapshot cur = prev;
  cur.in_flight = 1;
  cur.steps_done = 150;
  cur.data_seconds = 1.5;
  cur.pull_seconds = 4;
  cur.compute_seconds = 6;
  cur.push_seconds = 5.5;  // deltas 0.5, 2, 3, 1.5: 7 s over 50 steps
  Json w = obs::ToJson(obs::WorkerLoadOf(cur, &prev, 2.0, 32));
  CHECK(w["task"] == "worker:1");
  CHECK(w["state"] == "running");
  CHECK(w["steps"] == 150);
  CHECK(w["examples_per_s"].get<double>() == Approx(50 * 32 / 2.0));
  CHECK(w["step_ms"].get<double>() == Approx(140));
  CHECK(w["data_s"].get<double>() == Approx(0.5));
  CHECK(w["pull_s"].get<double>() == Approx(2));
  CHECK(w["compute_s"].get<double>() == Approx(3));
  CHECK(w["push_s"].get<double>() == Approx(1.5));
  CHECK(w["data_frac"].get<double>() == Approx(0.5 / 7));
  CHECK(w["pull_frac"].get<double>() == Approx(2.0 / 7));
  CHECK(w["compute_frac"].get<double>() == Approx(3.0 / 7));
  CHECK(w["push_frac"].get<double>() == Approx(1.5 / 7));
  CHECK(obs::ToJson(obs::WorkerLoadFromJson(w)) == w);

  Json idle = obs::ToJson(obs::WorkerLoadOf(prev, &prev, 2.0, 32));  // no step in the window
  CHECK(idle["state"] == "idle");
  CHECK(idle["examples_per_s"] == 0.0);
  CHECK(idle["step_ms"].is_null());
  CHECK(idle["pull_frac"].is_null());
  CHECK(obs::ToJson(obs::WorkerLoadFromJson(idle)) == idle);

  proto::WorkerLoad since_start =
      obs::WorkerLoadOf(cur, nullptr, 10.0, 32);  // the totals are the window
  CHECK(*since_start.step_ms == Approx(1000 * 17.0 / 150));
  cur.alive = false;
  CHECK(obs::WorkerLoadOf(cur, nullptr, 1.0, 1).state == "lost");
}

TEST_CASE("hints: hot ps, straggler, network-bound and ps-bound") {
  auto ps = [](const char* task, double req, double in, double out, int max_depth) {
    return Json{{"task", task},         {"state", "ok"},          {"requests_per_s", req},
                {"bytes_in_per_s", in}, {"bytes_out_per_s", out}, {"max_queue_depth", max_depth}};
  };
  auto worker = [](const char* task, double step_ms, double data, double pull, double compute,
                   double push) {
    return Json{{"task", task},   {"step_ms", step_ms},   {"data_s", data},
                {"pull_s", pull}, {"compute_s", compute}, {"push_s", push}};
  };
  // Requests: mean 200; ps:0 has exactly 1.5x. Bytes are even.
  Json hot = {{"ps", {ps("ps:0", 300, 1000, 1000, 0), ps("ps:1", 100, 1000, 1000, 0)}}};
  CHECK(Hints(hot) ==
        std::vector<std::string>{
            "hint: ps:0 carries more load than the other ps tasks: 1.5x the mean requests/s "
            "(300 vs 200); a hot-spot variable? partition big variables or spread them over "
            "the ps tasks"});
  // Bytes: ps:1 moves 3x the bytes of ps:0 (mean 2000 → 1.5x).
  Json heavy = {{"ps", {ps("ps:0", 100, 500, 500, 0), ps("ps:1", 100, 1500, 1500, 0)}}};
  REQUIRE(Hints(heavy).size() == 1);
  CHECK(
      Hints(heavy)[0].find("ps:1 carries more load than the other ps tasks: 1.5x the mean bytes/s "
                           "(2.9 KiB/s vs 2.0 KiB/s)") != std::string::npos);
  Json just_under = {{"ps", {ps("ps:0", 299, 0, 0, 0), ps("ps:1", 101, 0, 0, 0)}}};
  CHECK(Hints(just_under).empty());
  Json idle = {{"ps", {ps("ps:0", 9, 0, 0, 0), ps("ps:1", 0, 0, 0, 0)}}};  // mean under 10 req/s
  CHECK(Hints(idle).empty());
  // A ps that did not answer is left out of the mean (one answering ps: no comparison).
  Json one = {{"ps", {ps("ps:0", 300, 0, 0, 0), Json{{"task", "ps:1"}, {"state", "no answer"}}}}};
  CHECK(Hints(one).empty());

  // Median of 10, 12, 20 is 12: 20 is 1.67x; 12 is not.
  Json straggler = {{"workers",
                     {worker("worker:0", 10, 1, 0, 9, 0), worker("worker:1", 12, 1, 0, 11, 0),
                      worker("worker:2", 20, 1, 0, 19, 0)}}};
  CHECK(Hints(straggler) ==
        std::vector<std::string>{
            "hint: worker:2 is a straggler: 20.0 ms per step, 1.7x the median 12.0 ms "
            "(a slow or busy host?)"});
  Json even = {
      {"workers", {worker("worker:0", 10, 1, 0, 9, 0), worker("worker:1", 14.9, 1, 0, 9, 0)}}};
  CHECK(Hints(even).empty());  // median 12.45: 14.9 < 18.7

  // 6 of 10 s pulling/pushing; the queues stay near empty → network; a deep queue → ps.
  Json wire = {
      {"workers", {worker("worker:0", 10, 1, 2, 3, 1), worker("worker:1", 10, 0, 2, 0, 1)}},
      {"ps", {ps("ps:0", 5, 0, 0, 1), ps("ps:1", 5, 0, 0, 0)}}};
  CHECK(Hints(wire) ==
        std::vector<std::string>{
            "hint: network-bound: workers spend 60% of their step time pulling and pushing "
            "while the ps queues stay near empty (max depth <= 1): the network, not the ps, "
            "limits training"});
  wire["ps"][1]["max_queue_depth"] = 4;
  CHECK(Hints(wire) ==
        std::vector<std::string>{
            "hint: ps-bound: workers spend 60% of their step time pulling and pushing and "
            "ps:1 queued up to 4 requests: the ps tasks are the bottleneck (add ps tasks or "
            "partition the busiest variables)"});
  Json half = {{"workers", {worker("worker:0", 10, 1, 2, 4, 3)}}, {"ps", {ps("ps:0", 5, 0, 0, 0)}}};
  CHECK(Hints(half).empty());  // exactly half is not "most"
  CHECK(Hints(Json::object()).empty());
  CHECK(Hints(Json{{"ps", 3}, {"workers", "x"}}).empty());
}

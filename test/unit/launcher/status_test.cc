// `pstrain status` text: the chief's status rendered as "key: value" lines, the tasks
// table, the per-worker and per-ps tables and the hints.
#include <string>

#include <catch2/catch.hpp>

#include "launcher/status_text.h"
#include "libps/obs/status.h"

using namespace ps;
using namespace ps::launcher;

namespace {

TEST_CASE("status: the epoch of in-memory training data follows the fraction done") {
  proto::ChiefStatus s;
  s.state = "training";
  s.global_step = 150;
  s.total_steps = 300;
  s.epoch = 1.5;
  s.epochs = 3;
  CHECK(FormatStatus(s) ==
        "state: training\n"
        "global_step: 150\n"
        "total_steps: 300\n"
        "done: 50.0 %\n"
        "epoch: 1.50 of 3\n"
        "examples_per_sec: 0\n"
        "elapsed: 0.0 s\n");
  s.epochs = 0;
  CHECK_THAT(FormatStatus(s), Catch::Contains("epoch: 1.50\n"));
}

TEST_CASE("status: followed training data shows the files and the data lag") {
  proto::ChiefStatus s;
  s.state = "training";
  s.global_step = 150;
  s.files_done = 7;
  s.files_waiting = 2;
  CHECK(FormatStatus(s) ==
        "state: training\n"
        "global_step: 150\n"
        "total_steps: 0\n"
        "files: 7 trained, 2 waiting\n"
        "data_lag: -\n"
        "examples_per_sec: 0\n"
        "elapsed: 0.0 s\n");
  s.data_lag_sec = 75;
  CHECK_THAT(FormatStatus(s), Catch::Contains("data_lag: 1 min 15 s\n"));
  // The JSON of `pstrain status --json` and back.
  const proto::ChiefStatus back = obs::ChiefStatusFromJson(obs::ToJson(s));
  CHECK(back.files_done == 7);
  CHECK(back.files_waiting == 2);
  CHECK(back.data_lag_sec == 75);
  proto::ChiefStatus plain;
  CHECK_FALSE(obs::ToJson(plain).contains("files_done"));
  CHECK(obs::ChiefStatusFromJson(obs::ToJson(plain)).files_done == -1);
}

TEST_CASE("status: the chief's scalars and the tasks table") {
  proto::ChiefStatus s;
  s.state = "training";
  s.global_step = 1200;
  s.total_steps = 5000;
  s.examples_per_sec = 8123.4;
  s.elapsed_sec = 72.3;
  s.tasks = {{.task = "ps:0", .state = "ready", .last_error = ""},
             {.task = "worker:0", .state = "running", .last_error = ""}};
  CHECK(FormatStatus(s) ==
        "state: training\n"
        "global_step: 1200\n"
        "total_steps: 5000\n"
        "done: 24.0 %\n"
        "examples_per_sec: 8123\n"
        "elapsed: 1 min 12 s\n"
        "\n"
        "task      state\n"
        "ps:0      ready\n"
        "worker:0  running\n");
}

TEST_CASE("status: a stop reason, a task's last error, and nothing more when lists are empty") {
  proto::ChiefStatus s;
  s.state = "draining";
  s.stop_reason = "pstrain stop";
  s.tasks = {{.task = "ps:0", .state = "ready", .last_error = ""},
             {.task = "worker:1", .state = "lost", .last_error = "connection reset"}};
  CHECK(FormatStatus(s) ==
        "state: draining\n"
        "global_step: 0\n"
        "total_steps: 0\n"
        "examples_per_sec: 0\n"
        "elapsed: 0.0 s\n"
        "stop_reason: pstrain stop\n"
        "\n"
        "task      state  last_error\n"
        "ps:0      ready  -\n"
        "worker:1  lost   connection reset\n");
  proto::ChiefStatus starting;
  starting.state = "starting";
  CHECK(FormatStatus(starting) ==
        "state: starting\nglobal_step: 0\ntotal_steps: 0\nexamples_per_sec: 0\nelapsed: 0.0 s\n");
}

TEST_CASE("status: the update mode(s) the ps tasks apply, a hybrid's both") {
  proto::ChiefStatus s;
  s.state = "training";
  proto::PsLoad silent, ps1;
  silent.task = "ps:0";
  silent.state = "no answer";
  ps1.task = "ps:1";
  ps1.state = "ok";
  ps1.update = proto::PsUpdateFigures{.mode = "dense sync, sparse async"};
  s.ps = {silent, ps1};
  const std::string text = FormatStatus(s);
  CHECK(text.starts_with(
      "state: training\nglobal_step: 0\ntotal_steps: 0\nexamples_per_sec: 0\nelapsed: 0.0 s\n"
      "update: dense sync, sparse async\n\n"));
  s.ps = {silent};  // no ps answered: no mode to show
  CHECK(FormatStatus(s).find("update:") == std::string::npos);
}

TEST_CASE("status text: per-worker and per-ps tables and the hints") {
  const std::string json =
      R"({"state":"training","global_step":1200,"load_window_sec":2.5,)"
      R"("tasks":[{"task":"ps:0","state":"ready"},{"task":"worker:0","state":"running"}],)"
      R"("workers":[{"task":"worker:0","state":"running","steps":600,"examples_per_s":4000.4,"step_ms":8,)"
      R"("data_s":0.05,"pull_s":0.3,"compute_s":0.45,"push_s":0.2,)"
      R"("data_frac":0.05,"pull_frac":0.3,"compute_frac":0.45,"push_frac":0.2},)"
      R"({"task":"worker:1","state":"idle","steps":300,"examples_per_s":2000,"step_ms":25,)"
      R"("data_s":0.1,"pull_s":0.9,"compute_s":0.5,"push_s":0.5,)"
      R"("data_frac":0.05,"pull_frac":0.45,"compute_frac":0.25,"push_frac":0.25}],)"
      R"("ps":[{"task":"ps:0","address":"127.0.0.1:2225","state":"ok","requests_per_s":3000,)"
      R"("bytes_in_per_s":1048576,"bytes_out_per_s":2097152,"rows_per_s":51200,"queue_depth":0,)"
      R"("max_queue_depth":1,"bytes_held":1572864,"shards":3},)"
      R"({"task":"ps:1","address":"127.0.0.1:2226","state":"no answer","error":"timed out"}]})";
  const std::string text = FormatStatus(obs::ChiefStatusFromJson(Json::parse(json)));
  CHECK(
      text ==
      "state: training\n"
      "global_step: 1200\n"
      "total_steps: 0\n"
      "examples_per_sec: 0\n"
      "elapsed: 0.0 s\n"
      "\n"
      "task      state\n"
      "ps:0      ready\n"
      "worker:0  running\n"
      "\n"
      "worker    state    steps  ex/s  step_ms  data  pull  compute  push\n"
      "worker:0  running  600    4000  8.0      5%    30%   45%      20%\n"
      "worker:1  idle     300    2000  25.0     5%    45%   25%      25%\n"
      "\n"
      "ps    address         state      req/s  in/s       out/s      rows/s  queue  max_queue  held     shards\n"
      "ps:0  127.0.0.1:2225  ok         3000   1.0 MiB/s  2.0 MiB/s  51200   0      1          1.5 MiB  3\n"
      "ps:1  127.0.0.1:2226  no answer  -      -          -          -       -      -          -        -\n"
      "ps:1: timed out\n"
      "\n"
      "hint: worker:1 is a straggler: 25.0 ms per step, 1.5x the median 16.5 ms (a slow or busy host?)\n"
      "hint: network-bound: workers spend 63% of their step time pulling and pushing while the ps queues "
      "stay near empty (max depth <= 1): the network, not the ps, limits training\n");

  // --watch: the same tables on a cleared screen; one line per poll (plus the hints) when
  // stdout is not a terminal.
  const auto status = obs::ChiefStatusFromJson(Json::parse(json));
  CHECK(
      WatchScreen(status, "127.0.0.1:2222", 2, "12:00:01") ==
      "\x1b[H\x1b[2J\x1b[1mpstrain status\x1b[0m  127.0.0.1:2222  every 2.0 s  12:00:01  (Ctrl-C quits; the "
      "job is not affected)\n\n" +
          text);
  CHECK(
      WatchLines(status, "12:00:01") ==
      "12:00:01 state training  step 1200/0  ex/s 0  worker:0 8.0 ms/step (data 5% pull 30% compute 45% push 20%)"
      "  worker:1 25.0 ms/step (data 5% pull 45% compute 25% push 25%)  ps:0 3000 req/s 3.0 MiB/s q1"
      "  ps:1 no answer\n"
      "12:00:01 hint: worker:1 is a straggler: 25.0 ms per step, 1.5x the median 16.5 ms (a slow or busy host?)\n"
      "12:00:01 hint: network-bound: workers spend 63% of their step time pulling and pushing while the ps queues "
      "stay near empty (max depth <= 1): the network, not the ps, limits training\n");

  // A ps with lazy tables: their row figures in a table of their own.
  Json lazy = Json::parse(json);
  lazy["ps"][0]["rows"] = {{"lazy_shards", 2},    {"live_rows", 12535},
                           {"admitted", 2262},    {"not_admitted", 3425},
                           {"evicted_ttl", 9342}, {"evicted_max_rows", 1262}};
  const std::string with_rows = FormatStatus(obs::ChiefStatusFromJson(lazy));
  CHECK(with_rows.find("ps:1: timed out\n"
                       "\n"
                       "ps    lazy_rows  admitted  not_admitted  evicted_ttl  evicted_max_rows\n"
                       "ps:0  12535      2262      3425          9342         1262\n") !=
        std::string::npos);

  // No load arrays (no sample yet): no tables.
  CHECK(FormatStatus(obs::ChiefStatusFromJson(
            Json::parse(R"({"state":"starting","workers":[],"ps":[]})"))) ==
        "state: starting\nglobal_step: 0\ntotal_steps: 0\nexamples_per_sec: 0\nelapsed: 0.0 s\n");
}

}  // namespace

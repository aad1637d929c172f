// `pstrain status` text: the chief's status rendered as "key: value" lines, the tasks
// table, the per-worker and per-ps tables and the hints.
#include <string>

#include <catch2/catch.hpp>

#include "launcher/status_text.h"

using namespace ps;
using namespace ps::launcher;

namespace {

TEST_CASE("status: the documented example as text") {
  const std::string json =
      R"({"state":"training","global_step":1200,"total_steps":5000,"examples_per_sec":8123.4,)"
      R"("elapsed_sec":12.3,"tasks":[{"task":"ps:0","address":"127.0.0.1:2225","state":"ready",)"
      R"("bytes":1234567,"requests":4000},{"task":"worker:0","address":"127.0.0.1:2223",)"
      R"("state":"running","steps":600,"data_ms":0.1,"pull_ms":1.2,"compute_ms":3.4,"push_ms":1.1}]})";
  auto text = FormatStatus(json);
  REQUIRE(text.ok());
  CHECK(*text ==
        "state: training\n"
        "global_step: 1200\n"
        "total_steps: 5000\n"
        "examples_per_sec: 8123.4\n"
        "elapsed_sec: 12.3\n"
        "\n"
        "task      address         state    bytes    requests  steps  data_ms  pull_ms  compute_ms  push_ms\n"
        "ps:0      127.0.0.1:2225  ready    1234567  4000      -      -        -        -           -\n"
        "worker:0  127.0.0.1:2223  running  -        -         600    0.1      1.2      3.4         1.1\n");
}

TEST_CASE("status: unknown, missing and odd fields never break it") {
  auto text = FormatStatus(
      R"({"state":"stopping","new_thing":{"a":[1,2]},"note":null,"ok":true,)"
      R"("tasks":[{"task":"ps:0","extra":[1]},7,{"state":"lost"}]})");
  REQUIRE(text.ok());
  CHECK(*text ==
        "state: stopping\n"
        "new_thing: {\"a\":[1,2]}\n"
        "note: -\n"
        "ok: true\n"
        "\n"
        "task  extra  state\n"
        "ps:0  [1]    -\n"
        "-     -      lost\n"
        "tasks[1]: 7\n");

  CHECK(*FormatStatus(R"({"state":"starting"})") == "state: starting\n");
  CHECK(*FormatStatus(R"({"tasks":[]})") == "tasks: none\n");
  CHECK(*FormatStatus(R"({"tasks":"n/a"})") == "tasks: n/a\n");
  CHECK(*FormatStatus("{}") == "");

  auto not_object = FormatStatus("[1,2]");
  REQUIRE_FALSE(not_object.ok());
  CHECK(not_object.status().message() == "status reply: not a JSON object");
  CHECK_FALSE(FormatStatus("{\"state\":").ok());
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
  auto text = FormatStatus(json);
  REQUIRE(text.ok());
  CHECK(*text ==
        "state: training\n"
        "global_step: 1200\n"
        "load_window_sec: 2.5\n"
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

  // No load arrays (an older chief): the text is as before.
  CHECK(*FormatStatus(R"({"state":"starting","workers":[],"ps":[]})") == "state: starting\n");
}

}  // namespace

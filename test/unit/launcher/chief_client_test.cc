// The chief client: CallChief against a fake chief's control endpoint (operator role,
// cluster secret, unreachable address), then `pstrain stop` and `pstrain status` as
// processes against it.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "launcher/chief_client.h"
#include "launcher/subprocess.h"
#include "test/unit/launcher/launcher_support.h"

using namespace ps;
using namespace ps::launcher;
using namespace ps::launcher::testing;
using namespace std::chrono_literals;

TEST_CASE("CallChief: Stop and GetStatus as an operator tool; unreachable names the address") {
  net::Runtime rt(1);
  FakeChief chief(rt);
  cluster::HostPort at{"127.0.0.1", chief.server->port()};
  auto ack = CallChief(at, std::nullopt, 5s, proto::Stop{"because"});
  REQUIRE(ack.ok());
  CHECK(std::holds_alternative<proto::Ack>(*ack));
  auto status = CallChief(at, std::nullopt, 5s, proto::GetStatus{});
  REQUIRE(status.ok());
  REQUIRE(std::holds_alternative<proto::ChiefStatusReply>(*status));
  CHECK(std::get<proto::ChiefStatusReply>(*status).status.state == "training");
  CHECK(std::get<proto::ChiefStatusReply>(*status).status.global_step == 7);
  {
    std::lock_guard lock(chief.mu);
    CHECK(chief.reasons == std::vector<std::string>{"because"});
    CHECK(chief.peers == std::vector<proto::Role>{proto::Role::kClient, proto::Role::kClient});
  }

  // A port nobody listens on: take one from a server we then close.
  uint16_t dead_port;
  {
    FakeChief gone(rt);
    dead_port = gone.server->port();
    gone.server->Close();
  }
  auto dead = CallChief({"127.0.0.1", dead_port}, std::nullopt, 300ms, proto::Stop{});
  REQUIRE_FALSE(dead.ok());
  CHECK(dead.status().code() == Code::kUnavailable);
  CHECK(dead.status().message().find("127.0.0.1:" + std::to_string(dead_port)) !=
        std::string::npos);
}

TEST_CASE("CallChief: the cluster secret is proven, a missing one is refused") {
  net::Runtime rt(1);
  FakeChief chief(rt, nullptr, std::string("s3cret"));
  cluster::HostPort at{"127.0.0.1", chief.server->port()};
  CHECK(CallChief(at, std::string("s3cret"), 5s, proto::GetStatus{}).ok());
  auto refused = CallChief(at, std::nullopt, 5s, proto::GetStatus{});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kPermissionDenied);
}

namespace {

struct CliResult {
  int rc = -1;
  std::vector<std::string> lines;  // stdout and stderr
};

CliResult RunPstrain(std::vector<std::string> args) {
  CliResult r;
  std::mutex mu;
  SpawnOptions o;
  o.argv = {PstrainBinary()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.on_line = [&](const std::string& line) {
    std::lock_guard lock(mu);
    r.lines.push_back(line);
  };
  auto p = Subprocess::Spawn(std::move(o));
  REQUIRE(p.ok());
  auto rc = (*p)->WaitFor(60s);
  REQUIRE(rc.has_value());
  p->reset();
  r.rc = *rc;
  return r;
}

}  // namespace

TEST_CASE("pstrain stop and status against a chief's control endpoint") {
  net::Runtime rt(1);
  FakeChief chief(rt);
  const std::string at = "127.0.0.1:" + std::to_string(chief.server->port());

  auto stop = RunPstrain({"stop", "--chief", at, "--reason", "rolling upgrade"});
  CHECK(stop.rc == 0);
  CHECK(stop.lines ==
        std::vector<std::string>{"pstrain stop: the chief at " + at +
                                 " acknowledged; it stops scheduling steps, "
                                 "writes the final checkpoint, shuts every task down and exits"});
  {
    std::lock_guard lock(chief.mu);
    CHECK(chief.reasons == std::vector<std::string>{"rolling upgrade"});
  }

  auto status = RunPstrain({"status", "--chief", at});
  CHECK(status.rc == 0);
  CHECK(status.lines == std::vector<std::string>{"state: training", "global_step: 7",
                                                 "total_steps: 0", "examples_per_sec: 0",
                                                 "elapsed: 0.0 s"});
  auto raw = RunPstrain({"status", "--chief", at, "--json"});
  CHECK(raw.rc == 0);
  CHECK(raw.lines ==
        std::vector<std::string>{
            R"({"state":"training","global_step":7,"total_steps":0,"examples_per_sec":0.0,)"
            R"("elapsed_sec":0.0,"tasks":[],"load_window_sec":0.0,"workers":[],"ps":[]})"});

  uint16_t dead_port = chief.server->port();
  chief.server->Close();
  auto dead =
      RunPstrain({"stop", "--chief", "127.0.0.1:" + std::to_string(dead_port), "--timeout", "0.3"});
  CHECK(dead.rc == 1);
  REQUIRE(dead.lines.size() == 1);
  CHECK(dead.lines[0].find("127.0.0.1:" + std::to_string(dead_port)) != std::string::npos);

  CHECK(RunPstrain({"stop"}).rc == 2);
  CHECK(RunPstrain({"status", "--chief", at, "--secret-file", "/nonexistent/secret"}).rc == 2);
  CHECK(RunPstrain({"tf-config", "--cluster", "/nonexistent/cluster.json"}).rc == 2);
  CHECK(RunPstrain({"--help"}).rc == 0);
}

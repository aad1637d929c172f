// Every daemon's metrics: --metrics-port / --metrics-host checked and served with the
// task's labels and the process figures; Bootstrap serves them on the listen host; an RPC
// server's counters appear as pstrain_rpc_* while exported, and only then.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "libps/daemon/daemon.h"
#include "libps/http/client.h"
#include "libps/prom/endpoint.h"
#include "test/unit/net/net_test_util.h"

using namespace ps;
using namespace std::chrono_literals;

namespace {
std::string Scrape(uint16_t port) {
  auto r = http::Get("127.0.0.1", port, "/metrics", 5s);
  REQUIRE(r.ok());
  REQUIRE(r->status == 200);
  return r->body;
}
}  // namespace

TEST_CASE(
    "StartMetrics: no endpoint by default, bad flags named, labels and process figures served") {
  daemon::DaemonFlags flags;
  const cluster::TaskId task{cluster::TaskType::kWorker, 3};
  auto none = daemon::StartMetrics(flags, task, "127.0.0.1");
  REQUIRE(none.ok());
  CHECK(none->server == nullptr);
  REQUIRE(none->registry != nullptr);
  CHECK(none->registry->Render().find(
            "process_cpu_seconds_total{task_type=\"worker\",task_index=\"3\"} ") !=
        std::string::npos);

  flags.metrics_host = "127.0.0.1";
  auto host_only = daemon::StartMetrics(flags, task, "127.0.0.1");
  REQUIRE_FALSE(host_only.ok());
  CHECK(host_only.status().code() == Code::kInvalidArgument);
  CHECK(host_only.status().message().find("--metrics-host") != std::string::npos);

  flags.metrics_port = 70000;
  auto bad_port = daemon::StartMetrics(flags, task, "127.0.0.1");
  REQUIRE_FALSE(bad_port.ok());
  CHECK(bad_port.status().message().find("--metrics-port") != std::string::npos);

  flags.metrics_port = 0;
  auto served = daemon::StartMetrics(flags, task, "0.0.0.0");  // --metrics-host wins
  REQUIRE(served.ok());
  REQUIRE(served->server != nullptr);
  served->registry->Counter("pstrain_test_total", "A test counter.").Add(2);
  const std::string body = Scrape(served->server->port());
  CHECK(body.find("pstrain_test_total{task_type=\"worker\",task_index=\"3\"} 2\n") !=
        std::string::npos);
  CHECK(body.find("# TYPE process_resident_memory_bytes gauge") != std::string::npos);

  // A port in use: Unavailable naming the address.
  flags.metrics_port = served->server->port();
  auto taken = daemon::StartMetrics(flags, task, "127.0.0.1");
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.status().message().find("127.0.0.1:" + std::to_string(flags.metrics_port)) !=
        std::string::npos);
}

TEST_CASE("Bootstrap serves the metrics on the task's listen host") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pstrain-daemon-metrics-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string tf = (dir / "tf.json").string();
  std::ofstream(tf)
      << R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]},
                           "task": {"type": "ps", "index": 0}})";
  daemon::DaemonFlags flags;
  flags.tf_config_file = tf;
  flags.metrics_port = 0;
  flags.log_level = "error";
  auto ctx = daemon::Bootstrap(flags, cluster::TaskType::kPs);
  std::filesystem::remove_all(dir);
  REQUIRE(ctx.ok());
  REQUIRE(ctx->metrics.server != nullptr);
  CHECK(Scrape(ctx->metrics.server->port()).find("task_type=\"ps\",task_index=\"0\"") !=
        std::string::npos);
}

TEST_CASE("ExportServerStats: an RPC server's requests and bytes while exported") {
  using namespace ps::nettest;
  prom::Registry registry;
  net::Runtime runtime(1);
  net::ServerOptions so;
  so.identity = Id(proto::Role::kPs, 0);
  so.run_inline = [](const net::Request& req) -> std::shared_ptr<void> {
    return std::holds_alternative<proto::Pull>(req.envelope.body) ? std::make_shared<int>(0)
                                                                  : nullptr;
  };
  auto server = net::Server::Start(
      runtime, so, [](net::Request, net::Responder resp) { resp.Reply(proto::Ack{}); });
  REQUIRE(server.ok());
  {
    auto exported = daemon::ExportServerStats(registry, **server);
    auto client =
        net::Client::Connect(runtime, ClientOpts((*server)->port(), Id(proto::Role::kWorker, 0)));
    REQUIRE(client.ok());
    for (int i = 0; i < 3; ++i) REQUIRE((*client)->CallSync(proto::GetStatus{}).ok());
    REQUIRE((*client)->CallSync(proto::Pull{}).ok());  // handled inline
    const std::string text = registry.Render();
    CHECK(text.find("pstrain_rpc_requests_total 4\n") != std::string::npos);
    CHECK(text.find("pstrain_rpc_inline_requests_total 1\n") != std::string::npos);
    CHECK(text.find("# TYPE pstrain_rpc_received_bytes_total counter") != std::string::npos);
    CHECK(text.find("pstrain_rpc_connections 1\n") != std::string::npos);
    CHECK(text.find("pstrain_rpc_queue_depth 0\n") != std::string::npos);
    (*client)->Close();
  }
  CHECK(registry.Render().find("pstrain_rpc_") == std::string::npos);
  (*server)->Close();
}

// Helpers shared by the launcher's test programs: cluster specs from JSON, the built
// `pstrain` binary, and a fake chief control endpoint on 127.0.0.1.
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "libps/cluster/tf_config.h"
#include "libps/net/transport.h"
#include "libps/proto/messages.h"

namespace ps::launcher::testing {

inline cluster::ClusterSpec Spec(const std::string& json) {
  auto spec = cluster::ParseClusterFile(json, "test");
  REQUIRE(spec.ok());
  return *spec;
}

inline constexpr const char* kLocal3 =
    R"({"chief":["127.0.0.1:2222"],"worker":["127.0.0.1:2223","127.0.0.1:2224"],)"
    R"("ps":["127.0.0.1:2225"]})";

// build/test/unit_launcher_* -> build/launcher/pstrain; PSTRAIN_BUILD_DIR overrides.
inline std::string PstrainBinary() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path build = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  if (const char* dir = std::getenv("PSTRAIN_BUILD_DIR")) build = dir;
  fs::path p = build / "launcher" / "pstrain";
  if (!fs::exists(p, ec)) FAIL("pstrain not built at " << p.string() << " (set PSTRAIN_BUILD_DIR)");
  return p.string();
}

// A stand-in for the chief's control endpoint on 127.0.0.1 with a kernel-chosen port.
struct FakeChief {
  explicit FakeChief(net::Runtime& rt, std::function<void(const proto::Stop&)> on_stop = nullptr,
                     std::optional<std::string> secret = std::nullopt) {
    net::ServerOptions o;
    o.identity = net::Identity{proto::Role::kChief, 0, 0xABCDEF, std::move(secret)};
    auto s = net::Server::Start(rt, o, [this, on_stop](net::Request req, net::Responder resp) {
      std::lock_guard lock(mu);
      peers.push_back(req.peer.role);
      if (const auto* stop = std::get_if<proto::Stop>(&req.envelope.body)) {
        reasons.push_back(stop->reason);
        if (on_stop) on_stop(*stop);
        resp.Reply(proto::Ack{});
      } else if (std::holds_alternative<proto::GetStatus>(req.envelope.body)) {
        proto::ChiefStatusReply reply;
        reply.status.state = "training";
        reply.status.global_step = 7;
        resp.Reply(reply);
      } else {
        resp.Fail(InvalidArgument("unexpected"));
      }
    });
    REQUIRE(s.ok());
    server = std::move(*s);
  }
  std::mutex mu;
  std::vector<std::string> reasons;
  std::vector<proto::Role> peers;
  std::unique_ptr<net::Server> server;
};

}  // namespace ps::launcher::testing

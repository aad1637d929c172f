// Mutual TLS over 127.0.0.1: certificates from scripts/make-certs.sh (a cluster CA and a
// second, foreign CA); a peer without a valid certificate is refused with a clear error
// on both sides (the server's side read from its log on stderr).
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "libps/net/tls.h"
#include "test/unit/net/net_test_util.h"

using namespace ps;
using namespace ps::nettest;
using namespace std::chrono_literals;

namespace {

// A temporary directory with the cluster CA's ca.pem, ps.* and worker.*, and other/ with
// a foreign CA and its intruder.*. Removed on destruction.
struct Certs {
  std::string dir;
  Certs() {
    char tmpl[] = "/tmp/pstrain-tls-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    const char* src = std::getenv("PSTRAIN_SOURCE_DIR");
    REQUIRE(src != nullptr);  // set by meson test
    const std::string script = std::string(src) + "/scripts/make-certs.sh";
    REQUIRE(std::system(("bash " + script + " " + dir + " ps worker >/dev/null").c_str()) == 0);
    REQUIRE(std::system(("bash " + script + " " + dir + "/other intruder >/dev/null").c_str()) ==
            0);
  }
  ~Certs() { std::filesystem::remove_all(dir); }
  std::shared_ptr<net::TlsContext> Load(const std::string& name,
                                        const std::string& ca_dir = "") const {
    auto t = net::TlsContext::Load(dir + "/" + name + ".pem", dir + "/" + name + ".key",
                                   (ca_dir.empty() ? dir : ca_dir) + "/ca.pem");
    REQUIRE(t.ok());
    return *t;
  }
};

// Redirects stderr (the log) into a file while alive.
struct CaptureStderr {
  std::string path;
  int saved = -1;
  explicit CaptureStderr(const std::string& dir) : path(dir + "/stderr.log") {
    std::fflush(stderr);
    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    saved = ::dup(2);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~CaptureStderr() {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
  }
  std::string Text() const {
    std::fflush(stderr);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Waits until the log holds `needle` (a condition; 20 s guards a hung test only).
  bool WaitFor(const std::string& needle) const {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Text().find(needle) != std::string::npos) return true;
      std::this_thread::yield();
    }
    return false;
  }
};

std::unique_ptr<net::Server> EchoServer(net::Runtime& rt, std::shared_ptr<net::TlsContext> tls,
                                        std::optional<std::string> secret = std::nullopt) {
  net::ServerOptions o;
  o.identity = Id(proto::Role::kPs, 0, kCluster, std::move(secret));
  o.tls = std::move(tls);
  auto s = net::Server::Start(rt, o, [](net::Request req, net::Responder resp) {
    resp.Reply(proto::PullReply{}, net::OutPayload::Own(std::move(req.payload)));
  });
  REQUIRE(s.ok());
  return std::move(*s);
}

net::ClientOptions TlsClient(uint16_t port, std::shared_ptr<net::TlsContext> tls) {
  auto o = ClientOpts(port, Id(proto::Role::kWorker, 0));
  o.tls = std::move(tls);
  o.connect_deadline = 2s;
  return o;
}

}  // namespace

TEST_CASE("TLS: loading certificates, and flags given all or none") {
  Certs certs;
  auto none = net::TlsFromFlags("", "", "");
  REQUIRE(none.ok());
  CHECK(*none == nullptr);
  auto partial = net::TlsFromFlags(certs.dir + "/ps.pem", "", "");
  REQUIRE_FALSE(partial.ok());
  CHECK_THAT(partial.status().message(), Catch::Contains("give all three or none"));
  auto missing =
      net::TlsContext::Load(certs.dir + "/nope.pem", certs.dir + "/ps.key", certs.dir + "/ca.pem");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(),
             Catch::StartsWith("--tls-cert " + certs.dir + "/nope.pem: "));
  auto mismatch = net::TlsContext::Load(certs.dir + "/ps.pem", certs.dir + "/worker.key",
                                        certs.dir + "/ca.pem");
  REQUIRE_FALSE(mismatch.ok());
  CHECK_THAT(mismatch.status().message(), Catch::Contains("does not match the certificate"));
}

TEST_CASE("TLS: cluster members talk, with and without a secret") {
  Certs certs;
  net::Runtime rt(2);
  auto server = EchoServer(rt, certs.Load("ps"), "s3cret");
  auto o = TlsClient(server->port(), certs.Load("worker"));
  o.identity.secret = "s3cret";
  auto c = net::Client::Connect(rt, o);
  REQUIRE(c.ok());
  CheckEcho(**c);
  std::vector<float> big(3 << 20, 0.5f);  // 12 MiB: many TLS records each way
  net::OutPayload p;
  p.Add(std::span<const float>(big));
  auto r = (*c)->CallSync(proto::Pull{}, std::move(p));
  REQUIRE(r.ok());
  REQUIRE(r->payload.size() == big.size() * 4);
  CHECK(r->payload.floats()[big.size() - 1] == 0.5f);
  // A sync-only client over TLS: its replies are still read by the I/O thread (the
  // calling thread reads only over plain TCP).
  std::vector<float> into(3);
  auto r2 = (*c)->CallSync(proto::Pull{}, net::OutPayload::Own(Floats({7, 8, 9})),
                           {std::as_writable_bytes(std::span(into))});
  REQUIRE(r2.ok());
  CHECK(r2->payload_in_place);
  CHECK(into == std::vector<float>{7, 8, 9});
  CHECK((*c)->caller_reads_for_testing() == 0);

  auto plain_server = EchoServer(rt, certs.Load("ps"));
  auto c2 = net::Client::Connect(rt, TlsClient(plain_server->port(), certs.Load("worker")));
  REQUIRE(c2.ok());
  CheckEcho(**c2);
}

TEST_CASE("TLS: a peer without a valid certificate is refused, both sides say why") {
  Certs certs;
  net::Runtime rt(2);
  CaptureStderr log(certs.dir);
  // The intruder knows the cluster CA's certificate (it is no secret) but holds a
  // certificate of its own CA.
  SECTION("client certificate from another CA") {
    auto server = EchoServer(rt, certs.Load("ps"));
    auto c = net::Client::Connect(rt, TlsClient(server->port(), certs.Load("other/intruder")));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kPermissionDenied);
    CHECK_THAT(c.status().message(), Catch::StartsWith("ps:0 refused the TLS connection: "));
    CHECK_THAT(c.status().message(), Catch::Contains("unknown ca"));
    CHECK(log.WaitFor("in its handshake: TLS handshake failed: certificate verify failed"));
  }
  SECTION("server certificate from another CA") {
    auto server = EchoServer(rt, certs.Load("other/intruder"));
    auto c = net::Client::Connect(rt, TlsClient(server->port(), certs.Load("worker")));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kPermissionDenied);
    CHECK_THAT(c.status().message(),
               Catch::StartsWith("ps:0: TLS handshake failed: certificate verify failed ("));
    CHECK(log.WaitFor("in its handshake: TLS handshake failed"));
  }
  SECTION("client without TLS") {
    auto server = EchoServer(rt, certs.Load("ps"));
    auto c = net::Client::Connect(rt, TlsClient(server->port(), nullptr));
    REQUIRE_FALSE(c.ok());
    CHECK(log.WaitFor("in its handshake: TLS handshake failed"));
    CHECK_THAT(c.status().message(),
               Catch::EndsWith("ps:0 closed the connection (does it require TLS, --tls-cert?)"));
  }
  SECTION("server without TLS") {
    auto server = EchoServer(rt, nullptr);
    auto c = net::Client::Connect(rt, TlsClient(server->port(), certs.Load("worker")));
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.status().message(),
               Catch::Contains("closed the connection in the TLS handshake (does it use TLS?)"));
    CHECK(log.WaitFor("the peer speaks TLS; this task runs without --tls-cert"));
  }
}

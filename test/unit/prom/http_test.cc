// The /metrics endpoint over 127.0.0.1: GET and HEAD of /metrics, 404/405/400/431, a
// request head that never ends, idle connections over the limit — and after each, a
// normal scrape still succeeds. Waits are bounded by the server's own timeout.
#include <catch2/catch.hpp>

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "libps/prom/http.h"

using namespace ps;
using namespace ps::prom;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// A blocking client connection to the server.
struct RawClient {
  explicit RawClient(uint16_t port) : socket(io) {
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  void Send(const std::string& bytes) { asio::write(socket, asio::buffer(bytes)); }
  // Everything until the server closes the connection.
  std::string ReadAll() {
    std::string out;
    boost::system::error_code ec;
    asio::read(socket, asio::dynamic_buffer(out), ec);
    return out;
  }
  asio::io_context io;
  tcp::socket socket;
};

std::string Exchange(uint16_t port, const std::string& request) {
  RawClient c(port);
  c.Send(request);
  return c.ReadAll();
}

std::shared_ptr<Registry> TestRegistry() {
  auto r = std::make_shared<Registry>(Labels{{"task_type", "ps"}, {"task_index", "0"}});
  r->Counter("pstrain_test_total", "A test counter.").Add(5);
  return r;
}

void CheckScrape(uint16_t port, const Registry& registry) {
  auto r = HttpGet("127.0.0.1", port, "/metrics", 5s);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->body == registry.Render());
}

}  // namespace

TEST_CASE("HttpRespond: /metrics, other paths and methods, malformed request lines") {
  Registry r;
  r.Gauge("g", "G.").Set(2);
  const std::string ok = HttpRespond("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", r);
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") !=
        std::string::npos);
  CHECK(ok.find("\r\nContent-Length: " + std::to_string(r.Render().size()) + "\r\n") !=
        std::string::npos);
  CHECK(ok.substr(ok.find("\r\n\r\n") + 4) == r.Render());
  CHECK(HttpRespond("GET /metrics?name[]=x HTTP/1.0\r\n\r\n", r).rfind("HTTP/1.1 200 ", 0) == 0);
  const std::string head = HttpRespond("HEAD /metrics HTTP/1.1\r\n\r\n", r);
  CHECK(head.rfind("HTTP/1.1 200 ", 0) == 0);
  CHECK(head.substr(head.find("\r\n\r\n") + 4).empty());
  CHECK(HttpRespond("GET / HTTP/1.1\r\n\r\n", r).rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(HttpRespond("GET /metricsx HTTP/1.1\r\n\r\n", r).rfind("HTTP/1.1 404 ", 0) == 0);
  const std::string post = HttpRespond("POST /metrics HTTP/1.1\r\n\r\n", r);
  CHECK(post.rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(post.find("\r\nAllow: GET, HEAD\r\n") != std::string::npos);
  for (const char* bad :
       {"", "GET\r\n\r\n", "GET /metrics\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n",
        "GET /a b HTTP/1.1\r\n\r\n", "\x16\x03\x01\x02\x00\r\n\r\n"}) {
    INFO(bad);
    CHECK(HttpRespond(bad, r).rfind("HTTP/1.1 400 ", 0) == 0);
  }
}

TEST_CASE("the endpoint serves /metrics over HTTP and answers other requests without stopping") {
  auto registry = TestRegistry();
  HttpOptions options;
  options.timeout = 500ms;
  options.max_request_bytes = 1024;
  auto server = MetricsServer::Start("127.0.0.1", 0, registry, options);
  REQUIRE(server.ok());
  const uint16_t port = (*server)->port();
  REQUIRE(port != 0);

  auto r = HttpGet("127.0.0.1", port, "/metrics", 5s);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->body.find("pstrain_test_total{task_type=\"ps\",task_index=\"0\"} 5\n") !=
        std::string::npos);
  CHECK(r->headers.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);

  auto missing = HttpGet("127.0.0.1", port, "/", 5s);
  REQUIRE(missing.ok());
  CHECK(missing->status == 404);

  SECTION("a method other than GET or HEAD") {
    CHECK(Exchange(port, "DELETE /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 ", 0) == 0);
  }
  SECTION("random bytes") {
    CHECK(
        Exchange(port, std::string("\x00\xff\x10garbage\r\n\r\n", 14)).rfind("HTTP/1.1 400 ", 0) ==
        0);
  }
  SECTION("a request head over the limit is refused before it ends") {
    RawClient c(port);
    c.Send("GET /metrics HTTP/1.1\r\nX-Long: " + std::string(4000, 'a'));
    CHECK(c.ReadAll().rfind("HTTP/1.1 431 ", 0) == 0);
  }
  SECTION(
      "a client that never finishes its request is cut off by the timeout; others are served meanwhile") {
    RawClient slow(port);
    slow.Send("GET /metrics HTTP/1.1\r\n");
    CheckScrape(port, *registry);
    CHECK(slow.ReadAll().empty());  // closed without an answer after options.timeout
  }
  SECTION("connections over the limit are closed; the endpoint recovers when they end") {
    options.max_connections = 2;
    auto small = MetricsServer::Start("127.0.0.1", 0, registry, options);
    REQUIRE(small.ok());
    const uint16_t p = (*small)->port();
    RawClient idle1(p), idle2(p);
    idle1.Send("G");
    idle2.Send("G");
    // Connections are accepted in order: both idle ones are counted when the third is.
    RawClient third(p);
    third.Send("GET /metrics HTTP/1.1\r\n\r\n");
    CHECK(third.ReadAll().empty());  // closed unanswered at once
    CHECK(idle1.ReadAll().empty());
    CHECK(idle2.ReadAll().empty());
    CheckScrape(p, *registry);
  }
  // After every kind of abuse, a normal scrape still works.
  CheckScrape(port, *registry);
}

TEST_CASE("the endpoint fails to start on an address it cannot use, naming it") {
  auto registry = TestRegistry();
  auto first = MetricsServer::Start("127.0.0.1", 0, registry);
  REQUIRE(first.ok());
  const uint16_t port = (*first)->port();
  auto again = MetricsServer::Start("127.0.0.1", port, registry);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  auto bad = MetricsServer::Start("no.such.host.invalid", 0, registry);
  CHECK_FALSE(bad.ok());
}

TEST_CASE("HttpGet fails cleanly when nothing listens") {
  auto registry = TestRegistry();
  uint16_t port = 0;
  {
    auto s = MetricsServer::Start("127.0.0.1", 0, registry);
    REQUIRE(s.ok());
    port = (*s)->port();
  }
  auto r = HttpGet("127.0.0.1", port, "/metrics", 2s);
  CHECK_FALSE(r.ok());
}

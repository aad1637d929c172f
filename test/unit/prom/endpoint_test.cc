// The /metrics endpoint over 127.0.0.1: GET and HEAD of /metrics (several scrapes on one
// keep-alive connection), 404 and 405, the server's own answers (400, 431, 503) and
// timeouts, and its figures as pstrain_http_* — and after each, a normal scrape still
// succeeds.
#include <catch2/catch.hpp>

#include <utility>

#include "libps/http/client.h"
#include "libps/prom/endpoint.h"
#include "test/unit/http/http_test_util.h"

using namespace ps;
using namespace ps::prom;
using namespace ps::httptest;

namespace {

std::shared_ptr<Registry> TestRegistry() {
  auto r = std::make_shared<Registry>(Labels{{"task_type", "ps"}, {"task_index", "0"}});
  r->Counter("pstrain_test_total", "A test counter.").Add(5);
  return r;
}

http::Request Req(const std::string& method, const std::string& path) {
  http::Request r;
  r.method = method;
  r.path = path;
  r.target = path;
  return r;
}

std::string Scrape(uint16_t port) {
  auto r = http::Get("127.0.0.1", port, "/metrics", 5s);
  REQUIRE(r.ok());
  REQUIRE(r->status == 200);
  return r->body;
}

std::unique_ptr<MetricsEndpoint> Start(std::shared_ptr<Registry> registry,
                                       http::ServerOptions options) {
  auto e = MetricsEndpoint::Start(std::move(options), std::move(registry));
  REQUIRE(e.ok());
  REQUIRE((*e)->port() != 0);
  return std::move(*e);
}

}  // namespace

TEST_CASE("MetricsResponse: /metrics, other paths and methods") {
  Registry r;
  r.Gauge("g", "G.").Set(2);
  const http::Response ok = MetricsResponse(Req("GET", "/metrics"), r);
  CHECK(ok.status == 200);
  CHECK(ok.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(ok.body == r.Render());
  CHECK(MetricsResponse(Req("HEAD", "/metrics"), r).status == 200);  // the server drops the body
  CHECK(MetricsResponse(Req("GET", "/"), r).status == 404);
  CHECK(MetricsResponse(Req("GET", "/metricsx"), r).status == 404);
  const http::Response post = MetricsResponse(Req("POST", "/metrics"), r);
  CHECK(post.status == 405);
  REQUIRE(http::FindField(post.headers, "Allow") != nullptr);
  CHECK(*http::FindField(post.headers, "Allow") == "GET, HEAD");
}

TEST_CASE("the endpoint serves /metrics and answers other requests without stopping") {
  auto registry = TestRegistry();
  http::ServerOptions options = MetricsServerOptions("127.0.0.1", 0);
  options.read_timeout = 300ms;
  options.header_limit = 1024;
  auto endpoint = Start(registry, options);
  const uint16_t port = endpoint->port();

  auto r = http::Get("127.0.0.1", port, "/metrics?name[]=x", 5s);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->body.find("pstrain_test_total{task_type=\"ps\",task_index=\"0\"} 5\n") !=
        std::string::npos);
  REQUIRE(r->Header("Content-Type") != nullptr);
  CHECK(*r->Header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  auto missing = http::Get("127.0.0.1", port, "/", 5s);
  REQUIRE(missing.ok());
  CHECK(missing->status == 404);
  CHECK(missing->body == "not found; metrics are at /metrics\n");

  SECTION("several scrapes and a HEAD on one keep-alive connection") {
    RawClient c(port);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(c.Send(Get("/metrics")));
      const RawResponse s = c.ReadResponse();
      CHECK(s.status == 200);
      CHECK(s.body.find("pstrain_test_total") != std::string::npos);
    }
    REQUIRE(c.Send("HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\n"));
    const RawResponse head = c.ReadResponse(/*head_only=*/true);
    CHECK(head.status == 200);
    CHECK(head.body.empty());
    REQUIRE(c.Send(Get("/metrics")));
    CHECK(c.ReadResponse().status == 200);
  }
  SECTION("a method other than GET or HEAD") {
    RawClient c(port);
    REQUIRE(c.Send("DELETE /metrics HTTP/1.1\r\nHost: t\r\n\r\n"));
    const RawResponse d = c.ReadResponse();
    CHECK(d.status == 405);
    CHECK(d.HasField("Allow: GET, HEAD"));
  }
  SECTION("random bytes") {
    RawClient c(port);
    REQUIRE(c.Send(std::string("\x00\xff\x10garbage\r\n\r\n", 14)));
    CHECK(c.ReadResponse().status == 400);
  }
  SECTION("a request head over the limit is refused before it ends") {
    RawClient c(port);
    REQUIRE(c.Send("GET /metrics HTTP/1.1\r\nX-Long: " + std::string(4000, 'a')));
    CHECK(c.ReadResponse().status == 431);
  }
  SECTION("a client that never finishes its request is cut off; others are served meanwhile") {
    RawClient slow(port);
    REQUIRE(slow.Send("GET /metrics HTTP/1.1\r\n"));
    Scrape(port);
    CHECK(slow.WaitEof());  // closed without an answer after read_timeout
  }
  SECTION("connections over the limit get 503; the endpoint recovers when they end") {
    options.max_connections = 2;
    options.read_timeout = 60s;
    auto small = Start(registry, options);
    const uint16_t p = small->port();
    auto idle1 = std::make_unique<RawClient>(p);
    RawClient idle2(p);
    REQUIRE(idle1->Send("G"));
    REQUIRE(idle2.Send("G"));
    RawClient third(p);
    CHECK(third.ReadResponse().status == 503);
    idle1.reset();
    third.Close();
    REQUIRE(WaitUntil([&] { return small->server().stats().connections == 1; }));
    const std::string text = Scrape(p);
    CHECK(text.find("pstrain_http_refused_connections_total{task_type=\"ps\",task_index=\"0\","
                    "server=\"metrics\"} 1\n") != std::string::npos);
  }
  // After every kind of abuse, a normal scrape still works.
  CHECK(Scrape(port).find("pstrain_test_total") != std::string::npos);
}

TEST_CASE("the endpoint's own figures: responses by class, durations, connections") {
  auto registry = TestRegistry();
  auto endpoint = Start(registry, MetricsServerOptions("127.0.0.1", 0));
  const uint16_t port = endpoint->port();
  Scrape(port);
  REQUIRE(http::Get("127.0.0.1", port, "/nothing", 5s).ok());
  // The first two are counted and their connections closed (a response reaches the
  // client a moment before it is counted).
  REQUIRE(WaitUntil([&] {
    const auto s = endpoint->server().stats();
    return s.responses == 2 && s.connections == 0;
  }));
  const std::string text = Scrape(port);  // rendered while the third response is written
  const std::string labels = "task_type=\"ps\",task_index=\"0\",server=\"metrics\"";
  CHECK(text.find("pstrain_http_responses_total{" + labels + ",code=\"2xx\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("pstrain_http_responses_total{" + labels + ",code=\"4xx\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("pstrain_http_request_duration_seconds_count{" + labels + "} 2\n") !=
        std::string::npos);
  CHECK(text.find("pstrain_http_connections{" + labels + "} 1\n") != std::string::npos);
  CHECK(text.find("# TYPE pstrain_http_request_duration_seconds histogram\n") != std::string::npos);
}

TEST_CASE("the endpoint fails to start on an address it cannot use, naming it") {
  auto registry = TestRegistry();
  auto first = Start(registry, MetricsServerOptions("127.0.0.1", 0));
  const uint16_t port = first->port();
  auto again = MetricsEndpoint::Start(MetricsServerOptions("127.0.0.1", port), registry);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().message().find("metrics endpoint 127.0.0.1:" + std::to_string(port)) !=
        std::string::npos);
  CHECK_FALSE(
      MetricsEndpoint::Start(MetricsServerOptions("no.such.host.invalid", 0), registry).ok());
}

// The HTTP server over 127.0.0.1 with raw sockets: keep-alive and pipelining, HTTP/1.0,
// HEAD, limits (413, 431), Expect: 100-continue both ways, malformed requests (400) that
// never disturb another connection, the read and idle timeouts, the connection cap,
// Drain, the per-request hook and counters, and the blocking client.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "libps/http/client.h"
#include "libps/http/server.h"
#include "test/unit/http/http_test_util.h"

using namespace ps;
using namespace ps::http;
using namespace ps::httptest;

namespace {

// Answers "METHOD path query body-bytes x-test"; /throw and /throw-int throw, /bad-status
// answers 42.
Response Echo(const Request& r) {
  if (r.path == "/throw") throw std::runtime_error("boom");
  if (r.path == "/bad-status") return Response::Text(42, "no such status");
  if (r.path == "/throw-int") throw 42;
  const std::string* x = r.Header("x-test");
  return Response::Text(200, r.method + " " + r.path + " " + r.query + " " +
                                 std::to_string(r.body.size()) + " " + (x ? *x : "-"));
}

// Records what on_request reports.
struct Recorder {
  std::mutex mu;
  std::map<int, int> by_status;
  std::vector<Served> all;  // method and path not kept (views)
  std::function<void(const Served&)> Hook() {
    return [this](const Served& s) {
      std::lock_guard lock(mu);
      ++by_status[s.status];
      all.push_back(s);
    };
  }
  int Count(int status) {
    std::lock_guard lock(mu);
    return by_status[status];
  }
};

std::unique_ptr<Server> StartServer(ServerOptions o, Handler h = Echo) {
  auto s = Server::Start(std::move(o), std::move(h));
  REQUIRE(s.ok());
  REQUIRE((*s)->port() != 0);
  return std::move(*s);
}

}  // namespace

TEST_CASE("keep-alive: several requests on one connection, pipelined too; HTTP/1.0 closes") {
  Recorder rec;
  ServerOptions o;
  o.threads = 2;
  o.on_request = rec.Hook();
  auto server = StartServer(o);
  RawClient c(server->port());
  for (int i = 0; i < 3; ++i) {
    REQUIRE(c.Send(Get("/a/b?x=" + std::to_string(i), "X-Test: t" + std::to_string(i) + "\r\n")));
    const RawResponse r = c.ReadResponse();
    REQUIRE(r.complete);
    CHECK(r.status == 200);
    CHECK(r.body == "GET /a/b x=" + std::to_string(i) + " 0 t" + std::to_string(i));
    CHECK(r.HasField("Content-Type: text/plain; charset=utf-8"));
    CHECK(r.head.find("Connection: close") == std::string::npos);
  }
  // Two requests in one write, the second with a body: answered in order.
  REQUIRE(c.Send(Get("/one") + Post("/two", "hello")));
  const RawResponse one = c.ReadResponse();
  const RawResponse two = c.ReadResponse();
  CHECK(one.body == "GET /one  0 -");
  CHECK(two.body == "POST /two  5 -");
  // HEAD: the length of the body, no body.
  REQUIRE(c.Send("HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n"));
  const RawResponse head = c.ReadResponse(/*head_only=*/true);
  CHECK(head.status == 200);
  CHECK(head.HasField("Content-Length: 12"));  // "HEAD /h  0 -"
  REQUIRE(c.Send(Get("/after-head")));
  CHECK(c.ReadResponse().body == "GET /after-head  0 -");
  // "Connection: close" from the client: answered, then closed.
  REQUIRE(c.Send(Get("/last", "Connection: close\r\n")));
  const RawResponse last = c.ReadResponse();
  CHECK(last.status == 200);
  CHECK(last.HasField("Connection: close"));
  CHECK(c.WaitEof());

  RawClient old(server->port());
  REQUIRE(old.Send("GET /old HTTP/1.0\r\n\r\n"));
  const RawResponse r10 = old.ReadResponse();
  CHECK(r10.status == 200);
  CHECK(r10.head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(old.WaitEof());

  CHECK(rec.Count(200) == 9);
  const Server::Stats s = server->stats();
  CHECK(s.responses == 9);
  CHECK(s.responses_by_class[2] == 9);
  CHECK(s.accepted_connections == 2);
}

TEST_CASE("request bodies: several MB within the limit; over it 413, at once or when chunked") {
  Recorder rec;
  ServerOptions o;
  o.body_limit = 6 << 20;
  o.on_request = rec.Hook();
  auto server = StartServer(o);

  SECTION("5 MB in, 5 MB out on one keep-alive connection") {
    auto big_server = StartServer(o, [](const Request& r) {
      Response res = Response::Json(200, r.body);
      res.headers.emplace_back("X-Size", std::to_string(r.body.size()));
      return res;
    });
    std::string body(5 << 20, 'x');
    for (size_t i = 0; i < body.size(); i += 4096) body[i] = static_cast<char>('a' + i % 26);
    RawClient c(big_server->port());
    for (int i = 0; i < 2; ++i) {
      REQUIRE(c.Send(Post("/v1/models/m:predict", body)));
      const RawResponse r = c.ReadResponse();
      REQUIRE(r.complete);
      CHECK(r.status == 200);
      CHECK(r.HasField("Content-Type: application/json"));
      CHECK(r.HasField("X-Size: " + std::to_string(body.size())));
      CHECK(r.body == body);
    }
  }
  SECTION("a Content-Length over the limit is answered 413 before the body is sent") {
    RawClient c(server->port());
    REQUIRE(c.Send("POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                   std::to_string((6 << 20) + 1) + "\r\n\r\n"));
    const RawResponse r = c.ReadResponse();
    CHECK(r.status == 413);
    CHECK(r.HasField("Connection: close"));
    CHECK(c.WaitEof());
    CHECK(rec.Count(413) == 1);
  }
  SECTION("a chunked body is refused when it passes the limit") {
    RawClient c(server->port());
    REQUIRE(c.Send("POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
    const std::string chunk(1 << 20, 'c');
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", chunk.size());
    bool sent = true;
    for (int i = 0; i < 7 && sent; ++i) sent = c.Send(size_line + chunk + "\r\n");
    const RawResponse r = c.ReadResponse();
    CHECK(r.status == 413);
  }
  SECTION("a chunked body within the limit is decoded") {
    RawClient c(server->port());
    REQUIRE(c.Send(
        "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
    CHECK(c.ReadResponse().body == "POST /c  5 -");
  }
}

TEST_CASE("Expect: 100-continue: 100 then the body; or 413 at once without the body") {
  ServerOptions o;
  o.body_limit = 1000;
  auto server = StartServer(o);
  const std::string expect = "Expect: 100-continue\r\n";

  RawClient ok(server->port());
  REQUIRE(ok.Send("POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 600\r\n" + expect + "\r\n"));
  const RawResponse go = ok.ReadResponse();
  REQUIRE(go.complete);
  CHECK(go.status == 100);
  CHECK(go.head == "HTTP/1.1 100 Continue\r\n");
  REQUIRE(ok.Send(std::string(600, 'b')));
  const RawResponse done = ok.ReadResponse();
  CHECK(done.status == 200);
  CHECK(done.body == "POST /e  600 -");

  RawClient over(server->port());
  REQUIRE(over.Send("POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n" + expect + "\r\n"));
  const RawResponse refused = over.ReadResponse();  // no body byte was sent
  CHECK(refused.status == 413);
  CHECK(refused.HasField("Connection: close"));
  CHECK(over.WaitEof());

  // The first connection still works.
  REQUIRE(ok.Send(Get("/still")));
  CHECK(ok.ReadResponse().status == 200);
}

TEST_CASE("a request head over header_limit gets 431; malformed requests 400; others unharmed") {
  Recorder rec;
  ServerOptions o;
  o.header_limit = 1024;
  o.on_request = rec.Hook();
  auto server = StartServer(o);
  RawClient bystander(server->port());  // an open keep-alive connection through it all
  REQUIRE(bystander.Send(Get("/before")));
  CHECK(bystander.ReadResponse().status == 200);

  SECTION("431") {
    RawClient c(server->port());
    REQUIRE(c.Send("GET / HTTP/1.1\r\nHost: t\r\nX-Long: " + std::string(4000, 'a') + "\r\n\r\n"));
    const RawResponse r = c.ReadResponse();
    CHECK(r.status == 431);
    CHECK(c.WaitEof(/*allow_data=*/true));
    CHECK(rec.Count(431) == 1);
  }
  SECTION("400") {
    for (const std::string& bad :
         {std::string("GET\r\n\r\n"), std::string("GET /a b c HTTP/1.1\r\n\r\n"),
          std::string("GET / HTTP/2.0\r\n\r\n"), std::string("\x16\x03\x01\x02\x00\r\n\r\n", 9),
          std::string("\x00\xff\x10garbage\r\n\r\n", 14),
          std::string("POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
          std::string("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
          std::string("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")}) {
      INFO(bad);
      RawClient c(server->port());
      REQUIRE(c.Send(bad));
      const RawResponse r = c.ReadResponse();
      CHECK(r.status == 400);
      CHECK(c.WaitEof(/*allow_data=*/true));
    }
    CHECK(rec.Count(400) == 8);
  }
  SECTION("the handler throws, or answers a status that is none: 500") {
    RawClient c(server->port());
    REQUIRE(c.Send(Get("/throw")));
    CHECK(c.ReadResponse().status == 500);
    RawClient d(server->port());
    REQUIRE(d.Send(Get("/bad-status")));
    CHECK(d.ReadResponse().status == 500);
    RawClient e(server->port());
    REQUIRE(e.Send(Get("/throw-int")));
    CHECK(e.ReadResponse().status == 500);
  }
  REQUIRE(bystander.Send(Get("/after")));
  const RawResponse after = bystander.ReadResponse();
  CHECK(after.status == 200);
  CHECK(after.body == "GET /after  0 -");
}

TEST_CASE("abuse: random bytes, truncated requests and abrupt closes end only their connection") {
  ServerOptions o;
  o.threads = 2;
  o.read_timeout = 2s;
  auto server = StartServer(o);
  RawClient bystander(server->port());
  std::mt19937 rng(7);  // seeded: the same bytes every run
  for (int i = 0; i < 40; ++i) {
    std::string junk(1 + rng() % 300, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    junk += "\r\n\r\n";
    RawClient c(server->port());
    REQUIRE(c.Send(junk));
    const RawResponse r = c.ReadResponse();
    INFO(i);
    // Junk that parses as the start of a request waits for its end: then only the close.
    if (r.complete) CHECK(r.status == 400);
  }
  for (const std::string& cut :
       {std::string("POST /p HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly a part"),
        std::string("GET /p HTTP/1.1\r\nHost: t\r\nX-Half: "),
        std::string("POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc")}) {
    RawClient c(server->port());
    REQUIRE(c.Send(cut));
    c.Close();  // gone mid-request
  }
  REQUIRE(bystander.Send(Get("/still-here")));
  const RawResponse r = bystander.ReadResponse();
  CHECK(r.status == 200);
  CHECK(r.body == "GET /still-here  0 -");
  CHECK(WaitUntil([&] { return server->stats().connections == 1; }));
}

TEST_CASE(
    "timeouts: a slow request is cut off after read_timeout; an idle one after idle_timeout") {
  ServerOptions o;
  o.read_timeout = 200ms;
  o.idle_timeout = 300ms;
  auto server = StartServer(o);

  RawClient slow(server->port());
  REQUIRE(slow.Send("GET /slow HTTP/1.1\r\nHost: t\r\n"));  // never finished
  RawClient silent(server->port());                         // never sends a byte
  RawClient idle(server->port());
  REQUIRE(idle.Send(Get("/x")));
  CHECK(idle.ReadResponse().status == 200);
  // Meanwhile others are served.
  auto r = http::Get("127.0.0.1", server->port(), "/other", 5s);
  REQUIRE(r.ok());
  CHECK(r->status == 200);

  CHECK(slow.WaitEof());    // closed without an answer
  CHECK(silent.WaitEof());  // likewise
  CHECK(idle.WaitEof());    // keep-alive connection closed after idle_timeout
  CHECK(WaitUntil([&] { return server->stats().timeouts == 2; }));
  CHECK(WaitUntil([&] { return server->stats().connections == 0; }));
}

TEST_CASE("a client that does not read its response is cut off after write_timeout") {
  ServerOptions o;
  o.write_timeout = 200ms;
  // More than the socket buffers of both ends hold, so the write has to wait for the client.
  auto server = StartServer(
      o, [](const Request&) { return Response::Text(200, std::string(size_t{64} << 20, 'w')); });
  RawClient c(server->port());
  REQUIRE(c.Send(Get("/big")));
  CHECK(WaitUntil([&] { return server->stats().timeouts == 1; }));
  CHECK(c.WaitEof(/*allow_data=*/true));  // what was sent, then the end
  CHECK(server->stats().responses == 0);  // never written whole
}

TEST_CASE("connection cap: excess connections get 503 and are closed; room again when one ends") {
  Recorder rec;
  ServerOptions o;
  o.max_connections = 2;
  o.on_request = rec.Hook();
  auto server = StartServer(o);
  auto a = std::make_unique<RawClient>(server->port());
  RawClient b(server->port());
  REQUIRE(a->Send(Get("/a")));
  REQUIRE(b.Send(Get("/b")));
  CHECK(a->ReadResponse().status == 200);  // both are served: they were admitted
  CHECK(b.ReadResponse().status == 200);

  RawClient third(server->port());
  const RawResponse busy = third.ReadResponse();
  CHECK(busy.status == 503);
  CHECK(busy.HasField("Connection: close"));
  CHECK(busy.HasField("Retry-After: 1"));
  CHECK(third.WaitEof(/*allow_data=*/true));
  third.Close();
  CHECK(server->stats().refused_connections == 1);
  CHECK(rec.Count(503) == 1);

  a.reset();
  CHECK(WaitUntil([&] { return server->stats().connections == 1; }));
  RawClient fourth(server->port());
  REQUIRE(fourth.Send(Get("/d")));
  CHECK(fourth.ReadResponse().status == 200);
  REQUIRE(b.Send(Get("/b2")));
  CHECK(b.ReadResponse().status == 200);
}

TEST_CASE("Drain finishes a request in flight, closes idle connections and refuses new ones") {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> entered_once{false};
  ServerOptions o;
  o.threads = 2;
  auto server = StartServer(o, [&](const Request& r) {
    if (r.path == "/slow") {
      if (!entered_once.exchange(true)) entered.set_value();
      released.wait();
    }
    return Echo(r);
  });
  const uint16_t port = server->port();
  RawClient idle(port);
  REQUIRE(idle.Send(Get("/first")));
  CHECK(idle.ReadResponse().status == 200);
  RawClient busy(port);
  REQUIRE(busy.Send(Post("/slow", "payload")));
  REQUIRE(entered.get_future().wait_for(kHangGuard) == std::future_status::ready);

  auto drained = std::async(std::launch::async, [&] { return server->Drain(kHangGuard); });
  CHECK(idle.WaitEof());  // the idle keep-alive connection is closed
  CHECK(WaitUntil([&] { return TryConnect(port) == ECONNREFUSED; }));  // no longer accepting
  CHECK(drained.wait_for(0s) == std::future_status::timeout);          // still waiting
  release.set_value();
  const RawResponse r = busy.ReadResponse();
  CHECK(r.status == 200);
  CHECK(r.body == "POST /slow  7 -");
  CHECK(r.HasField("Connection: close"));
  CHECK(busy.WaitEof());
  busy.Close();
  REQUIRE(drained.wait_for(kHangGuard) == std::future_status::ready);
  CHECK(drained.get());
  server->Stop();  // idempotent after Drain
}

TEST_CASE("Drain gives up at its deadline and closes what is left") {
  ServerOptions o;
  o.read_timeout = 60s;
  auto server = StartServer(o);
  RawClient partial(server->port());
  REQUIRE(partial.Send("GET /never-finished HTTP/1.1\r\n"));  // a request begun: Drain waits
  REQUIRE(WaitUntil([&] { return server->stats().connections == 1; }));
  CHECK_FALSE(server->Drain(50ms));
  CHECK(partial.WaitEof());
  CHECK(server->stats().connections == 0);
}

TEST_CASE("Start fails naming the address it cannot use; the client fails cleanly") {
  auto first = StartServer(ServerOptions{});
  ServerOptions same;
  same.port = first->port();
  same.name = "metrics endpoint";
  auto again = Server::Start(same, Echo);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().message().find("metrics endpoint 127.0.0.1:" +
                                      std::to_string(first->port())) != std::string::npos);
  ServerOptions bad;
  bad.host = "no.such.host.invalid";
  CHECK_FALSE(Server::Start(bad, Echo).ok());

  const uint16_t port = first->port();
  first->Stop();
  auto r = http::Get("127.0.0.1", port, "/", 2s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("http://127.0.0.1:" + std::to_string(port) + "/") !=
        std::string::npos);
}

TEST_CASE("the client: methods, fields and bodies both ways") {
  auto server = StartServer(ServerOptions{});
  ClientRequest req;
  req.method = "PUT";
  req.target = "/put?q=1";
  req.headers.emplace_back("X-Test", "yes");
  req.body = std::string(100000, 'z');
  auto r = Fetch("127.0.0.1", server->port(), req, 5s);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->body == "PUT /put q=1 100000 yes");
  REQUIRE(r->Header("content-type") != nullptr);
  CHECK(*r->Header("content-type") == "text/plain; charset=utf-8");
}

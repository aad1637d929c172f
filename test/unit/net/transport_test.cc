// Transport tests over 127.0.0.1 with kernel-chosen ports: handshake rules, calls,
// deadlines, and the protocol-abuse suite (after every abuse a normal call succeeds).
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <future>
#include <random>
#include <stop_token>
#include <thread>

#include "libps/proto/pstrain_generated.h"
#include "test/unit/net/net_test_util.h"

using namespace ps;
using namespace ps::nettest;
using namespace std::chrono_literals;

namespace {

// Echo service: Pull -> PullReply carrying the request payload back.
// A Stop request is held (never answered) so deadlines can be tested.
struct EchoServer {
  explicit EchoServer(net::Runtime& rt, std::optional<std::string> secret = std::nullopt) {
    net::ServerOptions o;
    o.identity = Id(proto::Role::kPs, 0, kCluster, secret);
    o.limits.max_payload_bytes = 64u << 20;
    auto s = net::Server::Start(rt, o, [this](net::Request req, net::Responder resp) {
      if (std::holds_alternative<proto::Stop>(req.envelope.body)) {
        std::lock_guard lock(mu);
        held.push_back(std::move(resp));
        return;
      }
      proto::PullReply r;
      r.item_floats.push_back(req.payload.size() / 4);
      resp.Reply(r, net::OutPayload::Own(std::move(req.payload)));
    });
    REQUIRE(s.ok());
    server = std::move(*s);
  }
  std::mutex mu;
  std::vector<net::Responder> held;
  std::unique_ptr<net::Server> server;
};

}  // namespace

TEST_CASE("calls round-trip, in place and in parallel") {
  net::Runtime rt(2);
  EchoServer echo(rt);
  auto c = net::Client::Connect(rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 1)));
  REQUIRE(c.ok());
  CheckEcho(**c);

  // reply_into: the payload lands directly in caller memory, split over two spans.
  std::vector<float> a(3), b(2);
  auto r =
      (*c)->CallSync(proto::Pull{}, net::OutPayload::Own(Floats({1, 2, 3, 4, 5})),
                     {std::as_writable_bytes(std::span(a)), std::as_writable_bytes(std::span(b))});
  REQUIRE(r.ok());
  CHECK(r->payload_in_place);
  CHECK(a == std::vector<float>{1, 2, 3});
  CHECK(b == std::vector<float>{4, 5});

  std::vector<std::future<Result<net::Reply>>> futures;
  for (int i = 0; i < 200; ++i) {
    futures.push_back((*c)->Call(proto::Pull{}, net::OutPayload::Own(Floats({float(i)}))));
  }
  for (int i = 0; i < 200; ++i) {
    auto rr = futures[i].get();
    REQUIRE(rr.ok());
    CHECK(rr->payload.floats()[0] == float(i));
  }
  CHECK((*c)->health().ok());
}

TEST_CASE("handshake refuses other clusters and wrong secrets") {
  net::Runtime rt(2);
  SECTION("different cluster id") {
    EchoServer echo(rt);
    auto c = net::Client::Connect(
        rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0, 0xBAD)));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kPermissionDenied);
    CHECK_THAT(c.status().message(), Catch::Contains("cluster"));
  }
  SECTION("same secret is accepted") {
    EchoServer echo(rt, "s3cret");
    auto c = net::Client::Connect(
        rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0, kCluster, "s3cret")));
    REQUIRE(c.ok());
    CheckEcho(**c);
  }
  SECTION("wrong secret") {
    EchoServer echo(rt, "s3cret");
    auto c = net::Client::Connect(
        rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0, kCluster, "guess")));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kPermissionDenied);
    CHECK_THAT(c.status().message(), Catch::Contains("secret mismatch"));
  }
  SECTION("client without the secret the server requires") {
    EchoServer echo(rt, "s3cret");
    auto c = net::Client::Connect(rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0)));
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.status().message(), Catch::Contains("requires a cluster secret"));
  }
  SECTION("client with a secret, server without") {
    EchoServer echo(rt);
    auto c = net::Client::Connect(
        rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0, kCluster, "x")));
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.status().message(), Catch::Contains("has no secret"));
  }
}

TEST_CASE("an unreachable peer fails after the deadline, naming it") {
  net::Runtime rt(1);
  uint16_t port;
  {
    EchoServer probe(rt);  // take a free port, then release it
    port = probe.server->port();
  }
  auto o = ClientOpts(port, Id(proto::Role::kWorker, 0));
  o.peer_name = "ps:3";
  o.connect_deadline = 300ms;
  auto c = net::Client::Connect(rt, o);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kUnavailable);
  CHECK_THAT(c.status().message(), Catch::StartsWith("cannot reach ps:3 at 127.0.0.1:"));
}

TEST_CASE("a stop ends Connect at once: between attempts, and during one (Aborted)") {
  net::Runtime rt(1);
  SECTION("a refused port, retried until a deadline far away") {
    uint16_t port;
    {
      EchoServer probe(rt);  // take a free port, then release it
      port = probe.server->port();
    }
    std::stop_source stop;
    auto o = ClientOpts(port, Id(proto::Role::kChief, 0));
    o.peer_name = "ps:1";
    o.connect_deadline = 120s;
    o.stop = stop.get_token();
    auto fut = std::async(std::launch::async, [&] { return net::Client::Connect(rt, o); });
    stop.request_stop();
    REQUIRE(fut.wait_for(10s) == std::future_status::ready);
    auto c = fut.get();
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kAborted);
    CHECK_THAT(c.status().message(), Catch::StartsWith("stopped while connecting to ps:1 at"));
  }
  SECTION("a peer that accepts but never answers the handshake") {
    RawListener silent;
    std::stop_source stop;
    auto o = ClientOpts(silent.port, Id(proto::Role::kChief, 0));
    o.connect_deadline = 120s;
    o.handshake_timeout = 60s;
    o.stop = stop.get_token();
    auto fut = std::async(std::launch::async, [&] { return net::Client::Connect(rt, o); });
    RawClient accepted(silent.Accept());  // the attempt is under way: its handshake waits
    REQUIRE(accepted.fd >= 0);
    stop.request_stop();
    REQUIRE(fut.wait_for(10s) == std::future_status::ready);
    auto c = fut.get();
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kAborted);
  }
}

TEST_CASE("a call that gets no reply hits its deadline; a closed peer breaks the client") {
  net::Runtime rt(2);
  auto echo = std::make_unique<EchoServer>(rt);
  auto c = net::Client::Connect(rt, ClientOpts(echo->server->port(), Id(proto::Role::kWorker, 0)));
  REQUIRE(c.ok());
  auto r = (*c)->CallSync(proto::Stop{}, {}, {}, 200ms);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kDeadlineExceeded);
  CHECK_THAT(r.status().message(), Catch::Contains("Stop did not complete within 200 ms"));
  CheckEcho(**c);

  std::promise<Status> broken;
  (*c)->OnBroken([&](const Status& st) { broken.set_value(st); });
  auto held = (*c)->Call(proto::Stop{});
  {
    // Under the lock: the handler may be holding the second Stop at this very moment.
    std::lock_guard lock(echo->mu);
    echo->held.clear();  // the held responders answer "dropped" ...
  }
  echo.reset();  // ... and the server goes away
  auto st = broken.get_future().get();
  CHECK(st.code() == Code::kUnavailable);
  CHECK_THAT(st.message(), Catch::Contains("ps:0"));
  auto after = (*c)->CallSync(proto::Pull{});
  CHECK_FALSE(after.ok());
}

TEST_CASE(
    "a short deadline registered after a long one still fires on time; the long call stays pending") {
  net::Runtime rt(2);
  EchoServer echo(rt);
  auto c = net::Client::Connect(rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0)));
  REQUIRE(c.ok());
  auto long_call = (*c)->Call(proto::Stop{}, {}, {}, 600s);
  const auto start = std::chrono::steady_clock::now();
  auto r = (*c)->CallSync(proto::Stop{}, {}, {}, 100ms);  // the deadline sweeper must wake for it
  // Well before the sweeper's 1 s fallback wake-up (a generous bound, not a benchmark).
  CHECK(std::chrono::steady_clock::now() - start < 900ms);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kDeadlineExceeded);
  CHECK_THAT(r.status().message(), Catch::Contains("Stop did not complete within 100 ms"));
  CHECK(long_call.wait_for(0s) == std::future_status::timeout);
  // Both Stops reach the handler (a condition; 20 s guards a hung test only), then both
  // are answered: the late reply of the expired call is dropped, the long call ends.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    {
      std::lock_guard lock(echo.mu);
      if (echo.held.size() == 2 || std::chrono::steady_clock::now() > deadline) {
        for (auto& h : echo.held) h.Reply(proto::Ack{});
        echo.held.clear();
        break;
      }
    }
    std::this_thread::yield();
  }
  CHECK(long_call.get().ok());
  CheckEcho(**c);
}

TEST_CASE("concurrent callers, mixed sizes, inline and pool handlers: every reply is its own") {
  // Frames from 4 B to 4 MiB: small ones are written by the calling thread, large ones
  // overflow the socket buffers and are finished by the writer; replies straddle the
  // read-ahead buffer's boundaries.
  net::Runtime rt(2);
  net::ServerOptions o;
  o.identity = Id(proto::Role::kPs, 0);
  o.limits.max_payload_bytes = 64u << 20;
  o.run_inline = [](const net::Request& req) -> std::shared_ptr<void> {
    return req.payload.size() <= 64 * 1024 ? std::make_shared<int>(0) : nullptr;
  };
  auto server = net::Server::Start(rt, o, [](net::Request req, net::Responder resp) {
    proto::PullReply r;
    r.item_floats.push_back(req.payload.size() / 4);
    resp.Reply(r, net::OutPayload::Own(std::move(req.payload)));
  });
  REQUIRE(server.ok());
  auto c = net::Client::Connect(rt, ClientOpts((*server)->port(), Id(proto::Role::kWorker, 0)));
  REQUIRE(c.ok());
  constexpr int kThreads = 4, kCalls = 60;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int i = 0; i < kCalls; ++i) {
        const size_t floats = size_t{1} << (rng() % 21);  // 4 B .. 4 MiB
        std::vector<float> data(floats);
        for (size_t k = 0; k < floats; ++k)
          data[k] = static_cast<float>(t * 1000000 + i * 1000 + k % 1000);
        std::vector<float> back(floats);
        net::OutPayload p;
        p.Add(std::span<const float>(data));
        auto r =
            (*c)->CallSync(proto::Pull{}, std::move(p), {std::as_writable_bytes(std::span(back))});
        if (!r.ok() || back != data) bad.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad.load() == 0);
  const auto st = (*server)->stats();
  CHECK(st.requests == kThreads * kCalls);
  CHECK(st.inline_requests > 0);
  CHECK(st.inline_requests < st.requests);
  CHECK((*c)->health().ok());
}

TEST_CASE(
    "frames one thread sends reach the wire in the order it sent them, large and small mixed") {
  // A large frame keeps the writer busy while the next small ones are posted to the
  // strand; a later small one must not be written directly ahead of them.
  net::Runtime rt(2);
  net::ServerOptions o;
  o.identity = Id(proto::Role::kPs, 0);
  o.limits.max_payload_bytes = 64u << 20;
  std::mutex mu;
  std::vector<uint32_t> order;  // guarded by mu
  // run_inline runs on the connection's strand in the order the requests were read.
  o.run_inline = [&](const net::Request& req) -> std::shared_ptr<void> {
    uint32_t seq = 0;
    std::memcpy(&seq, req.payload.data(), sizeof seq);
    std::lock_guard lock(mu);
    order.push_back(seq);
    return nullptr;
  };
  auto server = net::Server::Start(
      rt, o, [](net::Request, net::Responder resp) { resp.Reply(proto::Ack{}); });
  REQUIRE(server.ok());
  auto c = net::Client::Connect(rt, ClientOpts((*server)->port(), Id(proto::Role::kWorker, 0)));
  REQUIRE(c.ok());
  constexpr uint32_t kCalls = 600;
  std::vector<std::vector<uint32_t>> payloads(kCalls);
  std::atomic<uint32_t> answered{0}, failed{0};
  for (uint32_t i = 0; i < kCalls; ++i) {
    payloads[i].assign(i % 4 == 0 ? (1u << 20) / 4 : 4, i);  // 1 MiB, then three of 16 B
    net::OutPayload p;
    p.Add(std::span<const uint32_t>(payloads[i]));
    (*c)->CallAsync(proto::Pull{}, std::move(p), {}, 60s, [&](Result<net::Reply> r) {
      if (!r.ok()) failed.fetch_add(1);
      answered.fetch_add(1);
      answered.notify_all();
    });
  }
  for (uint32_t n = answered.load(); n < kCalls; n = answered.load()) answered.wait(n);
  CHECK(failed.load() == 0);
  std::lock_guard lock(mu);
  REQUIRE(order.size() == kCalls);
  uint32_t out_of_order = 0;
  for (uint32_t i = 0; i < kCalls; ++i) out_of_order += order[i] != i;
  CHECK(out_of_order == 0);
}

TEST_CASE(
    "a call whose deadline passes while its reply is being received completes, without spinning the sweeper") {
  // A raw server answers with the reply's header, envelope and part of its payload, then
  // holds the rest until the call's deadline has passed.
  RawListener listener;
  std::promise<void> partial_sent, finish;
  auto finish_f = finish.get_future();
  constexpr size_t kFloats = 1024;
  std::thread srv([&] {
    RawClient peer(listener.Accept());
    auto hello = peer.ReadFrame();
    REQUIRE(hello);
    proto::HelloReply reply;
    reply.identity = {proto::kProtocolVersion, proto::Role::kPs, 0, kCluster,
                      std::vector<uint8_t>(16, 3)};
    peer.WriteFrame(proto::Encode({1, true, 0, reply}));
    REQUIRE(peer.ReadFrame());  // HelloProof
    peer.WriteFrame(proto::Encode({2, true, 0, proto::Ack{}}));
    auto req = peer.ReadFrame();
    REQUIRE(req);
    proto::PullReply pr;
    pr.item_floats.push_back(kFloats);
    std::vector<float> payload(kFloats, 2.5f);
    peer.WriteFrame(proto::Encode({req->request_id, true, 0, pr}), kFloats * 4);
    peer.Write(payload.data(), 64);
    partial_sent.set_value();
    finish_f.wait();
    peer.Write(reinterpret_cast<const char*>(payload.data()) + 64, kFloats * 4 - 64);
    peer.WaitClosed();
  });
  net::Runtime rt(1);
  auto opts = ClientOpts(listener.port, Id(proto::Role::kWorker, 0));
  opts.heartbeat_interval = 0ms;  // the raw server reads exactly the one request
  auto c = net::Client::Connect(rt, opts);
  REQUIRE(c.ok());
  std::vector<float> into(kFloats);
  const auto start = std::chrono::steady_clock::now();
  auto call = (*c)->Call(proto::Pull{}, {}, {std::as_writable_bytes(std::span(into))}, 100ms);
  partial_sent.get_future().wait();
  // Past the deadline (time must pass here: it is what the test is about). The reply is
  // being received, so only the reader may finish the call.
  std::this_thread::sleep_until(start + 300ms);
  const uint64_t before = (*c)->sweeps_for_testing();
  std::this_thread::sleep_for(300ms);
  // A spinning sweeper passes thousands of times in 300 ms; a sleeping one once at most
  // (its 1 s fallback), twice with slack.
  CHECK((*c)->sweeps_for_testing() - before <= 2);
  CHECK(call.wait_for(0s) == std::future_status::timeout);
  finish.set_value();
  auto r = call.get();
  REQUIRE(r.ok());
  CHECK(r->payload_in_place);
  CHECK(into == std::vector<float>(kFloats, 2.5f));
  (*c)->Close();
  srv.join();
}

TEST_CASE("protocol abuse: every bad frame is answered or dropped, the server keeps serving") {
  net::Runtime rt(2);
  EchoServer echo(rt);
  const uint16_t port = echo.server->port();
  auto good = net::Client::Connect(rt, ClientOpts(port, Id(proto::Role::kWorker, 0)));
  REQUIRE(good.ok());

  SECTION("garbage before the handshake") {
    RawClient raw(port);
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    raw.Write(junk.data(), junk.size());
    CHECK_FALSE(raw.ReadFrame());
  }
  SECTION("request before the handshake") {
    RawClient raw(port);
    raw.WriteFrame(proto::Encode({1, false, 0, proto::Pull{}}));
    CHECK(IsError(raw.ReadFrame()));
    CHECK_FALSE(raw.ReadFrame());
  }
  SECTION("zero envelope length") {
    RawClient raw(port);
    raw.Handshake();
    auto h = net::EncodeHeader({0, 0});
    raw.Write(h.data(), h.size());
    CHECK(IsError(raw.ReadFrame()));
    CHECK_FALSE(raw.ReadFrame());
  }
  SECTION("oversized envelope and payload lengths, nothing allocated") {
    RawClient raw(port);
    raw.Handshake();
    auto h = net::EncodeHeader({0xFFFFFFFFu, 0});
    raw.Write(h.data(), h.size());
    CHECK(IsError(raw.ReadFrame()));
    RawClient raw2(port);
    raw2.Handshake();
    auto h2 = net::EncodeHeader({16, ~0ull});
    raw2.Write(h2.data(), h2.size());
    CHECK(IsError(raw2.ReadFrame()));
  }
  SECTION("bad magic") {
    RawClient raw(port);
    raw.Handshake();
    std::array<uint8_t, net::kFrameHeaderBytes> h{};
    raw.Write(h.data(), h.size());
    CHECK(IsError(raw.ReadFrame()));
  }
  SECTION("random bytes as an envelope: error reply, connection still usable") {
    RawClient raw(port);
    raw.Handshake();
    std::mt19937 rng(7);
    for (int i = 0; i < 20; ++i) {
      std::vector<uint8_t> junk(4 + rng() % 300);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      raw.WriteFrame(junk);
      CHECK(IsError(raw.ReadFrame()));
    }
    raw.WriteFrame(proto::Encode({77, false, 0, proto::Pull{}}));
    auto ok = raw.ReadFrame();
    REQUIRE(ok);
    CHECK(ok->request_id == 77);
    CHECK(std::holds_alternative<proto::PullReply>(ok->body));
  }
  SECTION("unknown union tag, with a payload that is skipped") {
    RawClient raw(port);
    raw.Handshake();
    flatbuffers::FlatBufferBuilder fbb;
    auto ping = wire::CreatePing(fbb).Union();
    fbb.Finish(wire::CreateEnvelope(fbb, 5, false, 0, static_cast<wire::Body>(200), ping));
    std::vector<uint8_t> env(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    raw.WriteFrame(env, 1000);
    std::vector<uint8_t> payload(1000, 0xAB);
    raw.Write(payload.data(), payload.size());
    auto err = raw.ReadFrame();
    REQUIRE(IsError(err));
    CHECK_THAT(std::get<proto::Error>(err->body).message,
               Catch::Contains("unknown message type 200"));
    raw.WriteFrame(proto::Encode({78, false, 0, proto::Pull{}}));
    auto ok = raw.ReadFrame();
    REQUIRE(ok);
    CHECK(ok->request_id == 78);
  }
  SECTION("truncated frame then hang-up") {
    RawClient raw(port);
    raw.Handshake();
    auto env = proto::Encode({9, false, 0, proto::Pull{}});
    raw.WriteFrame(env, 4096);  // promise 4096 payload bytes ...
    raw.Write("short", 5);      // ... deliver 5 and hang up
    ::shutdown(raw.fd, SHUT_WR);
    CHECK_FALSE(raw.ReadFrame());
  }
  SECTION("a reply frame sent as a request") {
    RawClient raw(port);
    raw.Handshake();
    raw.WriteFrame(proto::Encode({3, true, 0, proto::Ack{}}));
    CHECK(IsError(raw.ReadFrame()));
  }
  CheckEcho(**good);
  auto fresh = net::Client::Connect(rt, ClientOpts(port, Id(proto::Role::kWorker, 1)));
  REQUIRE(fresh.ok());
  CheckEcho(**fresh);
}

TEST_CASE("protocol abuse before the handshake: nothing is allocated for strangers") {
  net::Runtime rt(2);
  EchoServer echo(rt);
  const uint16_t port = echo.server->port();
  auto quiet = ClientOpts(port, Id(proto::Role::kWorker, 0));
  quiet.heartbeat_interval = net::Millis{0};  // no Pings: the server reads nothing from it unasked
  auto good = net::Client::Connect(rt, quiet);
  REQUIRE(good.ok());
  const auto hello = proto::Encode({1, false, 0,
                                    proto::Hello{proto::kProtocolVersion, proto::Role::kWorker, 0,
                                                 kCluster, std::vector<uint8_t>(16, 7)}});
  const auto before = echo.server->stats();
  // Bytes the server allocated for inbound frames during the section.
  auto allocated = [&] {
    return echo.server->stats().inbound_buffer_bytes - before.inbound_buffer_bytes;
  };

  SECTION("three strangers send a valid Hello envelope announcing a 512 MiB payload") {
    std::vector<std::unique_ptr<RawClient>> strangers;
    for (int i = 0; i < 3; ++i) {
      strangers.push_back(std::make_unique<RawClient>(port));
      strangers.back()->WriteFrame(hello, uint64_t{512} << 20);
      std::vector<uint8_t> start_of_payload(64 << 10, 0xAB);
      strangers.back()->Write(start_of_payload.data(), start_of_payload.size());
    }
    for (auto& s : strangers) CHECK(s->WaitClosed());  // dropped, no reply
    CHECK(allocated() == 0);                           // not even the envelope was read
    CHECK(echo.server->stats().payload_bytes == 0);
  }
  SECTION("a stranger announces an envelope larger than a handshake's") {
    RawClient raw(port);
    auto h = net::EncodeHeader({net::kHandshakeEnvelopeBytes + 1, 0});
    raw.Write(h.data(), h.size());
    raw.Write(hello.data(), hello.size());
    CHECK(raw.WaitClosed());
    CHECK(allocated() == 0);
  }
  SECTION("a stranger's HelloProof announces a payload") {
    RawClient raw(port);
    raw.WriteFrame(hello);
    auto reply = raw.ReadFrame();
    REQUIRE(reply);
    REQUIRE(std::holds_alternative<proto::HelloReply>(reply->body));
    raw.WriteFrame(proto::Encode({2, false, 0, proto::HelloProof{}}), uint64_t{1} << 30);
    CHECK(raw.WaitClosed());
    CHECK(allocated() == hello.size());  // the Hello's envelope only
  }
  SECTION("after the handshake the full limits apply") {
    RawClient raw(port);
    raw.Handshake();
    const uint64_t handshake = allocated();
    CHECK(handshake > 0);
    CHECK(handshake <= 2 * net::kHandshakeEnvelopeBytes);
    std::vector<uint8_t> payload(1 << 20, 0);
    auto pull = proto::Encode({5, false, 0, proto::Pull{}});
    raw.WriteFrame(pull, payload.size());
    raw.Write(payload.data(), payload.size());
    auto ok = raw.ReadFrame();
    REQUIRE(ok);
    CHECK(ok->request_id == 5);
    CHECK(allocated() == handshake + pull.size() + payload.size());
  }
  CheckEcho(**good);
  auto fresh = net::Client::Connect(rt, ClientOpts(port, Id(proto::Role::kWorker, 1)));
  REQUIRE(fresh.ok());
  CheckEcho(**fresh);
}

// ---- server statistics -----------------------------------------------------------------

namespace {

// The size of a frame as the wire carries it.
uint64_t FrameBytes(const proto::Envelope& env, uint64_t payload_bytes = 0) {
  return net::kFrameHeaderBytes + proto::Encode(env).size() + payload_bytes;
}

}  // namespace

TEST_CASE("server stats: exact request and byte counts of a known sequence of calls") {
  net::Runtime rt(2);
  net::ServerOptions so;
  so.identity = Id(proto::Role::kPs, 0);
  auto server = net::Server::Start(rt, so, [](net::Request req, net::Responder resp) {
    if (std::holds_alternative<proto::GetStatus>(req.envelope.body))
      return resp.Fail(InvalidArgument("no status"));
    proto::PullReply r;
    r.item_floats.push_back(req.payload.size() / 4);
    resp.Reply(r, net::OutPayload::Own(std::move(req.payload)));
  });
  REQUIRE(server.ok());
  auto opts = ClientOpts((*server)->port(), Id(proto::Role::kWorker, 0));
  opts.heartbeat_interval = net::Millis{0};  // no Pings: only the calls below cross the wire
  auto c = net::Client::Connect(rt, opts);
  REQUIRE(c.ok());

  auto before = (*server)->stats();  // the handshake is not counted
  CHECK(before.requests == 0);
  CHECK(before.bytes_received == 0);
  CHECK(before.bytes_sent == 0);

  // Calls are numbered from 1 by the client; replies echo the id.
  auto r1 = (*c)->CallSync(proto::Pull{}, net::OutPayload::Own(Floats({1, 2, 3})));
  REQUIRE(r1.ok());
  auto r2 = (*c)->CallSync(proto::Pull{});
  REQUIRE(r2.ok());
  auto r3 = (*c)->CallSync(proto::GetStatus{});
  REQUIRE_FALSE(r3.ok());

  proto::PullReply three;
  three.item_floats = {3};
  proto::PullReply none;
  none.item_floats = {0};
  const uint64_t in = FrameBytes({1, false, 0, proto::Pull{}}, 12) +
                      FrameBytes({2, false, 0, proto::Pull{}}) +
                      FrameBytes({3, false, 0, proto::GetStatus{}});
  const uint64_t out =
      FrameBytes({1, true, 0, three}, 12) + FrameBytes({2, true, 0, none}) +
      FrameBytes(
          {3, true, 0, proto::Error{static_cast<int32_t>(Code::kInvalidArgument), "no status"}});
  auto s = (*server)->stats();
  CHECK(s.requests == 3);
  CHECK(s.bytes_received == in);
  CHECK(s.bytes_sent == out);
  CHECK(s.queue_depth == 0);
  CHECK(s.max_queue_depth == 1);  // each call waited alone, briefly, for the handler
  CHECK((*server)->stats().max_queue_depth == 0);  // reset by the previous read
  // 3 headers, 12 payload bytes each way, and the envelopes.
  CHECK(s.bytes_received > 3 * net::kFrameHeaderBytes + 12);
}

TEST_CASE("server stats: queue depth counts requests waiting behind a blocked handler") {
  net::Runtime rt(2);
  net::ServerOptions so;
  so.identity = Id(proto::Role::kPs, 0);
  so.handler_threads = 1;
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  auto server = net::Server::Start(rt, so, [&](net::Request req, net::Responder resp) {
    if (std::holds_alternative<proto::Stop>(req.envelope.body)) {
      entered.set_value();
      released.wait();
    }
    resp.Reply(proto::Ack{});
  });
  REQUIRE(server.ok());
  auto opts = ClientOpts((*server)->port(), Id(proto::Role::kWorker, 0));
  opts.heartbeat_interval = net::Millis{0};
  auto c = net::Client::Connect(rt, opts);
  REQUIRE(c.ok());
  // A failing check must not leave the handler blocked: the server's Close() waits for it.
  struct Unblock {
    std::promise<void>* p;
    bool done = false;
    void Now() {
      if (!done) p->set_value();
      done = true;
    }
    ~Unblock() { Now(); }
  } unblock{&release};

  auto blocker = (*c)->Call(proto::Stop{});
  entered.get_future().wait();                     // the only handler thread is now busy
  CHECK((*server)->stats().max_queue_depth == 1);  // the Stop waited for the thread; resets to 0
  constexpr int kQueued = 3;
  std::vector<std::future<Result<net::Reply>>> calls;
  for (int i = 0; i < kQueued; ++i) calls.push_back((*c)->Call(proto::Pull{}));
  // Waits for the server to read them (a condition, not a duration); 20 s guards a hung test.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  net::Server::Stats s;
  do {
    s = (*server)->stats();
    std::this_thread::yield();
  } while (s.queue_depth < kQueued && std::chrono::steady_clock::now() < deadline);
  CHECK(s.queue_depth == kQueued);
  CHECK(s.max_queue_depth == kQueued);
  CHECK(s.requests == kQueued + 1);

  unblock.Now();
  REQUIRE(blocker.get().ok());
  for (auto& f : calls) REQUIRE(f.get().ok());
  s = (*server)->stats();
  CHECK(s.queue_depth == 0);
  CHECK(s.max_queue_depth == kQueued);  // reached before this window began, at the last read
  CHECK((*server)->stats().max_queue_depth == 0);
}

// ------------------------------------------------ CallSync reading on the calling thread

namespace {

// Waits (a condition, polled; `guard` only stops a hung test) until `done` holds.
template <typename F>
bool WaitFor(F done, std::chrono::seconds guard = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + guard;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

size_t Held(EchoServer& echo) {
  std::lock_guard lock(echo.mu);
  return echo.held.size();
}

// Answers every held Stop with an Ack.
void ReleaseHeld(EchoServer& echo) {
  std::lock_guard lock(echo.mu);
  for (auto& h : echo.held) h.Reply(proto::Ack{});
  echo.held.clear();
}

// An echo call with `floats` values derived from `seed`, in place or not; true when the
// reply carries exactly them.
bool EchoChecked(net::Client& c, size_t floats, int seed, bool in_place) {
  std::vector<float> data(floats);
  for (size_t k = 0; k < floats; ++k)
    data[k] = static_cast<float>(seed * 1000 + static_cast<int>(k % 1000));
  net::OutPayload p;
  p.Add(std::span<const float>(data));
  std::vector<float> back(floats);
  std::vector<std::span<std::byte>> into;
  if (in_place) into.push_back(std::as_writable_bytes(std::span(back)));
  auto r = c.CallSync(proto::Pull{}, std::move(p), std::move(into));
  if (!r.ok() || r->payload_in_place != in_place) return false;
  if (!in_place) {
    auto f = r->payload.floats();
    back.assign(f.begin(), f.end());
  }
  return back == data;
}

// RawClient::ReadFrame without Catch's macros (not thread-safe: for a server thread
// while the test thread asserts). nullopt: closed or not a frame.
std::optional<proto::Envelope> ReadFrameQuietly(RawClient& peer) {
  std::array<uint8_t, net::kFrameHeaderBytes> h;
  if (!peer.ReadAll(h.data(), h.size())) return std::nullopt;
  auto hdr = net::DecodeHeader(h, net::Limits{});
  if (!hdr.ok()) return std::nullopt;
  std::vector<uint8_t> env(hdr->envelope_bytes), payload(hdr->payload_bytes);
  if (!peer.ReadAll(env.data(), env.size()) || !peer.ReadAll(payload.data(), payload.size()))
    return std::nullopt;
  auto e = proto::Decode(env);
  if (!e.ok()) return std::nullopt;
  return *e;
}

// A raw ps side for one client: the handshake, then `then(peer)` (false: something was
// not as expected). Check ok() after Join().
struct RawPs {
  RawListener listener;
  std::thread thread;
  std::atomic<bool> failed{false};
  explicit RawPs(std::function<bool(RawClient&)> then) {
    thread = std::thread([this, then = std::move(then)] {
      RawClient peer(listener.Accept());
      bool ok = ReadFrameQuietly(peer).has_value();  // Hello
      proto::HelloReply reply;
      reply.identity = {proto::kProtocolVersion, proto::Role::kPs, 0, kCluster,
                        std::vector<uint8_t>(16, 3)};
      peer.WriteFrame(proto::Encode({1, true, 0, reply}));
      ok = ok && ReadFrameQuietly(peer).has_value();  // HelloProof
      peer.WriteFrame(proto::Encode({2, true, 0, proto::Ack{}}));
      if (!ok || !then(peer)) failed = true;
    });
  }
  bool Join() {
    if (thread.joinable()) thread.join();
    return !failed;
  }
  ~RawPs() { Join(); }
};

}  // namespace

TEST_CASE("CallSync reads its reply on the calling thread: sync-only plain clients only") {
  net::Runtime rt(2);
  EchoServer echo(rt);
  auto opts = ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0));
  SECTION("sync-only: every call") {
    auto c = net::Client::Connect(rt, opts);
    REQUIRE(c.ok());
    CHECK(EchoChecked(**c, 3, 1, false));
    CHECK(EchoChecked(**c, 1024, 2, true));
    CHECK(EchoChecked(**c, 64 * 1024, 3, true));  // larger than the read-ahead buffer
    CHECK(EchoChecked(**c, 64 * 1024, 4, false));
    CHECK((*c)->caller_reads_for_testing() == 4);
    CHECK((*c)->health().ok());
  }
  SECTION("caller_reads off: none") {
    opts.caller_reads = false;
    auto c = net::Client::Connect(rt, opts);
    REQUIRE(c.ok());
    CHECK(EchoChecked(**c, 3, 1, false));
    CHECK(EchoChecked(**c, 1024, 2, true));
    CHECK((*c)->caller_reads_for_testing() == 0);
  }
  SECTION("after a CallAsync: none") {
    auto c = net::Client::Connect(rt, opts);
    REQUIRE(c.ok());
    CHECK(EchoChecked(**c, 3, 1, true));
    CHECK((*c)->caller_reads_for_testing() == 1);
    std::promise<Result<net::Reply>> done;
    (*c)->CallAsync(proto::Pull{}, net::OutPayload::Own(Floats({5, 6})), {}, 0ms,
                    [&](Result<net::Reply> r) { done.set_value(std::move(r)); });
    auto r = done.get_future().get();
    REQUIRE(r.ok());
    CHECK(r->payload.floats()[1] == 6.0f);
    CHECK(EchoChecked(**c, 3, 2, false));
    CHECK(EchoChecked(**c, 1024, 3, true));
    CHECK((*c)->caller_reads_for_testing() == 1);
  }
}

TEST_CASE("a parked reader answers heartbeats: idle, and while a caller waits for a late reply") {
  net::Runtime rt(2);
  EchoServer echo(rt);
  auto opts = ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0));
  opts.heartbeat_interval = 10ms;
  opts.heartbeat_timeout = 100ms;  // unanswered Pings break the client within ~100 ms
  auto c = net::Client::Connect(rt, opts);
  REQUIRE(c.ok());
  CheckEcho(**c);
  const uint64_t ping = FrameBytes({0, false, 0, proto::Ping{}});
  auto pings_from = [&](uint64_t bytes) {
    return (echo.server->stats(false).bytes_received - bytes) / ping;
  };

  // Idle: 40 Pings (~400 ms, four heartbeat timeouts), each answer read by the reader
  // woken for it.
  uint64_t at = echo.server->stats(false).bytes_received;
  CHECK(WaitFor([&] { return pings_from(at) >= 40 || !(*c)->health().ok(); }));
  CHECK((*c)->health().ok());
  CheckEcho(**c);

  // A call on the calling thread whose reply the server holds for 40 Pings: the caller
  // reads their answers meanwhile. (A call made while the reader is up for a Ping's
  // answer takes the I/O thread's path: then again.)
  bool on_calling_thread = false;
  for (int attempt = 0; attempt < 50 && !on_calling_thread; ++attempt) {
    const uint64_t fast = (*c)->caller_reads_for_testing();
    auto call =
        std::async(std::launch::async, [&] { return (*c)->CallSync(proto::Stop{}, {}, {}, 60s); });
    REQUIRE(WaitFor([&] { return Held(echo) == 1; }));
    on_calling_thread = (*c)->caller_reads_for_testing() == fast + 1;  // counted before it is sent
    if (on_calling_thread) {
      at = echo.server->stats(false).bytes_received;
      CHECK(WaitFor([&] { return pings_from(at) >= 40 || !(*c)->health().ok(); }));
      CHECK((*c)->health().ok());
    }
    ReleaseHeld(echo);
    auto r = call.get();
    CHECK(r.ok());
  }
  CHECK(on_calling_thread);
  CheckEcho(**c);
  CHECK((*c)->health().ok());
}

TEST_CASE("CallSync from several threads and a CallAsync on one client: every reply is its own") {
  net::Runtime rt(2);
  EchoServer echo(rt);
  auto c = net::Client::Connect(rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0)));
  REQUIRE(c.ok());
  constexpr int kSyncThreads = 3, kCalls = 300;
  std::atomic<int> bad{0}, sync_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kSyncThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int i = 0; i < kCalls; ++i) {
        const size_t floats = size_t{1} << (rng() % 15);  // 4 B .. 64 KiB
        if (!EchoChecked(**c, floats, t * kCalls + i, rng() % 2 == 0)) bad.fetch_add(1);
        sync_done.fetch_add(1);
      }
    });
  }
  // The asynchronous caller starts once the synchronous ones are well under way (its
  // first call ends the calling-thread reads for good).
  std::atomic<int> async_bad{0}, async_answered{0};
  constexpr int kAsyncCalls = 300;
  threads.emplace_back([&] {
    WaitFor([&] { return sync_done.load() >= kSyncThreads * kCalls / 3; });
    for (int i = 0; i < kAsyncCalls; ++i) {
      const float v = static_cast<float>(-i);
      (*c)->CallAsync(
          proto::Pull{}, net::OutPayload::Own(Floats({v, v})), {}, 0ms,
          [&, v](Result<net::Reply> r) {
            if (!r.ok() || r->payload.floats().size() != 2 || r->payload.floats()[1] != v)
              async_bad.fetch_add(1);
            async_answered.fetch_add(1);
            async_answered.notify_all();
          });
    }
  });
  for (auto& th : threads) th.join();
  for (int n = async_answered.load(); n < kAsyncCalls; n = async_answered.load())
    async_answered.wait(n);
  CHECK(bad.load() == 0);
  CHECK(async_bad.load() == 0);
  CHECK((*c)->caller_reads_for_testing() > 0);
  CHECK(echo.server->stats().requests == kSyncThreads * kCalls + kAsyncCalls);
  CHECK((*c)->health().ok());
}

// A client of a RawPs without heartbeats, so that the raw server reads exactly the
// requests the test makes.
Result<std::shared_ptr<net::Client>> ConnectToRaw(net::Runtime& rt, uint16_t port) {
  auto opts = ClientOpts(port, Id(proto::Role::kWorker, 0));
  opts.heartbeat_interval = 0ms;
  return net::Client::Connect(rt, opts);
}

// Writes the start of a reply to request `id` with a 4096-byte payload: the header, the
// envelope and the first 64 payload bytes (each 1).
void WriteReplyStart(RawClient& peer, uint64_t id) {
  proto::PullReply pr;
  pr.item_floats.push_back(1024);
  peer.WriteFrame(proto::Encode({id, true, 0, pr}), 4096);
  std::vector<char> part(64, 1);
  peer.Write(part.data(), part.size());
}

TEST_CASE("a call reading on the calling thread ends when the connection does") {
  SECTION("Close() from another thread: Aborted") {
    net::Runtime rt(2);
    EchoServer echo(rt);
    auto c = net::Client::Connect(rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0)));
    REQUIRE(c.ok());
    auto call =
        std::async(std::launch::async, [&] { return (*c)->CallSync(proto::Stop{}, {}, {}, 60s); });
    REQUIRE(WaitFor([&] { return Held(echo) == 1; }));
    const auto start = std::chrono::steady_clock::now();
    (*c)->Close();
    REQUIRE(call.wait_for(20s) == std::future_status::ready);
    CHECK(std::chrono::steady_clock::now() - start < 5s);  // not the call's 60 s deadline
    auto r = call.get();
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kAborted);
    CHECK_THAT(r.status().message(),
               Catch::Contains("ps:0") && Catch::Contains("connection closed"));
    CHECK((*c)->caller_reads_for_testing() == 1);
    REQUIRE(WaitFor([&] { return !(*c)->health().ok(); }));  // Break runs on the strand
    CHECK((*c)->health().code() == Code::kAborted);
  }
  SECTION("the server closes: Unavailable, the client is broken") {
    RawPs ps([](RawClient& peer) {
      const bool got = ReadFrameQuietly(peer).has_value();  // the request, never answered
      ::shutdown(peer.fd, SHUT_RDWR);
      return got;
    });
    net::Runtime rt(2);
    auto c = ConnectToRaw(rt, ps.listener.port);
    REQUIRE(c.ok());
    std::promise<Status> broken;
    (*c)->OnBroken([&](const Status& st) { broken.set_value(st); });
    auto r = (*c)->CallSync(proto::Pull{}, {}, {}, 60s);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK_THAT(r.status().message(), Catch::Contains("ps:0") && Catch::Contains("connection lost"));
    CHECK((*c)->caller_reads_for_testing() == 1);
    auto st = broken.get_future().get();  // Break ran once, on the strand
    CHECK(st.code() == Code::kUnavailable);
    auto after = (*c)->CallSync(proto::Pull{});
    CHECK(after.status().code() == Code::kUnavailable);
    CHECK((*c)->caller_reads_for_testing() == 1);  // a broken client does not read
    CHECK(ps.Join());
  }
}

TEST_CASE("a call reading on the calling thread: its deadline") {
  SECTION(
      "at a frame boundary: DeadlineExceeded, the connection stays up, the late reply is dropped") {
    net::Runtime rt(2);
    EchoServer echo(rt);
    auto c = net::Client::Connect(rt, ClientOpts(echo.server->port(), Id(proto::Role::kWorker, 0)));
    REQUIRE(c.ok());
    auto r = (*c)->CallSync(proto::Stop{}, {}, {}, 100ms);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kDeadlineExceeded);
    CHECK_THAT(r.status().message(),
               Catch::Contains("ps:0 (") && Catch::Contains("Stop did not complete within 100 ms"));
    REQUIRE(WaitFor([&] { return Held(echo) == 1; }));
    ReleaseHeld(echo);  // its late Ack reaches the next readers, who drop it
    CHECK(EchoChecked(**c, 3, 1, false));
    CHECK(EchoChecked(**c, 5, 2, true));
    CHECK(EchoChecked(**c, 7, 3, false));
    CHECK((*c)->caller_reads_for_testing() == 4);
    CHECK((*c)->health().ok());
  }
  SECTION("in the middle of a frame: DeadlineExceeded, the connection is dropped") {
    std::promise<void> finish;
    auto finish_f = finish.get_future();
    RawPs ps([&](RawClient& peer) {
      auto req = ReadFrameQuietly(peer);
      if (!req) return false;
      WriteReplyStart(peer, req->request_id);  // the rest never comes
      finish_f.wait();
      return true;
    });
    net::Runtime rt(2);
    auto c = ConnectToRaw(rt, ps.listener.port);
    REQUIRE(c.ok());
    std::promise<Status> broken;
    (*c)->OnBroken([&](const Status& st) { broken.set_value(st); });
    auto r = (*c)->CallSync(proto::Pull{}, {}, {}, 200ms);
    finish.set_value();
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kDeadlineExceeded);
    CHECK_THAT(r.status().message(), Catch::Contains("Pull did not complete within 200 ms") &&
                                         Catch::Contains("middle of a frame"));
    auto st = broken.get_future().get();  // the others learn only that the connection went
    CHECK(st.code() == Code::kUnavailable);
    CHECK_THAT(st.message(),
               Catch::Contains("connection dropped") && Catch::Contains("middle of a frame"));
    CHECK_FALSE((*c)->health().ok());
    CHECK(ps.Join());
  }
  SECTION("in the middle of another call's reply: that reply is read to its end and delivered") {
    // Caller A reads (its call is never answered, 300 ms deadline); B's CallSync takes the
    // ordinary path. B's reply stalls half-way past A's deadline, then comes whole.
    std::promise<void> a_sent, finish, done;
    auto a_sent_f = a_sent.get_future();
    auto finish_f = finish.get_future();
    auto done_f = done.get_future();
    RawPs ps([&](RawClient& peer) {
      if (!ReadFrameQuietly(peer)) return false;  // A's request, never answered
      a_sent.set_value();
      auto rb = ReadFrameQuietly(peer);  // B's request
      if (!rb) return false;
      WriteReplyStart(peer, rb->request_id);
      finish_f.wait();  // until A's deadline has passed
      std::vector<char> rest(4096 - 64, 2);
      peer.Write(rest.data(), rest.size());
      done_f.wait();  // the connection stays open until A has its answer
      return true;
    });
    net::Runtime rt(2);
    auto c = ConnectToRaw(rt, ps.listener.port);
    REQUIRE(c.ok());
    const auto a_deadline = std::chrono::steady_clock::now() + 300ms;
    auto a = std::async(std::launch::async,
                        [&] { return (*c)->CallSync(proto::Stop{}, {}, {}, 300ms); });
    a_sent_f.wait();
    auto b =
        std::async(std::launch::async, [&] { return (*c)->CallSync(proto::Pull{}, {}, {}, 60s); });
    std::this_thread::sleep_until(a_deadline + 100ms);  // time passing is the point here
    finish.set_value();
    auto ra = a.get();
    auto rb = b.get();
    const bool healthy = (*c)->health().ok();  // before the raw server closes
    done.set_value();
    CHECK(ra.status().code() == Code::kDeadlineExceeded);
    CHECK_THAT(ra.status().message(), !Catch::Contains("middle of a frame"));
    REQUIRE(rb.ok());
    REQUIRE(rb->payload.size() == 4096);
    CHECK(static_cast<char>(rb->payload.bytes()[0]) == 1);
    CHECK(static_cast<char>(rb->payload.bytes()[4095]) == 2);
    CHECK((*c)->caller_reads_for_testing() == 1);
    CHECK(healthy);
    CHECK(ps.Join());
  }
}

// ------------------------------------------------ DirectReply

namespace {

// A whole frame as the server writes it: header, envelope, payload.
std::vector<uint8_t> FrameOf(const proto::Envelope& env, std::span<const float> payload) {
  const auto e = proto::Encode(env);
  const auto h = net::EncodeHeader({static_cast<uint32_t>(e.size()), payload.size_bytes()});
  std::vector<uint8_t> out(h.size() + e.size() + payload.size_bytes());
  std::memcpy(out.data(), h.data(), h.size());
  std::memcpy(out.data() + h.size(), e.data(), e.size());
  if (!payload.empty())
    std::memcpy(out.data() + h.size() + e.size(), payload.data(), payload.size_bytes());
  return out;
}

}  // namespace

TEST_CASE(
    "a direct reply reaches the wire as the copied one would: at once, cut short by a peer that does not read, behind queued frames") {
  // More than the socket buffers hold (the peer's receive buffer is 64 KiB), so the
  // first reply is cut short while the peer does not read.
  constexpr size_t kFloats = size_t{4} << 20;
  constexpr size_t kHead = 1000, kTail = 3000;  // owned parts before and after the borrowed one
  std::vector<float> want(kFloats);
  for (size_t k = 0; k < kFloats; ++k) want[k] = static_cast<float>(k % 100003) * 0.5f;
  std::atomic<int> handled{0}, direct{0};
  std::vector<std::vector<float>>
      lent;  // each reply's borrowed memory, poisoned after Borrow (the strand's)

  net::Runtime rt(2);
  net::ServerOptions so;
  so.identity = Id(proto::Role::kPs, 0);
  so.run_inline = [](const net::Request&) {
    return std::make_shared<int>(0);
  };  // replies on the strand
  auto server = net::Server::Start(rt, so, [&](net::Request, net::Responder resp) {
    proto::PullReply reply;
    reply.item_floats = {kFloats};
    if (auto d = resp.BeginDirect(reply, kFloats * sizeof(float))) {
      ++direct;
      auto head = d->Owned(0, kHead * sizeof(float));
      std::memcpy(head.data(), want.data(), head.size());
      d->Add(head);
      lent.push_back(want);
      auto middle = std::span(lent.back()).subspan(kHead, kFloats - kHead - kTail);
      d->Borrow(std::as_bytes(middle));
      // Its owner may change the memory once Borrow returned (kept alive, so that a
      // reply still reading it would send the -1s): what the socket did not take was
      // copied.
      std::fill(middle.begin(), middle.end(), -1.0f);
      auto tail = d->Owned((kFloats - kTail) * sizeof(float), kTail * sizeof(float));
      std::memcpy(tail.data(), want.data() + kFloats - kTail, tail.size());
      d->Add(tail);
      d->Finish();
    } else {
      net::Buffer copy(kFloats * sizeof(float));
      std::memcpy(copy.data(), want.data(), copy.size());
      resp.Reply(reply, net::OutPayload::Own(std::move(copy)));
    }
    ++handled;
  });
  REQUIRE(server.ok());
  RawClient peer((*server)->port(), 64 << 10);
  peer.Handshake();
  proto::PullReply reply;
  reply.item_floats = {kFloats};
  auto expect = [&](std::initializer_list<uint64_t> ids) {
    std::vector<uint8_t> all;
    for (uint64_t id : ids) {
      auto f = FrameOf({id, true, 0, reply}, want);
      all.insert(all.end(), f.begin(), f.end());
    }
    return all;
  };
  auto read_matches = [&](const std::vector<uint8_t>& expected) {
    std::vector<uint8_t> got(expected.size());
    return peer.ReadAll(got.data(), got.size()) && got == expected;  // not CHECKed: 16 MiB to print
  };

  // Two requests in one write, so that (read together) the second is handled before the
  // writer wakes: the first reply is written at once as far as the socket takes it, the
  // rest (copied) is queued, and the second reply, behind it, is queued as usual.
  auto two = FrameOf({10, false, 0, proto::Pull{}}, {});
  const auto second = FrameOf({11, false, 0, proto::Pull{}}, {});
  two.insert(two.end(), second.begin(), second.end());
  peer.Write(two.data(), two.size());
  REQUIRE(WaitFor([&] { return handled.load() == 2; }));
  CHECK(direct.load() == 1);
  CHECK((*server)->stats().write_queue_bytes > 0);
  // While the writer is blocked on the peer, replies are queued too.
  peer.WriteFrame(proto::Encode({12, false, 0, proto::Pull{}}));
  REQUIRE(WaitFor([&] { return handled.load() == 3; }));
  CHECK(direct.load() == 1);
  CHECK(read_matches(expect({10, 11, 12})));

  // Nothing queued and a reading peer: the direct reply again.
  REQUIRE(WaitFor([&] { return (*server)->stats().write_queue_bytes == 0; }));
  peer.WriteFrame(proto::Encode({13, false, 0, proto::Pull{}}));
  CHECK(read_matches(expect({13})));
  REQUIRE(WaitFor([&] { return handled.load() == 4; }));
  CHECK(direct.load() == 2);
  auto s = (*server)->stats();
  CHECK(s.requests == 4);
  CHECK(s.bytes_sent == 4 * FrameBytes({10, true, 0, reply}, kFloats * sizeof(float)));
}

TEST_CASE("a direct reply that fails before any of it is written is answered with an error frame") {
  net::Runtime rt(2);
  net::ServerOptions so;
  so.identity = Id(proto::Role::kPs, 0);
  so.run_inline = [](const net::Request&) { return std::make_shared<int>(0); };
  std::atomic<int> direct{0};
  auto server = net::Server::Start(rt, so, [&](net::Request, net::Responder resp) {
    if (auto d = resp.BeginDirect(proto::PullReply{{4}, {}}, 16)) {
      ++direct;
      d->Owned(0, 16);  // filled by nobody: the "store" failed
      d->Fail(OutOfRange("row 9 of w/part_0"));
    }
  });
  REQUIRE(server.ok());
  auto c = net::Client::Connect(rt, ClientOpts((*server)->port(), Id(proto::Role::kWorker, 0)));
  REQUIRE(c.ok());
  for (int i = 0; i < 2; ++i) {  // the connection keeps serving
    auto r = (*c)->CallSync(proto::Pull{});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kOutOfRange);
    CHECK_THAT(r.status().message(), Catch::Contains("row 9 of w/part_0"));
  }
  CHECK(direct.load() == 2);
}

TEST_CASE(
    "a reply whose payload is still being filled sends only what was published, and the frames behind it wait for it") {
  // 8 MiB in four parts; each is filled only after the peer read the one before, so a
  // writer that ran ahead of Publish would send the 0xEE the buffer starts with.
  constexpr size_t kBytes = size_t{8} << 20, kParts = 4, kPart = kBytes / kParts;
  constexpr size_t kAhead = size_t{4} << 20;  // the reply queued before it
  struct Pending {
    std::shared_ptr<net::Buffer> buffer;
    std::shared_ptr<net::PayloadProgress> progress;
  };
  std::promise<Pending> handed;
  net::Runtime rt(2);
  net::ServerOptions so;
  so.identity = Id(proto::Role::kPs, 0);
  // On the strand, in order: request 6's reply (plain) is being written to a peer that
  // does not read yet when request 7's (still being filled) and a Ping's Ack queue behind it.
  so.run_inline = [](const net::Request&) { return std::make_shared<int>(0); };
  auto server = net::Server::Start(rt, so, [&](net::Request req, net::Responder resp) {
    const bool ahead = req.envelope.request_id == 6;
    auto buffer = std::make_shared<net::Buffer>(ahead ? kAhead : kBytes);
    std::memset(buffer->data(), ahead ? 0x55 : 0xEE, buffer->size());
    net::OutPayload payload;
    payload.parts.push_back(std::as_bytes(buffer->bytes()));
    payload.keep_alive = buffer;
    if (!ahead) {
      payload.progress = std::make_shared<net::PayloadProgress>();
      handed.set_value({buffer, payload.progress});
    }
    resp.Reply(proto::PullReply{{buffer->size() / 4}, {}}, std::move(payload));
  });
  REQUIRE(server.ok());
  RawClient peer((*server)->port(), 64 << 10);
  peer.Handshake();
  peer.WriteFrame(proto::Encode({6, false, 0, proto::Pull{}}));
  peer.WriteFrame(proto::Encode({7, false, 0, proto::Pull{}}));
  peer.WriteFrame(proto::Encode({8, false, 0, proto::Ping{}}));
  Pending p = handed.get_future().get();
  // Reads a frame's header and envelope; returns the envelope and its payload's size.
  auto head = [&] {
    std::array<uint8_t, net::kFrameHeaderBytes> h;
    REQUIRE(peer.ReadAll(h.data(), h.size()));
    auto header = net::DecodeHeader(h, net::Limits{});
    REQUIRE(header.ok());
    std::vector<uint8_t> env(header->envelope_bytes);
    REQUIRE(peer.ReadAll(env.data(), env.size()));
    auto e = proto::Decode(env);
    REQUIRE(e.ok());
    return std::make_pair(*e, header->payload_bytes);
  };
  auto first = head();
  CHECK(first.first.request_id == 6);
  REQUIRE(first.second == kAhead);
  std::vector<uint8_t> got(kAhead);
  REQUIRE(peer.ReadAll(got.data(), got.size()));
  CHECK(std::count(got.begin(), got.end(), uint8_t{0x55}) == static_cast<std::ptrdiff_t>(kAhead));
  auto second = head();
  CHECK(second.first.request_id == 7);
  CHECK(second.second == kBytes);
  got.resize(kPart);

  SECTION("published part by part; the Ack queued behind it comes after the whole frame") {
    for (size_t k = 0; k < kParts; ++k) {
      std::memset(p.buffer->data() + k * kPart, static_cast<int>(k + 1), kPart);
      p.progress->Publish((k + 1) * kPart);
      REQUIRE(peer.ReadAll(got.data(), got.size()));
      CHECK(std::count(got.begin(), got.end(), static_cast<uint8_t>(k + 1)) ==
            static_cast<std::ptrdiff_t>(kPart));
    }
    auto ack = peer.ReadFrame();
    REQUIRE(ack);
    CHECK(ack->request_id == 8);
    CHECK(std::holds_alternative<proto::Ack>(ack->body));
  }
  SECTION("a payload that fails half-way closes the connection") {
    std::memset(p.buffer->data(), 1, kPart);
    p.progress->Publish(kPart);
    REQUIRE(peer.ReadAll(got.data(), got.size()));
    CHECK(got.front() == 1);
    p.progress->Fail();
    CHECK(peer.WaitClosed());
  }
}

// The transport's bounds: payload budget and log limiter on their own, then a real server
// over 127.0.0.1 with each bound set small — connections per server, requests in flight
// per connection, a connection's write queue (server and client side), and the payload
// budget. Waits are on conditions read from Server::Stats, never on durations.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "libps/net/bounds.h"
#include "test/unit/net/net_test_util.h"

using namespace ps;
using namespace ps::nettest;
using namespace std::chrono_literals;

TEST_CASE("payload budget: immediate grants, FIFO waiters, cancel, leases") {
  auto budget = std::make_shared<net::PayloadBudget>(100);
  uint64_t t1 = 0, t2 = 0, t3 = 0;
  std::vector<int> granted;
  CHECK(budget->Acquire(
      60, [] {}, &t1));
  CHECK(budget->in_use() == 60);
  CHECK_FALSE(budget->Acquire(
      50, [&] { granted.push_back(2); }, &t2));
  // 30 would fit, but waits behind the earlier 50: a big frame is not starved.
  CHECK_FALSE(budget->Acquire(
      30, [&] { granted.push_back(3); }, &t3));
  CHECK(budget->waiters() == 2);
  budget->Release(60);
  CHECK(granted == std::vector<int>{2, 3});
  CHECK(budget->in_use() == 80);
  CHECK_FALSE(budget->Cancel(t2));  // already granted: the caller owns the bytes
  budget->Release(50);
  uint64_t t4 = 0;
  CHECK_FALSE(budget->Acquire(
      90, [&] { granted.push_back(4); }, &t4));
  CHECK(budget->Cancel(t4));  // still queued: nothing reserved
  CHECK(budget->waiters() == 0);
  {
    net::Buffer b(8);
    b.SetLease(budget->Lease(30));  // the 30 granted above, now owned by a buffer
    CHECK(budget->in_use() == 30);
  }
  CHECK(budget->in_use() == 0);
  CHECK(granted == std::vector<int>{2, 3});
}

TEST_CASE("log limiter: one line per address per interval, the rest counted") {
  using C = net::LogLimiter::Clock;
  net::LogLimiter limiter(10s, 2);
  const C::time_point t0{};
  uint64_t suppressed = 99;
  CHECK(limiter.Allow("10.0.0.1", t0, &suppressed));
  CHECK(suppressed == 0);
  CHECK_FALSE(limiter.Allow("10.0.0.1", t0 + 1s, &suppressed));
  CHECK_FALSE(limiter.Allow("10.0.0.1", t0 + 9s, &suppressed));
  CHECK(limiter.Allow("10.0.0.2", t0 + 9s, &suppressed));  // another address has its own slot
  CHECK(limiter.Allow("10.0.0.1", t0 + 10s, &suppressed));
  CHECK(suppressed == 2);
  // Both slots are recent: new addresses share one, so a flood logs once per interval.
  CHECK(limiter.Allow("10.0.0.3", t0 + 11s, &suppressed));
  CHECK_FALSE(limiter.Allow("10.0.0.4", t0 + 12s, &suppressed));
  CHECK_FALSE(limiter.Allow("10.0.0.5", t0 + 13s, &suppressed));
  // Once old slots have expired they are reused.
  CHECK(limiter.Allow("10.0.0.6", t0 + 40s, &suppressed));
}

namespace {

// A latch the test opens; handlers wait on it. Opened on destruction, so a failing check
// never leaves a handler blocked (Server::Close waits for handlers).
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void Open() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  ~Latch() { Open(); }
};

// Pull: echoes the payload. Stop: waits for `latch`, then Ack. Push: holds its payload
// until `latch` opens, then frees it and Acks. Tracks the most Stop/Push handled at once.
struct BoundedServer {
  BoundedServer(net::Runtime& rt, const std::function<void(net::ServerOptions&)>& tune) {
    net::ServerOptions o;
    o.identity = Id(proto::Role::kPs, 0);
    o.handler_threads = 4;
    tune(o);
    auto s = net::Server::Start(rt, o, [this](net::Request req, net::Responder resp) {
      if (std::holds_alternative<proto::Pull>(req.envelope.body)) {
        return resp.Reply(proto::PullReply{}, net::OutPayload::Own(std::move(req.payload)));
      }
      {
        std::lock_guard lock(mu);
        max_busy = std::max(max_busy, ++busy);
      }
      latch.Wait();
      req.payload = net::Buffer();
      {
        std::lock_guard lock(mu);
        --busy;
      }
      resp.Reply(proto::Ack{});
    });
    REQUIRE(s.ok());
    server = std::move(*s);
  }
  // Polls the stats until `pred` holds (20 s guards a hung test only).
  net::Server::Stats WaitFor(const std::function<bool(const net::Server::Stats&)>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    net::Server::Stats s;
    do {
      s = server->stats();
      if (pred(s)) return s;
      std::this_thread::yield();
    } while (std::chrono::steady_clock::now() < deadline);
    FAIL("condition on the server stats not reached: requests "
         << s.requests << ", connections " << s.connections << ", paused readers "
         << s.paused_readers << ", budget waiters " << s.budget_waiters << ", payload bytes "
         << s.payload_bytes << ", write queue bytes " << s.write_queue_bytes);
    return s;
  }
  Latch latch;  // declared before the server: opened before the server closes
  std::mutex mu;
  int busy = 0, max_busy = 0;  // guarded by mu
  std::unique_ptr<net::Server> server;
};

net::ClientOptions Quiet(uint16_t port, int index) {
  auto o = ClientOpts(port, Id(proto::Role::kWorker, index));
  o.heartbeat_interval = net::Millis{0};
  return o;
}

}  // namespace

TEST_CASE("--max-connections: excess connections are refused with a clear error") {
  net::Runtime rt(2);
  BoundedServer bs(rt, [](net::ServerOptions& o) { o.max_connections = 2; });
  auto a = net::Client::Connect(rt, Quiet(bs.server->port(), 0));
  auto b = net::Client::Connect(rt, Quiet(bs.server->port(), 1));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto o = Quiet(bs.server->port(), 2);
  o.connect_deadline = 300ms;
  auto c = net::Client::Connect(rt, o);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kUnavailable);
  CHECK_THAT(c.status().message(),
             Catch::Contains("refused the connection: too many connections (--max-connections 2)"));
  CHECK(bs.server->stats().refused_connections >= 1);
  CHECK(bs.server->stats().connections == 2);
  CheckEcho(**a);
  (*b)->Close();
  bs.WaitFor([](const auto& s) { return s.connections == 1; });
  auto d = net::Client::Connect(rt, Quiet(bs.server->port(), 3));
  REQUIRE(d.ok());
  CheckEcho(**d);
}

TEST_CASE("requests in flight per connection: the server stops reading at the cap") {
  net::Runtime rt(2);
  BoundedServer bs(rt, [](net::ServerOptions& o) { o.max_in_flight = 2; });
  auto c = net::Client::Connect(rt, Quiet(bs.server->port(), 0));
  REQUIRE(c.ok());
  std::vector<std::future<Result<net::Reply>>> calls;
  for (int i = 0; i < 5; ++i) calls.push_back((*c)->Call(proto::Stop{}));
  auto s = bs.WaitFor([](const auto& st) { return st.paused_readers == 1; });
  CHECK(s.requests == 2);  // the other three wait unread in the socket
  for (;;) {  // both handlers have started (a condition; the test's timeout guards a hang)
    std::lock_guard lock(bs.mu);
    if (bs.busy == 2) break;
  }
  bs.latch.Open();
  for (auto& f : calls) CHECK(f.get().ok());
  std::lock_guard lock(bs.mu);
  CHECK(bs.max_busy == 2);
}

TEST_CASE("write queue: a peer that does not read stops being read, the queue stays bounded") {
  constexpr uint64_t kBound = 2 << 20;
  constexpr size_t kFrame = 256 << 10;
  constexpr int kInFlight = 4, kRequests = 128;
  net::Runtime rt(2);
  BoundedServer bs(rt, [](net::ServerOptions& o) {
    o.max_write_queue_bytes = kBound;
    o.max_in_flight = kInFlight;
  });
  RawClient raw(bs.server->port(), 64 << 10);
  raw.Handshake();
  std::thread writer([&] {  // blocks once the server stops reading; ends when the socket is shut
    std::vector<uint8_t> payload(kFrame, 1);
    for (int i = 0; i < kRequests; ++i) {
      raw.WriteFrame(proto::Encode({static_cast<uint64_t>(10 + i), false, 0, proto::Pull{}}),
                     payload.size());
      raw.Write(payload.data(), payload.size());
    }
  });
  auto s = bs.WaitFor(
      [](const auto& st) { return st.paused_readers == 1 && st.write_queue_bytes >= kBound; });
  CHECK(s.requests < kRequests);
  CHECK(s.peak_write_queue_bytes <= kBound + (kInFlight + 1) * (kFrame + 1024));
  ::shutdown(raw.fd, SHUT_RDWR);  // wakes the writer thread
  writer.join();
  ::close(raw.fd);  // with replies unread: a reset, so the server's blocked write fails
  raw.fd = -1;
  auto c = net::Client::Connect(rt, Quiet(bs.server->port(), 1));
  REQUIRE(c.ok());
  CheckEcho(**c);
  s = bs.WaitFor([](const auto& st) { return st.connections == 1; });
  CHECK(s.peak_write_queue_bytes <= kBound + (kInFlight + 1) * (kFrame + 1024));
}

TEST_CASE("client write queue: callers block instead of queueing without bound") {
  constexpr uint64_t kBound = 1 << 20;
  constexpr size_t kFrame = 256 << 10;
  constexpr int kCalls = 200;  // 50 MiB: far more than the socket buffers hold
  net::Runtime rt(2);
  BoundedServer bs(rt, [](net::ServerOptions& o) { o.max_in_flight = 1; });
  auto o = Quiet(bs.server->port(), 0);
  o.max_write_queue_bytes = kBound;
  auto c = net::Client::Connect(rt, o);
  REQUIRE(c.ok());
  auto blocker =
      (*c)->Call(proto::Stop{});  // holds the only in-flight slot: the server stops reading
  std::vector<float> data(kFrame / 4, 1.0f);
  std::vector<std::future<Result<net::Reply>>> calls;
  std::thread caller([&] {
    for (int i = 0; i < kCalls; ++i) {
      net::OutPayload p;
      p.Add(std::span<const float>(data));
      calls.push_back((*c)->Call(proto::Pull{}, std::move(p)));
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((*c)->peak_queued_bytes() < kBound && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  REQUIRE((*c)->peak_queued_bytes() >= kBound);  // the queue filled up to its bound ...
  bs.latch.Open();
  caller.join();
  CHECK(blocker.get().ok());
  for (auto& f : calls) CHECK(f.get().ok());
  CHECK((*c)->peak_queued_bytes() < kBound + kFrame + 1024);  // ... and never past one more frame
}

TEST_CASE("payload budget: frames wait for room; a frame over the budget is an error") {
  constexpr uint64_t kBudget = 1 << 20;
  constexpr size_t kFrame = 768 << 10;
  net::Runtime rt(2);
  BoundedServer bs(rt, [](net::ServerOptions& o) { o.payload_budget_bytes = kBudget; });
  auto a = net::Client::Connect(rt, Quiet(bs.server->port(), 0));
  auto b = net::Client::Connect(rt, Quiet(bs.server->port(), 1));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  std::vector<float> data(kFrame / 4, 2.0f);
  auto push = [&](net::Client& c) {
    net::OutPayload p;
    p.Add(std::span<const float>(data));
    return c.Call(proto::Push{}, std::move(p));
  };
  auto first = push(**a);
  bs.WaitFor([](const auto& st) { return st.requests == 1; });  // its handler holds the payload
  auto second = push(**b);
  auto s = bs.WaitFor([](const auto& st) { return st.budget_waiters == 1; });
  CHECK(s.payload_bytes == kFrame);  // the second frame's payload is not allocated
  CHECK(s.requests == 1);
  bs.latch.Open();
  CHECK(first.get().ok());
  CHECK(second.get().ok());
  bs.WaitFor([](const auto& st) { return st.payload_bytes == 0 && st.budget_waiters == 0; });

  std::vector<float> big(kBudget / 4 + 1024);
  net::OutPayload p;
  p.Add(std::span<const float>(big));
  auto over = (*a)->CallSync(proto::Pull{}, std::move(p));
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().code() == Code::kInvalidArgument);
  CHECK_THAT(
      over.status().message(),
      Catch::Contains("exceeds the payload memory budget of 1048576 bytes (--payload-budget-mb)"));
  CheckEcho(**a);  // the connection is still in sync
  // The echo's payload is freed once its reply has been written, which the client may
  // see first (the write wakes it): a condition, not a check of the moment.
  bs.WaitFor([](const auto& st) { return st.payload_bytes == 0; });
}

// ---- requests handled on the I/O thread (ServerOptions::run_inline) -------------------

TEST_CASE(
    "inline requests: max_in_flight holds; a parked responder is answered later from another thread") {
  // One I/O thread: anything that blocked it would stop the whole test.
  net::Runtime rt(1);
  std::mutex mu;
  std::vector<net::Responder> parked;  // guarded by mu
  net::ServerOptions o;
  o.identity = Id(proto::Role::kPs, 0);
  o.max_in_flight = 2;
  o.handler_threads = 1;
  o.run_inline = [](const net::Request& req) -> std::shared_ptr<void> {
    return std::holds_alternative<proto::Stop>(req.envelope.body) ? std::make_shared<int>(0)
                                                                  : nullptr;
  };
  auto s = net::Server::Start(rt, o, [&](net::Request req, net::Responder resp) {
    if (std::holds_alternative<proto::Stop>(req.envelope.body)) {
      std::lock_guard lock(mu);
      parked.push_back(std::move(resp));  // parked, as a sync-mode pull is
      return;
    }
    resp.Reply(proto::Ack{});
  });
  REQUIRE(s.ok());
  auto& server = **s;
  auto c = net::Client::Connect(rt, Quiet(server.port(), 0));
  REQUIRE(c.ok());
  std::vector<std::future<Result<net::Reply>>> calls;
  for (int i = 0; i < 5; ++i) calls.push_back((*c)->Call(proto::Stop{}));
  // Two are read and parked; the reader then stops at the cap, as for pool requests.
  const auto deadline = std::chrono::steady_clock::now() + 20s;  // guards a hung test only
  net::Server::Stats st;
  do {
    st = server.stats();
    std::this_thread::yield();
  } while (st.paused_readers != 1 && std::chrono::steady_clock::now() < deadline);
  CHECK(st.paused_readers == 1);
  CHECK(st.requests == 2);
  CHECK(st.inline_requests == 2);
  // Answered from this (non-I/O) thread: each answer frees a slot, the next is read.
  int answered = 0;
  while (answered < 5 && std::chrono::steady_clock::now() < deadline) {
    std::vector<net::Responder> batch;
    {
      std::lock_guard lock(mu);
      batch.swap(parked);
    }
    for (auto& r : batch) r.Reply(proto::Ack{});
    answered += static_cast<int>(batch.size());
    std::this_thread::yield();
  }
  CHECK(answered == 5);
  for (auto& f : calls) CHECK(f.get().ok());
  st = server.stats();
  CHECK(st.requests == 5);
  CHECK(st.inline_requests == 5);
  // A request not accepted by run_inline still goes to the pool.
  CHECK((*c)->CallSync(proto::Pull{}).ok());
  CHECK(server.stats().inline_requests == 5);
  CHECK(server.stats().requests == 6);
}

TEST_CASE(
    "inline requests: a slow pool request does not stall the I/O thread for the same or other peers") {
  net::Runtime rt(1);  // one I/O thread: a slow handler on it would stop every reply
  Latch latch;
  net::ServerOptions o;
  o.identity = Id(proto::Role::kPs, 0);
  o.handler_threads = 1;
  o.run_inline = [](const net::Request& req) -> std::shared_ptr<void> {
    return std::holds_alternative<proto::Pull>(req.envelope.body) ? std::make_shared<int>(0)
                                                                  : nullptr;
  };
  auto s = net::Server::Start(rt, o, [&](net::Request req, net::Responder resp) {
    if (std::holds_alternative<proto::Stop>(req.envelope.body)) latch.Wait();  // slow: on the pool
    resp.Reply(proto::PullReply{}, net::OutPayload::Own(std::move(req.payload)));
  });
  REQUIRE(s.ok());
  struct OpenOnExit {  // before the server closes (it waits for its handlers)
    Latch& latch;
    ~OpenOnExit() { latch.Open(); }
  } open_on_exit{latch};
  auto a = net::Client::Connect(rt, Quiet((*s)->port(), 0));
  auto b = net::Client::Connect(rt, Quiet((*s)->port(), 1));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto slow = (*a)->Call(proto::Stop{});
  // Inline pulls on the same connection and on another one are answered meanwhile
  // (if they were not, these calls would end only with their deadline, as errors).
  for (auto* c : {&*a, &*b}) {
    for (int i = 0; i < 20; ++i) {
      net::OutPayload p;
      std::vector<float> data(16 + i, static_cast<float>(i));
      p.Add(std::span<const float>(data));
      std::vector<float> back(data.size());
      auto r =
          (*c)->CallSync(proto::Pull{}, std::move(p), {std::as_writable_bytes(std::span(back))});
      REQUIRE(r.ok());
      CHECK(back == data);
    }
  }
  latch.Open();
  CHECK(slow.get().ok());
  CHECK((*s)->stats().inline_requests == 40);
}

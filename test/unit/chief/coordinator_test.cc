// Coordinator against in-process fake workers on 127.0.0.1 (kernel-chosen ports).
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "libps/chief/coordinator.h"

using namespace ps;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kCluster = 7;

// Answers RunSteps. While `gate` is closed, requests wait inside the handler, so the
// test can see how many are in flight at once.
struct FakeWorker {
  std::mutex mu;
  std::condition_variable cv;
  bool gate_open = true;
  int inside = 0, max_inside = 0;
  std::set<int64_t> steps_seen;
  Status fail_with;  // non-OK: every RunSteps fails with it
  std::unique_ptr<net::Server> server;

  explicit FakeWorker(net::Runtime& rt) {
    net::ServerOptions o;
    o.identity = {proto::Role::kWorker, 0, kCluster, std::nullopt};
    o.handler_threads = 8;
    auto s = net::Server::Start(rt, o, [this](net::Request req, net::Responder resp) {
      auto* m = std::get_if<proto::RunSteps>(&req.envelope.body);
      // Not REQUIRE: this runs on a handler thread, and Catch2's assertions are not thread-safe.
      if (m == nullptr) return resp.Fail(ProtocolError("FakeWorker expects RunSteps"));
      std::unique_lock lock(mu);
      ++inside;
      max_inside = std::max(max_inside, inside);
      cv.notify_all();
      cv.wait(lock, [&] { return gate_open; });
      --inside;
      for (int i = 0; i < m->count; ++i) steps_seen.insert(m->first_step + i);
      if (!fail_with.ok()) return resp.Fail(fail_with);
      resp.Reply(proto::RunStepsReply{m->count, m->count * 10, 1.0, 5, 0, 0, 0, 0});
    });
    REQUIRE(s.ok());
    server = std::move(*s);
  }
  void Open() {
    std::lock_guard lock(mu);
    gate_open = true;
    cv.notify_all();
  }
  // Until `n` requests wait inside the handler.
  void WaitInside(int n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return inside == n; });
  }
};

std::shared_ptr<net::Client> Dial(net::Runtime& rt, FakeWorker& w, int index) {
  net::ClientOptions o;
  o.host = "127.0.0.1";
  o.port = w.server->port();
  o.peer_name = "worker:" + std::to_string(index);
  o.identity = {proto::Role::kChief, 0, kCluster, std::nullopt};
  auto c = net::Client::Connect(rt, o);
  REQUIRE(c.ok());
  return *c;
}

// Until the coordinator has marked `worker` lost. Client::Close() closes the socket on
// the I/O strand later; a reply let through before that would finish the pack.
void WaitLost(const chief::Coordinator& coord, size_t worker) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (coord.Snapshot()[worker].alive) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::yield();
  }
}

}  // namespace

TEST_CASE("coordinator: every pack runs once, at most N in flight per worker") {
  net::Runtime rt(2);
  FakeWorker a(rt), b(rt);
  a.gate_open = b.gate_open = false;
  chief::Coordinator::Options opts;
  opts.max_in_flight_per_worker = 2;
  chief::Coordinator coord({Dial(rt, a, 0), Dial(rt, b, 1)}, opts);
  std::vector<std::future<Result<chief::PackResult>>> futs;
  for (int i = 0; i < 10; ++i) futs.push_back(coord.Schedule(i * 5, 5));
  CHECK_FALSE(coord.Done());
  {
    std::unique_lock lock(a.mu);
    a.cv.wait(lock, [&] { return a.inside == 2; });
    // A third dispatch to this worker would break the bound; give it a chance to show.
    CHECK_FALSE(a.cv.wait_for(lock, 200ms, [&] { return a.inside > 2; }));
  }
  auto snap = coord.Snapshot();
  CHECK(snap[0].in_flight == 2);
  a.Open();
  b.Open();
  REQUIRE(coord.Join().ok());
  CHECK(coord.Done());
  int64_t steps = 0;
  for (auto& f : futs) {
    auto r = f.get();
    REQUIRE(r.ok());
    steps += r->reply.steps;
  }
  CHECK(steps == 50);
  std::set<int64_t> all = a.steps_seen;
  all.insert(b.steps_seen.begin(), b.steps_seen.end());
  CHECK(all.size() == 50);
  CHECK(a.max_inside <= 2);
  CHECK(b.max_inside <= 2);
}

TEST_CASE("coordinator: a lost worker's packs are re-queued on another") {
  net::Runtime rt(2);
  auto a = std::make_unique<FakeWorker>(rt);
  FakeWorker b(rt);
  b.gate_open = true;
  a->gate_open = false;
  chief::Coordinator::Options opts;
  opts.max_in_flight_per_worker = 2;
  auto client_a = Dial(rt, *a, 0);
  chief::Coordinator coord({client_a, Dial(rt, b, 1)}, opts);
  client_a->OnBroken([&](const Status& why) { coord.MarkLost(0, why); });
  std::vector<std::future<Result<chief::PackResult>>> futs;
  for (int i = 0; i < 8; ++i) futs.push_back(coord.Schedule(i, 1));
  a->WaitInside(2);  // two packs stuck on worker 0
  // The connection to worker 0 goes away with two packs in flight.
  client_a->Close();
  REQUIRE(coord.Join().ok());
  int retried = 0;
  for (auto& f : futs) {
    auto r = f.get();
    REQUIRE(r.ok());
    CHECK(r->worker == 1);  // every result came from worker 1
    if (r->attempts > 1) ++retried;
  }
  CHECK(retried == 2);
  CHECK(b.steps_seen.size() == 8);
  CHECK_FALSE(coord.Snapshot()[0].alive);
  a->Open();  // let the fake's stuck handlers finish before it is destroyed
}

TEST_CASE("coordinator: an error the worker reports fails the job, the queue is cancelled") {
  net::Runtime rt(2);
  FakeWorker a(rt);
  a.fail_with = InvalidArgument("job.train_data: bad file");
  chief::Coordinator::Options opts;
  opts.max_in_flight_per_worker = 1;
  chief::Coordinator coord({Dial(rt, a, 0)}, opts);
  std::vector<std::future<Result<chief::PackResult>>> futs;
  for (int i = 0; i < 5; ++i) futs.push_back(coord.Schedule(i, 1));
  Status st = coord.Join();
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("job.train_data: bad file"));
  CHECK_THAT(st.message(), Catch::Contains("worker:0"));
  int failed = 0;
  for (auto& f : futs) failed += f.get().ok() ? 0 : 1;
  CHECK(failed == 5);
  CHECK(coord.Done());
}

TEST_CASE("coordinator: with every worker lost, packs wait for a rejoin instead of failing") {
  net::Runtime rt(2);
  auto a = std::make_unique<FakeWorker>(rt);
  a->gate_open = false;
  chief::Coordinator::Options opts;
  opts.max_in_flight_per_worker = 1;
  auto client_a = Dial(rt, *a, 0);
  chief::Coordinator coord({client_a}, opts);
  client_a->OnBroken([&](const Status& why) { coord.MarkLost(0, why); });
  std::vector<std::future<Result<chief::PackResult>>> futs;
  for (int i = 0; i < 4; ++i) futs.push_back(coord.Schedule(i, 1));
  a->WaitInside(1);
  client_a->Close();  // the only worker is gone with a pack in flight
  WaitLost(coord, 0);
  a->Open();  // the handler holds no reply back any more
  // Nothing is decided while no worker is alive.
  REQUIRE(futs[0].wait_for(300ms) == std::future_status::timeout);
  CHECK_FALSE(coord.Snapshot()[0].alive);
  FakeWorker back(rt);
  coord.Rejoin(0, Dial(rt, back, 0));
  REQUIRE(coord.Join().ok());
  for (auto& f : futs) {
    auto r = f.get();
    REQUIRE(r.ok());
  }
  CHECK(back.steps_seen.size() == 4);
}

TEST_CASE(
    "coordinator: with no worker back within the recovery timeout, queued packs fail as Unavailable") {
  net::Runtime rt(2);
  FakeWorker a(rt);
  chief::Coordinator::Options opts;
  opts.worker_recovery_timeout = 200ms;
  auto client_a = Dial(rt, a, 0);
  chief::Coordinator coord({client_a}, opts);
  coord.MarkLost(0, Unavailable("worker:0 did not answer"));
  auto fut = coord.Schedule(0, 1);
  Status st = coord.Join();
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == Code::kUnavailable);
  CHECK_THAT(st.message(), Catch::Contains("no worker came back within"));
  CHECK_THAT(st.message(), Catch::Contains("worker:0 did not answer"));
  CHECK_FALSE(fut.get().ok());
}

TEST_CASE(
    "coordinator: the last worker lost with a pack in flight: after the recovery timeout every pack fails") {
  net::Runtime rt(2);
  auto a = std::make_unique<FakeWorker>(rt);
  a->gate_open = false;
  chief::Coordinator::Options opts;
  opts.max_in_flight_per_worker = 1;
  opts.worker_recovery_timeout = 200ms;
  auto client_a = Dial(rt, *a, 0);
  chief::Coordinator coord({client_a}, opts);
  client_a->OnBroken([&](const Status& why) { coord.MarkLost(0, why); });
  auto first = coord.Schedule(0, 1);
  auto second = coord.Schedule(1, 1);  // queued: the worker is full
  a->WaitInside(1);
  client_a->Close();  // the dispatcher is already waiting when the last worker goes
  Status st = coord.Join();
  CHECK(st.code() == Code::kUnavailable);
  for (auto* f : {&first, &second}) {
    auto r = f->get();
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK_THAT(r.status().message(), Catch::Contains("no worker came back within 0.2 s"));
  }
  a->Open();
}

TEST_CASE(
    "coordinator: after CancelQueued (a stop), a pack whose worker was the last one fails Aborted at once") {
  net::Runtime rt(2);
  auto a = std::make_unique<FakeWorker>(rt);
  a->gate_open = false;
  chief::Coordinator::Options opts;
  opts.max_in_flight_per_worker = 1;
  auto client_a = Dial(rt, *a, 0);  // the default 600 s recovery timeout: no waiting for it here
  chief::Coordinator coord({client_a}, opts);
  client_a->OnBroken([&](const Status& why) { coord.MarkLost(0, why); });
  auto first = coord.Schedule(0, 1);
  a->WaitInside(1);
  coord.CancelQueued(Aborted("stopping"));
  client_a->Close();
  auto r = first.get();
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kAborted);
  CHECK(coord.Done());
  a->Open();
}

TEST_CASE("coordinator: a worker that refuses packs because it is stopping gets no more") {
  net::Runtime rt(2);
  FakeWorker a(rt), b(rt);
  a.fail_with = Draining("worker:0 is stopping");
  chief::Coordinator::Options opts;
  opts.max_attempts = 1;  // a refusal costs no attempt: one is enough
  chief::Coordinator coord({Dial(rt, a, 0), Dial(rt, b, 1)}, opts);
  std::vector<std::future<Result<chief::PackResult>>> futs;
  for (int i = 0; i < 6; ++i) futs.push_back(coord.Schedule(i, 1));
  REQUIRE(coord.Join().ok());
  for (auto& f : futs) {
    auto r = f.get();
    REQUIRE(r.ok());
    CHECK(r->worker == 1);
  }
  CHECK(b.steps_seen.size() == 6);
  auto snap = coord.Snapshot();
  CHECK_FALSE(snap[0].alive);
  CHECK(snap[1].alive);
  CHECK_THAT(snap[0].last_error, Catch::Contains("is stopping"));
  // It refused at most the packs it was given before the first refusal came back.
  CHECK(a.steps_seen.size() <= 2);
}

TEST_CASE(
    "coordinator: packs that need a lease wait while none can be given; ReturnWaiting ends them") {
  net::Runtime rt(2);
  FakeWorker a(rt);
  std::atomic<bool> ready{false};
  std::atomic<int> leases{0}, answered{0};
  chief::Coordinator::Options opts;
  opts.lease = [&](int, int) {
    proto::DataLease l{};
    l.seq = leases++;
    return l;
  };
  opts.lease_done = [&](const proto::DataLease&, const proto::RunStepsReply* r) {
    if (r != nullptr) ++answered;
  };
  opts.lease_ready = [&] { return ready.load(); };
  chief::Coordinator coord({Dial(rt, a, 0)}, opts);
  std::vector<std::future<Result<chief::PackResult>>> futs;
  for (int i = 0; i < 3; ++i) futs.push_back(coord.Schedule(i * 5, 5));
  {
    // Nothing to lease: no pack reaches the worker (give one a chance to show).
    std::unique_lock lock(a.mu);
    CHECK_FALSE(a.cv.wait_for(lock, 200ms, [&] { return a.inside > 0 || !a.steps_seen.empty(); }));
  }
  CHECK(leases == 0);
  CHECK_FALSE(coord.Done());
  // Data arrived: the packs go out, each with its lease.
  ready = true;
  coord.Wake();
  for (auto& f : futs) {
    auto r = f.get();
    REQUIRE(r.ok());
    CHECK(r->reply.steps == 5);
  }
  CHECK(leases == 3);
  CHECK(answered == 3);
  // Nothing again: a checkpoint due ends the waiting packs, with no step run and no lease.
  ready = false;
  auto d = coord.Schedule(15, 5);
  auto e = coord.Schedule(20, 5);
  CHECK(coord.ReturnWaiting() == 2);
  for (auto* f : {&d, &e}) {
    auto r = f->get();
    REQUIRE(r.ok());
    CHECK(r->reply.steps == 0);
    CHECK(r->worker == -1);
  }
  CHECK(leases == 3);
  CHECK(a.steps_seen.size() == 15u);
  REQUIRE(coord.Join().ok());
  CHECK(coord.Done());
}

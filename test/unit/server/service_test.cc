// The ps request service over real TCP on 127.0.0.1 (kernel-chosen port): variable
// creation, pulls and pushes (values checked by hand), bad requests answered with an
// error while the ps keeps serving, and exact sums under many concurrent pushers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "libps/client/ps_link.h"
#include "libps/net/transport.h"
#include "libps/server/service.h"
#include "libps/server/wire_specs.h"
#include "test/unit/net/net_test_util.h"

using namespace ps;

namespace {

constexpr uint64_t kCluster = 42;

struct PsFixture {
  net::Runtime runtime{2};
  ::ps::server::Store store;
  ::ps::server::Service service;
  std::unique_ptr<net::Server> server;
  explicit PsFixture(
      ::ps::server::Checkpointer* checkpointer = nullptr,
      uint64_t early_apply_min_bytes = ::ps::server::Service::kDefaultEarlyApplyBytes)
      : service(&store, checkpointer) {
    net::ServerOptions o;
    o.identity = {proto::Role::kPs, 0, kCluster, std::nullopt};
    o.handler_threads = 4;
    service.Attach(o, early_apply_min_bytes);  // as RunPsTask
    auto s = net::Server::Start(runtime, o, [this](net::Request r, net::Responder resp) {
      service.Handle(std::move(r), std::move(resp));
    });
    REQUIRE(s.ok());
    server = std::move(*s);
  }
  // Clients on `rt` (default: the server's runtime).
  std::shared_ptr<net::Client> Connect(int worker = 0, uint64_t generation = 0,
                                       proto::Role role = proto::Role::kWorker,
                                       net::Runtime* rt = nullptr) {
    net::ClientOptions o;
    o.generation = generation;
    o.host = "127.0.0.1";
    o.port = server->port();
    o.peer_name = "ps:0";
    o.identity = {role, worker, kCluster, std::nullopt};
    auto c = net::Client::Connect(rt != nullptr ? *rt : runtime, o);
    REQUIRE(c.ok());
    return *c;
  }
};

// The wire form of an optimizer or initializer given in the job file's JSON form.
proto::Optimizer Opt(const std::string& json) {
  auto parsed = ParseJson(json, "optimizer");
  REQUIRE(parsed.ok());
  auto spec = ::ps::server::ParseOptimizer(*parsed, "optimizer");
  REQUIRE(spec.ok());
  return ::ps::server::OptimizerToWire(*spec);
}
proto::Initializer Init(const std::string& json) {
  auto parsed = ParseJson(json, "init");
  REQUIRE(parsed.ok());
  auto spec = model::ParseInit(*parsed, "init");
  REQUIRE(spec.ok());
  return ::ps::server::InitToWire(*spec);
}

proto::ShardDef Def(std::string var, int shard, int64_t row_begin, int64_t rows, int64_t cols,
                    int64_t total_rows) {
  return {.layout = {.var = std::move(var),
                     .shard = shard,
                     .num_shards = 2,
                     .row_begin = row_begin,
                     .rows = rows,
                     .cols = cols,
                     .full_shape = {total_rows, cols},
                     .lazy = false},
          .init = Init(R"({"type":"constant","value":1.0})"),
          .seed = 0};
}

proto::Slice All(std::string var, int shard) { return {std::move(var), shard, true, {}}; }
proto::Slice Rows(std::string var, int shard, std::vector<int64_t> rows) {
  return {std::move(var), shard, false, std::move(rows)};
}

std::vector<float> PullAll(net::Client& c, const std::string& var, int shard, size_t n) {
  std::vector<float> out(n);
  auto r = c.CallSync(proto::Pull{{All(var, shard)}}, {}, {std::as_writable_bytes(std::span(out))});
  REQUIRE(r.ok());
  return out;
}

net::OutPayload Floats(std::vector<float> v) {
  net::Buffer b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return net::OutPayload::Own(std::move(b));
}

}  // namespace

TEST_CASE("ps service: create, pull whole shards and rows, push with SGD") {
  PsFixture fx;
  auto c = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":0.5})");
  cs.shards = {Def("w", 0, 0, 3, 2, 5), Def("w", 1, 3, 2, 2, 5)};
  REQUIRE(c->CallSync(cs).ok());
  REQUIRE(c->CallSync(cs).ok());  // the same create again is a no-op (a restarted chief)

  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>(6, 1.0f));

  // Push a gradient to rows 0 and 2 of shard 0 and all of shard 1 in one request.
  proto::Push push{{Rows("w", 0, {0, 2}), All("w", 1)}, 7, 7};
  auto r = c->CallSync(push, Floats({2, 2, 4, 4, /* shard 1 */ 1, 1, 1, 1}));
  REQUIRE(r.ok());
  // SGD lr 0.5: w -= 0.5 * g
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>{0, 0, 1, 1, -1, -1});
  CHECK(PullAll(*c, "w", 1, 4) == std::vector<float>(4, 0.5f));

  // A pull of rows returns exactly those rows, in the order asked.
  std::vector<float> rows(4);
  REQUIRE(c->CallSync(proto::Pull{{Rows("w", 0, {2, 1})}}, {},
                      {std::as_writable_bytes(std::span(rows))})
              .ok());
  CHECK(rows == std::vector<float>{-1, -1, 1, 1});
}

TEST_CASE("ps service: bad requests get errors and the ps keeps serving") {
  PsFixture fx;
  auto c = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
  cs.shards = {Def("w", 0, 0, 2, 2, 2)};
  cs.shards[0].layout.full_shape = {2, 2};
  REQUIRE(c->CallSync(cs).ok());

  SECTION("payload size inconsistent with the envelope") {
    auto r = c->CallSync(proto::Push{{All("w", 0)}, 0, 0}, Floats({1, 2, 3}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() == "Push: payload has 12 bytes but its items need 16");
  }
  SECTION("unknown shard") {
    auto r = c->CallSync(proto::Pull{{All("nope", 0)}});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kNotFound);
  }
  SECTION("row out of range") {
    auto r = c->CallSync(proto::Pull{{Rows("w", 0, {5})}});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kOutOfRange);
  }
  SECTION("a message a ps does not handle") {
    auto r = c->CallSync(proto::RunSteps{0, 1});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "a ps does not handle RunSteps");
  }
  SECTION("a different optimizer for the same store") {
    proto::CreateShards other = cs;
    other.optimizer = Opt(R"({"type":"adam"})");
    CHECK_FALSE(c->CallSync(other).ok());
  }
  SECTION("save without a checkpointer") {
    auto r = c->CallSync(proto::Save{"/tmp", 1});
    CHECK(r.status().code() == Code::kFailedPrecondition);
  }
  // The values are untouched and a normal request still succeeds.
  CHECK(PullAll(*c, "w", 0, 4) == std::vector<float>(4, 1.0f));
  REQUIRE(c->CallSync(proto::Push{{All("w", 0)}, 0, 0}, Floats({1, 1, 1, 1})).ok());
  CHECK(PullAll(*c, "w", 0, 4) == std::vector<float>(4, 0.0f));
}

TEST_CASE(
    "ps service: a bad CreateShards is answered with an error naming the field, and nothing is created") {
  PsFixture fx;
  auto c = fx.Connect();
  auto create = [&](const proto::CreateShards& cs) {
    auto r = c->CallSync(cs);
    REQUIRE_FALSE(r.ok());
    return r.status();
  };
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
  cs.shards = {Def("w", 2, 0, 2, 2, 4)};  // shard 2 of 2: rejected by the codec, on the ps
  Status st = create(cs);
  CHECK(st.code() == Code::kProtocol);
  CHECK(st.message() == "CreateShards.shards[0]: w/part_2: shard 2 is outside [0, num_shards 2)");

  cs.shards = {Def("w", 0, 0, 2, 2, 4)};
  cs.shards[0].init.kind = proto::InitKind::kNormal;
  cs.shards[0].init.stddev = -1;
  st = create(cs);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message() ==
        "CreateShards: w/part_0.init.stddev: must be finite and >= 0, got -1.000000");

  cs.shards = {Def("w", 0, 0, 2, 2, 4)};
  cs.optimizer.learning_rate = -1;
  CHECK(create(cs).message().starts_with("CreateShards.optimizer.learning_rate: "));

  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
  cs.update = ::ps::server::UpdateToWire({.mode = ::ps::server::UpdateMode::kSync,
                                          .replicas_to_aggregate = 3,
                                          .staleness = 4,
                                          .num_workers = 2});
  CHECK(create(cs).message() ==
        "CreateShards.update.replicas_to_aggregate: 3 is more than the cluster's 2 worker(s)");

  CHECK(fx.store.Keys().empty());
  cs.update = {};
  REQUIRE(c->CallSync(cs).ok());  // the connection still works
  CHECK(fx.store.Keys() == std::vector<::ps::server::ShardKey>{{"w", 0}});
}

TEST_CASE("ps service: concurrent pushes from many workers give the exact sum") {
  PsFixture fx;
  const int kWorkers = 8, kPushes = 200;
  const int64_t kRows = 64, kCols = 16;
  {
    auto c = fx.Connect();
    proto::CreateShards cs;
    cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
    cs.shards = {Def("w", 0, 0, kRows, kCols, kRows)};
    cs.shards[0].layout.full_shape = {kRows, kCols};
    cs.shards[0].init = Init(R"({"type":"zeros"})");
    REQUIRE(c->CallSync(cs).ok());
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  // Clients are made here: Catch2's assertions (in Connect) are not thread-safe.
  std::vector<std::shared_ptr<net::Client>> clients;
  for (int w = 0; w < kWorkers; ++w) clients.push_back(fx.Connect(w));
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      auto& c = clients[static_cast<size_t>(w)];
      // Worker w pushes -(w+1) everywhere (dense) and -1 on rows {w, w+8} (sparse):
      // small integers, so float sums are exact.
      std::vector<float> dense(kRows * kCols, -static_cast<float>(w + 1));
      std::vector<float> sparse(2 * kCols, -1.0f);
      for (int i = 0; i < kPushes; ++i) {
        net::OutPayload p;
        p.Add(std::span<const float>(dense));
        const int64_t step = (w * kPushes + i) * 2;  // every push its own step id
        if (!c->CallSync(proto::Push{{All("w", 0)}, step, step}, std::move(p)).ok()) ++failures;
        net::OutPayload q;
        q.Add(std::span<const float>(sparse));
        if (!c->CallSync(proto::Push{{Rows("w", 0, {w, w + 8})}, step + 1, step + 1}, std::move(q))
                 .ok())
          ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  auto c = fx.Connect();
  auto v = PullAll(*c, "w", 0, kRows * kCols);
  // SGD lr 1: w = -sum(g). Dense: sum over workers of (w+1) * pushes = 36 * 200.
  for (int64_t r = 0; r < kRows; ++r) {
    float expect = 36.0f * kPushes + ((r < 2 * kWorkers) ? kPushes : 0.0f);
    for (int64_t col = 0; col < kCols; ++col) REQUIRE(v[r * kCols + col] == expect);
  }
}

TEST_CASE(
    "ps service: big pulls sent straight from the store, or while copied, see every row wholly before or after each push, and are counted") {
  PsFixture fx;
  // Inline: "big" and "big2" (512 KiB and 128 KiB, rows of 16 KiB) are sent from the
  // store's memory (Service::kDirectPullBytes), "w" rows are copied in between. On the
  // pool (`pool`): "big" is 5 MiB, too big for the I/O thread, and the reply of the two
  // whole shards is sent while it is copied (Service::kProgressivePullBytes). Pushers add
  // 1 to every float of both big shards at a time: a row of a reply must be uniform.
  const bool pool = GENERATE(false, true);
  INFO((pool ? "a 5 MiB pull on the pool" : "an inline pull"));
  const int64_t kCols = 4096, kBigRows = pool ? 320 : 32, kBig2Rows = 8, kPulls = pool ? 40 : 200;
  {
    auto c = fx.Connect();
    proto::CreateShards cs;
    cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
    cs.shards = {Def("big", 0, 0, kBigRows, kCols, kBigRows),
                 Def("big2", 0, 0, kBig2Rows, kCols, kBig2Rows), Def("w", 0, 0, 8, 4, 8)};
    for (auto& d : cs.shards) {
      d.layout.num_shards = 1;
      d.layout.full_shape = {d.layout.rows, d.layout.cols};
      if (d.layout.var != "w") d.init = Init(R"({"type":"zeros"})");
    }
    REQUIRE(c->CallSync(cs).ok());
  }
  // The clients on a runtime of their own: the server's connections alone are spread
  // over its two I/O threads, so a pusher's inline pushes run beside the pulls.
  net::Runtime clients(2);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, pushes{0};
  std::vector<std::shared_ptr<net::Client>> pushers{
      fx.Connect(1, 0, proto::Role::kWorker, &clients),
      fx.Connect(2, 0, proto::Role::kWorker, &clients),
      fx.Connect(3, 0, proto::Role::kWorker, &clients)};
  std::vector<std::thread> threads;
  for (auto& pc : pushers) {
    threads.emplace_back([&, pc] {
      std::vector<float> grad((kBigRows + kBig2Rows) * kCols, -1.0f);
      while (!stop.load()) {
        net::OutPayload p;
        p.Add(std::span<const float>(grad));
        if (!pc->CallSync(proto::Push{{All("big", 0), All("big2", 0)}, 0, -1}, std::move(p)).ok())
          ++failures;
        ++pushes;
      }
    });
  }
  auto c = fx.Connect(0, 0, proto::Role::kWorker, &clients);
  const auto before = fx.store.stats();
  const uint64_t direct_before = fx.service.direct_pulls(),
                 progressive_before = fx.service.progressive_pulls();
  std::vector<float> big(kBigRows * kCols), w(2 * 4), big2(kBig2Rows * kCols);
  int64_t torn = 0, wrong_w = 0, failed_pulls = 0;
  for (int64_t i = 0; i < kPulls; ++i) {
    auto r =
        pool ? c->CallSync(proto::Pull{{All("big", 0), All("big2", 0)}}, {},
                           {std::as_writable_bytes(std::span(big)),
                            std::as_writable_bytes(std::span(big2))})
             : c->CallSync(
                   proto::Pull{{All("big", 0), Rows("w", 0, {1, 3}), All("big2", 0)}}, {},
                   {std::as_writable_bytes(std::span(big)), std::as_writable_bytes(std::span(w)),
                    std::as_writable_bytes(std::span(big2))});
    if (!r.ok() || !r->payload_in_place) {
      ++failed_pulls;
      continue;
    }
    for (const auto* v : {&big, &big2}) {
      for (size_t row = 0; row < v->size() / kCols; ++row) {
        const float* x = v->data() + row * kCols;
        if (std::any_of(x, x + kCols, [&](float f) { return f != x[0]; })) ++torn;
      }
    }
    if (!pool) wrong_w += std::count_if(w.begin(), w.end(), [](float f) { return f != 1.0f; });
  }
  stop = true;
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  CHECK(failed_pulls == 0);
  CHECK(torn == 0);
  CHECK(wrong_w == 0);
  CHECK(pushes.load() > 0);
  if (pool) {
    CHECK(fx.service.progressive_pulls() - progressive_before == uint64_t(kPulls));
    CHECK(fx.service.direct_pulls() == direct_before);
  } else {
    // Sent from the store (the others fell back to copying when a reply was still queued).
    CHECK(fx.service.direct_pulls() > direct_before);
  }
  // Each item counted as a pull, borrowed or copied alike.
  const auto after = fx.store.stats();
  const int64_t w_rows = pool ? 0 : 2;
  CHECK(after.pull_requests - before.pull_requests == uint64_t((pool ? 2 : 3) * kPulls));
  CHECK(after.bytes_pulled - before.bytes_pulled ==
        uint64_t(kPulls * ((kBigRows + kBig2Rows) * kCols + 4 * w_rows) * 4));
  CHECK(after.rows_pulled - before.rows_pulled ==
        uint64_t(kPulls * (kBigRows + kBig2Rows + w_rows)));
  CHECK(after.failed_requests == before.failed_requests);
  // Once quiet, every float holds the number of pushes.
  CHECK(PullAll(*c, "big", 0, kBigRows * kCols) ==
        std::vector<float>(kBigRows * kCols, float(pushes.load())));
}

TEST_CASE("ps service: a step's gradient is applied at most once per shard") {
  PsFixture fx;
  auto c = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
  cs.shards = {Def("w", 0, 0, 1, 2, 2), Def("w", 1, 1, 1, 2, 2)};
  REQUIRE(c->CallSync(cs).ok());
  auto push = [&](std::vector<proto::Slice> items, int64_t step) {
    std::vector<float> g(items.size() * 2, 1.0f);
    auto r = c->CallSync(proto::Push{std::move(items), step, step}, Floats(g));
    REQUIRE(r.ok());
    return std::get<proto::PushReply>(r->envelope.body).skipped;
  };
  CHECK(push({All("w", 0)}, 5) == 0);
  CHECK(push({All("w", 0)}, 5) == 1);               // resent after a lost reply: ignored
  CHECK(push({All("w", 0), All("w", 1)}, 5) == 1);  // retried step: shard 1 is new, shard 0 is not
  CHECK(push({All("w", 0)}, 6) == 0);               // the next step applies
  CHECK(push({All("w", 0)}, -1) == 0);              // untracked pushes always apply
  CHECK(PullAll(*c, "w", 0, 2) == std::vector<float>(2, -2.0f));  // 1 - steps 5, 6, untracked
  CHECK(PullAll(*c, "w", 1, 2) == std::vector<float>(2, 0.0f));
  CHECK(fx.service.skipped_pushes() == 2);
}

TEST_CASE("ps service: requests of an older chief generation are refused") {
  PsFixture fx;
  auto chief = fx.Connect(0, 200, proto::Role::kChief);
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
  cs.shards = {Def("w", 0, 0, 1, 2, 1)};
  cs.shards[0].layout.full_shape = {1, 2};
  REQUIRE(chief->CallSync(cs).ok());
  CHECK(fx.service.generation() == 200);

  auto worker = fx.Connect();  // generation 0: a worker still working for a dead chief
  auto stale = worker->CallSync(proto::Push{{All("w", 0)}, 0, 0}, Floats({1, 1}));
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.status().code() == Code::kAborted);
  worker->SetGeneration(200);
  CHECK(worker->CallSync(proto::Push{{All("w", 0)}, 0, 0}, Floats({1, 1})).ok());

  chief->SetGeneration(100);  // an old chief's late message
  auto old = chief->CallSync(proto::Shutdown{"late"});
  REQUIRE_FALSE(old.ok());
  CHECK_THAT(old.status().message(), Catch::Contains("stale chief"));
}

// ---- update modes ------------------------------------------------------------------

namespace {

::ps::server::UpdateSpec Mode(::ps::server::UpdateMode mode, int replicas, int staleness,
                              int workers) {
  return {.mode = mode,
          .replicas_to_aggregate = replicas,
          .staleness = staleness,
          .num_workers = workers};
}

proto::CreateShards ModeCreate(const ::ps::server::UpdateSpec& update,
                               const std::string& optimizer_json) {
  proto::CreateShards cs;
  cs.optimizer = Opt(optimizer_json);
  cs.update = ::ps::server::UpdateToWire(update);
  cs.shards = {Def("w", 0, 0, 3, 2, 5), Def("w", 1, 3, 2, 2, 5)};
  return cs;
}

proto::Push ModePush(std::vector<proto::Slice> items, int worker, int64_t clock,
                     int64_t step_id = -1) {
  proto::Push p{std::move(items), clock, step_id};
  p.worker = worker;
  p.clock = clock;
  return p;
}

proto::PushReply PushReplyOf(Result<net::Reply> r) {
  REQUIRE(r.ok());
  return std::get<proto::PushReply>(r->envelope.body);
}

// An update-mode pull of the whole of w/part_0 (6 floats) into `out`, as `worker` at `clock`.
std::future<Result<net::Reply>> ModePull(net::Client& c, int worker, int64_t clock,
                                         std::vector<float>& out) {
  return c.Call(proto::Pull{{All("w", 0)}, worker, clock}, {},
                {std::as_writable_bytes(std::span(out))});
}

// Polls (no sleeping) until `pred` holds; false after 10 s.
template <typename Pred>
bool Eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Holds every push of `service` after its generation check (SetPushHookForTesting)
// until Release.
class HeldPushes {
 public:
  explicit HeldPushes(::ps::server::Service& service) {
    service.SetPushHookForTesting([this] {
      std::unique_lock lock(mu_);
      in_push_ = true;
      cv_.notify_all();
      cv_.wait(lock, [this] { return release_; });
    });
  }
  // Until a push has reached the hook.
  void WaitForOne() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return in_push_; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    release_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool in_push_ = false, release_ = false;
};

}  // namespace

TEST_CASE(
    "ps service: a push that passed a dead chief's generation check lands before the new chief's CreateShards, never after it") {
  PsFixture fx;
  // The push of a worker still running the old chief's pack stops after its generation
  // check until the test lets it go.
  HeldPushes held(fx.service);
  auto chief_at = [&](uint64_t generation) {
    return fx.Connect(0, generation, proto::Role::kChief);
  };
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
  cs.shards = {Def("w", 0, 0, 1, 2, 1)};
  cs.shards[0].layout.full_shape = {1, 2};
  auto old_chief = chief_at(100);
  REQUIRE(old_chief->CallSync(cs).ok());
  auto worker = fx.Connect();
  worker->SetGeneration(100);
  auto late = worker->Call(proto::Push{{All("w", 0)}, 0, 0}, Floats({1, 1}));
  held.WaitForOne();  // checked against generation 100, not applied yet
  // The new chief's first request raises the generation, then waits for that push.
  auto new_chief = chief_at(200);
  auto created = new_chief->Call(cs);
  for (int i = 0; i < 10000 && fx.service.generation() != 200; ++i) std::this_thread::yield();
  REQUIRE(fx.service.generation() == 200);
  // Fenced: without the fence it would be answered within milliseconds; with it, never
  // while the push is held.
  CHECK(created.wait_for(std::chrono::seconds(1)) == std::future_status::timeout);
  held.Release();
  REQUIRE(late.get().ok());     // applied before the new generation's CreateShards ...
  REQUIRE(created.get().ok());  // ... which therefore starts from a ps no old push touches again
  // From now on that worker's pushes are refused: nothing of the old chief lands between
  // the new chief's CreateShards and its Restore.
  auto after = worker->CallSync(proto::Push{{All("w", 0)}, 1, 0}, Floats({1, 1}));
  REQUIRE_FALSE(after.ok());
  CHECK(after.status().code() == Code::kAborted);
}

TEST_CASE(
    "sync mode: R gradients of an update are averaged and applied once; late and repeated ones are not") {
  PsFixture fx;
  auto c = fx.Connect();
  // 3 workers, 2 aggregated per update: worker 2 is a backup.
  REQUIRE(c->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kSync, 2, 0, 3),
                                 R"({"type":"sgd","learning_rate":0.5})"))
              .ok());

  // Worker 0: the whole of shard 0 and row 0 of shard 1.
  auto r0 = PushReplyOf(c->CallSync(ModePush({All("w", 0), Rows("w", 1, {0})}, 0, 0),
                                    Floats({2, 2, 4, 4, 6, 6, 1, 1})));
  CHECK(r0.stale == 0);
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>(6, 1.0f));  // nothing applied with 1 of 2
  // The same push again (a lost reply): ignored.
  CHECK(PushReplyOf(c->CallSync(ModePush({All("w", 0), Rows("w", 1, {0})}, 0, 0),
                                Floats({2, 2, 4, 4, 6, 6, 1, 1})))
            .skipped == 2);
  // Worker 1: shard 0, and row 1 of shard 1 (row 0 untouched: a zero gradient for it).
  CHECK(PushReplyOf(c->CallSync(ModePush({All("w", 0), Rows("w", 1, {1})}, 1, 0),
                                Floats({0, 0, 0, 0, 2, 2, 4, 4})))
            .stale == 0);
  // One SGD step with the average: w = 1 - 0.5 * (g0 + g1) / 2.
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>{0.5f, 0.5f, 0.0f, 0.0f, -1.0f, -1.0f});
  CHECK(PullAll(*c, "w", 1, 4) == std::vector<float>{0.75f, 0.75f, 0.0f, 0.0f});

  // The backup is late for update 0: both of its items are dropped and counted.
  auto late = PushReplyOf(c->CallSync(ModePush({All("w", 0), Rows("w", 1, {0})}, 2, 0),
                                      Floats({9, 9, 9, 9, 9, 9, 9, 9})));
  CHECK(late.stale == 2);
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>{0.5f, 0.5f, 0.0f, 0.0f, -1.0f, -1.0f});
  CHECK(fx.service.update_stats().stale_dropped == 2);

  // A pull for update 1 sees every shard at version 1.
  std::vector<float> out(6);
  proto::Pull pull{{All("w", 0), Rows("w", 1, {})}, 0, 1};
  auto r = c->CallSync(pull, {}, {std::as_writable_bytes(std::span(out))});
  REQUIRE(r.ok());
  CHECK(std::get<proto::PullReply>(r->envelope.body).versions == std::vector<int64_t>{1, 1});

  // A gradient for an update the shard has not reached is an error, not silently used.
  auto ahead = c->CallSync(ModePush({All("w", 0)}, 0, 5), Floats({1, 1, 1, 1, 1, 1}));
  REQUIRE_FALSE(ahead.ok());
  CHECK(ahead.status().code() == Code::kFailedPrecondition);
  // Training pushes must say who sent them.
  auto anonymous = c->CallSync(proto::Push{{All("w", 0)}, 1, 1}, Floats({1, 1, 1, 1, 1, 1}));
  REQUIRE_FALSE(anonymous.ok());
  CHECK(anonymous.status().code() == Code::kInvalidArgument);
}

TEST_CASE(
    "sync mode: a pull for the next update waits, holding no thread, until the update is applied") {
  PsFixture fx;
  auto c = fx.Connect();
  REQUIRE(c->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kSync, 0, 0, 2),
                                 R"({"type":"sgd","learning_rate":1.0})"))
              .ok());
  std::vector<float> out(6);
  auto waiting = ModePull(*c, 0, 1, out);
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 1; }));
  CHECK(waiting.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  // Other requests are served meanwhile, on the same connection too.
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>(6, 1.0f));
  REQUIRE(c->CallSync(ModePush({All("w", 0)}, 0, 0), Floats({1, 1, 1, 1, 1, 1})).ok());
  CHECK(waiting.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);  // 1 of 2
  REQUIRE(c->CallSync(ModePush({All("w", 0)}, 1, 0), Floats({3, 3, 3, 3, 3, 3})).ok());
  auto r = waiting.get();
  REQUIRE(r.ok());
  CHECK(out == std::vector<float>(6, -1.0f));  // 1 - (1 + 3) / 2
  CHECK(std::get<proto::PullReply>(r->envelope.body).versions == std::vector<int64_t>{1});

  // A parked pull is failed, not left hanging, when the ps stops.
  auto parked = ModePull(*c, 0, 5, out);
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 2; }));
  fx.service.RequestStop({"test"});
  auto failed = parked.get();
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == Code::kAborted);
}

TEST_CASE(
    "sync mode: ReleasePulls (a ps is down) fails the waiting pulls and those that would wait, until a CreateShards") {
  PsFixture fx;
  auto c = fx.Connect();
  const auto create = ModeCreate(Mode(::ps::server::UpdateMode::kSync, 0, 0, 2),
                                 R"({"type":"sgd","learning_rate":1.0})");
  REQUIRE(c->CallSync(create).ok());
  std::vector<float> out(6);
  // Worker 0 waits for update 0, which worker 1 (its step failed on the dead ps) never pushes.
  REQUIRE(c->CallSync(ModePush({All("w", 0)}, 0, 0), Floats({1, 1, 1, 1, 1, 1})).ok());
  auto waiting = ModePull(*c, 0, 1, out);
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 1; }));
  REQUIRE(c->CallSync(proto::ReleasePulls{"ps:1 is down"}).ok());
  auto released = waiting.get();
  REQUIRE_FALSE(released.ok());
  CHECK(released.status().code() == Code::kAborted);
  CHECK_THAT(released.status().message(), Catch::Contains("ps:1 is down"));
  // A pull arriving after the release (it was in flight) fails at once instead of parking.
  auto late = ModePull(*c, 0, 1, out).get();
  REQUIRE_FALSE(late.ok());
  CHECK(late.status().code() == Code::kAborted);
  CHECK(fx.service.update_stats().waited_pulls == 1);
  // A pull that needs no wait is served as usual.
  CHECK(ModePull(*c, 1, 0, out).get().ok());
  // The recovery's CreateShards (or Restore) ends the release: pulls wait again.
  REQUIRE(c->CallSync(create).ok());
  auto again = ModePull(*c, 0, 1, out);
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 2; }));
  CHECK(again.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  fx.service.RequestStop({"test"});
  CHECK_FALSE(again.get().ok());
}

// ---- hybrid update modes: a mode per variable class ------------------------------

namespace {

// d/part_0: a dense variable (pulled whole), 3 x 2; e/part_0: an embedding table pulled
// and pushed by rows (ShardDef.sparse), 4 x 2; l/part_0: a lazy table, 4 x 2 (a lazy
// shard is sparse whatever its flag says). Every value starts at 1.
proto::CreateShards HybridCreate(const ::ps::server::UpdateSpec& update,
                                 const std::string& optimizer_json) {
  proto::CreateShards cs;
  cs.optimizer = Opt(optimizer_json);
  cs.update = ::ps::server::UpdateToWire(update);
  proto::ShardDef d = Def("d", 0, 0, 3, 2, 3), e = Def("e", 0, 0, 4, 2, 4),
                  l = Def("l", 0, 0, 4, 2, 4);
  d.layout.num_shards = e.layout.num_shards = l.layout.num_shards = 1;
  e.sparse = true;
  l.layout.lazy = true;
  cs.shards = {d, e, l};
  return cs;
}

::ps::server::UpdateSpec Hybrid(::ps::server::UpdateMode dense, ::ps::server::UpdateMode sparse,
                                int workers) {
  ::ps::server::UpdateSpec u = Mode(dense, 0, 0, workers);
  u.sparse_mode = sparse;
  return u;
}

// Rows of `var`/part_0 (2 floats each), read without a clock (what is there now).
std::vector<float> PullRowsNow(net::Client& c, const std::string& var, std::vector<int64_t> rows) {
  std::vector<float> out(rows.size() * 2);
  auto r = c.CallSync(proto::Pull{{Rows(var, 0, std::move(rows))}}, {},
                      {std::as_writable_bytes(std::span(out))});
  REQUIRE(r.ok());
  return out;
}

// Saves nothing and says it did: what the service does around a Save.
struct NullCheckpointer : ::ps::server::Checkpointer {
  Result<proto::SaveReply> Save(const proto::Save&) override { return proto::SaveReply{}; }
  Status Restore(const proto::Restore&) override { return Status::Ok(); }
};

}  // namespace

TEST_CASE(
    "hybrid, dense sync + sparse async: the dense shard averages each update, the sparse one applies every push on arrival") {
  using ::ps::server::UpdateMode;
  PsFixture fx;
  auto c = fx.Connect();
  REQUIRE(c->CallSync(HybridCreate(Hybrid(UpdateMode::kSync, UpdateMode::kAsync, 2),
                                   R"({"type":"sgd","learning_rate":0.5})"))
              .ok());
  // Worker 0, update 0: the dense shard and row 1 of the embedding.
  auto r0 = PushReplyOf(c->CallSync(ModePush({All("d", 0), Rows("e", 0, {1})}, 0, 0),
                                    Floats({2, 2, 2, 2, 2, 2, 4, 4})));
  CHECK(r0.skipped == 0);
  CHECK(r0.stale == 0);
  CHECK(PullAll(*c, "d", 0, 6) ==
        std::vector<float>(6, 1.0f));  // 1 of 2 gradients: waits for worker 1
  CHECK(PullRowsNow(*c, "e", {0, 1}) ==
        std::vector<float>{1, 1, -1, -1});  // applied at once: 1 - 0.5 * 4
  // The same push again (a lost reply): ignored by both classes.
  CHECK(PushReplyOf(c->CallSync(ModePush({All("d", 0), Rows("e", 0, {1})}, 0, 0),
                                Floats({2, 2, 2, 2, 2, 2, 4, 4})))
            .skipped == 2);
  CHECK(PullRowsNow(*c, "e", {1}) == std::vector<float>{-1, -1});

  // Worker 0's pull for update 1 of both classes waits for the dense shard only ...
  std::vector<float> both(8);
  auto waiting = c->Call(proto::Pull{{All("d", 0), Rows("e", 0, {1})}, 0, 1}, {},
                         {std::as_writable_bytes(std::span(both))});
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 1; }));
  CHECK(waiting.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  // ... and a pull of the embedding alone, for the same update, does not wait at all.
  std::vector<float> emb(2);
  auto now = c->CallSync(proto::Pull{{Rows("e", 0, {1})}, 1, 1}, {},
                         {std::as_writable_bytes(std::span(emb))});
  REQUIRE(now.ok());
  CHECK(emb == std::vector<float>{-1, -1});
  CHECK(std::get<proto::PullReply>(now->envelope.body).versions == std::vector<int64_t>{INT64_MAX});

  // Worker 1, update 0: its embedding gradient is applied as well, unaveraged; the dense
  // update is complete and applied once with the average.
  auto r1 = PushReplyOf(c->CallSync(ModePush({All("d", 0), Rows("e", 0, {1})}, 1, 0),
                                    Floats({0, 0, 0, 0, 0, 0, 2, 2})));
  CHECK(r1.skipped == 0);
  auto r = waiting.get();
  REQUIRE(r.ok());
  CHECK(both == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -2,
                                   -2});  // 1 - 0.5 * (2 + 0) / 2; -1 - 0.5 * 2
  CHECK(std::get<proto::PullReply>(r->envelope.body).versions ==
        std::vector<int64_t>{1, INT64_MAX});

  // An embedding push of a worker that is ahead of the dense shard is refused whole (its
  // dense item would be ahead); one of a worker's own update arrives in any order.
  auto ahead = c->CallSync(ModePush({All("d", 0), Rows("e", 0, {0})}, 0, 3),
                           Floats({1, 1, 1, 1, 1, 1, 1, 1}));
  REQUIRE_FALSE(ahead.ok());
  CHECK(ahead.status().code() == Code::kFailedPrecondition);
  CHECK(PullRowsNow(*c, "e", {0}) == std::vector<float>{1, 1});  // nothing of it applied
  CHECK(PushReplyOf(c->CallSync(ModePush({Rows("e", 0, {0})}, 1, 1), Floats({2, 2}))).skipped == 0);
  CHECK(PullRowsNow(*c, "e", {0}) == std::vector<float>{0, 0});

  auto stats = fx.service.update_stats();
  CHECK(stats.spec.Describe() == "dense sync, sparse async");
  CHECK(stats.min_version == 1);  // over the sync class's shards only
  CHECK(stats.max_version == 1);
  CHECK(stats.stale_dropped == 0);
  // Training pushes and pulls must say who sent them, as in sync mode.
  auto anonymous = c->CallSync(proto::Push{{Rows("e", 0, {2})}, 1, 1}, Floats({1, 1}));
  REQUIRE_FALSE(anonymous.ok());
  CHECK(anonymous.status().code() == Code::kInvalidArgument);
}

TEST_CASE(
    "hybrid: a Save trims the at-most-once marks below it; a push 2^28 steps past it is refused, not left untracked") {
  using ::ps::server::UpdateMode;
  NullCheckpointer checkpointer;
  PsFixture fx(&checkpointer);
  auto c = fx.Connect();
  REQUIRE(c->CallSync(HybridCreate(Hybrid(UpdateMode::kSync, UpdateMode::kAsync, 2),
                                   R"({"type":"sgd","learning_rate":0.5})"))
              .ok());
  // Worker 0's embedding gradients (the async class, marked per step) for updates 0..999.
  for (int64_t s = 0; s < 1000; ++s) {
    REQUIRE(PushReplyOf(c->CallSync(ModePush({Rows("e", 0, {1})}, 0, s), Floats({1, 1}))).skipped ==
            0);
  }
  CHECK(fx.service.applied_mark_words() >= 1000 / 64);
  // A checkpoint at step 960 (the chief saves when every step before it is applied):
  // only the word of steps 960..1023 is left.
  REQUIRE(c->CallSync(proto::Save{"/unused", 960}).ok());
  CHECK(fx.service.applied_mark_words() == 1);
  // Repeats below and above the checkpoint are still skipped; a new step applies.
  CHECK(PushReplyOf(c->CallSync(ModePush({Rows("e", 0, {1})}, 0, 5), Floats({1, 1}))).skipped == 1);
  CHECK(PushReplyOf(c->CallSync(ModePush({Rows("e", 0, {1})}, 0, 990), Floats({1, 1}))).skipped ==
        1);
  CHECK(PushReplyOf(c->CallSync(ModePush({Rows("e", 0, {1})}, 0, 1000), Floats({1, 1}))).skipped ==
        0);
  CHECK(PullRowsNow(*c, "e", {1}) == std::vector<float>(2, 1.0f - 0.5f * 1001));
  CHECK(fx.service.applied_on_arrival() == 1001);
  // Past the tracked window (from the trimmed base, 960): refused, nothing applied.
  const int64_t far = 960 + ::ps::server::Service::kTrackedSteps;
  auto refused = c->CallSync(ModePush({Rows("e", 0, {2})}, 0, far), Floats({1, 1}));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK(PullRowsNow(*c, "e", {2}) == std::vector<float>{1, 1});
  CHECK(fx.service.applied_mark_words() == 1);
}

TEST_CASE(
    "hybrid: an async item without rows is not marked, counted or pushed; a bad async item fails the push before anything is applied") {
  using ::ps::server::UpdateMode;
  PsFixture fx;
  auto c = fx.Connect();
  REQUIRE(c->CallSync(HybridCreate(Hybrid(UpdateMode::kSync, UpdateMode::kAsync, 2),
                                   R"({"type":"sgd","learning_rate":0.5})"))
              .ok());
  const uint64_t pushes = fx.store.stats().push_requests;
  for (int i = 0; i < 2; ++i) {  // the second is not "already applied": nothing was
    CHECK(PushReplyOf(c->CallSync(ModePush({Rows("e", 0, {})}, 0, 0), Floats({}))).skipped == 0);
  }
  CHECK(fx.store.stats().push_requests == pushes);
  CHECK(fx.service.applied_mark_words() == 0);
  CHECK(fx.service.applied_on_arrival() == 0);

  // A repeated row in the second (lazy, async) item: the first item is not applied either.
  auto dup = c->CallSync(ModePush({Rows("e", 0, {1}), Rows("l", 0, {2, 2})}, 0, 0),
                         Floats({1, 1, 1, 1, 1, 1}));
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.status().code() == Code::kInvalidArgument);
  CHECK(PullRowsNow(*c, "e", {1}) == std::vector<float>{1, 1});
  // Retried correctly, it applies (the failed push left no mark behind).
  CHECK(PushReplyOf(c->CallSync(ModePush({Rows("e", 0, {1}), Rows("l", 0, {2})}, 0, 0),
                                Floats({1, 1, 1, 1})))
            .skipped == 0);
  CHECK(PullRowsNow(*c, "e", {1}) == std::vector<float>{0.5f, 0.5f});
  CHECK(fx.service.applied_on_arrival() == 2);
}

TEST_CASE("hybrid, dense async + sparse sync: the other way round; a lazy table is sparse") {
  using ::ps::server::UpdateMode;
  PsFixture fx;
  auto c = fx.Connect();
  REQUIRE(c->CallSync(HybridCreate(Hybrid(UpdateMode::kAsync, UpdateMode::kSync, 2),
                                   R"({"type":"sgd","learning_rate":0.5})"))
              .ok());
  // Worker 0, update 0: the dense shard is updated at once, the lazy table waits.
  CHECK(PushReplyOf(c->CallSync(ModePush({All("d", 0), Rows("l", 0, {0})}, 0, 0),
                                Floats({2, 2, 2, 2, 2, 2, 4, 4})))
            .skipped == 0);
  CHECK(PullAll(*c, "d", 0, 6) == std::vector<float>(6, 0.0f));
  CHECK(PullRowsNow(*c, "l", {0}) == std::vector<float>{1, 1});
  CHECK(PushReplyOf(c->CallSync(ModePush({All("d", 0), Rows("l", 0, {0})}, 0, 0),
                                Floats({2, 2, 2, 2, 2, 2, 4, 4})))
            .skipped == 2);
  // A pull of the dense shard for update 1 does not wait; one of the lazy table does.
  std::vector<float> dense(6), lazy(2);
  auto d =
      c->CallSync(proto::Pull{{All("d", 0)}, 0, 1}, {}, {std::as_writable_bytes(std::span(dense))});
  REQUIRE(d.ok());
  CHECK(dense == std::vector<float>(6, 0.0f));
  auto waiting = c->Call(proto::Pull{{Rows("l", 0, {0})}, 0, 1}, {},
                         {std::as_writable_bytes(std::span(lazy))});
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 1; }));
  // Worker 1, update 0: it touches no lazy row (a zero gradient for row 0), its dense
  // gradient lands at once.
  CHECK(PushReplyOf(c->CallSync(ModePush({All("d", 0), Rows("l", 0, {})}, 1, 0),
                                Floats({2, 2, 2, 2, 2, 2})))
            .skipped == 0);
  auto r = waiting.get();
  REQUIRE(r.ok());
  CHECK(lazy == std::vector<float>{0, 0});  // 1 - 0.5 * (4 + 0) / 2
  CHECK(std::get<proto::PullReply>(r->envelope.body).versions == std::vector<int64_t>{1});
  CHECK(PullAll(*c, "d", 0, 6) ==
        std::vector<float>(6, -1.0f));  // both workers' gradients, unaveraged
  CHECK(fx.service.update_stats().spec.Describe() == "dense async, sparse sync");
}

TEST_CASE("bounded staleness: a pull waits while another worker is more than S steps behind") {
  PsFixture fx;
  auto c = fx.Connect();
  REQUIRE(c->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kBoundedStaleness, 0, 1, 2),
                                 R"({"type":"sgd","learning_rate":1.0})"))
              .ok());
  std::vector<float> out(6);
  auto pull = [&](int worker, int64_t clock) { return ModePull(*c, worker, clock, out); };
  // Worker 0 runs ahead: steps 0 and 1 need nobody (lead 0, then 1 = S).
  REQUIRE(pull(0, 0).get().ok());
  REQUIRE(c->CallSync(ModePush({All("w", 0)}, 0, 0, 100), Floats({1, 1, 1, 1, 1, 1})).ok());
  REQUIRE(pull(0, 1).get().ok());
  REQUIRE(c->CallSync(ModePush({All("w", 0)}, 0, 1, 101), Floats({1, 1, 1, 1, 1, 1})).ok());
  // Step 2 would put it 2 steps ahead of worker 1, which has pushed nothing: it waits.
  auto waiting = pull(0, 2);
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 1; }));
  CHECK(waiting.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  // Worker 1 itself is never held back by the worker ahead of it.
  REQUIRE(pull(1, 0).get().ok());
  // Its first push lets worker 0 through, and the push is applied as in async mode.
  REQUIRE(c->CallSync(ModePush({All("w", 0)}, 1, 0, 102), Floats({1, 1, 1, 1, 1, 1})).ok());
  REQUIRE(waiting.get().ok());
  CHECK(out == std::vector<float>(6, -2.0f));  // 1 - 3 pushes
  CHECK(fx.service.update_stats().max_lead == 1);
}

TEST_CASE(
    "bounded staleness: with concurrent workers of different speeds no pull is granted beyond the bound") {
  PsFixture fx;
  constexpr int kWorkers = 3, kSteps = 40, kStaleness = 2;
  {
    auto c = fx.Connect();
    REQUIRE(c->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kBoundedStaleness, 0, 2, 3),
                                   R"({"type":"sgd","learning_rate":0.001})"))
                .ok());
  }
  // started[w]: pushes worker w has begun (counted before sending, so it is never below
  // what the ps has seen). When a pull for step c returns, every other worker must have
  // begun at least c - S pushes.
  std::array<std::atomic<int64_t>, kWorkers> started{};
  std::atomic<int> violations{0}, failures{0};
  std::vector<std::thread> threads;
  // Clients are made here: Catch2's assertions (in Connect, PullAll) are not thread-safe.
  std::vector<std::shared_ptr<net::Client>> clients;
  for (int w = 0; w < kWorkers; ++w) clients.push_back(fx.Connect(w));
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      auto& c = clients[static_cast<size_t>(w)];
      std::vector<float> out(6);
      for (int64_t step = 0; step < kSteps; ++step) {
        if (!c->CallSync(proto::Pull{{All("w", 0)}, w, step}, {},
                         {std::as_writable_bytes(std::span(out))})
                 .ok()) {
          ++failures;
          return;
        }
        for (int o = 0; o < kWorkers; ++o) {
          if (o != w && started[static_cast<size_t>(o)].load() < step - kStaleness) ++violations;
        }
        // Worker 0 is the straggler: extra round trips per step.
        std::vector<float> other(4);
        for (int k = 0; w == 0 && k < 5; ++k) {
          if (!c->CallSync(proto::Pull{{All("w", 1)}}, {},
                           {std::as_writable_bytes(std::span(other))})
                   .ok())
            ++failures;
        }
        started[static_cast<size_t>(w)] += 1;
        if (!c->CallSync(ModePush({All("w", 0)}, w, step, w * kSteps + step),
                         Floats({1, 1, 1, 1, 1, 1}))
                 .ok()) {
          ++failures;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(violations == 0);
  CHECK(fx.service.update_stats().max_lead <= kStaleness);
  // Every push applied exactly once: 1 - 0.001 * 120.
  CHECK(PullAll(*fx.Connect(), "w", 0, 6)[0] == Approx(1.0f - 0.001f * kWorkers * kSteps));
}

TEST_CASE("bounded staleness: a restarted worker continues at its predecessor's count") {
  PsFixture fx;
  auto c = fx.Connect();
  REQUIRE(c->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kBoundedStaleness, 0, 5, 2),
                                 R"({"type":"sgd","learning_rate":1.0})"))
              .ok());
  std::vector<float> out(6);
  auto pull = [&](int worker, int64_t clock) { return ModePull(*c, worker, clock, out); };
  int64_t id = 0;
  for (int w = 0; w < 2; ++w) {
    for (int64_t step = 0; step < 4; ++step) {
      REQUIRE(c->CallSync(ModePush({All("w", 0)}, w, step, id++), Floats({0, 0, 0, 0, 0, 0})).ok());
    }
  }
  // Worker 1 at step 10 needs worker 0 to have pushed 5 steps: it has pushed 4.
  auto waiting = pull(1, 10);
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 1; }));
  // Worker 0 is restarted and counts from 0 again: its first step is step 4 here, so its
  // first push releases worker 1 (counted from 0 it would hold it for 5 more steps).
  REQUIRE(pull(0, 0).get().ok());
  CHECK(waiting.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  REQUIRE(c->CallSync(ModePush({All("w", 0)}, 0, 0, id++), Floats({0, 0, 0, 0, 0, 0})).ok());
  REQUIRE(waiting.get().ok());
  CHECK(fx.service.update_stats().max_lead == 5);
}

TEST_CASE("bounded staleness: a worker out of work holds nobody back until it has steps again") {
  PsFixture fx;
  auto c = fx.Connect();
  REQUIRE(c->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kBoundedStaleness, 0, 1, 2),
                                 R"({"type":"sgd","learning_rate":1.0})"))
              .ok());
  std::vector<float> out(6);
  auto pull = [&](int worker, int64_t clock) { return ModePull(*c, worker, clock, out); };
  proto::Push idle;
  idle.worker = 1;
  idle.clock = 0;
  idle.idle = true;
  REQUIRE(c->CallSync(idle).ok());  // worker 1 got no pack (yet)
  REQUIRE(pull(0, 5).get().ok());   // 5 steps ahead of an idle worker: allowed
  // Worker 1 gets work: its first pull makes it count again, and worker 0 waits for it.
  REQUIRE(pull(1, 0).get().ok());
  auto waiting = pull(0, 6);
  REQUIRE(Eventually([&] { return fx.service.update_stats().waited_pulls == 1; }));
  CHECK(waiting.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  // An idle message overtaken by the worker's next step (other connection) is ignored...
  idle.clock = 0;
  REQUIRE(c->CallSync(idle).ok());
  CHECK(waiting.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  // ...and a current one releases worker 0.
  for (int64_t step = 0; step < 3; ++step) {
    REQUIRE(
        c->CallSync(ModePush({All("w", 0)}, 1, step, 100 + step), Floats({0, 0, 0, 0, 0, 0})).ok());
  }
  idle.clock = 3;
  REQUIRE(c->CallSync(idle).ok());
  REQUIRE(waiting.get().ok());
}

TEST_CASE(
    "ps service: small pulls and async-mode small pushes are handled on the I/O thread, the rest on the pool") {
  PsFixture fx;
  auto c = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":0.5})");
  // "w": 6 floats; "big": [1024, 32] = 128 KiB, over the 64 KiB inline limit set here
  // (the default, ::ps::server::Service::kDefaultInlineBytes, is 1 MiB: see the end).
  cs.shards = {Def("w", 0, 0, 3, 2, 5), Def("big", 0, 0, 1024, 32, 2048)};
  REQUIRE(c->CallSync(cs).ok());
  fx.service.SetInlineMaxBytes(64 << 10);
  auto req = [](proto::Body body, size_t payload_bytes = 0) {
    return net::Request{{proto::Role::kWorker, 0, "127.0.0.1:1"},
                        {1, false, 0, std::move(body)},
                        net::Buffer(payload_bytes)};
  };
  auto& svc = fx.service;
  CHECK(svc.Inline(req(proto::Pull{{All("w", 0)}})));
  CHECK_FALSE(svc.Inline(req(proto::Pull{{All("big", 0)}})));
  CHECK(svc.Inline(req(proto::Pull{{Rows("big", 0, {1, 7})}})));            // 2 rows of 32 floats
  CHECK_FALSE(svc.Inline(req(proto::Pull{{All("w", 0), All("big", 0)}})));  // the items add up
  CHECK(svc.Inline(req(proto::Pull{{All("nope", 0)}})));  // answered with its error at once
  CHECK(svc.Inline(req(proto::Push{{All("w", 0)}, 1, 1}, 24)));
  CHECK_FALSE(svc.Inline(req(proto::Push{{All("big", 0)}, 1, 1}, 128 << 10)));
  CHECK_FALSE(svc.Inline(req(cs)));
  CHECK_FALSE(svc.Inline(req(proto::GetStatus{})));
  CHECK_FALSE(svc.Inline(req(proto::Save{})));
  CHECK_FALSE(svc.Inline(req(proto::Shutdown{})));

  // Over the wire: the small pull is counted as inline, the big one is not.
  const uint64_t before = fx.server->stats().inline_requests;
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>(6, 1.0f));
  CHECK(fx.server->stats().inline_requests == before + 1);
  CHECK(PullAll(*c, "big", 0, 1024 * 32) == std::vector<float>(1024 * 32, 1.0f));
  CHECK(fx.server->stats().inline_requests == before + 1);

  // Under the default limit 128 KiB is inline, 1 MiB too, and a tensor of more is not.
  fx.service.SetInlineMaxBytes(::ps::server::Service::kDefaultInlineBytes);
  CHECK(svc.Inline(req(proto::Pull{{All("big", 0)}})));
  CHECK(svc.Inline(req(proto::Push{{All("big", 0)}, 1, 1}, 128 << 10)));
  CHECK(svc.Inline(
      req(proto::Push{{All("big", 0)}, 1, 1}, ::ps::server::Service::kDefaultInlineBytes)));
  CHECK_FALSE(svc.Inline(
      req(proto::Push{{All("big", 0)}, 1, 1}, ::ps::server::Service::kDefaultInlineBytes + 4)));
  CHECK(PullAll(*c, "big", 0, 1024 * 32) == std::vector<float>(1024 * 32, 1.0f));
  CHECK(fx.server->stats().inline_requests == before + 2);
  fx.service.SetInlineMaxBytes(0);  // everything to the pool
  CHECK_FALSE(svc.Inline(req(proto::Pull{{All("w", 0)}})));

  // In sync mode a push may answer parked pulls of any size: it goes to the pool.
  PsFixture sync;
  auto sc = sync.Connect();
  REQUIRE(sc->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kSync, 0, 0, 2),
                                  R"({"type":"sgd","learning_rate":1.0})"))
              .ok());
  CHECK_FALSE(sync.service.Inline(req(ModePush({All("w", 0)}, 0, 0), 24)));
  // Nor a pull: in sync mode it takes mode_mu_, which PushSync holds across a whole sum.
  CHECK_FALSE(sync.service.Inline(req(proto::Pull{{All("w", 0)}})));
  // A generation newer than the ps's may wait for the fence exclusively: the pool.
  CHECK_FALSE(svc.Inline(net::Request{{proto::Role::kChief, 0, "127.0.0.1:1"},
                                      {1, false, 7, proto::Pull{{All("w", 0)}}},
                                      net::Buffer(0)}));
}

TEST_CASE(
    "ps service: no request is handled inline while a Save runs, and a Save waits for the inline handlers under way") {
  PsFixture fx;
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  fx.service.SetLongOpHookForTesting([&] {
    entered.set_value();
    released.wait();
  });
  auto c = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":0.5})");
  cs.shards = {Def("w", 0, 0, 3, 2, 5)};
  REQUIRE(c->CallSync(cs).ok());
  auto req = [](proto::Body body) {
    return net::Request{
        {proto::Role::kWorker, 0, "127.0.0.1:1"}, {1, false, 0, std::move(body)}, net::Buffer(0)};
  };

  // A Save (this fixture has no checkpointer: it fails, after the hook) that arrives
  // while an inline handler holds its token starts only once the token is dropped.
  auto token = fx.service.Inline(req(proto::Pull{{All("w", 0)}}));
  REQUIRE(token);
  auto entered_f = entered.get_future();
  auto save = c->Call(proto::Save{"/nonexistent", 1});
  CHECK(entered_f.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  token.reset();
  entered_f.wait();

  // While the Save runs, small pulls go to the pool (not inline) and are answered.
  const uint64_t accepted = fx.service.inline_accepted();
  const uint64_t inline_before = fx.server->stats().inline_requests;
  CHECK_FALSE(fx.service.Inline(req(proto::Pull{{All("w", 0)}})));
  auto c2 = fx.Connect(1);
  for (int i = 0; i < 3; ++i) CHECK(PullAll(*c2, "w", 0, 6) == std::vector<float>(6, 1.0f));
  CHECK(fx.service.inline_accepted() == accepted);
  CHECK(fx.server->stats().inline_requests == inline_before);
  release.set_value();
  CHECK(save.get().status().code() == Code::kFailedPrecondition);

  // Afterwards they are inline again.
  CHECK(PullAll(*c2, "w", 0, 6) == std::vector<float>(6, 1.0f));
  CHECK(fx.server->stats().inline_requests == inline_before + 1);
}

TEST_CASE(
    "ps service: a Restore waits for the pushes under way, pool-handled ones too, and no push runs during it") {
  PsFixture fx;
  // A push of the current generation (in flight when the chief restores after a ps
  // failure) stops after its generation check, on the pool, until the test lets it go.
  HeldPushes held(fx.service);
  auto c = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":1.0})");
  cs.shards = {Def("w", 0, 0, 1, 2, 1)};
  cs.shards[0].layout.full_shape = {1, 2};
  REQUIRE(c->CallSync(cs).ok());
  auto push = c->Call(proto::Push{{All("w", 0)}, 0, 0}, Floats({1, 1}));
  held.WaitForOne();
  // This fixture has no checkpointer: the Restore fails at once, but only once it runs.
  auto chief = fx.Connect(1);
  auto restore = chief->Call(proto::Restore{"/nonexistent", 1});
  CHECK(restore.wait_for(std::chrono::seconds(1)) == std::future_status::timeout);
  held.Release();
  REQUIRE(push.get().ok());
  CHECK(restore.get().status().code() == Code::kFailedPrecondition);
}

namespace {

// Early apply: two dense shards whose push (4.3 MB) is applied in several parts while it
// arrives, with Adam (slots and a step-dependent bias correction): a 1000 x 300 and b
// 3000 x 257 (rows that do not divide the parts evenly).
constexpr int64_t kRowsA = 1000, kColsA = 300, kRowsB = 3000, kColsB = 257;
constexpr size_t kFloatsA = kRowsA * kColsA, kFloatsB = kRowsB * kColsB;

proto::CreateShards EarlyCreate() {
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"adam","learning_rate":0.01})");
  cs.shards = {Def("a", 0, 0, kRowsA, kColsA, kRowsA), Def("b", 0, 0, kRowsB, kColsB, kRowsB)};
  for (auto& d : cs.shards) d.layout.num_shards = 1;
  return cs;
}

std::vector<float> EarlyGradient(uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> g(kFloatsA + kFloatsB);
  for (float& v : g) v = u(gen);
  return g;
}

proto::Push EarlyPush(int64_t step) { return proto::Push{{All("a", 0), All("b", 0)}, step, step}; }

bool SameBits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// Rows of b (as pulled) that hold `applied`'s values, counted from row 0 while they do;
// every later row must still hold the initial value (1.0): a row is applied whole or not
// at all, and the rows applied are the first ones.
int64_t AppliedPrefixRows(const std::vector<float>& b, const std::vector<float>& applied) {
  int64_t k = 0;
  auto row = [](const std::vector<float>& v, int64_t r) {
    return std::span(v).subspan(r * kColsB, kColsB);
  };
  while (k < kRowsB && std::ranges::equal(row(b, k), row(applied, k))) ++k;
  for (int64_t r = k; r < kRowsB; ++r) {
    for (float v : row(b, r)) {
      if (v != 1.0f) return -1;
    }
  }
  return k;
}

// A raw worker connection that has sent the header and envelope of EarlyPush(0) with
// `g`'s size and none of its payload yet.
std::unique_ptr<nettest::RawClient> StartEarlyPush(PsFixture& fx, const std::vector<float>& g) {
  auto raw = std::make_unique<nettest::RawClient>(fx.server->port());
  raw->Handshake(kCluster);
  raw->WriteFrame(proto::Encode({9, false, 0, EarlyPush(0)}), g.size() * sizeof(float));
  return raw;
}

// The early-apply fixture beside one that applies pushes whole (early apply off), both
// with EarlyCreate's shards; `whole` already has gradient `g` of step 0 applied.
struct EarlyAndWhole {
  PsFixture fx;
  PsFixture whole{nullptr, /*early_apply_min_bytes=*/0};
  std::shared_ptr<net::Client> c = fx.Connect(), cw = whole.Connect();
  std::vector<float> g = EarlyGradient(1);
  explicit EarlyAndWhole(::ps::server::Checkpointer* checkpointer = nullptr) : fx(checkpointer) {
    REQUIRE(c->CallSync(EarlyCreate()).ok());
    REQUIRE(cw->CallSync(EarlyCreate()).ok());
    REQUIRE(cw->CallSync(EarlyPush(0), Floats(g)).ok());
  }
  // Both shards of `fx` hold exactly what the whole push made of them.
  bool SameAsWhole() {
    return SameBits(PullAll(*c, "a", 0, kFloatsA), PullAll(*cw, "a", 0, kFloatsA)) &&
           SameBits(PullAll(*c, "b", 0, kFloatsB), PullAll(*cw, "b", 0, kFloatsB));
  }
};

}  // namespace

TEST_CASE(
    "ps service: an async push of big dense shards is applied while it arrives, bit-identical to applying it whole") {
  PsFixture early;
  PsFixture whole(nullptr, /*early_apply_min_bytes=*/0);
  auto ce = early.Connect();
  auto cw = whole.Connect();
  REQUIRE(ce->CallSync(EarlyCreate()).ok());
  REQUIRE(cw->CallSync(EarlyCreate()).ok());
  for (int64_t step = 0; step < 2; ++step) {
    const auto g = EarlyGradient(static_cast<uint32_t>(step) + 1);
    CHECK(PushReplyOf(ce->CallSync(EarlyPush(step), Floats(g))).skipped == 0);
    CHECK(PushReplyOf(cw->CallSync(EarlyPush(step), Floats(g))).skipped == 0);
  }
  CHECK(early.service.early_pushes() == 2);
  CHECK(whole.service.early_pushes() == 0);
  const auto a = PullAll(*ce, "a", 0, kFloatsA);
  const auto b = PullAll(*ce, "b", 0, kFloatsB);
  CHECK(a != std::vector<float>(kFloatsA, 1.0f));
  CHECK(SameBits(a, PullAll(*cw, "a", 0, kFloatsA)));
  CHECK(SameBits(b, PullAll(*cw, "b", 0, kFloatsB)));
  // Counted as the pool counts them: one request per item, every byte.
  CHECK(early.store.stats().push_requests == whole.store.stats().push_requests);
  CHECK(early.store.stats().bytes_pushed == whole.store.stats().bytes_pushed);
  CHECK(early.service.applied_on_arrival() == 4);
  // The same step again (a lost reply): acknowledged, skipped on both shards, not applied.
  CHECK(PushReplyOf(ce->CallSync(EarlyPush(1), Floats(EarlyGradient(2)))).skipped == 2);
  CHECK(early.service.early_pushes() == 3);
  CHECK(SameBits(PullAll(*ce, "a", 0, kFloatsA), a));
  CHECK(SameBits(PullAll(*ce, "b", 0, kFloatsB), b));
  CHECK(early.service.early_cut() == 0);
}

TEST_CASE(
    "ps service: a push cut off mid-payload keeps the whole rows applied while it arrived, and its retry is not applied again") {
  EarlyAndWhole ew;  // `whole`: what the full push makes of b
  auto& [fx, whole, c, cw, g] = ew;
  const auto full_a = PullAll(*cw, "a", 0, kFloatsA);
  const auto full_b = PullAll(*cw, "b", 0, kFloatsB);
  {
    auto raw = StartEarlyPush(fx, g);
    // All of a, 1000 rows of b and part of the next row; then the worker dies.
    raw->Write(g.data(), (kFloatsA + 1000 * kColsB + 100) * sizeof(float));
    ::shutdown(raw->fd, SHUT_WR);
    CHECK(raw->WaitClosed());
  }
  REQUIRE(Eventually([&] { return fx.service.early_cut() == 1; }));
  const auto a = PullAll(*c, "a", 0, kFloatsA);
  const auto b = PullAll(*c, "b", 0, kFloatsB);
  CHECK(SameBits(a, full_a));  // its last rows were applied once they were all in
  // b's rows are applied a part (>= 256 KiB, ~255 rows) at a time: what arrived after the
  // last part is dropped with the rest.
  const int64_t applied = AppliedPrefixRows(b, full_b);
  CHECK(applied >= 1000 - 256 * 1024 / (kColsB * 4) - 1);
  CHECK(applied <= 1000);
  // The worker's successor pushes the step again: acknowledged, nothing applied twice.
  CHECK(PushReplyOf(c->CallSync(EarlyPush(0), Floats(g))).skipped == 2);
  CHECK(SameBits(PullAll(*c, "a", 0, kFloatsA), a));
  CHECK(SameBits(PullAll(*c, "b", 0, kFloatsB), b));
}

TEST_CASE(
    "ps service: a push arriving while a newer chief takes over or a Restore runs applies nothing after it and fails") {
  NullCheckpointer checkpointer;
  PsFixture fx(&checkpointer);
  auto c = fx.Connect();
  REQUIRE(c->CallSync(EarlyCreate()).ok());
  const auto g = EarlyGradient(1);
  auto raw = StartEarlyPush(fx, g);
  const size_t first = kFloatsA / 2;  // half of a: at least one part is applied
  raw->Write(g.data(), first * sizeof(float));
  REQUIRE(Eventually([&] { return fx.store.stats().bytes_pushed >= 256 * 1024; }));
  std::string why;
  SECTION("a newer chief") {
    // Raises the generation (no status source: the reply is an error).
    (void)fx.Connect(0, 1, proto::Role::kChief)->CallSync(proto::GetStatus{});
    REQUIRE(fx.service.generation() == 1);
    why = "previous chief";
  }
  SECTION("a Restore") {
    REQUIRE(fx.Connect(1)->CallSync(proto::Restore{"/model", 0}).ok());
    why = "restored";
  }
  auto reader = fx.Connect(2, 1);  // of the newer generation
  const auto a = PullAll(*reader, "a", 0, kFloatsA);
  CHECK(a != std::vector<float>(kFloatsA, 1.0f));
  raw->Write(g.data() + first, (g.size() - first) * sizeof(float));
  auto reply = raw->ReadFrame();
  REQUIRE(reply);
  REQUIRE(std::holds_alternative<proto::Error>(reply->body));
  CHECK_THAT(std::get<proto::Error>(reply->body).message, Catch::Contains(why));
  CHECK(SameBits(PullAll(*reader, "a", 0, kFloatsA), a));
  CHECK(PullAll(*reader, "b", 0, kFloatsB) == std::vector<float>(kFloatsB, 1.0f));
  CHECK(fx.service.early_cut() == 0);
}

TEST_CASE(
    "ps service: an early push meeting a Save that holds its shard's locks leaves the rest to the pool, and the I/O threads keep serving") {
  EarlyAndWhole ew;
  auto& [fx, whole, c, cw, g] = ew;
  // The Save (this fixture has no checkpointer: it fails once the hook returns) holds
  // b's stripe locks while the test lets it, as a Save writing b's shard file does.
  std::promise<void> holding, release;
  std::shared_future<void> released = release.get_future().share();
  fx.service.SetLongOpHookForTesting([&] {
    (void)fx.store.Read({"b", 0}, [&](const ::ps::server::ShardView&) {
      holding.set_value();
      released.wait();
    });
  });
  auto chief = fx.Connect(9, 0, proto::Role::kChief);
  auto save = chief->Call(proto::Save{"/model", 0});
  holding.get_future().wait();
  auto raw = StartEarlyPush(fx, g);
  timeval tv{10, 0};  // a server that stopped reading fails the test instead of hanging it
  ::setsockopt(raw->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  raw->Write(g.data(), g.size() * sizeof(float));
  // Connections are spread over the ps's two I/O threads: some of these share the push's.
  std::vector<std::shared_ptr<net::Client>> probes;
  std::vector<std::future<Result<net::Reply>>> answers;
  std::vector<std::vector<float>> pulled(4, std::vector<float>(kColsA));
  for (int i = 0; i < 4; ++i) {
    probes.push_back(fx.Connect(10 + i));
    answers.push_back(probes.back()->Call(proto::Pull{{Rows("a", 0, {0})}}, {},
                                          {std::as_writable_bytes(std::span(pulled[i]))}));
  }
  for (auto& a : answers) {
    REQUIRE(a.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(a.get().ok());
  }
  // A 4.3 MB pull of both shards meanwhile is copied before it is sent (it waits for b's
  // locks on the pool): a reply half on the wire would stop its connection's Pings.
  std::vector<float> both(kFloatsA + kFloatsB);
  auto big_pull = probes[0]->Call(proto::Pull{{All("a", 0), All("b", 0)}}, {},
                                  {std::as_writable_bytes(std::span(both))});
  REQUIRE(Eventually([&] { return fx.store.stats().pull_requests >= 5; }));  // a's part copied
  release.set_value();
  CHECK(save.get().status().code() == Code::kFailedPrecondition);
  CHECK(big_pull.get().ok());
  CHECK(fx.service.progressive_pulls() == 0);
  auto reply = raw->ReadFrame();
  REQUIRE(reply);
  REQUIRE(std::holds_alternative<proto::PushReply>(reply->body));
  CHECK(std::get<proto::PushReply>(reply->body).skipped == 0);
  CHECK(ew.SameAsWhole());
  CHECK(fx.service.early_pushes() == 1);
}

TEST_CASE("ps service: a Restore that fails does not fail a push being applied while it arrives") {
  EarlyAndWhole ew;  // no checkpointer: a Restore fails
  auto& [fx, whole, c, cw, g] = ew;
  auto raw = StartEarlyPush(fx, g);
  const size_t first = kFloatsA / 2;
  raw->Write(g.data(), first * sizeof(float));
  REQUIRE(Eventually([&] { return fx.store.stats().bytes_pushed >= 256 * 1024; }));
  CHECK(fx.Connect(1, 0, proto::Role::kChief)
            ->CallSync(proto::Restore{"/model", 0})
            .status()
            .code() == Code::kFailedPrecondition);
  raw->Write(g.data() + first, (g.size() - first) * sizeof(float));
  auto reply = raw->ReadFrame();
  REQUIRE(reply);
  REQUIRE(std::holds_alternative<proto::PushReply>(reply->body));
  CHECK(ew.SameAsWhole());
}

TEST_CASE(
    "ps service: a push with a pull after it answers that pull, with the push applied, in its reply") {
  // Early apply from 64 KiB, so that "big" (128 KiB) would be applied while it arrives.
  PsFixture fx(nullptr, 64 << 10);
  auto c = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":0.5})");
  proto::ShardDef lazy = Def("l", 0, 0, 100, 2, 100);
  lazy.layout.num_shards = 1;
  lazy.layout.lazy = true;
  cs.shards = {Def("w", 0, 0, 3, 2, 5), Def("big", 0, 0, 1024, 32, 2048), lazy};
  REQUIRE(c->CallSync(cs).ok());
  constexpr size_t kBig = 1024 * 32;
  // Pushes 1.0 to all of "w" and "big" for `step`, pulling all of both and rows 2, 0 of
  // "w" after it; returns the reply and the pulled floats.
  struct Combined {
    Result<net::Reply> reply;
    std::vector<float> w, big, rows;
  };
  auto push_pull = [&](int64_t step, std::vector<proto::Slice> pull_rows = {Rows("w", 0, {2, 0})}) {
    Combined out{Internal("not sent"), std::vector<float>(6), std::vector<float>(kBig),
                 std::vector<float>(4)};
    proto::Push push{{All("w", 0), All("big", 0)}, step, step};
    std::vector<proto::Slice> pulled = {All("w", 0), All("big", 0)};
    pulled.insert(pulled.end(), pull_rows.begin(), pull_rows.end());
    push.pull = proto::Pull{pulled};
    out.reply = c->CallSync(
        push, Floats(std::vector<float>(6 + kBig, 1.0f)),
        {std::as_writable_bytes(std::span(out.w)), std::as_writable_bytes(std::span(out.big)),
         std::as_writable_bytes(std::span(out.rows))});
    return out;
  };

  // Handled on the I/O thread: the big item of the pull goes straight from the store.
  const uint64_t inline_before = fx.server->stats().inline_requests;
  Combined a = push_pull(7);
  REQUIRE(a.reply.ok());
  CHECK(a.reply->payload_in_place);
  const auto& reply = std::get<proto::PushReply>(a.reply->envelope.body);
  CHECK(reply.skipped == 0);
  REQUIRE(reply.pull.has_value());
  CHECK(reply.pull->item_floats == std::vector<uint64_t>{6, kBig, 4});
  CHECK(a.w == std::vector<float>(6, 0.5f));  // 1 - 0.5 * 1: the pull came after the push
  CHECK(a.big == std::vector<float>(kBig, 0.5f));
  CHECK(a.rows == std::vector<float>(4, 0.5f));
  CHECK(fx.server->stats().inline_requests == inline_before + 1);
  CHECK(fx.service.direct_pulls() == 1);
  CHECK(fx.service.early_pushes() == 0);  // a push with a pull is not applied while it arrives

  // Resent (a lost reply): the push is skipped, the pull answered all the same.
  Combined again = push_pull(7);
  REQUIRE(again.reply.ok());
  CHECK(std::get<proto::PushReply>(again.reply->envelope.body).skipped == 2);
  CHECK(again.w == std::vector<float>(6, 0.5f));

  // On the handler pool (nothing inline): the same answer for the next step.
  fx.service.SetInlineMaxBytes(0);
  Combined pool = push_pull(8);
  REQUIRE(pool.reply.ok());
  CHECK(pool.w == std::vector<float>(6, 0.0f));
  CHECK(pool.big == std::vector<float>(kBig, 0.0f));
  CHECK(fx.server->stats().inline_requests == inline_before + 2);
  fx.service.SetInlineMaxBytes(::ps::server::Service::kDefaultInlineBytes);

  // A pull the ps cannot serve fails the request before the push is applied: nothing
  // changes and the step is not marked (sent right, it applies).
  Combined bad = push_pull(9, {Rows("w", 0, {3})});
  REQUIRE_FALSE(bad.reply.ok());
  CHECK(bad.reply.status().message().find("row 3") != std::string::npos);
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>(6, 0.0f));
  Combined whole_lazy = push_pull(9, {All("l", 0)});  // a lazy shard is pulled by rows only
  REQUIRE_FALSE(whole_lazy.reply.ok());
  CHECK(whole_lazy.reply.status().message().find("by rows only") != std::string::npos);
  CHECK(PullAll(*c, "w", 0, 6) == std::vector<float>(6, 0.0f));
  Combined good = push_pull(9);
  REQUIRE(good.reply.ok());
  CHECK(good.w == std::vector<float>(6, -0.5f));

  // Without a pull the same push is applied while it arrives (the threshold works).
  REQUIRE(c->CallSync(proto::Push{{All("big", 0)}, 10, 10}, Floats(std::vector<float>(kBig, 1.0f)))
              .ok());
  CHECK(fx.service.early_pushes() == 1);

  // Inline only while the pull after the push fits too.
  auto req = [](proto::Body body, size_t payload_bytes) {
    return net::Request{{proto::Role::kWorker, 0, "127.0.0.1:1"},
                        {1, false, 0, std::move(body)},
                        net::Buffer(payload_bytes)};
  };
  fx.service.SetInlineMaxBytes(64 << 10);
  proto::Push small{{All("w", 0)}, 11, 11};
  CHECK(fx.service.Inline(req(small, 24)));
  small.pull = proto::Pull{{All("big", 0)}};
  CHECK_FALSE(fx.service.Inline(req(small, 24)));
  // The push's payload and its pull's count together: 40 KiB + 24 KiB fit, 48 + 24 do not.
  std::vector<int64_t> rows(192);  // 192 rows of 32 floats: 24 KiB
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  small.pull = proto::Pull{{Rows("big", 0, rows)}};
  CHECK(fx.service.Inline(req(small, 40 << 10)));
  CHECK_FALSE(fx.service.Inline(req(small, 48 << 10)));

  // Other modes refuse it (a pull there may wait for other workers' steps, and the push's
  // reply with it), before anything is applied.
  PsFixture sync;
  auto sc = sync.Connect();
  REQUIRE(sc->CallSync(ModeCreate(Mode(::ps::server::UpdateMode::kSync, 0, 0, 2),
                                  R"({"type":"sgd","learning_rate":1.0})"))
              .ok());
  proto::Push sp = ModePush({All("w", 0)}, 0, 0);
  sp.pull = proto::Pull{{All("w", 0)}, 0, 1};
  std::vector<float> into(6);
  auto refused = sc->CallSync(sp, Floats(std::vector<float>(6, 1.0f)),
                              {std::as_writable_bytes(std::span(into))});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK(refused.status().message().find("async") != std::string::npos);
  // Not summed: the same push without a pull is the worker's first for update 0.
  CHECK(
      PushReplyOf(sc->CallSync(ModePush({All("w", 0)}, 0, 0), Floats(std::vector<float>(6, 1.0f))))
          .skipped == 0);
}

TEST_CASE(
    "a worker's remote link sends a push with its pull as one request; a resent one is skipped and its pull answered again") {
  PsFixture fx;
  auto pulls = fx.Connect(), pushes = fx.Connect();
  proto::CreateShards cs;
  cs.optimizer = Opt(R"({"type":"sgd","learning_rate":0.5})");
  cs.shards = {Def("w", 0, 0, 3, 2, 5)};
  REQUIRE(pulls->CallSync(cs).ok());
  // Every 2nd push (counted by the link, combined or not) is sent twice: a lost reply.
  REQUIRE(setenv("PSTRAIN_FAULT_REPEAT_PUSH_EVERY", "2", 1) == 0);
  auto link = client::RemotePsLink(pulls, pushes);
  REQUIRE(unsetenv("PSTRAIN_FAULT_REPEAT_PUSH_EVERY") == 0);
  // PushPull of 1.0 to all of w for `step`, pulling all of w into `into`.
  auto push_pull = [&](int64_t step, std::vector<float>& into) {
    std::promise<Status> done;
    link->PushPull(proto::Push{{All("w", 0)}, step, step}, Floats(std::vector<float>(6, 1.0f)),
                   proto::Pull{{All("w", 0)}}, {std::as_writable_bytes(std::span(into))},
                   [&](Status st) { done.set_value(std::move(st)); });
    return done.get_future().get();
  };
  const uint64_t pulls_before = fx.store.stats().pull_requests;
  std::vector<float> into(6);
  REQUIRE(push_pull(1, into).ok());
  CHECK(into == std::vector<float>(6, 0.5f));  // pulled after the push was applied
  CHECK(fx.service.push_pulls() == 1);
  CHECK(fx.store.stats().pull_requests == pulls_before + 1);
  // The 2nd is sent twice: applied once, its pull served twice (into the same place).
  std::fill(into.begin(), into.end(), 9.0f);
  REQUIRE(push_pull(2, into).ok());
  CHECK(into == std::vector<float>(6, 0.0f));
  CHECK(fx.service.push_pulls() == 3);
  CHECK(fx.service.skipped_pushes() == 1);
  CHECK(PullAll(*pulls, "w", 0, 6) == std::vector<float>(6, 0.0f));
  // A reply that does not fill the caller's buffer is an error, not a silent partial pull.
  std::vector<float> too_big(8);
  Status st = push_pull(3, too_big);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("pull reply") != std::string::npos);
}

// The job's "combine_push_pull" (async mode): a step's push carries a later step's pull
// (PsLink::PushPull). The training is the same as with separate requests, only the
// number of requests changes: one per ps a step in the steady state of a pack.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "libps/core/json.h"
#include "libps/job/job.h"
#include "libps/worker/trainer.h"
#include "test/unit/worker/local_cluster.h"

using ps::Json;
using ps::client::PsLink;
using ps::worker::testing::Build;
using ps::worker::testing::Cluster;
using ps::worker::testing::Values;

namespace {

struct Counts {
  int pulls = 0, pushes = 0, push_pulls = 0;
};

// Counts the trainer's calls and passes them on (a PushPull to the inner link, whose
// default runs its Push then its Pull: not counted again).
class CountingLink : public PsLink {
 public:
  CountingLink(std::unique_ptr<PsLink> inner, Counts* counts)
      : inner_(std::move(inner)), counts_(counts) {}
  void Pull(ps::proto::Pull req, std::vector<std::span<std::byte>> into,
            std::function<void(ps::Status, int64_t)> done) override {
    ++counts_->pulls;
    inner_->Pull(std::move(req), std::move(into), std::move(done));
  }
  void Push(ps::proto::Push req, ps::net::OutPayload grads,
            std::function<void(ps::Status)> done) override {
    ++counts_->pushes;
    inner_->Push(std::move(req), std::move(grads), std::move(done));
  }
  void PushPull(ps::proto::Push push, ps::net::OutPayload grads, ps::proto::Pull pull,
                std::vector<std::span<std::byte>> into,
                std::function<void(ps::Status)> done) override {
    ++counts_->push_pulls;
    CHECK_FALSE(push.pull.has_value());  // the link puts it there
    inner_->PushPull(std::move(push), std::move(grads), std::move(pull), std::move(into),
                     std::move(done));
  }

 private:
  std::unique_ptr<PsLink> inner_;
  Counts* counts_;
};

// Answers every call later, on its own thread, in the order the calls were made, as one
// ps connection does: the trainer's requests overlap its steps. A PushPull runs as one
// item (the push, then the pull), as the ps runs a push that carries a pull.
class FifoLink : public PsLink {
 public:
  explicit FifoLink(std::unique_ptr<PsLink> inner)
      : inner_(std::move(inner)), thread_([this] { Run(); }) {}
  ~FifoLink() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Pull(ps::proto::Pull req, std::vector<std::span<std::byte>> into,
            std::function<void(ps::Status, int64_t)> done) override {
    Post([this, req = std::move(req), into = std::move(into), done = std::move(done)]() mutable {
      inner_->Pull(std::move(req), std::move(into), std::move(done));
    });
  }
  void Push(ps::proto::Push req, ps::net::OutPayload grads,
            std::function<void(ps::Status)> done) override {
    Post([this, req = std::move(req), grads = std::move(grads), done = std::move(done)]() mutable {
      inner_->Push(std::move(req), std::move(grads), std::move(done));
    });
  }
  void PushPull(ps::proto::Push push, ps::net::OutPayload grads, ps::proto::Pull pull,
                std::vector<std::span<std::byte>> into,
                std::function<void(ps::Status)> done) override {
    Post([this, push = std::move(push), grads = std::move(grads), pull = std::move(pull),
          into = std::move(into), done = std::move(done)]() mutable {
      inner_->PushPull(std::move(push), std::move(grads), std::move(pull), std::move(into),
                       std::move(done));
    });
  }

 private:
  void Post(std::function<void()> f) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_all();
  }
  void Run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  std::unique_ptr<PsLink> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// SmallJob with more rows, smaller batches and Adam: any difference in what a step saw
// would change the values.
Json EmbeddingJob() {
  Json j = ps::worker::testing::SmallJob();
  j["model"]["fields"][0]["vocab"] = 50;
  j["model"]["hidden"] = Json::array({8});
  j["train_data"]["examples"] = 400;
  j["optimizer"] = Json{{"type", "adam"}, {"learning_rate", 0.05}};
  j["batch_size"] = 8;
  return j;
}

constexpr int kPackSteps = 10, kPacks = 3;

// Trains kPacks packs of kPackSteps steps of `j` and returns the values, counting calls;
// `later`: through a FifoLink (calls answered later, in order, on another thread).
std::map<std::string, std::vector<float>> Train(const Json& j, Counts* counts, bool later = false) {
  auto job = ps::job::ParseJob(j, "/tmp");
  REQUIRE(job.ok());
  Cluster c;
  Build(*job, &c, [&](std::unique_ptr<PsLink> inner) -> std::unique_ptr<PsLink> {
    if (later) inner = std::make_unique<FifoLink>(std::move(inner));
    return std::make_unique<CountingLink>(std::move(inner), counts);
  });
  for (int pack = 0; pack < kPacks; ++pack) {
    ps::worker::StepStats stats;
    REQUIRE(c.trainer->RunSteps(pack * kPackSteps, kPackSteps, &stats).ok());
    CHECK(stats.steps == kPackSteps);
  }
  CHECK(c.trainer->fetcher().combined_requests() == counts->push_pulls);
  return Values(c);
}

}  // namespace

TEST_CASE("job.combine_push_pull: true by default, a boolean") {
  auto plain = ps::job::ParseJob(EmbeddingJob(), "/tmp");
  REQUIRE(plain.ok());
  CHECK(plain->combine_push_pull);
  Json j = EmbeddingJob();
  j["combine_push_pull"] = false;
  auto off = ps::job::ParseJob(j, "/tmp");
  REQUIRE(off.ok());
  CHECK_FALSE(off->combine_push_pull);
  j["combine_push_pull"] = "yes";
  auto bad = ps::job::ParseJob(j, "/tmp");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("job.combine_push_pull") != std::string::npos);
}

TEST_CASE(
    "combine_push_pull: the same values as separate pulls and pushes, with one request a step") {
  const bool prefetch = GENERATE(true, false);
  // Answered at once (in the call), or later on another thread while the trainer goes on.
  const bool later = GENERATE(false, true);
  CAPTURE(prefetch, later);
  Json j = EmbeddingJob();
  j["prefetch"] = prefetch;
  j["combine_push_pull"] = false;
  Counts apart;
  const auto separate = Train(j, &apart, later);
  CHECK(apart.push_pulls == 0);
  CHECK(apart.pulls == kPacks * kPackSteps);
  CHECK(apart.pushes == kPacks * kPackSteps);

  j["combine_push_pull"] = true;
  Counts together;
  const auto combined = Train(j, &together, later);
  // A step's push carries the pull of step + 2 (prefetch) or step + 1 within its pack; the
  // first pulls and the last pushes of a pack go alone.
  const int ahead = prefetch ? 2 : 1;
  CHECK(together.push_pulls == kPacks * (kPackSteps - ahead));
  CHECK(together.pulls == kPacks * ahead);
  CHECK(together.pushes == kPacks * ahead);
  // A single worker on a local store, calls answered in the order they were made: each
  // pull sees the same pushes applied either way (with prefetch, step s + 2's pull follows
  // step s's push), so the values are identical.
  CHECK(combined == separate);
  auto job = ps::job::ParseJob(j, "/tmp");
  REQUIRE(job.ok());
  Cluster untrained;
  Build(*job, &untrained);
  CHECK(Values(untrained) != combined);  // they trained
}

TEST_CASE("combine_push_pull: pushes of 256 KiB or more to a ps go alone") {
  // A dense kernel of 300 x 300 floats (360 KB) on the one ps.
  Json j = EmbeddingJob();
  j["model"]["hidden"] = Json::array({300, 300});
  Counts counts;
  Train(j, &counts);
  CHECK(counts.push_pulls == 0);
  CHECK(counts.pulls == kPacks * kPackSteps);
  CHECK(counts.pushes == kPacks * kPackSteps);
}

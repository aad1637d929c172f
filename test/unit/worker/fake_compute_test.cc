// The job's "fake_compute_ms" (a benchmarking aid): ParseJob's checks, and a Trainer that
// skips forward/backward, sleeps instead and pushes zero gradients of the right shapes
// (every shard still receives one push per step, and SGD leaves every parameter as it was).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/job/job.h"
#include "libps/worker/trainer.h"
#include "test/unit/worker/local_cluster.h"

using ps::Json;
using ps::worker::testing::Build;
using ps::worker::testing::Cluster;
using ps::worker::testing::SmallJob;
using ps::worker::testing::Values;

TEST_CASE("job.fake_compute_ms: absent by default, a number of ms in 0..60000") {
  auto plain = ps::job::ParseJob(SmallJob(), "/tmp");
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->fake_compute_ms.has_value());
  for (double ms : {0.0, 2.5, 60000.0}) {
    Json j = SmallJob();
    j["fake_compute_ms"] = ms;
    auto job = ps::job::ParseJob(j, "/tmp");
    REQUIRE(job.ok());
    CHECK(job->fake_compute_ms == ms);
  }
  for (Json bad : {Json(-1), Json(60001), Json("5")}) {
    Json j = SmallJob();
    j["fake_compute_ms"] = bad;
    auto job = ps::job::ParseJob(j, "/tmp");
    REQUIRE_FALSE(job.ok());
    CHECK(job.status().message().rfind("job.fake_compute_ms: ", 0) == 0);
  }
}

TEST_CASE("fake compute: steps sleep instead of computing and push zero gradients to every shard") {
  constexpr int kSteps = 6;
  constexpr double kMs = 3;
  Json j = SmallJob();
  j["fake_compute_ms"] = kMs;
  auto job = ps::job::ParseJob(j, "/tmp");
  REQUIRE(job.ok());
  Cluster c;
  Build(*job, &c);
  const auto before = Values(c);
  const auto pushes_before = c.store.stats().push_requests;
  ps::worker::StepStats stats;
  REQUIRE(c.trainer->RunSteps(0, kSteps, &stats).ok());
  CHECK(stats.steps == kSteps);
  CHECK(stats.examples == kSteps * job->batch_size);
  CHECK(stats.loss_sum == 0);
  // sleep_for sleeps at least as long as asked.
  CHECK(stats.compute_seconds >= kSteps * kMs / 1000);
  // One push per shard per step (the sparse table's rows included), each of the shapes the
  // store expects (a wrong size would have failed the push), all zero.
  CHECK(c.store.stats().push_requests - pushes_before == kSteps * c.keys.size());
  CHECK(c.store.stats().rows_pushed > 0);
  CHECK(Values(c) == before);
}

TEST_CASE("fake compute: without the key the same steps train (the check above can see a change)") {
  auto job = ps::job::ParseJob(SmallJob(), "/tmp");
  REQUIRE(job.ok());
  Cluster c;
  Build(*job, &c);
  const auto before = Values(c);
  ps::worker::StepStats stats;
  REQUIRE(c.trainer->RunSteps(0, 6, &stats).ok());
  CHECK(stats.loss_sum > 0);
  CHECK(Values(c) != before);
}

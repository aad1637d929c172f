// StepOrder: the examples of a step as a pure function of the step id.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "libps/data/step_order.h"

namespace ps::data {
namespace {

StepOrder Make(int64_t n, int64_t batch, int slots, std::optional<int64_t> epochs,
               uint64_t seed = 7) {
  StepOrder::Options o;
  o.examples = n;
  o.batch_size = batch;
  o.slots = slots;
  o.seed = seed;
  if (epochs) o.limit = *epochs * n;
  auto r = StepOrder::Create(o);
  REQUIRE(r.ok());
  return *r;
}

// How often each example is trained by steps [0, steps), every slot.
std::map<int64_t, int> Count(StepOrder& order, int64_t steps) {
  std::map<int64_t, int> counts;
  std::vector<int64_t> ids;
  for (int64_t s = 0; s < steps; ++s) {
    for (int k = 0; k < order.options().slots; ++k) {
      order.Indices(s, k, &ids);
      for (int64_t id : ids) counts[id] += 1;
    }
  }
  return counts;
}

TEST_CASE("every example is trained exactly once per epoch, the last batch short") {
  for (int64_t epochs : {1, 2, 3}) {
    auto order = Make(1003, 32, 1, epochs);
    const int64_t steps = order.StepsFor(epochs);
    CHECK(steps == (epochs * 1003 + 31) / 32);
    CHECK(order.BatchSize(steps - 1, 0) == epochs * 1003 - (steps - 1) * 32);
    CHECK(order.BatchSize(steps, 0) == 0);
    auto counts = Count(order, steps);
    REQUIRE(counts.size() == 1003);
    for (const auto& [id, n] : counts) {
      INFO("example " << id);
      CHECK(n == epochs);
    }
  }
}

TEST_CASE("with slots (sync mode), every slot of a step gets other examples") {
  auto order = Make(500, 10, 3, 2);
  const int64_t steps = order.StepsFor(2);
  CHECK(steps == 34);  // ceil(1000 / 30)
  auto counts = Count(order, steps);
  for (const auto& [id, n] : counts) CHECK(n == 2);
  std::vector<int64_t> a, b;
  order.Indices(4, 0, &a);
  order.Indices(4, 1, &b);
  std::set<int64_t> both(a.begin(), a.end());
  both.insert(b.begin(), b.end());
  CHECK(both.size() == a.size() + b.size());
}

TEST_CASE("a step's examples do not depend on who asks or in which order (a retried pack)") {
  auto first = Make(777, 16, 1, std::nullopt);
  auto second = Make(777, 16, 1, std::nullopt);
  std::vector<int64_t> x, y;
  // One reader goes forward through three epochs, the other jumps back and forth.
  std::map<int64_t, std::vector<int64_t>> seen;
  for (int64_t s = 0; s < 150; ++s) {
    first.Indices(s, 0, &x);
    seen[s] = x;
  }
  for (int64_t s : {149, 0, 97, 48, 49, 3, 120}) {
    second.Indices(s, 0, &y);
    CHECK(y == seen[s]);
  }
}

TEST_CASE("each epoch has its own order, fixed by the seed") {
  auto a = Make(100, 100, 1, std::nullopt, 1);
  auto b = Make(100, 100, 1, std::nullopt, 2);
  std::vector<int64_t> e0, e1, other;
  a.Indices(0, 0, &e0);
  a.Indices(1, 0, &e1);
  b.Indices(0, 0, &other);
  CHECK(e0 != e1);
  CHECK(e0 != other);
  StepOrder::Options o = a.options();
  o.shuffle = false;
  auto plain = StepOrder::Create(o);
  REQUIRE(plain.ok());
  std::vector<int64_t> ids;
  plain->Indices(1, 0, &ids);
  CHECK(ids.front() == 0);
  CHECK(ids.back() == 99);
}

TEST_CASE("restoring a checkpoint is restoring the step: the data position follows") {
  auto order = Make(64, 8, 1, std::nullopt);
  CHECK(order.EpochsAt(0) == 0.0);
  CHECK(order.EpochsAt(8) == 1.0);
  CHECK(order.EpochsAt(12) == 1.5);
  // After a restore to step 12 the next pack starts in the middle of epoch 1.
  CHECK(order.Position(12, 0) == 96);
}

TEST_CASE("bad options are errors") {
  StepOrder::Options o;
  CHECK_FALSE(StepOrder::Create(o).ok());  // no examples
  o.examples = 5;
  o.batch_size = 0;
  CHECK_FALSE(StepOrder::Create(o).ok());
  o.batch_size = 1;
  o.slots = 0;
  CHECK_FALSE(StepOrder::Create(o).ok());
}

}  // namespace
}  // namespace ps::data

// ChiefMachine against a fake cluster (fake_cluster.h): inline distributed evaluation
// (eval_every_steps) and early stopping.
#include <catch2/catch.hpp>

#include <algorithm>

#include "libps/chief/early_stopping.h"
#include "test/unit/chief/fake_cluster.h"

using namespace ps;
using namespace ps::chief;
using namespace ps::chief::testing;
using namespace std::chrono_literals;

namespace {
MachineConfig EvalConfig(int64_t eval_every, int64_t ckpt_every = 0) {
  MachineConfig c = Config(ckpt_every);
  c.eval_every_steps = eval_every;
  c.evaluate_final = true;
  return c;
}
// The steps each range covers, as [first, first + count).
bool NoRangeCrosses(const std::vector<Action>& all, int64_t every) {
  for (const auto& r : All<act::ScheduleRange>(all)) {
    if (r.first / every != (r.first + r.count - 1) / every) return false;
  }
  return true;
}
}  // namespace

TEST_CASE(
    "state machine: inline evaluation every N steps on exact boundaries, never at the last step; no range crosses one") {
  FakeCluster c(EvalConfig(25));
  c.StartFresh();
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.evaluations == std::vector<int64_t>{25, 50, 75});  // 100: the final evaluation covers it
  CHECK(NoRangeCrosses(c.all, 25));
  CHECK(All<act::Evaluate>(c.all).size() == 1);
}

TEST_CASE(
    "state machine: an evaluation waits for every range in flight; nothing is scheduled meanwhile") {
  FakeCluster c(EvalConfig(20));
  c.StartFresh();
  REQUIRE(c.open.size() == 2);  // 0..9, 10..19: then the evaluation is due
  CHECK(c.machine.phase() == Phase::kEvaluating);
  c.Finish();
  CHECK_FALSE(c.io.has_value());
  c.Finish();
  REQUIRE(c.io.has_value());
  REQUIRE(std::holds_alternative<act::EvaluateOnWorkers>(*c.io));
  CHECK(std::get<act::EvaluateOnWorkers>(*c.io).step == 20);
  CHECK(c.machine.step() == 20);
  const auto& done = c.Answer();
  // Training resumes: 20..29, 30..39, and the next evaluation (40) is due.
  const auto ranges = All<act::ScheduleRange>(done);
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].first == 20);
  CHECK(ranges[1].first == 30);
  CHECK(c.machine.phase() == Phase::kEvaluating);
}

TEST_CASE("state machine: a checkpoint due at the same step as an evaluation comes first") {
  FakeCluster c(EvalConfig(20, 20));
  c.StartFresh();
  c.Finish();
  c.Finish();
  REQUIRE(c.io.has_value());
  CHECK(std::holds_alternative<act::SaveCheckpoint>(*c.io));
  c.Answer();
  REQUIRE(c.io.has_value());
  CHECK(std::holds_alternative<act::EvaluateOnWorkers>(*c.io));
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.evaluations == std::vector<int64_t>{20, 40, 60, 80});
}

TEST_CASE(
    "state machine: a stop during an evaluation lets it finish, then drains to the final checkpoint at that step") {
  FakeCluster c(EvalConfig(20));
  c.StartFresh();
  c.Finish();
  c.Finish();
  REQUIRE(std::holds_alternative<act::EvaluateOnWorkers>(*c.io));
  c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(c.machine.phase() == Phase::kEvaluating);
  const auto& done = c.Answer();
  CHECK(All<act::ScheduleRange>(done).empty());
  CHECK(Names(done).find("CloseDispatch") != std::string::npos);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.checkpoints.back().step == 20);
  CHECK(c.checkpoints.back().final);
}

TEST_CASE("state machine: a stop while an evaluation waits for ranges skips it") {
  FakeCluster c(EvalConfig(20));
  c.StartFresh();
  CHECK(c.machine.phase() == Phase::kEvaluating);
  c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(c.machine.phase() == Phase::kDraining);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.evaluations.empty());
}

TEST_CASE(
    "state machine: early stopping ends training like a stop: drain, final checkpoint, final evaluation") {
  FakeCluster c(EvalConfig(20));
  c.StartFresh();
  c.Finish();
  c.Finish();
  c.AnswerWith<act::EvaluateOnWorkers>(
      ev::WorkersEvaluated{20, "auc did not improve on 0.7100 (step 0) for 3 evaluation(s)"});
  CHECK(c.Logged("stop requested (early stopping: auc did not improve"));
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.checkpoints.back().step == 20);
  CHECK(c.checkpoints.back().final);
  CHECK(All<act::Evaluate>(c.all).size() == 1);
  const auto shutdowns = All<act::Shutdown>(c.all);
  REQUIRE_FALSE(shutdowns.empty());
  CHECK(shutdowns.front().reason.rfind("stopped: early stopping: auc", 0) == 0);
}

TEST_CASE(
    "state machine: a failed evaluation is logged and training goes on; the next one is still due") {
  FakeCluster c(EvalConfig(20));
  c.StartFresh();
  c.Finish();
  c.Finish();
  c.AnswerWith<act::EvaluateOnWorkers>(ev::EvaluationFailed{Unavailable("worker:1 lost")});
  CHECK(c.Logged("evaluation at step 20 failed: worker:1 lost; training goes on"));
  CHECK(All<act::ScheduleRange>(c.last).size() == 2);  // 20..39 before the next one
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.evaluations == std::vector<int64_t>{40, 60, 80});
}

TEST_CASE(
    "state machine: a ps lost during an evaluation: it fails, then recovery, then the evaluation is due again") {
  FakeCluster c(EvalConfig(20, 20));
  c.StartFresh();
  for (int i = 0; i < 2; ++i) c.Finish();
  c.Answer();  // checkpoint 20
  REQUIRE(std::holds_alternative<act::EvaluateOnWorkers>(*c.io));
  c.Feed(ev::PsLost{1});
  CHECK(c.machine.phase() == Phase::kEvaluating);  // the evaluation answers first
  c.AnswerWith<act::EvaluateOnWorkers>(ev::EvaluationFailed{Unavailable("ps:1 lost")});
  CHECK(c.machine.phase() == Phase::kRecovering);
  c.Run();
  CHECK(c.exit->ok());
  // Restored to 20: evaluation 20 was not repeated (its boundary had passed); 40..80 ran.
  CHECK(c.evaluations == std::vector<int64_t>{40, 60, 80});
}

TEST_CASE(
    "early stopping: patience counts evaluations without an improvement > min_delta; mode and missing values") {
  job::EarlyStoppingSpec spec;
  spec.metric = "auc";
  spec.patience = 2;
  spec.min_delta = 0.01;
  EarlyStopper s(spec);
  CHECK(s.Observe(10, 0.70) == "");
  CHECK(s.Observe(20, 0.705) == "");         // not by more than min_delta: 1 of 2
  CHECK(s.Observe(30, 0.72) == "");          // better: the count restarts
  CHECK(s.Observe(40, std::nullopt) == "");  // no figure: neither
  CHECK(s.Observe(50, 0.72) == "");
  CHECK(s.Observe(60, 0.65) == "auc did not improve on 0.7200 (step 30) for 2 evaluation(s)");

  spec.metric = "loss";
  spec.maximize = false;
  spec.min_delta = 0;
  spec.patience = 1;
  EarlyStopper loss(spec);
  CHECK(loss.Observe(10, 0.5) == "");
  CHECK(loss.Observe(20, 0.4) == "");
  CHECK(loss.Observe(30, 0.4) == "loss did not improve on 0.4000 (step 20) for 1 evaluation(s)");

  EarlyStopper off(job::EarlyStoppingSpec{});
  CHECK_FALSE(off.enabled());
  CHECK(off.Observe(10, 0.1) == "");
  CHECK(off.Observe(20, 0.0) == "");
}

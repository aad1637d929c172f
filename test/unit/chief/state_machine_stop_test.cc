// ChiefMachine against a fake cluster (fake_cluster.h): a stop in every phase. A wait the
// stop would otherwise sit in is cut short (AbortIo; the fake answers it Aborted, as the
// shell does); the run exits OK; a final checkpoint is written only where one can be and
// something was trained since the newest one.
#include <catch2/catch.hpp>

#include "test/unit/chief/fake_cluster.h"

using namespace ps;
using namespace ps::chief;
using namespace ps::chief::testing;
using namespace std::chrono_literals;

namespace {
// The stop ended the run cleanly: exit OK, both groups told "stopped: <reason>".
void CheckStoppedCleanly(const FakeCluster& c, const std::string& reason) {
  REQUIRE(c.exit.has_value());
  CHECK(c.exit->ok());
  CHECK(c.machine.phase() == Phase::kDone);
  const auto shutdowns = All<act::Shutdown>(c.all);
  REQUIRE(shutdowns.size() == 2);
  for (const auto& s : shutdowns) {
    CHECK(s.reason == "stopped: " + reason);
    CHECK(s.outcome.ok());
  }
}
}  // namespace

TEST_CASE("state machine stop: while connecting, the dialling ends; no checkpoint, exit OK") {
  FakeCluster c(Config());
  c.Feed(ev::Start{});
  const auto& stop = c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(Names(stop) == "AbortIo, Log");
  CHECK(c.Logged("stop requested (SIGTERM): stopping before training starts"));
  CHECK(Names(c.Answer()) == "Log, Shutdown");
  c.Run();
  CheckStoppedCleanly(c, "SIGTERM");
  CHECK(All<act::SaveCheckpoint>(c.all).empty());
  CHECK(All<act::RestoreNewest>(c.all).empty());
  CHECK(c.Logged("stopped (SIGTERM) before training started (stopped): no checkpoint written"));
}

TEST_CASE("state machine stop: connected just before the stop came: no restore, no checkpoint") {
  FakeCluster c(Config());
  c.Feed(ev::Start{});
  c.Feed(ev::StopRequested{"SIGTERM"});
  c.cut_short = false;  // the connection completed before the shell saw the stop
  CHECK(Names(c.Answer()) == "Log, Shutdown");
  c.Run();
  CheckStoppedCleanly(c, "SIGTERM");
  CHECK(All<act::RestoreNewest>(c.all).empty());
  CHECK(All<act::SaveCheckpoint>(c.all).empty());
}

TEST_CASE("state machine stop: while restoring, the restore ends; nothing is saved or marked") {
  FakeCluster c(Config());
  c.checkpoints.push_back({40, false});
  c.Feed(ev::Start{});
  CHECK(Names(c.Answer()) == "RestoreNewest");
  CHECK(Names(c.Feed(ev::StopRequested{"pstrain stop"})) == "AbortIo, Log");
  c.Answer();
  c.Run();
  CheckStoppedCleanly(c, "pstrain stop");
  CHECK(All<act::SaveCheckpoint>(c.all).empty());
  CHECK(All<act::StartWorkers>(c.all).empty());
  CHECK(c.Logged("the restore ended, the model dir is unchanged"));
}

TEST_CASE("state machine stop: during the step-0 save, it commits; the workers are not started") {
  FakeCluster c(Config());
  c.Feed(ev::Start{});
  c.Answer();
  CHECK(Names(c.Answer()) == "SaveCheckpoint");
  CHECK(Names(c.Feed(ev::StopRequested{"SIGINT"})) == "Log");  // a save is never cut short
  c.Answer();
  c.Run();
  CheckStoppedCleanly(c, "SIGINT");
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0});
  CHECK(Saves(c.all, true).empty());
  CHECK(All<act::StartWorkers>(c.all).empty());
}

TEST_CASE("state machine stop: while the workers start, that ends; no dispatch opens") {
  FakeCluster c(Config());
  c.checkpoints.push_back({40, false});
  c.Feed(ev::Start{});
  c.Answer();
  CHECK(Names(c.Answer()) == "StartWorkers");
  CHECK(Names(c.Feed(ev::StopRequested{"SIGTERM"})) == "AbortIo, Log");
  c.Answer();
  c.Run();
  CheckStoppedCleanly(c, "SIGTERM");
  CHECK(All<act::OpenDispatch>(c.all).empty());
  CHECK(All<act::SaveCheckpoint>(c.all).empty());
}

TEST_CASE(
    "state machine stop: while waiting for a lost ps, the wait ends; no final checkpoint, the committed one stands") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  c.Answer();  // checkpoint 20
  c.Feed(ev::PsLost{1});
  while (!c.io) c.Finish(0, Aborted("a ps is down"));
  REQUIRE(std::holds_alternative<act::ReconnectPs>(*c.io));
  CHECK(Names(c.Feed(ev::StopRequested{"SIGTERM"})) == "AbortIo, Log, CancelQueued");
  CHECK(c.Logged("stop requested (SIGTERM): ending the recovery"));
  CHECK(Names(c.Answer()) == "Log, CloseDispatch");
  c.Run();
  CheckStoppedCleanly(c, "SIGTERM");
  CHECK(Saves(c.all, true).empty());
  CHECK(c.Logged(
      "stopped (SIGTERM) while recovering a lost ps (stopped): no final checkpoint; the newest "
      "committed checkpoint is step 20"));
}

TEST_CASE("state machine stop: while restoring after a lost ps came back, the restore ends") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  c.Answer();
  c.Feed(ev::PsLost{0});
  while (!c.io) c.Finish(0, Aborted("a ps is down"));
  CHECK(Names(c.Answer()) == "RestoreNewest");  // ps:0 is back
  CHECK(Names(c.Feed(ev::StopRequested{"SIGTERM"})) == "AbortIo, Log, CancelQueued");
  c.Answer();
  c.Run();
  CheckStoppedCleanly(c, "SIGTERM");
  CHECK(Saves(c.all, true).empty());
  CHECK(All<act::ResumeDispatch>(c.all).empty());
}

TEST_CASE("state machine stop: a stop before the recovery starts does not wait for the lost ps") {
  FakeCluster c(Config(20));
  c.StartFresh();
  c.Feed(ev::PsLost{0});
  c.Feed(ev::StopRequested{"SIGTERM"});
  while (!c.io) c.Finish(0, Aborted("a ps is down"));
  CHECK(Names(c.last).find("CloseDispatch") != std::string::npos);
  c.Run();
  CheckStoppedCleanly(c, "SIGTERM");
  CHECK(All<act::ReconnectPs>(c.all).empty());
  CHECK(Saves(c.all, true).empty());
}

TEST_CASE(
    "state machine stop: during an inline evaluation, it ends; the final checkpoint and evaluation follow") {
  auto config = Config();
  config.eval_every_steps = 20;
  config.evaluate_final = true;
  FakeCluster c(config);
  c.StartFresh();
  while (!c.io) c.Finish();
  REQUIRE(std::holds_alternative<act::EvaluateOnWorkers>(*c.io));
  CHECK(Names(c.Feed(ev::StopRequested{"SIGTERM"})) == "AbortIo, Log");
  CHECK(c.machine.phase() == Phase::kEvaluating);
  c.Answer();
  CHECK(c.Logged("evaluation at step 20 ended by the stop (stopped)"));
  c.Run();
  CheckStoppedCleanly(c, "SIGTERM");
  CHECK(c.evaluations.empty());
  CHECK(Saves(c.all, true) == std::vector<int64_t>{20});
  CHECK(All<act::Evaluate>(c.all).size() == 1);
}

TEST_CASE("state machine stop: during the final evaluation it ends, also on a second stop") {
  auto config = Config();
  config.evaluate_final = true;
  SECTION("the run finished: the first stop ends the final evaluation") {
    FakeCluster c(config);
    c.StartFresh();
    while (!c.io) c.Finish();
    c.Answer();  // closed
    c.Answer();  // final checkpoint 100
    REQUIRE(std::holds_alternative<act::Evaluate>(*c.io));
    CHECK(Names(c.Feed(ev::StopRequested{"SIGTERM"})) == "AbortIo, Log");
    CHECK(Names(c.Answer()) == "Log, Shutdown");
    c.Run();
    CheckStoppedCleanly(c, "SIGTERM");
    CHECK(c.Logged("final evaluation ended by the stop"));
  }
  SECTION("a stop led to the final evaluation: a second stop ends it") {
    FakeCluster d(config);
    d.StartFresh();
    d.Feed(ev::StopRequested{"SIGTERM"});
    while (!d.io) d.Finish(0, Aborted("stopping"));
    d.Answer();  // closed
    d.Answer();  // final checkpoint
    REQUIRE(std::holds_alternative<act::Evaluate>(*d.io));
    CHECK(Names(d.Feed(ev::StopRequested{"SIGINT"})) == "AbortIo, Log");
    CHECK(d.Logged("already stopping (SIGTERM)"));
    d.Run();
    CheckStoppedCleanly(d, "SIGTERM");
  }
}

TEST_CASE("state machine stop: while shutting down nothing changes") {
  FakeCluster c(Config());
  c.StartFresh();
  while (!c.io) c.Finish();
  c.Answer();  // closed
  c.Answer();  // final checkpoint
  REQUIRE(std::holds_alternative<act::Shutdown>(*c.io));
  CHECK(Names(c.Feed(ev::StopRequested{"SIGTERM"})) == "Log");
  CHECK(c.Logged("stop requested (SIGTERM): already shutting the cluster down"));
  c.Run();
  CHECK(c.exit->ok());
  CHECK(ShutdownReasons(c.all).back() == "job finished");
}

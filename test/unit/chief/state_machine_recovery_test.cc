// ChiefMachine against a fake cluster (fake_cluster.h): a lost ps, in every phase.
#include <catch2/catch.hpp>

#include "test/unit/chief/fake_cluster.h"

using namespace ps;
using namespace ps::chief;
using namespace ps::chief::testing;
using namespace std::chrono_literals;

TEST_CASE(
    "state machine: a ps lost while training pauses, lets ranges in flight finish, reconnects, restores, resumes at the restored step") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  c.Answer();                   // checkpoint 20 committed
  REQUIRE(c.open.size() == 2);  // 20..29, 30..39
  c.now = 5000ms;
  const auto& lost = c.Feed(ev::PsLost{1});
  CHECK(Names(lost) == "PauseDispatch");
  CHECK(std::get<act::PauseDispatch>(lost[0]).why.message() == "a ps is down");
  CHECK(c.machine.phase() == Phase::kRecovering);
  CHECK(c.Feed(ev::PsLost{1}).empty());  // told twice: once is enough
  c.Finish();                            // 20..29 made it: counted, then run again
  CHECK(c.machine.step() == 30);
  c.Finish(0, Unavailable("ps:1: connection reset"));  // ignored: run again anyway
  REQUIRE(Names(c.last) == "ReconnectPs");
  auto reconnect = std::get<act::ReconnectPs>(c.last[0]);
  CHECK(reconnect.ps == 1);
  CHECK(reconnect.deadline == 5000ms + c.config.ps_recovery_timeout);
  CHECK(Names(c.Answer()) == "RestoreNewest");
  const auto& restored = c.Answer();
  CHECK(c.machine.phase() ==
        Phase::kCheckpointing);  // 20..39 given out again: the checkpoint at 40 is next
  CHECK(c.machine.step() == 20);
  CHECK(Name(restored[0]) == "ResumeDispatch");
  CHECK(c.Logged("recovered: resuming at step 20 (10 step(s) since the checkpoint are run again)"));
  auto ranges = All<act::ScheduleRange>(restored);
  REQUIRE_FALSE(ranges.empty());
  CHECK(ranges[0].first == 20);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.machine.step() == 100);
}

TEST_CASE(
    "state machine: a ps lost while draining after a stop is not waited for: no final checkpoint, exit OK") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  c.Answer();  // checkpoint 20
  c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(c.machine.phase() == Phase::kDraining);
  c.Feed(ev::PsLost{0});
  CHECK(Names(c.last) == "PauseDispatch");
  CHECK(c.machine.phase() == Phase::kRecovering);
  c.Finish();
  c.Finish(0, Aborted("a ps is down"));
  CHECK(Names(c.last) == "Log, CloseDispatch");
  c.Run();
  CHECK(c.exit->ok());
  CHECK(All<act::ReconnectPs>(c.all).empty());
  CHECK(Saves(c.all, true).empty());
  CHECK(c.Logged("no final checkpoint; the newest committed checkpoint is step 20"));
  CHECK(All<act::ScheduleRange>(c.all).back().first == 30);  // nothing after the stop
}

TEST_CASE(
    "state machine: a checkpoint due while recovering is not saved; after recovery its timers restart") {
  auto config = Config();
  config.checkpoint_every_seconds = 10;
  config.checkpoint_every_steps = 50;
  FakeCluster c(config);
  c.StartFresh();  // ranges 0..39 at t = 0
  c.At(5000ms, ev::PsLost{0});
  while (!c.open.empty()) c.Finish();
  CHECK(c.machine.step() == 40);
  CHECK(Names(c.last) == "ReconnectPs");
  CHECK(c.At(15000ms, ev::Tick{}).empty());  // due by time, while a ps is down
  c.now = 16000ms;
  c.Answer();
  CHECK(c.At(16500ms, ev::Tick{}).empty());
  CHECK(c.machine.phase() == Phase::kRecovering);
  c.Answer();  // restored step 0, resumed at 16.5 s
  CHECK(c.machine.phase() == Phase::kTraining);
  CHECK(c.machine.step() == 0);
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0});
  CHECK(c.At(26000ms, ev::Tick{}).empty());  // 9.5 s after the resume
  CHECK(c.machine.phase() == Phase::kTraining);
  // By steps: the next boundary counts from the restored step.
  FinishUntilIo(c);
  CHECK(std::get<act::SaveCheckpoint>(*c.io).step == 50);
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0, 50});
}

TEST_CASE(
    "state machine: a save that fails with a ps lost turns into recovery from the newest committed checkpoint") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  CHECK(c.Feed(ev::PsLost{1}).empty());  // the save answers first
  const auto& failed = c.AnswerWith<act::SaveCheckpoint>(
      ev::CheckpointFailed{Unavailable("ps:1: connection reset")});
  CHECK(Names(failed) == "Log, PauseDispatch, ReconnectPs");
  CHECK(c.Logged("checkpoint 20 not committed: ps:1: connection reset"));
  c.Answer();
  c.Answer();  // restored: checkpoint 0 is the newest committed
  CHECK(c.machine.step() == 0);
  CHECK(All<act::ScheduleRange>(c.last).front().first == 0);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0, 20, 20, 40, 60, 80});
}

TEST_CASE(
    "state machine: a save that fails with every ps up is logged and training goes on; the next checkpoint is tried at its time") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  const auto& failed = c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{
      IoError("model/ckpt-20/ps-0.shard.tmp: write: No space left on device")});
  // Training again: 20..39 are given out, then it waits for them to save at 40.
  CHECK(c.machine.phase() == Phase::kCheckpointing);
  CHECK(c.Logged(
      "checkpoint 20 failed (1 in a row, 3 stop the run): model/ckpt-20/ps-0.shard.tmp: write: No space left on device; "
      "training goes on, the newest committed checkpoint is step 0"));
  auto ranges = All<act::ScheduleRange>(failed);
  REQUIRE_FALSE(ranges.empty());
  CHECK(ranges[0].first == 20);
  CHECK(c.machine.step() == 20);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0, 20, 40, 60, 80});
  CHECK(Saves(c.all, true) == std::vector<int64_t>{100});
}

TEST_CASE(
    "state machine: max_checkpoint_failures saves failing in a row stop the run with the error; a commit resets the count") {
  auto config = Config(20);
  config.max_checkpoint_failures = 2;
  FakeCluster c(config);
  RunToFirstSave(c);
  c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{IoError("disk full")});  // 20
  while (!c.io) c.Finish();
  c.Answer();  // 40 committed: the count starts again
  while (!c.io) c.Finish();
  c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{IoError("disk full")});  // 60
  CHECK(c.machine.phase() == Phase::kCheckpointing);  // training 60..79 for the save at 80
  while (!c.io) c.Finish();
  const auto& stopped =
      c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{IoError("disk full")});  // 80
  CHECK(Names(stopped) == "Log, CloseDispatch");
  CHECK(c.Logged("checkpoint 80 failed 2 times in a row: stopping the run"));
  c.Run();
  CHECK(c.exit->code() == Code::kIo);
  CHECK(Saves(c.all, true).empty());
}

TEST_CASE("state machine: a save that fails while a stop waits drains to the final checkpoint") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  c.Feed(ev::StopRequested{"SIGTERM"});
  const auto& failed =
      c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{IoError("disk full")});
  CHECK(Names(failed) ==
        "Log, CancelQueued, CloseDispatch");  // nothing in flight: straight to the final checkpoint
  c.Run();
  CHECK(c.exit->ok());
  CHECK(Saves(c.all, true) == std::vector<int64_t>{20});
}

TEST_CASE(
    "state machine: a stop whose final checkpoint fails ends the run not retryable (no training past the stop)") {
  FakeCluster c(Config(20));
  c.StartFresh();
  c.Feed(ev::StopRequested{"SIGTERM"});
  while (!c.io) c.Finish();
  c.Answer();  // closed
  c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{IoError("disk full")});
  CHECK(Names(c.last) == "Shutdown");
  c.Run();
  CHECK(c.exit->code() == Code::kFailedPrecondition);
  CHECK(c.exit->message() ==
        "stopped (SIGTERM), but the final checkpoint 20 failed: disk full; the newest committed "
        "checkpoint is step 0");
  for (const auto& s : All<act::Shutdown>(c.all))
    CHECK(s.outcome.code() == Code::kFailedPrecondition);
}

TEST_CASE(
    "state machine: the final checkpoint failing with every ps up ends the run with the error") {
  FakeCluster c(Config());
  c.StartFresh();
  while (!c.io) c.Finish();
  c.Answer();  // closed
  c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{IoError("disk full")});
  CHECK(Names(c.last) == "Shutdown");
  c.Run();
  CHECK(c.exit->code() == Code::kIo);
}

TEST_CASE("state machine: a ps that never comes back ends the run with the recovery error") {
  FakeCluster c(Config());
  c.never_back = {1};
  c.StartFresh();
  c.Feed(ev::PsLost{1});
  while (!c.open.empty()) c.Finish(0, Unavailable("ps:1 unreachable"));
  c.Run();
  CHECK(c.exit->code() == Code::kUnavailable);
  CHECK(c.exit->message() == "ps:1 did not come back within 600 s");
  CHECK(All<act::SaveCheckpoint>(c.all).size() == 1);  // step 0 only: no final checkpoint
  CHECK(ShutdownReasons(c.all).front() == "job failed: ps:1 did not come back within 600 s");
  // The tasks are told the failure (a retryable one makes them exit 138 as well).
  for (const auto& s : All<act::Shutdown>(c.all)) CHECK(s.outcome.code() == Code::kUnavailable);
}

TEST_CASE(
    "state machine: a ps lost while another reconnects, or during the restore, is reconnected before training resumes") {
  FakeCluster c(Config());
  c.StartFresh();
  c.At(1000ms, ev::PsLost{1});
  while (!c.open.empty()) c.Finish();
  const auto deadline = std::get<act::ReconnectPs>(*c.io).deadline;
  c.At(2000ms, ev::PsLost{0});
  CHECK(c.last.empty());
  const auto& back = c.Answer();
  REQUIRE(Names(back) == "ReconnectPs");
  CHECK(std::get<act::ReconnectPs>(back[0]).ps == 0);
  CHECK(std::get<act::ReconnectPs>(back[0]).deadline ==
        deadline);  // one deadline for the whole recovery
  CHECK(Names(c.Answer()) == "RestoreNewest");
  c.Feed(ev::PsLost{1});
  SECTION("the restore succeeds anyway: reconnect, restore again") {
    CHECK(Names(c.Answer()) == "ReconnectPs");
  }
  SECTION("the restore fails: reconnect, restore again") {
    CHECK(Names(c.AnswerWith<act::RestoreNewest>(ev::RestoreFailed{Unavailable("ps:1 gone")})) ==
          "ReconnectPs");
  }
  CHECK(Names(c.Answer()) == "RestoreNewest");
  CHECK(Name(c.Answer()[0]) == "ResumeDispatch");
  CHECK(c.machine.phase() == Phase::kTraining);
  c.Run();
  CHECK(c.exit->ok());
}

TEST_CASE("state machine: a restore that fails in recovery with every ps up ends the run") {
  FakeCluster c(Config());
  c.StartFresh();
  c.Feed(ev::PsLost{0});
  while (!c.open.empty()) c.Finish();
  c.Answer();
  c.AnswerWith<act::RestoreNewest>(ev::RestoreFailed{DataLoss("no checkpoint could be restored")});
  c.Run();
  CHECK(c.exit->code() == Code::kDataLoss);
}

TEST_CASE("state machine: a ps lost while starting is recovered as soon as training starts") {
  FakeCluster c(Config());
  c.Feed(ev::Start{});
  c.Answer();
  c.Feed(ev::PsLost{0});
  CHECK(c.last.empty());
  c.Answer();
  c.Answer();
  CHECK(Names(c.Answer()) == "OpenDispatch, PauseDispatch, ReconnectPs");
  c.Run();
  CHECK(c.exit->ok());
}

TEST_CASE(
    "state machine: a ps lost during the final checkpoint is recovered: dispatch reopens, the steps since the checkpoint run again") {
  FakeCluster c(Config(50));
  c.StartFresh();
  while (!c.io) c.Finish();
  c.Answer();  // checkpoint 50
  while (!c.io) c.Finish();
  c.Answer();  // closed
  REQUIRE(std::holds_alternative<act::SaveCheckpoint>(*c.io));
  CHECK(std::get<act::SaveCheckpoint>(*c.io).final);
  CHECK(c.Feed(ev::PsLost{1}).empty());  // the save answers first
  const auto& failed = c.AnswerWith<act::SaveCheckpoint>(
      ev::CheckpointFailed{Unavailable("checkpoint 100 on ps:1: connection reset")});
  CHECK(Names(failed) == "Log, OpenDispatch, PauseDispatch, ReconnectPs");
  CHECK(c.Logged("checkpoint 100 not committed: checkpoint 100 on ps:1: connection reset"));
  c.Answer();                         // ps:1 back
  const auto& restored = c.Answer();  // checkpoint 50
  CHECK(c.machine.step() == 50);
  CHECK(Name(restored[0]) == "ResumeDispatch");
  CHECK(All<act::ScheduleRange>(restored).front().first == 50);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.machine.step() == 100);
  CHECK(Saves(c.all, true) == std::vector<int64_t>{100, 100});
  CHECK(c.checkpoints.back().final);
}

TEST_CASE(
    "state machine: a ps lost during the final checkpoint after a stop: not waited for; the committed checkpoint stands") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  c.Answer();  // checkpoint 20
  c.Feed(ev::StopRequested{"pstrain stop"});
  while (!c.io) c.Finish();
  c.Answer();  // closed at 40
  REQUIRE(std::get<act::SaveCheckpoint>(*c.io).step == 40);
  c.Feed(ev::PsLost{0});
  c.AnswerWith<act::SaveCheckpoint>(ev::CheckpointFailed{Unavailable("ps:0: connection reset")});
  c.Run();
  CHECK(c.exit->ok());
  CHECK(Saves(c.all, true) == std::vector<int64_t>{40});  // not committed
  CHECK(All<act::ReconnectPs>(c.all).empty());
  CHECK(c.Logged("no final checkpoint; the newest committed checkpoint is step 20"));
}

TEST_CASE(
    "state machine: a ps lost during the final evaluation: restored from the final checkpoint and evaluated again") {
  auto config = Config();
  config.evaluate_final = true;
  FakeCluster e(config);
  e.StartFresh();
  while (!e.io) e.Finish();
  e.Answer();  // closed
  e.Answer();  // final checkpoint 100
  REQUIRE(std::holds_alternative<act::Evaluate>(*e.io));
  e.Feed(ev::PsLost{1});
  const auto& failed =
      e.AnswerWith<act::Evaluate>(ev::EvaluationFailed{Unavailable("ps:1: connection reset")});
  CHECK(Names(failed) == "Log, OpenDispatch, PauseDispatch, ReconnectPs");
  e.Run();
  CHECK(e.exit->ok());
  CHECK(All<act::Evaluate>(e.all).size() == 2);
  CHECK(Saves(e.all, true) == std::vector<int64_t>{100});  // restored final: not saved again
  CHECK(All<act::ScheduleRange>(e.all).back().first == 90);
}

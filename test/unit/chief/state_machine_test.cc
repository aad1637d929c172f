// ChiefMachine driven event by event against a fake cluster (fake_cluster.h): starting,
// training, checkpoints, stops, update modes, shutdown. Recovery from a lost ps is in
// state_machine_recovery_test.cc.
#include <catch2/catch.hpp>

#include "test/unit/chief/fake_cluster.h"

using namespace ps;
using namespace ps::chief;
using namespace ps::chief::testing;
using namespace std::chrono_literals;

TEST_CASE(
    "state machine: a fresh job connects, restores, saves step 0, starts the workers, then fills the in-flight bound") {
  FakeCluster c(Config());
  CHECK(Names(c.Feed(ev::Start{})) == "Connect");
  CHECK(Names(c.Answer()) == "RestoreNewest");
  CHECK(Names(c.Answer()) == "SaveCheckpoint");
  CHECK(Saves(c.last, false) == std::vector<int64_t>{0});
  CHECK(Names(c.Answer()) == "StartWorkers");
  CHECK(c.machine.phase() == Phase::kStarting);
  const auto& started = c.Answer();
  CHECK(Name(started.front()) == "OpenDispatch");
  auto ranges = All<act::ScheduleRange>(started);
  REQUIRE(ranges.size() == 4);  // 2 workers × (1 dispatch + 1 queued)
  for (size_t i = 0; i < ranges.size(); ++i) {
    CHECK(ranges[i].first == static_cast<int64_t>(i) * 10);
    CHECK(ranges[i].count == 10);
    CHECK(ranges[i].workers.empty());
  }
  CHECK(c.machine.phase() == Phase::kTraining);
  // A decided range frees one slot.
  c.Finish();
  auto more = All<act::ScheduleRange>(c.last);
  REQUIRE(more.size() == 1);
  CHECK(more[0].first == 40);
  CHECK(c.machine.step() == 10);
}

TEST_CASE(
    "state machine: a warm start (restored from checkpoint.init_from) saves into model_dir at its step before the workers start") {
  FakeCluster c(Config());
  CHECK(Names(c.Feed(ev::Start{})) == "Connect");
  CHECK(Names(c.Answer()) == "RestoreNewest");
  CHECK(Names(c.AnswerWith<act::RestoreNewest>(ev::Restored{true, 70, true, true})) ==
        "SaveCheckpoint");
  CHECK(Saves(c.last, false) == std::vector<int64_t>{70});
  CHECK(c.machine.step() == 70);
  CHECK(Names(c.Answer()) == "StartWorkers");
  c.Answer();
  CHECK(c.machine.phase() == Phase::kTraining);
  CHECK(All<act::ScheduleRange>(c.last).front().first == 70);
}

TEST_CASE(
    "state machine: a run to the end reports progress, saves the final checkpoint, evaluates, shuts workers then ps down") {
  auto config = Config();
  config.total_steps = 95;
  config.log_every_steps = 20;
  config.evaluate_final = true;
  FakeCluster c(config);
  c.StartFresh();
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.machine.phase() == Phase::kDone);
  CHECK(c.machine.step() == 95);
  std::vector<int64_t> reported;
  for (const auto& r : All<act::Report>(c.all)) reported.push_back(r.step);
  CHECK(reported == std::vector<int64_t>{20, 40, 60, 80, 95});
  auto first = All<act::Report>(c.all).front();
  CHECK(first.window.steps == 20);
  CHECK(first.window.examples == 200);
  CHECK(first.total == 95);
  auto last_range = All<act::ScheduleRange>(c.all).back();
  CHECK(last_range.first == 90);
  CHECK(last_range.count == 5);
  CHECK(Saves(c.all, true) == std::vector<int64_t>{95});
  // The tail, in order.
  std::vector<std::string> tail;
  for (const auto& a : c.all) {
    if (IsIo(a)) tail.push_back(Name(a));
  }
  REQUIRE(tail.size() >= 5);
  CHECK(std::vector<std::string>(tail.end() - 5, tail.end()) ==
        std::vector<std::string>{"CloseDispatch", "SaveCheckpoint", "Evaluate", "Shutdown",
                                 "Shutdown"});
  auto shutdowns = All<act::Shutdown>(c.all);
  CHECK(shutdowns[0].group == TaskGroup::kWorkers);
  CHECK(shutdowns[1].group == TaskGroup::kPs);
  CHECK(shutdowns[0].reason == "job finished");
  CHECK(c.Logged("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged"));
  CHECK_FALSE(c.Logged("stopped at step"));
}

TEST_CASE(
    "state machine: checkpoints by steps fall on exact step boundaries; no range crosses one") {
  auto config = Config();
  config.steps_per_dispatch = 7;
  config.checkpoint_every_steps = 25;
  FakeCluster c(config);
  c.StartFresh();
  // Each non-final save is emitted with nothing open: it holds exactly the steps before it.
  for (int i = 0; i < 100000 && !c.exit; ++i) {
    if (c.io) {
      if (std::holds_alternative<act::SaveCheckpoint>(*c.io)) {
        CHECK(c.open.empty());
        CHECK(std::get<act::SaveCheckpoint>(*c.io).step == c.machine.step());
      }
      c.Answer();
    } else {
      REQUIRE_FALSE(c.open.empty());
      c.Finish();
    }
  }
  REQUIRE(c.exit.has_value());
  CHECK(c.exit->ok());
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0, 25, 50, 75});
  CHECK(Saves(c.all, true) == std::vector<int64_t>{100});
  for (const auto& r : All<act::ScheduleRange>(c.all)) {
    CHECK((r.first / 25) == ((r.first + r.count - 1) / 25));
  }
}

TEST_CASE(
    "state machine: a checkpoint by time is due on a tick after every_seconds; the timer restarts at the commit") {
  auto config = Config();
  config.total_steps = 1000;
  config.checkpoint_every_seconds = 10;
  FakeCluster c(config);
  c.StartFresh();  // at t = 0
  CHECK(c.At(9999ms, ev::Tick{}).empty());
  CHECK(c.machine.phase() == Phase::kTraining);
  CHECK(c.At(10000ms, ev::Tick{}).empty());
  CHECK(c.machine.phase() == Phase::kCheckpointing);
  // Due: nothing new is given out; the save waits for the four ranges in flight.
  for (int i = 0; i < 3; ++i) {
    c.Finish();
    CHECK(c.last.empty());
  }
  c.Finish();
  CHECK(Names(c.last) == "SaveCheckpoint");
  CHECK(Saves(c.last, false) == std::vector<int64_t>{40});
  c.now = 12000ms;
  c.Answer();
  CHECK(c.machine.phase() == Phase::kTraining);
  CHECK(All<act::ScheduleRange>(c.last).size() == 4);
  CHECK(All<act::ScheduleRange>(c.last).front().first == 40);
  c.At(21999ms, ev::Tick{});
  CHECK(c.machine.phase() == Phase::kTraining);
  c.At(22000ms, ev::Tick{});
  CHECK(c.machine.phase() == Phase::kCheckpointing);
}

TEST_CASE(
    "state machine: deltas are due delta_every_seconds after any checkpoint; a full one due by time wins") {
  auto config = Config();
  config.total_steps = 100000;
  config.checkpoint_every_seconds = 10;
  config.checkpoint_delta_every_seconds = 3;
  FakeCluster c(config);
  c.StartFresh();                               // ckpt-0 (full) at t = 0
  std::vector<std::pair<int64_t, bool>> saves;  // (ms, delta)
  for (int64_t ms = 100; ms <= 14000; ms += 100) {
    c.At(std::chrono::milliseconds(ms), ev::Tick{});
    if (c.machine.phase() != Phase::kCheckpointing) continue;
    for (int i = 0; i < 100 && !c.io; ++i) c.Finish();  // the ranges in flight, then the save
    if (c.io && std::holds_alternative<act::SaveCheckpoint>(*c.io)) {
      saves.emplace_back(ms, std::get<act::SaveCheckpoint>(*c.io).delta);
      c.Answer();
    }
  }
  // Deltas 3 s after the previous checkpoint of either kind; the full one 10 s after ckpt-0.
  CHECK(saves == std::vector<std::pair<int64_t, bool>>{
                     {3000, true}, {6000, true}, {9000, true}, {10000, false}, {13000, true}});
}

TEST_CASE(
    "state machine: a stop during a checkpoint save lets it commit, then drains to the final checkpoint at that step") {
  FakeCluster c(Config(20));
  RunToFirstSave(c);
  REQUIRE(std::holds_alternative<act::SaveCheckpoint>(*c.io));
  CHECK(std::get<act::SaveCheckpoint>(*c.io).step == 20);
  const auto& stop = c.Feed(ev::StopRequested{"stop command from 127.0.0.1:5000"});
  CHECK(Names(stop) == "Log");
  CHECK(
      c.Logged("stop requested (stop command from 127.0.0.1:5000): finishing the steps in flight"));
  CHECK(c.machine.phase() == Phase::kCheckpointing);
  const auto& committed = c.Answer();
  CHECK(All<act::ScheduleRange>(committed).empty());
  CHECK(All<act::CancelQueued>(committed).size() == 1);
  CHECK(Names(committed).find("CloseDispatch") != std::string::npos);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0, 20});
  CHECK(Saves(c.all, true) == std::vector<int64_t>{20});
  CHECK(c.Logged("stopped at step 20 of 100"));
  CHECK(ShutdownReasons(c.all).front() == "stopped: stop command from 127.0.0.1:5000");
}

TEST_CASE(
    "state machine: a stop while a checkpoint waits for ranges in flight skips it; the final checkpoint takes the step reached") {
  FakeCluster c(Config(20));
  c.StartFresh();
  REQUIRE(c.open.size() == 2);  // 0..9, 10..19: then the checkpoint is due
  CHECK(c.machine.phase() == Phase::kCheckpointing);
  c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(c.machine.phase() == Phase::kDraining);
  REQUIRE(All<act::CancelQueued>(c.last).size() == 1);
  CHECK(All<act::CancelQueued>(c.last)[0].why.code() == Code::kAborted);
  c.Finish();                        // 0..9 ran
  c.Finish(0, Aborted("stopping"));  // 10..19 was still queued: cancelled
  CHECK(Names(c.last) == "CloseDispatch");
  c.Run();
  CHECK(c.exit->ok());
  CHECK(Saves(c.all, false) == std::vector<int64_t>{0});
  CHECK(Saves(c.all, true) == std::vector<int64_t>{10});
}

TEST_CASE("state machine: a second stop is a no-op, logged once") {
  FakeCluster c(Config());
  c.StartFresh();
  c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(All<act::CancelQueued>(c.last).size() == 1);
  const auto& second = c.Feed(ev::StopRequested{"SIGINT"});
  REQUIRE(second.size() == 1);
  CHECK(std::get<act::Log>(second[0]).text == "already stopping (SIGTERM)");
  c.Feed(ev::StopRequested{"stop command"});
  CHECK(Names(c.last) == "Log");
  CHECK(c.machine.stop_reason() == std::optional<std::string>("SIGTERM"));
  c.Run();
  CHECK(c.exit->ok());
  CHECK(All<act::CancelQueued>(c.all).size() == 1);
  int requested = 0;
  for (const auto& l : c.logs) requested += l.find("stop requested") != std::string::npos ? 1 : 0;
  CHECK(requested == 1);
  CHECK(ShutdownReasons(c.all).front() == "stopped: SIGTERM");
}

TEST_CASE(
    "state machine: a stop before training starts: a restore that completed anyway starts nothing, saves nothing") {
  FakeCluster c(Config());
  c.checkpoints.push_back({40, false});
  c.Feed(ev::Start{});
  c.Answer();  // connected → restore
  c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(c.machine.phase() == Phase::kStarting);
  c.cut_short = false;  // the restore completed before the shell saw the stop
  CHECK(Names(c.Answer()) == "Log, Shutdown");
  CHECK(c.machine.step() == 40);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(All<act::StartWorkers>(c.all).empty());
  CHECK(All<act::ScheduleRange>(c.all).empty());
  CHECK(All<act::SaveCheckpoint>(c.all).empty());
  CHECK(c.Logged(
      "stopped (SIGTERM) before training started (restored step 40): no checkpoint written"));
}

TEST_CASE(
    "state machine: a job already complete at restore runs no step and saves nothing: straight to evaluation and shutdown") {
  auto config = Config();
  config.evaluate_final = GENERATE(false, true);
  FakeCluster c(config);
  c.checkpoints.push_back({100, true});
  c.Feed(ev::Start{});
  c.Answer();
  CHECK(Names(c.Answer()) == "StartWorkers");
  CHECK(Names(c.Answer()) == "OpenDispatch, CloseDispatch");
  CHECK(Names(c.Answer()) == (config.evaluate_final ? "Evaluate" : "Shutdown"));
  c.Run();
  CHECK(c.exit->ok());
  CHECK(All<act::ScheduleRange>(c.all).empty());
  CHECK(All<act::SaveCheckpoint>(c.all).empty());
  CHECK(ShutdownReasons(c.all).front() == "job finished");
}

TEST_CASE(
    "state machine: a failed range drains (queued packs cancelled) and exits with that error, without a final checkpoint") {
  FakeCluster c(Config());
  c.StartFresh();
  c.Finish(1, InvalidArgument("steps 10..19 on worker:1: bad record in train.tfrecord"));
  CHECK(c.machine.phase() == Phase::kDraining);
  REQUIRE(All<act::CancelQueued>(c.last).size() == 1);
  CHECK(All<act::CancelQueued>(c.last)[0].why.message() == "stopping after a failure");
  CHECK(All<act::ScheduleRange>(c.last).empty());
  c.Finish();                         // 0..9 succeeds: counted
  c.Finish(0, Aborted("cancelled"));  // cancelled by the drain: ignored
  c.Finish(0, DataLoss("later"));     // a later failure does not replace the first
  c.Run();
  CHECK(c.exit->code() == Code::kInvalidArgument);
  CHECK(c.exit->message() == "steps 10..19 on worker:1: bad record in train.tfrecord");
  CHECK(c.machine.step() == 10);
  CHECK(Saves(c.all, true).empty());
  CHECK(All<act::Evaluate>(c.all).empty());
  CHECK(ShutdownReasons(c.all).front() ==
        "job failed: steps 10..19 on worker:1: bad record in train.tfrecord");
}

TEST_CASE(
    "state machine: draining after a stop ignores ranges cancelled (Aborted) but not other failures") {
  FakeCluster c(Config());
  c.StartFresh();
  c.Feed(ev::StopRequested{"SIGINT"});
  c.Finish();
  c.Finish(0, Aborted("stopping"));
  SECTION("only cancelled ranges: exit OK") {
    c.Finish(0, Aborted("stopping"));
    c.Finish(0, Aborted("stopping"));
    c.Run();
    CHECK(c.exit->ok());
    CHECK(Saves(c.all, true) == std::vector<int64_t>{10});
  }
  SECTION("a real failure while draining: exit with it") {
    c.Finish(0, DataLoss("corrupt batch"));
    c.Run();
    CHECK(c.exit->code() == Code::kDataLoss);
    CHECK(Saves(c.all, true).empty());
  }
}

TEST_CASE(
    "state machine: async: a lost worker changes nothing in the schedule; its re-queued range counts once") {
  FakeCluster c(Config());
  c.StartFresh();
  CHECK(c.Feed(ev::WorkerLost{1}).empty());
  c.Finish(1);  // the coordinator re-ran it on worker:0
  auto ranges = All<act::ScheduleRange>(c.last);
  REQUIRE(ranges.size() == 1);
  CHECK(ranges[0].workers.empty());
  CHECK(c.machine.step() == 10);
  c.Finish(0, Unavailable("no live workers left"));  // a failure with every ps up
  CHECK(c.machine.phase() == Phase::kDraining);
  c.Run();
  CHECK(c.exit->code() == Code::kUnavailable);
}

TEST_CASE(
    "state machine: sync: ranges pinned to every live worker, R must succeed; fewer live than R pins to all") {
  auto config = Config();
  config.sync = true;
  config.num_workers = 3;
  config.replicas = 2;
  FakeCluster c(config);
  c.StartFresh();
  auto ranges = All<act::ScheduleRange>(c.all);
  REQUIRE(ranges.size() == 6);
  CHECK(ranges[0].workers == std::vector<int>{0, 1, 2});
  // Two of three packs decide the range; the backup's late pack is ignored.
  c.Pack(c.open[0], Status::Ok());
  CHECK(c.machine.step() == 0);
  c.Pack(c.open[0], Status::Ok());
  CHECK(c.machine.step() == 10);
  CHECK(All<act::ScheduleRange>(c.last).size() == 1);
  c.Pack(c.open[0], Unavailable("worker:2 lost"));
  CHECK(c.machine.step() == 10);
  CHECK(c.machine.phase() == Phase::kTraining);
  c.open.pop_front();
  // worker:1 lost: new ranges go to the other two only.
  c.Feed(ev::WorkerLost{1});
  c.Finish();
  auto next = All<act::ScheduleRange>(c.last);
  REQUIRE(next.size() == 1);
  CHECK(next[0].workers == std::vector<int>{0, 2});
  // worker:2 lost too: one live < R = 2: every worker gets a pack (the lost ones wait).
  c.Feed(ev::WorkerLost{2});
  c.Finish();
  CHECK(All<act::ScheduleRange>(c.last).at(0).workers == std::vector<int>{0, 1, 2});
  c.Feed(ev::WorkerBack{1});
  c.Finish();
  CHECK(All<act::ScheduleRange>(c.last).at(0).workers == std::vector<int>{0, 1});
  // A range with fewer than R successes once every pack answered has failed.
  auto r = c.open.front();
  c.open.pop_front();
  c.Pack(r, Status::Ok());
  c.Pack(r, Unavailable("worker:1: deadline"));
  c.Pack(r, Unavailable("worker:2: deadline"));
  CHECK(c.machine.phase() == Phase::kDraining);
  c.Run();
  CHECK(c.exit->code() == Code::kUnavailable);
  CHECK(c.exit->message() == "worker:1: deadline");
}

TEST_CASE(
    "state machine: sync: a stop with too few live workers drops the ranges given out; final checkpoint at once") {
  for (bool lost_first : {true, false}) {
    INFO((lost_first ? "worker lost, then the stop" : "the stop, then a worker lost"));
    auto config = Config();
    config.sync = true;
    config.replicas = 2;
    FakeCluster c(config);
    c.StartFresh();
    c.Finish();  // one range applied on both workers
    REQUIRE(c.machine.step() == 10);
    if (lost_first) c.Feed(ev::WorkerLost{1});
    CHECK(All<act::PauseDispatch>(c.all).empty());  // training waits for worker:1 to rejoin
    c.Feed(ev::StopRequested{"SIGTERM"});
    if (!lost_first) {
      CHECK(All<act::PauseDispatch>(c.all).empty());  // every worker alive: ranges finish
      c.Feed(ev::WorkerLost{1});
    }
    REQUIRE(All<act::PauseDispatch>(c.all).size() == 1);
    CHECK(c.Logged("stopping with 1 live worker(s) of the 2 a synchronous update needs"));
    // The dropped ranges' packs fail (Aborted, or the lost worker's connection): no error.
    while (!c.open.empty()) {
      auto r = c.open.front();
      c.open.pop_front();
      c.Pack(r, Status::Ok());
      c.Pack(r, Unavailable("worker:1: connection closed"));
    }
    c.Run();
    CHECK(c.exit->ok());
    CHECK(c.machine.step() == 10);
    CHECK(Saves(c.all, true) == std::vector<int64_t>{10});
  }
}

TEST_CASE(
    "state machine: sync: a stop lets every range given out finish (nothing cancelled), then closes") {
  auto config = Config();
  config.sync = true;
  config.replicas = 2;
  FakeCluster c(config);
  c.StartFresh();
  const size_t given = c.open.size();
  const auto& stop = c.Feed(ev::StopRequested{"SIGTERM"});
  CHECK(Names(stop) == "Log");
  CHECK(c.machine.phase() == Phase::kDraining);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(All<act::CancelQueued>(c.all).empty());
  CHECK(c.machine.step() == static_cast<int64_t>(given) * 10);
  CHECK(Saves(c.all, true) == std::vector<int64_t>{c.machine.step()});
}

TEST_CASE(
    "state machine: bounded staleness: any decided range counts, not only the oldest; a lost worker changes nothing") {
  auto config = Config();
  config.checkpoint_every_steps = 40;
  config.num_workers = 3;
  FakeCluster c(config);  // bounded staleness schedules like async: not sync
  c.StartFresh();
  REQUIRE(c.open.size() == 4);  // 0..39: the checkpoint at 40 bounds them
  c.Feed(ev::WorkerLost{2});
  // The oldest waits for a straggler; the newer ones are decided first.
  c.Finish(3);
  c.Finish(2);
  c.Finish(1);
  CHECK(c.machine.step() == 30);
  CHECK_FALSE(c.io.has_value());
  c.Finish(0);
  CHECK(c.machine.step() == 40);
  REQUIRE(c.io.has_value());
  CHECK(std::get<act::SaveCheckpoint>(*c.io).step == 40);
  c.Answer();
  for (const auto& r : All<act::ScheduleRange>(c.last)) CHECK(r.workers.empty());
  c.Run();
  CHECK(c.exit->ok());
}

TEST_CASE(
    "state machine: shutdown with a task that never acknowledges exits FailedPrecondition (not retryable) naming it") {
  FakeCluster c(Config());
  c.unacked_ps = {"ps:1 (Shutdown did not complete within 1000 ms)"};
  c.StartFresh();
  c.Run();
  CHECK(c.exit->code() == Code::kFailedPrecondition);
  CHECK(c.exit->message() ==
        "did not acknowledge Shutdown: ps:1 (Shutdown did not complete within 1000 ms)");
  CHECK_FALSE(c.Logged("cluster shut down"));
  SECTION("an earlier error wins") {
    FakeCluster d(Config());
    d.unacked_ps = {"ps:0 (closed)"};
    d.StartFresh();
    d.Finish(0, InvalidArgument("bad model"));
    d.Run();
    CHECK(d.exit->code() == Code::kInvalidArgument);
  }
}

TEST_CASE(
    "state machine: a failure while starting shuts down what is connected and exits with it") {
  FakeCluster c(Config());
  c.Feed(ev::Start{});
  SECTION("connecting") {
    CHECK(Names(c.AnswerWith<act::Connect>(
              ev::StartFailed{Unavailable("ps:0 refused the connection")})) == "Shutdown");
    c.Run();
    CHECK(c.exit->message() == "ps:0 refused the connection");
  }
  SECTION("restoring") {
    c.Answer();
    c.AnswerWith<act::RestoreNewest>(
        ev::RestoreFailed{FailedPrecondition("written by 3 ps task(s)")});
    c.Run();
    CHECK(c.exit->code() == Code::kFailedPrecondition);
  }
  SECTION("starting the workers") {
    c.Answer();
    c.Answer();
    c.Answer();
    c.AnswerWith<act::StartWorkers>(
        ev::StartFailed{InvalidArgument("worker:1 cannot start the job: bad model")});
    c.Run();
    CHECK(c.exit->code() == Code::kInvalidArgument);
  }
  CHECK(All<act::OpenDispatch>(c.all).empty());
  CHECK(ShutdownReasons(c.all).size() == 2);
}

TEST_CASE(
    "state machine: the watchdog warns after `watchdog` without a decided range, then at most once per `watchdog`") {
  auto config = Config();
  config.watchdog = 300s;
  FakeCluster c(config);
  c.StartFresh();
  CHECK(c.At(299s, ev::Tick{}).empty());
  REQUIRE(Names(c.At(300s, ev::Tick{})) == "Watchdog");
  CHECK(std::get<act::Watchdog>(c.last[0]).silent_for == 300s);
  CHECK(c.At(400s, ev::Tick{}).empty());
  REQUIRE(Names(c.At(600s, ev::Tick{})) == "Watchdog");
  CHECK(std::get<act::Watchdog>(c.last[0]).silent_for == 600s);
  c.now = 650s;
  c.Finish();
  CHECK(c.At(900s, ev::Tick{}).empty());
  REQUIRE(Names(c.At(950s, ev::Tick{})) == "Watchdog");
  CHECK(std::get<act::Watchdog>(c.last[0]).silent_for == 300s);
}

TEST_CASE("state machine: events that do not fit the state change nothing") {
  FakeCluster c(Config());
  c.StartFresh();
  const int64_t step = c.machine.step();
  const size_t open = c.open.size();
  CHECK(c.Feed(ev::CheckpointCommitted{50, false}).empty());
  CHECK(c.Feed(ev::Restored{true, 70, false}).empty());
  CHECK(c.Feed(ev::PsBack{0}).empty());
  CHECK(c.Feed(ev::DispatchClosed{}).empty());
  CHECK(c.Feed(ev::PackDone{999, Status::Ok(), {}}).empty());
  CHECK(c.Feed(ev::ShutdownReplied{TaskGroup::kPs, 1, {"ps:0"}}).empty());
  CHECK(c.Feed(ev::Start{}).empty());
  CHECK(c.machine.step() == step);
  CHECK(c.machine.phase() == Phase::kTraining);
  CHECK(c.open.size() == open);
  c.Run();
  CHECK(c.exit->ok());
  CHECK(c.Feed(ev::Tick{}).empty());  // done: nothing follows the exit
}

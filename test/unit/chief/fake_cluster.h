// A fake cluster for the ChiefMachine tests: no sockets, no threads, no clock. It answers
// the machine's I/O actions (successfully, unless a test says otherwise) and keeps the
// ranges it was given open until the test decides them.
#pragma once

#include <catch2/catch.hpp>

#include <deque>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "libps/chief/state_machine.h"

namespace ps::chief::testing {

using namespace std::chrono_literals;

inline std::string Name(const Action& a) {
  static const char* const kNames[] = {"Connect",      "RestoreNewest", "SaveCheckpoint",
                                       "StartWorkers", "ReconnectPs",   "CloseDispatch",
                                       "AbortIo",      "Evaluate",      "EvaluateOnWorkers",
                                       "Shutdown",     "OpenDispatch",  "ScheduleRange",
                                       "CancelQueued", "PauseDispatch", "ResumeDispatch",
                                       "Report",       "Watchdog",      "Log",
                                       "Exit"};
  static_assert(std::size(kNames) == std::variant_size_v<Action>);
  return kNames[a.index()];
}

inline std::string Names(const std::vector<Action>& actions) {
  std::string out;
  for (const auto& a : actions) out += (out.empty() ? "" : ", ") + Name(a);
  return out;
}

template <typename A>
std::vector<A> All(const std::vector<Action>& actions) {
  std::vector<A> out;
  for (const auto& a : actions) {
    if (const auto* p = std::get_if<A>(&a)) out.push_back(*p);
  }
  return out;
}

inline bool IsIo(const Action& a) {
  return std::holds_alternative<act::Connect>(a) || std::holds_alternative<act::RestoreNewest>(a) ||
         std::holds_alternative<act::SaveCheckpoint>(a) ||
         std::holds_alternative<act::StartWorkers>(a) ||
         std::holds_alternative<act::ReconnectPs>(a) ||
         std::holds_alternative<act::CloseDispatch>(a) ||
         std::holds_alternative<act::Evaluate>(a) ||
         std::holds_alternative<act::EvaluateOnWorkers>(a) ||
         std::holds_alternative<act::Shutdown>(a);
}

// 100 steps in ranges of 10 on 2 workers (4 ranges outstanding at most), a checkpoint
// every `every_steps` (0: none).
inline MachineConfig Config(int64_t every_steps = 0) {
  MachineConfig c;
  c.total_steps = 100;
  c.steps_per_dispatch = 10;
  c.dispatches_per_worker = 1;
  c.num_workers = 2;
  c.log_every_steps = 1000;
  c.checkpoint_every_steps = every_steps;
  return c;
}

struct Checkpoint {
  int64_t step;
  bool final;
};

class FakeCluster {
 public:
  explicit FakeCluster(MachineConfig config) : config(config), machine(config) {}

  // Steps the machine at `now`; returns (and records) its actions.
  const std::vector<Action>& Feed(const Event& e) {
    last = machine.Step(now, e);
    for (const auto& a : last) Take(a);
    return last;
  }
  const std::vector<Action>& At(Time t, const Event& e) {
    now = t;
    return Feed(e);
  }

  // Answers the I/O action waiting as the cluster would.
  const std::vector<Action>& Answer() {
    REQUIRE(io.has_value());
    Action a = *io;
    io.reset();
    return Feed(AnswerFor(a));
  }
  // Answers the I/O action waiting, which must be of type A, with `e`.
  template <typename A>
  const std::vector<Action>& AnswerWith(const Event& e) {
    REQUIRE(io.has_value());
    INFO("waiting: " + Name(*io));
    REQUIRE(std::holds_alternative<A>(*io));
    io.reset();
    return Feed(e);
  }

  // Answers every pack of open range `index` (0: the oldest) with `st`; `last` holds the
  // actions of all of them.
  void Finish(size_t index = 0, const Status& st = Status::Ok()) {
    REQUIRE(index < open.size());
    auto r = open[index];
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(index));
    const size_t packs = r.workers.empty() ? 1 : r.workers.size();
    std::vector<Action> actions;
    for (size_t p = 0; p < packs; ++p) {
      Pack(r, st);
      actions.insert(actions.end(), last.begin(), last.end());
    }
    last = std::move(actions);
  }
  void Pack(const act::ScheduleRange& r, const Status& st) {
    PackStats s{r.count * 10, r.count * 7, 0, r.count * 0.5};
    Feed(ev::PackDone{r.id, st, st.ok() ? s : PackStats{}});
  }

  // Connect, restore (nothing there), save step 0, start the workers.
  void StartFresh() {
    Feed(ev::Start{});
    for (int i = 0; i < 4; ++i) Answer();
    REQUIRE(machine.dispatching());
  }

  // Answers I/O and decides ranges (oldest first, successfully) until the machine exits.
  void Run() {
    for (int i = 0; i < 100000 && !exit; ++i) {
      if (io)
        Answer();
      else if (!open.empty())
        Finish();
      else
        FAIL("stuck in " << PhaseName(machine.phase()));
    }
    REQUIRE(exit.has_value());
  }

  bool Logged(const std::string& text) const {
    for (const auto& l : logs) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }

  MachineConfig config;
  ChiefMachine machine;
  Time now{0};
  std::vector<Action> last, all;
  std::deque<act::ScheduleRange> open;  // ranges given out, not yet decided by the test
  std::optional<Action> io;             // the I/O action waiting for its answer
  std::optional<Status> exit;
  std::vector<std::string> logs;
  std::vector<Checkpoint> checkpoints;  // committed, oldest first
  std::vector<int64_t> evaluations;     // inline evaluations answered, by step
  std::set<int> never_back;             // ReconnectPs fails for these ps tasks
  std::vector<std::string> unacked_ps;  // named by the ps Shutdown reply
  int num_ps = 2;
  bool cut_short = false;  // AbortIo came for the I/O waiting: Answer() fails it Aborted

 private:
  void Take(const Action& a) {
    all.push_back(a);
    if (IsIo(a)) {
      INFO("new " + Name(a) + " while " + (io ? Name(*io) : std::string("-")) + " waits");
      REQUIRE_FALSE(io.has_value());  // one I/O action at a time
      io = a;
    }
    if (const auto* r = std::get_if<act::ScheduleRange>(&a)) open.push_back(*r);
    if (const auto* l = std::get_if<act::Log>(&a)) logs.push_back(l->text);
    if (std::holds_alternative<act::AbortIo>(a)) {
      REQUIRE(io.has_value());  // only an I/O in progress is cut short
      cut_short = true;
    }
    if (const auto* x = std::get_if<act::Exit>(&a)) {
      REQUIRE_FALSE(exit.has_value());
      exit = x->status;
    }
  }

  Event AnswerFor(const Action& a) {
    if (std::exchange(cut_short, false)) {
      // The shell's answer to an I/O cut short by AbortIo.
      const Status stopped = Aborted("stopped");
      if (std::holds_alternative<act::Connect>(a) || std::holds_alternative<act::StartWorkers>(a))
        return ev::StartFailed{stopped};
      if (std::holds_alternative<act::RestoreNewest>(a)) return ev::RestoreFailed{stopped};
      if (std::holds_alternative<act::ReconnectPs>(a)) return ev::RecoveryFailed{stopped};
      if (std::holds_alternative<act::Evaluate>(a) ||
          std::holds_alternative<act::EvaluateOnWorkers>(a))
        return ev::EvaluationFailed{stopped};
    }
    if (std::holds_alternative<act::Connect>(a)) return ev::Connected{};
    if (std::holds_alternative<act::RestoreNewest>(a)) {
      if (checkpoints.empty()) return ev::Restored{false, 0, false};
      return ev::Restored{true, checkpoints.back().step, checkpoints.back().final};
    }
    if (const auto* s = std::get_if<act::SaveCheckpoint>(&a)) {
      checkpoints.push_back({s->step, s->final});
      return ev::CheckpointCommitted{s->step, s->final, s->delta};  // a delta when asked for one
    }
    if (std::holds_alternative<act::StartWorkers>(a)) return ev::WorkersStarted{};
    if (const auto* r = std::get_if<act::ReconnectPs>(&a)) {
      if (never_back.count(r->ps) > 0) {
        return ev::RecoveryFailed{
            Unavailable("ps:" + std::to_string(r->ps) + " did not come back within 600 s")};
      }
      return ev::PsBack{r->ps};
    }
    if (std::holds_alternative<act::CloseDispatch>(a)) {
      open.clear();  // what is left are backups' packs of decided ranges
      return ev::DispatchClosed{};
    }
    if (std::holds_alternative<act::Evaluate>(a)) return ev::Evaluated{};
    if (const auto* e = std::get_if<act::EvaluateOnWorkers>(&a)) {
      evaluations.push_back(e->step);
      return ev::WorkersEvaluated{e->step, ""};
    }
    const auto& s = std::get<act::Shutdown>(a);
    if (s.group == TaskGroup::kWorkers)
      return ev::ShutdownReplied{TaskGroup::kWorkers, config.num_workers, {}};
    return ev::ShutdownReplied{TaskGroup::kPs, num_ps, unacked_ps};
  }
};

inline std::vector<int64_t> Saves(const std::vector<Action>& actions, bool final) {
  std::vector<int64_t> out;
  for (const auto& s : All<act::SaveCheckpoint>(actions)) {
    if (s.final == final) out.push_back(s.step);
  }
  return out;
}

inline std::vector<std::string> ShutdownReasons(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const auto& s : All<act::Shutdown>(actions)) out.push_back(s.reason);
  return out;
}

// Decides open ranges (successfully, oldest first) until the machine wants I/O.
inline void FinishUntilIo(FakeCluster& c) {
  while (!c.io && !c.open.empty()) c.Finish();
  REQUIRE(c.io.has_value());
}

// Starts a fresh job and decides ranges until the first checkpoint's save waits.
inline void RunToFirstSave(FakeCluster& c) {
  c.StartFresh();
  FinishUntilIo(c);
  REQUIRE(std::holds_alternative<act::SaveCheckpoint>(*c.io));
}

}  // namespace ps::chief::testing

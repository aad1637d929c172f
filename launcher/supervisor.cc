#include "launcher/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/chief_client.h"
#include "launcher/local_plan.h"
#include "launcher/run_files.h"
#include "launcher/subprocess.h"
#include "libps/core/text.h"
#include "libps/daemon/daemon.h"

namespace ps::launcher {

using cluster::TaskType;
using daemon::kExitFailure;
using daemon::kExitOk;
using daemon::kExitUsage;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kRestartDelay{1000};
constexpr milliseconds kKillGrace{10000};  // after our SIGTERM, before SIGKILL
constexpr milliseconds kStopTimeout{5000};

// One writer for every line of the launcher and its tasks, so lines never interleave.
class Output {
 public:
  explicit Output(size_t width) : width_(width) {}
  void Line(std::string_view label, std::string_view line) {
    std::string s = PrefixLine(label, width_, line);
    s += '\n';
    std::lock_guard lock(mu_);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  void Say(std::string_view line) { Line(kLauncherLabel, line); }

 private:
  std::mutex mu_;
  size_t width_;
};

struct Task {
  TaskPlan plan;
  std::string label;
  std::unique_ptr<Subprocess> proc;
  int pidfd = -1;
  int restarts = 0;
  std::optional<int> last_exit;
  std::optional<Clock::time_point> restart_at;
  std::string note;

  std::string name() const { return plan.id.ToString(); }
  bool running() const { return proc != nullptr; }
  bool finished() const { return !proc && !restart_at && last_exit.has_value(); }
};

class Supervisor {
 public:
  Supervisor(const LocalCommand& command, const cluster::ClusterSpec& spec,
             std::vector<TaskPlan> plan, std::optional<std::string> secret, int sigfd)
      : command_(command),
        spec_(spec),
        secret_(std::move(secret)),
        sigfd_(sigfd),
        out_(LabelWidth(plan)) {
    for (auto& p : plan) {
      Task t;
      t.label = TaskLabel(p.id);
      t.plan = std::move(p);
      tasks_.push_back(std::move(t));
    }
  }

  ~Supervisor() {
    if (stop_.valid()) stop_.wait();
    for (auto& t : tasks_) ClosePidfd(t);
  }

  int Run() {
    Banner();
    for (auto& t : tasks_) Start(t);
    while (!AllFinished()) {
      WaitForEvent();
      HandleSignals();
      ReapExited();
      StartDueRestarts();
      CheckChiefGone();
      CheckDeadlines();
      CheckStopReply();
    }
    return Finish();
  }

 private:
  void Banner() {
    const cluster::HostPort chief = spec_.address({TaskType::kChief, 0});
    std::string line = "cluster " + command_.cluster_file + ": chief " + chief.ToString() + ", " +
                       std::to_string(spec_.count(TaskType::kWorker)) + " worker(s), " +
                       std::to_string(spec_.count(TaskType::kPs)) + " ps";
    if (spec_.count(TaskType::kEvaluator) > 0) line += ", evaluator";
    std::string dir = command_.model_dir;
    if (dir.empty()) dir = JobModelDir(command_.job_file);
    if (dir.empty()) {
      dir = "(none given)";
    } else if (command_.model_dir.empty()) {
      dir += " (from the job file)";
    }
    line += "; model dir: " + dir;
    line += "; stop with Ctrl-C or: pstrain stop --chief " + ControlAddress().ToString();
    // The throw-away secret's file is found by pstrain stop without the flag.
    if (command_.secret_file && !FindLocalSecret(ControlAddress())) {
      line += " --secret-file " + *command_.secret_file;
    }
    out_.Say(line);
    for (const auto& t : tasks_) {
      const auto& hp = spec_.address(t.plan.id);
      if (!LooksLocal(hp.host)) {
        out_.Say("WARNING: " + t.name() + " listens on " + hp.ToString() +
                 ", which does not look like this machine");
      }
    }
  }

  cluster::HostPort ControlAddress() const {
    cluster::HostPort hp = spec_.address({TaskType::kChief, 0});
    if (hp.host == "0.0.0.0") hp.host = "127.0.0.1";
    if (hp.host == "::") hp.host = "::1";
    return hp;
  }

  Task* Chief() {
    for (auto& t : tasks_) {
      if (t.plan.id.type == TaskType::kChief) return &t;
    }
    return nullptr;
  }

  bool ChiefGone() {
    Task* c = Chief();
    return c != nullptr && c->finished();
  }

  bool AllFinished() const {
    return std::all_of(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.finished(); });
  }

  static void ClosePidfd(Task& t) {
    if (t.pidfd >= 0) ::close(t.pidfd);
    t.pidfd = -1;
  }

  void Start(Task& t) {
    SpawnOptions o;
    o.argv = t.plan.argv;
    o.env = t.plan.env;
    o.on_line = [this, label = t.label](const std::string& line) { out_.Line(label, line); };
    auto p = Subprocess::Spawn(std::move(o));
    if (!p.ok()) {
      out_.Say("ERROR: " + t.name() + ": " + p.status().message());
      Exited(t, 127);
      return;
    }
    t.proc = std::move(*p);
    t.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, t.proc->pid(), 0));
    out_.Say("started " + t.name() + " (pid " + std::to_string(t.proc->pid()) +
             "): " + t.plan.argv[0]);
  }

  void WaitForEvent() {
    std::vector<pollfd> fds;
    fds.push_back({sigfd_, POLLIN, 0});
    bool all_pidfds = true;
    for (const auto& t : tasks_) {
      if (!t.running()) continue;
      if (t.pidfd >= 0) {
        fds.push_back({t.pidfd, POLLIN, 0});
      } else {
        all_pidfds = false;
      }
    }
    auto now = Clock::now();
    // Without a pidfd for every child (old kernel) the children are polled.
    milliseconds wait = all_pidfds ? milliseconds(1000) : milliseconds(100);
    if (stop_.valid()) wait = std::min(wait, milliseconds(100));
    auto until = [&](Clock::time_point t) {
      wait = std::min(
          wait, std::max(milliseconds(0),
                         std::chrono::duration_cast<milliseconds>(t - now) + milliseconds(1)));
    };
    for (const auto& t : tasks_) {
      if (t.restart_at) until(*t.restart_at);
    }
    if (grace_deadline_) until(*grace_deadline_);
    if (kill_deadline_) until(*kill_deadline_);
    ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  }

  void HandleSignals() {
    signalfd_siginfo info;
    while (::read(sigfd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      OnSignal(static_cast<int>(info.ssi_signo));
    }
  }

  void OnSignal(int sig) {
    ++signals_;
    const std::string name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
    stopping_ = true;
    for (auto& t : tasks_) {
      if (t.restart_at) {
        t.restart_at.reset();
        out_.Say(t.name() + ": pending restart cancelled");
      }
    }
    Task* chief = Chief();
    if (signals_ == 1 && chief != nullptr && chief->running()) {
      out_.Say(name +
               ": asking the chief to stop (it writes the final checkpoint and shuts every task "
               "down); signal again to send SIGTERM to every task, a third time to SIGKILL them");
      cluster::HostPort addr = ControlAddress();
      std::optional<std::string> secret = secret_;
      stop_ = std::async(std::launch::async, [addr, secret, name] {
        return CallChief(addr, secret, kStopTimeout, proto::Stop{"pstrain local: " + name});
      });
    } else if (signals_ <= 2) {
      out_.Say(name + ": sending SIGTERM to every task");
      SignalAll(SIGTERM);
    } else {
      out_.Say(name + ": sending SIGKILL to every task");
      SignalAll(SIGKILL);
    }
  }

  void SignalAll(int sig) {
    for (auto& t : tasks_) {
      if (t.running()) t.proc->Signal(sig);
    }
  }

  void CheckStopReply() {
    if (!stop_.valid() || stop_.wait_for(milliseconds(0)) != std::future_status::ready) return;
    Result<proto::Body> reply = stop_.get();
    Task* chief = Chief();
    if (reply.ok() && std::holds_alternative<proto::Ack>(*reply)) {
      out_.Say("the chief acknowledged the stop; waiting for the tasks to shut down");
      return;
    }
    std::string why = reply.ok()
                          ? std::string("answered ") + proto::BodyName(*reply) + " instead of Ack"
                          : reply.status().message();
    out_.Say("WARNING: stop request failed: " + why);
    if (chief != nullptr && chief->running()) {
      out_.Say("sending SIGTERM to the chief instead (it stops gracefully on SIGTERM)");
      chief->proc->Signal(SIGTERM);
    }
  }

  void ReapExited() {
    for (auto& t : tasks_) {
      if (!t.running() || t.proc->Running()) continue;
      int status = t.proc->Wait();
      t.proc.reset();  // joins the output reader: the task's last lines come first
      ClosePidfd(t);
      Exited(t, status);
    }
  }

  void Exited(Task& t, int status) {
    t.last_exit = status;
    const bool chief = t.plan.id.type == TaskType::kChief;
    if (status == 0) {
      out_.Say(t.name() + " exited cleanly");
    } else {
      out_.Say("ERROR: " + t.name() + " failed: " + DescribeExit(status));
    }
    RestartQuery q{t.plan.id, status, t.restarts, stopping_, !chief && ChiefGone()};
    RestartDecision d = DecideRestart(command_.restart, command_.max_restarts, q);
    if (d.restart) {
      ++t.restarts;
      t.restart_at = Clock::now() + kRestartDelay;
      out_.Say("WARNING: restarting " + t.name() + " in 1 s (" + d.reason + ")");
    } else if (status != 0 && command_.restart == RestartPolicy::kOnFailure) {
      out_.Say(t.name() + " " + d.reason);
    }
  }

  // Every ps and worker has exited 0: the chief shut the cluster down as finished (and was
  // then killed, say) and a restarted chief would only wait for tasks that are gone. After a
  // retryable failure the chief shuts them down as retryable: they exit 138 and restart too.
  bool ClusterShutDown() const {
    return std::all_of(tasks_.begin(), tasks_.end(), [](const Task& o) {
      const TaskType type = o.plan.id.type;
      if (type != TaskType::kPs && type != TaskType::kWorker) return true;
      return o.finished() && o.last_exit == 0;
    });
  }

  void StartDueRestarts() {
    auto now = Clock::now();
    for (auto& t : tasks_) {
      if (!t.restart_at || *t.restart_at > now) continue;
      t.restart_at.reset();
      if (t.plan.id.type == TaskType::kChief && ClusterShutDown()) {
        out_.Say(t.name() +
                 " not restarted: it shut the cluster down (every ps and worker exited 0)");
        continue;
      }
      out_.Say("WARNING: restarting " + t.name() + " (restart " + std::to_string(t.restarts) + ")");
      Start(t);
    }
  }

  void CheckChiefGone() {
    if (grace_deadline_ || !ChiefGone()) return;
    std::string others;
    for (auto& t : tasks_) {
      if (t.restart_at) {
        t.restart_at.reset();
        out_.Say(t.name() + ": pending restart cancelled, the chief has exited");
      }
      if (t.running()) others += (others.empty() ? "" : ", ") + t.name();
    }
    if (Chief()->last_exit == std::optional<int>(2)) {
      // A usage or configuration error: the chief never started the job, so nobody will
      // shut the others down. Do not make the user wait for the grace period.
      grace_deadline_ = Clock::now();
      grace_reason_ = "the chief exited 2 (a usage or configuration error: see its output above)";
      return;
    }
    grace_deadline_ = Clock::now() + command_.shutdown_grace;
    if (!others.empty()) {
      out_.Say("the chief has exited; waiting up to " + Secs(command_.shutdown_grace) + " for " +
               others);
    }
  }

  static std::string Secs(milliseconds ms) {
    return FormatDuration(static_cast<double>(ms.count()) / 1000.0);
  }

  void CheckDeadlines() {
    auto now = Clock::now();
    if (grace_deadline_ && !grace_fired_ && now >= *grace_deadline_) {
      grace_fired_ = true;
      bool any = false;
      for (auto& t : tasks_) {
        if (!t.running()) continue;
        any = true;
        if (!grace_reason_.empty()) {
          t.note = "terminated by the launcher: " + grace_reason_;
          out_.Say(t.name() + ": " + grace_reason_ + ". Sending SIGTERM");
        } else {
          t.note = "still running " + Secs(command_.shutdown_grace) +
                   " after the chief exited (terminated by the launcher)";
          out_.Say("ERROR: " + t.name() + " is still running " + Secs(command_.shutdown_grace) +
                   " after the chief exited: the chief did not shut it down. Sending SIGTERM");
        }
        t.proc->Signal(SIGTERM);
      }
      if (any) kill_deadline_ = now + kKillGrace;
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      kill_deadline_.reset();
      for (auto& t : tasks_) {
        if (!t.running()) continue;
        out_.Say("ERROR: " + t.name() + " ignored SIGTERM for " + Secs(kKillGrace) +
                 ". Sending SIGKILL");
        t.proc->Signal(SIGKILL);
      }
    }
  }

  int Finish() {
    std::vector<TaskOutcome> outcomes;
    for (const auto& t : tasks_) {
      outcomes.push_back({t.plan.id, t.last_exit.value_or(0), t.restarts, t.note});
    }
    std::string summary = FormatFailureSummary(outcomes);
    if (summary.empty()) {
      out_.Say("all " + std::to_string(tasks_.size()) + " tasks exited cleanly");
      return kExitOk;
    }
    const Task* chief = Chief();
    const bool chief_ok = chief != nullptr && chief->last_exit == std::optional<int>(0);
    if (chief_ok) {
      out_.Say(
          "the chief exited 0: the job succeeded (the chief's exit decides; the tasks below "
          "failed along the way and are reported, not counted)");
    }
    std::istringstream lines(summary);
    for (std::string line; std::getline(lines, line);) out_.Say(line);
    return chief_ok ? kExitOk : kExitFailure;
  }

  const LocalCommand& command_;
  const cluster::ClusterSpec& spec_;
  std::optional<std::string> secret_;
  int sigfd_;
  Output out_;
  std::vector<Task> tasks_;  // after out_: their output readers write to it
  int signals_ = 0;
  bool stopping_ = false;
  std::future<Result<proto::Body>> stop_;
  std::optional<Clock::time_point> grace_deadline_;
  std::string
      grace_reason_;  // why the others are stopped without a grace period; empty: the usual grace
  bool grace_fired_ = false;
  std::optional<Clock::time_point> kill_deadline_;
};

// The thread that reads the signalfd. Threads started before main (the OpenBLAS pool,
// now that `pstrain predict` links the scoring code) do not block the signals, and a
// process-directed signal landing on one of them would take the default action: the
// launcher would die and orphan its tasks. On those threads this handler hands the signal
// on to the supervising thread, where it stays pending (blocked) for the signalfd.
// Not atomic: RunLocal writes it once, before sigaction installs the handler, and not
// again until the handler is uninstalled, so a handler never reads it during a write
// (sigaction is a system call: the store is visible to any handler it lets run).
pthread_t g_signal_reader;

extern "C" void ForwardSignalToReader(int sig) {
  const int saved = errno;  // pthread_kill may set it under the interrupted code
  ::pthread_kill(g_signal_reader, sig);
  errno = saved;
}

}  // namespace

int RunLocal(const LocalCommand& given) {
  auto fail = [](const std::string& message) {
    PrintErr("pstrain local: " + message);
    return kExitUsage;
  };
  auto spec = cluster::ReadClusterFile(given.cluster_file);
  if (!spec.ok()) return fail(spec.status().message());
  if (::access(given.job_file.c_str(), R_OK) != 0) {
    return fail("--job: cannot read " + given.job_file + ": " + std::strerror(errno));
  }
  // Without --secret-file the cluster gets a throw-away secret in its run files, removed
  // when pstrain local ends; pstrain stop and status find it there.
  LocalCommand command = given;
  std::optional<LocalSecret> throwaway;
  if (!command.secret_file && spec->count(TaskType::kChief) > 0) {
    auto created = LocalSecret::Create(spec->address({TaskType::kChief, 0}).port);
    if (!created.ok()) {
      PrintErr("pstrain local: " + created.status().message());
      return kExitFailure;
    }
    throwaway.emplace(std::move(*created));
    command.secret_file = throwaway->path();
  }
  auto secret = LoadSecret(command.secret_file);
  if (!secret.ok()) return fail(secret.status().message());

  std::error_code ec;
  std::string self_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
  const char* path_env = std::getenv("PATH");
  std::array<std::string, cluster::kNumTaskTypes> exe;
  for (TaskType type : cluster::kAllTaskTypes) {
    if (spec->count(type) == 0) continue;
    auto p =
        FindDaemon(type, command.bin_dir, self_dir, path_env ? path_env : "", IsExecutableFile);
    if (!p.ok()) return fail(p.status().message());
    exe[static_cast<size_t>(type)] = *p;
  }
  auto plan = PlanLocal(
      command, *spec, [&](TaskType type) { return exe[static_cast<size_t>(type)]; },
      std::getenv("OPENBLAS_NUM_THREADS") != nullptr, JobModelDir(command.job_file));
  if (!plan.ok()) return fail(plan.status().message());

  // Signals are read from a signalfd in the loop; blocked before any thread exists so
  // that every thread inherits the mask. Children get a clean mask from Subprocess.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigset_t old;
  if (::pthread_sigmask(SIG_BLOCK, &set, &old) != 0) {
    PrintErr("pstrain local: cannot block signals");
    return kExitFailure;
  }
  // A closed stdout must not kill the launcher and orphan its tasks.
  ::signal(SIGPIPE, SIG_IGN);
  int sigfd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sigfd < 0) {
    PrintErr(std::string("pstrain local: signalfd: ") + std::strerror(errno));
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return kExitFailure;
  }
  g_signal_reader = ::pthread_self();
  const std::array<int, 3> forwarded{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_actions{};
  for (size_t i = 0; i < forwarded.size(); ++i) {
    struct sigaction sa {};
    sa.sa_handler = ForwardSignalToReader;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(forwarded[i], &sa, &old_actions[i]);
  }
  int rc;
  {
    Supervisor supervisor(command, *spec, std::move(*plan), std::move(*secret), sigfd);
    rc = supervisor.Run();
  }
  ::close(sigfd);
  for (size_t i = 0; i < forwarded.size(); ++i) ::sigaction(forwarded[i], &old_actions[i], nullptr);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return rc;
}

}  // namespace ps::launcher

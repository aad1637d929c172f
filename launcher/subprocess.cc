#include "launcher/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace ps::launcher {

namespace {
int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
}  // namespace

Result<std::unique_ptr<Subprocess>> Subprocess::Spawn(SpawnOptions options) {
  if (options.argv.empty()) return InvalidArgument("spawn: empty command");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));

  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& k : options.env_remove) env.erase(k);
  for (const auto& [k, v] : options.env) env[k] = v;
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : options.argv) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  if (options.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return NotFound("cannot start " + options.argv[0] + ": " + std::strerror(rc));
  }
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->pid_ = pid;
  p->pidfd_ = PidfdOpen(pid);
  p->reader_ = std::thread([fd = fds[0], on_line = std::move(options.on_line)] {
    std::string pending;
    char buf[8192];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (on_line) on_line(pending.substr(start, nl - start));
      }
      pending.erase(0, start);
    }
    if (!pending.empty() && on_line) on_line(pending);
    ::close(fd);
  });
  return p;
}

Subprocess::~Subprocess() {
  if (!exit_status_) {
    Signal(SIGKILL);
    Wait();
  }
  if (reader_.joinable()) reader_.join();
  if (pidfd_ >= 0) ::close(pidfd_);
}

void Subprocess::Signal(int sig) {
  if (!exit_status_ && pid_ > 0) ::kill(pid_, sig);
}

std::optional<int> Subprocess::Reap(bool block) {
  if (exit_status_) return exit_status_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return std::nullopt;
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_status_;
}

int Subprocess::Wait() { return *Reap(true); }

bool Subprocess::Running() { return !Reap(false).has_value(); }

std::optional<int> Subprocess::WaitFor(std::chrono::milliseconds timeout) {
  if (auto s = Reap(false)) return s;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Reap(false);
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    } else {
      // No pidfd (old kernel): poll the child's state every 10 ms.
      ::usleep(10000);
    }
    if (auto s = Reap(false)) return s;
  }
}

}  // namespace ps::launcher

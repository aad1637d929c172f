// Child processes for the launcher (`pstrain local`) and the integration tests:
// spawn with extra environment, deliver the child's output line by line, signal it,
// wait with a timeout. Linux only (pidfd).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "libps/core/status.h"

namespace ps::launcher {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program (path or name on PATH)
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) ours
  std::vector<std::string> env_remove;
  // The child's stdout and stderr go through one pipe to on_line, a line at a time.
  std::function<void(const std::string& line)> on_line;
  // The child gets its own process group (so a terminal's Ctrl-C reaches only the parent).
  bool new_process_group = true;
};

class Subprocess {
 public:
  static Result<std::unique_ptr<Subprocess>> Spawn(SpawnOptions options);
  // Kills the child with SIGKILL if it is still running, and reaps it.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Sends `sig` to the child (not its group). No-op after it has been reaped.
  void Signal(int sig);
  // Exit status as a shell reports it: the exit code, or 128 + signal number.
  int Wait();
  // nullopt if the child is still running after `timeout`.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout);
  bool Running();

 private:
  Subprocess() = default;
  std::optional<int> Reap(bool block);

  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> exit_status_;
  std::thread reader_;
};

}  // namespace ps::launcher

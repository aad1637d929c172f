// Integration-test harness: runs the real pstrain executables on 127.0.0.1.
//
// Environment (set by meson's test()): PSTRAIN_BUILD_DIR (the build tree, where
// daemons/<role>/pstrain-<role> and launcher/pstrain are) and PSTRAIN_SOURCE_DIR (for
// configs/*.json, the files users copy).
//
// Every process a test starts is a Task owned by the test: its destructor kills it
// (SIGKILL) if it is still running. Every line any task prints goes to a transcript
// that is printed to stderr when the current test case fails, so CI logs show why
// (PSTRAIN_INTEG_VERBOSE=1 prints it for passing test cases too).
// Nothing here sleeps to synchronise: waits are on conditions with a deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/subprocess.h"
#include "libps/cluster/tf_config.h"
#include "libps/core/json.h"

namespace ps::integ {

using namespace std::chrono_literals;
using Millis = std::chrono::milliseconds;

std::string BuildDir();
std::string SourceDir();
// build/daemons/<role>/pstrain-<role>
std::string DaemonPath(cluster::TaskType type);
// build/launcher/pstrain
std::string LauncherPath();

// `n` distinct free TCP ports on 127.0.0.1: binds n sockets to port 0, keeps them all
// open until the last is bound, then closes them.
std::vector<uint16_t> FreePorts(int n);

// configs/cluster-local.json (chief, 2 workers, 2 ps) with every port replaced by a
// free one; the shape and hosts are the file's.
cluster::ClusterSpec LocalCluster();

// Reads configs/<name> (e.g. "job-fmnist-mlp.json") as JSON.
Json ReadConfig(const std::string& name);
void WriteFile(const std::filesystem::path& path, const std::string& text);
std::string ReadFile(const std::filesystem::path& path);
// The JSON objects of a JSON Lines file (empty lines skipped).
std::vector<Json> ReadJsonLines(const std::filesystem::path& path);
// A cluster file as `pstrain local` and `pstrain tf-config` read it.
void WriteClusterFile(const cluster::ClusterSpec& spec, const std::filesystem::path& path);

// Writes configs/<config_name> to `path` with "steps", "log_every_steps" and "model_dir"
// replaced, plus the top-level keys of `overrides`; returns the path.
std::filesystem::path DeriveJob(const std::string& config_name, const std::filesystem::path& path,
                                int64_t steps, int64_t log_every_steps,
                                const std::filesystem::path& model_dir,
                                const Json& overrides = Json::object());
// DeriveJob, plus "checkpoint": {"every_steps": every_steps, "every_seconds": 0,
// "max_to_keep": max_to_keep}: checkpoints by steps only, so which ones exist does not
// depend on the machine's speed.
std::filesystem::path DeriveCheckpointJob(const std::string& config_name,
                                          const std::filesystem::path& path, int64_t steps,
                                          int64_t log_every_steps,
                                          const std::filesystem::path& model_dir,
                                          int64_t every_steps, int max_to_keep);
// Inverts every bit of the byte at `offset` (the middle of the file when nullopt);
// returns the offset. Fails the test if the file is empty or cannot be rewritten.
uint64_t FlipByte(const std::filesystem::path& path, std::optional<uint64_t> offset = std::nullopt);

// The steps of the committed checkpoints of `model_dir`, oldest first; CHECKs that each
// passes a full verification (every record's checksum).
std::vector<int64_t> VerifiedCheckpoints(const std::filesystem::path& model_dir);

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A tmpfs mounted at `dir` (created if missing) for the object's lifetime: a model dir
// whose space (`mib` MiB) or inode count (`inodes`, 0: tmpfs' default) a test can use up.
// Without the right to mount (not root), removes `owner` (the test's temporary
// directory) and exits 77 (meson: SKIP) saying why.
class Tmpfs {
 public:
  Tmpfs(const std::filesystem::path& owner, const std::filesystem::path& dir, int mib,
        int64_t inodes = 0);
  ~Tmpfs();  // lazy unmount: a process still holding a file open does not keep it mounted
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;

 private:
  std::filesystem::path dir_;
};

// One running process and its output (stdout and stderr merged, line by line).
class Task {
 public:
  // argv[0] is the executable. `env` is added to the test's environment, the names in
  // `env_remove` are removed from it; OPENBLAS_NUM_THREADS=1 is added unless it is in
  // env_remove. Fails the test (REQUIRE) if it cannot start.
  Task(std::string name, std::vector<std::string> argv,
       std::vector<std::pair<std::string, std::string>> env = {},
       std::vector<std::string> env_remove = {});
  ~Task();  // SIGKILL if still running
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  const std::string& name() const { return name_; }
  // True once a line containing `needle` has been printed (also a line printed before
  // the call); false after `timeout`, or as soon as the process has closed its output
  // (exited) without printing one. Every timeout of a Task is multiplied by
  // PSTRAIN_TEST_TIME_SCALE (default 1; scripts/test-sanitize.sh sets it, as the
  // sanitizers slow the daemons down 2-15 times).
  bool WaitForLine(const std::string& needle, Millis timeout);
  // The first line containing `needle`, if any so far.
  std::optional<std::string> FindLine(const std::string& needle) const;
  bool HasLine(const std::string& needle) const { return FindLine(needle).has_value(); }
  std::vector<std::string> Lines() const;
  // The number of lines printed so far: a mark for WaitForLineFrom.
  size_t LineCount() const;
  // WaitForLine counting only the lines from index `first` on (lines printed after a
  // LineCount() mark).
  bool WaitForLineFrom(const std::string& needle, size_t first, Millis timeout);
  // Exit status as a shell reports it (128 + N for signal N); nullopt if still running
  // after `timeout`. After an exit, every line the process printed is in Lines().
  std::optional<int> WaitExit(Millis timeout);
  bool Running() { return process_->Running(); }
  void Signal(int sig) { process_->Signal(sig); }

 public:
  struct Output {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> lines;
    bool closed = false;  // end of file: every line has been delivered
  };

 private:
  std::string name_;
  std::shared_ptr<Output> out_;
  std::unique_ptr<launcher::Subprocess> process_;
};

// A pstrain daemon of `spec`: TF_CONFIG = ToTfConfigJson(spec, id) in its environment,
// `args` after the executable. Its name is id.ToString().
// `env`: extra environment variables (e.g. a fault-injection hook).
using EnvVars = std::vector<std::pair<std::string, std::string>>;
std::unique_ptr<Task> StartDaemon(const cluster::ClusterSpec& spec, cluster::TaskId id,
                                  std::vector<std::string> args = {},
                                  std::vector<std::string> env_remove = {}, EnvVars env = {});
// The same with an explicit TF_CONFIG text (for clusters that differ on purpose).
std::unique_ptr<Task> StartDaemonWithTfConfig(cluster::TaskType type, const std::string& name,
                                              const std::string& tf_config,
                                              std::vector<std::string> args = {},
                                              std::vector<std::string> env_remove = {},
                                              EnvVars env = {});
// Started tasks by name (TaskId::ToString()). Destroying it kills what still runs.
class Tasks {
 public:
  Task& Add(std::unique_ptr<Task> task);
  Task& operator[](const std::string& name);
  Task& operator[](cluster::TaskId id) { return (*this)[id.ToString()]; }
  // Puts `task` in the place of the (exited) task of the same name: a restarted task.
  Task& Replace(std::unique_ptr<Task> task);
  // Waits for every task to exit, all within one `timeout`; CHECKs that each exited
  // with `expected` (the test goes on, so every task is reported).
  void ExpectAllExit(int expected, Millis timeout);
  // The same for the named tasks only.
  void ExpectExit(const std::vector<cluster::TaskId>& ids, int expected, Millis timeout);

 private:
  std::vector<std::unique_ptr<Task>> tasks_;
};

// Runs `job` to its end on LocalCluster() (2 ps, 2 workers, the chief) and CHECKs that
// every task exits 0 within `timeout`.
void TrainToEnd(const std::filesystem::path& job, Millis timeout);

// `pstrain <args...>`
std::unique_ptr<Task> StartLauncher(std::vector<std::string> args,
                                    const std::string& name = "pstrain");

// The ids of the training tasks of cluster-local.json's shape.
inline const cluster::TaskId kChief{cluster::TaskType::kChief, 0};
inline const cluster::TaskId kWorker0{cluster::TaskType::kWorker, 0};
inline const cluster::TaskId kWorker1{cluster::TaskType::kWorker, 1};
inline const cluster::TaskId kPs0{cluster::TaskType::kPs, 0};
inline const cluster::TaskId kPs1{cluster::TaskType::kPs, 1};

// Adds a line to the transcript printed when the test case fails.
void Note(const std::string& line);

}  // namespace ps::integ

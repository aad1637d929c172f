// `pstrain local`, the pure parts: which daemons to start with which arguments and
// environment (the plan), how their output lines are labelled, whether an exited task
// is restarted, and the summary at the end. No processes, no signals; the supervisor
// (supervisor.h) acts on these. Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/cli.h"
#include "libps/cluster/tf_config.h"
#include "libps/core/status.h"

namespace ps::launcher {

// ---- the plan ----------------------------------------------------------------------

// "pstrain-ps", "pstrain-worker", "pstrain-chief", "pstrain-evaluator".
std::string DaemonName(cluster::TaskType type);

// Where a daemon's executable is, in this order:
//   bin_dir/pstrain-<role> (only there when bin_dir is given);
//   self_dir/pstrain-<role> when self_dir/pstrain-ps exists (an installed layout);
//   self_dir/../daemons/<role>/pstrain-<role> (the meson build tree);
//   the first PATH entry holding it.
// `is_executable(path)` is the file test (injected for tests). NotFound names the
// places searched.
Result<std::string> FindDaemon(cluster::TaskType type, const std::optional<std::string>& bin_dir,
                               const std::string& self_dir, const std::string& path_env,
                               const std::function<bool(const std::string&)>& is_executable);
// The file test the commands pass to FindDaemon: a regular file this process may execute.
bool IsExecutableFile(const std::string& path);
// The same for any daemon by folder name ("serve": pstrain-serve, daemons/serve/).
Result<std::string> FindDaemonNamed(const std::string& folder,
                                    const std::optional<std::string>& bin_dir,
                                    const std::string& self_dir, const std::string& path_env,
                                    const std::function<bool(const std::string&)>& is_executable);

struct TaskPlan {
  cluster::TaskId id;
  std::vector<std::string> argv;                         // argv[0]: the executable
  std::vector<std::pair<std::string, std::string>> env;  // added to the launcher's own
};

// The tasks to start, in start order: ps, workers, chief, evaluator (each by index).
// Every task gets TF_CONFIG = ToTfConfigJson(spec, id) and, unless
// `openblas_threads_set`, OPENBLAS_NUM_THREADS=1. Flags: --job, and --model-dir when
// given, to the chief; --model-dir to the evaluator (--model-dir, else
// `job_model_dir`, the job file's "model_dir"); --secret-file and --log-level to
// everyone (when given); then the extra args. `executable(type)` gives argv[0].
// Errors (usage, exit 2): no chief, no ps or worker, an evaluator without a model dir.
Result<std::vector<TaskPlan>> PlanLocal(
    const LocalCommand& command, const cluster::ClusterSpec& spec,
    const std::function<std::string(cluster::TaskType)>& executable, bool openblas_threads_set,
    const std::string& job_model_dir = "");

// The job file's "model_dir", or "" when it has none or cannot be read (the chief
// reports a bad job file itself).
std::string JobModelDir(const std::string& job_file);

// "[worker:1]"
std::string TaskLabel(cluster::TaskId id);
// The label of the launcher's own lines.
inline constexpr std::string_view kLauncherLabel = "[pstrain]";
// Width of the widest label among the plan's tasks and kLauncherLabel.
size_t LabelWidth(const std::vector<TaskPlan>& plan);
// label padded with spaces to `width`, one space, the line: "[ps:0]     listening".
// A trailing '\r' of the line is dropped.
std::string PrefixLine(std::string_view label, size_t width, std::string_view line);

// ---- restarts and the end ---------------------------------------------------------

struct RestartQuery {
  cluster::TaskId task;
  int exit_status = 0;      // as Subprocess reports it (128+N for a signal)
  int restarts_done = 0;    // restarts of this task so far
  bool stopping = false;    // the operator asked to stop (signal)
  bool chief_gone = false;  // the chief exited and will not be restarted
};
struct RestartDecision {
  bool restart = false;
  std::string reason;  // one line, for the log: "restart 1 of 3" / "not restarted: ..."
};
// kOnFailure restarts a task whose exit status is retryable (daemon::IsRetryableExit: 138,
// or >= 128 such as a signal), up to max_restarts times, unless the launcher is stopping or
// the chief has exited for good (other tasks). 1 (a failure a restart cannot fix), 2 (a
// configuration error) and 126/127 (cannot run) are permanent, as for Kubeflow's ExitCode.
RestartDecision DecideRestart(RestartPolicy policy, int max_restarts, const RestartQuery& query);

// "exit 3", "exit 0", "exit 138 (retryable)", "killed by SIGKILL (137)".
std::string DescribeExit(int exit_status);

struct TaskOutcome {
  cluster::TaskId task;
  int exit_status = 0;
  int restarts = 0;
  std::string note;  // e.g. "still running 30 s after the chief exited"
};
// A task failed when its (last) exit status is non-zero or it carries a note.
bool Failed(const TaskOutcome& outcome);
// Empty when nothing failed; otherwise "N of M tasks failed:\n  worker:1  exit 3 ...\n".
std::string FormatFailureSummary(const std::vector<TaskOutcome>& outcomes);

}  // namespace ps::launcher

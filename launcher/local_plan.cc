#include "launcher/local_plan.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>

#include "libps/core/json.h"
#include "libps/core/text.h"
#include "libps/daemon/daemon.h"

namespace ps::launcher {

using cluster::TaskId;
using cluster::TaskType;

// ---- the plan ----------------------------------------------------------------------

std::string DaemonName(TaskType type) {
  return std::string("pstrain-") + cluster::TaskTypeName(type);
}

bool IsExecutableFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

Result<std::string> FindDaemon(TaskType type, const std::optional<std::string>& bin_dir,
                               const std::string& self_dir, const std::string& path_env,
                               const std::function<bool(const std::string&)>& is_executable) {
  return FindDaemonNamed(cluster::TaskTypeName(type), bin_dir, self_dir, path_env, is_executable);
}

Result<std::string> FindDaemonNamed(const std::string& folder,
                                    const std::optional<std::string>& bin_dir,
                                    const std::string& self_dir, const std::string& path_env,
                                    const std::function<bool(const std::string&)>& is_executable) {
  namespace fs = std::filesystem;
  const std::string name = "pstrain-" + folder;
  if (bin_dir) {
    std::string p = (fs::path(*bin_dir) / name).string();
    if (is_executable(p)) return p;
    return NotFound("--bin-dir: no executable " + p);
  }
  std::vector<std::string> looked;
  if (!self_dir.empty()) {
    if (is_executable((fs::path(self_dir) / "pstrain-ps").string())) {
      std::string p = (fs::path(self_dir) / name).string();
      if (is_executable(p)) return p;
    }
    looked.push_back(self_dir);
    fs::path build = (fs::path(self_dir) / ".." / "daemons" / folder / name).lexically_normal();
    if (is_executable(build.string())) return build.string();
    looked.push_back(build.parent_path().string());
  }
  size_t start = 0;
  for (;;) {
    size_t colon = path_env.find(':', start);
    std::string_view dir = std::string_view(path_env).substr(
        start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    std::string p = (fs::path(dir) / name).string();
    if (!path_env.empty() && is_executable(p)) return p;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  std::string where;
  for (const auto& l : looked) where += l + ", ";
  return NotFound("cannot find " + name + " (looked in " + where +
                  "and PATH); build it (ninja -C build) or pass --bin-dir DIR");
}

Result<std::vector<TaskPlan>> PlanLocal(const LocalCommand& command,
                                        const cluster::ClusterSpec& spec,
                                        const std::function<std::string(TaskType)>& executable,
                                        bool openblas_threads_set,
                                        const std::string& job_model_dir) {
  if (spec.count(TaskType::kChief) != 1) {
    return InvalidArgument(
        command.cluster_file +
        ": the cluster has no chief; pstrain local needs one to coordinate training");
  }
  if (spec.count(TaskType::kPs) == 0) {
    return InvalidArgument(command.cluster_file + ": the cluster has no ps task");
  }
  if (spec.count(TaskType::kWorker) == 0) {
    return InvalidArgument(command.cluster_file + ": the cluster has no worker task");
  }
  const std::string& eval_dir = command.model_dir.empty() ? job_model_dir : command.model_dir;
  if (spec.count(TaskType::kEvaluator) > 0 && eval_dir.empty()) {
    return InvalidArgument(
        "--model-dir DIR is required: the cluster lists an evaluator, which "
        "evaluates the checkpoints in the model dir, and the job file names none");
  }
  std::vector<TaskPlan> plan;
  for (TaskType type : {TaskType::kPs, TaskType::kWorker, TaskType::kChief, TaskType::kEvaluator}) {
    for (int i = 0; i < spec.count(type); ++i) {
      TaskPlan t;
      t.id = TaskId{type, i};
      t.argv.push_back(executable(type));
      if (type == TaskType::kChief) {
        t.argv.insert(t.argv.end(), {"--job", command.job_file});
      }
      if (type == TaskType::kChief && !command.model_dir.empty()) {
        t.argv.insert(t.argv.end(), {"--model-dir", command.model_dir});
      }
      if (type == TaskType::kEvaluator) t.argv.insert(t.argv.end(), {"--model-dir", eval_dir});
      if (command.secret_file) t.argv.insert(t.argv.end(), {"--secret-file", *command.secret_file});
      if (!command.log_level.empty())
        t.argv.insert(t.argv.end(), {"--log-level", command.log_level});
      t.argv.insert(t.argv.end(), command.extra_args.begin(), command.extra_args.end());
      t.env.emplace_back("TF_CONFIG", cluster::ToTfConfigJson(spec, t.id));
      if (!openblas_threads_set) t.env.emplace_back("OPENBLAS_NUM_THREADS", "1");
      plan.push_back(std::move(t));
    }
  }
  return plan;
}

std::string JobModelDir(const std::string& job_file) {
  auto job = ReadJsonFile(job_file);
  if (!job.ok() || !job->is_object()) return "";
  auto it = job->find("model_dir");
  return it != job->end() && it->is_string() ? it->get<std::string>() : "";
}

// append, not "[" + ...: GCC 12 warns falsely under -Wrestrict.
std::string TaskLabel(TaskId id) { return std::string("[").append(id.ToString()).append("]"); }

size_t LabelWidth(const std::vector<TaskPlan>& plan) {
  size_t w = kLauncherLabel.size();
  for (const auto& t : plan) w = std::max(w, TaskLabel(t.id).size());
  return w;
}

std::string PrefixLine(std::string_view label, size_t width, std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string out(label);
  if (out.size() < width) out.append(width - out.size(), ' ');
  out += ' ';
  out += line;
  return out;
}

// ---- restarts and the end ---------------------------------------------------------

RestartDecision DecideRestart(RestartPolicy policy, int max_restarts, const RestartQuery& q) {
  if (q.exit_status == 0) return {false, "exited cleanly"};
  if (policy == RestartPolicy::kNever) return {false, "not restarted (--restart never)"};
  if (q.stopping) return {false, "not restarted: the launcher is stopping"};
  if (q.chief_gone && q.task.type != TaskType::kChief) {
    return {false, "not restarted: the chief has exited"};
  }
  if (!daemon::IsRetryableExit(q.exit_status)) {
    return {
        false,
        "not restarted: " + DescribeExit(q.exit_status) +
            " is permanent (only 138 and >= 128 are retryable, as for Kubeflow's ExitCode policy)"};
  }
  if (q.restarts_done >= max_restarts) {
    return {false, "not restarted: already restarted " + std::to_string(q.restarts_done) +
                       " times (--max-restarts " + std::to_string(max_restarts) + ")"};
  }
  return {true,
          "restart " + std::to_string(q.restarts_done + 1) + " of " + std::to_string(max_restarts)};
}

std::string DescribeExit(int exit_status) {
  // pstrain's retryable code; a task killed by SIGUSR1 (also 138) is rare enough.
  if (exit_status == daemon::kExitRetryable) return "exit 138 (retryable)";
  if (exit_status > 128 && exit_status < 128 + 65) {
    static constexpr std::array<std::pair<int, const char*>, 11> kNames = {{{SIGHUP, "SIGHUP"},
                                                                            {SIGINT, "SIGINT"},
                                                                            {SIGQUIT, "SIGQUIT"},
                                                                            {SIGILL, "SIGILL"},
                                                                            {SIGABRT, "SIGABRT"},
                                                                            {SIGFPE, "SIGFPE"},
                                                                            {SIGKILL, "SIGKILL"},
                                                                            {SIGSEGV, "SIGSEGV"},
                                                                            {SIGPIPE, "SIGPIPE"},
                                                                            {SIGALRM, "SIGALRM"},
                                                                            {SIGTERM, "SIGTERM"}}};
    int sig = exit_status - 128;
    std::string name = "signal " + std::to_string(sig);
    for (const auto& [n, s] : kNames) {
      if (n == sig) name = s;
    }
    return "killed by " + name + " (" + std::to_string(exit_status) + ")";
  }
  return "exit " + std::to_string(exit_status);
}

bool Failed(const TaskOutcome& o) { return o.exit_status != 0 || !o.note.empty(); }

std::string FormatFailureSummary(const std::vector<TaskOutcome>& outcomes) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& o : outcomes) {
    if (!Failed(o)) continue;
    std::string what = DescribeExit(o.exit_status);
    if (o.restarts > 0)
      what += " after " + std::to_string(o.restarts) + (o.restarts == 1 ? " restart" : " restarts");
    if (!o.note.empty()) what += ": " + o.note;
    rows.push_back({"  " + o.task.ToString(), what});
  }
  if (rows.empty()) return "";
  return std::to_string(rows.size()) + " of " + std::to_string(outcomes.size()) +
         " tasks failed:\n" + TableText(rows);
}

}  // namespace ps::launcher

#include "launcher/tf_config.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

#include "launcher/local_plan.h"
#include "libps/cluster/slurm.h"
#include "libps/core/json.h"
#include "libps/daemon/daemon.h"

namespace ps::launcher {

using cluster::TaskId;
using cluster::TaskType;
using daemon::kExitOk;
using daemon::kExitUsage;

namespace {

std::string ShellSingleQuote(std::string_view text) {
  std::string out = "'";
  for (char ch : text) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

Result<cluster::TfConfig> FromSlurm(const cluster::SlurmRoles& roles) {
  PS_ASSIGN_OR_RETURN(cluster::SlurmStep step, cluster::SlurmStepFromEnvironment());
  return cluster::TfConfigFromSlurm(step, roles);
}

}  // namespace

std::string FormatTfConfig(const cluster::ClusterSpec& spec, TaskId id, bool json) {
  std::string tf = cluster::ToTfConfigJson(spec, id);
  const bool listed = spec.has(id);
  if (json) {
    Json line = Json::object();
    line["task"] = id.ToString();
    line["type"] = cluster::TaskTypeName(id.type);
    line["index"] = id.index;
    if (listed) {
      line["host"] = spec.address(id).host;
      line["port"] = spec.address(id).port;
    }
    line["tf_config"] = Json::parse(tf);
    return line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  }
  std::string out = "# " + id.ToString();
  if (listed) out += " (" + spec.address(id).ToString() + ")";
  return out + "\nexport TF_CONFIG=" + ShellSingleQuote(tf) + "\n";
}

std::string FormatTfConfigs(const cluster::ClusterSpec& spec, bool json) {
  std::string out;
  for (const TaskId& id : spec.AllTasks()) {
    if (!out.empty() && !json) out += "\n";
    out += FormatTfConfig(spec, id, json);
  }
  return out;
}

int RunTfConfig(const TfConfigCommand& command) {
  std::string text;
  if (command.slurm) {
    auto config = FromSlurm(*command.slurm);
    if (!config.ok()) {
      PrintErr("pstrain tf-config: " + config.status().message());
      return kExitUsage;
    }
    text = FormatTfConfig(config->cluster, config->task, command.json);
  } else {
    auto spec = cluster::ReadClusterFile(command.cluster_file);
    if (!spec.ok()) {
      PrintErr("pstrain tf-config: " + spec.status().message());
      return kExitUsage;
    }
    text = FormatTfConfigs(*spec, command.json);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

int RunSlurmTask(const SlurmTaskCommand& command) {
  auto config = FromSlurm(command.roles);
  if (!config.ok()) {
    PrintErr("pstrain slurm-task: " + config.status().message());
    return kExitUsage;
  }
  const TaskId task = config->task;
  std::error_code ec;
  const std::string self_dir =
      std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
  const char* path_env = std::getenv("PATH");
  auto exe =
      FindDaemon(task.type, command.bin_dir, self_dir, path_env ? path_env : "", IsExecutableFile);
  if (!exe.ok()) {
    PrintErr("pstrain slurm-task: " + exe.status().message());
    return 127;
  }
  std::vector<std::string> args = {*exe};
  if (task.type == TaskType::kChief) args.insert(args.end(), {"--job", command.job_file});
  if (task.type == TaskType::kChief || task.type == TaskType::kEvaluator) {
    args.insert(args.end(), {"--model-dir", command.model_dir});
  }
  // The step's SIGTERM reaches the evaluator too: it evaluates the stop's final
  // checkpoint, then exits 0 (after 120 s without one, 143: the chief did not finish).
  if (task.type == TaskType::kEvaluator) args.insert(args.end(), {"--stop-grace", "120"});
  // Nothing else ends a step's ps tasks and workers when its chief dies (SIGKILL, OOM):
  // after 5 minutes without it they exit 138 and the batch script runs the step again.
  if (task.type == TaskType::kPs || task.type == TaskType::kWorker) {
    args.insert(args.end(), {"--chief-timeout", "300"});
  }
  args.insert(args.end(), command.extra_args.begin(), command.extra_args.end());

  const std::string tf = cluster::ToTfConfigJson(config->cluster, task);
  ::setenv("TF_CONFIG", tf.c_str(), 1);
  // The chief takes the step's SIGTERM (scancel, a time limit): it stops, writes the final
  // checkpoint and shuts the ps tasks and workers down. Were those to take the signal
  // themselves, the step would end with 143 and the batch script would re-run it as a
  // retryable failure, so they have it blocked.
  const bool shielded = task.type == TaskType::kPs || task.type == TaskType::kWorker;
  PrintErr("pstrain slurm-task: " + task.ToString() +
           (config->cluster.has(task) ? " at " + config->cluster.address(task).ToString()
                                      : std::string()) +
           (shielded ? "; SIGTERM/SIGINT blocked: the chief shuts this task down" : "") +
           "; exec " + *exe);
  if (shielded) {
    // Kept across exec: the daemon's handlers never see the step's SIGTERM.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  PrintErr("pstrain slurm-task: cannot run " + *exe + ": " + std::strerror(errno));
  return 127;
}

}  // namespace ps::launcher

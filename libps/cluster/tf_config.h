// TF_CONFIG, exactly as TensorFlow defines it, and the cluster it describes:
//
//   {"cluster": {"chief": ["h:p"], "worker": [...], "ps": [...], "evaluator": [...]},
//    "task": {"type": "worker", "index": 1},
//    "rpc_layer": "grpc", "environment": "cloud", "session_master": "..."}
//
// Every error is one line naming the field, e.g.
//   "TF_CONFIG.task.index: 3 is out of range (cluster has 2 worker tasks)".
// All functions are pure (except the Load* ones, which read the environment or a file)
// and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::cluster {

// Task types, in the canonical order used for printing and for ClusterId.
enum class TaskType : int { kChief = 0, kWorker = 1, kPs = 2, kEvaluator = 3 };
inline constexpr int kNumTaskTypes = 4;
inline constexpr std::array<TaskType, kNumTaskTypes> kAllTaskTypes = {
    TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator};

// "chief" | "worker" | "ps" | "evaluator".
const char* TaskTypeName(TaskType type);
// Exact, lower case match only ("Worker" and "master" are rejected).
std::optional<TaskType> ParseTaskType(std::string_view name);

struct HostPort {
  std::string host;  // hostname, IPv4 or IPv6 literal (IPv6 without brackets)
  uint16_t port = 0;

  // "host:port"; IPv6 hosts are bracketed: "[::1]:2222".
  std::string ToString() const;
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// Accepts "host:port", "1.2.3.4:port", "[v6]:port". Rejects an empty host, a missing,
// zero, non-numeric or > 65535 port, an unbracketed IPv6 address and characters that
// cannot appear in a host name. The error message does not include a field path, e.g.
// "\"host\" has no port".
Result<HostPort> ParseHostPort(std::string_view text);

struct TaskId {
  TaskType type = TaskType::kWorker;
  int index = 0;

  // "worker:1"
  std::string ToString() const;
  friend bool operator==(const TaskId&, const TaskId&) = default;
};

// Addresses per task type. A type absent from TF_CONFIG has no addresses.
struct ClusterSpec {
  std::array<std::vector<HostPort>, kNumTaskTypes> tasks;

  int count(TaskType type) const { return static_cast<int>(tasks[Index(type)].size()); }
  bool has(TaskId id) const { return id.index >= 0 && id.index < count(id.type); }
  // Precondition: has(id).
  const HostPort& address(TaskId id) const;
  std::vector<HostPort>& of(TaskType type) { return tasks[Index(type)]; }
  const std::vector<HostPort>& of(TaskType type) const { return tasks[Index(type)]; }

  // The training cluster: chief, then workers, then ps, each in index order. The
  // evaluator is never part of it (it is never dialed).
  std::vector<TaskId> TrainingTasks() const;
  // Every task including the evaluator, in canonical type order.
  std::vector<TaskId> AllTasks() const;

  friend bool operator==(const ClusterSpec&, const ClusterSpec&) = default;

 private:
  static size_t Index(TaskType type) { return static_cast<size_t>(type); }
};

struct TfConfig {
  ClusterSpec cluster;
  TaskId task;
  std::string rpc_layer;       // accepted and ignored
  std::string environment;     // accepted and ignored ("cloud" from Kubeflow)
  std::string session_master;  // accepted and ignored
  // Unknown keys, one line each ("TF_CONFIG.job: unknown key, ignored"): the daemon logs them.
  std::vector<std::string> warnings;
};

// Parses TF_CONFIG as TensorFlow reads it (TFConfigClusterResolver) and checks its general
// rules (multi_worker_util._validate_cluster_spec plus what pstrain adds):
//  - "master" (Estimator's and Kubeflow's legacy name of the chief) is read as "chief", in
//    cluster and in task.type; listing both, or two of either, is an error (two chiefs);
//  - task.index is a JSON integer or a string of digits ("1", TF's int()); negative is an error;
//  - an evaluator may be absent from cluster (index 0);
//  - rpc_layer, environment, session_master are accepted and ignored; any other top-level
//    or task key is a warning in TfConfig::warnings, never an error;
//  - only known task types in cluster; at most one chief and one evaluator; every address
//    a valid host:port; no address used twice; task.type in cluster, task.index in range.
// `what` is the root of every error path.
Result<TfConfig> ParseTfConfig(std::string_view json_text, std::string_view what = "TF_CONFIG");
Result<TfConfig> ParseTfConfigJson(const Json& json, const std::string& root = "TF_CONFIG");

// Parses a TF_CONFIG "cluster" object (type -> list of "host:port") and checks the
// cluster-wide rules of ParseTfConfig. `path` names the object in errors.
Result<ClusterSpec> ParseClusterSpec(const Json& cluster, const std::string& path);

// The cluster-wide rules on an already built spec (at most one chief/evaluator, no
// duplicate addresses, no port 0, no empty host). `path` names the cluster in errors.
Status ValidateClusterSpec(const ClusterSpec& spec, const std::string& path);

// The rules of ParseTfConfig on an already built config (e.g. after overrides).
Status ValidateTfConfig(const TfConfig& config, const std::string& path = "TF_CONFIG");

// TensorFlow's ParameterServerStrategy rules on top of ValidateTfConfig: at least one
// ps and one worker. Waived for an evaluator task: the evaluator is not part of the
// training cluster and may run with a cluster listing only itself, as TF's side-car
// evaluator does.
Status ValidateForPsTraining(const TfConfig& config);

// Stable cluster identity, identical on every host and platform: FNV-1a 64
// (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over the bytes of
// ClusterIdCanonical(spec). The evaluator is excluded; order within a type matters.
uint64_t ClusterId(const ClusterSpec& spec);
// "pstrain-cluster-v1\nchief=h:p\nworker=h:p,h:p\nps=h:p\n" — one line per training
// type in the order chief, worker, ps (a line is present even when the type is empty).
std::string ClusterIdCanonical(const ClusterSpec& spec);
uint64_t Fnv1a64(std::string_view bytes);

// Where TF_CONFIG comes from: the file when file_or_null is given, otherwise the
// TF_CONFIG environment variable. Missing variable: InvalidArgument
// "TF_CONFIG is not set (or use --tf-config FILE)". Not thread-safe with respect to
// concurrent setenv (reads the environment).
Result<TfConfig> LoadTfConfig(const std::string* file_or_null);

// Command-line overrides of the task (--task-type, --task-index), applied after
// loading so one TF_CONFIG can be shared by every task on a host.
struct TaskOverrides {
  std::optional<std::string> task_type;  // must name a known type, lower case
  std::optional<int> task_index;
};
// Applies the overrides and re-checks the task against the cluster. Errors name the
// flag: "--task-type: unknown task type \"Worker\" ...",
// "--task-index: 5 is out of range (cluster has 2 worker tasks)".
Status ApplyOverrides(const TaskOverrides& overrides, TfConfig* config);

// Canonical compact TF_CONFIG for one task, ready to paste into an environment:
// {"cluster":{"chief":[..],"worker":[..],"ps":[..],"evaluator":[..]},
//  "task":{"type":"worker","index":1}} (types in that order, empty types omitted).
// ParseTfConfig(ToTfConfigJson(spec, task)) gives back spec and task.
std::string ToTfConfigJson(const ClusterSpec& spec, TaskId task);

// A cluster file (configs/cluster-*.json): the TF_CONFIG "cluster" object, either bare
// {"chief": [...], ...} or wrapped {"cluster": {...}} (then "cluster" is the only key).
// Errors read "<path>: cluster.worker[0]: ...".
Result<ClusterSpec> ReadClusterFile(const std::string& path);
Result<ClusterSpec> ParseClusterFile(std::string_view json_text, const std::string& what);
Result<ClusterSpec> ParseClusterFileJson(const Json& json, const std::string& what);

}  // namespace ps::cluster

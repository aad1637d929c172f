// TF_CONFIG from a Slurm job step, the way TensorFlow's SlurmClusterResolver derives it:
// every task of one `srun` step reads SLURM_PROCID, SLURM_STEP_NUM_TASKS,
// SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE and computes the same cluster.
//
//  - Hosts: the step's node list expanded ("n[1-3],m5" -> n1 n2 n3 m5; "n[01-03]" keeps
//    the zero padding), in Slurm's order.
//  - Addresses: node by node, one per task on the node: host:(base_port + slot), slot
//    0..tasks_on_node-1. With Slurm's default block distribution rank r runs on the node
//    whose slot range holds r, so every task's own address is on its own node.
//  - Roles: by rank, in TensorFlow's order (job names sorted): chief (1), evaluator (0 or 1),
//    ps, worker. Rank 0 is the chief.
// One difference from TF: TF sorts the host names as strings ("n10" before "n9"), which
// would put a task's address on another node; Slurm's own order is kept instead (the
// same whenever the names sort alike, e.g. zero-padded).
// Pure functions except SlurmStepFromEnvironment (reads the environment).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libps/cluster/tf_config.h"
#include "libps/core/status.h"

namespace ps::cluster {

// Slurm host-list syntax: comma-separated parts, each a name with any number of bracket
// groups of comma-separated numbers and ranges ("rack[1-2]-n[01,03]"). A range keeps the
// width of its first bound ("[08-10]" -> 08 09 10). Order is kept, nothing deduplicated.
// Errors ("SLURM_STEP_NODELIST: \"n[3-1]\": range 3-1 is reversed") name `what`.
Result<std::vector<std::string>> ExpandSlurmHostList(std::string_view text, std::string_view what);

// "2(x3),1" -> {2, 2, 2, 1}. Every count >= 1.
Result<std::vector<int>> ExpandSlurmTasksPerNode(std::string_view text, std::string_view what);

struct SlurmStep {
  int procid = 0;              // SLURM_PROCID: this task's rank in the step
  int num_tasks = 0;           // SLURM_STEP_NUM_TASKS
  std::string nodelist;        // SLURM_STEP_NODELIST
  std::string tasks_per_node;  // SLURM_STEP_TASKS_PER_NODE
};

// The four variables; an error names the one that is missing or malformed and says
// "(run this inside an srun step)".
Result<SlurmStep> SlurmStepFromEnvironment();

// The roles asked for (pstrain tf-config --from-slurm --ps N --workers M [--evaluator]).
struct SlurmRoles {
  int ps = 1;
  int workers = 1;
  bool evaluator = false;
  int base_port = 8888;  // TF's default port_base
};

// This task's TF_CONFIG. Errors: counts that do not add up to the step's tasks
// ("--ps 2 --workers 4 and one chief need 7 tasks; the step has 5"), a node list and
// tasks-per-node of different lengths, a rank out of range, ports beyond 65535.
Result<TfConfig> TfConfigFromSlurm(const SlurmStep& step, const SlurmRoles& roles);

}  // namespace ps::cluster

// TF_CONFIG from a Slurm step (libps/cluster/slurm.h): the host-list and tasks-per-node
// expansions, and the cluster every task of a step derives.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "libps/cluster/slurm.h"

namespace ps::cluster {
namespace {

using Hosts = std::vector<std::string>;

Hosts Expand(const std::string& text) {
  auto hosts = ExpandSlurmHostList(text, "SLURM_STEP_NODELIST");
  INFO(text << ": " << (hosts.ok() ? std::string("ok") : hosts.status().message()));
  REQUIRE(hosts.ok());
  return *hosts;
}

std::string HostError(const std::string& text) {
  auto hosts = ExpandSlurmHostList(text, "SLURM_STEP_NODELIST");
  return hosts.ok() ? "" : hosts.status().message();
}

std::string PerNodeError(const std::string& text) {
  auto counts = ExpandSlurmTasksPerNode(text, "SLURM_STEP_TASKS_PER_NODE");
  return counts.ok() ? "" : counts.status().message();
}

TEST_CASE("Slurm host lists expand in order, with ranges, lists and zero padding") {
  CHECK(Expand("n1") == Hosts{"n1"});
  CHECK(Expand("n[1-3],m5") == Hosts{"n1", "n2", "n3", "m5"});
  CHECK(Expand("n[01-03]") == Hosts{"n01", "n02", "n03"});
  CHECK(Expand("n[08-11]") == Hosts{"n08", "n09", "n10", "n11"});
  CHECK(Expand("n[1-2],m5,o[3-4,6,7-9]") ==
        Hosts{"n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"});
  CHECK(Expand("n[9-10]") == Hosts{"n9", "n10"});  // Slurm's order, not sorted as strings
  CHECK(Expand("rack[1-2]-n[01,03]") == Hosts{"rack1-n01", "rack1-n03", "rack2-n01", "rack2-n03"});
  CHECK(Expand("gpu[3]-ib") == Hosts{"gpu3-ib"});
  CHECK(Expand("localhost") == Hosts{"localhost"});
  CHECK(Expand("a.example.org,b.example.org") == Hosts{"a.example.org", "b.example.org"});
}

TEST_CASE("malformed Slurm host lists are one-line errors naming the variable") {
  CHECK(HostError("") == "SLURM_STEP_NODELIST: \"\": empty host list");
  CHECK(HostError("n[3-1]") == "SLURM_STEP_NODELIST: \"n[3-1]\": range 3-1 is reversed");
  CHECK(HostError("n[1-3") == "SLURM_STEP_NODELIST: \"n[1-3\": unclosed '['");
  CHECK(HostError("n1-3]") == "SLURM_STEP_NODELIST: \"n1-3]\": unmatched ']'");
  CHECK(HostError("n[a-b]") ==
        "SLURM_STEP_NODELIST: \"n[a-b]\": \"a-b\" is not a number or a range a-b");
  CHECK(HostError("n[]") == "SLURM_STEP_NODELIST: \"n[]\": \"\" is not a number or a range a-b");
  CHECK(HostError("n1,,n2") == "SLURM_STEP_NODELIST: \"n1,,n2\": empty host name");
  CHECK(HostError("n[1-2000000]").find("more than 100000 hosts") != std::string::npos);
}

TEST_CASE("Slurm tasks per node expand N(xM)") {
  auto counts = [](const std::string& text) {
    auto c = ExpandSlurmTasksPerNode(text, "SLURM_STEP_TASKS_PER_NODE");
    REQUIRE(c.ok());
    return *c;
  };
  CHECK(counts("5") == std::vector<int>{5});
  CHECK(counts("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(counts("3(x2),2,1") == std::vector<int>{3, 3, 2, 1});
  CHECK(counts("1,4(x1)") == std::vector<int>{1, 4});
  CHECK(PerNodeError("2(x)") == "SLURM_STEP_TASKS_PER_NODE: \"2(x)\": \"2(x)\" is not N or N(xM)");
  CHECK(PerNodeError("2(3)") == "SLURM_STEP_TASKS_PER_NODE: \"2(3)\": \"2(3)\" is not N or N(xM)");
  CHECK(PerNodeError("0") ==
        "SLURM_STEP_TASKS_PER_NODE: \"0\": \"0\" is not N or N(xM) with N, M >= 1");
  CHECK(PerNodeError("") ==
        "SLURM_STEP_TASKS_PER_NODE: \"\": \"\" is not N or N(xM) with N, M >= 1");
  CHECK(PerNodeError("2,x") ==
        "SLURM_STEP_TASKS_PER_NODE: \"2,x\": \"x\" is not N or N(xM) with N, M >= 1");
}

TEST_CASE("every rank of a step derives the same cluster; roles in TF's order") {
  // 7 tasks on 3 nodes: 3 + 2 + 2; chief, evaluator, 2 ps, 3 workers.
  SlurmStep step{0, 7, "n[08-09],m1", "3,2(x2)"};
  SlurmRoles roles{2, 3, true, 7000};
  auto first = TfConfigFromSlurm(step, roles);
  REQUIRE(first.ok());
  const ClusterSpec& c = first->cluster;
  CHECK(c.of(TaskType::kChief) == std::vector<HostPort>{{"n08", 7000}});
  CHECK(c.of(TaskType::kEvaluator) == std::vector<HostPort>{{"n08", 7001}});
  CHECK(c.of(TaskType::kPs) == std::vector<HostPort>{{"n08", 7002}, {"n09", 7000}});
  CHECK(c.of(TaskType::kWorker) ==
        std::vector<HostPort>{{"n09", 7001}, {"m1", 7000}, {"m1", 7001}});
  CHECK(first->task == TaskId{TaskType::kChief, 0});

  const std::vector<TaskId> expected = {
      {TaskType::kChief, 0},  {TaskType::kEvaluator, 0}, {TaskType::kPs, 0},    {TaskType::kPs, 1},
      {TaskType::kWorker, 0}, {TaskType::kWorker, 1},    {TaskType::kWorker, 2}};
  for (int rank = 0; rank < 7; ++rank) {
    INFO("rank " << rank);
    step.procid = rank;
    auto config = TfConfigFromSlurm(step, roles);
    REQUIRE(config.ok());
    CHECK(config->cluster == c);
    CHECK(config->task == expected[static_cast<size_t>(rank)]);
    CHECK(ValidateForPsTraining(*config).ok());
    // The printed TF_CONFIG reads back as the same task of the same cluster.
    auto back = ParseTfConfig(ToTfConfigJson(config->cluster, config->task));
    REQUIRE(back.ok());
    CHECK(back->task == config->task);
  }
}

TEST_CASE("a single-node step without an evaluator: 5 tasks, ports base..base+4") {
  auto config = TfConfigFromSlurm({3, 5, "node1", "5"}, {2, 2, false, 8888});
  REQUIRE(config.ok());
  CHECK(config->task == TaskId{TaskType::kWorker, 0});
  CHECK(config->cluster.address({TaskType::kChief, 0}) == HostPort{"node1", 8888});
  CHECK(config->cluster.address({TaskType::kPs, 1}) == HostPort{"node1", 8890});
  CHECK(config->cluster.address({TaskType::kWorker, 1}) == HostPort{"node1", 8892});
  CHECK(config->cluster.count(TaskType::kEvaluator) == 0);
}

TEST_CASE("Slurm steps that do not match the roles are one-line errors") {
  auto error = [](SlurmStep step, SlurmRoles roles) {
    auto config = TfConfigFromSlurm(step, roles);
    return config.ok() ? std::string() : config.status().message();
  };
  CHECK(error({0, 5, "n1", "5"}, {2, 4, false, 8888}) ==
        "--ps 2 --workers 4 and one chief need 7 tasks; the step has 5 (srun -n 7)");
  CHECK(error({0, 5, "n[1-2]", "5"}, {2, 2, false, 8888}) ==
        "SLURM_STEP_TASKS_PER_NODE: 1 node(s), but SLURM_STEP_NODELIST has 2");
  CHECK(error({0, 5, "n[1-2]", "2,2"}, {2, 2, false, 8888}) ==
        "SLURM_STEP_TASKS_PER_NODE: 4 tasks, but SLURM_STEP_NUM_TASKS is 5");
  CHECK(error({5, 5, "n1", "5"}, {2, 2, false, 8888}) ==
        "SLURM_PROCID: 5 is not below SLURM_STEP_NUM_TASKS 5");
  CHECK(error({0, 5, "n1", "5"}, {2, 2, false, 65533}) ==
        "--base-port: 65533 + 5 tasks on n1 passes port 65535");
  CHECK(error({0, 5, "n1", "5"}, {0, 4, false, 8888}) == "--ps: must be >= 1");
  CHECK(error({0, 5, "n1", "5"}, {4, 0, false, 8888}) == "--workers: must be >= 1");
}

TEST_CASE("SlurmStepFromEnvironment reads the four variables") {
  ::setenv("SLURM_PROCID", "2", 1);
  ::setenv("SLURM_STEP_NUM_TASKS", "5", 1);
  ::setenv("SLURM_STEP_NODELIST", "n[1-2]", 1);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "3,2", 1);
  auto step = SlurmStepFromEnvironment();
  REQUIRE(step.ok());
  CHECK(step->procid == 2);
  CHECK(step->num_tasks == 5);
  CHECK(step->nodelist == "n[1-2]");
  CHECK(step->tasks_per_node == "3,2");
  ::setenv("SLURM_PROCID", "x", 1);
  CHECK(SlurmStepFromEnvironment().status().message() == "SLURM_PROCID: \"x\" is not a count");
  ::unsetenv("SLURM_PROCID");
  CHECK(SlurmStepFromEnvironment().status().message() ==
        "SLURM_PROCID is not set (run this inside an srun step)");
  for (const char* v : {"SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"})
    ::unsetenv(v);
}

}  // namespace
}  // namespace ps::cluster

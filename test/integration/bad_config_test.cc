// A bad TF_CONFIG makes every daemon exit 2 with one line on stderr naming the field;
// --help exits 0 for every executable.
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

using cluster::TaskType;

// The arguments each daemon needs besides TF_CONFIG, so that TF_CONFIG is the only
// thing wrong.
std::vector<std::string> RoleArgs(TaskType type, const TempDir& tmp) {
  switch (type) {
    case TaskType::kChief:
      return {"--job", SourceDir() + "/configs/job-fmnist-mlp.json", "--model-dir",
              (tmp / "model").string()};
    case TaskType::kEvaluator:
      return {"--model-dir", (tmp / "model").string()};
    default:
      return {};
  }
}

struct StderrRun {
  int exit_status;
  std::vector<std::string> stderr_lines;
};

// Runs `program args` with stdout discarded, so the captured lines are its stderr.
// `tf_config`: nullopt removes TF_CONFIG from the environment.
StderrRun RunForStderr(const std::string& program, std::vector<std::string> args,
                       const std::optional<std::string>& tf_config) {
  std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$0\" \"$@\" >/dev/null", program};
  for (auto& a : args) argv.push_back(std::move(a));
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> remove;
  if (tf_config)
    env.emplace_back("TF_CONFIG", *tf_config);
  else
    remove.push_back("TF_CONFIG");
  Task task(std::filesystem::path(program).filename().string(), std::move(argv), std::move(env),
            std::move(remove));
  auto status = task.WaitExit(30s);
  REQUIRE(status.has_value());
  return {*status, task.Lines()};
}

const TaskType kDaemons[] = {TaskType::kPs, TaskType::kWorker, TaskType::kChief,
                             TaskType::kEvaluator};

TEST_CASE("every daemon: TF_CONFIG unset -> exit 2, one stderr line naming TF_CONFIG") {
  TempDir tmp;
  for (auto type : kDaemons) {
    INFO(cluster::TaskTypeName(type));
    if (type == TaskType::kEvaluator) {
      // The evaluator is outside the cluster and runs without TF_CONFIG; --once on an
      // empty model dir fails because there is no job file.
      auto args = RoleArgs(type, tmp);
      args.push_back("--once");
      auto run = RunForStderr(DaemonPath(type), args, std::nullopt);
      CHECK(run.exit_status == 1);
      REQUIRE(run.stderr_lines.size() == 1);
      CHECK_THAT(run.stderr_lines[0], Catch::Contains("no job file"));
      continue;
    }
    auto run = RunForStderr(DaemonPath(type), RoleArgs(type, tmp), std::nullopt);
    CHECK(run.exit_status == 2);
    REQUIRE(run.stderr_lines.size() == 1);
    CHECK_THAT(run.stderr_lines[0], Catch::Contains("TF_CONFIG is not set"));
  }
}

TEST_CASE("every daemon: malformed TF_CONFIG -> exit 2, one stderr line naming TF_CONFIG") {
  TempDir tmp;
  for (auto type : kDaemons) {
    INFO(cluster::TaskTypeName(type));
    auto run = RunForStderr(DaemonPath(type), RoleArgs(type, tmp),
                            std::string("{\"cluster\": {\"ps\": [\"127.0.0.1:1\""));
    CHECK(run.exit_status == 2);
    REQUIRE(run.stderr_lines.size() == 1);
    CHECK_THAT(run.stderr_lines[0], Catch::Contains("TF_CONFIG: malformed JSON"));
  }
}

TEST_CASE("every daemon: task.index out of range -> exit 2, one stderr line naming task.index") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto port = FreePorts(1);
  spec.of(TaskType::kEvaluator).push_back({"127.0.0.1", port[0]});
  for (auto type : kDaemons) {
    INFO(cluster::TaskTypeName(type));
    // ToTfConfigJson only writes valid configs: replace the index in its text.
    std::string tf = cluster::ToTfConfigJson(spec, {type, 0});
    const std::string from = "\"index\":0";
    auto at = tf.find(from);
    REQUIRE(at != std::string::npos);
    int count = spec.count(type);
    tf.replace(at, from.size(), "\"index\":" + std::to_string(count));
    auto run = RunForStderr(DaemonPath(type), RoleArgs(type, tmp), tf);
    CHECK(run.exit_status == 2);
    REQUIRE(run.stderr_lines.size() == 1);
    CHECK_THAT(
        run.stderr_lines[0],
        Catch::Contains("TF_CONFIG.task.index: " + std::to_string(count) + " is out of range"));
  }
}

TEST_CASE("--help exits 0 for all five executables") {
  std::vector<std::string> programs{LauncherPath()};
  for (auto type : kDaemons) programs.push_back(DaemonPath(type));
  for (const auto& program : programs) {
    INFO(program);
    Task task(std::filesystem::path(program).filename().string(), {program, "--help"});
    auto status = task.WaitExit(30s);
    REQUIRE(status.has_value());
    CHECK(*status == 0);
    auto lines = task.Lines();
    REQUIRE_FALSE(lines.empty());
    CHECK_THAT(lines[0], Catch::Contains("Usage: pstrain") || Catch::Contains("usage: pstrain"));
  }
}

}  // namespace
}  // namespace ps::integ

// `pstrain local`, the pure parts: the plan (start order, flags and environment per
// role), daemon lookup, output labels, restart decisions and the failure summary.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/local_plan.h"
#include "test/unit/launcher/launcher_support.h"

using namespace ps;
using namespace ps::launcher;
using namespace ps::launcher::testing;
using cluster::TaskId;
using cluster::TaskType;
namespace fs = std::filesystem;

namespace {

std::string Exe(TaskType type) { return "/bin/" + DaemonName(type); }

}  // namespace

// ---- plan ----------------------------------------------------------------------------------

TEST_CASE("plan: start order, TF_CONFIG per task, flags per role") {
  auto spec = Spec(R"({"chief":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3"],)"
                   R"("ps":["127.0.0.1:4","127.0.0.1:5"],"evaluator":["127.0.0.1:6"]})");
  LocalCommand c;
  c.cluster_file = "c.json";
  c.job_file = "job.json";
  c.model_dir = "/tmp/m";
  c.secret_file = "/s";
  c.log_level = "info";
  c.extra_args = {"--connect-timeout", "9"};
  auto plan = PlanLocal(c, spec, Exe, false);
  REQUIRE(plan.ok());
  std::vector<std::string> order;
  for (const auto& t : *plan) order.push_back(t.id.ToString());
  CHECK(order ==
        std::vector<std::string>{"ps:0", "ps:1", "worker:0", "worker:1", "chief:0", "evaluator:0"});

  const std::vector<std::string> common = {"--secret-file",     "/s", "--log-level", "info",
                                           "--connect-timeout", "9"};
  auto with = [&](std::vector<std::string> head) {
    head.insert(head.end(), common.begin(), common.end());
    return head;
  };
  CHECK((*plan)[0].argv == with({"/bin/pstrain-ps"}));
  CHECK((*plan)[3].argv == with({"/bin/pstrain-worker"}));
  CHECK((*plan)[4].argv ==
        with({"/bin/pstrain-chief", "--job", "job.json", "--model-dir", "/tmp/m"}));
  CHECK((*plan)[5].argv == with({"/bin/pstrain-evaluator", "--model-dir", "/tmp/m"}));
  for (const auto& t : *plan) {
    using Env = std::vector<std::pair<std::string, std::string>>;
    CHECK(t.env ==
          Env{{"TF_CONFIG", cluster::ToTfConfigJson(spec, t.id)}, {"OPENBLAS_NUM_THREADS", "1"}});
  }
  CHECK((*plan)[1].env[0].second.find(R"("task":{"type":"ps","index":1})") != std::string::npos);

  // OPENBLAS_NUM_THREADS already set by the operator: left alone.
  auto kept = PlanLocal(c, spec, Exe, true);
  REQUIRE(kept.ok());
  CHECK((*kept)[0].env.size() == 1);
}

TEST_CASE("plan: minimal flags without model dir, secret or log level") {
  LocalCommand c;
  c.cluster_file = "c.json";
  c.job_file = "j";
  auto plan = PlanLocal(c, Spec(kLocal3), Exe, true);
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 4);
  CHECK((*plan)[0].argv == std::vector<std::string>{"/bin/pstrain-ps"});
  CHECK((*plan)[3].argv == std::vector<std::string>{"/bin/pstrain-chief", "--job", "j"});
}

TEST_CASE("plan: clusters pstrain local cannot run") {
  LocalCommand c;
  c.cluster_file = "c.json";
  c.job_file = "j";
  auto err = [&](const std::string& json) {
    auto plan = PlanLocal(c, Spec(json), Exe, true);
    REQUIRE_FALSE(plan.ok());
    return plan.status().message();
  };
  CHECK(err(R"({"worker":["a:1"],"ps":["b:1"]})") ==
        "c.json: the cluster has no chief; pstrain local needs one to coordinate training");
  CHECK(err(R"({"chief":["c:1"],"worker":["a:1"]})") == "c.json: the cluster has no ps task");
  CHECK(err(R"({"chief":["c:1"],"ps":["a:1"]})") == "c.json: the cluster has no worker task");
  CHECK(err(R"({"chief":["c:1"],"worker":["a:1"],"ps":["b:1"],"evaluator":["e:1"]})")
            .rfind("--model-dir DIR is required", 0) == 0);

  // The job file's model_dir serves the evaluator; the chief reads it from the job itself.
  auto from_job =
      PlanLocal(c, Spec(R"({"chief":["c:1"],"worker":["a:1"],"ps":["b:1"],"evaluator":["e:1"]})"),
                Exe, true, "/job/md");
  REQUIRE(from_job.ok());
  CHECK((*from_job)[2].argv == std::vector<std::string>{"/bin/pstrain-chief", "--job", "j"});
  CHECK((*from_job)[3].argv ==
        std::vector<std::string>{"/bin/pstrain-evaluator", "--model-dir", "/job/md"});
}

TEST_CASE("JobModelDir: the job's model_dir, or empty") {
  char tmpl[] = "/tmp/pstrain-job-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  fs::path dir = tmpl;
  std::ofstream(dir / "a.json") << R"({"model_dir": "/data/m", "steps": 5})";
  std::ofstream(dir / "b.json") << R"({"steps": 5})";
  std::ofstream(dir / "c.json") << R"({"model_dir": 7})";
  std::ofstream(dir / "d.json") << R"({"model_dir": )";
  CHECK(JobModelDir((dir / "a.json").string()) == "/data/m");
  CHECK(JobModelDir((dir / "b.json").string()).empty());
  CHECK(JobModelDir((dir / "c.json").string()).empty());
  CHECK(JobModelDir((dir / "d.json").string()).empty());
  CHECK(JobModelDir((dir / "missing.json").string()).empty());
  fs::remove_all(dir);
}

TEST_CASE("daemon lookup: --bin-dir, next to pstrain, build tree, PATH") {
  std::set<std::string> files;
  auto exec = [&](const std::string& p) { return files.count(p) > 0; };
  const std::optional<std::string> none;

  // --bin-dir is authoritative: no fallback.
  files = {"/opt/b/pstrain-worker", "/usr/bin/pstrain-worker"};
  CHECK(*FindDaemon(TaskType::kWorker, std::string("/opt/b"), "/x", "/usr/bin", exec) ==
        "/opt/b/pstrain-worker");
  auto missing = FindDaemon(TaskType::kPs, std::string("/opt/b"), "/x", "/usr/bin", exec);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == "--bin-dir: no executable /opt/b/pstrain-ps");

  // Installed layout: pstrain-ps next to pstrain.
  files = {"/usr/local/bin/pstrain-ps", "/usr/local/bin/pstrain-chief",
           "/b/daemons/chief/pstrain-chief"};
  CHECK(*FindDaemon(TaskType::kChief, none, "/usr/local/bin", "", exec) ==
        "/usr/local/bin/pstrain-chief");

  // Build tree: build/launcher/pstrain -> build/daemons/<role>/pstrain-<role>.
  files = {"/src/build/daemons/evaluator/pstrain-evaluator", "/usr/bin/pstrain-evaluator"};
  CHECK(*FindDaemon(TaskType::kEvaluator, none, "/src/build/launcher", "/usr/bin", exec) ==
        "/src/build/daemons/evaluator/pstrain-evaluator");

  // PATH, in order.
  files = {"/b/pstrain-ps", "/c/pstrain-ps"};
  CHECK(*FindDaemon(TaskType::kPs, none, "/src/build/launcher", "/a:/b:/c", exec) ==
        "/b/pstrain-ps");

  files = {};
  auto nowhere = FindDaemon(TaskType::kPs, none, "/src/build/launcher", "/a", exec);
  REQUIRE_FALSE(nowhere.ok());
  CHECK(nowhere.status().code() == Code::kNotFound);
  CHECK(nowhere.status().message() ==
        "cannot find pstrain-ps (looked in /src/build/launcher, /src/build/daemons/ps, and PATH); "
        "build it (ninja -C build) or pass --bin-dir DIR");
}

// ---- output lines -------------------------------------------------------------------------

TEST_CASE("output: labels padded to the widest, one space, the line") {
  CHECK(TaskLabel({TaskType::kWorker, 1}) == "[worker:1]");
  CHECK(PrefixLine("[ps:0]", 10, "listening") == "[ps:0]     listening");
  CHECK(PrefixLine("[worker:1]", 10, "step 5") == "[worker:1] step 5");
  CHECK(PrefixLine("[ps:0]", 10, "windows\r") == "[ps:0]     windows");
  CHECK(PrefixLine("[ps:0]", 10, "") == "[ps:0]     ");
  CHECK(PrefixLine("[evaluator:0]", 10, "x") == "[evaluator:0] x");

  LocalCommand c;
  c.cluster_file = "c";
  c.job_file = "j";
  auto plan = PlanLocal(c, Spec(kLocal3), Exe, true);
  REQUIRE(plan.ok());
  CHECK(LabelWidth(*plan) == 10);  // "[worker:1]"
  c.model_dir = "m";
  auto with_eval = PlanLocal(
      c, Spec(R"({"chief":["c:1"],"worker":["w:1"],"ps":["p:1"],"evaluator":["e:1"]})"), Exe, true);
  REQUIRE(with_eval.ok());
  CHECK(LabelWidth(*with_eval) == 13);  // "[evaluator:0]"
  CHECK(LabelWidth({}) == kLauncherLabel.size());
}

// ---- restarts and summary -------------------------------------------------------------------

TEST_CASE("restart decisions") {
  const TaskId w{TaskType::kWorker, 1}, chief{TaskType::kChief, 0};
  auto on = [](RestartQuery q, int max = 3) {
    return DecideRestart(RestartPolicy::kOnFailure, max, q);
  };

  CHECK_FALSE(DecideRestart(RestartPolicy::kNever, 3, {w, 138, 0, false, false}).restart);
  CHECK_FALSE(on({w, 0, 0, false, false}).restart);  // clean exit

  auto first = on({w, 138, 0, false, false});
  CHECK(first.restart);
  CHECK(first.reason == "restart 1 of 3");
  CHECK(on({w, 137, 2, false, false}).reason == "restart 3 of 3");  // SIGKILL
  CHECK(on({w, 143, 0, false, false}).restart);                     // SIGTERM
  CHECK(on({w, 139, 0, false, false}).restart);                     // >= 128, as Kubeflow
  auto used_up = on({w, 138, 3, false, false});
  CHECK_FALSE(used_up.restart);
  CHECK(used_up.reason == "not restarted: already restarted 3 times (--max-restarts 3)");
  CHECK_FALSE(on({w, 138, 0, false, false}, 0).restart);

  CHECK_FALSE(on({w, 138, 0, true, false}).restart);  // stopping
  CHECK_FALSE(on({w, 138, 0, false, true}).restart);  // chief gone
  CHECK(on({chief, 138, 0, false, false}).restart);   // a chief that gave up on a ps restarts
  CHECK_FALSE(on({chief, 138, 0, true, false}).restart);
  // Permanent: a failure a restart cannot fix, a configuration error, cannot run.
  auto one = on({w, 1, 0, false, false});
  CHECK_FALSE(one.restart);
  CHECK(
      one.reason ==
      "not restarted: exit 1 is permanent (only 138 and >= 128 are retryable, as for Kubeflow's ExitCode policy)");
  CHECK_FALSE(on({chief, 1, 0, false, false}).restart);
  CHECK_FALSE(on({w, 3, 0, false, false}).restart);
  CHECK_FALSE(on({w, 2, 0, false, false}).restart);
  CHECK_FALSE(on({w, 127, 0, false, false}).restart);
  CHECK_FALSE(on({w, 126, 0, false, false}).restart);
}

TEST_CASE("exit descriptions and the failure summary") {
  CHECK(DescribeExit(0) == "exit 0");
  CHECK(DescribeExit(3) == "exit 3");
  CHECK(DescribeExit(128) == "exit 128");
  CHECK(DescribeExit(137) == "killed by SIGKILL (137)");
  CHECK(DescribeExit(138) == "exit 138 (retryable)");
  CHECK(DescribeExit(143) == "killed by SIGTERM (143)");
  CHECK(DescribeExit(128 + 40) == "killed by signal 40 (168)");

  std::vector<TaskOutcome> ok = {{{TaskType::kPs, 0}, 0, 0, ""}, {{TaskType::kChief, 0}, 0, 1, ""}};
  CHECK(FormatFailureSummary(ok).empty());

  std::vector<TaskOutcome> bad = {
      {{TaskType::kPs, 0},
       143,
       0,
       "still running 30 s after the chief exited (terminated by the launcher)"},
      {{TaskType::kWorker, 0}, 0, 0, ""},
      {{TaskType::kWorker, 1}, 3, 2, ""},
      {{TaskType::kChief, 0}, 0, 0, ""},
  };
  CHECK(
      FormatFailureSummary(bad) ==
      "2 of 4 tasks failed:\n"
      "  ps:0      killed by SIGTERM (143): still running 30 s after the chief exited (terminated by the launcher)\n"
      "  worker:1  exit 3 after 2 restarts\n");
  CHECK(Failed({{TaskType::kPs, 0}, 0, 0, "left running"}));
}

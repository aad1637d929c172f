// `pstrain local` end to end: the real pstrain binary supervising fake daemons (shell
// scripts written to a temp dir): prefixed output, failures, restarts, the shutdown
// grace, Ctrl-C as a Stop to the chief, configuration errors.
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launcher/local_plan.h"
#include "launcher/run_files.h"
#include "launcher/subprocess.h"
#include "test/unit/launcher/launcher_support.h"

using namespace ps;
using namespace ps::launcher;
using namespace ps::launcher::testing;
using cluster::TaskId;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// A fake daemon. The task comes from TF_CONFIG; what it does from FAKE_<type>_<index>:
//   exitN   print, exit N           wait   exit 0 once <dir>/done exists
//   chief   write <dir>/chief.pid; on SIGTERM touch <dir>/done and exit 0
//   forever never exit by itself (a ps the chief forgot)
//   until_<task>_<n>  exit 0 once <task> has been started n times
// Every start appends a line to <dir>/starts_<type>_<index>.
constexpr const char* kFakeDaemon = R"SH(#!/bin/sh
task=$(printf '%s' "$TF_CONFIG" | sed -e 's/.*"task":{"type":"\([a-z]*\)","index":\([0-9]*\)}}$/\1_\2/')
dir=$(dirname "$0")
echo "tf_config $TF_CONFIG"
echo "args $*"
echo "stderr line" >&2
echo start >> "$dir/starts_$task"
eval "mode=\${FAKE_$task:-exit0}"
case "$mode" in
  exit*) exit "${mode#exit}" ;;
  wait) while [ ! -e "$dir/done" ]; do sleep 0.02; done; exit 0 ;;
  chief) trap 'touch "$dir/done"; exit 0' TERM
         echo $$ > "$dir/chief.pid.tmp"; mv "$dir/chief.pid.tmp" "$dir/chief.pid"
         while :; do sleep 0.02; done ;;
  forever) while :; do sleep 0.02; done ;;
  until_*) rest=${mode#until_}; other=${rest%_*}; n=${rest##*_}
           while [ "$(cat "$dir/starts_$other" 2>/dev/null | wc -l)" -lt "$n" ]; do sleep 0.02; done
           exit 0 ;;
esac
)SH";

struct LocalRun {
  fs::path dir;
  std::string cluster;

  explicit LocalRun(const std::string& cluster_json) {
    char tmpl[] = "/tmp/pstrain-launch-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    for (const char* role : {"ps", "worker", "chief", "evaluator"}) {
      fs::path p = dir / (std::string("pstrain-") + role);
      std::ofstream(p) << kFakeDaemon;
      fs::permissions(p, fs::perms::owner_all);
    }
    std::ofstream(dir / "job.json") << "{}";
    std::ofstream(dir / "cluster.json") << cluster_json;
    cluster = (dir / "cluster.json").string();
  }
  ~LocalRun() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  std::unique_ptr<Subprocess> Start(std::vector<std::string> extra,
                                    std::vector<std::pair<std::string, std::string>> env) {
    SpawnOptions o;
    o.argv = {PstrainBinary(), "local",     "--cluster",
              cluster,         "--job",     (dir / "job.json").string(),
              "--bin-dir",     dir.string()};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.env = std::move(env);
    o.env_remove = {"OPENBLAS_NUM_THREADS"};
    o.on_line = [this](const std::string& line) {
      std::lock_guard lock(mu);
      lines.push_back(line);
    };
    auto p = Subprocess::Spawn(std::move(o));
    REQUIRE(p.ok());
    return std::move(*p);
  }

  int Run(std::vector<std::string> extra,
          std::vector<std::pair<std::string, std::string>> env = {}) {
    auto p = Start(std::move(extra), std::move(env));
    auto rc = p->WaitFor(60s);
    REQUIRE(rc.has_value());
    p.reset();  // joins the reader: every line is in
    return *rc;
  }

  std::vector<std::string> Lines() {
    std::lock_guard lock(mu);
    return lines;
  }
  bool Has(const std::string& line) {
    for (const auto& l : Lines()) {
      if (l == line) return true;
    }
    return false;
  }
  bool HasContaining(const std::string& part) {
    for (const auto& l : Lines()) {
      if (l.find(part) != std::string::npos) return true;
    }
    return false;
  }
  int Starts(const std::string& task) {
    std::ifstream in(dir / ("starts_" + task));
    int n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  }
  std::string Dump() {
    std::string all;
    for (const auto& l : Lines()) all += l + "\n";
    return all;
  }

  std::mutex mu;
  std::vector<std::string> lines;
};

const char* kFakeCluster =
    R"({"cluster":{"chief":["127.0.0.1:2222"],"worker":["127.0.0.1:2223","127.0.0.1:2224"],)"
    R"("ps":["127.0.0.1:2225"],"evaluator":["127.0.0.1:2226"]}})";

}  // namespace

TEST_CASE("pstrain local: every task once, own TF_CONFIG, prefixed output, exit 0") {
  LocalRun run(kFakeCluster);
  int rc =
      run.Run({"--model-dir", "/tmp/md", "--log-level", "debug", "--", "--connect-timeout", "5"});
  INFO(run.Dump());
  CHECK(rc == 0);
  auto spec = Spec(kFakeCluster);
  for (const TaskId& id : spec.AllTasks()) {
    std::string label = TaskLabel(id);
    label.resize(13, ' ');  // "[evaluator:0]" is the widest label
    CHECK(run.Has(label + " tf_config " + cluster::ToTfConfigJson(spec, id)));
    CHECK(run.Has(label + " stderr line"));
    CHECK(run.Starts(std::string(cluster::TaskTypeName(id.type)) + "_" +
                     std::to_string(id.index)) == 1);
  }
  // Without --secret-file every task gets the cluster's throw-away secret (run_files.h).
  const std::string secret = " --secret-file " + LocalRunDir(2222) + "/secret";
  CHECK(run.Has("[chief:0]     args --job " + (run.dir / "job.json").string() +
                " --model-dir /tmp/md" + secret + " --log-level debug --connect-timeout 5"));
  CHECK(run.Has("[evaluator:0] args --model-dir /tmp/md" + secret +
                " --log-level debug --connect-timeout 5"));
  CHECK(run.Has("[ps:0]        args" + secret + " --log-level debug --connect-timeout 5"));
  CHECK_FALSE(fs::exists(LocalRunDir(2222)));  // removed when pstrain local ends
  CHECK(run.HasContaining("pstrain stop --chief 127.0.0.1:2222"));
  CHECK(run.Has("[pstrain]     all 5 tasks exited cleanly"));
}

TEST_CASE(
    "pstrain local: a task that failed while the chief exited 0 is reported, not counted: exit 0") {
  LocalRun run(kFakeCluster);
  int rc = run.Run({"--model-dir", "/tmp/md"}, {{"FAKE_worker_1", "exit3"}});
  INFO(run.Dump());
  CHECK(rc == 0);
  CHECK(run.Starts("worker_1") == 1);
  CHECK(run.HasContaining("the chief exited 0: the job succeeded"));
  CHECK(run.Has("[pstrain]     1 of 5 tasks failed:"));
  CHECK(run.Has("[pstrain]       worker:1  exit 3"));
}

TEST_CASE("pstrain local: a failed chief fails the run, every failed task named: exit 1") {
  LocalRun run(kFakeCluster);
  int rc =
      run.Run({"--model-dir", "/tmp/md"}, {{"FAKE_worker_1", "exit3"}, {"FAKE_chief_0", "exit1"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK_FALSE(run.HasContaining("the job succeeded"));
  CHECK(run.Has("[pstrain]     2 of 5 tasks failed:"));
  CHECK(run.Has("[pstrain]       worker:1  exit 3"));
  CHECK(run.Has("[pstrain]       chief:0   exit 1"));
}

TEST_CASE(
    "pstrain local: --restart on-failure restarts retryable exits up to --max-restarts, not 1 or 2") {
  LocalRun run(kFakeCluster);
  int rc = run.Run({"--model-dir", "/tmp/md", "--restart", "on-failure", "--max-restarts", "2"},
                   {{"FAKE_ps_0", "exit138"},
                    {"FAKE_worker_0", "exit2"},
                    {"FAKE_worker_1", "exit1"},
                    {"FAKE_chief_0", "until_ps_0_3"}});
  INFO(run.Dump());
  CHECK(rc == 0);  // the chief exited 0: the others' failures are reported
  CHECK(run.Starts("ps_0") == 3);
  CHECK(run.Starts("worker_0") == 1);  // exit 2: a configuration error is not retried
  CHECK(run.Starts("worker_1") == 1);  // exit 1: a failure a restart cannot fix
  CHECK(run.Has("[pstrain]       ps:0      exit 138 (retryable) after 2 restarts"));
  CHECK(run.Has("[pstrain]       worker:0  exit 2"));
  CHECK(run.Has("[pstrain]       worker:1  exit 1"));
}

TEST_CASE(
    "pstrain local: a chief that failed after every ps and worker exited 0 is not restarted") {
  LocalRun run(kFakeCluster);
  int rc =
      run.Run({"--model-dir", "/tmp/md", "--restart", "on-failure"}, {{"FAKE_chief_0", "exit138"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK(run.Starts("chief_0") == 1);
  CHECK(run.HasContaining(
      "chief:0 not restarted: it shut the cluster down (every ps and worker exited 0)"));
}

TEST_CASE("pstrain local: a ps still running after the chief exited is terminated and reported") {
  LocalRun run(kFakeCluster);
  int rc =
      run.Run({"--model-dir", "/tmp/md", "--shutdown-grace", "0.2"}, {{"FAKE_ps_0", "forever"}});
  INFO(run.Dump());
  CHECK(rc == 0);  // the chief exited 0
  CHECK(run.HasContaining("ERROR: ps:0 is still running 0.2 s after the chief exited"));
  CHECK(run.Has("[pstrain]     1 of 5 tasks failed:"));
  CHECK(run.HasContaining(
      "  ps:0  killed by SIGTERM (143): still running 0.2 s after the chief exited"));
}

TEST_CASE(
    "pstrain local: a chief with a configuration error (exit 2) gets the others stopped at once") {
  LocalRun run(kFakeCluster);
  // The default grace is 30 s; the test's own timeout would end a run that waited for it.
  int rc =
      run.Run({"--model-dir", "/tmp/md"},
              {{"FAKE_ps_0", "forever"}, {"FAKE_worker_0", "forever"}, {"FAKE_chief_0", "exit2"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK(run.HasContaining(
      "ps:0: the chief exited 2 (a usage or configuration error: see its output above). Sending SIGTERM"));
  CHECK(
      run.HasContaining("killed by SIGTERM (143): terminated by the launcher: the chief exited 2"));
  CHECK_FALSE(run.HasContaining("waiting up to"));
}

TEST_CASE("pstrain local: Ctrl-C sends Stop to the chief; a graceful shutdown exits 0") {
  net::Runtime rt(1);
  std::mutex mu;  // pid_file is set here and read on the fake chief's handler thread
  fs::path pid_file;
  // The launcher proves the cluster's secret to the chief it stops.
  const std::string secret = "ctrl-c test secret";
  FakeChief chief(
      rt,
      [&](const proto::Stop&) {
        // What the real chief does on Stop, compressed: the fake chief's SIGTERM trap
        // releases the "wait" tasks and exits 0.
        std::lock_guard lock(mu);
        std::ifstream in(pid_file);
        pid_t pid = 0;
        in >> pid;
        if (pid > 0) ::kill(pid, SIGTERM);
      },
      secret);
  const std::string cluster = R"({"chief":["127.0.0.1:)" + std::to_string(chief.server->port()) +
                              R"("],"worker":["127.0.0.1:2223"],"ps":["127.0.0.1:2225"]})";
  LocalRun run(cluster);
  {
    std::lock_guard lock(mu);
    pid_file = run.dir / "chief.pid";
  }
  {
    std::ofstream out(run.dir / "secret");
    out << secret << "\n";
  }
  fs::permissions(run.dir / "secret", fs::perms::owner_read | fs::perms::owner_write);
  auto launcher =
      run.Start({"--secret-file", (run.dir / "secret").string()},
                {{"FAKE_chief_0", "chief"}, {"FAKE_ps_0", "wait"}, {"FAKE_worker_0", "wait"}});
  for (int i = 0; i < 3000 && !fs::exists(pid_file); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(fs::exists(pid_file));
  launcher->Signal(SIGINT);
  auto rc = launcher->WaitFor(60s);
  REQUIRE(rc.has_value());
  launcher.reset();
  INFO(run.Dump());
  CHECK(*rc == 0);
  CHECK(run.HasContaining("SIGINT: asking the chief to stop"));
  CHECK(run.HasContaining("the chief acknowledged the stop"));
  std::lock_guard lock(chief.mu);
  CHECK(chief.reasons == std::vector<std::string>{"pstrain local: SIGINT"});
}

TEST_CASE("pstrain local: configuration errors exit 2 before starting anything") {
  LocalRun run(kFakeCluster);
  CHECK(run.Run({}) == 2);  // the cluster lists an evaluator, no --model-dir, none in the job
  CHECK(run.HasContaining("--model-dir DIR is required"));
  CHECK(run.Starts("ps_0") == 0);

  LocalRun empty_bin(R"({"chief":["127.0.0.1:1"],"worker":["127.0.0.1:2"],"ps":["127.0.0.1:3"]})");
  fs::remove(empty_bin.dir / "pstrain-ps");
  CHECK(empty_bin.Run({}) == 2);
  CHECK(empty_bin.HasContaining("--bin-dir: no executable " +
                                (empty_bin.dir / "pstrain-ps").string()));

  LocalRun bad_cluster(R"({"chief":["127.0.0.1:1"],"worker":["nope"]})");
  CHECK(bad_cluster.Run({}) == 2);
  CHECK(bad_cluster.HasContaining("pstrain local: "));
}

// A stop (SIGTERM to the chief) in every phase of a real cluster (chief, 2 workers, 2 ps
// on 127.0.0.1): connecting, creating variables, restoring, training, waiting for a lost
// ps, waiting for workers, inline evaluation, checkpointing, final evaluation, shutdown.
// Each phase is reached deterministically: a task that is not up yet, or a ps or worker
// that holds one request unanswered (PSTRAIN_FAULT_HOLD, libps/daemon/fault_hold.h) until
// the test releases it. The chief exits 0 well within the timeouts it would otherwise wait
// out (--connect-timeout, --ps-recovery-timeout: 120 s here); every task it reaches exits
// 0; the model dir gets a final checkpoint exactly where one can be written and something
// was trained since the newest one.
#include <signal.h>

#include <filesystem>
#include <map>

#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

constexpr const char* kProgress = "] step ";
constexpr int64_t kManySteps = 1000000;
// Long enough that a chief that waits them out fails the test's shorter waits.
const std::vector<std::string> kLongWaits = {"--connect-timeout", "120", "--ps-recovery-timeout",
                                             "120"};

// Every file of the committed checkpoints and the pointer, by path relative to `model`.
std::map<std::string, std::string> Checkpoints(const fs::path& model) {
  std::map<std::string, std::string> out;
  if (!fs::exists(model)) return out;
  for (const auto& e : fs::recursive_directory_iterator(model)) {
    const std::string rel = fs::relative(e.path(), model).string();
    if (!e.is_regular_file()) continue;
    if (rel == "checkpoint" || rel.rfind("ckpt-", 0) == 0) out[rel] = ReadFile(e.path());
  }
  return out;
}

bool FinalManifest(const fs::path& model, int64_t step) {
  const auto path = model / ("ckpt-" + std::to_string(step)) / "MANIFEST";
  if (!fs::exists(path)) return false;
  auto m = ParseJson(ReadFile(path), "MANIFEST");
  return m.ok() && (*m)["final"] == true;
}

struct Cluster {
  TempDir tmp;
  cluster::ClusterSpec spec = LocalCluster();
  fs::path model = tmp / "model";
  fs::path release = tmp / "release";  // PSTRAIN_FAULT_RELEASE_FILE
  Tasks tasks;

  fs::path Job(int64_t steps, const Json& overrides = Json::object()) {
    auto job =
        DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", steps, 20, model, 20, 100);
    Json j = *ReadJsonFile(job.string());
    for (const auto& [k, v] : overrides.items()) j[k] = v;
    WriteFile(job, j.dump());
    return job;
  }
  // The fault hook for `id`: hold `what` (until the release file exists).
  static EnvVars Hold(const std::string& what, const fs::path& release = {}) {
    EnvVars env{{"PSTRAIN_FAULT_HOLD", what}};
    if (!release.empty()) env.emplace_back("PSTRAIN_FAULT_RELEASE_FILE", release.string());
    return env;
  }
  Task& Start(cluster::TaskId id, EnvVars env = {}) {
    return tasks.Add(StartDaemon(spec, id, {}, {}, env));
  }
  Task& StartChief(const fs::path& job, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--job", job.string()};
    args.insert(args.end(), kLongWaits.begin(), kLongWaits.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return tasks.Add(StartDaemon(spec, kChief, args));
  }
  void Release() { WriteFile(release, "go"); }
};

TEST_CASE(
    "stop while connecting: a ps not up yet; the chief exits 0 at once, the tasks it reached too") {
  Cluster c;
  auto job = c.Job(kManySteps);
  for (auto id : {kPs0, kWorker0, kWorker1}) c.Start(id);  // ps:1 never starts
  Task& chief = c.StartChief(job, {"--log-level", "debug"});
  for (const char* t :
       {"connected to ps:0 at", "connected to worker:0 at", "connected to worker:1 at"})
    REQUIRE(chief.WaitForLine(t, 60s));
  chief.Signal(SIGTERM);
  CHECK(chief.WaitExit(30s) == std::optional<int>(0));
  c.tasks.ExpectExit({kPs0, kWorker0, kWorker1}, 0, 15s);
  CHECK(chief.HasLine("stop requested (SIGTERM): stopping before training starts"));
  CHECK(chief.HasLine("before training started"));
  CHECK(c.tasks[kPs0].HasLine("shut down (stopped: SIGTERM)"));
  CHECK(Checkpoints(c.model).empty());
}

TEST_CASE("stop while creating the variables: no checkpoint, every task exits 0") {
  Cluster c;
  auto job = c.Job(kManySteps);
  c.Start(kPs0);
  Task& ps1 = c.Start(kPs1, Cluster::Hold("CreateShards"));
  for (auto id : {kWorker0, kWorker1}) c.Start(id);
  Task& chief = c.StartChief(job);
  REQUIRE(ps1.WaitForLine("fault injection: holding CreateShards", 60s));
  chief.Signal(SIGTERM);
  CHECK(chief.WaitExit(30s) == std::optional<int>(0));
  c.tasks.ExpectAllExit(0, 15s);
  CHECK(Checkpoints(c.model).empty());
}

TEST_CASE(
    "stop while restoring: the restore ends, the model dir is unchanged, every task exits 0") {
  Cluster c;
  {
    // A first run leaves checkpoints 0, 20, 40 (final).
    auto job = c.Job(40);
    for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) c.Start(id);
    c.StartChief(job);
    c.tasks.ExpectAllExit(0, 120s);
  }
  const auto before = Checkpoints(c.model);
  REQUIRE(before.count("ckpt-40/MANIFEST") == 1);
  Tasks tasks;
  auto job = c.Job(kManySteps);
  tasks.Add(StartDaemon(c.spec, kPs0));
  Task& ps1 = tasks.Add(StartDaemon(c.spec, kPs1, {}, {}, Cluster::Hold("Restore")));
  for (auto id : {kWorker0, kWorker1}) tasks.Add(StartDaemon(c.spec, id));
  std::vector<std::string> args = {"--job", job.string()};
  args.insert(args.end(), kLongWaits.begin(), kLongWaits.end());
  Task& chief = tasks.Add(StartDaemon(c.spec, kChief, args));
  REQUIRE(ps1.WaitForLine("fault injection: holding Restore", 60s));
  chief.Signal(SIGTERM);
  CHECK(chief.WaitExit(30s) == std::optional<int>(0));
  tasks.ExpectAllExit(0, 15s);
  CHECK(chief.HasLine("the restore ended, the model dir is unchanged"));
  CHECK(Checkpoints(c.model) == before);
}

TEST_CASE(
    "stop while waiting for a lost ps: the wait ends; the newest committed checkpoint stands") {
  Cluster c;
  auto job = c.Job(kManySteps);
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) c.Start(id);
  Task& chief = c.StartChief(job);
  REQUIRE(chief.WaitForLine("checkpoint ckpt-20 committed", 120s));
  c.tasks[kPs1].Signal(SIGKILL);
  REQUIRE(chief.WaitForLine("training paused: waiting up to", 60s));
  chief.Signal(SIGTERM);
  CHECK(chief.WaitExit(30s) == std::optional<int>(0));
  c.tasks.ExpectExit({kPs0, kWorker0, kWorker1}, 0, 15s);
  CHECK(chief.HasLine("while recovering a lost ps"));
  CHECK_FALSE(chief.HasLine("(final) committed"));
  CHECK_FALSE(chief.HasLine("marked final"));
}

TEST_CASE("stop while waiting for workers (none alive): the final checkpoint, exit 0") {
  Cluster c;
  auto job = c.Job(kManySteps);
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) c.Start(id);
  Task& chief = c.StartChief(job, {"--worker-recovery-timeout", "120"});
  REQUIRE(chief.WaitForLine(kProgress, 120s));
  c.tasks[kWorker0].Signal(SIGKILL);
  c.tasks[kWorker1].Signal(SIGKILL);
  REQUIRE(chief.WaitForLine("no live worker: steps wait up to", 60s));
  chief.Signal(SIGTERM);
  CHECK(chief.WaitExit(30s) == std::optional<int>(0));
  c.tasks.ExpectExit({kPs0, kPs1}, 0, 15s);
  CHECK((chief.HasLine("(final) committed") || chief.HasLine("marked final")));
}

TEST_CASE(
    "stop in sync mode with a worker lost: the steps given out are dropped; final checkpoint, exit 0") {
  Cluster c;
  auto job = c.Job(kManySteps, Json{{"update", Json{{"mode", "sync"}}}});
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) c.Start(id);
  Task& chief = c.StartChief(job, {"--worker-recovery-timeout", "120"});
  REQUIRE(chief.WaitForLine(kProgress, 120s));
  // Frozen, not dead: its connection stays open, the heartbeat declares it lost, and the
  // updates it has not pushed keep the other worker's steps waiting.
  c.tasks[kWorker1].Signal(SIGSTOP);
  REQUIRE(chief.WaitForLine("worker:1 lost", 60s));
  chief.Signal(SIGTERM);
  CHECK(chief.WaitExit(30s) == std::optional<int>(0));
  c.tasks.ExpectExit({kPs0, kPs1, kWorker0}, 0, 15s);
  CHECK(chief.HasLine("a synchronous update needs: steps"));
  c.tasks[kWorker1].Signal(SIGKILL);
  CHECK((chief.HasLine("(final) committed") || chief.HasLine("marked final")));
}

TEST_CASE("stop during an inline evaluation: it ends; the final checkpoint follows, exit 0") {
  Cluster c;
  auto job = c.Job(kManySteps, {{"eval_every_steps", 40}});
  for (auto id : {kPs0, kPs1, kWorker1}) c.Start(id);
  Task& w0 = c.Start(kWorker0, Cluster::Hold("EvaluateShard"));
  Task& chief = c.StartChief(job);
  REQUIRE(w0.WaitForLine("fault injection: holding EvaluateShard", 120s));
  chief.Signal(SIGTERM);
  CHECK(chief.WaitExit(60s) == std::optional<int>(0));
  c.tasks.ExpectAllExit(0, 15s);
  CHECK(chief.HasLine("evaluation at step 40 ended by the stop"));
  CHECK(FinalManifest(c.model, 40));
}

TEST_CASE("stop during a periodic save: it commits, then is marked final; exit 0") {
  Cluster c;
  auto job = c.Job(kManySteps);
  for (auto id : {kPs0, kWorker0, kWorker1}) c.Start(id);
  Task& ps1 = c.Start(kPs1, Cluster::Hold("Save nth 2", c.release));  // ckpt-20
  Task& chief = c.StartChief(job);
  REQUIRE(ps1.WaitForLine("fault injection: holding Save", 120s));
  chief.Signal(SIGTERM);
  REQUIRE(chief.WaitForLine("stop requested (SIGTERM)", 30s));
  c.Release();
  CHECK(chief.WaitExit(60s) == std::optional<int>(0));
  c.tasks.ExpectAllExit(0, 15s);
  CHECK(chief.HasLine("checkpoint ckpt-20 committed"));
  CHECK(FinalManifest(c.model, 20));
  CHECK_FALSE(fs::exists(c.model / "ckpt-40"));
}

TEST_CASE("stop during the final evaluation: it ends; the final checkpoint stays, exit 0") {
  Cluster c;
  auto job = c.Job(40);
  for (auto id : {kPs0, kWorker0, kWorker1}) c.Start(id);
  Task& ps1 = c.Start(kPs1, Cluster::Hold("Pull from chief", c.release));
  Task& chief = c.StartChief(job);
  REQUIRE(ps1.WaitForLine("fault injection: holding Pull", 120s));
  chief.Signal(SIGTERM);
  REQUIRE(chief.WaitForLine("stop requested (SIGTERM)", 30s));
  c.Release();
  CHECK(chief.WaitExit(60s) == std::optional<int>(0));
  c.tasks.ExpectAllExit(0, 15s);
  CHECK(chief.HasLine("final evaluation ended by the stop"));
  CHECK(FinalManifest(c.model, 40));
  for (const auto& l : ReadJsonLines(c.model / "train_metrics.jsonl"))
    CHECK_FALSE(l.contains("final_eval"));
}

TEST_CASE("stop during the shutdown changes nothing: exit 0") {
  Cluster c;
  auto job = c.Job(40);
  for (auto id : {kPs0, kWorker0, kWorker1}) c.Start(id);
  Task& ps1 = c.Start(kPs1, Cluster::Hold("Shutdown", c.release));
  Task& chief = c.StartChief(job);
  REQUIRE(ps1.WaitForLine("fault injection: holding Shutdown", 120s));
  chief.Signal(SIGTERM);
  REQUIRE(chief.WaitForLine("already shutting the cluster down", 30s));
  c.Release();
  CHECK(chief.WaitExit(30s) == std::optional<int>(0));
  c.tasks.ExpectAllExit(0, 15s);
  CHECK(FinalManifest(c.model, 40));
}

}  // namespace
}  // namespace ps::integ

// Worker faults on a real cluster (chief, 2 workers, 2 ps on 127.0.0.1, Fashion-MNIST
// MLP from configs/job-fmnist-mlp.json):
//  - a worker killed (SIGKILL) mid-run: the chief re-queues its steps on the other
//    worker; the worker restarted with the same TF_CONFIG rejoins and gets work again;
//  - a lost push reply (PSTRAIN_FAULT_REPEAT_PUSH_EVERY): the ps applies every step once
//    and counts the ignored repeats exactly;
//  - a hung worker (SIGSTOP): the heartbeat timeout declares it lost, its steps move to
//    the other worker; after SIGCONT it rejoins.
// Every case runs the job to its end: the final checkpoint's MANIFEST says global_step ==
// job steps and final, and every process exits 0.
#include <signal.h>

#include <catch2/catch.hpp>

#include "libps/obs/metrics.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

// The chief's progress lines: "... I [chief:0] step 40/1500  loss ...".
constexpr const char* kProgress = "] step ";

// No checkpoint but the first (step 0) and the final one: the chief never drains for a
// save mid-run, so a live worker always has packs in flight.
Json NoMidRunCheckpoints() {
  return Json{{"checkpoint", {{"every_steps", 0}, {"every_seconds", 0}}}};
}

std::vector<std::string> ChiefArgs(const TempDir& tmp, const std::filesystem::path& job) {
  return {"--job", job.string(), "--model-dir", (tmp / "model").string()};
}

void CheckFinalManifest(const std::filesystem::path& model_dir, int64_t steps) {
  auto path = model_dir / ("ckpt-" + std::to_string(steps)) / "MANIFEST";
  INFO(path.string());
  auto manifest = ParseJson(ReadFile(path), path.string());
  REQUIRE(manifest.ok());
  CHECK((*manifest)["final"] == true);
  CHECK((*manifest)["global_step"] == steps);
}

// `pstrain status --json` of the running chief.
Json ChiefStatus(const cluster::ClusterSpec& spec) {
  auto status = StartLauncher({"status", "--chief", spec.address(kChief).ToString(), "--json"},
                              "pstrain status");
  REQUIRE(status->WaitExit(30s) == std::optional<int>(0));
  std::string text;
  for (const auto& l : status->Lines()) text += l + "\n";
  auto json = ParseJson(text, "pstrain status --json");
  INFO(text);
  REQUIRE(json.ok());
  return *json;
}

// The entry of task `name` ("worker:1") in a status reply or a train_metrics.jsonl line.
Json TaskEntry(const Json& tasks, const std::string& name) {
  REQUIRE(tasks.is_array());
  for (const auto& t : tasks) {
    if (t.contains("task") && t["task"] == name) return t;
  }
  FAIL("no entry for " << name << " in " << tasks.dump());
  return Json();
}

// The last progress line of train_metrics.jsonl (it is written at the last step too).
Json LastProgress(const std::filesystem::path& model_dir) {
  Json last;
  for (const auto& m : ReadJsonLines(model_dir / "train_metrics.jsonl")) {
    if (m.contains("step") && m.contains("workers")) last = m;
  }
  REQUIRE(last.is_object());
  return last;
}

// The first line of `task` from index `first` on that contains `needle`; "" if none.
std::string LineFrom(const Task& task, const std::string& needle, size_t first) {
  auto lines = task.Lines();
  for (size_t i = first; i < lines.size(); ++i) {
    if (lines[i].find(needle) != std::string::npos) return lines[i];
  }
  return "";
}

int CountLines(const std::vector<std::string>& lines, const std::string& needle) {
  int n = 0;
  for (const auto& l : lines) n += l.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

// Freezes worker:1 (SIGSTOP) at a moment the chief has a pack in flight on it, so that
// the fault that follows always hits work in progress. A stopped worker completes
// nothing, so once the chief reports it running it stays so.
void FreezeWhileBusy(Tasks& tasks, const cluster::ClusterSpec& spec) {
  tasks[kWorker1].Signal(SIGSTOP);
  for (int attempt = 0; attempt < 20; ++attempt) {
    Json w = TaskEntry(ChiefStatus(spec)["workers"], "worker:1");
    Note("status of worker:1: " + w.dump());
    if (w["state"] == "running") return;
    REQUIRE(w["state"] != "lost");
  }
  FAIL("the chief never had a pack in flight on worker:1");
}

TEST_CASE(
    "SIGKILL of worker:1 mid-run: its steps are re-queued, the restarted worker rejoins; exact steps, all exit 0") {
  constexpr int64_t kSteps = 3000;
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 20, tmp / "model",
                       NoMidRunCheckpoints());
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  // A killed process closes its connections: the chief notices at once, not by heartbeat.
  // The long heartbeat timeout lets the test hold worker:0 (SIGSTOP) below without the
  // chief declaring it lost.
  auto args = ChiefArgs(tmp, job);
  args.insert(args.end(), {"--heartbeat-timeout", "120"});
  Task& chief = tasks.Add(StartDaemon(spec, kChief, args));
  REQUIRE(chief.WaitForLine(kProgress, 120s));
  REQUIRE(tasks[kWorker1].HasLine("job started"));

  FreezeWhileBusy(tasks, spec);
  const size_t before_kill = chief.LineCount();
  tasks[kWorker1].Signal(SIGKILL);
  CHECK(tasks[kWorker1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  const auto old_lines = tasks[kWorker1].Lines();
  REQUIRE(chief.WaitForLineFrom("worker:1 lost", before_kill, 15s));
  REQUIRE(chief.WaitForLineFrom("re-queued", before_kill, 15s));
  CHECK_THAT(LineFrom(chief, "re-queued", before_kill), Catch::Contains("failed on worker:1"));

  // Training goes on with worker:0 alone.
  REQUIRE(chief.WaitForLineFrom(kProgress, chief.LineCount(), 60s));
  // Then worker:0 is held so that the job cannot end before worker:1 is back; worker:1's
  // count stays frozen while it is gone.
  tasks[kWorker0].Signal(SIGSTOP);
  Json dead = TaskEntry(ChiefStatus(spec)["workers"], "worker:1");
  CHECK(dead["state"] == "lost");
  const int64_t steps_before = dead["steps"].get<int64_t>();
  Note("worker:1 had done " + std::to_string(steps_before) + " steps when it was killed");

  const size_t before_restart = chief.LineCount();
  Task& restarted = tasks.Replace(StartDaemon(spec, kWorker1));  // the same TF_CONFIG
  REQUIRE(chief.WaitForLineFrom("worker:1 rejoined", before_restart, 60s));
  REQUIRE(restarted.WaitForLine("job started", 30s));
  tasks[kWorker0].Signal(SIGCONT);
  REQUIRE(chief.WaitForLineFrom(kProgress, chief.LineCount(), 60s));

  REQUIRE(chief.WaitForLine("final evaluation at step " + std::to_string(kSteps), 300s));
  tasks.ExpectAllExit(0, 60s);
  CheckFinalManifest(tmp / "model", kSteps);
  CHECK(CountLines(old_lines, "job started") + CountLines(restarted.Lines(), "job started") == 2);
  // The restarted worker:1 ran steps after it rejoined (while worker:0 was held, the
  // queued steps could only go to it).
  Json last = LastProgress(tmp / "model");
  CHECK(last["step"] == kSteps);
  CHECK(TaskEntry(last["workers"], "worker:1")["steps"].get<int64_t>() > steps_before);
  CHECK(restarted.HasLine("shut down (job finished)"));
  CHECK_FALSE(chief.HasLine("worker:0 lost"));
  // The report's markers: worker:1 lost, then back.
  auto history = obs::ReadMetrics((tmp / "model").string());
  REQUIRE(history.ok());
  std::vector<std::string> kinds;
  for (const auto& e : history->events) {
    if (e.kind != "chief_start") kinds.push_back(e.kind + " " + e.task);
  }
  CHECK(kinds == std::vector<std::string>{"worker_lost worker:1", "worker_back worker:1"});
}

TEST_CASE(
    "every 7th push sent twice (lost reply): each ps ignores exactly the repeats; exact steps, all exit 0") {
  constexpr int64_t kSteps = 600;
  constexpr int64_t kEvery = 7;
  // Also with every push applied while it arrives (the model's pushes are ~0.5 MB per
  // ps, under the 1 MiB default): the marks are set before the first part. And with a
  // model small enough (100 KB a ps) that each push carries the pull of a later step
  // (combine_push_pull): a repeat is sent with its pull, and its pull is answered again.
  const int variant = GENERATE(0, 1, 2);
  const bool early = variant == 1, combined = variant == 2;
  INFO((early      ? "--early-apply-min-kib 1"
        : combined ? "hidden [64]: pushes with pulls"
                   : "default ps flags"));
  TempDir tmp;
  auto spec = LocalCluster();
  Json overrides = NoMidRunCheckpoints();
  if (combined) {
    overrides["model"] =
        Json{{"type", "mlp"}, {"input_dim", 784}, {"hidden", {64}}, {"classes", 10}};
  }
  auto job =
      DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 100, tmp / "model", overrides);
  Tasks tasks;
  for (auto id : {kPs0, kPs1}) {
    tasks.Add(StartDaemon(spec, id,
                          early ? std::vector<std::string>{"--early-apply-min-kib", "1"}
                                : std::vector<std::string>{}));
  }
  for (auto id : {kWorker0, kWorker1}) {
    tasks.Add(StartDaemon(spec, id, {}, {},
                          {{"PSTRAIN_FAULT_REPEAT_PUSH_EVERY", std::to_string(kEvery)}}));
  }
  Task& chief = tasks.Add(StartDaemon(spec, kChief, ChiefArgs(tmp, job)));
  REQUIRE(chief.WaitForLine("final evaluation at step " + std::to_string(kSteps), 300s));
  tasks.ExpectAllExit(0, 60s);
  CheckFinalManifest(tmp / "model", kSteps);

  // Each worker sends one push per step to each ps (nothing failed, so every step ran
  // once): floor(steps / 7) of them twice. A repeated push carries one item per shard of
  // that ps, and every item of it is ignored.
  Json last = LastProgress(tmp / "model");
  REQUIRE(last["step"] == kSteps);
  const int64_t steps0 = TaskEntry(last["workers"], "worker:0")["steps"].get<int64_t>();
  const int64_t steps1 = TaskEntry(last["workers"], "worker:1")["steps"].get<int64_t>();
  CHECK(steps0 + steps1 == kSteps);
  const int64_t repeats = steps0 / kEvery + steps1 / kEvery;
  REQUIRE(repeats > 0);
  auto manifest = ParseJson(
      ReadFile(tmp / "model" / ("ckpt-" + std::to_string(kSteps)) / "MANIFEST"), "MANIFEST");
  REQUIRE(manifest.ok());
  INFO((*manifest).dump());
  REQUIRE((*manifest)["extra"]["variables"].is_array());
  std::map<int, int64_t> shards_on;  // ps index -> shards it holds
  for (const auto& v : (*manifest)["extra"]["variables"]) {
    for (const auto& s : v["shards"]) shards_on[s["ps"].get<int>()] += 1;
  }
  for (auto id : {kPs0, kPs1}) {
    Task& ps = tasks[id];
    INFO(id.ToString() << " holds " << shards_on[id.index] << " shard(s); " << repeats
                       << " repeated pushes");
    REQUIRE(shards_on[id.index] > 0);
    CHECK(CountLines(ps.Lines(), "was already applied to " + std::to_string(shards_on[id.index]) +
                                     " shard(s)") == repeats);
    auto down = ps.FindLine("shut down (job finished)");
    REQUIRE(down.has_value());
    CHECK_THAT(*down, Catch::Contains("ignored " + std::to_string(repeats * shards_on[id.index]) +
                                      " repeated push item(s)"));
    // Every push (and repeat) to this ps, or none, applied while it arrived; with the
    // small model, all but the last two of each pack (and their repeats) carried a pull.
    const int64_t pushes = steps0 + steps1 + repeats;
    CHECK_THAT(*down, Catch::Contains(" applied while they arrived, 0 of them cut off"));
    CHECK_THAT(*down,
               Catch::Contains(std::to_string(early ? pushes : 0) + " applied while they arrived"));
    const std::string with_pull = " with a pull after them";
    const auto at = down->find(with_pull);
    REQUIRE(at != std::string::npos);
    const int64_t push_pulls = std::stoll(down->substr(down->rfind('(', at) + 1));
    if (combined) {
      CHECK(push_pulls >= pushes * 6 / 10);  // 10-step packs: 8 of 10 at least, less the repeats
      CHECK(push_pulls < pushes);
    } else {
      CHECK(push_pulls == 0);
    }
  }
}

TEST_CASE(
    "SIGSTOP of worker:1: lost after the heartbeat timeout, its steps move to worker:0; SIGCONT: it rejoins; all exit 0") {
  // worker:0 alone runs ~10 s of these steps here, against ~1 s for worker:1 to rejoin.
  constexpr int64_t kSteps = 6000;
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 20, tmp / "model",
                       NoMidRunCheckpoints());
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  auto args = ChiefArgs(tmp, job);
  args.insert(args.end(), {"--heartbeat-timeout", "2"});
  Task& chief = tasks.Add(StartDaemon(spec, kChief, args));
  REQUIRE(chief.WaitForLine(kProgress, 120s));

  const size_t before_stop = chief.LineCount();
  tasks[kWorker1].Signal(SIGSTOP);
  REQUIRE(chief.WaitForLineFrom("worker:1 lost", before_stop, 30s));
  CHECK_THAT(LineFrom(chief, "worker:1 lost", before_stop), Catch::Contains("heartbeat timeout"));
  // Its packs in flight go to worker:0 and training goes on without it.
  REQUIRE(chief.WaitForLineFrom("re-queued", before_stop, 15s));
  CHECK_THAT(LineFrom(chief, "re-queued", before_stop), Catch::Contains("failed on worker:1"));
  const size_t after_loss = chief.LineCount();
  REQUIRE(chief.WaitForLineFrom(kProgress, after_loss, 60s));
  Json hung = TaskEntry(ChiefStatus(spec)["workers"], "worker:1");
  CHECK(hung["state"] == "lost");
  const int64_t steps_before = hung["steps"].get<int64_t>();

  const size_t before_cont = chief.LineCount();
  tasks[kWorker1].Signal(SIGCONT);
  REQUIRE(chief.WaitForLineFrom("worker:1 rejoined", before_cont, 60s));
  REQUIRE(chief.WaitForLineFrom(kProgress, chief.LineCount(), 60s));

  REQUIRE(chief.WaitForLine("final evaluation at step " + std::to_string(kSteps), 300s));
  tasks.ExpectAllExit(0, 60s);
  CheckFinalManifest(tmp / "model", kSteps);
  // The same process all along: the job was started once, and it ran steps after rejoining.
  CHECK(CountLines(tasks[kWorker1].Lines(), "job started") == 1);
  Json last = LastProgress(tmp / "model");
  CHECK(last["step"] == kSteps);
  CHECK(TaskEntry(last["workers"], "worker:1")["steps"].get<int64_t>() > steps_before);
}

TEST_CASE(
    "every worker hung: the watchdog names the tasks it waits on; SIGCONT: the job finishes; all exit 0") {
  constexpr int64_t kSteps = 600;
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 20, tmp / "model",
                       NoMidRunCheckpoints());
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  auto args = ChiefArgs(tmp, job);
  // Hung workers are not declared lost here, so the chief keeps waiting on them.
  args.insert(args.end(), {"--heartbeat-timeout", "120", "--watchdog", "1"});
  Task& chief = tasks.Add(StartDaemon(spec, kChief, args));
  REQUIRE(chief.WaitForLine(kProgress, 120s));

  const size_t before = chief.LineCount();
  tasks[kWorker0].Signal(SIGSTOP);
  tasks[kWorker1].Signal(SIGSTOP);
  REQUIRE(chief.WaitForLineFrom("watchdog: no step completed for", before, 30s));
  auto warning = LineFrom(chief, "watchdog: no step completed for", before);
  CHECK_THAT(warning, Catch::Contains("waiting on worker:"));
  CHECK_THAT(warning, Catch::Contains("pack(s)"));

  tasks[kWorker0].Signal(SIGCONT);
  tasks[kWorker1].Signal(SIGCONT);
  REQUIRE(chief.WaitForLine("final evaluation at step " + std::to_string(kSteps), 120s));
  tasks.ExpectAllExit(0, 60s);
  CheckFinalManifest(tmp / "model", kSteps);
}

}  // namespace
}  // namespace ps::integ

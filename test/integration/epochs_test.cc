// Epochs and exactly-once on a real cluster (chief, 2 workers, 2 ps on 127.0.0.1): an
// in-memory LibSVM file whose line i is example i, a logistic regression, "epochs"
// instead of "steps". Each worker writes the table indices of every step it reads to a
// trace file (PSTRAIN_TEST_TRACE_IDS, test-only: docs/design/testing.md). A step read
// twice (a pack retried on another worker) must list the same examples both times; over
// the steps the job ran (the final checkpoint's global step), every example is trained
// exactly `epochs` times:
//  - 1 epoch, 2 workers: the gap of a fixed split per worker (examples missing or
//    trained twice in a nominal epoch) is gone;
//  - 2 epochs, no fault;
//  - 3 epochs, worker:1 killed (SIGKILL) mid-run and restarted.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr int64_t kExamples = 3001;  // not a multiple of the batch: the last batch is short
constexpr int64_t kBatch = 32;
constexpr const char* kProgress = "] step ";

void WriteData(const std::filesystem::path& path) {
  std::string text;
  for (int64_t i = 0; i < kExamples; ++i) {
    text += std::to_string(i % 2) + " " + std::to_string(1 + i % 97) + ":1 " +
            std::to_string(100 + i % 13) + ":0.5\n";
  }
  WriteFile(path, text);
}

// every_steps: checkpoints by steps (0: only the first and the final one).
std::filesystem::path WriteJob(const TempDir& tmp, int64_t epochs, int64_t every_steps) {
  Json job = {
      {"model", {{"type", "logistic_regression"}, {"num_features", 200}, {"num_fields", 1}}},
      {"train_data",
       {{"format", "libsvm"}, {"path", (tmp / "train.libsvm").string()}, {"num_features", 200}}},
      {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}},
      {"batch_size", kBatch},
      {"epochs", epochs},
      {"steps_per_dispatch", 5},
      {"seed", 3},
      {"log_every_steps", 20},
      {"model_dir", (tmp / "model").string()},
      {"checkpoint", {{"every_steps", every_steps}, {"every_seconds", 0}}}};
  WriteFile(tmp / "job.json", job.dump(2));
  return tmp / "job.json";
}

int64_t FinalStep(const std::filesystem::path& model_dir) {
  int64_t best = -1;
  for (const auto& e : std::filesystem::directory_iterator(model_dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || !std::filesystem::exists(e.path() / "MANIFEST")) continue;
    auto manifest = ParseJson(ReadFile(e.path() / "MANIFEST"), name);
    REQUIRE(manifest.ok());
    if ((*manifest)["final"] == true) best = (*manifest)["global_step"].get<int64_t>();
  }
  REQUIRE(best >= 0);
  return best;
}

// Checks the trace against the job's steps: every step of [0, steps) read, each read of
// a step the same examples, every example `epochs` times.
// Returns how many reads were of a step read before.
int64_t CheckTrace(const std::filesystem::path& trace, int64_t steps, int64_t epochs) {
  std::ifstream in(trace);
  REQUIRE(in.good());
  std::map<int64_t, std::vector<int64_t>> by_step;
  std::string line;
  int64_t reads = 0, repeats = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t step = 0, slot = 0, id = 0;
    REQUIRE(static_cast<bool>(fields >> step >> slot));
    CHECK(slot == 0);
    std::vector<int64_t> ids;
    while (fields >> id) ids.push_back(id);
    ++reads;
    auto [it, fresh] = by_step.emplace(step, ids);
    if (!fresh) {
      ++repeats;
      INFO("step " << step << " read again with other examples");
      CHECK(it->second == ids);
    }
  }
  Note("trace: " + std::to_string(reads) + " step reads, " + std::to_string(repeats) +
       " of steps read before");
  std::vector<int> count(kExamples, 0);
  for (int64_t s = 0; s < steps; ++s) {
    auto it = by_step.find(s);
    INFO("step " << s);
    REQUIRE(it != by_step.end());
    for (int64_t id : it->second) {
      REQUIRE(id >= 0);
      REQUIRE(id < kExamples);
      count[static_cast<size_t>(id)] += 1;
    }
  }
  int wrong = 0;
  for (int64_t i = 0; i < kExamples; ++i) {
    if (count[static_cast<size_t>(i)] != epochs) {
      if (++wrong <= 5)
        Note("example " + std::to_string(i) + " trained " + std::to_string(count[i]) + " times");
    }
  }
  CHECK(wrong == 0);
  return repeats;
}

struct Run {
  TempDir tmp;
  cluster::ClusterSpec spec = LocalCluster();
  Tasks tasks;
  Task* chief = nullptr;
  EnvVars worker_env() const { return {{"PSTRAIN_TEST_TRACE_IDS", (tmp / "trace.txt").string()}}; }
  EnvVars slow_worker_env() const {
    auto env = worker_env();
    env.emplace_back("PSTRAIN_FAULT_SLOW_STEP_MS", "30");
    return env;
  }
  void Start(int64_t epochs, bool slow, std::vector<std::string> chief_args = {},
             int64_t every_steps = 0) {
    WriteData(tmp / "train.libsvm");
    auto job = WriteJob(tmp, epochs, every_steps);
    for (auto id : {kPs0, kPs1}) tasks.Add(StartDaemon(spec, id));
    for (auto id : {kWorker0, kWorker1})
      tasks.Add(StartDaemon(spec, id, {}, {}, slow ? slow_worker_env() : worker_env()));
    std::vector<std::string> args = {"--job", job.string(), "--model-dir",
                                     (tmp / "model").string()};
    args.insert(args.end(), chief_args.begin(), chief_args.end());
    chief = &tasks.Add(StartDaemon(spec, kChief, args));
  }
};

int64_t StepsFor(int64_t epochs) { return (epochs * kExamples + kBatch - 1) / kBatch; }

TEST_CASE("1 epoch on 2 workers: every example trained exactly once") {
  Run run;
  run.Start(1, false);
  REQUIRE(run.chief->WaitForLine("3001 examples; 1 epoch(s) of batch 32 are 94 steps", 60s));
  run.tasks.ExpectAllExit(0, 180s);
  CHECK(FinalStep(run.tmp / "model") == StepsFor(1));
  CheckTrace(run.tmp / "trace.txt", StepsFor(1), 1);
  // Both workers trained: the steps went to whichever was free.
  CHECK(run.tasks[kWorker0].HasLine("job started"));
  CHECK(run.tasks[kWorker1].HasLine("job started"));
}

TEST_CASE("2 epochs: every example trained exactly twice; progress lines show the epoch") {
  Run run;
  run.Start(2, false);
  run.tasks.ExpectAllExit(0, 180s);
  CHECK(FinalStep(run.tmp / "model") == StepsFor(2));
  CheckTrace(run.tmp / "trace.txt", StepsFor(2), 2);
  CHECK(run.chief->HasLine("epoch 2.00/2"));
  auto lines = ReadJsonLines(run.tmp / "model" / "train_metrics.jsonl");
  bool epoch_seen = false;
  for (const auto& l : lines) epoch_seen = epoch_seen || l.contains("epoch");
  CHECK(epoch_seen);
}

TEST_CASE(
    "3 epochs, worker:1 killed mid-run and restarted: every example trained exactly 3 times") {
  Run run;
  // A long heartbeat timeout: worker:0 is held (SIGSTOP) below while worker:1 restarts, so
  // that the job cannot end before worker:1 is back.
  run.Start(3, true, {"--heartbeat-timeout", "120"});
  Task& chief = *run.chief;
  REQUIRE(chief.WaitForLine(kProgress, 120s));
  const size_t before_kill = chief.LineCount();
  run.tasks[kWorker1].Signal(SIGKILL);
  CHECK(run.tasks[kWorker1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  REQUIRE(chief.WaitForLineFrom("worker:1 lost", before_kill, 15s));
  run.tasks[kWorker0].Signal(SIGSTOP);
  const size_t before_restart = chief.LineCount();
  Task& restarted =
      run.tasks.Replace(StartDaemon(run.spec, kWorker1, {}, {}, run.slow_worker_env()));
  REQUIRE(chief.WaitForLineFrom("worker:1 rejoined", before_restart, 60s));
  REQUIRE(restarted.WaitForLine("job started", 30s));
  run.tasks[kWorker0].Signal(SIGCONT);
  run.tasks.ExpectAllExit(0, 240s);
  CHECK(FinalStep(run.tmp / "model") == StepsFor(3));
  CheckTrace(run.tmp / "trace.txt", StepsFor(3), 3);
}

TEST_CASE(
    "2 epochs, ps:1 killed and restarted: the restore rolls the data position back; every example trained exactly twice") {
  Run run;
  run.Start(2, true, {}, 60);
  Task& chief = *run.chief;
  REQUIRE(chief.WaitForLine("checkpoint ckpt-60 committed", 120s));
  // A progress line after it (step 60's comes before the commit): steps after the
  // checkpoint have been read.
  const auto lines = chief.Lines();
  size_t from = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("checkpoint ckpt-60 committed") != std::string::npos) from = i + 1;
  }
  REQUIRE(chief.WaitForLineFrom(kProgress, from, 60s));
  Note("killing ps:1 after: " + chief.Lines().back());
  run.tasks[kPs1].Signal(SIGKILL);
  CHECK(run.tasks[kPs1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  REQUIRE(chief.WaitForLine("ps:1 failed", 15s));
  run.tasks.Replace(StartDaemon(run.spec, kPs1));
  auto resumed = chief.WaitForLine("recovered: resuming at step ", 60s);
  REQUIRE(resumed);
  run.tasks.ExpectAllExit(0, 240s);
  CHECK(FinalStep(run.tmp / "model") == StepsFor(2));
  // Steps after the restored checkpoint ran twice, on the same examples both times.
  CHECK(CheckTrace(run.tmp / "trace.txt", StepsFor(2), 2) > 0);
}

}  // namespace
}  // namespace ps::integ

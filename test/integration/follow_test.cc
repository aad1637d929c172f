// Training data that keeps arriving (train_data.follow) on a real cluster (chief, 2
// workers, 2 ps on 127.0.0.1): directories of LibSVM files are dropped in while the job
// runs, each taken when its done marker (_SUCCESS) appears. Example i carries feature id
// i, and each worker writes the ids of every step it trains to a trace file
// (PSTRAIN_TEST_TRACE_IDS, as in the epochs tests). The chief and the workers are killed
// (SIGKILL) mid-run, after a checkpoint and after a directory arrived past it; a new chief
// restores the data position with the parameters, trains again what the checkpoint did
// not hold (taking that directory again), takes what arrives next, and is stopped
// (SIGTERM). Over the history of
// the final model (the first chief's steps before the restored checkpoint, then the
// second chief's steps), every example is trained exactly once.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr int64_t kExamples = 4300;
constexpr const char* kProgress = "] step ";

std::string Lines(int64_t from, int64_t to) {
  std::string out;
  for (int64_t i = from; i < to; ++i) {
    out += std::to_string(i % 2) + " " + std::to_string(i + 1) + ":1 " +
           std::to_string(kExamples + 1 + i % 13) + ":0.5\n";
  }
  return out;
}

// A directory of files (name → examples [from, to)), its marker written last.
void Drop(const std::filesystem::path& dir,
          const std::vector<std::tuple<std::string, int64_t, int64_t>>& files) {
  std::filesystem::create_directories(dir);
  for (const auto& [name, from, to] : files) WriteFile(dir / name, Lines(from, to));
  WriteFile(dir / "_SUCCESS", "");
}

// Reads trace lines into by_step: a "pack <first> <count>" line drops what the steps
// of that pack read before (the pack ran again).
void ReadTrace(const std::string& text, std::map<int64_t, std::vector<int64_t>>* by_step) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (line.rfind("pack ", 0) == 0) {
      std::string word;
      int64_t first = 0, count = 0;
      REQUIRE(static_cast<bool>(fields >> word >> first >> count));
      by_step->erase(by_step->lower_bound(first), by_step->lower_bound(first + count));
      continue;
    }
    int64_t step = 0, slot = 0, id = 0;
    REQUIRE(static_cast<bool>(fields >> step >> slot));
    std::vector<int64_t> ids;
    while (fields >> id) ids.push_back(id);
    (*by_step)[step] = ids;
  }
}

int64_t FinalStep(const std::filesystem::path& model_dir) {
  auto committed = ckpt::ListCheckpoints(model_dir.string());
  REQUIRE(committed.ok());
  REQUIRE(!committed->empty());
  CHECK(committed->back().manifest.final);
  return committed->back().global_step;
}

TEST_CASE(
    "followed files dropped in while the job runs: each trained once, across a chief restart") {
  TempDir tmp;
  auto spec = LocalCluster();
  const auto in = tmp / "in";
  std::filesystem::create_directories(in);
  Json job = {
      {"model",
       {{"type", "logistic_regression"}, {"num_features", kExamples + 20}, {"num_fields", 1}}},
      {"train_data",
       {{"format", "libsvm"},
        {"files", {(in / "*" / "*.libsvm").string()}},
        {"num_features", kExamples + 20},
        {"follow", {{"poll_seconds", 0.2}, {"done_marker", "_SUCCESS"}}}}},
      {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}},
      {"batch_size", 32},
      {"steps_per_dispatch", 5},
      {"seed", 3},
      {"log_every_steps", 17},  // no progress line at a checkpoint's step
      {"model_dir", (tmp / "model").string()},
      {"checkpoint", {{"every_steps", 50}, {"every_seconds", 0}, {"max_to_keep", 100}}}};
  WriteFile(tmp / "job.json", job.dump(2));
  const std::vector<std::string> chief_args = {"--job", (tmp / "job.json").string()};
  // Slow steps (30 ms), so that the kill below lands between two checkpoints.
  const EnvVars worker_env = {{"PSTRAIN_TEST_TRACE_IDS", (tmp / "trace.txt").string()},
                              {"PSTRAIN_FAULT_SLOW_STEP_MS", "30"}};

  Tasks tasks;
  for (auto id : {kPs0, kPs1}) tasks.Add(StartDaemon(spec, id));
  for (auto id : {kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id, {}, {}, worker_env));
  int64_t restored = 0;
  std::string before_kill;
  {
    auto first = StartDaemon(spec, kChief, chief_args);
    // Nothing there yet: a warning, then waiting.
    REQUIRE(first->WaitForLine("no file matches yet; waiting for files to arrive", 60s));
    CHECK(first->HasLine("job.train_data: following "));
    Drop(in / "d1", {{"a.libsvm", 0, 1000}, {"b.libsvm", 1000, 2000}});
    // A directory without its marker is not taken.
    std::filesystem::create_directories(in / "d0");
    WriteFile(in / "d0" / "x.libsvm", Lines(0, 10));
    REQUIRE(first->WaitForLine("checkpoint ckpt-50 committed", 120s));
    // d2 arrives after that checkpoint: the restarted chief must take it again.
    const size_t mark = first->LineCount();
    Drop(in / "d2", {{"c.libsvm", 2000, 3000}, {"d.libsvm", 3000, 4000}});
    REQUIRE(first->WaitForLineFrom("2 new file(s) to train", mark, 60s));
    REQUIRE(first->WaitForLineFrom(kProgress, first->LineCount(), 60s));
    // The chief and the workers die mid-run; the trace then holds every step they read.
    first->Signal(SIGKILL);
    tasks[kWorker0].Signal(SIGKILL);
    tasks[kWorker1].Signal(SIGKILL);
    REQUIRE(first->WaitExit(30s) == std::optional<int>(128 + SIGKILL));
    for (auto id : {kWorker0, kWorker1})
      REQUIRE(tasks[id].WaitExit(30s) == std::optional<int>(128 + SIGKILL));
    before_kill = ReadFile(tmp / "trace.txt");
    auto committed = ckpt::ListCheckpoints((tmp / "model").string());
    REQUIRE(committed.ok());
    REQUIRE(!committed->empty());
    restored = committed->back().global_step;
  }
  std::map<int64_t, std::vector<int64_t>> first_steps;
  ReadTrace(before_kill, &first_steps);
  REQUIRE(!first_steps.empty());
  Note("first chief trained up to step " + std::to_string(first_steps.rbegin()->first) +
       "; the newest checkpoint is at step " + std::to_string(restored));
  // The restart rolls training back: the checkpoint holds only part of what was trained.
  REQUIRE(restored >= 50);
  REQUIRE(restored <= first_steps.rbegin()->first);

  for (auto id : {kWorker0, kWorker1}) tasks.Replace(StartDaemon(spec, id, {}, {}, worker_env));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, chief_args));
  REQUIRE(chief.WaitForLine("resuming at step " + std::to_string(restored), 120s));
  CHECK(chief.HasLine("data position restored: "));
  REQUIRE(chief.WaitForLine("4 file(s) followed are trained, none waiting", 120s));
  Drop(in / "d3", {{"e.libsvm", 4000, kExamples}});
  REQUIRE(chief.WaitForLine("5 file(s) followed are trained, none waiting", 120s));
  auto status = StartLauncher({"status", "--chief", spec.address(kChief).ToString(), "--json"},
                              "pstrain status");
  CHECK(status->WaitExit(30s) == std::optional<int>(0));
  CHECK(status->HasLine("\"files_done\":5"));
  CHECK(status->HasLine("\"files_waiting\":0"));
  CHECK(status->HasLine("\"data_lag_sec\":"));
  chief.Signal(SIGTERM);
  tasks.ExpectAllExit(0, 120s);
  CHECK(chief.HasLine("stop requested (SIGTERM)"));
  CHECK_FALSE(chief.HasLine("watchdog"));

  // The history of the final model: the first chief's steps before the checkpoint it
  // was restored from, then the second chief's.
  const int64_t final_step = FinalStep(tmp / "model");
  const std::string all = ReadFile(tmp / "trace.txt");
  REQUIRE(all.rfind(before_kill, 0) == 0);
  std::map<int64_t, std::vector<int64_t>> second_steps;
  ReadTrace(all.substr(before_kill.size()), &second_steps);
  std::vector<int> count(kExamples, 0);
  for (const auto& [step, ids] : first_steps) {
    if (step >= restored) continue;
    for (int64_t id : ids) count.at(static_cast<size_t>(id)) += 1;
  }
  for (const auto& [step, ids] : second_steps) {
    CHECK(step >= restored);
    if (step >= final_step) continue;
    for (int64_t id : ids) count.at(static_cast<size_t>(id)) += 1;
  }
  int wrong = 0;
  for (int64_t i = 0; i < kExamples; ++i) {
    if (count[static_cast<size_t>(i)] != 1 && ++wrong <= 5)
      Note("example " + std::to_string(i) + " trained " + std::to_string(count[i]) + " times");
  }
  CHECK(wrong == 0);
}

}  // namespace
}  // namespace ps::integ

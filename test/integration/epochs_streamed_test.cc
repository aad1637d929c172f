// Epochs and exactly-once for streamed training data ("files") on a real cluster (chief,
// 2 workers, 2 ps on 127.0.0.1): the chief's shard queue leases byte ranges of big text
// files, whole gzip and TFRecord files to the workers (data/shards.h). Example i carries
// feature id i (its first sparse id), and each worker writes the ids of every step it
// trains to a trace file (PSTRAIN_TEST_TRACE_IDS), with a "pack <first> <count>" line
// before each pack: a pack run again (a retry, or after a ps restore) supersedes what its
// steps read before. Over the steps the job ran (the final checkpoint's global step),
// every example is trained exactly `epochs` times:
//  - LibSVM, 2 epochs, no fault: a plain file cut into several byte ranges, a gzip file
//    (one shard), a CRLF file without a final newline;
//  - the same with worker:1 killed (SIGKILL) mid-run and restarted;
//  - the same with ps:1 killed and restarted (the restore rolls the data position back);
//  - TFRecord files (one a gzip file), 2 epochs.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "libps/data/tf_example.h"
#include "libps/data/tfrecord.h"
#include "test/integration/harness.h"
#include "test/unit/data/test_util.h"

namespace ps::integ {
namespace {

constexpr int64_t kExamples = 3001;
constexpr int64_t kBatch = 32;
constexpr const char* kProgress = "] step ";

std::string Line(int64_t i, const char* eol = "\n") {
  return std::to_string(i % 2) + " " + std::to_string(i + 1) + ":1 " +
         std::to_string(kExamples + 1 + i % 13) + ":0.5" + eol;
}

// a.libsvm: examples 0..1999 (about 35 KB: 9 byte ranges of shard_bytes 4096); b.libsvm.gz: 2000..2599
// (one shard); c.libsvm: 2600..3000 with CRLF line ends and no newline after the last
// (about 7.6 KB: 2 byte ranges).
void WriteLibSvm(const std::filesystem::path& dir) {
  std::string a, b, c;
  for (int64_t i = 0; i < 2000; ++i) a += Line(i);
  for (int64_t i = 2000; i < 2600; ++i) b += Line(i);
  for (int64_t i = 2600; i < kExamples; ++i) c += Line(i, "\r\n");
  c.resize(c.size() - 2);
  WriteFile(dir / "a.libsvm", a);
  WriteFile(dir / "b.libsvm.gz", data::testing::Gzip(b));
  WriteFile(dir / "c.libsvm", c);
}

// Three TFRecord files of tf.Examples {"label", "id"}; the last one gzipped.
void WriteTfRecords(const std::filesystem::path& dir) {
  for (int64_t f = 0; f < 3; ++f) {
    std::string out;
    for (int64_t i = f * 1000; i < (f == 2 ? kExamples : (f + 1) * 1000); ++i) {
      data::TfExampleBuilder b;
      const int64_t label = i % 2;
      b.AddInt64("label", std::span(&label, 1));
      b.AddInt64("id", std::span(&i, 1));
      std::string record;
      b.AppendTo(&record);
      data::AppendTfRecord(record, &out);
    }
    WriteFile(dir / std::string("p").append(std::to_string(f)).append(".tfrecord"),
              f == 2 ? data::testing::Gzip(out) : out);
  }
}

std::filesystem::path WriteJob(const TempDir& tmp, bool tfrecord, int64_t every_steps) {
  Json train =
      tfrecord
          ? Json{{"format", "tfrecord"},
                 {"files", {(tmp / "*.tfrecord").string()}},
                 {"label", "label"},
                 {"sparse", {{{"feature", "id"}, {"type", "int64"}, {"vocab", kExamples + 20}}}}}
          : Json{{"format", "libsvm"},
                 {"files", {(tmp / "*.libsvm*").string()}},
                 {"num_features", kExamples + 20},
                 {"shard_bytes", 4096}};
  Json job = {
      {"model",
       {{"type", "logistic_regression"}, {"num_features", kExamples + 20}, {"num_fields", 1}}},
      {"train_data", train},
      {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}},
      {"batch_size", kBatch},
      {"epochs", 2},
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
    if ((*manifest)["final"] == true) {
      best = (*manifest)["global_step"].get<int64_t>();
      CHECK((*manifest)["extra"].contains("data_position"));
    }
  }
  REQUIRE(best >= 0);
  return best;
}

// Every example `epochs` times over the steps below `steps` (the last read of a step
// counts; a "pack" line drops the earlier reads of its steps). Returns the packs read
// more than once.
int64_t CheckTrace(const std::filesystem::path& trace, int64_t steps, int64_t epochs) {
  std::ifstream in(trace);
  REQUIRE(in.good());
  std::map<int64_t, std::vector<int64_t>> by_step;
  std::map<int64_t, int> packs;
  std::string line;
  int64_t repeats = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (line.rfind("pack ", 0) == 0) {
      std::string word;
      int64_t first = 0, count = 0;
      REQUIRE(static_cast<bool>(fields >> word >> first >> count));
      if (++packs[first] > 1) ++repeats;
      by_step.erase(by_step.lower_bound(first), by_step.lower_bound(first + count));
      continue;
    }
    int64_t step = 0, slot = 0, id = 0;
    REQUIRE(static_cast<bool>(fields >> step >> slot));
    std::vector<int64_t> ids;
    while (fields >> id) ids.push_back(id);
    CHECK(!ids.empty());
    by_step[step] = ids;
  }
  std::vector<int> count(kExamples, 0);
  int64_t trained_steps = 0;
  for (const auto& [step, ids] : by_step) {
    if (step >= steps) continue;
    ++trained_steps;
    for (int64_t id : ids) {
      REQUIRE(id >= 0);
      REQUIRE(id < kExamples);
      count[static_cast<size_t>(id)] += 1;
    }
  }
  Note("trace: " + std::to_string(trained_steps) + " steps trained of " + std::to_string(steps) +
       ", " + std::to_string(repeats) + " pack(s) run again");
  int wrong = 0;
  for (int64_t i = 0; i < kExamples; ++i) {
    if (count[static_cast<size_t>(i)] != epochs && ++wrong <= 5)
      Note("example " + std::to_string(i) + " trained " + std::to_string(count[i]) + " times");
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
  void Start(bool tfrecord, bool slow, std::vector<std::string> chief_args = {},
             int64_t every_steps = 0) {
    if (tfrecord) {
      WriteTfRecords(tmp.path());
    } else {
      WriteLibSvm(tmp.path());
    }
    auto job = WriteJob(tmp, tfrecord, every_steps);
    for (auto id : {kPs0, kPs1}) tasks.Add(StartDaemon(spec, id));
    for (auto id : {kWorker0, kWorker1})
      tasks.Add(StartDaemon(spec, id, {}, {}, slow ? slow_worker_env() : worker_env()));
    std::vector<std::string> args = {"--job", job.string(), "--model-dir",
                                     (tmp / "model").string()};
    args.insert(args.end(), chief_args.begin(), chief_args.end());
    chief = &tasks.Add(StartDaemon(spec, kChief, args));
  }
};

TEST_CASE("streamed LibSVM, 2 epochs: byte ranges, gzip and CRLF files, every example twice") {
  Run run;
  run.Start(false, false);
  REQUIRE(run.chief->WaitForLine("file(s) in ", 60s));
  run.tasks.ExpectAllExit(0, 180s);
  CHECK(run.chief->HasLine("3 file(s) in 12 shard(s)"));
  CHECK(run.chief->HasLine("the training data is all given out"));
  CHECK(run.chief->HasLine("epoch 2.00/2"));
  CheckTrace(run.tmp / "trace.txt", FinalStep(run.tmp / "model"), 2);
  CHECK(run.tasks[kWorker0].HasLine("job started"));
  CHECK(run.tasks[kWorker1].HasLine("job started"));
}

TEST_CASE("streamed TFRecord, 2 epochs: every example twice") {
  Run run;
  run.Start(true, false);
  run.tasks.ExpectAllExit(0, 180s);
  CHECK(run.chief->HasLine("3 file(s) in 3 shard(s)"));
  CheckTrace(run.tmp / "trace.txt", FinalStep(run.tmp / "model"), 2);
}

TEST_CASE("streamed LibSVM, 2 epochs, worker:1 killed mid-run and restarted: every example twice") {
  Run run;
  run.Start(false, true, {"--heartbeat-timeout", "120"});
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
  CheckTrace(run.tmp / "trace.txt", FinalStep(run.tmp / "model"), 2);
}

TEST_CASE(
    "streamed LibSVM, 2 epochs, ps:1 killed and restarted: the restore rolls the data position back") {
  Run run;
  run.Start(false, true, {}, 60);
  Task& chief = *run.chief;
  REQUIRE(chief.WaitForLine("checkpoint ckpt-60 committed", 120s));
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
  REQUIRE(chief.WaitForLine("recovered: resuming at step ", 60s));
  run.tasks.ExpectAllExit(0, 240s);
  CHECK(chief.HasLine("data position restored"));
  // Packs after the restored checkpoint ran again (on the records the queue gave out again).
  CHECK(CheckTrace(run.tmp / "trace.txt", FinalStep(run.tmp / "model"), 2) > 0);
}

}  // namespace
}  // namespace ps::integ

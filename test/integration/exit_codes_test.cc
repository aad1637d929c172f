// The exit-code rule (docs/reference/exit-codes.md), one case per cause, through the real
// executables: 2 for what the user gave (flags, TF_CONFIG, the job file, the data files it
// names), 1 for a permanent failure at run time, 138 for what only a restart cures, 0 for
// a worker stopped by SIGTERM, 143 for a ps stopped by SIGTERM while it holds live shards.
// Also: --check-config finds the configuration errors it can without the cluster, sizes
// included; the evaluator runs without a TF_CONFIG naming a task and its --check-config
// says so; one bad 10 MB token does not flood the logs.
#include <signal.h>

#include <algorithm>

#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;
using cluster::TaskType;

const std::string kLabels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

// `n` LibSVM lines of a 2-class problem over 100 features.
std::string LibSvmLines(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    text += std::to_string(i % 2) + " " + std::to_string(1 + i % 7) + ":1 " +
            std::to_string(10 + i % 13) + ":0.5\n";
  }
  return text;
}

Json LibSvmData(const fs::path& path) {
  return Json{{"format", "libsvm"}, {"path", path.string()}, {"num_features", 100}, {"classes", 2}};
}

// configs/job-ctr-lr.json on `data` (train and eval) with a 100-feature model.
fs::path LrJob(const TempDir& tmp, const Json& data, int64_t steps, const Json& extra = {}) {
  Json overrides{
      {"model", {{"type", "logistic_regression"}, {"num_features", 100}, {"num_fields", 1}}},
      {"train_data", data},
      {"eval_data", data},
      {"batch_size", 16},
      {"base_dir", tmp.path().string()}};
  for (auto& [k, v] : extra.items()) overrides[k] = v;
  return DeriveJob("job-ctr-lr.json", tmp / "job.json", steps, 10, tmp / "model", overrides);
}

// Every training task of `spec` on `job`; the chief last, with `chief_args` added.
void StartCluster(Tasks& tasks, const cluster::ClusterSpec& spec, const fs::path& job,
                  const fs::path& model_dir, std::vector<std::string> chief_args = {}) {
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  std::vector<std::string> args{"--job", job.string(), "--model-dir", model_dir.string()};
  args.insert(args.end(), chief_args.begin(), chief_args.end());
  tasks.Add(StartDaemon(spec, kChief, args));
}

struct Run {
  int exit_status;
  std::vector<std::string> lines;
  bool Has(const std::string& needle) const {
    for (const auto& l : lines)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
};

// One daemon run to its end with `tf_config` (nullopt: TF_CONFIG removed).
Run RunDaemon(TaskType type, std::vector<std::string> args,
              const std::optional<std::string>& tf_config) {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> remove;
  if (tf_config)
    env.emplace_back("TF_CONFIG", *tf_config);
  else
    remove.push_back("TF_CONFIG");
  args.insert(args.begin(), DaemonPath(type));
  Task task(cluster::TaskTypeName(type), std::move(args), std::move(env), std::move(remove));
  auto status = task.WaitExit(60s);
  REQUIRE(status.has_value());
  return {*status, task.Lines()};
}

std::string TfConfigOf(const cluster::ClusterSpec& spec, cluster::TaskId id) {
  return cluster::ToTfConfigJson(spec, id);
}

TEST_CASE("exit 2: flags, TF_CONFIG and the files they name") {
  TempDir tmp;
  auto spec = LocalCluster();
  SECTION("an unknown flag, for every daemon") {
    for (auto type : {TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator}) {
      INFO(cluster::TaskTypeName(type));
      CHECK(RunDaemon(type, {"--no-such-flag"}, TfConfigOf(spec, kPs0)).exit_status == 2);
    }
  }
  SECTION("a malformed TF_CONFIG") {
    CHECK(RunDaemon(TaskType::kPs, {}, std::string("{\"cluster\": ")).exit_status == 2);
  }
  SECTION("a --job file that does not exist") {
    auto run = RunDaemon(TaskType::kChief, {"--job", (tmp / "nope.json").string()},
                         TfConfigOf(spec, kChief));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("nope.json"));
  }
  SECTION("a --secret-file that does not exist") {
    auto run = RunDaemon(TaskType::kPs, {"--secret-file", (tmp / "nope").string()},
                         TfConfigOf(spec, kPs0));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("secret file"));
  }
}

// A data file the job names is wrong: the worker that reads it fails the job, the chief
// exits 2 (permanent: no restart), and shuts the others down as not retryable (exit 0).
TEST_CASE("exit 2: a data file the job names is wrong, through a running cluster") {
  TempDir tmp;
  fs::create_directory(tmp / "dir");
  struct Case {
    std::string name;
    Json data;
    std::string says;
  };
  const std::string bad_gzip("\x1f\x8b\x08\x00garbage, not deflate", 25);
  WriteFile(tmp / "bad.gz", bad_gzip);
  WriteFile(tmp / "bad.tfrecord", std::string(40, '\x07'));
  WriteFile(tmp / "parse.libsvm", LibSvmLines(50) + "1 oops\n");
  Json idx_dir{{"format", "idx"}, {"images", (tmp / "dir").string()}, {"labels", kLabels}};
  Json tfrecord{{"format", "tfrecord"},
                {"files", {(tmp / "bad.tfrecord").string()}},
                {"label", "label"},
                {"dense", {{{"feature", "x"}, {"shape", {100}}}}}};
  const std::vector<Case> cases{
      {"libsvm path is a directory", LibSvmData(tmp / "dir"), "Is a directory"},
      {"idx images is a directory", idx_dir, "Is a directory"},
      {"tfrecord header", tfrecord, "bad.tfrecord"},
      {"gzip header", LibSvmData(tmp / "bad.gz"), "gzip"},
      {"libsvm parse error", LibSvmData(tmp / "parse.libsvm"), "bad feature 'oops'"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Json extra = Json::object();
    if (c.data["format"] == "idx") {
      extra["model"] = Json{{"type", "mlp"}, {"input_dim", 784}, {"hidden", {8}}, {"classes", 10}};
    } else if (c.data["format"] == "tfrecord") {
      extra["model"] = Json{{"type", "mlp"}, {"input_dim", 100}, {"hidden", {8}}, {"classes", 2}};
    }
    auto job = LrJob(tmp, c.data, 100, extra);
    auto spec = LocalCluster();
    Tasks tasks;
    StartCluster(tasks, spec, job, tmp / ("model-" + std::to_string(&c - cases.data())));
    Task& chief = tasks[kChief];
    CHECK(chief.WaitExit(120s) == std::optional<int>(2));
    CHECK(chief.HasLine(c.says));
    tasks.ExpectExit({kPs0, kPs1, kWorker0, kWorker1}, 0, 60s);
  }
}

TEST_CASE("--check-config finds what it can without the cluster: data files, sizes") {
  TempDir tmp;
  fs::create_directory(tmp / "dir");
  WriteFile(tmp / "train.libsvm", LibSvmLines(50));
  auto spec = LocalCluster();
  auto check = [&](const fs::path& job) {
    return RunDaemon(TaskType::kChief, {"--job", job.string(), "--check-config"},
                     TfConfigOf(spec, kChief));
  };
  SECTION("a valid job passes") {
    auto run = check(LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100));
    CHECK(run.exit_status == 0);
    CHECK(run.Has("TF_CONFIG ok"));
  }
  SECTION("a data path that is a directory") {
    auto run = check(LrJob(tmp, LibSvmData(tmp / "dir"), 100));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("job.train_data.path"));
    CHECK(run.Has("is a directory"));
  }
  SECTION("a model dir that is a file") {
    WriteFile(tmp / "model-file", "");
    auto job = LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100);
    auto run = RunDaemon(
        TaskType::kChief,
        {"--job", job.string(), "--model-dir", (tmp / "model-file").string(), "--check-config"},
        TfConfigOf(spec, kChief));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("job.model_dir"));
  }
  SECTION("a data path that does not exist") {
    auto run = check(LrJob(tmp, LibSvmData(tmp / "nope.libsvm"), 100));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("no such file"));
  }
  // An embedding table: sparse, so only its rows travel, but not lazy, so the ps
  // allocates all of it.
  auto table = [&](int64_t vocab, bool lazy) {
    Json field{{"table", "t"}, {"vocab", vocab}, {"dim", 16}, {"combiner", "sum"}};
    if (lazy) field["lazy"] = true;
    return Json{{"model",
                 {{"type", "embedding_mlp"},
                  {"fields", {field}},
                  {"hidden", {8}},
                  {"activation", "relu"},
                  {"classes", 1}}}};
  };
  SECTION("a non-lazy 2^40 x 16 table (64 TiB) is refused, naming the variable and the size") {
    auto run =
        check(LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100, table(int64_t{1} << 40, false)));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("variable \"t/embeddings\""));
    CHECK(run.Has("x 16 elements is more than 2^40"));
  }
  SECTION("partitioned over 16 shards, the same table still puts 32 TiB on each of 2 ps") {
    Json extra = table(int64_t{1} << 40, false);
    extra["partitioner"] = Json{{"type", "fixed"}, {"num_shards", 16}};
    auto run = check(LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100, extra));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("on ps:0 of 2 ps task(s)"));
    CHECK(run.Has("32.0 TiB"));
  }
  SECTION("lazy, the same table is fine") {
    auto run =
        check(LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100, table(int64_t{1} << 40, true)));
    CHECK(run.exit_status == 0);
  }
  SECTION("dense variables over the frame limit on one ps") {
    Json extra{
        {"model",
         {{"type", "mlp"}, {"input_dim", 100}, {"hidden", {int64_t{12} << 20}}, {"classes", 2}}}};
    auto run = check(LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100, extra));
    CHECK(run.exit_status == 2);
    CHECK(run.Has("in one frame of at most 2.0 GiB"));
  }
}

TEST_CASE("exit 1: a permanent failure at run time (no checkpoint can be restored)") {
  TempDir tmp;
  WriteFile(tmp / "train.libsvm", LibSvmLines(200));
  Json checkpoint{{"checkpoint", {{"every_steps", 20}, {"every_seconds", 0}, {"max_to_keep", 5}}}};
  auto job = LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 40, checkpoint);
  auto spec = LocalCluster();
  {
    Tasks tasks;
    StartCluster(tasks, spec, job, tmp / "model");
    tasks.ExpectAllExit(0, 120s);
  }
  for (const auto& entry : fs::recursive_directory_iterator(tmp / "model")) {
    if (entry.path().extension() == ".shard") FlipByte(entry.path());
  }
  job = LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 80, checkpoint);
  Tasks tasks;
  StartCluster(tasks, spec, job, tmp / "model");
  CHECK(tasks[kChief].WaitExit(120s) == std::optional<int>(1));
  CHECK(tasks[kChief].HasLine("could be restored"));
}

TEST_CASE("exit 138: a peer unreachable past --connect-timeout") {
  TempDir tmp;
  WriteFile(tmp / "train.libsvm", LibSvmLines(50));
  auto spec = LocalCluster();  // nothing of it runs but the chief
  auto run = RunDaemon(TaskType::kChief,
                       {"--job", LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100).string(),
                        "--connect-timeout", "1"},
                       TfConfigOf(spec, kChief));
  CHECK(run.exit_status == 138);
}

TEST_CASE("exit 138: a lost ps that does not come back; every task exits 138") {
  TempDir tmp;
  WriteFile(tmp / "train.libsvm", LibSvmLines(200));
  auto spec = LocalCluster();
  Tasks tasks;
  StartCluster(tasks, spec, LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 1000000), tmp / "model",
               {"--ps-recovery-timeout", "1"});
  REQUIRE(tasks[kChief].WaitForLine("step 20/", 120s));
  tasks[kPs1].Signal(SIGKILL);
  CHECK(tasks[kPs1].WaitExit(15s) == std::optional<int>(128 + SIGKILL));
  CHECK(tasks[kChief].WaitExit(60s) == std::optional<int>(138));
  tasks.ExpectExit({kPs0, kWorker0, kWorker1}, 138, 60s);
}

// The stopping worker refuses the packs queued for it (Draining): the chief sends them to
// worker:0 and does not count the refusals or the closed connection as failures.
TEST_CASE(
    "signals: a worker sent SIGTERM finishes its step and exits 0; a ps with live shards 143") {
  TempDir tmp;
  WriteFile(tmp / "train.libsvm", LibSvmLines(200));
  auto spec = LocalCluster();
  Tasks tasks;
  StartCluster(tasks, spec, LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 1000000), tmp / "model");
  Task& chief = tasks[kChief];
  REQUIRE(chief.WaitForLine("step 20/", 120s));
  tasks[kWorker1].Signal(SIGTERM);
  CHECK(tasks[kWorker1].WaitExit(30s) == std::optional<int>(0));
  CHECK(tasks[kWorker1].HasLine("received SIGTERM: finishing the steps in flight, then exiting 0"));
  // Training goes on with worker:0.
  const size_t mark = chief.LineCount();
  CHECK(chief.WaitForLineFrom("step ", mark, 60s));
  tasks[kPs0].Signal(SIGTERM);
  CHECK(tasks[kPs0].WaitExit(30s) == std::optional<int>(128 + SIGTERM));
}

// The evaluator is outside the training cluster: TF_CONFIG unset, empty or naming no task
// is fine; its --check-config exits 0 exactly when a start gets past its configuration.
TEST_CASE("the evaluator without a TF_CONFIG task: it runs, and --check-config agrees") {
  TempDir tmp;
  fs::create_directory(tmp / "model");
  auto spec = LocalCluster();
  spec.of(TaskType::kEvaluator).push_back({"127.0.0.1", 1});
  struct Variant {
    const char* name;
    std::optional<std::string> tf_config;
    bool accepted;
  };
  const std::vector<Variant> variants{
      {"unset", std::nullopt, true},
      {"empty", std::string(""), true},
      {"blank", std::string("  \n"), true},
      {"{}", std::string("{}"), true},
      {"no task, empty cluster", std::string(R"({"cluster": {}, "environment": "cloud"})"), true},
      {"naming the evaluator", TfConfigOf(spec, {TaskType::kEvaluator, 0}), true},
      {"malformed", std::string("{\"cluster\": "), false},
      {"naming a worker", TfConfigOf(spec, kWorker0), false},
  };
  for (const std::string poll : {"2", "0"}) {
    for (const Variant& v : variants) {
      INFO(std::string(v.name) + ", --poll-seconds " + poll);
      const bool ok = v.accepted && poll != "0";
      // A start gets past its configuration and finds no job file in the empty model dir.
      auto run = RunDaemon(
          TaskType::kEvaluator,
          {"--model-dir", (tmp / "model").string(), "--once", "--poll-seconds", poll}, v.tf_config);
      CHECK(run.exit_status == (ok ? 1 : 2));
      if (ok) CHECK(run.Has("no job file"));
      auto checked = RunDaemon(TaskType::kEvaluator,
                               {"--model-dir", (tmp / "model").string(), "--once", "--poll-seconds",
                                poll, "--check-config"},
                               v.tf_config);
      CHECK(checked.exit_status == (ok ? 0 : 2));
    }
  }
}

TEST_CASE("a 10 MB token in a LibSVM line: every task's output together stays under 64 KiB") {
  TempDir tmp;
  const std::string token(10 << 20, 'x');
  WriteFile(tmp / "train.libsvm", LibSvmLines(100) + "1 " + token + ":1\n" + LibSvmLines(10));
  auto spec = LocalCluster();
  Tasks tasks;
  StartCluster(tasks, spec, LrJob(tmp, LibSvmData(tmp / "train.libsvm"), 100), tmp / "model");
  CHECK(tasks[kChief].WaitExit(120s) == std::optional<int>(2));
  tasks.ExpectExit({kPs0, kPs1, kWorker0, kWorker1}, 0, 60s);
  size_t total = 0, longest = 0;
  for (auto id : {kChief, kPs0, kPs1, kWorker0, kWorker1}) {
    for (const auto& line : tasks[id].Lines()) {
      total += line.size() + 1;
      longest = std::max(longest, line.size() + 1);
    }
  }
  CHECK(total < 64 * 1024);
  CHECK(longest <= 4096);
  CHECK(tasks[kChief].HasLine("bytes more)"));
}

}  // namespace
}  // namespace ps::integ

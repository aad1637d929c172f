// Checkpoints on disk between runs of a real cluster: a corrupted newest checkpoint makes
// the next chief fall back to the one before it; a missing or garbled `checkpoint`
// pointer costs a warning, never a restart from step 0; `pstrain inspect --verify` tells
// a sound model dir from a damaged one.
#include <filesystem>
#include <sstream>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

// Runs `job` to the end on a fresh cluster of cluster-local.json's shape (fresh ports);
// every task must exit 0. Returns the chief's lines.
std::vector<std::string> RunToCompletion(const fs::path& job) {
  auto spec = LocalCluster();
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, 120s);
  return chief.Lines();
}

bool Has(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

bool HasBoth(const std::vector<std::string>& lines, const std::string& a, const std::string& b) {
  for (const auto& l : lines) {
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
  }
  return false;
}

// The run ended at `steps`: final checkpoint ckpt-<steps> (MANIFEST final, every record's
// checksums pass), the pointer names it, and the final evaluation is at `steps`.
void CheckFinishedAt(const fs::path& model, int64_t steps) {
  INFO("run to " << steps);
  const std::string dir = ckpt::CheckpointPath(model.string(), steps);
  auto manifest = ReadJsonFile(dir + "/MANIFEST");
  INFO(manifest.status().ToString());
  REQUIRE(manifest.ok());
  CHECK((*manifest)["global_step"] == steps);
  CHECK((*manifest)["final"] == true);
  Status verified = ckpt::VerifyCheckpoint(dir, ckpt::Verify::kFull);
  INFO(verified.ToString());
  CHECK(verified.ok());
  auto pointer = ckpt::ReadCheckpointPointer(model.string());
  CHECK(pointer.ValueOr(-1) == steps);
  auto metrics = ReadJsonLines(model / "train_metrics.jsonl");
  REQUIRE(!metrics.empty());
  REQUIRE(metrics.back().contains("final_eval"));
  CHECK(metrics.back()["final_eval"]["step"] == steps);
}

TEST_CASE(
    "a corrupted newest checkpoint: the next chief names the file and resumes from the one before") {
  TempDir tmp;
  const auto model = tmp / "model";
  // Checkpoints 100, 200 and the final 300.
  RunToCompletion(
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job300.json", 300, 50, model, 100, 5));
  CheckFinishedAt(model, 300);

  // A bit flip inside the data: the sizes, header and footer still match the MANIFEST,
  // only reading the records finds it.
  const fs::path damaged = model / "ckpt-300" / "ps-1.shard";
  FlipByte(damaged);

  // The job again with its steps raised: resumes at 200 and trains to 400.
  auto chief = RunToCompletion(
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job400.json", 400, 50, model, 100, 5));
  CHECK(HasBoth(chief, "cannot restore", damaged.string()));
  CHECK(HasBoth(chief, "falling back to the checkpoint before", "ckpt-300"));
  CHECK(Has(chief, "resuming at step 200"));
  CHECK_FALSE(Has(chief, "resuming at step 300"));
  CHECK_FALSE(Has(chief, "starting at step 0"));
  CHECK(Has(chief, "step 400/400"));
  CheckFinishedAt(model, 400);
  // ckpt-300 was written again by this run, over the damaged one.
  Status again = ckpt::VerifyCheckpoint((model / "ckpt-300").string(), ckpt::Verify::kFull);
  INFO(again.ToString());
  CHECK(again.ok());

  // Now without the pointer file: a warning, and the directory scan finds ckpt-400.
  fs::remove(model / "checkpoint");
  chief = RunToCompletion(
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job500.json", 500, 50, model, 100, 5));
  CHECK(HasBoth(chief, (model / "checkpoint").string(), "missing"));
  CHECK(Has(chief, "resuming at step 400"));
  CHECK_FALSE(Has(chief, "starting at step 0"));
  CheckFinishedAt(model, 500);

  // A garbled pointer file: the same.
  WriteFile(model / "checkpoint", "model_checkpoint_path: \"ckpt-x\"\n");
  chief = RunToCompletion(
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job600.json", 600, 50, model, 100, 5));
  CHECK(HasBoth(chief, (model / "checkpoint").string(), "garbled"));
  CHECK(Has(chief, "resuming at step 500"));
  CHECK_FALSE(Has(chief, "starting at step 0"));
  CheckFinishedAt(model, 600);
  // max_to_keep 5: ckpt-100 is gone.
  auto list = ckpt::ListCheckpoints(model.string());
  REQUIRE(list.ok());
  std::vector<int64_t> steps;
  for (const auto& c : *list) steps.push_back(c.global_step);
  CHECK(steps == std::vector<int64_t>{200, 300, 400, 500, 600});
}

// `pstrain inspect MODEL_DIR --verify` on the newest checkpoint; its exit status.
std::unique_ptr<Task> InspectVerify(const fs::path& model) {
  auto inspect = StartLauncher({"inspect", model.string(), "--verify"}, "pstrain inspect");
  REQUIRE(inspect->WaitExit(60s).has_value());
  return inspect;
}

// A finished run with checkpoints 100 and the final 150.
fs::path FinishedRun(const TempDir& tmp) {
  const auto model = tmp / "model";
  RunToCompletion(
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 150, 50, model, 100, 5));
  return model;
}

TEST_CASE(
    "pstrain inspect --verify: exit 0 on a finished run, 1 after a bit flip in a shard file") {
  TempDir tmp;
  const auto model = FinishedRun(tmp);
  {
    auto inspect = InspectVerify(model);
    CHECK(inspect->WaitExit(0s) == std::optional<int>(0));
    CHECK(inspect->HasLine("3 committed checkpoints"));  // ckpt-0, ckpt-100, ckpt-150
    auto line = inspect->FindLine("checkpoint ckpt-150: step 150");
    REQUIRE(line.has_value());
    CHECK(line->find(", final,") != std::string::npos);
    CHECK(inspect->HasLine("data checksums: all ok"));
    CHECK_FALSE(inspect->HasLine("DAMAGED"));
    CHECK_FALSE(inspect->HasLine("CORRUPT"));
  }
  // In the data: only --verify's full read finds it. ps-1 holds the biases: the bad
  // record's row says CORRUPT with ps 1, the others stay ok.
  FlipByte(model / "ckpt-150" / "ps-1.shard");
  {
    auto inspect = InspectVerify(model);
    CHECK(inspect->WaitExit(0s) == std::optional<int>(1));
    CHECK(inspect->HasLine("data checksums: 1 record CORRUPT"));
    auto row = inspect->FindLine("CORRUPT:");
    REQUIRE(row.has_value());
    std::istringstream fields(*row);  // variable, part, rows, shape, ps, ...
    std::string var, part, rows, shape, ps;
    fields >> var >> part >> rows >> shape >> ps;
    CHECK(ps == "1");
    CHECK_FALSE(inspect->HasLine("DAMAGED"));
  }
  // In ps-0.shard's footer (its last 32 bytes): the file itself is named.
  const fs::path footer_damaged = model / "ckpt-150" / "ps-0.shard";
  FlipByte(footer_damaged, fs::file_size(footer_damaged) - 20);
  {
    auto inspect = InspectVerify(model);
    CHECK(inspect->WaitExit(0s) == std::optional<int>(1));
    auto line = inspect->FindLine("DAMAGED");
    REQUIRE(line.has_value());
    CHECK(line->find(footer_damaged.string()) != std::string::npos);
  }
}

// For a bad data block, inspect --verify names the shard file too.
TEST_CASE("pstrain inspect --verify names the shard file of a corrupt record") {
  TempDir tmp;
  const auto model = FinishedRun(tmp);
  FlipByte(model / "ckpt-150" / "ps-1.shard");
  auto inspect = InspectVerify(model);
  CHECK(inspect->WaitExit(0s) == std::optional<int>(1));
  bool named = false;
  for (const auto& l : inspect->Lines()) {
    named = named ||
            ((l.find("CORRUPT") != std::string::npos || l.find("DAMAGED") != std::string::npos) &&
             l.find("ps-1.shard") != std::string::npos);
  }
  CHECK(named);
}

// When every_steps divides steps, the last periodic checkpoint and the final one are the
// same step. It should be committed once, as final, like any other final checkpoint: the
// log says "checkpoint ckpt-N (final) committed" and train_metrics.jsonl has its line with
// "final": true.

TEST_CASE("a final checkpoint at a multiple of every_steps is committed once, as final") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto chief = RunToCompletion(
      DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 200, 50, model, 100, 5));
  CheckFinishedAt(model, 200);
  CHECK(Has(chief, "checkpoint ckpt-200 (final) committed"));
  std::vector<std::pair<int64_t, bool>> lines;
  for (const auto& m : ReadJsonLines(model / "train_metrics.jsonl")) {
    if (m.contains("checkpoint"))
      lines.emplace_back(m["checkpoint"]["step"].get<int64_t>(),
                         m["checkpoint"]["final"].get<bool>());
  }
  CHECK(lines == std::vector<std::pair<int64_t, bool>>{{0, false}, {100, false}, {200, true}});
}

TEST_CASE(
    "a model dir written with another placement and partitioner resumes resharded; a changed model is refused with one clear error") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 100, 50, model, 100, 5);
  Json rr = *ReadJsonFile(job.string());
  rr["placement"] = "round_robin";  // the default before "balanced"
  WriteFile(job, rr.dump());
  RunToCompletion(job);
  auto spec = LocalCluster();
  // Another hidden size: dense_0/kernel has another shape. Refused before any ps restores.
  Json changed = rr;
  changed["model"]["hidden"] = Json::array({200, 128});
  changed["steps"] = 200;
  WriteFile(tmp / "changed.json", changed.dump());
  {
    Tasks tasks;
    for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
    Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", (tmp / "changed.json").string()}));
    tasks.ExpectExit({kChief}, 1, 120s);
    tasks.ExpectExit({kPs0, kPs1, kWorker0, kWorker1}, 0, 60s);
    CHECK(chief.HasLine(
        "ckpt-100: variable \"dense_0/kernel\" is [784,256] dense in the checkpoint and [784,200] dense "
        "in this job (was the model changed?)"));
  }
  CHECK(std::filesystem::exists(model / "ckpt-100" / "MANIFEST"));  // nothing was lost
  // The same model with the default placement and 3 shards a variable: restored resharded.
  Json other = rr;
  other.erase("placement");
  other["partitioner"] = {{"type", "fixed"}, {"num_shards", 3}};
  other["steps"] = 200;
  WriteFile(job, other.dump());
  const auto lines = RunToCompletion(job);
  CHECK(Has(lines, "restored " + ckpt::CheckpointPath(model.string(), 100)));
  CheckFinishedAt(model, 200);
}

}  // namespace
}  // namespace ps::integ

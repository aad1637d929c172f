// A ps refuses a delta checkpoint and the chief commits a full one instead, in a real
// cluster (Chief::SaveCheckpoint's fallback).
//
// A ps builds a delta only on a checkpoint it saved or restored itself, and remembers the
// last two (ckpt::ShardCheckpointer::kKeptEpochs). A ps that restarts does not cause a
// refusal: the chief restores every ps before the next save (delta_checkpoints covers
// that). What does is a run of saves that every ps wrote but the chief could not commit,
// with training going on in between (checkpoint.max_consecutive_failures): after two, the
// newest committed checkpoint, which the next delta names as its parent, is no longer one
// the ps tasks remember. Here the model dir is a tmpfs left with exactly 3 free inodes:
// a delta's directory and its two shard files fit, its MANIFEST does not. Once there is
// room again the next delta is refused by the ps tasks, the chief saves that step in full,
// deltas go on on the new base, a new chief restores that chain at its exact step, and
// the run ends with exit 0. Needs root (mount); without it the test exits 77 (SKIP).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 1000000;            // never reached: `pstrain stop` ends the run
constexpr char kCommitted[] = " committed: ";  // the chief's line for each checkpoint it commits

// Creates empty files dir/filler-<n> until the file system has no inode left, then
// removes `leave` of them: `leave` inodes are free. `fillers` holds the files left.
void FillInodes(const fs::path& dir, int leave, std::vector<fs::path>* fillers) {
  for (;;) {
    const fs::path path = dir / ("filler-" + std::to_string(fillers->size()));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      REQUIRE(errno == ENOSPC);
      break;
    }
    ::close(fd);
    fillers->push_back(path);
  }
  for (int i = 0; i < leave; ++i) {
    REQUIRE_FALSE(fillers->empty());
    fs::remove(fillers->back());
    fillers->pop_back();
  }
}

// The index of the first line from `first` on that contains `needle`, waiting up to
// `timeout` for it.
std::optional<size_t> WaitForLineIndex(Task& task, const std::string& needle, size_t first,
                                       Millis timeout) {
  if (!task.WaitForLineFrom(needle, first, timeout)) return std::nullopt;
  const auto lines = task.Lines();
  for (size_t i = first; i < lines.size(); ++i) {
    if (lines[i].find(needle) != std::string::npos) return i;
  }
  return std::nullopt;
}

// The number after `prefix` in `line`.
int64_t NumberAfter(const std::string& line, const std::string& prefix) {
  const size_t at = line.find(prefix);
  REQUIRE(at != std::string::npos);
  return std::stoll(line.substr(at + prefix.size()));
}

TEST_CASE(
    "a ps that no longer holds the parent refuses the delta: the chief commits that step in full") {
  TempDir tmp;
  const fs::path model = tmp / "model";
  Tmpfs tmpfs(tmp.path(), model, 256, 4000);
  Json mlp = ReadConfig("job-fmnist-mlp.json")["model"];
  mlp["hidden"] = Json::array({64});  // small checkpoints: 2 deltas a second on a tmpfs
  const auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 100, model,
                             Json{{"model", mlp},
                                  {"checkpoint",
                                   {{"every_steps", 0},
                                    {"every_seconds", 0},
                                    {"delta_every_seconds", 0.5},
                                    {"max_deltas", 100000},
                                    {"delta_max_fraction", 1000},
                                    {"max_consecutive_failures", 10}}}});
  const auto spec = LocalCluster();
  const std::vector<std::string> chief_args{"--job", job.string()};
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  auto first = StartDaemon(spec, kChief, chief_args);
  REQUIRE(first->WaitForLine("delta checkpoint ckpt-0/delta-", 120s));
  Note("a delta is committed: " + *first->FindLine("delta checkpoint ckpt-0/delta-"));

  // Saves that every ps wrote and the chief could not commit, two in a row. A fill that
  // meets a save in progress leaves another count free once that save's files are
  // removed: the next save then fails elsewhere (or commits), and the fill is made again.
  std::vector<fs::path> fillers;
  size_t from = first->LineCount();
  FillInodes(model, 3, &fillers);
  Note("filled the model dir with " + std::to_string(fillers.size()) +
       " empty files, 3 inodes free");
  for (int in_a_row = 0, failures = 0; in_a_row < 2; ++failures) {
    REQUIRE(failures < 8);
    const auto at = WaitForLineIndex(*first, "; training goes on", from, 60s);
    REQUIRE(at.has_value());
    const auto lines = first->Lines();
    bool committed = false;
    for (size_t i = from; i < *at; ++i)
      committed = committed || lines[i].find(kCommitted) != std::string::npos;
    // Only the MANIFEST could not be written: every ps wrote its shard file.
    const bool commit_failed = lines[*at].find("/MANIFEST.tmp") != std::string::npos &&
                               lines[*at].find("No space left on device") != std::string::npos;
    in_a_row = commit_failed ? (committed ? 1 : in_a_row + 1) : 0;
    from = *at + 1;
    if (!commit_failed) FillInodes(model, 3, &fillers);
  }
  for (const auto& f : fillers) fs::remove(f);

  // The next commit is a full checkpoint, of the step whose delta the ps tasks refused.
  const auto at = WaitForLineIndex(*first, kCommitted, from, 120s);
  REQUIRE(at.has_value());
  const auto lines = first->Lines();
  const std::string& commit = lines[*at];
  INFO(commit);
  REQUIRE(commit.find("delta checkpoint") == std::string::npos);
  const int64_t full = NumberAfter(commit, "checkpoint ckpt-");
  std::optional<std::string> refused;
  for (size_t i = from; i < *at; ++i) {
    if (lines[i].find(" not written (") != std::string::npos) refused = lines[i];
  }
  REQUIRE(refused.has_value());
  const std::string why = "keeps no record of that checkpoint";  // the ps's refusal
  CHECK_THAT(*refused, Catch::Contains("/delta-" + std::to_string(full) + " not written (") &&
                           Catch::Contains(why) && Catch::EndsWith("saving in full"));
  CHECK((tasks[kPs0].HasLine(why) || tasks[kPs1].HasLine(why)));
  auto manifest = ReadJsonFile(ckpt::CheckpointPath(model.string(), full) + "/MANIFEST");
  REQUIRE(manifest.ok());
  CHECK_FALSE(manifest->contains("base"));
  CHECK((*manifest)["global_step"] == full);
  CHECK((*manifest)["final"] == false);
  // The refused delta left nothing behind.
  for (const auto& entry : fs::directory_iterator(model / "ckpt-0")) {
    CHECK(entry.path().filename() != ckpt::DeltaDirName(full));
  }

  // Deltas go on, on the new base: the ps tasks remember the full checkpoint.
  const std::string on_full = "delta checkpoint ckpt-" + std::to_string(full) + "/delta-";
  const auto next = WaitForLineIndex(*first, on_full, *at, 120s);
  REQUIRE(next.has_value());
  CHECK_THAT(first->Lines()[*next], Catch::Contains(kCommitted));
  first->Signal(SIGKILL);
  REQUIRE(first->WaitExit(30s) == std::optional<int>(128 + SIGKILL));

  // What a restore takes now: the full checkpoint of the fallback and its deltas.
  auto found = ckpt::FindRestorable(model.string(), nullptr);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  const ckpt::CheckpointInfo& chain = **found;
  CHECK(chain.global_step == full);
  REQUIRE_FALSE(chain.deltas.empty());
  const int64_t resumed = chain.restored_step();
  Note("restorable: ckpt-" + std::to_string(full) + " + " + std::to_string(chain.deltas.size()) +
       " delta(s) to step " + std::to_string(resumed));

  Task& chief = tasks.Add(StartDaemon(spec, kChief, chief_args));
  REQUIRE(chief.WaitForLine(" delta(s) to step " + std::to_string(resumed) + ": resuming at step " +
                                std::to_string(resumed),
                            120s));
  CHECK_THAT(*chief.FindLine(": resuming at step "),
             Catch::Contains("/ckpt-" + std::to_string(full) + " + "));
  const auto resumed_delta = WaitForLineIndex(chief, on_full, 0, 120s);
  REQUIRE(resumed_delta.has_value());
  CHECK_THAT(chief.Lines()[*resumed_delta], Catch::Contains(kCommitted));
  auto stop = StartLauncher({"stop", "--chief", spec.address(kChief).ToString()}, "pstrain stop");
  CHECK(stop->WaitExit(30s) == std::optional<int>(0));
  tasks.ExpectAllExit(0, 120s);

  // Every committed checkpoint verifies record by record; the final one is full, after
  // the restored step, and the model it holds is trained (chance is 0.1).
  const auto steps = VerifiedCheckpoints(model);
  REQUIRE_FALSE(steps.empty());
  CHECK(steps.back() > resumed);
  auto last = ReadJsonFile(ckpt::CheckpointPath(model.string(), steps.back()) + "/MANIFEST");
  REQUIRE(last.ok());
  CHECK((*last)["final"] == true);
  CHECK_FALSE(last->contains("base"));
  std::optional<Json> final_eval;
  for (const auto& m : ReadJsonLines(model / "train_metrics.jsonl")) {
    if (m.contains("final_eval")) final_eval = m["final_eval"];
  }
  REQUIRE(final_eval.has_value());
  CHECK((*final_eval)["step"] == steps.back());
  CHECK((*final_eval)["accuracy"].get<double>() > 0.6);
}

}  // namespace
}  // namespace ps::integ

// A model dir on a small tmpfs that fills up while a real cluster trains: the checkpoint
// fails naming the file and the cause, the checkpoints committed before stay intact,
// training goes on, and the next checkpoint commits once there is room again. Needs root
// (mount); without it the test exits 77 (meson: SKIP) saying why.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

// Writes `path` until the file system is full; returns the bytes written.
uint64_t FillUp(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  std::vector<char> block(1 << 16, 'x');
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::write(fd, block.data(), block.size());
    if (n <= 0) break;
    total += static_cast<uint64_t>(n);
  }
  CHECK(errno == ENOSPC);
  ::close(fd);
  return total;
}

TEST_CASE(
    "a model dir that fills up: the checkpoint fails naming the file and the cause, training goes on, the next commits") {
  TempDir tmp;
  const fs::path model = tmp / "model";
  Tmpfs tmpfs(tmp.path(), model, 48);
  // Checkpoints of job-fmnist-mlp are ~2.8 MiB (Adam's slots included); 5 kept fit.
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 3000, 100, model, 300, 5);
  auto spec = LocalCluster();
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  REQUIRE(chief.WaitForLine("checkpoint ckpt-300 committed", 120s));

  const fs::path filler = model / "filler";
  Note("filled the model dir with " + std::to_string(FillUp(filler)) + " bytes");
  REQUIRE(chief.WaitForLine("in a row, 3 stop the run)", 120s));
  auto failed = chief.FindLine("in a row, 3 stop the run)");
  REQUIRE(failed.has_value());
  // The file (inside the model dir) and the cause.
  CHECK_THAT(*failed, Catch::Contains(model.string() + "/ckpt-"));
  CHECK_THAT(*failed, Catch::Contains("No space left on device"));
  CHECK_THAT(*failed, Catch::Contains("training goes on"));
  // Nothing of the failed checkpoint is left to take space, and what was committed is intact.
  const auto before = VerifiedCheckpoints(model);
  CHECK(before.back() >= 300);

  const size_t mark = chief.LineCount();
  fs::remove(filler);
  CHECK(chief.WaitForLineFrom(" committed", mark, 120s));
  tasks.ExpectAllExit(0, 180s);
  auto after = VerifiedCheckpoints(model);
  REQUIRE_FALSE(after.empty());
  CHECK(after.back() == 3000);
  auto manifest = ReadJsonFile(ckpt::CheckpointPath(model.string(), 3000) + "/MANIFEST");
  REQUIRE(manifest.ok());
  CHECK((*manifest)["final"] == true);
  // Only committed checkpoints are in the model dir (the failed one was removed).
  for (const auto& entry : fs::directory_iterator(model)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("ckpt-")) continue;
    INFO(name);
    CHECK(fs::exists(entry.path() / "MANIFEST"));
  }
}

}  // namespace
}  // namespace ps::integ

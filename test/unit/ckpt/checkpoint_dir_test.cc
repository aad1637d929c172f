#include <catch2/catch.hpp>

#include <filesystem>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/support/temp_dir.h"

namespace fs = std::filesystem;
using ps::ckpt::CheckpointInfo;
using ps::ckpt::Manifest;
using ps::ckpt::Verify;
using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

// Writes ps-<i>.shard files for `step` as the ps tasks would, and the manifest's entries.
Manifest WriteShards(const std::string& model_dir, int64_t step, int num_ps) {
  auto created = ps::ckpt::CreateCheckpointDir(model_dir, step);
  REQUIRE(created.ok());
  const std::string dir = *created;
  REQUIRE(dir == ps::ckpt::CheckpointPath(model_dir, step));
  REQUIRE(ps::ckpt::CreateCheckpointDir(model_dir, step).ok());  // again: harmless
  Manifest m;
  m.global_step = step;
  m.unix_time = 1732268000.5 + static_cast<double>(step);
  m.num_ps = num_ps;
  for (int i = 0; i < num_ps; ++i) {
    std::vector<float> values(12);
    for (size_t k = 0; k < values.size(); ++k)
      values[k] = static_cast<float>(step * 100 + i * 10) + k;
    auto w = ps::ckpt::ShardWriter::Create(dir + "/" + ps::ckpt::ShardFileName(i), i, step);
    REQUIRE(w.ok());
    ps::ckpt::ShardRecordView r;
    r.layout.var = std::string("w");
    r.layout.var += std::to_string(i);  // not "w" + ...: GCC 12 -Wrestrict false positive
    r.layout.rows = 4;
    r.layout.cols = 3;
    r.layout.full_shape = {4, 3};
    r.values = values;
    REQUIRE(w->Append(r).ok());
    auto info = w->Commit();
    REQUIRE(info.ok());
    m.shards.push_back(*info);
  }
  return m;
}

Manifest Save(const std::string& model_dir, int64_t step, int num_ps = 2) {
  Manifest m = WriteShards(model_dir, step, num_ps);
  m.extra = ps::Json{{"job", "mnist"}, {"placement", {{"w0", 0}, {"w1", 1}}}};
  auto st = ps::ckpt::CommitCheckpoint(model_dir, m);
  INFO(st.ToString());
  REQUIRE(st.ok());
  return m;
}

std::vector<int64_t> Steps(const std::string& model_dir) {
  auto list = ps::ckpt::ListCheckpoints(model_dir);
  REQUIRE(list.ok());
  std::vector<int64_t> steps;
  for (const auto& c : *list) steps.push_back(c.global_step);
  return steps;
}

bool AnyContains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("checkpoint directory names") {
  CHECK(ps::ckpt::CheckpointDirName(0) == "ckpt-0");
  CHECK(ps::ckpt::CheckpointDirName(1200) == "ckpt-1200");
  CHECK(ps::ckpt::ParseCheckpointDirName("ckpt-1200") == 1200);
  CHECK(ps::ckpt::ParseCheckpointDirName("ckpt-0") == 0);
  // Where a step's checkpoint is, relative to the model dir: a delta is in its base's.
  CHECK(ps::ckpt::CheckpointRelPath(1200, 1200) == "ckpt-1200");
  CHECK(ps::ckpt::CheckpointRelPath(1000, 1200) == "ckpt-1000/delta-1200");
  CHECK(ps::ckpt::DeltaPath("/m", 1000, 1200) == "/m/ckpt-1000/delta-1200");
  for (const char* bad : {"ckpt-", "ckpt-01", "ckpt--1", "ckpt-1a", "ckpt-1 ", "xckpt-1",
                          "ckpt-1.tmp", "ckpt-12345678901234567890", "checkpoint"}) {
    INFO(bad);
    CHECK_FALSE(ps::ckpt::ParseCheckpointDirName(bad).has_value());
  }
}

TEST_CASE("commit, list and find: numeric order, pointer file, manifest round trip") {
  TempDir dir;
  const std::string md = dir.path();
  for (int64_t step : {9, 100, 2, 10}) Save(md, step);
  CHECK(Steps(md) == std::vector<int64_t>{2, 9, 10, 100});
  // The pointer names the newest committed checkpoint even after committing an older one.
  CHECK(ReadBytes(md + "/checkpoint") == "model_checkpoint_path: \"ckpt-100\"\n");
  CHECK(*ps::ckpt::ReadCheckpointPointer(md) == 100);
  CHECK_FALSE(fs::exists(md + "/checkpoint.tmp"));
  CHECK_FALSE(fs::exists(md + "/ckpt-100/MANIFEST.tmp"));

  std::vector<std::string> warnings;
  auto found = ps::ckpt::FindRestorable(md, &warnings, Verify::kFull);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->global_step == 100);
  CHECK((*found)->dir == md + "/ckpt-100");
  CHECK(warnings.empty());
  const Manifest& m = (*found)->manifest;
  CHECK(m.num_ps == 2);
  CHECK(m.unix_time == 1732268100.5);
  CHECK_FALSE(m.final);
  CHECK(m.extra["job"] == "mnist");
  REQUIRE(m.shards.size() == 2);
  CHECK(m.shards[1].name == "ps-1.shard");
  CHECK(m.shards[1].bytes == fs::file_size(md + "/ckpt-100/ps-1.shard"));
  CHECK(ps::ckpt::VerifyCheckpoint(md + "/ckpt-100").ok());
}

TEST_CASE("manifest JSON is strict") {
  Manifest m;
  m.global_step = 5;
  m.num_ps = 1;
  m.final = true;
  m.shards = {{"ps-0.shard", 100, 0xDEADBEEFu}};
  ps::Json j = ps::ckpt::ManifestToJson(m);
  auto back = ps::ckpt::ManifestFromJson(j, "MANIFEST");
  REQUIRE(back.ok());
  CHECK(back->final);
  CHECK(back->shards[0].digest == 0xDEADBEEFu);
  CHECK(back->shards[0].bytes == 100);

  ps::Json extra_key = j;
  extra_key["color"] = "blue";
  CHECK(ps::ckpt::ManifestFromJson(extra_key, "MANIFEST").status().message() ==
        "MANIFEST.color: unknown key");
  ps::Json wrong_name = j;
  wrong_name["shards"][0]["name"] = "../etc/passwd";
  CHECK(ps::ckpt::ManifestFromJson(wrong_name, "MANIFEST").status().message() ==
        "MANIFEST.shards[0].name: expected \"ps-0.shard\", got \"../etc/passwd\"");
  ps::Json short_list = j;
  short_list["num_ps"] = 2;
  CHECK(ps::ckpt::ManifestFromJson(short_list, "MANIFEST").status().code() ==
        ps::Code::kInvalidArgument);
}

TEST_CASE("commit refuses a manifest that disagrees with the files") {
  TempDir dir;
  const std::string md = dir.path();
  Manifest m = WriteShards(md, 50, 2);
  Manifest wrong = m;
  wrong.shards[0].bytes += 1;
  CHECK(ps::ckpt::CommitCheckpoint(md, wrong).code() == ps::Code::kFailedPrecondition);
  wrong = m;
  wrong.shards[1].digest ^= 1;
  CHECK(ps::ckpt::CommitCheckpoint(md, wrong).code() == ps::Code::kFailedPrecondition);
  wrong = m;
  wrong.global_step = 51;  // no such directory
  CHECK(ps::ckpt::CommitCheckpoint(md, wrong).code() == ps::Code::kFailedPrecondition);
  wrong = m;
  wrong.num_ps = 3;
  CHECK(ps::ckpt::CommitCheckpoint(md, wrong).code() == ps::Code::kInvalidArgument);
  fs::remove(md + "/ckpt-50/ps-1.shard");
  CHECK(ps::ckpt::CommitCheckpoint(md, m).code() == ps::Code::kFailedPrecondition);
  // Nothing was committed: an uncommitted directory does not exist as a checkpoint.
  CHECK(Steps(md).empty());
  CHECK_FALSE(fs::exists(md + "/checkpoint"));
  std::vector<std::string> warnings;
  auto found = ps::ckpt::FindRestorable(md, &warnings);
  REQUIRE(found.ok());
  CHECK_FALSE(found->has_value());
  CHECK(warnings.empty());
}

TEST_CASE("CreateCheckpointDir creates model_dir too, and refuses a file in the way") {
  TempDir dir;
  auto d = ps::ckpt::CreateCheckpointDir(dir / "runs/a", 7);
  REQUIRE(d.ok());
  CHECK(*d == dir / "runs/a/ckpt-7");
  CHECK(fs::is_directory(*d));
  WriteBytes(dir / "runs/a/ckpt-8", "x");
  CHECK(ps::ckpt::CreateCheckpointDir(dir / "runs/a", 8).status().code() == ps::Code::kIo);
}

TEST_CASE("a fresh or missing model_dir has nothing to restore, silently") {
  TempDir dir;
  std::vector<std::string> warnings;
  auto a = ps::ckpt::FindRestorable(dir.path(), &warnings);
  REQUIRE(a.ok());
  CHECK_FALSE(a->has_value());
  auto b = ps::ckpt::FindRestorable(dir / "not-yet-created", &warnings);
  REQUIRE(b.ok());
  CHECK_FALSE(b->has_value());
  CHECK(warnings.empty());
  CHECK(ps::ckpt::ReadCheckpointPointer(dir.path()).status().code() == ps::Code::kNotFound);
}

TEST_CASE("a corrupt newest checkpoint falls back to the previous one, naming the file") {
  TempDir dir;
  const std::string md = dir.path();
  Save(md, 100);
  Save(md, 200);
  Save(md, 300);
  const std::string shard = md + "/ckpt-300/ps-1.shard";
  const std::string good = ReadBytes(shard);

  SECTION("truncated shard: caught by the size check") {
    WriteBytes(shard, good.substr(0, good.size() - 10));
    for (Verify level : {Verify::kSizes, Verify::kFooters, Verify::kFull}) {
      std::vector<std::string> warnings;
      auto found = ps::ckpt::FindRestorable(md, &warnings, level);
      REQUIRE(found.ok());
      REQUIRE(found->has_value());
      CHECK((*found)->global_step == 200);
      REQUIRE(warnings.size() == 1);
      CHECK(warnings[0].rfind(shard + ": ", 0) == 0);
      CHECK(AnyContains(warnings, "checkpoint ckpt-300 is corrupt, falling back"));
    }
  }
  SECTION("flipped data bit: caught by full verification") {
    std::string bytes = good;
    bytes[bytes.size() - 40] ^= 0x10;  // inside the last values block
    WriteBytes(shard, bytes);
    std::vector<std::string> warnings;
    auto quick = ps::ckpt::FindRestorable(md, &warnings, Verify::kFooters);
    REQUIRE(quick.ok());
    CHECK((*quick)->global_step == 300);  // the data is not read at this level
    auto full = ps::ckpt::FindRestorable(md, &warnings, Verify::kFull);
    REQUIRE(full.ok());
    CHECK((*full)->global_step == 200);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].rfind(shard + ": record 0 (var \"w1\" shard 0): values checksum mismatch",
                            0) == 0);
    CHECK(ps::ckpt::VerifyCheckpoint(md + "/ckpt-300").code() == ps::Code::kDataLoss);
  }
  SECTION("footer damaged: caught by the footer check") {
    std::string bytes = good;
    bytes[bytes.size() - 5] ^= 0x01;
    WriteBytes(shard, bytes);
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings);
    REQUIRE(found.ok());
    CHECK((*found)->global_step == 200);
    CHECK(AnyContains(warnings, shard + ": footer missing or corrupt"));
  }
  SECTION("a shard file from another checkpoint: caught by the digest") {
    fs::copy_file(md + "/ckpt-200/ps-1.shard", shard, fs::copy_options::overwrite_existing);
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings);
    REQUIRE(found.ok());
    CHECK((*found)->global_step == 200);
    CHECK(AnyContains(warnings, shard + ": "));
  }
  SECTION("missing shard file") {
    fs::remove(shard);
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings);
    REQUIRE(found.ok());
    CHECK((*found)->global_step == 200);
    CHECK(AnyContains(warnings, shard + ": missing (listed in the MANIFEST)"));
  }
  SECTION("garbled MANIFEST") {
    WriteBytes(md + "/ckpt-300/MANIFEST", "{\"format\": \"pstrain-checkpoint\", \"vers");
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings);
    REQUIRE(found.ok());
    CHECK((*found)->global_step == 200);
    CHECK(AnyContains(warnings, md + "/ckpt-300/MANIFEST: malformed JSON"));
    CHECK(Steps(md) == std::vector<int64_t>{100, 200});
  }
  SECTION("every checkpoint corrupt: an error, never a fresh start") {
    for (int64_t step : {100, 200, 300})
      fs::remove(ps::ckpt::CheckpointPath(md, step) + "/ps-0.shard");
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings);
    CHECK(found.status().code() == ps::Code::kDataLoss);
    CHECK(found.status().message().find("refusing to start from scratch") != std::string::npos);
    CHECK(warnings.size() == 3);
  }
}

TEST_CASE("a garbled, missing or stale pointer file costs a warning, not the checkpoint") {
  TempDir dir;
  const std::string md = dir.path();
  Save(md, 100);
  Save(md, 200);
  const std::string pointer = md + "/checkpoint";
  for (const std::string& text : {std::string("\x00\x01garbage", 9), std::string(""),
                                  std::string("model_checkpoint_path: \"ckpt-2x\"\n")}) {
    WriteBytes(pointer, text);
    std::vector<std::string> warnings;
    auto found = ps::ckpt::FindRestorable(md, &warnings);
    REQUIRE(found.ok());
    REQUIRE(found->has_value());
    CHECK((*found)->global_step == 200);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].rfind(pointer + ": garbled", 0) == 0);
  }
  fs::remove(pointer);
  std::vector<std::string> warnings;
  auto found = ps::ckpt::FindRestorable(md, &warnings);
  REQUIRE(found.ok());
  CHECK((*found)->global_step == 200);
  CHECK(AnyContains(warnings, pointer + ": missing"));

  // Stale: a crash between the MANIFEST rename and the pointer update.
  WriteBytes(pointer, "model_checkpoint_path: \"ckpt-100\"\n");
  warnings.clear();
  found = ps::ckpt::FindRestorable(md, &warnings);
  REQUIRE(found.ok());
  CHECK((*found)->global_step == 200);
  CHECK(warnings.empty());  // ckpt-100 is committed; the newer one simply wins
  WriteBytes(pointer, "model_checkpoint_path: \"ckpt-999\"\n");
  found = ps::ckpt::FindRestorable(md, &warnings);
  REQUIRE(found.ok());
  CHECK((*found)->global_step == 200);
  CHECK(AnyContains(warnings, "names ckpt-999, which is not a committed checkpoint"));
}

TEST_CASE("CleanUncommitted removes only what an interrupted save leaves") {
  TempDir dir;
  const std::string md = dir.path();
  Save(md, 300);
  WriteShards(md, 400, 2);  // never committed
  WriteBytes(md + "/ckpt-400/ps-1.shard.tmp", "partial");
  WriteBytes(md + "/ckpt-400/MANIFEST.tmp", "{");
  WriteShards(md, 500, 1);  // never committed, and someone put a file in it
  WriteBytes(md + "/ckpt-500/notes.txt", "mine");
  WriteBytes(md + "/ckpt-300/ps-0.shard.tmp", "stray");
  WriteBytes(md + "/checkpoint.tmp", "stray");
  fs::create_directories(md + "/ckpt-300-backup");
  fs::create_directories(md + "/ckpt-0600");
  fs::create_directories(md + "/eval");
  WriteBytes(md + "/job.json", "{}");
  WriteBytes(md + "/ckpt-7", "a file, not a directory");

  std::vector<std::string> removed;
  REQUIRE(ps::ckpt::CleanUncommitted(md, &removed).ok());
  CHECK_FALSE(fs::exists(md + "/ckpt-400"));
  CHECK_FALSE(fs::exists(md + "/checkpoint.tmp"));
  CHECK_FALSE(fs::exists(md + "/ckpt-300/ps-0.shard.tmp"));
  CHECK(fs::exists(md + "/ckpt-500/notes.txt"));
  CHECK_FALSE(fs::exists(md + "/ckpt-500/ps-0.shard"));
  for (const char* kept :
       {"/ckpt-300/MANIFEST", "/ckpt-300/ps-0.shard", "/ckpt-300/ps-1.shard", "/ckpt-300-backup",
        "/ckpt-0600", "/eval", "/job.json", "/ckpt-7", "/checkpoint"}) {
    INFO(kept);
    CHECK(fs::exists(md + kept));
  }
  CHECK(std::find(removed.begin(), removed.end(), md + "/ckpt-400") != removed.end());
  CHECK(removed.size() == 8);  // 4 files + dir in ckpt-400, 1 in ckpt-500, 2 strays
  CHECK(Steps(md) == std::vector<int64_t>{300});
  std::vector<std::string> warnings;
  REQUIRE(ps::ckpt::FindRestorable(md, &warnings, Verify::kFull).ok());
  CHECK(warnings.empty());
}

TEST_CASE("ApplyMaxToKeep deletes the oldest committed checkpoints") {
  TempDir dir;
  const std::string md = dir.path();
  for (int64_t step : {10, 20, 30, 40, 50}) Save(md, step);
  fs::create_directories(md + "/ckpt-5");
  WriteBytes(md + "/ckpt-5/MANIFEST", "damaged");  // not counted, not deleted

  REQUIRE(ps::ckpt::ApplyMaxToKeep(md, 0).ok());
  CHECK(Steps(md).size() == 5);
  REQUIRE(ps::ckpt::ApplyMaxToKeep(md, 5).ok());
  CHECK(Steps(md).size() == 5);
  std::vector<std::string> removed;
  REQUIRE(ps::ckpt::ApplyMaxToKeep(md, 2, &removed).ok());
  CHECK(Steps(md) == std::vector<int64_t>{40, 50});
  for (const char* gone : {"/ckpt-10", "/ckpt-20", "/ckpt-30"}) CHECK_FALSE(fs::exists(md + gone));
  CHECK(fs::exists(md + "/ckpt-5/MANIFEST"));
  CHECK(removed.size() == 3 * 4);  // MANIFEST, 2 shards, the directory
  REQUIRE(ps::ckpt::ApplyMaxToKeep(md, 1).ok());
  CHECK(Steps(md) == std::vector<int64_t>{50});
  CHECK(*ps::ckpt::ReadCheckpointPointer(md) == 50);
  std::vector<std::string> warnings;
  auto found = ps::ckpt::FindRestorable(md, &warnings);
  REQUIRE(found.ok());
  CHECK((*found)->global_step == 50);
  CHECK(warnings.size() == 1);  // the damaged ckpt-5 MANIFEST
}

// `pstrain inspect`'s listing: checkpoints, one checkpoint's variables and per-ps
// figures, damage found with and without --verify.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_file.h"
#include "libps/core/text.h"
#include "libps/obs/inspect.h"
#include "test/support/temp_dir.h"

using namespace ps;

namespace {

using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

// A checkpoint at `step` on two ps tasks:
//   ps 0: dense/kernel part 0/2 (rows 0-1 of [4,3], slot m), global_step (scalar)
//   ps 1: dense/kernel part 1/2 (rows 2-3, slot m), dense/bias ([3], slot m)
void SaveCheckpoint(const std::string& model_dir, int64_t step, bool final) {
  auto dir = ps::ckpt::CreateCheckpointDir(model_dir, step);
  REQUIRE(dir.ok());
  std::vector<float> kernel(12), m(12), bias(3), gs(1, static_cast<float>(step));
  for (size_t i = 0; i < kernel.size(); ++i) kernel[i] = 0.5f * static_cast<float>(i);
  ps::ckpt::Manifest manifest;
  manifest.global_step = step;
  manifest.unix_time =
      1700000000.0 + static_cast<double>(step);  // 2023-11-14 22:13:20 UTC + step s
  manifest.final = final;
  manifest.num_ps = 2;
  for (int ps_index = 0; ps_index < 2; ++ps_index) {
    auto w = ps::ckpt::ShardWriter::Create(*dir + "/" + ps::ckpt::ShardFileName(ps_index), ps_index,
                                           step);
    REQUIRE(w.ok());
    ps::ckpt::ShardRecordView k;
    k.layout.var = "dense/kernel";
    k.layout.shard = ps_index;
    k.layout.num_shards = 2;
    k.layout.row_begin = 2 * ps_index;
    k.layout.rows = 2;
    k.layout.cols = 3;
    k.layout.full_shape = {4, 3};
    k.values = std::span<const float>(kernel).subspan(6 * ps_index, 6);
    k.slots = {{"m", std::span<const float>(m).subspan(6 * ps_index, 6)}};
    REQUIRE(w->Append(k).ok());
    ps::ckpt::ShardRecordView r;
    if (ps_index == 0) {
      r.layout.var = "global_step";
      r.layout.rows = 1;
      r.layout.cols = 1;
      r.values = gs;
    } else {
      r.layout.var = "dense/bias";
      r.layout.rows = 3;
      r.layout.cols = 1;
      r.layout.full_shape = {3};
      r.values = bias;
      r.slots = {{"m", std::span<const float>(m).subspan(0, 3)}};
    }
    REQUIRE(w->Append(r).ok());
    auto info = w->Commit();
    REQUIRE(info.ok());
    manifest.shards.push_back(*info);
  }
  auto st = ps::ckpt::CommitCheckpoint(model_dir, manifest);
  INFO(st.ToString());
  REQUIRE(st.ok());
}

}  // namespace

TEST_CASE("inspect: lists checkpoints and the newest one's variables") {
  TempDir dir;
  SaveCheckpoint(dir.path(), 10, false);
  SaveCheckpoint(dir.path(), 20, true);
  const uint64_t shard0 = std::filesystem::file_size(dir / "ckpt-20/ps-0.shard");
  const uint64_t shard1 = std::filesystem::file_size(dir / "ckpt-20/ps-1.shard");
  const std::string size = ps::HumanBytes(shard0 + shard1);
  // The size column is as wide as the wider of "size" and the value.
  const size_t width = std::max<size_t>(4, size.size());
  auto pad = [&](const std::string& s) { return s + std::string(width - s.size(), ' '); };

  auto r = ps::obs::InspectModelDir(dir.path(), {});
  REQUIRE(r.ok());
  INFO(r->text);
  CHECK(r->healthy);
  const std::string expected =
      "model dir: " + dir.path() +
      "\n"
      "pointer:   ckpt-20\n"
      "2 committed checkpoints:\n"
      "  step  time (UTC)           " +
      pad("size") +
      "  ps  final  deltas\n"
      "  10    2023-11-14 22:13:30  " +
      pad(size) +
      "  2   no     -\n"
      "  20    2023-11-14 22:13:40  " +
      pad(size) +
      "  2   yes    -\n"
      "\n"
      "checkpoint ckpt-20: step 20, 2023-11-14 22:13:40 UTC, final, 2 ps tasks, " +
      size +
      "\n"
      "shard files: ok (sizes, headers and footers match the MANIFEST)\n"
      "  variable      part  rows  shape  ps  slots  bytes  data\n"
      "  dense/bias    0/1   all   [3]    1   m      24 B   unchecked\n"
      "  dense/kernel  0/2   0-1   [4,3]  0   m      48 B   unchecked\n"
      "  dense/kernel  1/2   2-3   [4,3]  1   m      48 B   unchecked\n"
      "  global_step   0/1   all   []     0   -      4 B    unchecked\n"
      "3 variables, 4 records, 124 B of data; data checksums not verified (use --verify)\n";
  // Per ps: the shard file's size and the record bytes (ps 0: 48 + 4, ps 1: 24 + 48).
  const std::string h0 = ps::HumanBytes(shard0), h1 = ps::HumanBytes(shard1);
  const size_t w = std::max({size_t{4}, h0.size(), h1.size()});
  auto padw = [&](const std::string& s) { return s + std::string(w - s.size(), ' '); };
  const std::string per_ps =
      "\n"
      "ps tasks (size: shard file, data: values and slots):\n"
      "  ps  file        " +
      padw("size") +
      "  data\n"
      "  0   ps-0.shard  " +
      padw(h0) +
      "  52 B\n"
      "  1   ps-1.shard  " +
      padw(h1) + "  72 B\n";
  CHECK(r->text == expected + per_ps);

  // With load figures in train_metrics.jsonl, the last line that has them is shown.
  {
    std::ofstream metrics(dir / "train_metrics.jsonl");
    metrics << R"({"step":5,"ps":[{"task":"ps:0","requests":1,"requests_per_s":1}]})"
            << "\n"
            << R"({"step":8,"ps":[{"task":"ps:1","requests":700,"requests_per_s":350.4,)"
            << R"("bytes_in_per_s":2048,"bytes_out_per_s":1048576},)"
            << R"({"task":"ps:0","state":"no answer"}]})"
            << "\n"
            << R"({"checkpoint":{"step":10}})"
            << "\n"
            << "{\"step\":9,\"ps\":[trunc\n";
  }
  r = ps::obs::InspectModelDir(dir.path(), {});
  REQUIRE(r.ok());
  const std::string with_load =
      "\n"
      "ps tasks (size: shard file, data: values and slots; load at step 8 of train_metrics.jsonl):\n"
      "  ps  file        " +
      padw("size") +
      "  data  requests  req/s  in/s       out/s\n"
      "  0   ps-0.shard  " +
      padw(h0) +
      "  52 B  -         -      -          -\n"
      "  1   ps-1.shard  " +
      padw(h1) + "  72 B  700       350    2.0 KiB/s  1.0 MiB/s\n";
  CHECK(r->text == expected + with_load);

  // --step and --verify.
  ps::obs::InspectOptions options;
  options.step = 10;
  options.verify = true;
  r = ps::obs::InspectModelDir(dir.path(), options);
  REQUIRE(r.ok());
  CHECK(r->healthy);
  CHECK(r->text.find("checkpoint ckpt-10: step 10, 2023-11-14 22:13:30 UTC, not final") !=
        std::string::npos);
  CHECK(r->text.find("  dense/kernel  1/2   2-3   [4,3]  1   m      48 B   ok\n") !=
        std::string::npos);
  CHECK(r->text.find("data checksums: all ok\n") != std::string::npos);

  options.step = 15;
  CHECK(ps::obs::InspectModelDir(dir.path(), options).status().message() ==
        dir.path() + ": no committed checkpoint at step 15 (have 10, 20)");
}

TEST_CASE("inspect: damaged data is found with verify; no checkpoints is NotFound") {
  TempDir dir;
  CHECK(ps::obs::InspectModelDir(dir.path(), {}).status().code() == ps::Code::kNotFound);
  CHECK(ps::obs::InspectModelDir(dir / "missing", {}).status().code() == ps::Code::kNotFound);

  SaveCheckpoint(dir.path(), 20, true);
  // Flip a byte of dense/bias's values in ps-1.shard: the last record's first data block.
  const std::string path = dir / "ckpt-20/ps-1.shard";
  std::string bytes = ReadBytes(path);
  const size_t bias_values = bytes.size() - 32 /*footer*/ - 2 * (12 + 4) /*two blocks + crcs*/;
  bytes[bias_values + 1] = static_cast<char>(bytes[bias_values + 1] ^ 0x40);
  WriteBytes(path, bytes);

  auto quick = ps::obs::InspectModelDir(dir.path(), {});
  REQUIRE(quick.ok());  // headers and footers are intact
  CHECK(quick->healthy);

  ps::obs::InspectOptions options;
  options.verify = true;
  auto r = ps::obs::InspectModelDir(dir.path(), options);
  REQUIRE(r.ok());
  INFO(r->text);
  CHECK(!r->healthy);
  CHECK(r->text.find("  dense/bias    0/1   all   [3]    1   m      24 B   CORRUPT: ") !=
        std::string::npos);
  CHECK(r->text.find("  dense/kernel  1/2   2-3   [4,3]  1   m      48 B   ok\n") !=
        std::string::npos);
  CHECK(r->text.find("data checksums: 1 record CORRUPT\n") != std::string::npos);

  // A truncated shard file: structural damage, reported in the text.
  WriteBytes(path, bytes.substr(0, bytes.size() - 10));
  r = ps::obs::InspectModelDir(dir.path(), {});
  REQUIRE(r.ok());
  CHECK(!r->healthy);
  CHECK(r->text.find("shard files: DAMAGED: ") != std::string::npos);
  CHECK(r->text.find("ps-1.shard: DAMAGED: ") != std::string::npos);
}

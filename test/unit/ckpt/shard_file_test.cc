#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "libps/ckpt/shard_file.h"
#include "libps/core/crc32c.h"
#include "test/support/temp_dir.h"

using ps::ckpt::ShardReader;
using ps::ckpt::ShardRecordView;
using ps::ckpt::ShardWriter;
using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i) * 0.5f;
  return v;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Owns the data a set of ShardRecordViews borrows.
struct Fixture {
  // dense_0/kernel [10 x 3] split in 2 shards; this file holds shard 1 (rows 5..9).
  std::vector<float> kernel = Iota(15, 12345.0f);
  std::vector<float> kernel_m = Iota(15, 777.0f);
  std::vector<float> kernel_v = Iota(15, -3.0f);
  // dense_0/bias [4], unsharded, no slots; awkward bit patterns on purpose.
  std::vector<float> bias = {-0.0f, std::numeric_limits<float>::denorm_min(),
                             std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::infinity()};
  // global_step-like scalar
  std::vector<float> scalar = {42.0f};

  std::vector<ShardRecordView> Views() const {
    std::vector<ShardRecordView> v(3);
    // std::string(...) assigned, not the literal: GCC 12 warns (-Wrestrict, a false positive
    // fixed in GCC 13) on assigning a literal to these strings.
    v[0].layout.var = std::string("dense_0/bias");
    v[0].layout.rows = 4;
    v[0].layout.cols = 1;
    v[0].layout.full_shape = {4};
    v[0].values = bias;
    v[1].layout.var = std::string("dense_0/kernel");
    v[1].layout.shard = 1;
    v[1].layout.num_shards = 2;
    v[1].layout.row_begin = 5;
    v[1].layout.rows = 5;
    v[1].layout.cols = 3;
    v[1].layout.full_shape = {10, 3};
    v[1].values = kernel;
    v[1].slots = {{"m", kernel_m}, {"v", kernel_v}};
    v[2].layout.var = std::string("scale");
    v[2].layout.rows = 1;
    v[2].layout.cols = 1;
    v[2].values = scalar;
    return v;
  }
};

ps::ckpt::ShardFileInfo WriteFixture(const std::string& path, const Fixture& f) {
  auto w = ShardWriter::Create(path, 3, 1200);
  REQUIRE(w.ok());
  for (const auto& r : f.Views()) REQUIRE(w->Append(r).ok());
  auto info = w->Commit();
  REQUIRE(info.ok());
  return *info;
}

// Reads the whole file the way a restore does; returns the status.
ps::Status ReadEverything(const std::string& path) {
  auto r = ShardReader::Open(path);
  if (!r.ok()) return r.status();
  auto recs = r->ReadRecords();
  return recs.status();
}

size_t FindBytes(const std::string& hay, const void* needle, size_t n) {
  return hay.find(std::string(static_cast<const char*>(needle), n));
}

}  // namespace

TEST_CASE("shard file: round trip is bit-exact") {
  TempDir dir;
  Fixture f;
  const std::string path = dir / "ps-3.shard";
  auto info = WriteFixture(path, f);
  CHECK(info.name == "ps-3.shard");
  CHECK(info.bytes == std::filesystem::file_size(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  auto r = ShardReader::Open(path);
  REQUIRE(r.ok());
  CHECK(r->ps_index() == 3);
  CHECK(r->global_step() == 1200);
  CHECK(r->record_count() == 3);
  CHECK(r->digest() == info.digest);
  auto recs = r->ReadRecords();
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 3);
  const auto& b = (*recs)[0];
  CHECK(b.meta.layout.var == "dense_0/bias");
  CHECK(b.meta.layout.full_shape == std::vector<int64_t>{4});
  CHECK(BitEqual(b.values, f.bias));
  CHECK(b.slots.empty());
  const auto& k = (*recs)[1];
  CHECK(k.meta.index == 1);
  CHECK(k.meta.layout.var == "dense_0/kernel");
  CHECK(k.meta.layout.shard == 1);
  CHECK(k.meta.layout.num_shards == 2);
  CHECK(k.meta.layout.row_begin == 5);
  CHECK(k.meta.layout.rows == 5);
  CHECK(k.meta.layout.cols == 3);
  CHECK(k.meta.layout.full_shape == std::vector<int64_t>{10, 3});
  CHECK(k.meta.slot_names == std::vector<std::string>{"m", "v"});
  CHECK(BitEqual(k.values, f.kernel));
  REQUIRE(k.slots.size() == 2);
  CHECK(k.slots[0].first == "m");
  CHECK(BitEqual(k.slots[0].second, f.kernel_m));
  CHECK(k.slots[1].first == "v");
  CHECK(BitEqual(k.slots[1].second, f.kernel_v));
  const auto& s = (*recs)[2];
  CHECK(s.meta.layout.full_shape.empty());
  CHECK(BitEqual(s.values, f.scalar));

  // Reading again, straight into caller memory, skipping one slot.
  std::vector<float> kernel(15, 0.0f), v(15, 0.0f);
  std::vector<std::string> calls;
  auto st = r->ReadAll(
      [&](const ps::ckpt::RecordMeta& m, std::string_view block) -> ps::Result<std::span<float>> {
        calls.push_back(m.layout.var + ":" + std::string(block));
        if (m.layout.var == "dense_0/kernel" && block == "values") return std::span<float>(kernel);
        if (m.layout.var == "dense_0/kernel" && block == "v") return std::span<float>(v);
        return std::span<float>();
      });
  REQUIRE(st.ok());
  CHECK(calls == std::vector<std::string>{"dense_0/bias:values", "dense_0/kernel:values",
                                          "dense_0/kernel:m", "dense_0/kernel:v", "scale:values"});
  CHECK(BitEqual(kernel, f.kernel));
  CHECK(BitEqual(v, f.kernel_v));
}

TEST_CASE("shard file: a large block written straight from the span round-trips") {
  TempDir dir;
  std::mt19937 rng(99);
  std::vector<float> big(300000);  // 1.2 MB, above the direct-write threshold
  for (auto& x : big) x = static_cast<float>(rng()) / 7.0f;
  std::vector<float> slot(big.rbegin(), big.rend());
  auto w = ShardWriter::Create(dir / "ps-0.shard", 0, 7);
  REQUIRE(w.ok());
  ShardRecordView r;
  r.layout.var = std::string("embedding");
  r.layout.rows = 1000;
  r.layout.cols = 300;
  r.layout.full_shape = {1000, 300};
  r.values = big;
  r.slots = {{"accumulator", slot}};
  REQUIRE(w->Append(r).ok());
  REQUIRE(w->Commit().ok());
  auto rd = ShardReader::Open(dir / "ps-0.shard");
  REQUIRE(rd.ok());
  auto recs = rd->ReadRecords();
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 1);
  CHECK(BitEqual((*recs)[0].values, big));
  CHECK(BitEqual((*recs)[0].slots[0].second, slot));
}

TEST_CASE("shard file: an empty file (no records) is valid; a zero-row record is not") {
  TempDir dir;
  {
    auto w = ShardWriter::Create(dir / "a.shard", 0, 0);
    REQUIRE(w.ok());
    REQUIRE(w->Commit().ok());
  }
  CHECK(std::filesystem::file_size(dir / "a.shard") == 64);
  auto r = ShardReader::Open(dir / "a.shard");
  REQUIRE(r.ok());
  CHECK(r->ReadRecords()->empty());

  // A variable has no zero-size dimension (placement refuses one), so neither has a record:
  // cluster::ValidateShardLayout requires rows and cols > 0.
  auto w = ShardWriter::Create(dir / "b.shard", 0, 0);
  REQUIRE(w.ok());
  ShardRecordView v;
  v.layout.var = std::string("empty_table");
  v.layout.rows = 0;
  v.layout.cols = 8;
  v.layout.full_shape = {0, 8};
  v.slots = {{"m", {}}};
  auto st = w->Append(v);
  CHECK(st.code() == ps::Code::kInvalidArgument);
  CHECK(st.message() == dir / "b.shard" +
                            ": record 0 (var \"empty_table\" shard 0): empty_table/part_0: rows "
                            "and cols must be > 0, got 0 x 8");
}

TEST_CASE("shard reader: a record whose layout fails the validator is DataLoss naming the field") {
  TempDir dir;
  const std::string path = dir / "ps-0.shard";
  std::vector<float> six(6, 1.0f);
  {
    auto w = ShardWriter::Create(path, 0, 1);
    REQUIRE(w.ok());
    ShardRecordView r;
    r.layout = {.var = "w",
                .shard = 0,
                .num_shards = 1,
                .row_begin = 0,
                .rows = 2,
                .cols = 3,
                .full_shape = {2, 3},
                .lazy = false};
    r.values = six;
    REQUIRE(w->Append(r).ok());
    REQUIRE(w->Commit().ok());
  }
  const std::string good = ReadBytes(path);
  // The metadata starts at 64 (file header, record header): u32 name length, "w", then
  // i32 shard at 69, i32 num_shards at 73, i64 row_begin at 77, i64 rows at 85.
  auto patched = [&](size_t offset, const void* value, size_t n) {
    std::string bytes = good;
    std::memcpy(bytes.data() + offset, value, n);
    uint32_t meta_len = 0;
    std::memcpy(&meta_len, bytes.data() + 32 + 8, 4);
    const uint32_t meta_crc = ps::MaskedCrc32c(ps::Crc32c(0, bytes.data() + 64, meta_len));
    std::memcpy(bytes.data() + 32 + 24, &meta_crc, 4);
    const uint32_t header_crc = ps::MaskedCrc32c(ps::Crc32c(0, bytes.data() + 32, 28));
    std::memcpy(bytes.data() + 32 + 28, &header_crc, 4);
    const std::string bad = dir / "bad.shard";
    WriteBytes(bad, bytes);
    auto st = ReadEverything(bad);
    CHECK(st.code() == ps::Code::kDataLoss);
    return st.message();
  };
  const std::string at = dir / "bad.shard" + ": record 0 at offset 32: malformed metadata: ";
  const int32_t one = 1;
  CHECK(patched(69, &one, 4) == at + "w/part_1: shard 1 is outside [0, num_shards 1)");
  const int64_t zero = 0;
  CHECK(patched(85, &zero, 8) == at + "w/part_0: rows and cols must be > 0, got 0 x 3");
  const int64_t two = 2;
  CHECK(patched(77, &two, 8) == at + "w/part_0: rows [2, 4) exceed full_shape[0] = 2");
}

TEST_CASE("shard writer: inconsistent records are InvalidArgument and the writer lives on") {
  TempDir dir;
  std::vector<float> six(6, 1.0f), five(5, 1.0f);
  auto w = ShardWriter::Create(dir / "ps-0.shard", 0, 1);
  REQUIRE(w.ok());
  auto bad = [&](auto mutate) {
    ShardRecordView r;
    r.layout.var = std::string("w");
    r.layout.rows = 2;
    r.layout.cols = 3;
    r.layout.full_shape = {2, 3};
    r.values = six;
    mutate(r);
    auto st = w->Append(r);
    CHECK(st.code() == ps::Code::kInvalidArgument);
    return st.message();
  };
  CHECK(bad([&](ShardRecordView& r) { r.values = five; }) ==
        dir / "ps-0.shard" +
            ": record 0 (var \"w\" shard 0): values has 5 floats, rows * cols = 6");
  bad([&](ShardRecordView& r) { r.layout.var.clear(); });
  bad([&](ShardRecordView& r) { r.slots = {{"m", five}}; });
  bad([&](ShardRecordView& r) { r.slots = {{"values", six}}; });
  bad([&](ShardRecordView& r) { r.slots = {{"m", six}, {"m", six}}; });
  bad([&](ShardRecordView& r) { r.slots = {{"", six}}; });
  bad([&](ShardRecordView& r) {
    r.layout.shard = 2;
    r.layout.num_shards = 2;
  });
  bad([&](ShardRecordView& r) { r.layout.num_shards = 0; });
  bad([&](ShardRecordView& r) { r.layout.row_begin = 1; });  // rows 1..3 outside [0, 2)
  bad([&](ShardRecordView& r) { r.layout.full_shape = {2, 4}; });
  bad([&](ShardRecordView& r) { r.layout.full_shape = {}; });
  bad([&](ShardRecordView& r) { r.layout.rows = -1; });
  ShardRecordView ok;
  ok.layout.var = std::string("w");
  ok.layout.rows = 2;
  ok.layout.cols = 3;
  ok.layout.full_shape = {2, 3};
  ok.values = six;
  REQUIRE(w->Append(ok).ok());
  REQUIRE(w->Commit().ok());
  CHECK(ShardReader::Open(dir / "ps-0.shard")->record_count() == 1);
  CHECK(w->Append(ok).code() == ps::Code::kFailedPrecondition);
}

TEST_CASE("shard writer: an uncommitted writer leaves nothing behind") {
  TempDir dir;
  std::vector<float> one = {1.0f};
  {
    auto w = ShardWriter::Create(dir / "ps-0.shard", 0, 1);
    REQUIRE(w.ok());
    CHECK(std::filesystem::exists(dir / "ps-0.shard.tmp"));
    ShardRecordView r;
    r.layout.var = std::string("x");
    r.layout.rows = 1;
    r.layout.cols = 1;
    r.layout.full_shape = {1};
    r.values = one;
    REQUIRE(w->Append(r).ok());
    ShardWriter moved = std::move(*w);  // the moved-from writer must not remove the file
    CHECK(std::filesystem::exists(dir / "ps-0.shard.tmp"));
  }
  CHECK(std::filesystem::is_empty(dir.path()));
  auto missing = ShardWriter::Create(dir / "no/such/dir/ps-0.shard", 0, 1);
  CHECK(missing.status().code() == ps::Code::kNotFound);
  CHECK(ShardReader::Open(dir / "ps-0.shard").status().code() == ps::Code::kNotFound);
}

TEST_CASE("shard file: checksum failures name the file, record, variable and block") {
  TempDir dir;
  Fixture f;
  const std::string path = dir / "ps-3.shard";
  WriteFixture(path, f);
  const std::string good = ReadBytes(path);

  size_t values_at = FindBytes(good, f.kernel.data() + 2, 4);
  REQUIRE(values_at != std::string::npos);
  std::string bytes = good;
  bytes[values_at] ^= 0x01;
  WriteBytes(path, bytes);
  auto st = ReadEverything(path);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK(st.message() ==
        path + ": record 1 (var \"dense_0/kernel\" shard 1): values checksum mismatch");

  size_t slot_at = FindBytes(good, f.kernel_v.data() + 14, 4);
  REQUIRE(slot_at != std::string::npos);
  bytes = good;
  bytes[slot_at + 3] ^= 0x40;
  WriteBytes(path, bytes);
  st = ReadEverything(path);
  CHECK(st.message() ==
        path + ": record 1 (var \"dense_0/kernel\" shard 1): slot \"v\" checksum mismatch");
  // Inspect keeps going and marks the record.
  auto summary = ps::ckpt::Inspect(path, true);
  REQUIRE(summary.ok());
  REQUIRE(summary->records.size() == 3);
  CHECK(summary->records[0].data_error.empty());
  CHECK(summary->records[1].data_error == "slot \"v\" checksum mismatch");
  CHECK(summary->records[2].data_error.empty());
  CHECK(ps::ckpt::Inspect(path, false).ok());  // structure intact, data not read

  size_t name_at = good.find("dense_0/kernel");
  REQUIRE(name_at != std::string::npos);
  bytes = good;
  bytes[name_at] = 'D';
  WriteBytes(path, bytes);
  st = ReadEverything(path);
  CHECK(st.message() == path + ": record 1 at offset " +
                            std::to_string(summary->records[1].offset) +
                            ": metadata checksum mismatch");

  bytes = good;
  bytes[0] = 'X';
  WriteBytes(path, bytes);
  CHECK(ReadEverything(path).message() == path + ": bad magic (not a pstrain shard file)");

  // A well-formed header from a future version (checksum recomputed).
  bytes = good;
  bytes[8] = 4;
  uint32_t crc = ps::MaskedCrc32c(ps::Crc32c(0, bytes.data(), 28));
  std::memcpy(bytes.data() + 28, &crc, 4);
  WriteBytes(path, bytes);
  st = ReadEverything(path);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK(st.message() == path + ": unsupported format version 4 (this build reads versions 1 to 3)");

  WriteBytes(path, good + "x");
  st = ReadEverything(path);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK(st.message().find("footer missing or corrupt") != std::string::npos);
  // Trailing garbage that happens to end in a valid footer: the sizes disagree.
  WriteBytes(path, good + good.substr(good.size() - 32));
  CHECK(ReadEverything(path).code() == ps::Code::kDataLoss);
}

TEST_CASE("shard file: every single-bit flip is detected") {
  TempDir dir;
  Fixture f;
  const std::string path = dir / "ps-3.shard";
  WriteFixture(path, f);
  const std::string good = ReadBytes(path);
  REQUIRE(good.size() < 1000);
  const std::string bad = dir / "bad.shard";
  int cases = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bytes = good;
      bytes[i] = static_cast<char>(bytes[i] ^ (1 << bit));
      WriteBytes(bad, bytes);
      auto st = ReadEverything(bad);
      INFO("byte " << i << " bit " << bit << ": " << st.ToString());
      CHECK(st.code() == ps::Code::kDataLoss);
      CHECK(st.message().rfind(bad + ": ", 0) == 0);
      // Inspect with verification either fails or marks a record.
      auto summary = ps::ckpt::Inspect(bad, true);
      if (summary.ok()) {
        int marked = 0;
        for (const auto& r : summary->records) marked += r.data_error.empty() ? 0 : 1;
        CHECK(marked == 1);
      } else {
        CHECK(summary.status().code() == ps::Code::kDataLoss);
      }
      ++cases;
    }
  }
  CHECK(cases == static_cast<int>(good.size()) * 8);
}

TEST_CASE("shard file: truncation at every length and appended bytes are detected") {
  TempDir dir;
  Fixture f;
  const std::string path = dir / "ps-3.shard";
  WriteFixture(path, f);
  const std::string good = ReadBytes(path);
  const std::string bad = dir / "bad.shard";
  for (size_t len = 0; len < good.size(); ++len) {
    WriteBytes(bad, good.substr(0, len));
    auto st = ReadEverything(bad);
    INFO("length " << len << ": " << st.ToString());
    CHECK(st.code() == ps::Code::kDataLoss);
    CHECK(ps::ckpt::Inspect(bad, false).status().code() == ps::Code::kDataLoss);
  }
  for (size_t extra : {1, 4, 31, 32, 33, 100}) {
    WriteBytes(bad, good + std::string(extra, '\0'));
    CHECK(ReadEverything(bad).code() == ps::Code::kDataLoss);
  }
}

TEST_CASE("shard file: random garbage and a crafted huge length never crash") {
  TempDir dir;
  const std::string bad = dir / "bad.shard";
  std::mt19937 rng(2024);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(64 + rng() % 400, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    if (i % 2 == 0) std::memcpy(bytes.data(), "PSCKPT01", 8);
    WriteBytes(bad, bytes);
    CHECK(ReadEverything(bad).code() == ps::Code::kDataLoss);
  }

  // A record header claiming a 2^60-byte block, with every checksum made valid.
  Fixture f;
  const std::string path = dir / "ps-3.shard";
  WriteFixture(path, f);
  std::string bytes = ReadBytes(path);
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(bytes.data() + 32 + 16, &huge, 8);
  uint32_t crc = ps::MaskedCrc32c(ps::Crc32c(0, bytes.data() + 32, 28));
  std::memcpy(bytes.data() + 32 + 28, &crc, 4);
  WriteBytes(bad, bytes);
  auto st = ReadEverything(bad);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK(st.message().find("do not fit in the file") != std::string::npos);
}

TEST_CASE("shard reader: sink contract") {
  TempDir dir;
  Fixture f;
  const std::string path = dir / "ps-3.shard";
  WriteFixture(path, f);
  auto r = ShardReader::Open(path);
  REQUIRE(r.ok());
  std::vector<float> wrong(3);
  auto st = r->ReadAll(
      [&](const ps::ckpt::RecordMeta&, std::string_view) -> ps::Result<std::span<float>> {
        return std::span<float>(wrong);
      });
  CHECK(st.code() == ps::Code::kInvalidArgument);
  CHECK(st.message() == path +
                            ": record 0 (var \"dense_0/bias\" shard 0): sink gave 3 floats "
                            "for values, the block has 4");
  st = r->ReadAll(
      [&](const ps::ckpt::RecordMeta& m, std::string_view) -> ps::Result<std::span<float>> {
        if (m.layout.var == "dense_0/kernel") return ps::NotFound("no variable " + m.layout.var);
        return std::span<float>();
      });
  CHECK(st.code() == ps::Code::kNotFound);
  CHECK(st.message() == "no variable dense_0/kernel");
}

TEST_CASE("Inspect lists records without reading data") {
  TempDir dir;
  Fixture f;
  const std::string path = dir / "ps-3.shard";
  auto info = WriteFixture(path, f);
  auto s = ps::ckpt::Inspect(path, false);
  REQUIRE(s.ok());
  CHECK(s->ps_index == 3);
  CHECK(s->global_step == 1200);
  CHECK(s->file_bytes == info.bytes);
  CHECK(s->digest == info.digest);
  REQUIRE(s->records.size() == 3);
  CHECK(s->records[0].offset == 32);
  CHECK(s->records[1].meta.layout.var == "dense_0/kernel");
  CHECK(s->records[1].data_bytes == 3 * 15 * 4);
  CHECK_FALSE(s->records[1].data_checked);
  auto v = ps::ckpt::Inspect(path, true);
  REQUIRE(v.ok());
  CHECK(v->records[1].data_checked);
  CHECK(v->records[1].data_error.empty());
}

TEST_CASE("shard file: a version 1 file (no sparse records) is still read") {
  TempDir dir;
  const std::string path = dir.path() + "/ps-3.shard";
  Fixture f;
  WriteFixture(path, f);
  std::string bytes = ReadBytes(path);
  // Rewrite the header as version 1. The footer digest is the CRC-32C of the 12 checksum
  // fields (48 bytes: header; per record header, metadata and each block) in file order;
  // only the first changes, so by CRC linearity over equal lengths the new digest is
  // old ^ crc(delta, 0...) ^ crc(0...).
  uint32_t old_crc = 0;
  std::memcpy(&old_crc, bytes.data() + 28, 4);
  bytes[8] = 1;
  uint32_t new_crc = ps::MaskedCrc32c(ps::Crc32c(0, bytes.data(), 28));
  std::memcpy(bytes.data() + 28, &new_crc, 4);
  std::string delta(48, '\0');
  const uint32_t x = old_crc ^ new_crc;
  std::memcpy(delta.data(), &x, 4);
  const std::string zeros(48, '\0');
  const size_t footer = bytes.size() - 32;
  uint32_t digest = 0;
  std::memcpy(&digest, bytes.data() + footer + 24, 4);
  digest ^= ps::Crc32c(0, delta.data(), 48) ^ ps::Crc32c(0, zeros.data(), 48);
  std::memcpy(bytes.data() + footer + 24, &digest, 4);
  uint32_t footer_crc = ps::MaskedCrc32c(ps::Crc32c(0, bytes.data() + footer, 28));
  std::memcpy(bytes.data() + footer + 28, &footer_crc, 4);
  WriteBytes(path, bytes);

  auto r = ShardReader::Open(path);
  REQUIRE(r.ok());
  auto recs = r->ReadRecords();
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 3);
  CHECK(BitEqual((*recs)[1].values, f.kernel));
  CHECK_FALSE((*recs)[1].meta.layout.lazy);
}

TEST_CASE("shard file: a sparse record round-trips its row ids, values and slots") {
  TempDir dir;
  const std::string path = dir.path() + "/ps-0.shard";
  std::vector<int64_t> ids = {2, 7, 1000000007};
  std::vector<float> values = Iota(6, 1.0f);
  std::vector<float> acc = Iota(6, 100.0f);
  ShardRecordView v;
  v.layout.var = std::string("emb");
  v.layout.rows = int64_t{1} << 40;
  v.layout.cols = 2;
  v.layout.full_shape = {int64_t{1} << 40, 2};
  v.layout.lazy = true;
  v.row_ids = ids;
  v.values = values;
  v.slots = {{"accumulator", acc}};
  auto w = ShardWriter::Create(path, 0, 5);
  REQUIRE(w.ok());
  REQUIRE(w->Append(v).ok());
  std::vector<int64_t> bad_ids = {7, 2, 9};
  ShardRecordView bad = v;
  bad.row_ids = bad_ids;
  CHECK(w->Append(bad).code() == ps::Code::kInvalidArgument);
  REQUIRE(w->Commit().ok());

  auto r = ShardReader::Open(path);
  REQUIRE(r.ok());
  auto recs = r->ReadRecords();
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 1);
  const auto& rec = (*recs)[0];
  CHECK(rec.meta.layout.lazy);
  CHECK(rec.meta.stored_rows == 3);
  CHECK(rec.row_ids == ids);
  CHECK(BitEqual(rec.values, values));
  REQUIRE(rec.slots.size() == 1);
  CHECK(BitEqual(rec.slots[0].second, acc));
  // Readers that give no SparseSink (e.g. verification) walk over it.
  CHECK(
      r->ReadAll([](const ps::ckpt::RecordMeta&, std::string_view) -> ps::Result<std::span<float>> {
         return std::span<float>();
       }).ok());
}

// ShardReader::Read: selected row ranges of a dense block go to the visitor, the rows
// between them are still read for the block's checksum; an unselected record is skipped
// unread (its damage then goes unseen, but the footer's digest still holds).
TEST_CASE(
    "shard reader: Read hands out selected rows, verifies whole blocks, skips unselected records") {
  TempDir dir;
  const std::string path = dir / "ps-3.shard";
  Fixture f;
  WriteFixture(path, f);
  using RowRange = ShardReader::RowRange;
  struct Got {
    std::string block;
    RowRange range;
    std::vector<float> data;
  };
  std::vector<Got> got;
  std::vector<float> buffer;
  ShardReader::Visitor v;
  v.select = [](const ps::ckpt::RecordMeta& m) -> ps::Result<std::optional<std::vector<RowRange>>> {
    if (m.layout.var != "dense_0/kernel") return std::optional<std::vector<RowRange>>();
    return std::optional<std::vector<RowRange>>(std::vector<RowRange>{{1, 2}, {4, 1}});
  };
  v.dense = [&](const ps::ckpt::RecordMeta& m, std::string_view block,
                RowRange r) -> ps::Result<std::span<float>> {
    got.push_back(
        {std::string(block), r, std::vector<float>(static_cast<size_t>(r.count * m.layout.cols))});
    return std::span<float>(got.back().data);
  };
  auto r = ShardReader::Open(path);
  REQUIRE(r.ok());
  REQUIRE(r->Read(v).ok());
  REQUIRE(got.size() == 6);  // 2 ranges x (values, m, v)
  const std::vector<const std::vector<float>*> blocks = {&f.kernel, &f.kernel_m, &f.kernel_v};
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].block == std::vector<std::string>{"values", "m", "v"}[i / 2]);
    const auto& want = *blocks[i / 2];
    const RowRange range = got[i].range;
    CHECK(range.first == (i % 2 == 0 ? 1 : 4));
    CHECK(
        BitEqual(got[i].data, std::vector<float>(want.begin() + range.first * 3,
                                                 want.begin() + (range.first + range.count) * 3)));
  }

  // Damage row 0 of the kernel's values (not selected): still a checksum mismatch.
  std::string bytes = ReadBytes(path);
  const float first = f.kernel[0];
  size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&first), 4));
  REQUIRE(at != std::string::npos);
  bytes[at] ^= 0x01;
  WriteBytes(path, bytes);
  got.clear();
  auto damaged = ShardReader::Open(path);
  REQUIRE(damaged.ok());
  auto st = damaged->Read(v);
  CHECK(st.code() == ps::Code::kDataLoss);
  CHECK_THAT(st.message(), Catch::Contains("values checksum mismatch"));
  // Nobody selects the kernel: it is skipped unread and the file reads clean.
  v.select = [](const ps::ckpt::RecordMeta& m) -> ps::Result<std::optional<std::vector<RowRange>>> {
    if (m.layout.var == "dense_0/kernel") return std::optional<std::vector<RowRange>>();
    return std::optional<std::vector<RowRange>>(std::vector<RowRange>{{0, m.stored_rows}});
  };
  got.clear();
  CHECK(damaged->Read(v).ok());
  CHECK(got.size() == 2);  // bias and scale values
  // Ranges out of order are the caller's bug: InvalidArgument.
  v.select = [](const ps::ckpt::RecordMeta&) -> ps::Result<std::optional<std::vector<RowRange>>> {
    return std::optional<std::vector<RowRange>>(std::vector<RowRange>{{0, 1}, {0, 1}});
  };
  CHECK(damaged->Read(v).code() == ps::Code::kInvalidArgument);
}

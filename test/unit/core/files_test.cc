// AppendOnlyFile: whole records or nothing, and appends that resume after a failure.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "libps/core/crc32c.h"
#include "libps/core/files.h"

namespace ps {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE(
    "AppendOnlyFile adds whole records to what the file held; a reopened appender goes on after them") {
  auto dir =
      std::filesystem::temp_directory_path() / ("pstrain-lines-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "log.jsonl").string();
  {
    auto a = AppendOnlyFile::Open(path);
    REQUIRE(a.ok());
    CHECK(a->Append("{\"a\":1}\n").ok());
    CHECK(a->Append("{\"b\":2}\n").ok());
  }
  auto b = AppendOnlyFile::Open(path);
  REQUIRE(b.ok());
  CHECK(b->Append("{\"c\":3}\n").ok());
  CHECK(Slurp(path) == "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "AppendOnlyFile on a full device: the error names the file and the cause, and the next append is tried again") {
  auto a = AppendOnlyFile::Open("/dev/full");  // every write fails with ENOSPC
  REQUIRE(a.ok());
  Status first = a->Append("{\"step\":1}");
  CHECK(first.code() == Code::kIo);
  CHECK_THAT(first.message(), Catch::StartsWith("/dev/full: write: No space left on device"));
  CHECK_FALSE(a->Append("{\"step\":2}").ok());  // still tried (and failing), not stuck closed
}

TEST_CASE("AppendOnlyFile: create_new refuses an existing file (AlreadyExists)") {
  auto dir = std::filesystem::temp_directory_path() / ("pstrain-new-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "events").string();
  REQUIRE(AppendOnlyFile::Open(path, true).ok());
  CHECK(AppendOnlyFile::Open(path, true).status().code() == Code::kAlreadyExists);
  CHECK(AppendOnlyFile::Open(path).ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("AppendOnlyFile: a directory that does not exist is an error naming the path") {
  auto a = AppendOnlyFile::Open("/nonexistent-pstrain-dir/log.jsonl");
  REQUIRE_FALSE(a.ok());
  CHECK_THAT(a.status().message(), Catch::Contains("/nonexistent-pstrain-dir/log.jsonl: open"));
}

TEST_CASE(
    "SumFile and ReadChunks: size and CRC over chunks, errors name the path, a chunk can fail the read") {
  auto dir = std::filesystem::temp_directory_path() / ("pstrain-sum-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f").string();
  // Larger than one chunk (4 MiB), so that the CRC is extended across chunks.
  std::string bytes(size_t{9} << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto sum = SumFile(path);
  REQUIRE(sum.ok());
  CHECK(sum->bytes == bytes.size());
  CHECK(sum->crc == MaskedCrc32c(Crc32c(0, bytes.data(), bytes.size())));
  int chunks = 0;
  Status st = ReadChunks(path, [&](std::span<const unsigned char>) {
    return ++chunks == 2 ? DataLoss("stop") : Status::Ok();
  });
  CHECK(st.message() == "stop");
  CHECK(chunks == 2);
  auto missing = SumFile((dir / "missing").string());
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains((dir / "missing").string()));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ps

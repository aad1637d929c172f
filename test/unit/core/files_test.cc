// LineAppender: whole lines or nothing, and appends that resume after a failure.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "libps/core/files.h"

namespace ps {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("LineAppender adds whole lines to what the file held; a reopened appender goes on after them") {
  auto dir = std::filesystem::temp_directory_path() / ("pstrain-lines-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "log.jsonl").string();
  {
    auto a = LineAppender::Open(path);
    REQUIRE(a.ok());
    CHECK(a->Append("{\"a\":1}").ok());
    CHECK(a->Append("{\"b\":2}").ok());
  }
  auto b = LineAppender::Open(path);
  REQUIRE(b.ok());
  CHECK(b->Append("{\"c\":3}").ok());
  CHECK(Slurp(path) == "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("LineAppender on a full device: the error names the file and the cause, and the next append is tried again") {
  auto a = LineAppender::Open("/dev/full");  // every write fails with ENOSPC
  REQUIRE(a.ok());
  Status first = a->Append("{\"step\":1}");
  CHECK(first.code() == Code::kIo);
  CHECK_THAT(first.message(), Catch::StartsWith("/dev/full: write: No space left on device"));
  CHECK_FALSE(a->Append("{\"step\":2}").ok());  // still tried (and failing), not stuck closed
}

TEST_CASE("LineAppender: a directory that does not exist is an error naming the path") {
  auto a = LineAppender::Open("/nonexistent-pstrain-dir/log.jsonl");
  REQUIRE_FALSE(a.ok());
  CHECK_THAT(a.status().message(), Catch::Contains("/nonexistent-pstrain-dir/log.jsonl: open"));
}

}  // namespace
}  // namespace ps

// Bounded messages: quoted input (CutText, QuoteInput) and log lines (log::BoundLine, the
// logger itself).
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "libps/core/json.h"
#include "libps/core/log.h"
#include "libps/core/text.h"

namespace ps {
namespace {

using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

TEST_CASE("QuoteInput: at most 256 bytes of input, then how many more there were") {
  CHECK(QuoteInput("abc") == "'abc'");
  CHECK(QuoteInput(std::string(256, 'x')) == "'" + std::string(256, 'x') + "'");
  const std::string quoted = QuoteInput(std::string(10 << 20, 'x'));
  CHECK(quoted == "'" + std::string(256, 'x') + "\u2026 (" + std::to_string((10 << 20) - 256) +
                      " bytes more)'");
}

TEST_CASE("CutText never ends inside a UTF-8 sequence") {
  // 255 ASCII bytes, then a 3-byte character across the 256-byte boundary.
  const std::string text = std::string(255, 'a') + "\u20ac" + std::string(100, 'b');
  const std::string cut = CutText(text);
  CHECK_THAT(cut, StartsWith(std::string(255, 'a') + "\u2026 ("));
  std::string more = "(";  // appended: GCC 12 -O3 reports a false -Wrestrict on "(" + string
  more.append(std::to_string(text.size() - 255)).append(" bytes more)");
  CHECK_THAT(cut, EndsWith(more));
  CHECK(CutText("short", 3) == "sho\u2026 (2 bytes more)");
}

TEST_CASE("a JSON parse error quotes at most 256 bytes of what it read") {
  // A string that never ends: the parser's message quotes all of it.
  auto parsed = ParseJson("[\"" + std::string(1 << 20, 'x'), "job");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().message().size() < 600);
  CHECK_THAT(parsed.status().message(), Catch::Contains("bytes more)"));
}

TEST_CASE("a log line is at most 4 KiB, its newline included") {
  CHECK(log::BoundLine("short") == "short");
  const std::string bounded = log::BoundLine(std::string(1 << 20, 'y'));
  CHECK(bounded.size() + 1 <= log::kMaxLineBytes);
  CHECK_THAT(bounded, EndsWith(" bytes more)"));

  // The logger itself: stderr into a file for one line.
  char path[] = "/tmp/pstrain-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  log::SetTag("ps:0");
  PS_LOG(Error) << "bad token '" << std::string(10 << 20, 'z') << "'";
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string written(2 * log::kMaxLineBytes, '\0');
  const ssize_t n = ::pread(fd, written.data(), written.size(), 0);
  ::close(fd);
  ::unlink(path);
  REQUIRE(n > 0);
  written.resize(static_cast<size_t>(n));
  CHECK(written.size() <= log::kMaxLineBytes);
  CHECK(written.back() == '\n');
  CHECK(written.find('\n') == written.size() - 1);
  CHECK_THAT(written, Catch::Contains("[ps:0] bad token 'zzz"));
  CHECK_THAT(written, EndsWith(" bytes more)\n"));
}

}  // namespace
}  // namespace ps

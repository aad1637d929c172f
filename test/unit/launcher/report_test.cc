// `pstrain report` and `pstrain inspect` in-process: the page lands atomically where
// asked (no temp file left), failures are exit 1.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "launcher/report.h"
#include "test/support/temp_dir.h"

using namespace ps::launcher;
using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

TEST_CASE("report: the page is written atomically to --out or MODEL_DIR/report.html") {
  TempDir dir;
  WriteBytes(dir / "train_metrics.jsonl", "{\"step\":1,\"loss\":2.0}\n");
  REQUIRE(RunReport(ReportCommand{dir.path(), "", std::nullopt}) == 0);
  CHECK(ReadBytes(dir / "report.html").rfind("<!DOCTYPE html>", 0) == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "report.html.tmp"));

  // An existing page is replaced whole.
  WriteBytes(dir / "other.html", "old");
  REQUIRE(RunReport(ReportCommand{dir.path(), dir / "other.html", std::nullopt}) == 0);
  CHECK(ReadBytes(dir / "other.html") == ReadBytes(dir / "report.html"));
  CHECK_FALSE(std::filesystem::exists(dir / "other.html.tmp"));

  CHECK(RunReport(ReportCommand{dir.path(), dir / "no/such/dir/r.html", std::nullopt}) == 1);
  CHECK(RunReport(ReportCommand{dir / "missing", "", std::nullopt}) == 1);
  CHECK(RunInspect(InspectCommand{dir.path(), std::nullopt, false}) == 1);  // no checkpoint
}

TEST_CASE(
    "report --watch: the page follows a growing metrics file and the command ends with the run") {
  using namespace std::chrono_literals;
  TempDir dir;
  WriteBytes(dir / "train_metrics.jsonl", "{\"step\":100,\"loss\":2.0}\n");
  auto done = std::async(std::launch::async, [&] {
    return RunReport(ReportCommand{dir.path(), "", 0.05});
  });
  auto page_has = [&](const std::string& text) {
    // Waits on the page's content (re-read every 10 ms), up to 20 s.
    for (auto end = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(10ms)) {
      if (std::filesystem::exists(dir / "report.html") &&
          ReadBytes(dir / "report.html").find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  REQUIRE(page_has("<!DOCTYPE html>"));
  CHECK(done.wait_for(0s) == std::future_status::timeout);  // still watching: the run goes on
  {
    std::ofstream append(dir / "train_metrics.jsonl", std::ios::app);
    append << "{\"step\":7300,\"loss\":1.0}\n";
  }
  CHECK(page_has("7,300"));  // a step only the appended line has
  CHECK(done.wait_for(0s) == std::future_status::timeout);
  {
    std::ofstream append(dir / "train_metrics.jsonl", std::ios::app);
    append << "{\"checkpoint\":{\"step\":7300,\"final\":true}}\n";
  }
  REQUIRE(done.wait_for(20s) == std::future_status::ready);  // the final checkpoint ends the watch
  CHECK(done.get() == 0);
}

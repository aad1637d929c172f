// Reading the metrics files: the fields, the chief's final evaluation, lenient lines (bad
// ones skipped and noted), missing files. Sorting by step: report_test's out-of-order case.
#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libps/obs/metrics.h"
#include "test/support/temp_dir.h"

using namespace ps;

using ps::testing::TempDir;
using ps::testing::WriteBytes;

TEST_CASE("metrics: bad lines are skipped and noted") {
  TempDir dir;
  WriteBytes(dir / "train_metrics.jsonl",
             "[1,2]\n{\"step\":5,\"loss\":0.5}\n{\"loss\":0.1}\n{\"step\":6,\"loss\":0.4,\"acc\n"
             "{\"step\":7,\"loss\":0.4,\"acc");  // a bad line, then an append in progress
  WriteBytes(dir / "eval/metrics.jsonl", "{\"step\":5,\"accuracy\":0.25}\n");
  auto h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  REQUIRE(h->train.size() == 1);
  CHECK(h->train[0].step == 5);
  REQUIRE(h->notes.size() == 1);
  CHECK(h->notes[0] == "train_metrics.jsonl: 3 lines skipped (line 1: not a JSON object)");
}

TEST_CASE("metrics: a running job's last line, not yet whole, is neither taken nor noted") {
  TempDir dir;
  WriteBytes(dir / "train_metrics.jsonl", "{\"step\":5,\"loss\":0.5}\n{\"step\":7,\"lo");
  auto h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  REQUIRE(h->train.size() == 1);
  CHECK(h->notes.empty());
  // Whole but without its newline yet: taken.
  WriteBytes(dir / "train_metrics.jsonl", "{\"step\":5,\"loss\":0.5}\n{\"step\":7,\"loss\":0.4}");
  h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  CHECK(h->train.size() == 2);
  CHECK(h->notes.empty());
}

TEST_CASE("metrics: fields, the chief's final evaluation, missing files") {
  TempDir dir;
  CHECK(ps::obs::ReadMetrics(dir / "missing").status().code() == Code::kNotFound);

  WriteBytes(
      dir / "train_metrics.jsonl",
      "{\"step\":10,\"total_steps\":20.0,\"loss\":null,\"accuracy\":\"x\",\"examples_per_sec\":5}\n"
      "\n"
      "{\"final_eval\":{\"accuracy\":0.5}}\n"
      "{\"final_eval\":{\"step\":20,\"accuracy\":0.75,\"auc\":0.8,\"examples\":100}}\n");
  auto h = ps::obs::ReadMetrics(dir.path());
  REQUIRE(h.ok());
  REQUIRE(h->train.size() == 1);
  CHECK(h->train[0].step == 10);
  CHECK(h->train[0].total_steps == std::optional<int64_t>(20));
  CHECK_FALSE(h->train[0].loss.has_value());      // null
  CHECK_FALSE(h->train[0].accuracy.has_value());  // not a number
  CHECK(h->train[0].examples_per_sec == std::optional<double>(5));
  REQUIRE(h->final_eval.has_value());
  CHECK(h->final_eval->step == 20);
  CHECK(h->final_eval->auc == std::optional<double>(0.8));
  CHECK(h->final_eval->examples == std::optional<int64_t>(100));
  CHECK(h->eval.empty());
  // The blank line 2 is passed over; line 3 is skipped.
  CHECK(h->notes ==
        std::vector<std::string>{
            "train_metrics.jsonl: 1 line skipped (line 3: final_eval without a numeric step)"});
}

// `pstrain export` and `pstrain predict`: their command lines, the score line format and
// the --data argument (the commands themselves run in test/integration/serving_test.cc).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <variant>
#include <vector>

#include "launcher/cli.h"
#include "launcher/serving.h"
#include "test/support/temp_dir.h"

using namespace ps;
using namespace ps::launcher;

namespace {

Result<Command> Parse(std::vector<std::string> args) { return ParseLauncherArgs(args); }

std::string Error(std::vector<std::string> args) {
  auto c = Parse(args);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kInvalidArgument);
  return c.status().message();
}

}  // namespace

TEST_CASE("export and predict: values, help and usage errors") {
  auto e = Parse({"export", "/m", "--out", "/b", "--step", "300"});
  REQUIRE(e.ok());
  const auto& ex = std::get<ExportCommand>(*e);
  CHECK(ex.model_dir == "/m");
  CHECK(ex.out_dir == "/b");
  CHECK(ex.step == std::optional<int64_t>(300));
  CHECK(std::get<ExportCommand>(*Parse({"export", "/m", "--out", "/b"})).step == std::nullopt);
  CHECK(Error({"export", "/m"}) == "pstrain export: --out DIR is required");
  CHECK(Error({"export", "--out", "/b"}) == "pstrain export: MODEL_DIR is required");
  CHECK(Error({"export", "/m", "--out", "/b", "--step", "-1"}) ==
        "pstrain export: --step: -1 is negative");

  auto p = Parse({"predict", "--model", "/b", "--data", "{}", "--out", "s", "--metrics", "m.json"});
  REQUIRE(p.ok());
  const auto& pr = std::get<PredictCommand>(*p);
  CHECK(pr.model == "/b");
  CHECK(pr.data == "{}");
  CHECK(pr.out == "s");
  CHECK(pr.metrics_out == "m.json");
  CHECK(pr.step == std::nullopt);
  CHECK(Error({"predict", "--data", "{}"}) == "pstrain predict: --model DIR is required");
  CHECK(Error({"predict", "--model", "/b"}) == "pstrain predict: --data DATA is required");
  CHECK(Error({"predict", "--model", "/b", "--data", "d", "x"}).rfind("pstrain predict: ", 0) == 0);

  for (const char* sub : {"export", "predict"}) {
    auto h = Parse({sub, "--help"});
    REQUIRE(h.ok());
    CHECK(std::get<HelpCommand>(*h).text.rfind(std::string("usage: pstrain ") + sub, 0) == 0);
  }
  CHECK(std::get<HelpCommand>(*Parse({"--help"})).text.find("  predict ") != std::string::npos);
}

TEST_CASE("score lines: a head's outputs by spaces, heads by tabs, 9 significant digits") {
  model::EvalOutput out;
  out.examples = 2;
  out.heads.resize(2);
  out.heads[0].predictions = {0.1f, 0.2f, 0.7f, 1.0f / 3, 0.5f, 1e-9f};  // softmax, 3 classes
  out.heads[1].predictions = {0.25f, 123456.789f};                       // one output
  CHECK(FormatScoreLine(out, 0) == "0.100000001 0.200000003 0.699999988\t0.25");
  CHECK(FormatScoreLine(out, 1) == "0.333333343 0.5 9.99999972e-10\t123456.789");
  // Every float32 round-trips through its line.
  const float x = 0.1f + 1e-8f;
  out.examples = 1;
  out.heads.resize(1);
  out.heads[0].predictions = {x};
  CHECK(std::stof(FormatScoreLine(out, 0)) == x);
}

TEST_CASE("--data: JSON text from the current directory, or a file from its own") {
  auto text = ReadDataArg(R"({"format": "libsvm", "path": "a.libsvm"})");
  REQUIRE(text.ok());
  CHECK(text->first["path"] == "a.libsvm");
  CHECK(text->second == std::filesystem::current_path().string());
  ps::testing::TempDir tmp;
  ps::testing::WriteBytes(tmp / "d/data.json", R"({"format": "idx"})");
  auto file = ReadDataArg(tmp / "d/data.json");
  REQUIRE(file.ok());
  CHECK(file->first["format"] == "idx");
  CHECK(file->second == tmp / "d");
  CHECK(!ReadDataArg(tmp / "missing.json").ok());
  CHECK(ReadDataArg("{not json").status().code() == Code::kInvalidArgument);
}

TEST_CASE(
    "--metrics FILE: the metrics as JSON; without labels an old FILE is removed and the note says so") {
  ps::testing::TempDir tmp;
  const std::string path = tmp / "m.json";
  scoring::EvalMetrics m;
  m.examples = 10;
  m.accuracy = 0.5;
  m.loss = 0.25;
  auto written = WriteMetricsFile(path, 7, m);
  REQUIRE(written.ok());
  CHECK(written->empty());
  auto json = ReadJsonFile(path);
  REQUIRE(json.ok());
  CHECK((*json)["step"] == 7);
  CHECK((*json)["examples"] == 10);
  CHECK((*json)["loss"] == 0.25);

  auto none = WriteMetricsFile(path, 8, std::nullopt);
  REQUIRE(none.ok());
  CHECK(*none ==
        "--metrics " + path + ": not written: the data has no labels (the old file was removed)");
  CHECK(!std::filesystem::exists(path));
  none = WriteMetricsFile(path, 8, std::nullopt);
  REQUIRE(none.ok());
  CHECK(*none == "--metrics " + path + ": not written: the data has no labels");
}

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "libps/model/initializer.h"

using namespace ps::model;

namespace {

// The whole variable's values when split into `num_shards` TF "div" partitions
// (13 rows over 5 → 3, 3, 3, 2, 2) and each shard filled on its own.
std::vector<float> FillPartitioned(const InitSpec& spec, uint64_t seed, const char* var,
                                   std::vector<int64_t> shape, int64_t num_shards) {
  const int64_t rows = shape[0];
  int64_t cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  std::vector<float> all(static_cast<size_t>(rows * cols));
  int64_t begin = 0;
  for (int64_t s = 0; s < num_shards; ++s) {
    int64_t n = rows / num_shards + (s < rows % num_shards ? 1 : 0);
    FillInitial(
        spec, seed, var, shape, begin, n, cols,
        std::span(all).subspan(static_cast<size_t>(begin * cols), static_cast<size_t>(n * cols)));
    begin += n;
  }
  REQUIRE(begin == rows);
  return all;
}

struct Moments {
  double mean = 0, stddev = 0, min = 1e300, max = -1e300;
};
Moments Stats(const std::vector<float>& v) {
  Moments m;
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    m.min = std::min(m.min, double(x));
    m.max = std::max(m.max, double(x));
  }
  m.mean = sum / double(v.size());
  for (float x : v) sq += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(sq / double(v.size()));
  return m;
}

std::vector<float> Sample(const InitSpec& spec, std::vector<int64_t> shape, uint64_t seed = 7) {
  int64_t cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  std::vector<float> v(static_cast<size_t>(shape[0] * cols));
  FillInitial(spec, seed, "w", shape, 0, shape[0], cols, v);
  return v;
}

}  // namespace

TEST_CASE("initial values do not depend on the partitioning") {
  for (const InitSpec& spec :
       {InitSpec{InitKind::kUniform, -1, 1}, InitSpec{InitKind::kNormal, 0, 1},
        InitSpec{InitKind::kTruncatedNormal, 0.5, 2}, InitSpec{InitKind::kGlorotUniform, 0, 0}}) {
    INFO(InitKindName(spec.kind));
    auto one = FillPartitioned(spec, 42, "emb", {13, 4, 3}, 1);
    auto five = FillPartitioned(spec, 42, "emb", {13, 4, 3}, 5);
    CHECK(one == five);
    CHECK(one[5 * 12 + 7] == InitialValue(spec, 42, "emb", std::vector<int64_t>{13, 4, 3}, 5, 7));
    // Seed and variable name each change the values.
    CHECK(one != FillPartitioned(spec, 43, "emb", {13, 4, 3}, 1));
    CHECK(one != FillPartitioned(spec, 42, "emb2", {13, 4, 3}, 1));
  }
}

TEST_CASE("constant initializers") {
  CHECK(Sample({InitKind::kZeros, 0, 0}, {3, 2}) == std::vector<float>(6, 0.0f));
  CHECK(Sample({InitKind::kOnes, 0, 0}, {3, 2}) == std::vector<float>(6, 1.0f));
  CHECK(Sample({InitKind::kConstant, 0.25, 0}, {3, 2}) == std::vector<float>(6, 0.25f));
}

TEST_CASE("uniform stays in bounds with the right moments") {
  auto v = Sample({InitKind::kUniform, -0.5, 1.5}, {1000, 100});
  auto m = Stats(v);
  CHECK(m.min >= -0.5);
  CHECK(m.max < 1.5);
  CHECK(m.min < -0.49);
  CHECK(m.max > 1.49);
  CHECK(m.mean == Approx(0.5).margin(0.01));  // sd of the mean ≈ 0.0018
  CHECK(m.stddev == Approx(2.0 / std::sqrt(12.0)).epsilon(0.01));
}

TEST_CASE("normal and truncated normal moments on 100k samples") {
  auto n = Stats(Sample({InitKind::kNormal, 1.0, 0.5}, {1000, 100}));
  CHECK(n.mean == Approx(1.0).margin(0.01));  // sd of the mean ≈ 0.0016
  CHECK(n.stddev == Approx(0.5).epsilon(0.01));
  CHECK(n.min < 1.0 - 2 * 0.5);  // tails reach beyond 2 stddev (p ≈ 2.3% per sample)

  auto t = Stats(Sample({InitKind::kTruncatedNormal, 1.0, 0.5}, {1000, 100}));
  CHECK(t.min >= 1.0 - 2 * 0.5 - 1e-6);
  CHECK(t.max <= 1.0 + 2 * 0.5 + 1e-6);
  CHECK(t.mean == Approx(1.0).margin(0.01));
  // A N(0, 1) truncated at ±2 has stddev 0.87962.
  CHECK(t.stddev == Approx(0.5 * 0.87962).epsilon(0.01));
}

TEST_CASE("glorot_uniform uses Keras's fans") {
  CHECK(ComputeFans(std::vector<int64_t>{}) == std::pair(1.0, 1.0));
  CHECK(ComputeFans(std::vector<int64_t>{7}) == std::pair(7.0, 7.0));
  CHECK(ComputeFans(std::vector<int64_t>{300, 100}) == std::pair(300.0, 100.0));
  // conv kernel 3x3, 16 in, 32 out: receptive field 9
  CHECK(ComputeFans(std::vector<int64_t>{3, 3, 16, 32}) == std::pair(144.0, 288.0));

  double limit = std::sqrt(6.0 / 400.0);
  auto m = Stats(Sample({InitKind::kGlorotUniform, 0, 0}, {300, 100}));
  CHECK(m.min >= -limit);
  CHECK(m.max <= limit);
  CHECK(m.max > 0.99 * limit);
  CHECK(m.min < -0.99 * limit);
  CHECK(m.stddev == Approx(limit / std::sqrt(3.0)).epsilon(0.01));
}

TEST_CASE("ParseInit") {
  auto parse = [](const char* text) {
    auto j = ps::ParseJson(text, "t");
    REQUIRE(j.ok());
    return ParseInit(*j, "vars.emb.init");
  };
  auto g = parse(R"({"type":"glorot_uniform"})");
  REQUIRE(g.ok());
  CHECK(g->kind == InitKind::kGlorotUniform);
  auto n = parse(R"({"type":"normal","stddev":0.01})");
  REQUIRE(n.ok());
  CHECK(*n == InitSpec{InitKind::kNormal, 0.0, 0.01});
  auto u = parse(R"({"type":"uniform"})");
  REQUIRE(u.ok());
  CHECK(*u == InitSpec{InitKind::kUniform, -0.05, 0.05});
  auto c = parse(R"({"type":"constant","value":3})");
  REQUIRE(c.ok());
  CHECK(c->a == 3.0);

  CHECK(parse(R"({"type":"normal","min":1})").status().message() ==
        "vars.emb.init.min: unknown key");
  CHECK(parse(R"({"type":"he_normal"})")
            .status()
            .message()
            .starts_with("vars.emb.init.type: unknown initializer \"he_normal\""));
  CHECK(parse(R"({"type":"normal","stddev":-1})")
            .status()
            .message()
            .starts_with("vars.emb.init.stddev: must be finite and >= 0"));
  CHECK(parse(R"({"type":"uniform","minval":1,"maxval":0})")
            .status()
            .message()
            .starts_with("vars.emb.init.maxval: must be >= minval"));
  CHECK(parse(R"({"type":"zeros","value":1})").status().message() ==
        "vars.emb.init.value: unknown key");
  CHECK(parse(R"("zeros")").status().message() == "vars.emb.init: must be a JSON object");
}

TEST_CASE("InitToJson writes the ParseInit form and round-trips exactly") {
  CHECK(InitToJson({InitKind::kUniform, -0.05, 0.05}).dump() ==
        R"({"type":"uniform","minval":-0.05,"maxval":0.05})");
  CHECK(InitToJson({InitKind::kGlorotUniform, 0, 0}).dump() == R"({"type":"glorot_uniform"})");
  CHECK(InitToJson({InitKind::kConstant, 0.25, 0}).dump() == R"({"type":"constant","value":0.25})");
  CHECK(InitToJson({InitKind::kTruncatedNormal, 1, 0.5}).dump() ==
        R"({"type":"truncated_normal","mean":1.0,"stddev":0.5})");

  // Values without a short decimal form must survive dump() and parsing bit for bit.
  const double third = 1.0 / 3.0;
  for (const InitSpec& spec :
       {InitSpec{InitKind::kZeros, 0, 0}, InitSpec{InitKind::kOnes, 0, 0},
        InitSpec{InitKind::kConstant, third, 0}, InitSpec{InitKind::kUniform, -third, 1e-300},
        InitSpec{InitKind::kUniform, 2.0, 2.0}, InitSpec{InitKind::kNormal, -1e300, 0.1},
        InitSpec{InitKind::kTruncatedNormal, 0.1 + 0.2, 0},
        InitSpec{InitKind::kGlorotUniform, 0, 0}}) {
    INFO(InitToJson(spec).dump());
    auto direct = ParseInit(InitToJson(spec), "init");
    REQUIRE(direct.ok());
    CHECK(*direct == spec);
    auto text = ps::ParseJson(InitToJson(spec).dump(), "init");
    REQUIRE(text.ok());
    auto parsed = ParseInit(*text, "init");
    REQUIRE(parsed.ok());
    CHECK(*parsed == spec);
  }
}

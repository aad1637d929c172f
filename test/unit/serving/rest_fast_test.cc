// rest_fast.h: a body the fast path takes gives the batch the general path gives (JSON
// tree, then InputSchema::ToBatch); a body it leaves gets null. AppendFloat prints as
// printf's "%.9g".
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "libps/core/json.h"
#include "libps/serving/rest.h"
#include "libps/serving/rest_fast.h"
#include "libps/serving/rest_inputs.h"

namespace ps::serving {
namespace {

std::shared_ptr<const InputSchema> Schema(bool zero_based) {
  Json job = Json::parse(R"({
    "model": {"type": "embedding_mlp", "fields": [], "hidden": [8], "classes": 1},
    "train_data": {"format": "libsvm", "path": "unused.libsvm", "num_features": 30,
                   "field_offsets": [0, 10, 12]}})");
  job["train_data"]["zero_based"] = zero_based;
  auto s = InputSchema::Make(job);
  REQUIRE(s.ok());
  return *s;
}

// The general path for row-format bodies: the JSON tree, each instance's inputs by name.
Result<model::Batch> General(const std::string& body, const InputSchema& schema) {
  PS_ASSIGN_OR_RETURN(Json req, ParseRequestJson(body));
  std::vector<std::vector<std::pair<std::string, const Json*>>> instances;
  for (const Json& inst : req["instances"]) {
    instances.emplace_back();
    if (inst.is_object()) {
      for (const auto& [k, v] : inst.items()) instances.back().emplace_back(k, &v);
    } else {
      instances.back().emplace_back("features", &inst);
    }
  }
  return schema.ToBatch(instances);
}

void RequireSame(const model::Batch& a, const model::Batch& b) {
  REQUIRE(a.size == b.size);
  REQUIRE(a.dense_dim == b.dense_dim);
  REQUIRE(a.dense == b.dense);
  REQUIRE(a.labels == b.labels);
  REQUIRE(a.sparse.size() == b.sparse.size());
  for (size_t f = 0; f < a.sparse.size(); ++f) {
    INFO("field " << f);
    CHECK(a.sparse[f].offsets == b.sparse[f].offsets);
    CHECK(a.sparse[f].ids == b.sparse[f].ids);
    CHECK(a.sparse[f].values == b.sparse[f].values);
  }
}

TEST_CASE("the fast path's batch is the general path's") {
  for (bool zero_based : {false, true}) {
    auto schema = Schema(zero_based);
    for (
        const char* body : {
            R"({"instances": [{"features": [1, 11, 13, 2, 29]}]})",
            R"({"instances": [{"features": [13, 1, 12], "values": [0.5, -2, 1e-3]},
                               {"features": [], "values": []}, {"features": 5},
                               {"values": null, "features": [3, 3]}]})",
            R"({"instances": [[1, 2, 20], [11], 7], "signature_name": "serving_default"})",
            R"({"signature_name": "", "other": {"x": [1, "y"]}, "instances": [{"features": [4]}]})",
            R"({"instances": [{"features": [4], "values": 3.25}]})",
            R"({"instances": [{"features": [4, 5], "values": [16777217, 0.1]}]})",
            R"({"instances": [{"features": [4], "values": [1e300]}]})",
        }) {
      INFO(body << " zero_based " << zero_based);
      // The same thread scratch twice: a second request starts from a clean batch.
      for (int twice = 0; twice < 2; ++twice) {
        const model::Batch* fast = FastPredictBatch(body, *schema);
        REQUIRE(fast != nullptr);
        auto general = General(body, *schema);
        INFO(general.status().ToString());
        REQUIRE(general.ok());
        RequireSame(*fast, *general);
      }
    }
  }
}

TEST_CASE("the fast path leaves to the general path what it does not take") {
  auto schema = Schema(false);
  for (const char* body : {
           "",
           "[]",
           R"({"instances": [{"features": [1]}]} x)",
           R"({"instances": []})",
           R"({"instances": {"features": [1]}})",
           R"({"inputs": {"features": [[1]]}})",
           R"({"instances": [{"features": [1]}], "inputs": {"features": [[1]]}})",
           R"({"instances": [{"features": [1]}], "instances": [{"features": [2]}]})",
           R"({"instances": [{"features": [1], "features": [2]}]})",
           R"({"instances": [{"features": [1], "values": [1], "values": [2]}]})",
           R"({"instances": [{"features": [1], "colour": "red"}]})",
           R"({"instances": [{"values": [1]}]})",
           R"({"instances": [{"features": null}]})",
           R"({"instances": [null]})",
           R"({"instances": [{"features": [[1, 2]]}]})",
           R"({"instances": [{"features": [1.0]}]})",
           R"({"instances": [{"features": ["1"]}]})",
           R"({"instances": [{"features": [18446744073709551615]}]})",
           R"({"instances": [{"features": [0]}]})",
           R"({"instances": [{"features": [31]}]})",
           R"({"instances": [{"features": [1, 2], "values": [1]}]})",
           R"({"instances": [{"features": [1], "values": []}]})",
           R"({"instances": [{"features": [1], "values": [NaN]}]})",
           R"({"instances": [{"features": [1], "values": ["1"]}]})",
           R"({"instances": [{"features": [1]}], "signature_name": "other"})",
           R"({"instances": [{"features": [1]}], "signature_name": 1})",
           R"({"other": [NaN], "instances": [{"features": [1]}]})",
           "{\"instances\": [{\"features\": [1]}], \"s\": \"\xff\"}",
       }) {
    INFO(body);
    CHECK(FastPredictBatch(body, *schema) == nullptr);
  }
}

TEST_CASE("AppendFloat prints as %.9g") {
  auto check = [](float v) {
    std::string out;
    AppendFloat(&out, v);
    char want[64];
    std::snprintf(want, sizeof want, "%.9g", static_cast<double>(v));
    INFO(want);
    REQUIRE(out == want);
  };
  for (float v : {0.0f, -0.0f, 1.0f, 0.5f, 1e-45f, 3.4028235e38f, 1e-5f, 1e-4f, 123456789.0f,
                  1234567890.0f, 0.1f, 0.503362656f, 1e16f, -2.5e-7f}) {
    check(v);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    float v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) check(v);
    check(static_cast<float>(std::uniform_real_distribution<double>(0, 1)(rng)));
  }
  std::string out;
  AppendFloat(&out, NAN);
  AppendFloat(&out, INFINITY);
  AppendFloat(&out, -INFINITY);
  CHECK(out == "NaNInfinity-Infinity");
}

}  // namespace
}  // namespace ps::serving

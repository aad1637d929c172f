#include <catch2/catch.hpp>

#include "libps/core/status.h"

namespace {
ps::Result<int> Half(int x) {
  if (x % 2 != 0) return ps::InvalidArgument("x: odd value " + std::to_string(x));
  return x / 2;
}

ps::Result<int> Quarter(int x) {
  PS_ASSIGN_OR_RETURN(int h, Half(x));
  PS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

ps::Status CheckEven(int x) {
  PS_RETURN_IF_ERROR(Half(x).status());
  return ps::Status::Ok();
}
}  // namespace

TEST_CASE("Result carries a value or an error through the macros") {
  REQUIRE(Quarter(8).ok());
  CHECK(*Quarter(8) == 2);
  auto bad = Quarter(6);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == ps::Code::kInvalidArgument);
  CHECK(bad.status().ToString() == "InvalidArgument: x: odd value 3");
  CHECK(CheckEven(4).ok());
  CHECK(CheckEven(5).WithContext("flag --n").message() == "flag --n: x: odd value 5");
}

#include "libps/core/json.h"

TEST_CASE("JsonReader names the field of every error") {
  auto j = ps::ParseJson(R"({"a": 3, "b": "x", "c": {"d": -1}, "e": [1, 2], "z": 1})", "t");
  REQUIRE(j.ok());
  ps::JsonReader r(*j, "job");
  int a = 0;
  CHECK(r.Get("a", &a).ok());
  CHECK(a == 3);
  std::string b;
  CHECK(r.Get("b", &b).ok());
  int64_t missing = 7;
  CHECK(r.GetOr("nope", &missing).ok());
  CHECK(missing == 7);
  CHECK(r.Get("nope", &missing).message() == "job.nope: required key is missing");
  auto c = r.Child("c");
  uint64_t d = 0;
  CHECK(c.Get("d", &d).message() == "job.c.d: must not be negative, got -1");
  std::vector<int64_t> e;
  CHECK(r.Get("e", &e).ok());
  CHECK(e == std::vector<int64_t>{1, 2});
  double wrong = 0;
  CHECK(r.Get("b", &wrong).message() == "job.b: expected a number, got string");
  CHECK(r.Finish().message() == "job.z: unknown key");
  CHECK(ps::ParseJson("{", "TF_CONFIG").status().message().rfind("TF_CONFIG: malformed JSON", 0) ==
        0);
}

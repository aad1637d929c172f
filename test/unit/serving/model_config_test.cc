// TensorFlow Serving's model config file and --model NAME=PATH.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "libps/serving/model_config.h"

using namespace ps;
using namespace ps::serving;
using Catch::Contains;

namespace {

// serving_config.md's example, as TF Serving's users write it.
constexpr const char* kTfServingExample = R"(
model_config_list {
  config {
    name: 'my_first_model'
    base_path: '/tmp/my_first_model/'
    model_platform: 'tensorflow'
  }
  config {
    name: 'my_second_model'
    base_path: '/tmp/my_second_model/'
    model_platform: 'tensorflow'
    model_version_policy {
      specific {
        versions: 42
        versions: 43
      }
    }
    version_labels {
      key: 'stable'
      value: 42
    }
    version_labels {
      key: 'canary'
      value: 43
    }
  }
}
)";

std::string Error(std::string_view text) {
  auto r = ParseModelConfig(text, "models.config");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

}  // namespace

TEST_CASE("model config: TF Serving's documented example parses as written") {
  auto r = ParseModelConfig(kTfServingExample, "models.config");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  const ModelSpec& a = (*r)[0];
  CHECK(a.name == "my_first_model");
  CHECK(a.base_path == "/tmp/my_first_model/");
  CHECK(a.policy == VersionPolicy{});
  CHECK(a.labels.empty());
  const ModelSpec& b = (*r)[1];
  CHECK(b.policy.kind == VersionPolicy::Kind::kSpecific);
  CHECK(b.policy.versions == std::vector<int64_t>{42, 43});
  CHECK(b.labels == std::map<std::string, int64_t>{{"stable", 42}, {"canary", 43}});
}

TEST_CASE("model config: latest and all policies, colons and double quotes as TF Serving allows") {
  auto r = ParseModelConfig(R"(model_config_list: {
      config: { name: "ctr" base_path: "/m/ctr" model_version_policy: { latest: { num_versions: 3 } } }
      config: { name: "mnist" base_path: "/m/mnist" model_version_policy: { all: {} } } })",
                            "x");
  REQUIRE(r.ok());
  CHECK((*r)[0].policy.kind == VersionPolicy::Kind::kLatest);
  CHECK((*r)[0].policy.num_versions == 3);
  CHECK((*r)[1].policy.kind == VersionPolicy::Kind::kAll);
}

TEST_CASE("model config: every mistake is an error naming the file and the model") {
  CHECK_THAT(Error("model_config_list { config { name: 'a' base_path: '/a' } "),
             Contains("models.config: line 1 column"));
  CHECK_THAT(Error("model_config_list { config { name: 'a' base_path: '/a' colour: 1 } }"),
             Contains("colour"));
  CHECK_THAT(Error("model_config_list { config { base_path: '/a' } }"),
             Contains("config 0: name is empty"));
  CHECK_THAT(Error("model_config_list { config { name: 'a' } }"),
             Contains("config 0 (a): base_path is empty"));
  CHECK_THAT(Error("model_config_list { config { name: 'a' base_path: '/a' } "
                   "config { name: 'a' base_path: '/b' } }"),
             Contains("two models named 'a'"));
  CHECK_THAT(Error("model_config_list { config { name: 'a' base_path: '/a' "
                   "model_version_policy { specific { versions: 1 } } "
                   "version_labels { key: 'stable' value: 2 } } }"),
             Contains("label 'stable' names version 2, which the specific policy does not list"));
  CHECK_THAT(Error("model_config_list { config { name: 'a' base_path: '/a' "
                   "model_version_policy { latest { } } } }"),
             Contains("needs num_versions >= 1"));
  CHECK_THAT(Error("model_config_list { config { name: 'a' base_path: '/a' "
                   "model_version_policy { specific { versions: -1 } } } }"),
             Contains("version -1 is negative"));
  CHECK_THAT(Error(""), Contains("no model_config_list"));
  CHECK_THAT(Error("model_config_list { }"), Contains("names no model"));
}

TEST_CASE("model config: a file's relative base_path is relative to the file") {
  const auto dir = std::filesystem::temp_directory_path() / "pstrain-model-config-test";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "models.config").string();
  std::ofstream(path) << "model_config_list { config { name: 'a' base_path: 'models/a' } "
                         "config { name: 'b' base_path: '/abs/b' } }";
  auto r = ReadModelConfigFile(path);
  std::filesystem::remove_all(dir);
  REQUIRE(r.ok());
  CHECK((*r)[0].base_path == (dir / "models/a").string());
  CHECK((*r)[1].base_path == "/abs/b");
  auto missing = ReadModelConfigFile((dir / "nope.config").string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kNotFound);
}

TEST_CASE("model config: --model NAME=PATH") {
  auto m = ParseModelFlag("ctr=/srv/models/ctr=v2");
  REQUIRE(m.ok());
  CHECK(m->name == "ctr");
  CHECK(m->base_path == "/srv/models/ctr=v2");
  CHECK(m->policy == VersionPolicy{});
  for (const char* bad : {"ctr", "=/x", "ctr=", ""}) {
    auto r = ParseModelFlag(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Contains("expected NAME=PATH"));
  }
}

TEST_CASE("model config: which versions each policy keeps loaded") {
  const std::vector<int64_t> available{300, 100, 200, 400, 200};
  CHECK(SelectVersions({}, available, 2) == std::vector<int64_t>{300, 400});
  CHECK(SelectVersions({}, available, 1) == std::vector<int64_t>{400});
  VersionPolicy three{VersionPolicy::Kind::kLatest, 3, {}};
  CHECK(SelectVersions(three, available, 1) == std::vector<int64_t>{200, 300, 400});
  VersionPolicy all{VersionPolicy::Kind::kAll, 0, {}};
  CHECK(SelectVersions(all, available, 1) == std::vector<int64_t>{100, 200, 300, 400});
  VersionPolicy specific{VersionPolicy::Kind::kSpecific, 0, {100, 250, 400}};
  CHECK(SelectVersions(specific, available, 1) == std::vector<int64_t>{100, 400});
  CHECK(SelectVersions({}, {}, 2).empty());
}

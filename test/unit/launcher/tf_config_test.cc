// `pstrain tf-config`: the env and JSON Lines forms of every task's TF_CONFIG.
#include <catch2/catch.hpp>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/tf_config.h"
#include "libps/core/json.h"
#include "test/unit/launcher/launcher_support.h"

using namespace ps;
using namespace ps::launcher;
using namespace ps::launcher::testing;
using cluster::TaskId;
using cluster::TaskType;

TEST_CASE("tf-config: env format, one block per task in canonical order") {
  auto spec = Spec(R"({"chief":["c:1"],"worker":["w:2"],"ps":["p:3"],"evaluator":["e:4"]})");
  const std::string cl =
      R"("cluster":{"chief":["c:1"],"worker":["w:2"],"ps":["p:3"],"evaluator":["e:4"]})";
  const std::string want = "# chief:0 (c:1)\nexport TF_CONFIG='{" + cl +
                           R"(,"task":{"type":"chief","index":0}}')"
                           "\n\n"
                           "# worker:0 (w:2)\nexport TF_CONFIG='{" +
                           cl +
                           R"(,"task":{"type":"worker","index":0}}')"
                           "\n\n"
                           "# ps:0 (p:3)\nexport TF_CONFIG='{" +
                           cl +
                           R"(,"task":{"type":"ps","index":0}}')"
                           "\n\n"
                           "# evaluator:0 (e:4)\nexport TF_CONFIG='{" +
                           cl +
                           R"(,"task":{"type":"evaluator","index":0}}')"
                           "\n";
  CHECK(FormatTfConfigs(spec, false) == want);
}

TEST_CASE("tf-config: json lines round-trip through ParseTfConfig") {
  auto spec = Spec(kLocal3);
  std::istringstream lines(FormatTfConfigs(spec, true));
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  REQUIRE(got.size() == 4);
  CHECK(
      got[1].rfind(
          R"({"task":"worker:0","type":"worker","index":0,"host":"127.0.0.1","port":2223,"tf_config":{)",
          0) == 0);
  std::vector<TaskId> want = {
      {TaskType::kChief, 0}, {TaskType::kWorker, 0}, {TaskType::kWorker, 1}, {TaskType::kPs, 0}};
  for (size_t i = 0; i < got.size(); ++i) {
    auto json = ParseJson(got[i], "line");
    REQUIRE(json.ok());
    auto config = cluster::ParseTfConfigJson((*json)["tf_config"]);
    REQUIRE(config.ok());
    CHECK(config->task == want[i]);
    CHECK(config->cluster == spec);
    CHECK((*json)["task"] == want[i].ToString());
    CHECK((*json)["port"] == spec.address(want[i]).port);
  }
}

TEST_CASE("tf-config --from-slurm: one task's block; an unlisted evaluator has no address") {
  auto config = cluster::TfConfigFromSlurm({2, 5, "node[1-2]", "3,2"}, {2, 2, false, 9000});
  REQUIRE(config.ok());
  const std::string text = FormatTfConfig(config->cluster, config->task, false);
  CHECK(
      text.rfind("# ps:1 (node1:9002)\nexport TF_CONFIG='{\"cluster\":{\"chief\":[\"node1:9000\"],",
                 0) == 0);
  CHECK(text.find(R"("task":{"type":"ps","index":1}}')") != std::string::npos);

  auto spec = Spec(kLocal3);
  const TaskId eval{TaskType::kEvaluator, 0};
  CHECK(FormatTfConfig(spec, eval, false).rfind("# evaluator:0\nexport TF_CONFIG=", 0) == 0);
  CHECK(FormatTfConfig(spec, eval, true)
            .rfind(R"({"task":"evaluator:0","type":"evaluator","index":0,"tf_config":)", 0) == 0);
}

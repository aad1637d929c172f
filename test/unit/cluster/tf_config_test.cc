#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "libps/cluster/tf_config.h"

namespace {

using ps::cluster::ClusterSpec;
using ps::cluster::HostPort;
using ps::cluster::TaskId;
using ps::cluster::TaskType;
using ps::cluster::TfConfig;

// The example files live in <source>/configs. __FILE__ is this source file (absolute, or
// relative to the build directory, which is the working directory under `meson test`);
// walk up from it, from the working directory and from the test executable (which lives
// in a build directory inside the source tree) until configs/<name> is found.
std::string ConfigPath(const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> starts = {fs::absolute(fs::path(__FILE__), ec).parent_path(),
                                  fs::current_path(ec),
                                  fs::read_symlink("/proc/self/exe", ec).parent_path()};
  for (fs::path dir : starts) {
    for (; !dir.empty(); dir = dir.parent_path()) {
      if (fs::exists(dir / "configs" / name, ec)) return (dir / "configs" / name).string();
      if (dir == dir.parent_path()) break;
    }
  }
  FAIL("cannot find configs/" << name << " above " << __FILE__);
  return "";
}

// Parse, then apply the PS-training rules; the first error, or "" when both pass.
std::string Check(const std::string& json) {
  auto config = ps::cluster::ParseTfConfig(json);
  if (!config.ok()) return config.status().message();
  ps::Status st = ps::cluster::ValidateForPsTraining(*config);
  return st.ok() ? "" : st.message();
}

// A cluster with 1 chief, 2 workers, 2 ps; `task` and `extra` are spliced in.
std::string Cfg(const std::string& task, const std::string& extra = "") {
  return R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"],)"
         R"( "ps": ["p0:2222", "p1:2222"]}, "task": )" +
         task + extra + "}";
}

struct Case {
  const char* name;
  std::string json;
  std::string error_prefix;  // "" = valid
};

}  // namespace

TEST_CASE("TF_CONFIG table: valid and invalid configs, exact error prefixes") {
  const std::string kTypes = "(expected chief, worker, ps or evaluator)";
  const std::vector<Case> cases = {
      // ---- valid ----
      {"worker 1", Cfg(R"({"type": "worker", "index": 1})"), ""},
      {"chief 0", Cfg(R"({"type": "chief", "index": 0})"), ""},
      {"ps 1", Cfg(R"({"type": "ps", "index": 1})"), ""},
      {"rpc_layer, environment, session_master accepted",
       Cfg(R"({"type": "worker", "index": 0})",
           R"(, "rpc_layer": "grpc", "environment": "cloud", "session_master": "grpc://x:1")"),
       ""},
      {"rpc_layer is any string", Cfg(R"({"type": "ps", "index": 0})", R"(, "rpc_layer": "")"), ""},
      {"evaluator in cluster accepted",
       R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"], "evaluator": ["e:1"]},
           "task": {"type": "worker", "index": 0}})",
       ""},
      {"evaluator not listed in cluster (TF allows it)",
       Cfg(R"({"type": "evaluator", "index": 0})"), ""},
      {"evaluator task",
       R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"], "evaluator": ["e:1"]},
           "task": {"type": "evaluator", "index": 0}})",
       ""},
      {"evaluator alone (side-car): PS rules waived",
       R"({"cluster": {"evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}})", ""},
      {"no chief (TF allows it)",
       R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       ""},
      {"IPv6 and IPv4 addresses",
       R"({"cluster": {"worker": ["[::1]:2222", "[fe80::1:2]:2223"], "ps": ["10.0.0.1:65535"]},
           "task": {"type": "worker", "index": 1}})",
       ""},
      {"Kubeflow host names",
       R"({"cluster": {"chief": ["mnist-chief-0.ml.svc:2222"],
                       "worker": ["mnist-worker-0.ml.svc:2222"], "ps": ["mnist-ps-0.ml.svc:2222"]},
           "task": {"type": "chief", "index": 0}, "environment": "cloud"})",
       ""},
      {"same host, different ports",
       R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "ps", "index": 0}})",
       ""},
      // ---- invalid: JSON shape ----
      {"malformed JSON", R"({"cluster": )", "TF_CONFIG: malformed JSON: "},
      {"empty text", "", "TF_CONFIG: malformed JSON: "},
      {"top level not an object", "[1, 2]", "TF_CONFIG: must be a JSON object"},
      {"top level null", "null", "TF_CONFIG: must be a JSON object"},
      {"missing cluster", R"({"task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster: required key is missing"},
      {"cluster not an object", R"({"cluster": ["w:1"], "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster: must be a JSON object"},
      {"missing task", R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"]}})",
       "TF_CONFIG.task: required key is missing"},
      {"task not an object", Cfg(R"("worker")"), "TF_CONFIG.task: must be a JSON object"},
      {"task.type missing", Cfg(R"({"index": 0})"), "TF_CONFIG.task.type: required key is missing"},
      {"task.type not a string", Cfg(R"({"type": 1, "index": 0})"),
       "TF_CONFIG.task.type: expected a string, got number"},
      {"task.index missing", Cfg(R"({"type": "worker"})"),
       "TF_CONFIG.task.index: required key is missing"},
      {"task.index a string of digits (TF's int())", Cfg(R"({"type": "worker", "index": "1"})"),
       ""},
      {"task.index a string, not a number", Cfg(R"({"type": "worker", "index": "one"})"),
       "TF_CONFIG.task.index: \"one\" is not an integer"},
      {"task.index an empty string", Cfg(R"({"type": "worker", "index": ""})"),
       "TF_CONFIG.task.index: \"\" is not an integer"},
      {"task.index a negative string", Cfg(R"({"type": "worker", "index": "-1"})"),
       "TF_CONFIG.task.index: must be >= 0, got -1"},
      {"task.index a string out of range", Cfg(R"({"type": "worker", "index": "2"})"),
       "TF_CONFIG.task.index: 2 is out of range (cluster has 2 worker tasks)"},
      {"task.index null", Cfg(R"({"type": "worker", "index": null})"),
       "TF_CONFIG.task.index: expected an integer, got null"},
      {"task.index fractional", Cfg(R"({"type": "worker", "index": 0.5})"),
       "TF_CONFIG.task.index: expected an integer, got 0.5"},
      {"task.index beyond int", Cfg(R"({"type": "worker", "index": 10000000000})"),
       "TF_CONFIG.task.index: 10000000000 is too large"},
      {"unknown key in task: a warning", Cfg(R"({"type": "worker", "index": 0, "trial": "1"})"),
       ""},
      {"unknown top-level key: a warning",
       Cfg(R"({"type": "worker", "index": 0})", R"(, "job": {})"), ""},
      {"rpc_layer not a string", Cfg(R"({"type": "worker", "index": 0})", R"(, "rpc_layer": 1)"),
       "TF_CONFIG.rpc_layer: expected a string, got number"},
      {"cluster value not a list",
       R"({"cluster": {"worker": "w:1", "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker: expected an array, got string"},
      {"cluster value a dict (sparse spec)",
       R"({"cluster": {"worker": {"0": "w:1"}}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.worker: expected an array, got object"},
      {"address not a string",
       R"({"cluster": {"worker": ["w:1"], "ps": ["p:1", 2222]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.ps[1]: expected a string, got number"},
      // ---- invalid: task against cluster ----
      {"index negative", Cfg(R"({"type": "worker", "index": -1})"),
       "TF_CONFIG.task.index: must be >= 0, got -1"},
      {"index out of range", Cfg(R"({"type": "worker", "index": 3})"),
       "TF_CONFIG.task.index: 3 is out of range (cluster has 2 worker tasks)"},
      {"index equals count", Cfg(R"({"type": "ps", "index": 2})"),
       "TF_CONFIG.task.index: 2 is out of range (cluster has 2 ps tasks)"},
      {"chief index 1", Cfg(R"({"type": "chief", "index": 1})"),
       "TF_CONFIG.task.index: 1 is out of range (cluster has 1 chief task)"},
      {"task type master without a chief in cluster",
       R"({"cluster": {"master": ["m:1"], "worker": ["w:1"], "ps": ["p:1"]}, "task": {"type": "master", "index": 0}})",
       ""},
      {"unknown task type", Cfg(R"({"type": "boss", "index": 0})"),
       "TF_CONFIG.task.type: unknown task type \"boss\" " + kTypes},
      {"capitalised Worker", Cfg(R"({"type": "Worker", "index": 0})"),
       "TF_CONFIG.task.type: unknown task type \"Worker\" " + kTypes},
      {"task type not in cluster",
       R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.task.type: \"ps\" is not in TF_CONFIG.cluster"},
      {"unlisted evaluator with index 1", Cfg(R"({"type": "evaluator", "index": 1})"),
       "TF_CONFIG.task.index: must be 0 for an evaluator that is not listed in TF_CONFIG.cluster"},
      // ---- invalid: cluster rules ----
      {"unknown type in cluster",
       R"({"cluster": {"boss": ["m:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.boss: unknown task type \"boss\" " + kTypes},
      {"chief and master: two chiefs",
       R"({"cluster": {"chief": ["c:1"], "master": ["m:1"], "worker": ["w:1"], "ps": ["p:1"]},
           "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.master: \"master\" is the legacy name of the chief; list the chief under"},
      {"two masters",
       R"({"cluster": {"master": ["m:1", "m:2"], "worker": ["w:1"], "ps": ["p:1"]},
           "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.master: at most one chief task is allowed, got 2"},
      {"capitalised type in cluster",
       R"({"cluster": {"Worker": ["w:1"]}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.Worker: unknown task type \"Worker\" " + kTypes},
      {"two chiefs",
       R"({"cluster": {"chief": ["c:1", "c:2"], "worker": ["w:1"], "ps": ["p:1"]},
           "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.chief: at most one chief task is allowed, got 2"},
      {"two evaluators",
       R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"], "evaluator": ["e:1", "e:2"]},
           "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.evaluator: at most one evaluator task is allowed, got 2"},
      {"no ps",
       R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "chief", "index": 0}})",
       "TF_CONFIG.cluster.ps: parameter-server training needs at least one ps task"},
      {"empty ps list",
       R"({"cluster": {"worker": ["w:1"], "ps": []}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.cluster.ps: parameter-server training needs at least one ps task"},
      {"no worker",
       R"({"cluster": {"chief": ["c:1"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker: parameter-server training needs at least one worker task"},
      {"duplicate address across types",
       R"({"cluster": {"chief": ["h:1"], "worker": ["w:1"], "ps": ["w:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.ps[0]: address \"w:1\" is already used by worker:0"},
      {"duplicate address within a type",
       R"({"cluster": {"worker": ["w:1", "W:1"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[1]: address \"W:1\" is already used by worker:0"},
      {"duplicate with the evaluator",
       R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"], "evaluator": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.evaluator[0]: address \"p:1\" is already used by ps:0"},
      // ---- invalid: addresses ----
      {"port 0",
       R"({"cluster": {"worker": ["w:0"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[0]: \"w:0\" has port 0, which is out of range (1-65535)"},
      {"port 70000",
       R"({"cluster": {"worker": ["w:1"], "ps": ["p:70000"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.ps[0]: \"p:70000\" has port 70000, which is out of range (1-65535)"},
      {"no port",
       R"({"cluster": {"worker": ["w:1"], "ps": ["p:1", "host"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.ps[1]: \"host\" has no port"},
      {"empty port",
       R"({"cluster": {"worker": ["w:"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[0]: \"w:\" has no port"},
      {"empty host",
       R"({"cluster": {"worker": [":2222"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[0]: \":2222\" has an empty host"},
      {"empty address",
       R"({"cluster": {"worker": [""], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[0]: empty address"},
      {"non-numeric port",
       R"({"cluster": {"worker": ["w:http"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[0]: \"w:http\" has a non-numeric port \"http\""},
      {"IPv6 without brackets",
       R"({"cluster": {"worker": ["::1:2222"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[0]: \"::1:2222\" looks like an IPv6 address without brackets"},
      {"space in host",
       R"({"cluster": {"worker": [" w:1"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})",
       "TF_CONFIG.cluster.worker[0]: \" w:1\" has an invalid character \" \" in its host"},
  };
  REQUIRE(cases.size() >= 25);
  for (const Case& c : cases) {
    INFO("case: " << c.name << "\njson: " << c.json);
    const std::string got = Check(c.json);
    if (c.error_prefix.empty()) {
      CHECK(got == "");
    } else {
      CHECK(got.substr(0, c.error_prefix.size()) == c.error_prefix);
      CHECK(got.find('\n') == std::string::npos);  // one line
    }
  }
}

TEST_CASE("TF_CONFIG as TensorFlow and Kubeflow write it: master, string index, warnings") {
  // Kubeflow's legacy "Master" replica type: cluster key and task type "master".
  auto legacy = ps::cluster::ParseTfConfig(
      R"({"cluster": {"master": ["j-master-0.ns.svc:2222"], "worker": ["j-worker-0.ns.svc:2222"],
                      "ps": ["j-ps-0.ns.svc:2222"]},
          "task": {"type": "master", "index": "0"}, "environment": "cloud"})");
  REQUIRE(legacy.ok());
  CHECK(legacy->task == TaskId{TaskType::kChief, 0});
  CHECK(legacy->cluster.address({TaskType::kChief, 0}).host == "j-master-0.ns.svc");
  CHECK(legacy->environment == "cloud");
  CHECK(legacy->warnings.empty());
  CHECK(ps::cluster::ValidateForPsTraining(*legacy).ok());

  auto with_extra =
      ps::cluster::ParseTfConfig(Cfg(R"({"type": "worker", "index": "1", "trial": "7"})",
                                     R"(, "job": {"x": 1}, "rpc_layer": "grpc")"));
  REQUIRE(with_extra.ok());
  CHECK(with_extra->task == TaskId{TaskType::kWorker, 1});
  CHECK(with_extra->rpc_layer == "grpc");
  CHECK(with_extra->warnings ==
        std::vector<std::string>{"TF_CONFIG.task.trial: unknown key, ignored",
                                 "TF_CONFIG.job: unknown key, ignored"});

  // The evaluator TF's side-car reads: not in cluster, string index "0".
  auto eval = ps::cluster::ParseTfConfig(Cfg(R"({"type": "evaluator", "index": "0"})"));
  REQUIRE(eval.ok());
  CHECK(eval->task == TaskId{TaskType::kEvaluator, 0});
  CHECK(ps::cluster::ValidateForPsTraining(*eval).ok());
}

TEST_CASE("ParseTfConfig fills every field") {
  auto config = ps::cluster::ParseTfConfig(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w0:2", "w1:3"], "ps": ["[::1]:4"],
                      "evaluator": ["e:5"]},
          "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc", "environment": "cloud",
          "session_master": "grpc://c:1"})");
  REQUIRE(config.ok());
  CHECK(config->task == TaskId{TaskType::kWorker, 1});
  CHECK(config->task.ToString() == "worker:1");
  CHECK(config->rpc_layer == "grpc");
  CHECK(config->environment == "cloud");
  CHECK(config->session_master == "grpc://c:1");
  const ClusterSpec& spec = config->cluster;
  CHECK(spec.count(TaskType::kChief) == 1);
  CHECK(spec.count(TaskType::kWorker) == 2);
  CHECK(spec.count(TaskType::kPs) == 1);
  CHECK(spec.count(TaskType::kEvaluator) == 1);
  CHECK(spec.address({TaskType::kWorker, 1}) == HostPort{"w1", 3});
  CHECK(spec.address({TaskType::kPs, 0}) == HostPort{"::1", 4});
  CHECK(spec.address({TaskType::kPs, 0}).ToString() == "[::1]:4");
  CHECK_FALSE(spec.has({TaskType::kWorker, 2}));
  CHECK_FALSE(spec.has({TaskType::kWorker, -1}));

  // The evaluator is listed but is not part of the training cluster.
  const std::vector<TaskId> training = spec.TrainingTasks();
  const std::vector<TaskId> want = {
      {TaskType::kChief, 0}, {TaskType::kWorker, 0}, {TaskType::kWorker, 1}, {TaskType::kPs, 0}};
  CHECK(training == want);
  CHECK(spec.AllTasks().size() == 5);
  CHECK(spec.AllTasks().back() == TaskId{TaskType::kEvaluator, 0});
  CHECK(ps::cluster::ValidateForPsTraining(*config).ok());
}

TEST_CASE("Task type names round-trip, lower case only") {
  for (TaskType t : ps::cluster::kAllTaskTypes) {
    CHECK(ps::cluster::ParseTaskType(ps::cluster::TaskTypeName(t)) == t);
  }
  CHECK(std::string(ps::cluster::TaskTypeName(TaskType::kEvaluator)) == "evaluator");
  CHECK_FALSE(ps::cluster::ParseTaskType("Worker").has_value());
  CHECK_FALSE(ps::cluster::ParseTaskType("master").has_value());
  CHECK_FALSE(ps::cluster::ParseTaskType("").has_value());
  CHECK(TaskId{TaskType::kPs, 3}.ToString() == "ps:3");
}

TEST_CASE("ParseHostPort accepts host names, IPv4, bracketed IPv6") {
  struct Ok {
    const char* text;
    const char* host;
    uint16_t port;
  };
  for (const Ok& c : std::vector<Ok>{{"localhost:2222", "localhost", 2222},
                                     {"127.0.0.1:1", "127.0.0.1", 1},
                                     {"job-worker-0.ns.svc:2222", "job-worker-0.ns.svc", 2222},
                                     {"[::1]:2222", "::1", 2222},
                                     {"[2001:db8::7]:65535", "2001:db8::7", 65535},
                                     {"h_1:08080", "h_1", 8080}}) {
    INFO(c.text);
    auto hp = ps::cluster::ParseHostPort(c.text);
    REQUIRE(hp.ok());
    CHECK(hp->host == c.host);
    CHECK(hp->port == c.port);
  }
  CHECK(ps::cluster::ParseHostPort("[::1]:2222")->ToString() == "[::1]:2222");

  struct Bad {
    const char* text;
    const char* message;
  };
  for (const Bad& c : std::vector<Bad>{
           {"host", "\"host\" has no port"},
           {"[::1]", "\"[::1]\" has no port"},
           {"[::1", "\"[::1\" has an unclosed '['"},
           {"[]:1", "\"[]:1\" has an empty host"},
           {"[::1]x:1", "\"[::1]x:1\" has unexpected characters after ']'"},
           {"[host]:1", "\"[host]:1\" has brackets around a host that is not an IPv6 address"},
           {"h:65536", "\"h:65536\" has port 65536, which is out of range (1-65535)"},
           {"h:99999999999999999999",
            "\"h:99999999999999999999\" has port 99999999999999999999, which is out of range "
            "(1-65535)"},
           {"h:-1", "\"h:-1\" has a non-numeric port \"-1\""},
           {"h:+1", "\"h:+1\" has a non-numeric port \"+1\""},
           {"h:1 ", "\"h:1 \" has a non-numeric port \"1 \""},
           {"h/x:1", "\"h/x:1\" has an invalid character \"/\" in its host"},
           {"grpc://h:1", "\"grpc://h:1\" has a URL scheme (write \"host:port\")"},
           {"[::g]:1", "\"[::g]:1\" has an invalid character \"g\" in its IPv6 address"},
           {"h:1:2", "\"h:1:2\" looks like an IPv6 address without brackets"}}) {
    INFO(c.text);
    auto hp = ps::cluster::ParseHostPort(c.text);
    REQUIRE_FALSE(hp.ok());
    CHECK(hp.status().code() == ps::Code::kInvalidArgument);
    CHECK(hp.status().message().substr(0, std::string(c.message).size()) == c.message);
  }
}

TEST_CASE("Truncated and mangled TF_CONFIG never crashes") {
  const std::string valid =
      R"({"cluster": {"chief": ["c:1"], "worker": ["w:2"], "ps": ["[::1]:3"]},)"
      R"( "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"})";
  REQUIRE(Check(valid) == "");
  for (size_t n = 0; n < valid.size(); ++n) {
    auto r = ps::cluster::ParseTfConfig(valid.substr(0, n));
    CHECK_FALSE(r.ok());
  }
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string s = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    auto r = ps::cluster::ParseTfConfig(s);
    if (r.ok()) {
      ++accepted;
      // Whatever was accepted obeys the rules and prints back.
      CHECK(ps::cluster::ValidateTfConfig(*r).ok());
      CHECK(ps::cluster::ParseTfConfig(ps::cluster::ToTfConfigJson(r->cluster, r->task)).ok());
    } else {
      CHECK(r.status().message().find('\n') == std::string::npos);
    }
  }
  CHECK(accepted < 2000);
}

TEST_CASE("ValidateClusterSpec applies the text rules to a spec built in code") {
  ClusterSpec spec;
  spec.of(TaskType::kWorker) = {{"w", 1}, {"p", 2}};
  spec.of(TaskType::kPs) = {{"p", 2}};
  CHECK(ps::cluster::ValidateClusterSpec(spec, "c").message() ==
        "c.ps[0]: address \"p:2\" is already used by worker:1");
  spec.of(TaskType::kPs) = {{"p", 0}};
  CHECK(ps::cluster::ValidateClusterSpec(spec, "c").message() ==
        "c.ps[0]: \"p:0\" has port 0, which is out of range (1-65535)");
  spec.of(TaskType::kPs) = {{"bad host", 3}};
  CHECK(ps::cluster::ValidateClusterSpec(spec, "c").message() ==
        "c.ps[0]: \"bad host:3\" has an invalid character \" \" in its host");
  spec.of(TaskType::kPs) = {{"p", 3}};
  CHECK(ps::cluster::ValidateClusterSpec(spec, "c").ok());
}

TEST_CASE("FNV-1a 64 matches the published test vectors") {
  CHECK(ps::cluster::Fnv1a64("") == 0xcbf29ce484222325ULL);
  CHECK(ps::cluster::Fnv1a64("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(ps::cluster::Fnv1a64("foobar") == 0x85944171f73967e8ULL);
}

TEST_CASE("ClusterId is stable, excludes the evaluator, and tells clusters apart") {
  auto local = ps::cluster::ReadClusterFile(ConfigPath("cluster-local.json"));
  REQUIRE(local.ok());
  CHECK(ps::cluster::ClusterIdCanonical(*local) ==
        "pstrain-cluster-v1\n"
        "chief=127.0.0.1:2222\n"
        "worker=127.0.0.1:2223,127.0.0.1:2224\n"
        "ps=127.0.0.1:2225,127.0.0.1:2226\n");
  // Computed independently (Python FNV-1a 64 over the canonical string above).
  CHECK(ps::cluster::ClusterId(*local) == 0x7b6bd393c87843efULL);

  ClusterSpec with_eval = *local;
  with_eval.of(TaskType::kEvaluator) = {{"127.0.0.1", 2230}};
  CHECK(ps::cluster::ClusterId(with_eval) == ps::cluster::ClusterId(*local));

  ClusterSpec swapped = *local;
  std::swap(swapped.of(TaskType::kWorker)[0], swapped.of(TaskType::kWorker)[1]);
  CHECK(ps::cluster::ClusterId(swapped) == 0x863e521188476185ULL);

  ClusterSpec moved = *local;  // same addresses, one task changes type
  moved.of(TaskType::kPs).push_back(moved.of(TaskType::kWorker).back());
  moved.of(TaskType::kWorker).pop_back();
  CHECK(ps::cluster::ClusterId(moved) != ps::cluster::ClusterId(*local));

  auto one = ps::cluster::ReadClusterFile(ConfigPath("cluster-1ps1w.json"));
  REQUIRE(one.ok());
  CHECK(ps::cluster::ClusterId(*one) != ps::cluster::ClusterId(*local));
}

TEST_CASE("ToTfConfigJson is canonical and round-trips through ParseTfConfig") {
  ClusterSpec spec;
  spec.of(TaskType::kChief) = {{"c", 1}};
  spec.of(TaskType::kWorker) = {{"w0", 2}, {"w1", 3}};
  spec.of(TaskType::kPs) = {{"::1", 4}};
  CHECK(ps::cluster::ToTfConfigJson(spec, {TaskType::kWorker, 1}) ==
        R"({"cluster":{"chief":["c:1"],"worker":["w0:2","w1:3"],"ps":["[::1]:4"]},)"
        R"("task":{"type":"worker","index":1}})");

  auto hosts = ps::cluster::ReadClusterFile(ConfigPath("cluster-hosts.json"));
  REQUIRE(hosts.ok());
  for (TaskId task : hosts->AllTasks()) {
    INFO(task.ToString());
    const std::string json = ps::cluster::ToTfConfigJson(*hosts, task);
    CHECK(json.find('\n') == std::string::npos);
    auto back = ps::cluster::ParseTfConfig(json);
    REQUIRE(back.ok());
    CHECK(back->cluster == *hosts);
    CHECK(back->task == task);
    CHECK(ps::cluster::ValidateForPsTraining(*back).ok());
  }
}

TEST_CASE("Example cluster files load and are valid for PS training") {
  auto local = ps::cluster::ReadClusterFile(ConfigPath("cluster-local.json"));
  REQUIRE(local.ok());
  CHECK(local->count(TaskType::kChief) == 1);
  CHECK(local->count(TaskType::kWorker) == 2);
  CHECK(local->count(TaskType::kPs) == 2);
  CHECK(local->count(TaskType::kEvaluator) == 0);
  CHECK(local->address({TaskType::kChief, 0}) == HostPort{"127.0.0.1", 2222});
  CHECK(local->address({TaskType::kPs, 1}) == HostPort{"127.0.0.1", 2226});

  auto one = ps::cluster::ReadClusterFile(ConfigPath("cluster-1ps1w.json"));
  REQUIRE(one.ok());
  CHECK(one->TrainingTasks().size() == 3);

  auto hosts = ps::cluster::ReadClusterFile(ConfigPath("cluster-hosts.json"));
  REQUIRE(hosts.ok());
  CHECK(hosts->count(TaskType::kEvaluator) == 1);
  CHECK(hosts->address({TaskType::kWorker, 1}) == HostPort{"mnist-worker-1.ml.svc", 2222});
  CHECK(hosts->TrainingTasks().size() == hosts->AllTasks().size() - 1);

  for (const ClusterSpec* spec : {&*local, &*one, &*hosts}) {
    for (TaskId task : spec->AllTasks()) {
      INFO(task.ToString());
      CHECK(ps::cluster::ValidateForPsTraining(TfConfig{*spec, task, "", "", "", {}}).ok());
    }
  }
}

TEST_CASE("Cluster files: bare or wrapped, errors name file and field") {
  auto bare = ps::cluster::ParseClusterFile(R"({"worker": ["w:1"], "ps": ["p:2"]})", "f.json");
  REQUIRE(bare.ok());
  auto wrapped =
      ps::cluster::ParseClusterFile(R"({"cluster": {"worker": ["w:1"], "ps": ["p:2"]}})", "f.json");
  REQUIRE(wrapped.ok());
  CHECK(*bare == *wrapped);

  CHECK(ps::cluster::ParseClusterFile(R"({"cluster": {"worker": ["w"]}})", "f.json")
            .status()
            .message() == "f.json: cluster.worker[0]: \"w\" has no port");
  CHECK(ps::cluster::ParseClusterFile(R"({"cluster": {}, "task": {}})", "f.json")
            .status()
            .message() == "f.json: task: unknown key");
  CHECK(ps::cluster::ParseClusterFile(R"({"boss": ["m:1"]})", "f.json").status().message() ==
        "f.json: cluster.boss: unknown task type \"boss\" (expected chief, worker, ps or "
        "evaluator)");
  CHECK(
      ps::cluster::ParseClusterFile(R"({"chief": ["a:1", "b:1"]})", "f.json").status().message() ==
      "f.json: cluster.chief: at most one chief task is allowed, got 2");
  CHECK(ps::cluster::ParseClusterFile("[]", "f.json").status().message() ==
        "f.json: cluster: must be a JSON object");
  CHECK(ps::cluster::ParseClusterFile("{", "f.json")
            .status()
            .message()
            .rfind("f.json: malformed JSON", 0) == 0);
  auto missing = ps::cluster::ReadClusterFile("/nonexistent/cluster.json");
  CHECK(missing.status().code() == ps::Code::kNotFound);
}

TEST_CASE("LoadTfConfig reads the environment or a file") {
  ::unsetenv("TF_CONFIG");
  auto unset = ps::cluster::LoadTfConfig(nullptr);
  REQUIRE_FALSE(unset.ok());
  CHECK(unset.status().message() == "TF_CONFIG is not set (or use --tf-config FILE)");

  ::setenv("TF_CONFIG", "", 1);
  CHECK(ps::cluster::LoadTfConfig(nullptr).status().message() ==
        "TF_CONFIG is empty (or use --tf-config FILE)");

  ::setenv("TF_CONFIG", Cfg(R"({"type": "ps", "index": 1})").c_str(), 1);
  auto env = ps::cluster::LoadTfConfig(nullptr);
  REQUIRE(env.ok());
  CHECK(env->task == TaskId{TaskType::kPs, 1});

  ::setenv("TF_CONFIG", Cfg(R"({"type": "ps", "index": 5})").c_str(), 1);
  CHECK(ps::cluster::LoadTfConfig(nullptr).status().message() ==
        "TF_CONFIG.task.index: 5 is out of range (cluster has 2 ps tasks)");
  ::unsetenv("TF_CONFIG");

  namespace fs = std::filesystem;
  const fs::path file =
      fs::temp_directory_path() / ("pstrain-tfconfig-test-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(file);
    out << Cfg(R"({"type": "chief", "index": 0})");
  }
  const std::string path = file.string();
  auto from_file = ps::cluster::LoadTfConfig(&path);
  REQUIRE(from_file.ok());
  CHECK(from_file->task == TaskId{TaskType::kChief, 0});
  {
    std::ofstream out(file);
    out << Cfg(R"({"type": "chief", "index": 1})");
  }
  CHECK(ps::cluster::LoadTfConfig(&path).status().message() ==
        path + ": TF_CONFIG.task.index: 1 is out of range (cluster has 1 chief task)");
  fs::remove(file);
  CHECK(ps::cluster::LoadTfConfig(&path).status().code() == ps::Code::kNotFound);
}

TEST_CASE("Task overrides replace type and index and are checked") {
  auto base = ps::cluster::ParseTfConfig(Cfg(R"({"type": "worker", "index": 0})"));
  REQUIRE(base.ok());

  TfConfig c = *base;
  CHECK(ps::cluster::ApplyOverrides({"ps", 1}, &c).ok());
  CHECK(c.task == TaskId{TaskType::kPs, 1});

  c = *base;
  CHECK(ps::cluster::ApplyOverrides({std::nullopt, 1}, &c).ok());
  CHECK(c.task == TaskId{TaskType::kWorker, 1});

  c = *base;
  CHECK(ps::cluster::ApplyOverrides({}, &c).ok());
  CHECK(c.task == base->task);

  c = *base;
  CHECK(ps::cluster::ApplyOverrides({"Worker", 0}, &c).message() ==
        "--task-type: unknown task type \"Worker\" (expected chief, worker, ps or evaluator)");
  CHECK(c.task == base->task);  // unchanged on error
  CHECK(ps::cluster::ApplyOverrides({std::nullopt, 5}, &c).message() ==
        "--task-index: 5 is out of range (cluster has 2 worker tasks)");
  CHECK(ps::cluster::ApplyOverrides({"chief", std::nullopt}, &c).ok());  // index 0 kept
  c = *base;
  c.task.index = 1;
  CHECK(ps::cluster::ApplyOverrides({"chief", std::nullopt}, &c).message() ==
        "TF_CONFIG.task.index: 1 is out of range (cluster has 1 chief task)");
  CHECK(ps::cluster::ApplyOverrides({"evaluator", 0}, &c)
            .ok());  // TF: an evaluator need not be listed
  CHECK(ps::cluster::ApplyOverrides({"evaluator", 2}, &c).message() ==
        "--task-index: must be 0 for an evaluator that is not listed in TF_CONFIG.cluster");
}

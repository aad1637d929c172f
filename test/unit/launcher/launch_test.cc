// The pstrain launcher: pure parts (command line -> plan, tf-config text, status table,
// line prefixes, restart decisions, failure summary) against hand-written expectations,
// then `pstrain local` end to end with fake daemons (shell scripts) in a temp dir.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "libps/cluster/tf_config.h"
#include "launcher/subprocess.h"
#include "libps/net/transport.h"
#include "launcher/launch.h"

using namespace ps;
using namespace ps::launcher;
using cluster::TaskId;
using cluster::TaskType;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

cluster::ClusterSpec Spec(const std::string& json) {
  auto spec = cluster::ParseClusterFile(json, "test");
  REQUIRE(spec.ok());
  return *spec;
}

const char* kLocal3 =
    R"({"chief":["127.0.0.1:2222"],"worker":["127.0.0.1:2223","127.0.0.1:2224"],)"
    R"("ps":["127.0.0.1:2225"]})";

Command MustParse(std::vector<std::string> args) {
  auto c = ParseLauncherArgs(args);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

std::string ParseError(std::vector<std::string> args) {
  auto c = ParseLauncherArgs(args);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kInvalidArgument);
  return c.status().message();
}

std::string Exe(TaskType type) { return "/bin/" + DaemonName(type); }

}  // namespace

// ---- command line ---------------------------------------------------------------------

TEST_CASE("command line: help for the command and every subcommand") {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--help"}, {"-h"}, {"help"}, {"tf-config", "--help"},
        {"stop", "-h"}, {"status", "--help"}, {"local", "--help"}, {"help", "local"},
        {"local", "--cluster", "x", "--help"}}) {
    Command c = MustParse(args);
    REQUIRE(std::holds_alternative<HelpCommand>(c));
    CHECK(std::get<HelpCommand>(c).text.rfind("usage: pstrain", 0) == 0);
  }
  CHECK(std::get<HelpCommand>(MustParse({"local", "--help"})).text.find("--shutdown-grace") !=
        std::string::npos);
  CHECK(std::get<HelpCommand>(MustParse({"stop", "--help"})).text.find("--reason") != std::string::npos);
}

TEST_CASE("command line: usage errors are one line naming the flag") {
  CHECK(ParseError({}) == "pstrain: missing command (tf-config, local, stop, status, report, inspect); see pstrain --help");
  CHECK(ParseError({"launch"}).find("unknown command \"launch\"") != std::string::npos);
  CHECK(ParseError({"stop"}) == "pstrain stop: --chief HOST:PORT is required");
  CHECK(ParseError({"stop", "--chief", "nohost"}).rfind("pstrain stop: --chief: ", 0) == 0);
  CHECK(ParseError({"stop", "--chief", "h:1", "--timeout", "0"}) ==
        "pstrain stop: --timeout: 0 is not a valid number of seconds");
  CHECK(ParseError({"stop", "--chief", "h:1", "stray"}).rfind("pstrain stop: ", 0) == 0);
  CHECK(ParseError({"status", "--chief", "h:1", "--bogus"}).find("--bogus") != std::string::npos);
  CHECK(ParseError({"tf-config"}) == "pstrain tf-config: --cluster FILE is required");
  CHECK(ParseError({"tf-config", "--cluster", "c", "--format", "yaml"}) ==
        "pstrain tf-config: --format: \"yaml\" is not env or json");
  CHECK(ParseError({"local", "--cluster", "c"}) == "pstrain local: --job FILE is required");
  CHECK(ParseError({"local", "--job", "j"}) == "pstrain local: --cluster FILE is required");
  CHECK(ParseError({"local", "--cluster", "c", "--job", "j", "--restart", "always"}) ==
        "pstrain local: --restart: \"always\" is not on-failure or never");
  CHECK(ParseError({"local", "--cluster", "c", "--job", "j", "--max-restarts", "-1"}) ==
        "pstrain local: --max-restarts: -1 is negative");
  CHECK(ParseError({"local", "--cluster", "c", "--job", "j", "--log-level", "loud"}) ==
        "pstrain local: --log-level: \"loud\" is not debug, info, warning or error");
  CHECK(ParseError({"local", "--cluster", "c", "--job", "j", "--shutdown-grace", "-1"}) ==
        "pstrain local: --shutdown-grace: -1 is not a valid number of seconds");
}

TEST_CASE("command line: stop, status and tf-config values") {
  auto stop = std::get<StopCommand>(MustParse(
      {"stop", "--chief", "10.0.0.1:2222", "--secret-file", "s", "--reason", "maintenance", "--timeout", "2.5"}));
  CHECK(stop.target.chief == cluster::HostPort{"10.0.0.1", 2222});
  CHECK(stop.target.secret_file == std::optional<std::string>("s"));
  CHECK(stop.target.timeout == 2500ms);
  CHECK(stop.reason == "maintenance");

  auto defaults = std::get<StopCommand>(MustParse({"stop", "--chief", "[::1]:7"}));
  CHECK(defaults.target.chief == cluster::HostPort{"::1", 7});
  CHECK_FALSE(defaults.target.secret_file.has_value());
  CHECK(defaults.target.timeout == 10000ms);
  CHECK(defaults.reason == "pstrain stop");

  auto status = std::get<StatusCommand>(MustParse({"status", "--chief", "h:1", "--json"}));
  CHECK(status.json);
  CHECK_FALSE(std::get<StatusCommand>(MustParse({"status", "--chief", "h:1"})).json);

  auto tf = std::get<TfConfigCommand>(MustParse({"tf-config", "--cluster", "c.json", "--format", "json"}));
  CHECK(tf.cluster_file == "c.json");
  CHECK(tf.json);
  CHECK_FALSE(std::get<TfConfigCommand>(MustParse({"tf-config", "--cluster", "c.json"})).json);
}

TEST_CASE("command line: local options and the args after --") {
  auto c = std::get<LocalCommand>(MustParse(
      {"local", "--cluster", "c.json", "--job", "j.json", "--model-dir", "/m", "--secret-file", "s",
       "--bin-dir", "/b", "--log-level", "debug", "--restart", "on-failure", "--max-restarts", "5",
       "--shutdown-grace", "0.5", "--", "--help", "--x", "1"}));
  CHECK(c.cluster_file == "c.json");
  CHECK(c.job_file == "j.json");
  CHECK(c.model_dir == "/m");
  CHECK(c.secret_file == std::optional<std::string>("s"));
  CHECK(c.bin_dir == std::optional<std::string>("/b"));
  CHECK(c.log_level == "debug");
  CHECK(c.restart == RestartPolicy::kOnFailure);
  CHECK(c.max_restarts == 5);
  CHECK(c.shutdown_grace == 500ms);
  // "--help" after "--" belongs to the daemons, not to us.
  CHECK(c.extra_args == std::vector<std::string>{"--help", "--x", "1"});

  auto d = std::get<LocalCommand>(MustParse({"local", "--cluster", "c", "--job", "j"}));
  CHECK(d.model_dir.empty());
  CHECK_FALSE(d.secret_file.has_value());
  CHECK_FALSE(d.bin_dir.has_value());
  CHECK(d.restart == RestartPolicy::kNever);
  CHECK(d.max_restarts == 3);
  CHECK(d.shutdown_grace == 30000ms);
  CHECK(d.extra_args.empty());
}

// ---- tf-config ---------------------------------------------------------------------------

TEST_CASE("tf-config: env format, one block per task in canonical order") {
  auto spec = Spec(R"({"chief":["c:1"],"worker":["w:2"],"ps":["p:3"],"evaluator":["e:4"]})");
  const std::string cl = R"("cluster":{"chief":["c:1"],"worker":["w:2"],"ps":["p:3"],"evaluator":["e:4"]})";
  const std::string want =
      "# chief:0 (c:1)\nexport TF_CONFIG='{" + cl + R"(,"task":{"type":"chief","index":0}}')" "\n\n"
      "# worker:0 (w:2)\nexport TF_CONFIG='{" + cl + R"(,"task":{"type":"worker","index":0}}')" "\n\n"
      "# ps:0 (p:3)\nexport TF_CONFIG='{" + cl + R"(,"task":{"type":"ps","index":0}}')" "\n\n"
      "# evaluator:0 (e:4)\nexport TF_CONFIG='{" + cl + R"(,"task":{"type":"evaluator","index":0}}')" "\n";
  CHECK(FormatTfConfigs(spec, false) == want);
}

TEST_CASE("tf-config: json lines round-trip through ParseTfConfig") {
  auto spec = Spec(kLocal3);
  std::istringstream lines(FormatTfConfigs(spec, true));
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  REQUIRE(got.size() == 4);
  CHECK(got[1].rfind(R"({"task":"worker:0","type":"worker","index":0,"host":"127.0.0.1","port":2223,"tf_config":{)", 0) == 0);
  std::vector<TaskId> want = {{TaskType::kChief, 0}, {TaskType::kWorker, 0}, {TaskType::kWorker, 1},
                              {TaskType::kPs, 0}};
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

// ---- plan ----------------------------------------------------------------------------------

TEST_CASE("plan: start order, TF_CONFIG per task, flags per role") {
  auto spec = Spec(R"({"chief":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3"],)"
                   R"("ps":["127.0.0.1:4","127.0.0.1:5"],"evaluator":["127.0.0.1:6"]})");
  LocalCommand c;
  c.cluster_file = "c.json";
  c.job_file = "job.json";
  c.model_dir = "/tmp/m";
  c.secret_file = "/s";
  c.log_level = "info";
  c.extra_args = {"--connect-timeout", "9"};
  auto plan = PlanLocal(c, spec, Exe, false);
  REQUIRE(plan.ok());
  std::vector<std::string> order;
  for (const auto& t : *plan) order.push_back(t.id.ToString());
  CHECK(order == std::vector<std::string>{"ps:0", "ps:1", "worker:0", "worker:1", "chief:0", "evaluator:0"});

  const std::vector<std::string> common = {"--secret-file", "/s", "--log-level", "info", "--connect-timeout", "9"};
  auto with = [&](std::vector<std::string> head) {
    head.insert(head.end(), common.begin(), common.end());
    return head;
  };
  CHECK((*plan)[0].argv == with({"/bin/pstrain-ps"}));
  CHECK((*plan)[3].argv == with({"/bin/pstrain-worker"}));
  CHECK((*plan)[4].argv == with({"/bin/pstrain-chief", "--job", "job.json", "--model-dir", "/tmp/m"}));
  CHECK((*plan)[5].argv == with({"/bin/pstrain-evaluator", "--model-dir", "/tmp/m"}));
  for (const auto& t : *plan) {
    using Env = std::vector<std::pair<std::string, std::string>>;
    CHECK(t.env == Env{{"TF_CONFIG", cluster::ToTfConfigJson(spec, t.id)}, {"OPENBLAS_NUM_THREADS", "1"}});
  }
  CHECK((*plan)[1].env[0].second.find(R"("task":{"type":"ps","index":1})") != std::string::npos);

  // OPENBLAS_NUM_THREADS already set by the operator: left alone.
  auto kept = PlanLocal(c, spec, Exe, true);
  REQUIRE(kept.ok());
  CHECK((*kept)[0].env.size() == 1);
}

TEST_CASE("plan: minimal flags without model dir, secret or log level") {
  LocalCommand c;
  c.cluster_file = "c.json";
  c.job_file = "j";
  auto plan = PlanLocal(c, Spec(kLocal3), Exe, true);
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 4);
  CHECK((*plan)[0].argv == std::vector<std::string>{"/bin/pstrain-ps"});
  CHECK((*plan)[3].argv == std::vector<std::string>{"/bin/pstrain-chief", "--job", "j"});
}

TEST_CASE("plan: clusters pstrain local cannot run") {
  LocalCommand c;
  c.cluster_file = "c.json";
  c.job_file = "j";
  auto err = [&](const std::string& json) {
    auto plan = PlanLocal(c, Spec(json), Exe, true);
    REQUIRE_FALSE(plan.ok());
    return plan.status().message();
  };
  CHECK(err(R"({"worker":["a:1"],"ps":["b:1"]})") ==
        "c.json: the cluster has no chief; pstrain local needs one to coordinate training");
  CHECK(err(R"({"chief":["c:1"],"worker":["a:1"]})") == "c.json: the cluster has no ps task");
  CHECK(err(R"({"chief":["c:1"],"ps":["a:1"]})") == "c.json: the cluster has no worker task");
  CHECK(err(R"({"chief":["c:1"],"worker":["a:1"],"ps":["b:1"],"evaluator":["e:1"]})").rfind(
            "--model-dir DIR is required", 0) == 0);

  // The job file's model_dir serves the evaluator; the chief reads it from the job itself.
  auto from_job = PlanLocal(c, Spec(R"({"chief":["c:1"],"worker":["a:1"],"ps":["b:1"],"evaluator":["e:1"]})"),
                            Exe, true, "/job/md");
  REQUIRE(from_job.ok());
  CHECK((*from_job)[2].argv == std::vector<std::string>{"/bin/pstrain-chief", "--job", "j"});
  CHECK((*from_job)[3].argv == std::vector<std::string>{"/bin/pstrain-evaluator", "--model-dir", "/job/md"});
}

TEST_CASE("JobModelDir: the job's model_dir, or empty") {
  char tmpl[] = "/tmp/pstrain-job-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  fs::path dir = tmpl;
  std::ofstream(dir / "a.json") << R"({"model_dir": "/data/m", "steps": 5})";
  std::ofstream(dir / "b.json") << R"({"steps": 5})";
  std::ofstream(dir / "c.json") << R"({"model_dir": 7})";
  std::ofstream(dir / "d.json") << R"({"model_dir": )";
  CHECK(JobModelDir((dir / "a.json").string()) == "/data/m");
  CHECK(JobModelDir((dir / "b.json").string()).empty());
  CHECK(JobModelDir((dir / "c.json").string()).empty());
  CHECK(JobModelDir((dir / "d.json").string()).empty());
  CHECK(JobModelDir((dir / "missing.json").string()).empty());
  fs::remove_all(dir);
}

TEST_CASE("daemon lookup: --bin-dir, next to pstrain, build tree, PATH") {
  std::set<std::string> files;
  auto exec = [&](const std::string& p) { return files.count(p) > 0; };
  const std::optional<std::string> none;

  // --bin-dir is authoritative: no fallback.
  files = {"/opt/b/pstrain-worker", "/usr/bin/pstrain-worker"};
  CHECK(*FindDaemon(TaskType::kWorker, std::string("/opt/b"), "/x", "/usr/bin", exec) == "/opt/b/pstrain-worker");
  auto missing = FindDaemon(TaskType::kPs, std::string("/opt/b"), "/x", "/usr/bin", exec);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == "--bin-dir: no executable /opt/b/pstrain-ps");

  // Installed layout: pstrain-ps next to pstrain.
  files = {"/usr/local/bin/pstrain-ps", "/usr/local/bin/pstrain-chief", "/b/daemons/chief/pstrain-chief"};
  CHECK(*FindDaemon(TaskType::kChief, none, "/usr/local/bin", "", exec) == "/usr/local/bin/pstrain-chief");

  // Build tree: build/launcher/pstrain -> build/daemons/<role>/pstrain-<role>.
  files = {"/src/build/daemons/evaluator/pstrain-evaluator", "/usr/bin/pstrain-evaluator"};
  CHECK(*FindDaemon(TaskType::kEvaluator, none, "/src/build/launcher", "/usr/bin", exec) ==
        "/src/build/daemons/evaluator/pstrain-evaluator");

  // PATH, in order.
  files = {"/b/pstrain-ps", "/c/pstrain-ps"};
  CHECK(*FindDaemon(TaskType::kPs, none, "/src/build/launcher", "/a:/b:/c", exec) == "/b/pstrain-ps");

  files = {};
  auto nowhere = FindDaemon(TaskType::kPs, none, "/src/build/launcher", "/a", exec);
  REQUIRE_FALSE(nowhere.ok());
  CHECK(nowhere.status().code() == Code::kNotFound);
  CHECK(nowhere.status().message() ==
        "cannot find pstrain-ps (looked in /src/build/launcher, /src/build/daemons/ps, and PATH); "
        "build it (ninja -C build) or pass --bin-dir DIR");
}

// ---- output lines -------------------------------------------------------------------------

TEST_CASE("output: labels padded to the widest, one space, the line") {
  CHECK(TaskLabel({TaskType::kWorker, 1}) == "[worker:1]");
  CHECK(PrefixLine("[ps:0]", 10, "listening") == "[ps:0]     listening");
  CHECK(PrefixLine("[worker:1]", 10, "step 5") == "[worker:1] step 5");
  CHECK(PrefixLine("[ps:0]", 10, "windows\r") == "[ps:0]     windows");
  CHECK(PrefixLine("[ps:0]", 10, "") == "[ps:0]     ");
  CHECK(PrefixLine("[evaluator:0]", 10, "x") == "[evaluator:0] x");

  LocalCommand c;
  c.cluster_file = "c";
  c.job_file = "j";
  auto plan = PlanLocal(c, Spec(kLocal3), Exe, true);
  REQUIRE(plan.ok());
  CHECK(LabelWidth(*plan) == 10);  // "[worker:1]"
  c.model_dir = "m";
  auto with_eval = PlanLocal(c, Spec(R"({"chief":["c:1"],"worker":["w:1"],"ps":["p:1"],"evaluator":["e:1"]})"),
                             Exe, true);
  REQUIRE(with_eval.ok());
  CHECK(LabelWidth(*with_eval) == 13);  // "[evaluator:0]"
  CHECK(LabelWidth({}) == kLauncherLabel.size());
}

// ---- restarts and summary -------------------------------------------------------------------

TEST_CASE("restart decisions") {
  const TaskId w{TaskType::kWorker, 1}, chief{TaskType::kChief, 0};
  auto on = [](RestartQuery q, int max = 3) { return DecideRestart(RestartPolicy::kOnFailure, max, q); };

  CHECK_FALSE(DecideRestart(RestartPolicy::kNever, 3, {w, 1, 0, false, false}).restart);
  CHECK_FALSE(on({w, 0, 0, false, false}).restart);  // clean exit

  auto first = on({w, 1, 0, false, false});
  CHECK(first.restart);
  CHECK(first.reason == "restart 1 of 3");
  CHECK(on({w, 137, 2, false, false}).reason == "restart 3 of 3");
  auto used_up = on({w, 1, 3, false, false});
  CHECK_FALSE(used_up.restart);
  CHECK(used_up.reason == "not restarted: already restarted 3 times (--max-restarts 3)");
  CHECK_FALSE(on({w, 1, 0, false, false}, 0).restart);

  CHECK_FALSE(on({w, 1, 0, true, false}).restart);    // stopping
  CHECK_FALSE(on({w, 1, 0, false, true}).restart);    // chief gone
  CHECK(on({chief, 1, 0, false, false}).restart);     // a failed chief restarts
  CHECK_FALSE(on({chief, 1, 0, true, false}).restart);
  CHECK_FALSE(on({w, 2, 0, false, false}).restart);   // configuration error
  CHECK_FALSE(on({w, 127, 0, false, false}).restart); // cannot run
  CHECK_FALSE(on({w, 126, 0, false, false}).restart);
}

TEST_CASE("exit descriptions and the failure summary") {
  CHECK(DescribeExit(0) == "exit 0");
  CHECK(DescribeExit(3) == "exit 3");
  CHECK(DescribeExit(128) == "exit 128");
  CHECK(DescribeExit(137) == "killed by SIGKILL (137)");
  CHECK(DescribeExit(143) == "killed by SIGTERM (143)");
  CHECK(DescribeExit(128 + 40) == "killed by signal 40 (168)");

  std::vector<TaskOutcome> ok = {{{TaskType::kPs, 0}, 0, 0, ""}, {{TaskType::kChief, 0}, 0, 1, ""}};
  CHECK(FormatFailureSummary(ok).empty());

  std::vector<TaskOutcome> bad = {
      {{TaskType::kPs, 0}, 143, 0, "still running 30 s after the chief exited (terminated by the launcher)"},
      {{TaskType::kWorker, 0}, 0, 0, ""},
      {{TaskType::kWorker, 1}, 3, 2, ""},
      {{TaskType::kChief, 0}, 0, 0, ""},
  };
  CHECK(FormatFailureSummary(bad) ==
        "2 of 4 tasks failed:\n"
        "  ps:0      killed by SIGTERM (143): still running 30 s after the chief exited (terminated by the launcher)\n"
        "  worker:1  exit 3 after 2 restarts\n");
  CHECK(Failed({{TaskType::kPs, 0}, 0, 0, "left running"}));
}

// ---- status ----------------------------------------------------------------------------------

TEST_CASE("status: the chief's scalars and the tasks table") {
  proto::ChiefStatus s;
  s.state = "training";
  s.global_step = 1200;
  s.total_steps = 5000;
  s.examples_per_sec = 8123.4;
  s.elapsed_sec = 72.3;
  s.tasks = {{.task = "ps:0", .state = "ready", .last_error = ""},
             {.task = "worker:0", .state = "running", .last_error = ""}};
  CHECK(FormatStatus(s) ==
        "state: training\n"
        "global_step: 1200\n"
        "total_steps: 5000\n"
        "examples_per_sec: 8123\n"
        "elapsed: 1 min 12 s\n"
        "\n"
        "task      state\n"
        "ps:0      ready\n"
        "worker:0  running\n");
}

TEST_CASE("status: a stop reason, a task's last error, and nothing more when lists are empty") {
  proto::ChiefStatus s;
  s.state = "draining";
  s.stop_reason = "pstrain stop";
  s.tasks = {{.task = "ps:0", .state = "ready", .last_error = ""},
             {.task = "worker:1", .state = "lost", .last_error = "connection reset"}};
  CHECK(FormatStatus(s) ==
        "state: draining\n"
        "global_step: 0\n"
        "total_steps: 0\n"
        "examples_per_sec: 0\n"
        "elapsed: 0.0 s\n"
        "stop_reason: pstrain stop\n"
        "\n"
        "task      state  last_error\n"
        "ps:0      ready  -\n"
        "worker:1  lost   connection reset\n");
  proto::ChiefStatus starting;
  starting.state = "starting";
  CHECK(FormatStatus(starting) ==
        "state: starting\nglobal_step: 0\ntotal_steps: 0\nexamples_per_sec: 0\nelapsed: 0.0 s\n");
}

// ---- stop/status over the wire -------------------------------------------------------------

namespace {

// A stand-in for the chief's control endpoint on 127.0.0.1 with a kernel-chosen port.
struct FakeChief {
  explicit FakeChief(net::Runtime& rt, std::function<void(const proto::Stop&)> on_stop = nullptr,
                     std::optional<std::string> secret = std::nullopt) {
    net::ServerOptions o;
    o.identity = net::Identity{proto::Role::kChief, 0, 0xABCDEF, std::move(secret)};
    auto s = net::Server::Start(rt, o, [this, on_stop](net::Request req, net::Responder resp) {
      std::lock_guard lock(mu);
      peers.push_back(req.peer.role);
      if (const auto* stop = std::get_if<proto::Stop>(&req.envelope.body)) {
        reasons.push_back(stop->reason);
        if (on_stop) on_stop(*stop);
        resp.Reply(proto::Ack{});
      } else if (std::holds_alternative<proto::GetStatus>(req.envelope.body)) {
        proto::ChiefStatusReply reply;
        reply.status.state = "training";
        reply.status.global_step = 7;
        resp.Reply(reply);
      } else {
        resp.Fail(InvalidArgument("unexpected"));
      }
    });
    REQUIRE(s.ok());
    server = std::move(*s);
  }
  std::mutex mu;
  std::vector<std::string> reasons;
  std::vector<proto::Role> peers;
  std::unique_ptr<net::Server> server;
};

}  // namespace

TEST_CASE("CallChief: Stop and GetStatus as an operator tool; unreachable names the address") {
  net::Runtime rt(1);
  FakeChief chief(rt);
  cluster::HostPort at{"127.0.0.1", chief.server->port()};
  auto ack = CallChief(at, std::nullopt, 5s, proto::Stop{"because"});
  REQUIRE(ack.ok());
  CHECK(std::holds_alternative<proto::Ack>(*ack));
  auto status = CallChief(at, std::nullopt, 5s, proto::GetStatus{});
  REQUIRE(status.ok());
  REQUIRE(std::holds_alternative<proto::ChiefStatusReply>(*status));
  CHECK(std::get<proto::ChiefStatusReply>(*status).status.state == "training");
  CHECK(std::get<proto::ChiefStatusReply>(*status).status.global_step == 7);
  {
    std::lock_guard lock(chief.mu);
    CHECK(chief.reasons == std::vector<std::string>{"because"});
    CHECK(chief.peers == std::vector<proto::Role>{proto::Role::kClient, proto::Role::kClient});
  }

  // A port nobody listens on: take one from a server we then close.
  uint16_t dead_port;
  {
    FakeChief gone(rt);
    dead_port = gone.server->port();
    gone.server->Close();
  }
  auto dead = CallChief({"127.0.0.1", dead_port}, std::nullopt, 300ms, proto::Stop{});
  REQUIRE_FALSE(dead.ok());
  CHECK(dead.status().code() == Code::kUnavailable);
  CHECK(dead.status().message().find("127.0.0.1:" + std::to_string(dead_port)) != std::string::npos);
}

TEST_CASE("CallChief: the cluster secret is proven, a missing one is refused") {
  net::Runtime rt(1);
  FakeChief chief(rt, nullptr, std::string("s3cret"));
  cluster::HostPort at{"127.0.0.1", chief.server->port()};
  CHECK(CallChief(at, std::string("s3cret"), 5s, proto::GetStatus{}).ok());
  auto refused = CallChief(at, std::nullopt, 5s, proto::GetStatus{});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kPermissionDenied);
}

// ---- pstrain local with fake daemons ---------------------------------------------------------

namespace {

// build/test/unit_train_launch -> build/launcher/pstrain; PSTRAIN_BUILD_DIR overrides.
std::string PstrainBinary() {
  std::error_code ec;
  fs::path build = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  if (const char* dir = std::getenv("PSTRAIN_BUILD_DIR")) build = dir;
  fs::path p = build / "launcher" / "pstrain";
  if (!fs::exists(p, ec)) FAIL("pstrain not built at " << p.string() << " (set PSTRAIN_BUILD_DIR)");
  return p.string();
}

// A fake daemon. The task comes from TF_CONFIG; what it does from FAKE_<type>_<index>:
//   exitN   print, exit N           wait   exit 0 once <dir>/done exists
//   chief   write <dir>/chief.pid; on SIGTERM touch <dir>/done and exit 0
//   forever never exit by itself (a ps the chief forgot)
//   until_<task>_<n>  exit 0 once <task> has been started n times
// Every start appends a line to <dir>/starts_<type>_<index>.
constexpr const char* kFakeDaemon = R"SH(#!/bin/sh
task=$(printf '%s' "$TF_CONFIG" | sed -e 's/.*"task":{"type":"\([a-z]*\)","index":\([0-9]*\)}}$/\1_\2/')
dir=$(dirname "$0")
echo "tf_config $TF_CONFIG"
echo "args $*"
echo "stderr line" >&2
echo start >> "$dir/starts_$task"
eval "mode=\${FAKE_$task:-exit0}"
case "$mode" in
  exit*) exit "${mode#exit}" ;;
  wait) while [ ! -e "$dir/done" ]; do sleep 0.02; done; exit 0 ;;
  chief) trap 'touch "$dir/done"; exit 0' TERM
         echo $$ > "$dir/chief.pid.tmp"; mv "$dir/chief.pid.tmp" "$dir/chief.pid"
         while :; do sleep 0.02; done ;;
  forever) while :; do sleep 0.02; done ;;
  until_*) rest=${mode#until_}; other=${rest%_*}; n=${rest##*_}
           while [ "$(cat "$dir/starts_$other" 2>/dev/null | wc -l)" -lt "$n" ]; do sleep 0.02; done
           exit 0 ;;
esac
)SH";

struct LocalRun {
  fs::path dir;
  std::string cluster;

  explicit LocalRun(const std::string& cluster_json) {
    char tmpl[] = "/tmp/pstrain-launch-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    for (const char* role : {"ps", "worker", "chief", "evaluator"}) {
      fs::path p = dir / (std::string("pstrain-") + role);
      std::ofstream(p) << kFakeDaemon;
      fs::permissions(p, fs::perms::owner_all);
    }
    std::ofstream(dir / "job.json") << "{}";
    std::ofstream(dir / "cluster.json") << cluster_json;
    cluster = (dir / "cluster.json").string();
  }
  ~LocalRun() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  std::unique_ptr<Subprocess> Start(std::vector<std::string> extra,
                                    std::vector<std::pair<std::string, std::string>> env) {
    SpawnOptions o;
    o.argv = {PstrainBinary(), "local", "--cluster", cluster, "--job", (dir / "job.json").string(),
              "--bin-dir", dir.string()};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.env = std::move(env);
    o.env_remove = {"OPENBLAS_NUM_THREADS"};
    o.on_line = [this](const std::string& line) {
      std::lock_guard lock(mu);
      lines.push_back(line);
    };
    auto p = Subprocess::Spawn(std::move(o));
    REQUIRE(p.ok());
    return std::move(*p);
  }

  int Run(std::vector<std::string> extra, std::vector<std::pair<std::string, std::string>> env = {}) {
    auto p = Start(std::move(extra), std::move(env));
    auto rc = p->WaitFor(60s);
    REQUIRE(rc.has_value());
    p.reset();  // joins the reader: every line is in
    return *rc;
  }

  std::vector<std::string> Lines() {
    std::lock_guard lock(mu);
    return lines;
  }
  bool Has(const std::string& line) {
    for (const auto& l : Lines()) {
      if (l == line) return true;
    }
    return false;
  }
  bool HasContaining(const std::string& part) {
    for (const auto& l : Lines()) {
      if (l.find(part) != std::string::npos) return true;
    }
    return false;
  }
  int Starts(const std::string& task) {
    std::ifstream in(dir / ("starts_" + task));
    int n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  }
  std::string Dump() {
    std::string all;
    for (const auto& l : Lines()) all += l + "\n";
    return all;
  }

  std::mutex mu;
  std::vector<std::string> lines;
};

const char* kFakeCluster =
    R"({"cluster":{"chief":["127.0.0.1:2222"],"worker":["127.0.0.1:2223","127.0.0.1:2224"],)"
    R"("ps":["127.0.0.1:2225"],"evaluator":["127.0.0.1:2226"]}})";

}  // namespace

TEST_CASE("pstrain local: every task once, own TF_CONFIG, prefixed output, exit 0") {
  LocalRun run(kFakeCluster);
  int rc = run.Run({"--model-dir", "/tmp/md", "--log-level", "debug", "--", "--connect-timeout", "5"});
  INFO(run.Dump());
  CHECK(rc == 0);
  auto spec = Spec(kFakeCluster);
  for (const TaskId& id : spec.AllTasks()) {
    std::string label = TaskLabel(id);
    label.resize(13, ' ');  // "[evaluator:0]" is the widest label
    CHECK(run.Has(label + " tf_config " + cluster::ToTfConfigJson(spec, id)));
    CHECK(run.Has(label + " stderr line"));
    CHECK(run.Starts(std::string(cluster::TaskTypeName(id.type)) + "_" + std::to_string(id.index)) == 1);
  }
  CHECK(run.Has("[chief:0]     args --job " + (run.dir / "job.json").string() +
                " --model-dir /tmp/md --log-level debug --connect-timeout 5"));
  CHECK(run.Has("[evaluator:0] args --model-dir /tmp/md --log-level debug --connect-timeout 5"));
  CHECK(run.Has("[ps:0]        args --log-level debug --connect-timeout 5"));
  CHECK(run.HasContaining("pstrain stop --chief 127.0.0.1:2222"));
  CHECK(run.Has("[pstrain]     all 5 tasks exited cleanly"));
}

TEST_CASE("pstrain local: a failed task is named in the summary, exit 1") {
  LocalRun run(kFakeCluster);
  int rc = run.Run({"--model-dir", "/tmp/md"}, {{"FAKE_worker_1", "exit3"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK(run.Starts("worker_1") == 1);
  CHECK(run.Has("[pstrain]     1 of 5 tasks failed:"));
  CHECK(run.Has("[pstrain]       worker:1  exit 3"));
}

TEST_CASE("pstrain local: --restart on-failure restarts up to --max-restarts, not exit 2") {
  LocalRun run(kFakeCluster);
  int rc = run.Run({"--model-dir", "/tmp/md", "--restart", "on-failure", "--max-restarts", "2"},
                   {{"FAKE_ps_0", "exit3"}, {"FAKE_worker_0", "exit2"}, {"FAKE_chief_0", "until_ps_0_3"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK(run.Starts("ps_0") == 3);
  CHECK(run.Starts("worker_0") == 1);  // exit 2: a configuration error is not retried
  CHECK(run.Starts("worker_1") == 1);
  CHECK(run.Has("[pstrain]       ps:0      exit 3 after 2 restarts"));
  CHECK(run.Has("[pstrain]       worker:0  exit 2"));
}

TEST_CASE("pstrain local: a chief that failed after every ps and worker exited 0 is not restarted") {
  LocalRun run(kFakeCluster);
  int rc = run.Run({"--model-dir", "/tmp/md", "--restart", "on-failure"}, {{"FAKE_chief_0", "exit1"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK(run.Starts("chief_0") == 1);
  CHECK(run.HasContaining("chief:0 not restarted: it shut the cluster down (every ps and worker exited 0)"));
}

TEST_CASE("pstrain local: a ps still running after the chief exited is terminated and reported") {
  LocalRun run(kFakeCluster);
  int rc = run.Run({"--model-dir", "/tmp/md", "--shutdown-grace", "0.2"}, {{"FAKE_ps_0", "forever"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK(run.HasContaining("ERROR: ps:0 is still running 0.2 s after the chief exited"));
  CHECK(run.Has("[pstrain]     1 of 5 tasks failed:"));
  CHECK(run.HasContaining("  ps:0  killed by SIGTERM (143): still running 0.2 s after the chief exited"));
}

TEST_CASE("pstrain local: a chief with a configuration error (exit 2) gets the others stopped at once") {
  LocalRun run(kFakeCluster);
  // The default grace is 30 s; the test's own timeout would end a run that waited for it.
  int rc = run.Run({"--model-dir", "/tmp/md"}, {{"FAKE_ps_0", "forever"}, {"FAKE_worker_0", "forever"},
                                                 {"FAKE_chief_0", "exit2"}});
  INFO(run.Dump());
  CHECK(rc == 1);
  CHECK(run.HasContaining("ps:0: the chief exited 2 (a usage or configuration error: see its output above). Sending SIGTERM"));
  CHECK(run.HasContaining("killed by SIGTERM (143): terminated by the launcher: the chief exited 2"));
  CHECK_FALSE(run.HasContaining("waiting up to"));
}

TEST_CASE("pstrain local: Ctrl-C sends Stop to the chief; a graceful shutdown exits 0") {
  net::Runtime rt(1);
  fs::path pid_file;
  FakeChief chief(rt, [&](const proto::Stop&) {
    // What the real chief does on Stop, compressed: the fake chief's SIGTERM trap
    // releases the "wait" tasks and exits 0.
    std::ifstream in(pid_file);
    pid_t pid = 0;
    in >> pid;
    if (pid > 0) ::kill(pid, SIGTERM);
  });
  const std::string cluster = R"({"chief":["127.0.0.1:)" + std::to_string(chief.server->port()) +
                              R"("],"worker":["127.0.0.1:2223"],"ps":["127.0.0.1:2225"]})";
  LocalRun run(cluster);
  pid_file = run.dir / "chief.pid";
  auto launcher = run.Start({}, {{"FAKE_chief_0", "chief"}, {"FAKE_ps_0", "wait"}, {"FAKE_worker_0", "wait"}});
  for (int i = 0; i < 3000 && !fs::exists(pid_file); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(fs::exists(pid_file));
  launcher->Signal(SIGINT);
  auto rc = launcher->WaitFor(60s);
  REQUIRE(rc.has_value());
  launcher.reset();
  INFO(run.Dump());
  CHECK(*rc == 0);
  CHECK(run.HasContaining("SIGINT: asking the chief to stop"));
  CHECK(run.HasContaining("the chief acknowledged the stop"));
  std::lock_guard lock(chief.mu);
  CHECK(chief.reasons == std::vector<std::string>{"pstrain local: SIGINT"});
}

TEST_CASE("pstrain local: configuration errors exit 2 before starting anything") {
  LocalRun run(kFakeCluster);
  CHECK(run.Run({}) == 2);  // the cluster lists an evaluator, no --model-dir, none in the job
  CHECK(run.HasContaining("--model-dir DIR is required"));
  CHECK(run.Starts("ps_0") == 0);

  LocalRun empty_bin(R"({"chief":["127.0.0.1:1"],"worker":["127.0.0.1:2"],"ps":["127.0.0.1:3"]})");
  fs::remove(empty_bin.dir / "pstrain-ps");
  CHECK(empty_bin.Run({}) == 2);
  CHECK(empty_bin.HasContaining("--bin-dir: no executable " + (empty_bin.dir / "pstrain-ps").string()));

  LocalRun bad_cluster(R"({"chief":["127.0.0.1:1"],"worker":["nope"]})");
  CHECK(bad_cluster.Run({}) == 2);
  CHECK(bad_cluster.HasContaining("pstrain local: "));
}

namespace {

struct CliResult {
  int rc = -1;
  std::vector<std::string> lines;  // stdout and stderr
};

CliResult RunPstrain(std::vector<std::string> args) {
  CliResult r;
  std::mutex mu;
  SpawnOptions o;
  o.argv = {PstrainBinary()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.on_line = [&](const std::string& line) {
    std::lock_guard lock(mu);
    r.lines.push_back(line);
  };
  auto p = Subprocess::Spawn(std::move(o));
  REQUIRE(p.ok());
  auto rc = (*p)->WaitFor(60s);
  REQUIRE(rc.has_value());
  p->reset();
  r.rc = *rc;
  return r;
}

}  // namespace

TEST_CASE("pstrain stop and status against a chief's control endpoint") {
  net::Runtime rt(1);
  FakeChief chief(rt);
  const std::string at = "127.0.0.1:" + std::to_string(chief.server->port());

  auto stop = RunPstrain({"stop", "--chief", at, "--reason", "rolling upgrade"});
  CHECK(stop.rc == 0);
  CHECK(stop.lines == std::vector<std::string>{
                          "pstrain stop: the chief at " + at + " acknowledged; it stops scheduling steps, "
                          "writes the final checkpoint, shuts every task down and exits"});
  {
    std::lock_guard lock(chief.mu);
    CHECK(chief.reasons == std::vector<std::string>{"rolling upgrade"});
  }

  auto status = RunPstrain({"status", "--chief", at});
  CHECK(status.rc == 0);
  CHECK(status.lines == std::vector<std::string>{"state: training", "global_step: 7", "total_steps: 0",
                                                 "examples_per_sec: 0", "elapsed: 0.0 s"});
  auto raw = RunPstrain({"status", "--chief", at, "--json"});
  CHECK(raw.rc == 0);
  CHECK(raw.lines == std::vector<std::string>{
                         R"({"state":"training","global_step":7,"total_steps":0,"examples_per_sec":0.0,)"
                         R"("elapsed_sec":0.0,"tasks":[],"load_window_sec":0.0,"workers":[],"ps":[]})"});

  uint16_t dead_port = chief.server->port();
  chief.server->Close();
  auto dead = RunPstrain({"stop", "--chief", "127.0.0.1:" + std::to_string(dead_port), "--timeout", "0.3"});
  CHECK(dead.rc == 1);
  REQUIRE(dead.lines.size() == 1);
  CHECK(dead.lines[0].find("127.0.0.1:" + std::to_string(dead_port)) != std::string::npos);

  CHECK(RunPstrain({"stop"}).rc == 2);
  CHECK(RunPstrain({"status", "--chief", at, "--secret-file", "/nonexistent/secret"}).rc == 2);
  CHECK(RunPstrain({"tf-config", "--cluster", "/nonexistent/cluster.json"}).rc == 2);
  CHECK(RunPstrain({"--help"}).rc == 0);
}

TEST_CASE("command line: report and inspect") {
  using ps::launcher::InspectCommand;
  using ps::launcher::ReportCommand;
  auto r = ps::launcher::ParseLauncherArgs({"report", "/m"});
  REQUIRE(r.ok());
  CHECK(std::get<ReportCommand>(*r).model_dir == "/m");
  CHECK(std::get<ReportCommand>(*r).out.empty());
  r = ps::launcher::ParseLauncherArgs({"report", "--out", "x.html", "/m"});
  REQUIRE(r.ok());
  CHECK(std::get<ReportCommand>(*r).out == "x.html");
  CHECK(ps::launcher::ParseLauncherArgs({"report"}).status().message() == "pstrain report: MODEL_DIR is required");
  CHECK(!ps::launcher::ParseLauncherArgs({"report", "/a", "/b"}).ok());

  r = ps::launcher::ParseLauncherArgs({"inspect", "/m"});
  REQUIRE(r.ok());
  CHECK(!std::get<InspectCommand>(*r).step);
  CHECK(!std::get<InspectCommand>(*r).verify);
  r = ps::launcher::ParseLauncherArgs({"inspect", "/m", "--step", "1200", "--verify"});
  REQUIRE(r.ok());
  CHECK(std::get<InspectCommand>(*r).step == 1200);
  CHECK(std::get<InspectCommand>(*r).verify);
  CHECK(ps::launcher::ParseLauncherArgs({"inspect", "/m", "--step", "-3"}).status().message() ==
        "pstrain inspect: --step: -3 is negative");
  CHECK(!ps::launcher::ParseLauncherArgs({"inspect", "/m", "--step", "x"}).ok());
  auto help = ps::launcher::ParseLauncherArgs({"inspect", "--help"});
  REQUIRE(help.ok());
  CHECK(std::get<ps::launcher::HelpCommand>(*help).text.find("--verify") != std::string::npos);
}

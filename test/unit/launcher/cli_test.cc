// The pstrain command line: help, usage errors and the values each command takes,
// against hand-written expectations.
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launcher/cli.h"

using namespace ps;
using namespace ps::launcher;
using namespace std::chrono_literals;

namespace {

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

}  // namespace

// ---- command line ---------------------------------------------------------------------

TEST_CASE("command line: help for the command and every subcommand") {
  for (std::vector<std::string> args : {std::vector<std::string>{"--help"},
                                        {"-h"},
                                        {"help"},
                                        {"tf-config", "--help"},
                                        {"stop", "-h"},
                                        {"status", "--help"},
                                        {"local", "--help"},
                                        {"help", "local"},
                                        {"local", "--cluster", "x", "--help"}}) {
    Command c = MustParse(args);
    REQUIRE(std::holds_alternative<HelpCommand>(c));
    CHECK(std::get<HelpCommand>(c).text.rfind("usage: pstrain", 0) == 0);
  }
  CHECK(std::get<HelpCommand>(MustParse({"local", "--help"})).text.find("--shutdown-grace") !=
        std::string::npos);
  CHECK(std::get<HelpCommand>(MustParse({"stop", "--help"})).text.find("--reason") !=
        std::string::npos);
}

TEST_CASE("command line: usage errors are one line naming the flag") {
  CHECK(
      ParseError({}) ==
      "pstrain: missing command (tf-config, slurm-task, local, stop, status, report, inspect, gen-ctr, export, predict, serve); see pstrain --help");
  CHECK(ParseError({"launch"}).find("unknown command \"launch\"") != std::string::npos);
  CHECK(ParseError({"stop"}) == "pstrain stop: --chief HOST:PORT is required");
  CHECK(ParseError({"stop", "--chief", "nohost"}).rfind("pstrain stop: --chief: ", 0) == 0);
  CHECK(ParseError({"stop", "--chief", "h:1", "--timeout", "0"}) ==
        "pstrain stop: --timeout: 0 is not a valid number of seconds");
  CHECK(ParseError({"stop", "--chief", "h:1", "stray"}).rfind("pstrain stop: ", 0) == 0);
  CHECK(ParseError({"status", "--chief", "h:1", "--bogus"}).find("--bogus") != std::string::npos);
  CHECK(ParseError({"tf-config"}) ==
        "pstrain tf-config: give either --cluster FILE or --from-slurm");
  CHECK(ParseError({"tf-config", "--cluster", "c", "--from-slurm"}) ==
        "pstrain tf-config: give either --cluster FILE or --from-slurm");
  CHECK(ParseError({"slurm-task", "--model-dir", "m"}) ==
        "pstrain slurm-task: --job FILE is required");
  CHECK(ParseError({"slurm-task", "--job", "j"}) ==
        "pstrain slurm-task: --model-dir DIR is required");
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
  auto stop =
      std::get<StopCommand>(MustParse({"stop", "--chief", "10.0.0.1:2222", "--secret-file", "s",
                                       "--reason", "maintenance", "--timeout", "2.5"}));
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
  CHECK_FALSE(std::get<StatusCommand>(MustParse({"status", "--chief", "h:1"})).watch_sec);
  CHECK(std::get<StatusCommand>(MustParse({"status", "--chief", "h:1", "--watch"})).watch_sec ==
        std::optional<double>(2.0));
  CHECK(
      std::get<StatusCommand>(MustParse({"status", "--chief", "h:1", "--watch", "1"})).watch_sec ==
      std::optional<double>(1.0));
  CHECK(ps::launcher::ParseLauncherArgs({"status", "--chief", "h:1", "--watch", "0"})
            .status()
            .message() == "pstrain status: --watch: 0.000000 is not in 0.2..3600 seconds");
  CHECK(!ps::launcher::ParseLauncherArgs({"status", "--chief", "h:1", "--watch", "--json"}).ok());

  auto tf = std::get<TfConfigCommand>(
      MustParse({"tf-config", "--cluster", "c.json", "--format", "json"}));
  CHECK(tf.cluster_file == "c.json");
  CHECK(tf.json);
  CHECK_FALSE(std::get<TfConfigCommand>(MustParse({"tf-config", "--cluster", "c.json"})).json);
}

TEST_CASE("command line: tf-config --from-slurm and slurm-task") {
  auto tf =
      std::get<TfConfigCommand>(MustParse({"tf-config", "--from-slurm", "--ps", "2", "--workers",
                                           "4", "--evaluator", "--base-port", "7000"}));
  REQUIRE(tf.slurm.has_value());
  CHECK(tf.cluster_file.empty());
  CHECK(tf.slurm->ps == 2);
  CHECK(tf.slurm->workers == 4);
  CHECK(tf.slurm->evaluator);
  CHECK(tf.slurm->base_port == 7000);
  CHECK_FALSE(
      std::get<TfConfigCommand>(MustParse({"tf-config", "--cluster", "c"})).slurm.has_value());

  auto task = std::get<SlurmTaskCommand>(
      MustParse({"slurm-task", "--ps", "2", "--workers", "2", "--job", "j.json", "--model-dir",
                 "/m", "--bin-dir", "/b", "--", "--log-level", "debug"}));
  CHECK(task.roles.ps == 2);
  CHECK(task.roles.workers == 2);
  CHECK_FALSE(task.roles.evaluator);
  CHECK(task.roles.base_port == 8888);
  CHECK(task.job_file == "j.json");
  CHECK(task.model_dir == "/m");
  CHECK(task.bin_dir == std::optional<std::string>("/b"));
  CHECK(task.extra_args == std::vector<std::string>{"--log-level", "debug"});
  CHECK(std::get<HelpCommand>(MustParse({"slurm-task", "--help"})).text.find("SIGTERM") !=
        std::string::npos);
}

TEST_CASE("command line: local options and the args after --") {
  auto c = std::get<LocalCommand>(MustParse({"local",      "--cluster",
                                             "c.json",     "--job",
                                             "j.json",     "--model-dir",
                                             "/m",         "--secret-file",
                                             "s",          "--bin-dir",
                                             "/b",         "--log-level",
                                             "debug",      "--restart",
                                             "on-failure", "--max-restarts",
                                             "5",          "--shutdown-grace",
                                             "0.5",        "--",
                                             "--help",     "--x",
                                             "1"}));
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
  CHECK_FALSE(std::get<ReportCommand>(*r).watch_sec);
  r = ps::launcher::ParseLauncherArgs({"report", "/m", "--watch"});
  REQUIRE(r.ok());
  CHECK(std::get<ReportCommand>(*r).watch_sec == std::optional<double>(10.0));
  CHECK(!ps::launcher::ParseLauncherArgs({"report", "/m", "--watch", "0.1"}).ok());
  CHECK(ps::launcher::ParseLauncherArgs({"report"}).status().message() ==
        "pstrain report: MODEL_DIR is required");
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

// The `pstrain` command line (cli.h): the top-level help, the parsers of the cluster commands
// (tf-config, slurm-task, stop, status, local), the dispatch to every command and RunLauncher.
#include "launcher/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <boost/program_options.hpp>

#include "launcher/chief_client.h"
#include "launcher/cli_internal.h"
#include "launcher/gen_ctr.h"
#include "launcher/report.h"
#include "launcher/run_files.h"
#include "launcher/serving.h"
#include "launcher/supervisor.h"
#include "launcher/tf_config.h"
#include "libps/core/log.h"
#include "libps/daemon/daemon.h"

namespace ps::launcher {

namespace po = boost::program_options;
using daemon::kExitOk;
using daemon::kExitUsage;

namespace internal {

std::string Usage(const std::string& synopsis, const std::string& about,
                  const po::options_description& options) {
  std::ostringstream out;
  out << "usage: " << synopsis << "\n\n" << about << "\n\n" << options;
  return out.str();
}

Status ParseOptions(const std::string& sub, const std::vector<std::string>& args,
                    const po::options_description& desc, po::variables_map* vm) {
  try {
    po::positional_options_description none;  // stray words are errors
    po::store(po::command_line_parser(args).options(desc).positional(none).run(), *vm);
    po::notify(*vm);
  } catch (const std::exception& e) {
    return InvalidArgument("pstrain " + sub + ": " + e.what());
  }
  return Status::Ok();
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

}  // namespace internal

namespace {

using internal::ParseOptions;
using internal::Usage;
using internal::WantsHelp;

constexpr const char* kTopHelp =
    "usage: pstrain COMMAND [OPTIONS]\n"
    "\n"
    "Operator tool for pstrain clusters.\n"
    "\n"
    "commands:\n"
    "  tf-config  print each task's TF_CONFIG from a cluster file, ready to paste per host,\n"
    "             or this Slurm task's (--from-slurm)\n"
    "  slurm-task inside an srun step: derive this task's TF_CONFIG and become its daemon\n"
    "  local      run every task of a cluster file on this machine, with prefixed output\n"
    "  stop       ask a running chief to stop gracefully (final checkpoint, clean shutdown)\n"
    "  status     show a running chief's training progress and its tasks\n"
    "  report     write an HTML page with plots of a model dir's training and eval metrics\n"
    "  inspect    list a model dir's checkpoints and one checkpoint's variables\n"
    "  gen-ctr    write a synthetic click data set (LibSVM) with a known ground-truth model\n"
    "  export     write an inference bundle (model graph, weights, live embedding rows) from a checkpoint\n"
    "  predict    score a data set with a bundle (or a checkpoint) and print the evaluator's metrics\n"
    "  serve      serve models over TensorFlow Serving's REST API (runs pstrain-serve)\n"
    "\n"
    "`pstrain COMMAND --help` describes a command's options.\n"
    "exit codes: 0 success, 1 failure, 2 usage or configuration error\n"
    "(daemons also use 138: retryable, and 128+N: ended by signal N)\n";

po::options_description ChiefOptions(std::string* chief, std::string* secret, double* timeout,
                                     ChiefTarget* tls) {
  po::options_description d("options");
  d.add_options()("help,h", "print this help")(
      "chief", po::value(chief)->value_name("HOST:PORT"),
      "the chief's address (its TF_CONFIG address); required")(
      "secret-file", po::value(secret)->value_name("FILE"),
      "the cluster secret, when the cluster uses one")(
      "tls-cert", po::value(&tls->tls_cert)->value_name("FILE"),
      "mutual TLS: a certificate of the cluster CA")(
      "tls-key", po::value(&tls->tls_key)->value_name("FILE"), "mutual TLS: its private key")(
      "tls-ca", po::value(&tls->tls_ca)->value_name("FILE"), "mutual TLS: the cluster CA")(
      "timeout", po::value(timeout)->value_name("S")->default_value(10.0, "10"),
      "seconds to wait for the chief");
  return d;
}

Result<std::chrono::milliseconds> Seconds(const std::string& sub, const std::string& flag,
                                          double seconds, bool allow_zero) {
  if (!(seconds > 0 || (allow_zero && seconds == 0)) || seconds > 1e6) {
    std::ostringstream m;
    m << "pstrain " << sub << ": " << flag << ": " << seconds
      << " is not a valid number of seconds";
    return InvalidArgument(m.str());
  }
  return std::chrono::milliseconds(std::llround(seconds * 1000.0));
}

Result<ChiefTarget> MakeTarget(const std::string& sub, const po::variables_map& vm,
                               const std::string& chief, const std::string& secret, double timeout,
                               const ChiefTarget& tls) {
  ChiefTarget t = tls;
  if (!vm.count("chief"))
    return InvalidArgument("pstrain " + sub + ": --chief HOST:PORT is required");
  auto hp = cluster::ParseHostPort(chief);
  if (!hp.ok()) return InvalidArgument("pstrain " + sub + ": --chief: " + hp.status().message());
  t.chief = *hp;
  if (vm.count("secret-file")) {
    t.secret_file = secret;
  } else {
    t.secret_file = FindLocalSecret(t.chief);  // a cluster pstrain local started here
  }
  PS_ASSIGN_OR_RETURN(t.timeout, Seconds(sub, "--timeout", timeout, false));
  return t;
}

// --ps, --workers, --evaluator, --base-port: the roles of a Slurm step.
void AddSlurmRoleOptions(po::options_description& d, cluster::SlurmRoles* roles) {
  d.add_options()("ps", po::value(&roles->ps)->value_name("N")->default_value(1),
                  "Slurm: ps tasks")("workers",
                                     po::value(&roles->workers)->value_name("N")->default_value(1),
                                     "Slurm: worker tasks")(
      "evaluator", po::bool_switch(&roles->evaluator), "Slurm: one evaluator task (rank 1)")(
      "base-port", po::value(&roles->base_port)->value_name("P")->default_value(8888),
      "Slurm: task k on a node listens on P + k");
}

Result<Command> ParseTfConfig(const std::vector<std::string>& args) {
  std::string cluster_file, format = "env";
  bool from_slurm = false;
  cluster::SlurmRoles roles;
  po::options_description d("options");
  d.add_options()("help,h", "print this help")(
      "cluster", po::value(&cluster_file)->value_name("FILE"),
      "cluster file (the TF_CONFIG \"cluster\" object, bare or wrapped)")(
      "from-slurm", po::bool_switch(&from_slurm),
      "instead of --cluster: this task's TF_CONFIG from the Slurm step's environment (ranks: "
      "chief, evaluator, ps, workers, as TensorFlow's SlurmClusterResolver)")(
      "format", po::value(&format)->value_name("env|json")->default_value("env"),
      "env: a comment and an `export TF_CONFIG='...'` line per task; json: one JSON "
      "object per line: {\"task\",\"type\",\"index\",\"host\",\"port\",\"tf_config\"}");
  AddSlurmRoleOptions(d, &roles);
  const std::string synopsis =
      "pstrain tf-config --cluster FILE [--format env|json]\n"
      "       pstrain tf-config --from-slurm --ps N --workers M [--evaluator] [--base-port P] [--format env|json]";
  if (WantsHelp(args)) {
    return Command(HelpCommand{
        Usage(synopsis,
              "Prints the TF_CONFIG of every task of the cluster (chief, workers, ps, evaluator),\n"
              "for setting on each host before starting its daemon; with --from-slurm, inside an\n"
              "srun step, the TF_CONFIG of this task only.",
              d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("tf-config", args, d, &vm));
  if (vm.count("cluster") == from_slurm) {
    return InvalidArgument("pstrain tf-config: give either --cluster FILE or --from-slurm");
  }
  if (format != "env" && format != "json") {
    return InvalidArgument("pstrain tf-config: --format: \"" + format + "\" is not env or json");
  }
  TfConfigCommand c{cluster_file, format == "json", std::nullopt};
  if (from_slurm) c.slurm = roles;
  return Command(std::move(c));
}

Result<Command> ParseSlurmTask(const std::vector<std::string>& all_args) {
  std::vector<std::string> args;
  auto dashdash = std::find(all_args.begin(), all_args.end(), "--");
  args.assign(all_args.begin(), dashdash);
  SlurmTaskCommand c;
  if (dashdash != all_args.end()) c.extra_args.assign(dashdash + 1, all_args.end());
  std::string bin_dir;
  po::options_description d("options");
  d.add_options()("help,h", "print this help")("job", po::value(&c.job_file)->value_name("FILE"),
                                               "job file for the chief; required")(
      "model-dir", po::value(&c.model_dir)->value_name("DIR"),
      "checkpoints (chief and evaluator): a directory every node sees; required")(
      "bin-dir", po::value(&bin_dir)->value_name("DIR"),
      "where pstrain-ps etc. are (default: next to pstrain, the build tree, then PATH)");
  AddSlurmRoleOptions(d, &c.roles);
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain slurm-task --ps N --workers M [--evaluator] [--base-port P] --job FILE --model-dir DIR\n"
        "                          [--bin-dir DIR] [-- DAEMON_ARGS...]",
        "Run by every task of one srun step (srun -n 1+N+M[+1] pstrain slurm-task ...): derives\n"
        "this task's TF_CONFIG from the step, as `pstrain tf-config --from-slurm` does, and\n"
        "becomes its daemon (exec): the chief gets --job and --model-dir, the evaluator\n"
        "--model-dir; arguments after -- go to every daemon. Slurm signals every task of a\n"
        "step at once: the ps and worker tasks run with SIGTERM and SIGINT blocked, so that\n"
        "scancel of the step stops the chief, which drains, writes the final checkpoint and\n"
        "shuts them down (Slurm's SIGKILL after KillWait stays the backstop).\n"
        "Exit code: the daemon's (0, 1, 2, 138 retryable, 128+N).",
        d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("slurm-task", args, d, &vm));
  if (!vm.count("job")) return InvalidArgument("pstrain slurm-task: --job FILE is required");
  if (!vm.count("model-dir"))
    return InvalidArgument("pstrain slurm-task: --model-dir DIR is required");
  if (vm.count("bin-dir")) c.bin_dir = bin_dir;
  return Command(std::move(c));
}

Result<Command> ParseStop(const std::vector<std::string>& args) {
  std::string chief, secret, reason = "pstrain stop";
  double timeout = 10;
  ChiefTarget tls;
  po::options_description d = ChiefOptions(&chief, &secret, &timeout, &tls);
  d.add_options()("reason", po::value(&reason)->value_name("TEXT"),
                  "why, for the chief's log (default \"pstrain stop\")");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain stop --chief HOST:PORT [--secret-file F] [--tls-cert F --tls-key F --tls-ca F]\n"
        "             [--reason TEXT] [--timeout S]",
        "Asks the chief to stop: it stops scheduling steps, writes the final checkpoint,\n"
        "shuts every ps and worker down and exits. Exit 0 once the chief acknowledged,\n"
        "1 when it could not be reached, 2 on a usage error.",
        d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("stop", args, d, &vm));
  StopCommand c;
  PS_ASSIGN_OR_RETURN(c.target, MakeTarget("stop", vm, chief, secret, timeout, tls));
  c.reason = reason;
  return Command(std::move(c));
}

Result<Command> ParseStatus(const std::vector<std::string>& args) {
  std::string chief, secret;
  double timeout = 10;
  ChiefTarget tls;
  po::options_description d = ChiefOptions(&chief, &secret, &timeout, &tls);
  double watch = 0;
  d.add_options()("json", "print the chief's status JSON as it is")(
      "watch", po::value(&watch)->implicit_value(kDefaultWatchSec)->value_name("SECONDS"),
      "redraw every SECONDS (default 2) until the job ends; one line per poll when stdout is not a terminal");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain status --chief HOST:PORT [--secret-file F] [--tls-cert F --tls-key F --tls-ca F]\n"
        "               [--json] [--timeout S] [--watch [SECONDS]]",
        "Shows the chief's state, step and throughput, and a table of its tasks. With --watch,\n"
        "redraws the tables and hints in place (plain ANSI) until the chief exits; when stdout\n"
        "is not a terminal, prints one summary line (and the hints) per poll instead.",
        d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("status", args, d, &vm));
  StatusCommand c;
  PS_ASSIGN_OR_RETURN(c.target, MakeTarget("status", vm, chief, secret, timeout, tls));
  c.json = vm.count("json") > 0;
  if (vm.count("watch")) {
    if (!(watch >= 0.2 && watch <= 3600)) {
      return InvalidArgument("pstrain status: --watch: " + std::to_string(watch) +
                             " is not in 0.2..3600 seconds");
    }
    if (c.json) return InvalidArgument("pstrain status: --watch and --json: choose one");
    c.watch_sec = watch;
  }
  return Command(std::move(c));
}

Result<Command> ParseLocal(const std::vector<std::string>& all_args) {
  std::vector<std::string> args, extra;
  auto dashdash = std::find(all_args.begin(), all_args.end(), "--");
  args.assign(all_args.begin(), dashdash);
  if (dashdash != all_args.end()) extra.assign(dashdash + 1, all_args.end());

  LocalCommand c;
  std::string secret, bin_dir, restart = "never";
  double grace = 30;
  po::options_description d("options");
  d.add_options()("help,h", "print this help")(
      "cluster", po::value(&c.cluster_file)->value_name("FILE"), "cluster file; required")(
      "job", po::value(&c.job_file)->value_name("FILE"), "job file for the chief; required")(
      "model-dir", po::value(&c.model_dir)->value_name("DIR"),
      "checkpoints and metrics (to the chief and the evaluator)")(
      "secret-file", po::value(&secret)->value_name("FILE"), "cluster secret, for every task")(
      "bin-dir", po::value(&bin_dir)->value_name("DIR"),
      "where pstrain-ps etc. are (default: next to pstrain, the build tree, then PATH)")(
      "log-level", po::value(&c.log_level)->value_name("LEVEL"),
      "debug|info|warning|error, for every task")(
      "restart", po::value(&restart)->value_name("POLICY")->default_value("never"),
      "on-failure: start a task that exited non-zero again; never")(
      "max-restarts", po::value(&c.max_restarts)->value_name("N")->default_value(3),
      "restarts per task with --restart on-failure")(
      "shutdown-grace", po::value(&grace)->value_name("S")->default_value(30.0, "30"),
      "seconds the other tasks get to exit after the chief exited; then they are "
      "terminated and reported as failed");
  if (WantsHelp(args)) {
    return Command(HelpCommand{
        Usage("pstrain local --cluster FILE --job FILE [OPTIONS] [-- DAEMON_ARGS...]",
              "Runs every task of the cluster file on this machine (ps, workers, chief, then the\n"
              "evaluator if listed), each with its own TF_CONFIG, and prints their output\n"
              "prefixed with [role:index]. Arguments after -- go to every daemon.\n"
              "Ctrl-C or SIGTERM: the first asks the chief to stop gracefully, the second sends\n"
              "SIGTERM to every task, the third SIGKILL. Exits 0 when every task exited 0,\n"
              "otherwise prints the failed tasks and exits 1.",
              d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("local", args, d, &vm));
  if (!vm.count("cluster")) return InvalidArgument("pstrain local: --cluster FILE is required");
  if (!vm.count("job")) return InvalidArgument("pstrain local: --job FILE is required");
  if (vm.count("secret-file")) c.secret_file = secret;
  if (vm.count("bin-dir")) c.bin_dir = bin_dir;
  if (restart == "on-failure") {
    c.restart = RestartPolicy::kOnFailure;
  } else if (restart == "never") {
    c.restart = RestartPolicy::kNever;
  } else {
    return InvalidArgument("pstrain local: --restart: \"" + restart +
                           "\" is not on-failure or never");
  }
  if (c.max_restarts < 0) {
    return InvalidArgument("pstrain local: --max-restarts: " + std::to_string(c.max_restarts) +
                           " is negative");
  }
  if (!c.log_level.empty()) {
    log::Level level;
    if (!log::ParseLevel(c.log_level, &level)) {
      return InvalidArgument("pstrain local: --log-level: \"" + c.log_level +
                             "\" is not debug, info, warning or error");
    }
  }
  PS_ASSIGN_OR_RETURN(c.shutdown_grace, Seconds("local", "--shutdown-grace", grace, true));
  c.extra_args = std::move(extra);
  return Command(std::move(c));
}

}  // namespace

Result<Command> ParseLauncherArgs(const std::vector<std::string>& args) {
  if (args.empty()) {
    return InvalidArgument(
        "pstrain: missing command (tf-config, slurm-task, local, stop, status, report, inspect, gen-ctr, export, predict, serve); see pstrain --help");
  }
  const std::string& sub = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "--help" || sub == "-h") return Command(HelpCommand{kTopHelp});
  if (sub == "help") {
    if (rest.empty()) return Command(HelpCommand{kTopHelp});
    return ParseLauncherArgs({rest[0], "--help"});
  }
  if (sub == "tf-config") return ParseTfConfig(rest);
  if (sub == "slurm-task") return ParseSlurmTask(rest);
  if (sub == "stop") return ParseStop(rest);
  if (sub == "status") return ParseStatus(rest);
  if (sub == "local") return ParseLocal(rest);
  if (sub == "report") return internal::ParseReport(rest);
  if (sub == "inspect") return internal::ParseInspect(rest);
  if (sub == "gen-ctr") return internal::ParseGenCtr(rest);
  if (sub == "export") return internal::ParseExport(rest);
  if (sub == "predict") return internal::ParsePredict(rest);
  if (sub == "serve") return Command(ServeCommand{rest});
  return InvalidArgument(
      "pstrain: unknown command \"" + sub +
      "\" (tf-config, slurm-task, local, stop, status, report, inspect, gen-ctr, export, predict, serve); see pstrain --help");
}

int RunLauncher(const std::vector<std::string>& args) {
  auto command = ParseLauncherArgs(args);
  if (!command.ok()) {
    PrintErr(command.status().message());
    return kExitUsage;
  }
  if (const auto* help = std::get_if<HelpCommand>(&*command)) {
    std::fputs(help->text.c_str(), stdout);
    return kExitOk;
  }
  if (const auto* c = std::get_if<TfConfigCommand>(&*command)) return RunTfConfig(*c);
  if (const auto* c = std::get_if<StopCommand>(&*command)) return RunStop(*c);
  if (const auto* c = std::get_if<StatusCommand>(&*command)) return RunStatus(*c);
  if (const auto* c = std::get_if<ReportCommand>(&*command)) return RunReport(*c);
  if (const auto* c = std::get_if<InspectCommand>(&*command)) return RunInspect(*c);
  if (const auto* c = std::get_if<GenCtrCommand>(&*command)) return RunGenCtr(*c);
  if (const auto* c = std::get_if<SlurmTaskCommand>(&*command)) return RunSlurmTask(*c);
  if (const auto* c = std::get_if<ExportCommand>(&*command)) return RunExport(*c);
  if (const auto* c = std::get_if<PredictCommand>(&*command)) return RunPredict(*c);
  if (const auto* c = std::get_if<ServeCommand>(&*command)) return RunServe(*c);
  return RunLocal(std::get<LocalCommand>(*command));
}

void PrintErr(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace ps::launcher

#include "libps/train/launch.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>

#include <boost/program_options.hpp>

#include "libps/core/json.h"
#include "libps/core/log.h"
#include "libps/core/subprocess.h"
#include "libps/data/ctr_gen.h"
#include "libps/net/auth.h"
#include "libps/net/transport.h"
#include "libps/train/load.h"
#include "libps/train/report.h"

namespace ps::train {

namespace po = boost::program_options;
using cluster::TaskId;
using cluster::TaskType;

namespace {

// Exit codes, the same as every pstrain daemon's.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// ---- command line -----------------------------------------------------------------

constexpr const char* kTopHelp =
    "usage: pstrain COMMAND [OPTIONS]\n"
    "\n"
    "Operator tool for pstrain clusters.\n"
    "\n"
    "commands:\n"
    "  tf-config  print each task's TF_CONFIG from a cluster file, ready to paste per host\n"
    "  local      run every task of a cluster file on this machine, with prefixed output\n"
    "  stop       ask a running chief to stop gracefully (final checkpoint, clean shutdown)\n"
    "  status     show a running chief's training progress and its tasks\n"
    "  report     write an HTML page with plots of a model dir's training and eval metrics\n"
    "  inspect    list a model dir's checkpoints and one checkpoint's variables\n"
    "  gen-ctr    write a synthetic click data set (LibSVM) with a known ground-truth model\n"
    "\n"
    "`pstrain COMMAND --help` describes a command's options.\n"
    "exit codes: 0 success, 1 failure, 2 usage or configuration error\n";

std::string Usage(const std::string& synopsis, const std::string& about,
                  const po::options_description& options) {
  std::ostringstream out;
  out << "usage: " << synopsis << "\n\n" << about << "\n\n" << options;
  return out.str();
}

po::options_description ChiefOptions(std::string* chief, std::string* secret, double* timeout, ChiefTarget* tls) {
  po::options_description d("options");
  d.add_options()
      ("help,h", "print this help")
      ("chief", po::value(chief)->value_name("HOST:PORT"),
       "the chief's address (its TF_CONFIG address); required")
      ("secret-file", po::value(secret)->value_name("FILE"),
       "the cluster secret, when the cluster uses one")
      ("tls-cert", po::value(&tls->tls_cert)->value_name("FILE"), "mutual TLS: a certificate of the cluster CA")
      ("tls-key", po::value(&tls->tls_key)->value_name("FILE"), "mutual TLS: its private key")
      ("tls-ca", po::value(&tls->tls_ca)->value_name("FILE"), "mutual TLS: the cluster CA")
      ("timeout", po::value(timeout)->value_name("S")->default_value(10.0, "10"),
       "seconds to wait for the chief");
  return d;
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

Result<std::chrono::milliseconds> Seconds(const std::string& sub, const std::string& flag,
                                          double seconds, bool allow_zero) {
  if (!(seconds > 0 || (allow_zero && seconds == 0)) || seconds > 1e6) {
    std::ostringstream m;
    m << "pstrain " << sub << ": " << flag << ": " << seconds << " is not a valid number of seconds";
    return InvalidArgument(m.str());
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

Result<ChiefTarget> MakeTarget(const std::string& sub, const po::variables_map& vm,
                               const std::string& chief, const std::string& secret,
                               double timeout, const ChiefTarget& tls) {
  ChiefTarget t = tls;
  if (!vm.count("chief")) return InvalidArgument("pstrain " + sub + ": --chief HOST:PORT is required");
  auto hp = cluster::ParseHostPort(chief);
  if (!hp.ok()) return InvalidArgument("pstrain " + sub + ": --chief: " + hp.status().message());
  t.chief = *hp;
  if (vm.count("secret-file")) t.secret_file = secret;
  PS_ASSIGN_OR_RETURN(t.timeout, Seconds(sub, "--timeout", timeout, false));
  return t;
}

Result<Command> ParseTfConfig(const std::vector<std::string>& args) {
  std::string cluster_file, format = "env";
  po::options_description d("options");
  d.add_options()
      ("help,h", "print this help")
      ("cluster", po::value(&cluster_file)->value_name("FILE"),
       "cluster file (the TF_CONFIG \"cluster\" object, bare or wrapped); required")
      ("format", po::value(&format)->value_name("env|json")->default_value("env"),
       "env: a comment and an `export TF_CONFIG='...'` line per task; json: one JSON "
       "object per line: {\"task\",\"type\",\"index\",\"host\",\"port\",\"tf_config\"}");
  const std::string synopsis = "pstrain tf-config --cluster FILE [--format env|json]";
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(synopsis,
        "Prints the TF_CONFIG of every task of the cluster (chief, workers, ps, evaluator),\n"
        "for setting on each host before starting its daemon.", d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("tf-config", args, d, &vm));
  if (!vm.count("cluster")) return InvalidArgument("pstrain tf-config: --cluster FILE is required");
  if (format != "env" && format != "json") {
    return InvalidArgument("pstrain tf-config: --format: \"" + format + "\" is not env or json");
  }
  return Command(TfConfigCommand{cluster_file, format == "json"});
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
        "1 when it could not be reached, 2 on a usage error.", d)});
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
  d.add_options()("json", "print the chief's status JSON as it is");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain status --chief HOST:PORT [--secret-file F] [--tls-cert F --tls-key F --tls-ca F]\n"
        "               [--json] [--timeout S]",
        "Shows the chief's state, step and throughput, and a table of its tasks.", d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("status", args, d, &vm));
  StatusCommand c;
  PS_ASSIGN_OR_RETURN(c.target, MakeTarget("status", vm, chief, secret, timeout, tls));
  c.json = vm.count("json") > 0;
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
  d.add_options()
      ("help,h", "print this help")
      ("cluster", po::value(&c.cluster_file)->value_name("FILE"), "cluster file; required")
      ("job", po::value(&c.job_file)->value_name("FILE"), "job file for the chief; required")
      ("model-dir", po::value(&c.model_dir)->value_name("DIR"),
       "checkpoints and metrics (to the chief and the evaluator)")
      ("secret-file", po::value(&secret)->value_name("FILE"), "cluster secret, for every task")
      ("bin-dir", po::value(&bin_dir)->value_name("DIR"),
       "where pstrain-ps etc. are (default: next to pstrain, the build tree, then PATH)")
      ("log-level", po::value(&c.log_level)->value_name("LEVEL"),
       "debug|info|warning|error, for every task")
      ("restart", po::value(&restart)->value_name("POLICY")->default_value("never"),
       "on-failure: start a task that exited non-zero again; never")
      ("max-restarts", po::value(&c.max_restarts)->value_name("N")->default_value(3),
       "restarts per task with --restart on-failure")
      ("shutdown-grace", po::value(&grace)->value_name("S")->default_value(30.0, "30"),
       "seconds the other tasks get to exit after the chief exited; then they are "
       "terminated and reported as failed");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain local --cluster FILE --job FILE [OPTIONS] [-- DAEMON_ARGS...]",
        "Runs every task of the cluster file on this machine (ps, workers, chief, then the\n"
        "evaluator if listed), each with its own TF_CONFIG, and prints their output\n"
        "prefixed with [role:index]. Arguments after -- go to every daemon.\n"
        "Ctrl-C or SIGTERM: the first asks the chief to stop gracefully, the second sends\n"
        "SIGTERM to every task, the third SIGKILL. Exits 0 when every task exited 0,\n"
        "otherwise prints the failed tasks and exits 1.", d)});
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
    return InvalidArgument("pstrain local: --restart: \"" + restart + "\" is not on-failure or never");
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

// `pstrain <sub> MODEL_DIR ...`: one positional argument, the model dir.
Status ParseWithModelDir(const std::string& sub, const std::vector<std::string>& args,
                         po::options_description desc, po::variables_map* vm, std::string* model_dir) {
  desc.add_options()("model-dir", po::value(model_dir)->value_name("MODEL_DIR"), "the model directory");
  try {
    po::positional_options_description pos;
    pos.add("model-dir", 1);
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), *vm);
    po::notify(*vm);
  } catch (const std::exception& e) {
    return InvalidArgument("pstrain " + sub + ": " + e.what());
  }
  if (!vm->count("model-dir") || model_dir->empty()) {
    return InvalidArgument("pstrain " + sub + ": MODEL_DIR is required");
  }
  return Status::Ok();
}

Result<Command> ParseReport(const std::vector<std::string>& args) {
  ReportCommand c;
  po::options_description d("options");
  d.add_options()
      ("help,h", "print this help")
      ("out", po::value(&c.out)->value_name("FILE"), "where to write the page (default MODEL_DIR/report.html)");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain report MODEL_DIR [--out FILE]",
        "Writes a self-contained HTML page (no scripts, no external files) with a summary\n"
        "table and plots of training loss, training accuracy, evaluation accuracy/AUC and\n"
        "throughput, from MODEL_DIR/train_metrics.jsonl and MODEL_DIR/eval/metrics.jsonl.\n"
        "Works during training too. Missing metrics show as \"no data\".", d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseWithModelDir("report", args, d, &vm, &c.model_dir));
  return Command(std::move(c));
}

Result<Command> ParseInspect(const std::vector<std::string>& args) {
  InspectCommand c;
  int64_t step = 0;
  po::options_description d("options");
  d.add_options()
      ("help,h", "print this help")
      ("step", po::value(&step)->value_name("N"), "the checkpoint to detail (default: the newest)")
      ("verify", "read all data and check every record's checksums");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain inspect MODEL_DIR [--step N] [--verify]",
        "Lists the committed checkpoints of MODEL_DIR (step, time, size, final), then one\n"
        "checkpoint's variables: partition, rows, shape, ps task, slots, bytes and checksum\n"
        "status. Exit 0 when everything checked is intact, 1 when there is no checkpoint or\n"
        "damage was found.", d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseWithModelDir("inspect", args, d, &vm, &c.model_dir));
  if (vm.count("step")) {
    if (step < 0) return InvalidArgument("pstrain inspect: --step: " + std::to_string(step) + " is negative");
    c.step = step;
  }
  c.verify = vm.count("verify") > 0;
  return Command(std::move(c));
}

Result<Command> ParseGenCtr(const std::vector<std::string>& args) {
  GenCtrCommand c;
  std::string spec;
  uint64_t seed = 0;
  int64_t train = 0, eval = 0;
  po::options_description d("options");
  d.add_options()
      ("help,h", "print this help")
      ("out", po::value(&c.out_dir)->value_name("DIR"), "output directory (created); required")
      ("spec", po::value(&spec)->value_name("FILE"),
       "JSON spec: seed, train_examples, eval_examples, bias, gzip, fields, interactions\n"
       "(see configs/README.md); absent keys take the defaults")
      ("seed", po::value(&seed)->value_name("N"), "generator seed (default 1)")
      ("train-examples", po::value(&train)->value_name("N"), "training examples (default 1000000)")
      ("eval-examples", po::value(&eval)->value_name("N"), "evaluation examples (default 100000)")
      ("gzip", "gzip-compress the two data files (same names)");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain gen-ctr --out DIR [--spec FILE] [--seed N] [--train-examples N]\n"
        "                        [--eval-examples N] [--gzip]",
        "Writes a seeded synthetic click data set: DIR/train.libsvm, DIR/eval.libsvm and\n"
        "DIR/ctr.json. Each example has ids from several fields (default 8, vocabularies of\n"
        "10 to 1e6 ids, Zipf-distributed), all in one LibSVM id space; the label is drawn\n"
        "from a known logistic model over the ids. ctr.json holds the spec, num_features,\n"
        "field_offsets (for the libsvm reader's \"field_offsets\") and the ground-truth\n"
        "model's AUC and logloss on exactly the eval examples written: the best a trained\n"
        "model can reach. The same spec and seed always give the same files.\n"
        "configs/job-ctr-lr.json and configs/job-ctr-emb.json train on\n"
        "`pstrain gen-ctr --out /tmp/pstrain-ctr`.", d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("gen-ctr", args, d, &vm));
  if (!vm.count("out") || c.out_dir.empty()) {
    return InvalidArgument("pstrain gen-ctr: --out DIR is required");
  }
  if (vm.count("spec")) c.spec_file = spec;
  if (vm.count("seed")) c.seed = seed;
  if (vm.count("train-examples")) {
    if (train < 0) return InvalidArgument("pstrain gen-ctr: --train-examples: must not be negative");
    c.train_examples = train;
  }
  if (vm.count("eval-examples")) {
    if (eval < 1) return InvalidArgument("pstrain gen-ctr: --eval-examples: must be at least 1");
    c.eval_examples = eval;
  }
  c.gzip = vm.count("gzip") > 0;
  return Command(std::move(c));
}

// ---- small text helpers --------------------------------------------------------------

std::string ShellSingleQuote(std::string_view text) {
  std::string out = "'";
  for (char ch : text) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

std::string ScalarText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void PrintErr(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

Result<std::optional<std::string>> LoadSecret(const std::optional<std::string>& file) {
  if (!file) return std::optional<std::string>();
  auto s = net::ReadSecretFile(*file);
  if (!s.ok()) return InvalidArgument("--secret-file: " + s.status().message());
  return std::optional<std::string>(std::move(*s));
}

}  // namespace

// ---- parsing -----------------------------------------------------------------------

Result<Command> ParseLauncherArgs(const std::vector<std::string>& args) {
  if (args.empty()) {
    return InvalidArgument(
        "pstrain: missing command (tf-config, local, stop, status, report, inspect); see pstrain --help");
  }
  const std::string& sub = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "--help" || sub == "-h") return Command(HelpCommand{kTopHelp});
  if (sub == "help") {
    if (rest.empty()) return Command(HelpCommand{kTopHelp});
    return ParseLauncherArgs({rest[0], "--help"});
  }
  if (sub == "tf-config") return ParseTfConfig(rest);
  if (sub == "stop") return ParseStop(rest);
  if (sub == "status") return ParseStatus(rest);
  if (sub == "local") return ParseLocal(rest);
  if (sub == "report") return ParseReport(rest);
  if (sub == "inspect") return ParseInspect(rest);
  if (sub == "gen-ctr") return ParseGenCtr(rest);
  return InvalidArgument("pstrain: unknown command \"" + sub +
                         "\" (tf-config, local, stop, status, report, inspect); see pstrain --help");
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
  return RunLocal(std::get<LocalCommand>(*command));
}

// ---- tf-config -----------------------------------------------------------------------

std::string FormatTfConfigs(const cluster::ClusterSpec& spec, bool json) {
  std::string out;
  bool first = true;
  for (const TaskId& id : spec.AllTasks()) {
    const cluster::HostPort& hp = spec.address(id);
    std::string tf = cluster::ToTfConfigJson(spec, id);
    if (json) {
      Json line = Json::object();
      line["task"] = id.ToString();
      line["type"] = cluster::TaskTypeName(id.type);
      line["index"] = id.index;
      line["host"] = hp.host;
      line["port"] = hp.port;
      line["tf_config"] = Json::parse(tf);
      out += line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    } else {
      if (!first) out += "\n";
      out += "# " + id.ToString() + " (" + hp.ToString() + ")\n";
      out += "export TF_CONFIG=" + ShellSingleQuote(tf) + "\n";
    }
    first = false;
  }
  return out;
}

// ---- local: plan -----------------------------------------------------------------------

std::string DaemonName(TaskType type) { return std::string("pstrain-") + cluster::TaskTypeName(type); }

Result<std::string> FindDaemon(TaskType type, const std::optional<std::string>& bin_dir,
                               const std::string& self_dir, const std::string& path_env,
                               const std::function<bool(const std::string&)>& is_executable) {
  namespace fs = std::filesystem;
  const std::string name = DaemonName(type);
  if (bin_dir) {
    std::string p = (fs::path(*bin_dir) / name).string();
    if (is_executable(p)) return p;
    return NotFound("--bin-dir: no executable " + p);
  }
  std::vector<std::string> looked;
  if (!self_dir.empty()) {
    if (is_executable((fs::path(self_dir) / "pstrain-ps").string())) {
      std::string p = (fs::path(self_dir) / name).string();
      if (is_executable(p)) return p;
    }
    looked.push_back(self_dir);
    fs::path build = (fs::path(self_dir) / ".." / "daemons" / cluster::TaskTypeName(type) / name)
                         .lexically_normal();
    if (is_executable(build.string())) return build.string();
    looked.push_back(build.parent_path().string());
  }
  size_t start = 0;
  for (;;) {
    size_t colon = path_env.find(':', start);
    std::string dir = path_env.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    std::string p = (fs::path(dir) / name).string();
    if (!path_env.empty() && is_executable(p)) return p;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  std::string where;
  for (const auto& l : looked) where += l + ", ";
  return NotFound("cannot find " + name + " (looked in " + where +
                  "and PATH); build it (ninja -C build) or pass --bin-dir DIR");
}

Result<std::vector<TaskPlan>> PlanLocal(const LocalCommand& command, const cluster::ClusterSpec& spec,
                                        const std::function<std::string(TaskType)>& executable,
                                        bool openblas_threads_set, const std::string& job_model_dir) {
  if (spec.count(TaskType::kChief) != 1) {
    return InvalidArgument(command.cluster_file +
                           ": the cluster has no chief; pstrain local needs one to coordinate training");
  }
  if (spec.count(TaskType::kPs) == 0) {
    return InvalidArgument(command.cluster_file + ": the cluster has no ps task");
  }
  if (spec.count(TaskType::kWorker) == 0) {
    return InvalidArgument(command.cluster_file + ": the cluster has no worker task");
  }
  const std::string& eval_dir = command.model_dir.empty() ? job_model_dir : command.model_dir;
  if (spec.count(TaskType::kEvaluator) > 0 && eval_dir.empty()) {
    return InvalidArgument("--model-dir DIR is required: the cluster lists an evaluator, which "
                           "evaluates the checkpoints in the model dir, and the job file names none");
  }
  std::vector<TaskPlan> plan;
  for (TaskType type : {TaskType::kPs, TaskType::kWorker, TaskType::kChief, TaskType::kEvaluator}) {
    for (int i = 0; i < spec.count(type); ++i) {
      TaskPlan t;
      t.id = TaskId{type, i};
      t.argv.push_back(executable(type));
      if (type == TaskType::kChief) {
        t.argv.insert(t.argv.end(), {"--job", command.job_file});
      }
      if (type == TaskType::kChief && !command.model_dir.empty()) {
        t.argv.insert(t.argv.end(), {"--model-dir", command.model_dir});
      }
      if (type == TaskType::kEvaluator) t.argv.insert(t.argv.end(), {"--model-dir", eval_dir});
      if (command.secret_file) t.argv.insert(t.argv.end(), {"--secret-file", *command.secret_file});
      if (!command.log_level.empty()) t.argv.insert(t.argv.end(), {"--log-level", command.log_level});
      t.argv.insert(t.argv.end(), command.extra_args.begin(), command.extra_args.end());
      t.env.emplace_back("TF_CONFIG", cluster::ToTfConfigJson(spec, t.id));
      if (!openblas_threads_set) t.env.emplace_back("OPENBLAS_NUM_THREADS", "1");
      plan.push_back(std::move(t));
    }
  }
  return plan;
}

std::string JobModelDir(const std::string& job_file) {
  auto job = ReadJsonFile(job_file);
  if (!job.ok() || !job->is_object()) return "";
  auto it = job->find("model_dir");
  return it != job->end() && it->is_string() ? it->get<std::string>() : "";
}

std::string TaskLabel(TaskId id) { return "[" + id.ToString() + "]"; }

size_t LabelWidth(const std::vector<TaskPlan>& plan) {
  size_t w = kLauncherLabel.size();
  for (const auto& t : plan) w = std::max(w, TaskLabel(t.id).size());
  return w;
}

std::string PrefixLine(std::string_view label, size_t width, std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string out(label);
  if (out.size() < width) out.append(width - out.size(), ' ');
  out += ' ';
  out += line;
  return out;
}

// ---- local: restarts and summary -----------------------------------------------------------

RestartDecision DecideRestart(RestartPolicy policy, int max_restarts, const RestartQuery& q) {
  if (q.exit_status == 0) return {false, "exited cleanly"};
  if (policy == RestartPolicy::kNever) return {false, "not restarted (--restart never)"};
  if (q.stopping) return {false, "not restarted: the launcher is stopping"};
  if (q.chief_gone && q.task.type != TaskType::kChief) {
    return {false, "not restarted: the chief has exited"};
  }
  if (q.exit_status == 2) {
    return {false, "not restarted: exit status 2 is a usage or configuration error, which a "
                   "restart with the same arguments would repeat"};
  }
  if (q.exit_status == 126 || q.exit_status == 127) {
    return {false, "not restarted: the executable could not be run"};
  }
  if (q.restarts_done >= max_restarts) {
    return {false, "not restarted: already restarted " + std::to_string(q.restarts_done) +
                       " times (--max-restarts " + std::to_string(max_restarts) + ")"};
  }
  return {true, "restart " + std::to_string(q.restarts_done + 1) + " of " + std::to_string(max_restarts)};
}

std::string DescribeExit(int exit_status) {
  if (exit_status > 128 && exit_status < 128 + 65) {
    static constexpr std::array<std::pair<int, const char*>, 11> kNames = {{
        {SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
        {SIGABRT, "SIGABRT"}, {SIGFPE, "SIGFPE"}, {SIGKILL, "SIGKILL"}, {SIGSEGV, "SIGSEGV"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}}};
    int sig = exit_status - 128;
    std::string name = "signal " + std::to_string(sig);
    for (const auto& [n, s] : kNames) {
      if (n == sig) name = s;
    }
    return "killed by " + name + " (" + std::to_string(exit_status) + ")";
  }
  return "exit " + std::to_string(exit_status);
}

bool Failed(const TaskOutcome& o) { return o.exit_status != 0 || !o.note.empty(); }

std::string FormatFailureSummary(const std::vector<TaskOutcome>& outcomes) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& o : outcomes) {
    if (!Failed(o)) continue;
    std::string what = DescribeExit(o.exit_status);
    if (o.restarts > 0) what += " after " + std::to_string(o.restarts) + (o.restarts == 1 ? " restart" : " restarts");
    if (!o.note.empty()) what += ": " + o.note;
    rows.push_back({"  " + o.task.ToString(), what});
  }
  if (rows.empty()) return "";
  return std::to_string(rows.size()) + " of " + std::to_string(outcomes.size()) +
         " tasks failed:\n" + TableText(rows);
}

// ---- status -----------------------------------------------------------------------------

namespace {

// A cell of the workers/ps tables: "-" unless `key` holds a number.
std::string NumCell(const Json& entry, const char* key, const char* format, double scale = 1) {
  auto it = entry.find(key);
  if (it == entry.end() || !it->is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, it->get<double>() * scale);
  return buf;
}

std::string BytesCell(const Json& entry, const char* key, const char* suffix = "") {
  auto it = entry.find(key);
  if (it == entry.end() || !it->is_number() || it->get<double>() < 0) return "-";
  return HumanBytes(static_cast<uint64_t>(it->get<double>() + 0.5)) + suffix;
}

std::string TextCell(const Json& entry, const char* key) {
  auto it = entry.find(key);
  return it == entry.end() ? "-" : ScalarText(*it);
}

std::string WorkersTable(const Json& workers) {
  std::vector<std::vector<std::string>> rows = {
      {"worker", "state", "steps", "ex/s", "step_ms", "data", "pull", "compute", "push"}};
  for (const auto& w : workers) {
    if (!w.is_object()) continue;
    rows.push_back({TextCell(w, "task"), TextCell(w, "state"), TextCell(w, "steps"),
                    NumCell(w, "examples_per_s", "%.0f"), NumCell(w, "step_ms", "%.1f"),
                    NumCell(w, "data_frac", "%.0f%%", 100), NumCell(w, "pull_frac", "%.0f%%", 100),
                    NumCell(w, "compute_frac", "%.0f%%", 100), NumCell(w, "push_frac", "%.0f%%", 100)});
  }
  return TableText(rows);
}

std::string PsTable(const Json& ps) {
  std::vector<std::vector<std::string>> rows = {{"ps", "address", "state", "req/s", "in/s", "out/s", "rows/s",
                                                 "queue", "max_queue", "held", "shards"}};
  std::string errors;
  for (const auto& p : ps) {
    if (!p.is_object()) continue;
    rows.push_back({TextCell(p, "task"), TextCell(p, "address"), TextCell(p, "state"),
                    NumCell(p, "requests_per_s", "%.0f"), BytesCell(p, "bytes_in_per_s", "/s"),
                    BytesCell(p, "bytes_out_per_s", "/s"), NumCell(p, "rows_per_s", "%.0f"),
                    TextCell(p, "queue_depth"), TextCell(p, "max_queue_depth"), BytesCell(p, "bytes_held"),
                    TextCell(p, "shards")});
    if (p.contains("error")) errors += TextCell(p, "task") + ": " + TextCell(p, "error") + "\n";
  }
  return TableText(rows) + errors;
}

}  // namespace

Result<std::string> FormatStatus(std::string_view json_text) {
  PS_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, "status reply"));
  if (!root.is_object()) return InvalidArgument("status reply: not a JSON object");
  std::string out;
  const Json* tasks = nullptr;
  std::string load;  // the workers and ps tables, then the hints
  for (const auto& [key, value] : root.items()) {
    if (key == "tasks" && value.is_array()) {
      tasks = &value;
      continue;
    }
    if ((key == "workers" || key == "ps") && value.is_array()) {
      if (!value.empty()) load += "\n" + (key == "workers" ? WorkersTable(value) : PsTable(value));
      continue;
    }
    out += key + ": " + ScalarText(value) + "\n";
  }
  std::string hints;
  for (const auto& h : LoadHints(root)) hints += h + "\n";
  if (!hints.empty()) load += "\n" + hints;
  if (tasks == nullptr) return out + load;
  if (tasks->empty()) return out + "tasks: none\n" + load;
  std::vector<std::string> columns;
  for (const auto& t : *tasks) {
    if (!t.is_object()) continue;
    for (const auto& [key, value] : t.items()) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back(columns);
  std::string odd;
  size_t i = 0;
  for (const auto& t : *tasks) {
    if (!t.is_object()) {
      odd += "tasks[" + std::to_string(i) + "]: " + ScalarText(t) + "\n";
    } else {
      std::vector<std::string> row;
      for (const auto& c : columns) row.push_back(t.contains(c) ? ScalarText(t[c]) : "-");
      rows.push_back(std::move(row));
    }
    ++i;
  }
  out += "\n";
  if (rows.size() > 1) out += TableText(rows);
  return out + odd + load;
}

// ---- chief client -------------------------------------------------------------------------

Result<proto::Body> CallChief(const cluster::HostPort& chief, const std::optional<std::string>& secret,
                              std::chrono::milliseconds timeout, proto::Body request,
                              std::shared_ptr<net::TlsContext> tls) {
  const std::string where = chief.ToString();
  net::Runtime runtime(1);
  net::ClientOptions o;
  o.host = chief.host;
  o.port = chief.port;
  o.peer_name = "chief:0";
  o.identity = net::Identity{proto::Role::kClient, 0, 0, secret};
  o.connect_deadline = timeout;
  o.handshake_timeout = timeout;
  o.call_timeout = timeout;
  o.heartbeat_interval = std::chrono::milliseconds(0);
  o.tls = std::move(tls);
  auto client = net::Client::Connect(runtime, o);
  if (!client.ok()) {
    const std::string& m = client.status().message();
    return Status(client.status().code(), m.find(where) != std::string::npos
                                              ? m
                                              : "cannot reach the chief at " + where + ": " + m);
  }
  auto reply = (*client)->CallSync(std::move(request));
  (*client)->Close();
  if (!reply.ok()) {
    return Status(reply.status().code(), "the chief at " + where + ": " + reply.status().message());
  }
  return std::move(reply->envelope.body);
}

// ---- subcommands --------------------------------------------------------------------------

int RunTfConfig(const TfConfigCommand& command) {
  auto spec = cluster::LoadClusterFile(command.cluster_file);
  if (!spec.ok()) {
    PrintErr("pstrain tf-config: " + spec.status().message());
    return kExitUsage;
  }
  std::string text = FormatTfConfigs(*spec, command.json);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

int RunStop(const StopCommand& command) {
  auto secret = LoadSecret(command.target.secret_file);
  auto tls = net::TlsFromFlags(command.target.tls_cert, command.target.tls_key, command.target.tls_ca);
  if (!secret.ok() || !tls.ok()) {
    PrintErr("pstrain stop: " + (secret.ok() ? tls.status() : secret.status()).message());
    return kExitUsage;
  }
  const std::string where = command.target.chief.ToString();
  auto reply = CallChief(command.target.chief, *secret, command.target.timeout, proto::Stop{command.reason}, *tls);
  if (!reply.ok()) {
    PrintErr("pstrain stop: " + reply.status().message());
    return kExitFailure;
  }
  if (!std::holds_alternative<proto::Ack>(*reply)) {
    PrintErr("pstrain stop: the chief at " + where + " answered Stop with " + proto::BodyName(*reply) +
             " instead of Ack");
    return kExitFailure;
  }
  std::printf("pstrain stop: the chief at %s acknowledged; it stops scheduling steps, writes the "
              "final checkpoint, shuts every task down and exits\n", where.c_str());
  return kExitOk;
}

int RunStatus(const StatusCommand& command) {
  auto secret = LoadSecret(command.target.secret_file);
  auto tls = net::TlsFromFlags(command.target.tls_cert, command.target.tls_key, command.target.tls_ca);
  if (!secret.ok() || !tls.ok()) {
    PrintErr("pstrain status: " + (secret.ok() ? tls.status() : secret.status()).message());
    return kExitUsage;
  }
  auto reply = CallChief(command.target.chief, *secret, command.target.timeout, proto::GetStatus{}, *tls);
  if (!reply.ok()) {
    PrintErr("pstrain status: " + reply.status().message());
    return kExitFailure;
  }
  const auto* status = std::get_if<proto::StatusReply>(&*reply);
  if (status == nullptr) {
    PrintErr("pstrain status: the chief at " + command.target.chief.ToString() + " answered GetStatus with " +
             proto::BodyName(*reply) + " instead of StatusReply");
    return kExitFailure;
  }
  if (command.json) {
    std::printf("%s\n", status->json.c_str());
    return kExitOk;
  }
  auto text = FormatStatus(status->json);
  if (!text.ok()) {
    PrintErr("pstrain status: " + text.status().message() + "; the raw reply follows");
    std::printf("%s\n", status->json.c_str());
    return kExitFailure;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

// ---- local: the supervisor -----------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kRestartDelay{1000};
constexpr milliseconds kKillGrace{10000};  // after our SIGTERM, before SIGKILL
constexpr milliseconds kStopTimeout{5000};

// One writer for every line of the launcher and its tasks, so lines never interleave.
class Output {
 public:
  explicit Output(size_t width) : width_(width) {}
  void Line(std::string_view label, std::string_view line) {
    std::string s = PrefixLine(label, width_, line);
    s += '\n';
    std::lock_guard lock(mu_);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  void Say(std::string_view line) { Line(kLauncherLabel, line); }

 private:
  std::mutex mu_;
  size_t width_;
};

struct Task {
  TaskPlan plan;
  std::string label;
  std::unique_ptr<Subprocess> proc;
  int pidfd = -1;
  int restarts = 0;
  std::optional<int> last_exit;
  std::optional<Clock::time_point> restart_at;
  std::string note;

  std::string name() const { return plan.id.ToString(); }
  bool running() const { return proc != nullptr; }
  bool finished() const { return !proc && !restart_at && last_exit.has_value(); }
};

bool LooksLocal(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "0.0.0.0" || host == "::") return true;
  if (host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && host == name;
}

class Supervisor {
 public:
  Supervisor(const LocalCommand& command, const cluster::ClusterSpec& spec, std::vector<TaskPlan> plan,
             std::optional<std::string> secret, int sigfd)
      : command_(command), spec_(spec), secret_(std::move(secret)), sigfd_(sigfd),
        out_(LabelWidth(plan)) {
    for (auto& p : plan) {
      Task t;
      t.label = TaskLabel(p.id);
      t.plan = std::move(p);
      tasks_.push_back(std::move(t));
    }
  }

  ~Supervisor() {
    if (stop_.valid()) stop_.wait();
    for (auto& t : tasks_) ClosePidfd(t);
  }

  int Run() {
    Banner();
    for (auto& t : tasks_) Start(t);
    while (!AllFinished()) {
      WaitForEvent();
      HandleSignals();
      ReapExited();
      StartDueRestarts();
      CheckChiefGone();
      CheckDeadlines();
      CheckStopReply();
    }
    return Finish();
  }

 private:
  void Banner() {
    const cluster::HostPort chief = spec_.address({TaskType::kChief, 0});
    std::string line = "cluster " + command_.cluster_file + ": chief " + chief.ToString() + ", " +
                       std::to_string(spec_.count(TaskType::kWorker)) + " worker(s), " +
                       std::to_string(spec_.count(TaskType::kPs)) + " ps";
    if (spec_.count(TaskType::kEvaluator) > 0) line += ", evaluator";
    std::string dir = command_.model_dir;
    if (dir.empty()) dir = JobModelDir(command_.job_file);
    if (dir.empty()) {
      dir = "(none given)";
    } else if (command_.model_dir.empty()) {
      dir += " (from the job file)";
    }
    line += "; model dir: " + dir;
    line += "; stop with Ctrl-C or: pstrain stop --chief " + ControlAddress().ToString();
    if (command_.secret_file) line += " --secret-file " + *command_.secret_file;
    out_.Say(line);
    for (const auto& t : tasks_) {
      const auto& hp = spec_.address(t.plan.id);
      if (!LooksLocal(hp.host)) {
        out_.Say("WARNING: " + t.name() + " listens on " + hp.ToString() +
                 ", which does not look like this machine");
      }
    }
  }

  cluster::HostPort ControlAddress() const {
    cluster::HostPort hp = spec_.address({TaskType::kChief, 0});
    if (hp.host == "0.0.0.0") hp.host = "127.0.0.1";
    if (hp.host == "::") hp.host = "::1";
    return hp;
  }

  Task* Chief() {
    for (auto& t : tasks_) {
      if (t.plan.id.type == TaskType::kChief) return &t;
    }
    return nullptr;
  }

  bool ChiefGone() {
    Task* c = Chief();
    return c != nullptr && c->finished();
  }

  bool AllFinished() const {
    return std::all_of(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.finished(); });
  }

  static void ClosePidfd(Task& t) {
    if (t.pidfd >= 0) ::close(t.pidfd);
    t.pidfd = -1;
  }

  void Start(Task& t) {
    SpawnOptions o;
    o.argv = t.plan.argv;
    o.env = t.plan.env;
    o.on_line = [this, label = t.label](const std::string& line) { out_.Line(label, line); };
    auto p = Subprocess::Spawn(std::move(o));
    if (!p.ok()) {
      out_.Say("ERROR: " + t.name() + ": " + p.status().message());
      Exited(t, 127);
      return;
    }
    t.proc = std::move(*p);
    t.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, t.proc->pid(), 0));
    out_.Say("started " + t.name() + " (pid " + std::to_string(t.proc->pid()) + "): " + t.plan.argv[0]);
  }

  void WaitForEvent() {
    std::vector<pollfd> fds;
    fds.push_back({sigfd_, POLLIN, 0});
    bool all_pidfds = true;
    for (const auto& t : tasks_) {
      if (!t.running()) continue;
      if (t.pidfd >= 0) {
        fds.push_back({t.pidfd, POLLIN, 0});
      } else {
        all_pidfds = false;
      }
    }
    auto now = Clock::now();
    // Without a pidfd for every child (old kernel) the children are polled.
    milliseconds wait = all_pidfds ? milliseconds(1000) : milliseconds(100);
    if (stop_.valid()) wait = std::min(wait, milliseconds(100));
    auto until = [&](Clock::time_point t) {
      wait = std::min(wait, std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(t - now) + milliseconds(1)));
    };
    for (const auto& t : tasks_) {
      if (t.restart_at) until(*t.restart_at);
    }
    if (grace_deadline_) until(*grace_deadline_);
    if (kill_deadline_) until(*kill_deadline_);
    ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  }

  void HandleSignals() {
    signalfd_siginfo info;
    while (::read(sigfd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      OnSignal(static_cast<int>(info.ssi_signo));
    }
  }

  void OnSignal(int sig) {
    ++signals_;
    const std::string name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
    stopping_ = true;
    for (auto& t : tasks_) {
      if (t.restart_at) {
        t.restart_at.reset();
        out_.Say(t.name() + ": pending restart cancelled");
      }
    }
    Task* chief = Chief();
    if (signals_ == 1 && chief != nullptr && chief->running()) {
      out_.Say(name + ": asking the chief to stop (it writes the final checkpoint and shuts every task "
               "down); signal again to send SIGTERM to every task, a third time to SIGKILL them");
      cluster::HostPort addr = ControlAddress();
      std::optional<std::string> secret = secret_;
      stop_ = std::async(std::launch::async, [addr, secret, name] {
        return CallChief(addr, secret, kStopTimeout, proto::Stop{"pstrain local: " + name});
      });
    } else if (signals_ <= 2) {
      out_.Say(name + ": sending SIGTERM to every task");
      SignalAll(SIGTERM);
    } else {
      out_.Say(name + ": sending SIGKILL to every task");
      SignalAll(SIGKILL);
    }
  }

  void SignalAll(int sig) {
    for (auto& t : tasks_) {
      if (t.running()) t.proc->Signal(sig);
    }
  }

  void CheckStopReply() {
    if (!stop_.valid() || stop_.wait_for(milliseconds(0)) != std::future_status::ready) return;
    Result<proto::Body> reply = stop_.get();
    Task* chief = Chief();
    if (reply.ok() && std::holds_alternative<proto::Ack>(*reply)) {
      out_.Say("the chief acknowledged the stop; waiting for the tasks to shut down");
      return;
    }
    std::string why = reply.ok() ? std::string("answered ") + proto::BodyName(*reply) + " instead of Ack"
                                 : reply.status().message();
    out_.Say("WARNING: stop request failed: " + why);
    if (chief != nullptr && chief->running()) {
      out_.Say("sending SIGTERM to the chief instead (it stops gracefully on SIGTERM)");
      chief->proc->Signal(SIGTERM);
    }
  }

  void ReapExited() {
    for (auto& t : tasks_) {
      if (!t.running() || t.proc->Running()) continue;
      int status = t.proc->Wait();
      t.proc.reset();  // joins the output reader: the task's last lines come first
      ClosePidfd(t);
      Exited(t, status);
    }
  }

  void Exited(Task& t, int status) {
    t.last_exit = status;
    const bool chief = t.plan.id.type == TaskType::kChief;
    if (status == 0) {
      out_.Say(t.name() + " exited cleanly");
    } else {
      out_.Say("ERROR: " + t.name() + " failed: " + DescribeExit(status));
    }
    RestartQuery q{t.plan.id, status, t.restarts, stopping_, !chief && ChiefGone()};
    RestartDecision d = DecideRestart(command_.restart, command_.max_restarts, q);
    if (d.restart) {
      ++t.restarts;
      t.restart_at = Clock::now() + kRestartDelay;
      out_.Say("WARNING: restarting " + t.name() + " in 1 s (" + d.reason + ")");
    } else if (status != 0 && command_.restart == RestartPolicy::kOnFailure) {
      out_.Say(t.name() + " " + d.reason);
    }
  }

  // Every ps and worker has exited 0: the chief shut the cluster down on purpose (e.g. a
  // ps that did not come back) and a restarted chief would only wait for tasks that are gone.
  bool ClusterShutDown() const {
    return std::all_of(tasks_.begin(), tasks_.end(), [](const Task& o) {
      const TaskType type = o.plan.id.type;
      if (type != TaskType::kPs && type != TaskType::kWorker) return true;
      return o.finished() && o.last_exit == 0;
    });
  }

  void StartDueRestarts() {
    auto now = Clock::now();
    for (auto& t : tasks_) {
      if (!t.restart_at || *t.restart_at > now) continue;
      t.restart_at.reset();
      if (t.plan.id.type == TaskType::kChief && ClusterShutDown()) {
        out_.Say(t.name() + " not restarted: it shut the cluster down (every ps and worker exited 0)");
        continue;
      }
      out_.Say("WARNING: restarting " + t.name() + " (restart " + std::to_string(t.restarts) + ")");
      Start(t);
    }
  }

  void CheckChiefGone() {
    if (grace_deadline_ || !ChiefGone()) return;
    std::string others;
    for (auto& t : tasks_) {
      if (t.restart_at) {
        t.restart_at.reset();
        out_.Say(t.name() + ": pending restart cancelled, the chief has exited");
      }
      if (t.running()) others += (others.empty() ? "" : ", ") + t.name();
    }
    if (Chief()->last_exit == std::optional<int>(2)) {
      // A usage or configuration error: the chief never started the job, so nobody will
      // shut the others down. Do not make the user wait for the grace period.
      grace_deadline_ = Clock::now();
      grace_reason_ = "the chief exited 2 (a usage or configuration error: see its output above)";
      return;
    }
    grace_deadline_ = Clock::now() + command_.shutdown_grace;
    if (!others.empty()) {
      out_.Say("the chief has exited; waiting up to " + Secs(command_.shutdown_grace) + " for " + others);
    }
  }

  static std::string Secs(milliseconds ms) {
    std::ostringstream s;
    s << static_cast<double>(ms.count()) / 1000.0 << " s";
    return s.str();
  }

  void CheckDeadlines() {
    auto now = Clock::now();
    if (grace_deadline_ && !grace_fired_ && now >= *grace_deadline_) {
      grace_fired_ = true;
      bool any = false;
      for (auto& t : tasks_) {
        if (!t.running()) continue;
        any = true;
        if (!grace_reason_.empty()) {
          t.note = "terminated by the launcher: " + grace_reason_;
          out_.Say(t.name() + ": " + grace_reason_ + ". Sending SIGTERM");
        } else {
          t.note = "still running " + Secs(command_.shutdown_grace) +
                   " after the chief exited (terminated by the launcher)";
          out_.Say("ERROR: " + t.name() + " is still running " + Secs(command_.shutdown_grace) +
                   " after the chief exited: the chief did not shut it down. Sending SIGTERM");
        }
        t.proc->Signal(SIGTERM);
      }
      if (any) kill_deadline_ = now + kKillGrace;
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      kill_deadline_.reset();
      for (auto& t : tasks_) {
        if (!t.running()) continue;
        out_.Say("ERROR: " + t.name() + " ignored SIGTERM for " + Secs(kKillGrace) + ". Sending SIGKILL");
        t.proc->Signal(SIGKILL);
      }
    }
  }

  int Finish() {
    std::vector<TaskOutcome> outcomes;
    for (const auto& t : tasks_) {
      outcomes.push_back({t.plan.id, t.last_exit.value_or(0), t.restarts, t.note});
    }
    std::string summary = FormatFailureSummary(outcomes);
    if (summary.empty()) {
      out_.Say("all " + std::to_string(tasks_.size()) + " tasks exited cleanly");
      return kExitOk;
    }
    std::istringstream lines(summary);
    for (std::string line; std::getline(lines, line);) out_.Say(line);
    return kExitFailure;
  }

  const LocalCommand& command_;
  const cluster::ClusterSpec& spec_;
  std::optional<std::string> secret_;
  int sigfd_;
  Output out_;
  std::vector<Task> tasks_;  // after out_: their output readers write to it
  int signals_ = 0;
  bool stopping_ = false;
  std::future<Result<proto::Body>> stop_;
  std::optional<Clock::time_point> grace_deadline_;
  std::string grace_reason_;  // why the others are stopped without a grace period; empty: the usual grace
  bool grace_fired_ = false;
  std::optional<Clock::time_point> kill_deadline_;
};

bool IsExecutable(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

int RunLocal(const LocalCommand& command) {
  auto fail = [](const std::string& message) {
    PrintErr("pstrain local: " + message);
    return kExitUsage;
  };
  auto spec = cluster::LoadClusterFile(command.cluster_file);
  if (!spec.ok()) return fail(spec.status().message());
  if (::access(command.job_file.c_str(), R_OK) != 0) {
    return fail("--job: cannot read " + command.job_file + ": " + std::strerror(errno));
  }
  auto secret = LoadSecret(command.secret_file);
  if (!secret.ok()) return fail(secret.status().message());

  std::error_code ec;
  std::string self_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
  const char* path_env = std::getenv("PATH");
  std::array<std::string, cluster::kNumTaskTypes> exe;
  for (TaskType type : cluster::kAllTaskTypes) {
    if (spec->count(type) == 0) continue;
    auto p = FindDaemon(type, command.bin_dir, self_dir, path_env ? path_env : "", IsExecutable);
    if (!p.ok()) return fail(p.status().message());
    exe[static_cast<size_t>(type)] = *p;
  }
  auto plan = PlanLocal(command, *spec,
                        [&](TaskType type) { return exe[static_cast<size_t>(type)]; },
                        std::getenv("OPENBLAS_NUM_THREADS") != nullptr, JobModelDir(command.job_file));
  if (!plan.ok()) return fail(plan.status().message());

  // Signals are read from a signalfd in the loop; blocked before any thread exists so
  // that every thread inherits the mask. Children get a clean mask from Subprocess.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigset_t old;
  if (::pthread_sigmask(SIG_BLOCK, &set, &old) != 0) {
    PrintErr("pstrain local: cannot block signals");
    return kExitFailure;
  }
  // A closed stdout must not kill the launcher and orphan its tasks.
  ::signal(SIGPIPE, SIG_IGN);
  int sigfd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sigfd < 0) {
    PrintErr(std::string("pstrain local: signalfd: ") + std::strerror(errno));
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return kExitFailure;
  }
  int rc;
  {
    Supervisor supervisor(command, *spec, std::move(*plan), std::move(*secret), sigfd);
    rc = supervisor.Run();
  }
  ::close(sigfd);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return rc;
}

// ---- report and inspect ---------------------------------------------------------------

int RunReport(const ReportCommand& command) {
  auto html = RenderReport(command.model_dir);
  if (!html.ok()) {
    PrintErr("pstrain report: " + html.status().message());
    return kExitFailure;
  }
  std::string out = command.out.empty() ? (std::filesystem::path(command.model_dir) / kReportFile).string()
                                        : command.out;
  // Written beside the target and renamed, so a browser never shows a half-written page.
  std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << *html;
    f.close();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      PrintErr("pstrain report: " + tmp + ": cannot write");
      return kExitFailure;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    PrintErr("pstrain report: " + out + ": cannot write: " + ec.message());
    return kExitFailure;
  }
  std::printf("%s\n", out.c_str());
  return kExitOk;
}

int RunInspect(const InspectCommand& command) {
  InspectOptions options;
  options.step = command.step;
  options.verify = command.verify;
  auto report = InspectModelDir(command.model_dir, options);
  if (!report.ok()) {
    PrintErr("pstrain inspect: " + report.status().message());
    return kExitFailure;
  }
  std::fputs(report->text.c_str(), stdout);
  return report->healthy ? kExitOk : kExitFailure;
}

// ---- gen-ctr -------------------------------------------------------------------------

int RunGenCtr(const GenCtrCommand& command) {
  data::CtrSpec spec = data::DefaultCtrSpec();
  if (command.spec_file) {
    auto json = ReadJsonFile(*command.spec_file);
    if (!json.ok()) {
      PrintErr("pstrain gen-ctr: --spec: " + json.status().message());
      return kExitUsage;
    }
    auto parsed = data::ParseCtrSpec(*json, *command.spec_file);
    if (!parsed.ok()) {
      PrintErr("pstrain gen-ctr: " + parsed.status().message());
      return kExitUsage;
    }
    spec = std::move(*parsed);
  }
  if (command.seed) spec.seed = *command.seed;
  if (command.train_examples) spec.train_examples = *command.train_examples;
  if (command.eval_examples) spec.eval_examples = *command.eval_examples;
  if (command.gzip) spec.gzip = true;
  if (Status st = data::ValidateCtrSpec(spec); !st.ok()) {
    PrintErr("pstrain gen-ctr: " + st.message());
    return kExitUsage;
  }
  auto report = data::GenerateCtr(spec, command.out_dir);
  if (!report.ok()) {
    PrintErr("pstrain gen-ctr: " + report.status().message());
    return kExitFailure;
  }
  const data::CtrReport& r = *report;
  const int64_t examples = spec.train_examples + spec.eval_examples;
  std::string offsets;
  for (size_t i = 0; i + 1 < r.field_offsets.size(); ++i) {
    offsets += (i ? ", " : "") + std::to_string(r.field_offsets[i]);
  }
  std::printf("wrote %lld train and %lld eval examples in %.1f s (%.0f examples/s)\n",
              static_cast<long long>(spec.train_examples), static_cast<long long>(spec.eval_examples),
              r.seconds, r.seconds > 0 ? static_cast<double>(examples) / r.seconds : 0.0);
  std::printf("  train: %s\n  eval:  %s\n  spec:  %s\n", r.train_path.c_str(), r.eval_path.c_str(),
              r.json_path.c_str());
  std::printf("num_features: %lld  field_offsets: [%s]\n", static_cast<long long>(r.num_features),
              offsets.c_str());
  std::printf("click rate: train %.4f, eval %.4f\n", r.train_click_rate, r.eval_click_rate);
  std::printf("ground truth on eval: auc %.4f logloss %.4f\n", r.truth_eval_auc, r.truth_eval_logloss);
  return kExitOk;
}

}  // namespace ps::train

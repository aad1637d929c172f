#include "launcher/cli.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <boost/program_options.hpp>

#include "launcher/chief_client.h"
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

namespace {

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
    "\n"
    "`pstrain COMMAND --help` describes a command's options.\n"
    "exit codes: 0 success, 1 failure, 2 usage or configuration error\n"
    "(daemons also use 138: retryable, and 128+N: ended by signal N)\n";

std::string Usage(const std::string& synopsis, const std::string& about,
                  const po::options_description& options) {
  std::ostringstream out;
  out << "usage: " << synopsis << "\n\n" << about << "\n\n" << options;
  return out.str();
}

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
    m << "pstrain " << sub << ": " << flag << ": " << seconds
      << " is not a valid number of seconds";
    return InvalidArgument(m.str());
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
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

// `pstrain <sub> MODEL_DIR ...`: one positional argument, the model dir.
Status ParseWithModelDir(const std::string& sub, const std::vector<std::string>& args,
                         po::options_description desc, po::variables_map* vm,
                         std::string* model_dir) {
  desc.add_options()("model-dir", po::value(model_dir)->value_name("MODEL_DIR"),
                     "the model directory");
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
  d.add_options()("help,h", "print this help")(
      "out", po::value(&c.out)->value_name("FILE"),
      "where to write the page (default MODEL_DIR/report.html)")(
      "watch", po::value<double>()->implicit_value(10)->value_name("SECONDS"),
      "rewrite the page every SECONDS (default 10) until the run has finished");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain report MODEL_DIR [--out FILE] [--watch [SECONDS]]",
        "Writes a self-contained HTML page (no scripts, no external files) with a summary\n"
        "table and plots of training loss, training accuracy, evaluation accuracy/AUC and\n"
        "throughput, where each worker's step time goes, each ps's load, checkpoints and\n"
        "cluster events on the step axis, and the hints that fired, from\n"
        "MODEL_DIR/train_metrics.jsonl and MODEL_DIR/eval/metrics.jsonl. Works during training\n"
        "too: the page of an unfinished run reloads itself, and --watch keeps rewriting it.\n"
        "Missing metrics show as \"no data\".",
        d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseWithModelDir("report", args, d, &vm, &c.model_dir));
  if (vm.count("watch")) {
    const double watch = vm["watch"].as<double>();
    if (!(watch >= 0.2 && watch <= 3600)) {
      return InvalidArgument("pstrain report: --watch: " + std::to_string(watch) +
                             " is not in 0.2..3600 seconds");
    }
    c.watch_sec = watch;
  }
  return Command(std::move(c));
}

Result<Command> ParseInspect(const std::vector<std::string>& args) {
  InspectCommand c;
  int64_t step = 0;
  po::options_description d("options");
  d.add_options()("help,h", "print this help")("step", po::value(&step)->value_name("N"),
                                               "the checkpoint to detail (default: the newest)")(
      "verify", "read all data and check every record's checksums");
  if (WantsHelp(args)) {
    return Command(HelpCommand{
        Usage("pstrain inspect MODEL_DIR [--step N] [--verify]",
              "Lists the committed checkpoints of MODEL_DIR (step, time, size, final), then one\n"
              "checkpoint's variables: partition, rows, shape, ps task, slots, bytes and checksum\n"
              "status. Exit 0 when everything checked is intact, 1 when there is no checkpoint or\n"
              "damage was found.",
              d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseWithModelDir("inspect", args, d, &vm, &c.model_dir));
  if (vm.count("step")) {
    if (step < 0)
      return InvalidArgument("pstrain inspect: --step: " + std::to_string(step) + " is negative");
    c.step = step;
  }
  c.verify = vm.count("verify") > 0;
  return Command(std::move(c));
}

Result<Command> ParseGenCtr(const std::vector<std::string>& args) {
  GenCtrCommand c;
  std::string spec, formats;
  uint64_t seed = 0;
  int64_t train = 0, eval = 0;
  po::options_description d("options");
  d.add_options()("help,h", "print this help")("out", po::value(&c.out_dir)->value_name("DIR"),
                                               "output directory (created); required")(
      "spec", po::value(&spec)->value_name("FILE"),
      "JSON spec: seed, train_examples, eval_examples, bias, gzip, fields, interactions\n"
      "(see docs/reference/gen-ctr.md); absent keys take the defaults")(
      "seed", po::value(&seed)->value_name("N"), "generator seed (default 1)")(
      "train-examples", po::value(&train)->value_name("N"), "training examples (default 1000000)")(
      "eval-examples", po::value(&eval)->value_name("N"), "evaluation examples (default 100000)")(
      "gzip", "gzip-compress the data files (same names)")(
      "format", po::value(&formats)->value_name("LIST"),
      "comma-separated: libsvm (default), tfrecord, criteo_tsv; the same examples in each")(
      "files", po::value(&c.output.files)->value_name("N"),
      "split each of train and eval into N files (default 1)");
  if (WantsHelp(args)) {
    return Command(HelpCommand{
        Usage("pstrain gen-ctr --out DIR [--spec FILE] [--seed N] [--train-examples N]\n"
              "                        [--eval-examples N] [--gzip] [--format LIST] [--files N]",
              "Writes a seeded synthetic click data set: DIR/train.libsvm, DIR/eval.libsvm and\n"
              "DIR/ctr.json. Each example has ids from several fields (default 8, vocabularies of\n"
              "10 to 1e6 ids, Zipf-distributed), all in one LibSVM id space; the label is drawn\n"
              "from a known logistic model over the ids. ctr.json holds the spec, num_features,\n"
              "field_offsets (for the libsvm reader's \"field_offsets\") and the ground-truth\n"
              "model's AUC and logloss on exactly the eval examples written: the best a trained\n"
              "model can reach. The same spec and seed always give the same files.\n"
              "configs/job-ctr-lr.json and configs/job-ctr-emb.json train on\n"
              "`pstrain gen-ctr --out /tmp/pstrain-ctr`.",
              d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("gen-ctr", args, d, &vm));
  if (!vm.count("out") || c.out_dir.empty()) {
    return InvalidArgument("pstrain gen-ctr: --out DIR is required");
  }
  if (vm.count("spec")) c.spec_file = spec;
  if (vm.count("seed")) c.seed = seed;
  if (vm.count("train-examples")) {
    if (train < 0)
      return InvalidArgument("pstrain gen-ctr: --train-examples: must not be negative");
    c.train_examples = train;
  }
  if (vm.count("eval-examples")) {
    if (eval < 1) return InvalidArgument("pstrain gen-ctr: --eval-examples: must be at least 1");
    c.eval_examples = eval;
  }
  c.gzip = vm.count("gzip") > 0;
  if (vm.count("format")) {
    c.output.formats.clear();
    for (size_t pos = 0; pos <= formats.size();) {
      size_t end = std::min(formats.find(',', pos), formats.size());
      auto f = data::ParseCtrFormat(formats.substr(pos, end - pos));
      if (!f.ok()) return InvalidArgument("pstrain gen-ctr: --format: " + f.status().message());
      c.output.formats.push_back(*f);
      pos = end + 1;
    }
  }
  if (c.output.files < 1 || c.output.files > 100000) {
    return InvalidArgument("pstrain gen-ctr: --files: must be in 1..100000");
  }
  return Command(std::move(c));
}

Result<Command> ParseExport(const std::vector<std::string>& args) {
  ExportCommand c;
  int64_t step = 0;
  po::options_description d("options");
  d.add_options()("help,h", "print this help")("out", po::value(&c.out_dir)->value_name("DIR"),
                                               "the bundle directory to create; required")(
      "step", po::value(&step)->value_name("N"),
      "the checkpoint to export (default: the newest that verifies)");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain export MODEL_DIR --out DIR [--step N]",
        "Writes a self-contained inference bundle from a checkpoint of MODEL_DIR: bundle.json\n"
        "(format version, source step, the job and its model graph, the variables and their\n"
        "shapes, a checksum of every file), weights.shard (dense weights, and the live rows of\n"
        "lazy embedding tables; no optimizer slots) and copies of the job's plug-ins.\n"
        "`pstrain predict --model DIR` and the C++ serving API (libps/serving/serving.h) load\n"
        "it; their scores are bit-identical to the evaluator's on that checkpoint. DIR must not\n"
        "exist (or be empty); it appears complete or not at all. Without --step the newest\n"
        "checkpoint whose every record verifies is used (damaged newer ones are named).\n"
        "Exit 0 on success, 1 when there is no usable checkpoint or DIR cannot be written.",
        d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseWithModelDir("export", args, d, &vm, &c.model_dir));
  if (!vm.count("out") || c.out_dir.empty())
    return InvalidArgument("pstrain export: --out DIR is required");
  if (vm.count("step")) {
    if (step < 0)
      return InvalidArgument("pstrain export: --step: " + std::to_string(step) + " is negative");
    c.step = step;
  }
  return Command(std::move(c));
}

Result<Command> ParsePredict(const std::vector<std::string>& args) {
  PredictCommand c;
  int64_t step = 0;
  po::options_description d("options");
  d.add_options()("help,h", "print this help")(
      "model", po::value(&c.model)->value_name("DIR"),
      "a bundle (from pstrain export), or a model dir: then its checkpoint; required")(
      "data", po::value(&c.data)->value_name("DATA"),
      "what to score: a data object as in a job file (\"format\", \"path\", ...), as JSON text\n"
      "'{...}' (relative paths: from the current directory) or a file holding it (relative\n"
      "paths: from the file's directory); required")(
      "step", po::value(&step)->value_name("N"),
      "a model dir's checkpoint (default: the newest that verifies)")(
      "out", po::value(&c.out)->value_name("FILE"), "write the scores to FILE (default: stdout)")(
      "metrics", po::value(&c.metrics_out)->value_name("FILE"),
      "write the metrics as JSON to FILE (the keys of the evaluator's eval/metrics.jsonl)");
  if (WantsHelp(args)) {
    return Command(HelpCommand{Usage(
        "pstrain predict --model DIR --data DATA [--step N] [--out FILE] [--metrics FILE]",
        "Scores every example of DATA, in order, with the bundle (or checkpoint) in DIR, as the\n"
        "evaluator does: the same batches, the same forward pass, bit-identical scores.\n"
        "Scores: one line per example; the model's first head's outputs separated by spaces\n"
        "(binary: P(label = 1); softmax: one probability per class; regression: the value),\n"
        "then each further head's after a tab; each printed with 9 significant digits, which\n"
        "round-trips a float32 exactly. When the data has labels, the evaluator's metrics\n"
        "(examples, loss, accuracy, AUC for sigmoid heads, per-head figures) go to stderr\n"
        "and to --metrics (unlabelled data: an old FILE is removed). Exit 0 on success, 1 when\n"
        "the bundle or checkpoint cannot be loaded (a damaged file is named) or the data cannot\n"
        "be read, has no examples or does not fit the model, 2 on a usage error (a missing\n"
        "option, --step with a bundle, --data that is not JSON).",
        d)});
  }
  po::variables_map vm;
  PS_RETURN_IF_ERROR(ParseOptions("predict", args, d, &vm));
  if (!vm.count("model") || c.model.empty())
    return InvalidArgument("pstrain predict: --model DIR is required");
  if (!vm.count("data") || c.data.empty())
    return InvalidArgument("pstrain predict: --data DATA is required");
  if (vm.count("step")) {
    if (step < 0)
      return InvalidArgument("pstrain predict: --step: " + std::to_string(step) + " is negative");
    c.step = step;
  }
  return Command(std::move(c));
}

}  // namespace

Result<Command> ParseLauncherArgs(const std::vector<std::string>& args) {
  if (args.empty()) {
    return InvalidArgument(
        "pstrain: missing command (tf-config, slurm-task, local, stop, status, report, inspect, gen-ctr, export, predict); see pstrain --help");
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
  if (sub == "report") return ParseReport(rest);
  if (sub == "inspect") return ParseInspect(rest);
  if (sub == "gen-ctr") return ParseGenCtr(rest);
  if (sub == "export") return ParseExport(rest);
  if (sub == "predict") return ParsePredict(rest);
  return InvalidArgument(
      "pstrain: unknown command \"" + sub +
      "\" (tf-config, slurm-task, local, stop, status, report, inspect, gen-ctr, export, predict); see pstrain --help");
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
  return RunLocal(std::get<LocalCommand>(*command));
}

void PrintErr(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace ps::launcher

// The `pstrain` command line (cli.h): the parsers of the commands that work on a model
// dir or a data set (report, inspect, gen-ctr, export, predict).
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "launcher/cli.h"
#include "launcher/cli_internal.h"

namespace ps::launcher::internal {

namespace po = boost::program_options;

namespace {

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

}  // namespace

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

}  // namespace ps::launcher::internal

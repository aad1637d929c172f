// The `pstrain` operator CLI's command line (launcher/main.cc is a thin main over
// RunLauncher):
//
//   pstrain tf-config --cluster FILE [--format env|json]
//   pstrain tf-config --from-slurm --ps N --workers M [--evaluator] [--base-port P] [--format env|json]
//   pstrain slurm-task --ps N --workers M [--evaluator] [--base-port P] --job FILE --model-dir DIR
//                      [--bin-dir DIR] [-- DAEMON_ARGS...]
//   pstrain stop      --chief HOST:PORT [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--reason TEXT] [--timeout S]
//   pstrain status    --chief HOST:PORT [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--json] [--timeout S]
//                     [--watch [SECONDS]]
//   pstrain local     --cluster FILE --job FILE [--model-dir DIR] [--secret-file F]
//                     [--bin-dir DIR] [--log-level L] [--restart on-failure|never]
//                     [--max-restarts N] [--shutdown-grace S] [-- DAEMON_ARGS...]
//   pstrain report    MODEL_DIR [--out FILE] [--watch [SECONDS]]
//   pstrain inspect   MODEL_DIR [--step N] [--verify]
//   pstrain gen-ctr   --out DIR [--spec FILE] [--seed N] [--train-examples N]
//                     [--eval-examples N] [--gzip] [--format LIST] [--files N]
//   pstrain export    MODEL_DIR --out DIR [--step N]
//   pstrain predict   --model DIR --data DATA [--step N] [--out FILE] [--metrics FILE]
//   pstrain serve     --model NAME=PATH [...]   (execs pstrain-serve with these arguments)
//
// Exit codes (daemon::kExit*): 0 success, 1 runtime failure (chief unreachable, a task
// failed), 2 usage or configuration error; slurm-task becomes the daemon (its codes).
//
// One file per command family: tf_config.h (tf-config, slurm-task), chief_client.h (stop, status),
// local_plan.h + supervisor.h (local), report.h (report, inspect), gen_ctr.h, serving.h
// (export, predict); the status
// text is status_text.h. Their pure parts are separate functions so they can be tested
// without processes or sockets; their Run* functions print to stdout/stderr, return the
// exit code and are meant to be called once, from RunLauncher.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "libps/cluster/slurm.h"
#include "libps/cluster/tf_config.h"
#include "libps/core/status.h"
#include "libps/data/ctr_gen.h"

namespace ps::launcher {

enum class RestartPolicy { kNever, kOnFailure };

struct HelpCommand {
  std::string text;  // what to print on stdout; exit 0
};

struct TfConfigCommand {
  std::string cluster_file;  // empty with --from-slurm
  bool json = false;         // --format json: JSON Lines, one object per task (see FormatTfConfigs)
  std::optional<cluster::SlurmRoles> slurm;  // --from-slurm: only this Slurm task's TF_CONFIG
};

// Inside an srun step: this task's TF_CONFIG from Slurm (cluster::TfConfigFromSlurm), then
// exec of its daemon: chief with --job and --model-dir, evaluator with --model-dir, then
// extra_args for every role.
struct SlurmTaskCommand {
  cluster::SlurmRoles roles;
  std::string job_file;
  std::string model_dir;
  std::optional<std::string> bin_dir;
  std::vector<std::string> extra_args;  // everything after "--"
};

struct ChiefTarget {
  cluster::HostPort chief;
  std::optional<std::string> secret_file;
  std::string tls_cert, tls_key, tls_ca;     // all or none: mutual TLS
  std::chrono::milliseconds timeout{10000};  // connect deadline and call deadline
};

struct StopCommand {
  ChiefTarget target;
  std::string reason = "pstrain stop";
};

inline constexpr double kDefaultWatchSec = 2;

struct StatusCommand {
  ChiefTarget target;
  bool json = false;  // print the chief's raw JSON
  // --watch [SECONDS]: poll every this many seconds until the chief goes away.
  std::optional<double> watch_sec;
};

struct LocalCommand {
  std::string cluster_file;
  std::string job_file;
  std::string model_dir;                   // empty: not passed
  std::optional<std::string> secret_file;  // passed to every daemon
  std::optional<std::string> bin_dir;
  std::string log_level;  // empty: not passed
  RestartPolicy restart = RestartPolicy::kNever;
  int max_restarts = 3;  // per task
  std::chrono::milliseconds shutdown_grace{30000};
  std::vector<std::string> extra_args;  // everything after "--", given to every daemon
};

struct ReportCommand {
  std::string model_dir;
  std::string out;  // empty: model_dir/report.html
  // --watch [SECONDS]: rewrite the page this often until the run has finished.
  std::optional<double> watch_sec;
};

struct InspectCommand {
  std::string model_dir;
  std::optional<int64_t> step;  // default: the newest checkpoint
  bool verify = false;          // read all data, check every record's checksums
};

// Synthetic CTR data (libps/data/ctr_gen.h): the spec file's values (else the
// defaults), then the flags given.
struct GenCtrCommand {
  std::string out_dir;
  std::optional<std::string> spec_file;  // JSON, ParseCtrSpec's form
  std::optional<uint64_t> seed;
  std::optional<int64_t> train_examples;
  std::optional<int64_t> eval_examples;
  bool gzip = false;       // --gzip: compress (otherwise the spec's "gzip")
  data::CtrOutput output;  // --format LIST, --files N
};

// An inference bundle from a checkpoint (libps/serving/bundle.h).
struct ExportCommand {
  std::string model_dir;
  std::string out_dir;
  std::optional<int64_t> step;  // default: the newest checkpoint that verifies
};

// Scores a data set with a bundle, or with a model dir's checkpoint.
struct PredictCommand {
  std::string model;            // a bundle directory, or a model dir (its checkpoint)
  std::optional<int64_t> step;  // model dirs only; default: the newest that verifies
  std::string data;             // a data object as JSON text ("{...}"), or a file holding one
  std::string out;              // scores; empty: stdout
  std::string metrics_out;      // the metrics as JSON; empty: not written
};

// Runs pstrain-serve (found as `pstrain local` finds the daemons) with these arguments.
struct ServeCommand {
  std::vector<std::string> args;
};

using Command = std::variant<HelpCommand, TfConfigCommand, StopCommand, StatusCommand, LocalCommand,
                             ReportCommand, InspectCommand, GenCtrCommand, SlurmTaskCommand,
                             ExportCommand, PredictCommand, ServeCommand>;

// `args` is argv without the program name. Every error is a one-line usage error
// ("pstrain stop: --chief: \"x\" has no port") meant for exit code 2.
// `--help` anywhere before "--" yields a HelpCommand for that (sub)command.
Result<Command> ParseLauncherArgs(const std::vector<std::string>& args);

// The whole CLI: parses `args` (argv without the program name), prints help or a
// one-line usage error (exit 2), or runs the subcommand and returns its exit code 0, 1
// or 2. Call it from main before any other thread exists (see RunLocal).
int RunLauncher(const std::vector<std::string>& args);

// `line` and a newline on stderr, flushed: how every command reports an error.
void PrintErr(const std::string& line);

}  // namespace ps::launcher

// The `pstrain` operator CLI (launcher/main.cc is a thin main over this file):
//
//   pstrain tf-config --cluster FILE [--format env|json]
//   pstrain stop      --chief HOST:PORT [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--reason TEXT] [--timeout S]
//   pstrain status    --chief HOST:PORT [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--json] [--timeout S]
//   pstrain local     --cluster FILE --job FILE [--model-dir DIR] [--secret-file F]
//                     [--bin-dir DIR] [--log-level L] [--restart on-failure|never]
//                     [--max-restarts N] [--shutdown-grace S] [-- DAEMON_ARGS...]
//   pstrain report    MODEL_DIR [--out FILE]
//   pstrain inspect   MODEL_DIR [--step N] [--verify]
//   pstrain gen-ctr   --out DIR [--spec FILE] [--seed N] [--train-examples N]
//                     [--eval-examples N] [--gzip]
//
// Exit codes: 0 success, 1 runtime failure (chief unreachable, a task failed),
// 2 usage or configuration error.
//
// The pure parts (argument parsing, the local launch plan, status formatting, line
// prefixing, restart decisions, the failure summary) are separate functions so they
// can be tested without processes or sockets. The Run* functions print to
// stdout/stderr and are meant to be called once from main.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "libps/cluster/tf_config.h"
#include "libps/core/status.h"
#include "libps/net/tls.h"
#include "libps/proto/messages.h"

namespace ps::train {

// ---- Command line ----------------------------------------------------------------

enum class RestartPolicy { kNever, kOnFailure };

struct HelpCommand {
  std::string text;  // what to print on stdout; exit 0
};

struct TfConfigCommand {
  std::string cluster_file;
  bool json = false;  // --format json: JSON Lines, one object per task (see FormatTfConfigs)
};

struct ChiefTarget {
  cluster::HostPort chief;
  std::optional<std::string> secret_file;
  std::string tls_cert, tls_key, tls_ca;  // all or none: mutual TLS
  std::chrono::milliseconds timeout{10000};  // connect deadline and call deadline
};

struct StopCommand {
  ChiefTarget target;
  std::string reason = "pstrain stop";
};

struct StatusCommand {
  ChiefTarget target;
  bool json = false;  // print the chief's raw JSON
};

struct LocalCommand {
  std::string cluster_file;
  std::string job_file;
  std::string model_dir;                   // empty: not passed
  std::optional<std::string> secret_file;  // passed to every daemon
  std::optional<std::string> bin_dir;
  std::string log_level;                   // empty: not passed
  RestartPolicy restart = RestartPolicy::kNever;
  int max_restarts = 3;                    // per task
  std::chrono::milliseconds shutdown_grace{30000};
  std::vector<std::string> extra_args;     // everything after "--", given to every daemon
};

struct ReportCommand {
  std::string model_dir;
  std::string out;  // empty: model_dir/report.html
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
  bool gzip = false;  // --gzip: compress (otherwise the spec's "gzip")
};

using Command = std::variant<HelpCommand, TfConfigCommand, StopCommand, StatusCommand,
                             LocalCommand, ReportCommand, InspectCommand, GenCtrCommand>;

// `args` is argv without the program name. Every error is a one-line usage error
// ("pstrain stop: --chief: \"x\" has no port") meant for exit code 2.
// `--help` anywhere before "--" yields a HelpCommand for that (sub)command.
Result<Command> ParseLauncherArgs(const std::vector<std::string>& args);

// ---- tf-config -------------------------------------------------------------------

// For every task of the cluster (chief, workers, ps, evaluator):
//  env:  "# worker:1 (host:2222)\nexport TF_CONFIG='<ToTfConfigJson>'\n", blank line between
//  json: one line per task, keys always in this order so scripts can cut them apart:
//        {"task":"worker:1","type":"worker","index":1,"host":"h","port":2222,"tf_config":{...}}
std::string FormatTfConfigs(const cluster::ClusterSpec& spec, bool json);

// ---- local: the plan ---------------------------------------------------------------

// "pstrain-ps", "pstrain-worker", "pstrain-chief", "pstrain-evaluator".
std::string DaemonName(cluster::TaskType type);

// Where a daemon's executable is, in this order:
//   bin_dir/pstrain-<role> (only there when bin_dir is given);
//   self_dir/pstrain-<role> when self_dir/pstrain-ps exists (an installed layout);
//   self_dir/../daemons/<role>/pstrain-<role> (the meson build tree);
//   the first PATH entry holding it.
// `is_executable(path)` is the file test (injected for tests). NotFound names the
// places searched.
Result<std::string> FindDaemon(cluster::TaskType type, const std::optional<std::string>& bin_dir,
                               const std::string& self_dir, const std::string& path_env,
                               const std::function<bool(const std::string&)>& is_executable);

struct TaskPlan {
  cluster::TaskId id;
  std::vector<std::string> argv;  // argv[0]: the executable
  std::vector<std::pair<std::string, std::string>> env;  // added to the launcher's own
};

// The tasks to start, in start order: ps, workers, chief, evaluator (each by index).
// Every task gets TF_CONFIG = ToTfConfigJson(spec, id) and, unless
// `openblas_threads_set`, OPENBLAS_NUM_THREADS=1. Flags: --job, and --model-dir when
// given, to the chief; --model-dir to the evaluator (--model-dir, else
// `job_model_dir`, the job file's "model_dir"); --secret-file and --log-level to
// everyone (when given); then the extra args. `executable(type)` gives argv[0].
// Errors (usage, exit 2): no chief, no ps or worker, an evaluator without a model dir.
Result<std::vector<TaskPlan>> PlanLocal(const LocalCommand& command,
                                        const cluster::ClusterSpec& spec,
                                        const std::function<std::string(cluster::TaskType)>& executable,
                                        bool openblas_threads_set,
                                        const std::string& job_model_dir = "");

// The job file's "model_dir", or "" when it has none or cannot be read (the chief
// reports a bad job file itself).
std::string JobModelDir(const std::string& job_file);

// "[worker:1]"
std::string TaskLabel(cluster::TaskId id);
// The label of the launcher's own lines.
inline constexpr std::string_view kLauncherLabel = "[pstrain]";
// Width of the widest label among the plan's tasks and kLauncherLabel.
size_t LabelWidth(const std::vector<TaskPlan>& plan);
// label padded with spaces to `width`, one space, the line: "[ps:0]     listening".
// A trailing '\r' of the line is dropped.
std::string PrefixLine(std::string_view label, size_t width, std::string_view line);

// ---- local: restarts and the end ---------------------------------------------------

struct RestartQuery {
  cluster::TaskId task;
  int exit_status = 0;      // as Subprocess reports it (128+N for a signal)
  int restarts_done = 0;    // restarts of this task so far
  bool stopping = false;    // the operator asked to stop (signal)
  bool chief_gone = false;  // the chief exited and will not be restarted
};
struct RestartDecision {
  bool restart = false;
  std::string reason;  // one line, for the log: "restart 1 of 3" / "not restarted: ..."
};
// kOnFailure restarts a task that exited non-zero, up to max_restarts times, unless the
// launcher is stopping, the chief has exited for good (other tasks), the exit status is 2 (a
// configuration error: the same arguments fail the same way) or 126/127 (cannot run).
RestartDecision DecideRestart(RestartPolicy policy, int max_restarts, const RestartQuery& query);

// "exit 3", "exit 0", "killed by SIGKILL (137)".
std::string DescribeExit(int exit_status);

struct TaskOutcome {
  cluster::TaskId task;
  int exit_status = 0;
  int restarts = 0;
  std::string note;  // e.g. "still running 30 s after the chief exited"
};
// A task failed when its (last) exit status is non-zero or it carries a note.
bool Failed(const TaskOutcome& outcome);
// Empty when nothing failed; otherwise "N of M tasks failed:\n  worker:1  exit 3 ...\n".
std::string FormatFailureSummary(const std::vector<TaskOutcome>& outcomes);

// ---- status ------------------------------------------------------------------------

// The chief's StatusReply JSON as text: top-level scalars as "key: value" lines (in
// the chief's order; strings unquoted, null as "-"; objects and arrays as compact JSON),
// then "tasks" (an array of objects) as a table whose columns are the union of the
// tasks' keys in order of first appearance, missing cells "-". Then, after a blank line
// each, the "workers" and "ps" load arrays (libps/train/load.h) as fixed tables:
//   worker  state  steps  ex/s  step_ms  data  pull  compute  push   (shares of step time)
//   ps  address  state  req/s  in/s  out/s  rows/s  queue  max_queue  held  shards
// (bytes as HumanBytes, a missing or non-numeric cell "-"; a ps's "error" on a line
// "ps:1: <error>" below its table), then LoadHints' lines. Unknown fields are printed
// (in the tables: ignored), never rejected. Errors: malformed JSON or not an object.
Result<std::string> FormatStatus(std::string_view json_text);

// ---- talking to the chief ------------------------------------------------------------

// Connects as an operator tool (Role::kClient, cluster id 0), sends one request and
// returns the reply body. `secret`: the cluster secret, when one is configured.
// Errors name the address: "cannot reach the chief at 127.0.0.1:2222: ...".
Result<proto::Body> CallChief(const cluster::HostPort& chief,
                              const std::optional<std::string>& secret,
                              std::chrono::milliseconds timeout, proto::Body request,
                              std::shared_ptr<net::TlsContext> tls = nullptr);

// ---- the subcommands (print; return the exit code 0, 1 or 2) --------------------------

// The whole CLI: parses `args` (argv without the program name), prints help or a
// one-line usage error (exit 2), or runs the subcommand. Call it from main before any
// other thread exists (see RunLocal).
int RunLauncher(const std::vector<std::string>& args);

int RunTfConfig(const TfConfigCommand& command);
int RunStop(const StopCommand& command);
int RunStatus(const StatusCommand& command);
// Blocks SIGINT/SIGTERM/SIGHUP for the process and handles them in its loop (signalfd);
// call it from the main thread before any other thread exists.
int RunLocal(const LocalCommand& command);
// Writes the HTML report (libps/train/report.h) and prints its path. 1 when the model dir
// does not exist or the file cannot be written.
int RunReport(const ReportCommand& command);
// Prints InspectModelDir's listing. 1 when there is no checkpoint or damage was found.
int RunInspect(const InspectCommand& command);
// Writes the data set and prints where it went, num_features, field_offsets and the
// ground truth's eval AUC and logloss. 2 for a bad spec file or values, 1 when writing fails.
int RunGenCtr(const GenCtrCommand& command);

}  // namespace ps::train

// What every pstrain daemon does before and after its real work: common flags,
// TF_CONFIG → identity, the cluster secret, signals, exit codes.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/program_options/options_description.hpp>

#include "libps/cluster/tf_config.h"
#include "libps/core/status.h"
#include "libps/net/transport.h"
#include "libps/prom/registry.h"
#include "libps/proto/messages.h"

namespace ps::prom {
class MetricsEndpoint;
}

namespace ps::daemon {

// Exit codes of every pstrain executable, as orchestrators read them (Kubeflow's
// restartPolicy ExitCode: 1 and 2 permanent, >= 128 retryable; `pstrain local --restart
// on-failure` and scripts/slurm follow the same rule).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // permanent, at run time: a corrupt checkpoint, ...
inline constexpr int kExitUsage = 2;        // what the user gave is wrong: permanent
inline constexpr int kExitRetryable = 138;  // only a restart cures it: a peer that never came
    // back, a lost task, a failed read or write of a local file (Kubeflow's user-defined
    // retryable)
// 128 + N: ended by signal N before the work was done (143 SIGTERM, 130 SIGINT): retryable.

// The one rule from an error's cause (its Status code) to an exit code; every daemon's
// exit, and whether the chief shuts its tasks down as retryable, goes through it:
// kOk 0; kInvalidArgument 2 (flags, TF_CONFIG, the job file, or a file either names:
// missing, a directory, unreadable, a bad header, a record that does not parse, a size
// over a limit); kUnavailable and kDeadlineExceeded (a peer unreachable, lost or silent
// past its deadline) and kIo (a local read or write the OS failed: EIO, a full disk)
// 138; anything else 1.
int ExitCodeFor(const Status& status);
// True for the codes a restart may fix: kExitRetryable and every code >= 128.
bool IsRetryableExit(int exit_code);
class SignalWatcher;
// The end of every daemon's main: prints a failure as one line "<program>: <message>" and
// returns its exit code — 128 + N when signal N ended the task before its work was done.
int FinishDaemon(const char* program, const Status& status, const SignalWatcher& signals);
// A failure before the daemon's work began (flags, TF_CONFIG, the job file): prints it as
// one line "<program>: <message>" of at most log::kMaxLineBytes and returns
// ExitCodeFor(status).
int FailStart(const char* program, const Status& status);

struct DaemonFlags {
  std::string tf_config_file;        // empty: the TF_CONFIG environment variable
  std::string task_type;             // empty: TF_CONFIG's
  int task_index = -1;               // -1: TF_CONFIG's
  std::string secret_file;           // empty: no cluster secret
  std::string bind;                  // empty: see ListenHost()
  double connect_timeout_sec = 180;  // like TF's ~3 minutes of start-up retries
  std::string log_level = "info";
  int io_threads = 2;
  int max_connections = 1024;             // per daemon (net::ServerOptions)
  int payload_budget_mb = 1024;           // inbound payload memory per daemon, MiB
  std::string tls_cert, tls_key, tls_ca;  // all or none: mutual TLS
  bool check_config = false;              // --check-config: Bootstrap only, then CheckedConfig
  int metrics_port = -1;                  // -1: no /metrics endpoint; 0: the kernel picks (logged)
  std::string metrics_host;               // empty: the listen host (see StartMetrics)
  double chief_timeout_sec = 0;           // ps and worker only (AddServingTaskOptions); 0: never
};

// Adds the flags every daemon takes to `desc`.
void AddDaemonOptions(boost::program_options::options_description& desc, DaemonFlags* flags);
// Adds the flags of the tasks the chief drives (ps, worker): --chief-timeout.
void AddServingTaskOptions(boost::program_options::options_description& desc, DaemonFlags* flags);

// A daemon's Prometheus metrics (libps/prom): the registry every part of it records into,
// and the /metrics endpoint serving it.
struct Metrics {
  std::shared_ptr<prom::Registry> registry = std::make_shared<prom::Registry>();  // never null
  std::shared_ptr<prom::MetricsEndpoint> server;  // null without --metrics-port
};

// The registry (constant labels task_type and task_index of `task`, the process metrics)
// and, with --metrics-port, its endpoint on --metrics-host, by default `listen_host` (the
// daemon's RPC address), else --bind, else 0.0.0.0 (a task with no listen address: the
// evaluator). Logs the endpoint's address. Unavailable when it cannot listen; bad flags
// are InvalidArgument. Bootstrap calls it.
Result<Metrics> StartMetrics(const DaemonFlags& flags, cluster::TaskId task,
                             const std::string& listen_host);

// Exports `server`'s counters (net::Server::Stats) as pstrain_rpc_* until the returned
// handle is destroyed; destroy it before `server`.
[[nodiscard]] prom::Registry::Collection ExportServerStats(prom::Registry& registry,
                                                           const net::Server& server);

struct DaemonContext {
  cluster::TfConfig tf;
  net::Identity identity;
  std::string listen_host;  // address to bind
  uint16_t listen_port = 0;
  std::chrono::milliseconds connect_timeout{180000};
  int io_threads = 2;  // --io-threads
  int max_connections = 1024;
  uint64_t payload_budget_bytes = uint64_t{1} << 30;
  std::shared_ptr<net::TlsContext> tls;  // null: plain TCP
  Metrics metrics;
  std::chrono::milliseconds chief_timeout{0};  // see WatchChief; 0: never

  // Client options for dialing task `peer` of this cluster.
  net::ClientOptions ClientFor(cluster::TaskId peer) const;
  // Server options for this task: its listen address, identity, bounds and TLS, admitting only peers
  // of `roles` (any other is refused with an error naming its role and this task).
  net::ServerOptions ServerFor(std::vector<proto::Role> roles) const;
  std::string name() const { return tf.task.ToString(); }
};

// Loads and validates TF_CONFIG (plus overrides), checks the task type is `expected`,
// reads the secret (warning when there is none), sets the log tag and level.
Result<DaemonContext> Bootstrap(const DaemonFlags& flags, cluster::TaskType expected);

// A task outside the training cluster (the evaluator) needs no TF_CONFIG. True when
// `flags` and the environment name no task: no --tf-config, --task-type or --task-index,
// and TF_CONFIG unset, empty (or blank), or a JSON object with no "task" and no (or an
// empty) "cluster" — "{}", which TensorFlow reads as no cluster. False otherwise, a
// TF_CONFIG that does not parse included (Bootstrap then names what is wrong with it).
bool NamesNoTask(const DaemonFlags& flags);
// Bootstrap for such a task: the log level and tag ("<type>:0") and the metrics; no
// identity, nothing to listen on.
Result<Metrics> BootstrapOutsideCluster(const DaemonFlags& flags, cluster::TaskType type);

// What --check-config prints on stdout after a successful Bootstrap, and exits 0 with:
// "<program>: TF_CONFIG ok: <task> of a cluster with C chief, W worker, P ps, E evaluator;
// address <TF_CONFIG host:port>, would listen on <bind host>:<port>" (the evaluator: "does
// not listen").
int CheckedConfig(const char* program, const DaemonContext& ctx);

// Parses argv with `desc` (+ --help); prints help or a one-line error.
// Returns nullopt to continue, or the exit code to return from main.
std::optional<int> ParseCommandLine(int argc, char** argv, const std::string& usage,
                                    const boost::program_options::options_description& desc);

// Catches SIGINT and SIGTERM (a handler that only writes to a self-pipe, so it works on
// whichever thread the signal lands, OpenBLAS's included) and delivers them, one call per
// signal, to `on_signal` on a watcher thread. One per process; create it first in main.
// A SIGINT/SIGTERM that arrived before the chief's Shutdown: logs that the task stops now
// and returns the signal's name, the reason to stop with.
std::string TerminateReason(int signal);
// How a task that stopped for `reason` (a TerminateReason) ends: Aborted, so that
// FinishDaemon exits 128 + N.
Status SignalStatus(const std::string& reason);
// How a ps or worker ends after the chief's Shutdown: OK, or Unavailable (exit 138) when
// the chief failed in a way a restart fixes, so that an orchestrator that restarts
// retryable exits (Kubernetes' ExitCode policy, `pstrain local --restart on-failure`)
// restarts the whole job and the restarted chief finds its ps tasks and workers again.
Status ShutdownStatus(const proto::Shutdown& shutdown);

// --chief-timeout: a ps or worker that hears nothing from a chief (no request, no
// heartbeat: a live chief pings every task at least every 500 ms) for `ctx.chief_timeout`,
// counted from its start or from the chief's last frame, calls `on_timeout` once with a
// retryable Shutdown naming why; the task then ends with exit 138. Where nothing else ends
// a task whose chief died (a Slurm step), the whole job is then restarted. Returns an idle
// thread when the timeout is 0. The thread stops when the returned object is destroyed.
std::jthread WatchChief(const DaemonContext& ctx, const net::Server& server,
                        std::function<void(proto::Shutdown)> on_timeout);

class SignalWatcher {
 public:
  // Watching ends when destroyed: it stops the watcher's thread, waiting for an on_signal
  // that is running. Declare it after everything on_signal uses, so that it goes first.
  class [[nodiscard]] Watching {
   public:
    explicit Watching(SignalWatcher* watcher) : watcher_(watcher) {}
    Watching(Watching&& other) noexcept : watcher_(std::exchange(other.watcher_, nullptr)) {}
    Watching& operator=(Watching&&) = delete;
    ~Watching() {
      if (watcher_ != nullptr) watcher_->Stop();
    }

   private:
    SignalWatcher* watcher_;
  };

  SignalWatcher();
  ~SignalWatcher();
  // Calls on_signal(SIGINT or SIGTERM) on a thread of its own for each signal delivered,
  // until the returned Watching is destroyed (signals after that wait in the pipe for a
  // later Start).
  Watching Start(std::function<void(int signal)> on_signal);
  // The last signal delivered, or 0.
  int last_signal() const { return last_signal_.load(); }

 private:
  void Stop();  // idempotent
  std::atomic<int> last_signal_{0};
  int fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace ps::daemon

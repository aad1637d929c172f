#include "libps/daemon/daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <stop_token>

#include <boost/program_options.hpp>

#include "libps/core/json.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/net/auth.h"
#include "libps/prom/endpoint.h"
#include "libps/prom/process.h"

namespace ps::daemon {

namespace po = boost::program_options;

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case Code::kOk:
      return kExitOk;
    case Code::kInvalidArgument:
      return kExitUsage;
    case Code::kUnavailable:
    case Code::kDeadlineExceeded:
    case Code::kIo:
    case Code::kDraining:
      return kExitRetryable;
    default:
      return kExitFailure;
  }
}

bool IsRetryableExit(int exit_code) { return exit_code == kExitRetryable || exit_code >= 128; }

int CheckedConfig(const char* program, const DaemonContext& ctx) {
  const cluster::ClusterSpec& c = ctx.tf.cluster;
  std::string line = std::string(program) + ": TF_CONFIG ok: " + ctx.name() + " of a cluster with ";
  for (cluster::TaskType type : cluster::kAllTaskTypes) {
    line += std::to_string(c.count(type)) + " " + cluster::TaskTypeName(type) +
            (type == cluster::TaskType::kEvaluator ? "; " : ", ");
  }
  if (ctx.listen_port == 0) {
    line += "does not listen";
  } else {
    line += "address " + ctx.tf.cluster.address(ctx.tf.task).ToString() + ", would listen on " +
            cluster::HostPort{ctx.listen_host, ctx.listen_port}.ToString();
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  return kExitOk;
}

int FailStart(const char* program, const Status& status) {
  const std::string line = log::BoundLine(std::string(program) + ": " + status.message());
  std::fprintf(stderr, "%s\n", line.c_str());
  return ExitCodeFor(status);
}

int FinishDaemon(const char* program, const Status& status, const SignalWatcher& signals) {
  if (status.ok()) return kExitOk;
  const std::string line = log::BoundLine(std::string(program) + ": " + status.message());
  std::fprintf(stderr, "%s\n", line.c_str());
  if (status.code() == Code::kAborted && signals.last_signal() != 0)
    return 128 + signals.last_signal();
  return ExitCodeFor(status);
}

void AddServingTaskOptions(po::options_description& desc, DaemonFlags* f) {
  desc.add_options()(
      "chief-timeout", po::value(&f->chief_timeout_sec)->value_name("SECONDS")->default_value(0),
      "exit 138 (retryable) when no chief has been heard from for this long, from the start or its last "
      "message (a live chief pings every 0.5 s); for launchers that end nothing else when a chief dies, such as a "
      "Slurm step. 0: wait forever, as TensorFlow's tasks do");
}

std::jthread WatchChief(const DaemonContext& ctx, const net::Server& server,
                        std::function<void(proto::Shutdown)> on_timeout) {
  if (ctx.chief_timeout.count() <= 0) return {};
  const auto timeout = ctx.chief_timeout;
  return std::jthread([&server, timeout, on_timeout = std::move(on_timeout)](std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    const auto step = std::clamp<std::chrono::milliseconds>(
        timeout / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
    std::unique_lock lock(mu);
    for (;;) {
      // Wakes early only when the task ends (the jthread's stop request).
      if (cv.wait_for(lock, stop, step, [&] { return stop.stop_requested(); })) return;
      const auto silent = std::chrono::steady_clock::now() - server.last_chief_frame();
      if (silent < timeout) continue;
      const std::string why = "no chief heard from for " +
                              FormatDuration(std::chrono::duration<double>(silent).count()) +
                              " (--chief-timeout)";
      PS_LOG(Error) << why << ": exiting 138 so that the job is restarted";
      on_timeout(proto::Shutdown{why, true});
      return;
    }
  });
}

void AddDaemonOptions(po::options_description& desc, DaemonFlags* f) {
  desc.add_options()("tf-config", po::value(&f->tf_config_file)->value_name("FILE"),
                     "read TF_CONFIG from FILE instead of the TF_CONFIG environment variable")(
      "task-type", po::value(&f->task_type)->value_name("TYPE"), "override TF_CONFIG's task.type")(
      "task-index", po::value(&f->task_index)->value_name("N"), "override TF_CONFIG's task.index")(
      "secret-file", po::value(&f->secret_file)->value_name("FILE"),
      "cluster secret: peers must prove it (HMAC-SHA256) in the handshake")(
      "bind", po::value(&f->bind)->value_name("HOST"),
      "address to listen on (default: the TF_CONFIG host if it is a loopback address, else 0.0.0.0)")(
      "connect-timeout",
      po::value(&f->connect_timeout_sec)->value_name("SECONDS")->default_value(180),
      "how long to keep retrying to reach a peer at start-up")(
      "log-level", po::value(&f->log_level)->value_name("LEVEL")->default_value("info"),
      "debug, info, warning or error")("io-threads",
                                       po::value(&f->io_threads)->value_name("N")->default_value(2),
                                       "network I/O threads")(
      "max-connections", po::value(&f->max_connections)->value_name("N")->default_value(1024),
      "open connections this task accepts; more are refused")(
      "payload-budget-mb", po::value(&f->payload_budget_mb)->value_name("MIB")->default_value(1024),
      "memory for inbound tensor payloads; frames wait for room, a larger single frame is an error")(
      "tls-cert", po::value(&f->tls_cert)->value_name("FILE"),
      "mutual TLS: this task's certificate (PEM)")(
      "tls-key", po::value(&f->tls_key)->value_name("FILE"), "mutual TLS: its private key (PEM)")(
      "tls-ca", po::value(&f->tls_ca)->value_name("FILE"),
      "mutual TLS: the cluster CA that signs every peer (PEM)")(
      "check-config", po::bool_switch(&f->check_config),
      "check the flags and TF_CONFIG (the chief: and the job file), print this task's identity and exit (0 valid, 2 not)")(
      "metrics-port", po::value(&f->metrics_port)->value_name("PORT"),
      "serve Prometheus metrics at http://HOST:PORT/metrics (default: no endpoint; 0: any free port, logged)")(
      "metrics-host", po::value(&f->metrics_host)->value_name("HOST"),
      "address of the metrics endpoint (default: the --bind rule's address; the evaluator's: 0.0.0.0)");
}

std::optional<int> ParseCommandLine(int argc, char** argv, const std::string& usage,
                                    const po::options_description& desc) {
  po::options_description all(desc);
  all.add_options()("help,h", "show this help and exit");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).run(), vm);
    if (vm.count("help")) {
      std::cout
          << usage << "\n\n"
          << all << "\n"
          << "Exit codes: 0 success (also after a graceful stop), 1 failure a restart cannot fix,\n"
          << "2 bad flags, TF_CONFIG, job file or input data, 138 retryable (a peer or the model\n"
          << "dir was lost: a restarted task resumes from the newest checkpoint), 128+N signal N.\n";
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", argv[0], e.what());
    return kExitUsage;
  }
  return std::nullopt;
}

namespace {
bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}
}  // namespace

Result<DaemonContext> Bootstrap(const DaemonFlags& flags, cluster::TaskType expected) {
  log::Level level;
  if (!log::ParseLevel(flags.log_level, &level)) {
    return InvalidArgument("--log-level: unknown level " + QuoteInput(flags.log_level, '"'));
  }
  log::SetLevel(level);
  if (flags.connect_timeout_sec <= 0) return InvalidArgument("--connect-timeout: must be > 0");
  if (flags.io_threads < 1 || flags.io_threads > 64)
    return InvalidArgument("--io-threads: must be in 1..64");
  if (flags.max_connections < 1) return InvalidArgument("--max-connections: must be >= 1");
  if (flags.payload_budget_mb < 1) return InvalidArgument("--payload-budget-mb: must be >= 1");

  DaemonContext ctx;
  PS_ASSIGN_OR_RETURN(ctx.tf, cluster::LoadTfConfig(
                                  flags.tf_config_file.empty() ? nullptr : &flags.tf_config_file));
  cluster::TaskOverrides overrides;
  if (!flags.task_type.empty()) overrides.task_type = flags.task_type;
  if (flags.task_index >= 0) overrides.task_index = flags.task_index;
  for (const std::string& w : ctx.tf.warnings) PS_LOG(Warning) << w;
  PS_RETURN_IF_ERROR(cluster::ApplyOverrides(overrides, &ctx.tf));
  PS_RETURN_IF_ERROR(cluster::ValidateForPsTraining(ctx.tf));
  if (ctx.tf.task.type != expected) {
    return InvalidArgument(std::string("TF_CONFIG.task.type: this is pstrain-") +
                           cluster::TaskTypeName(expected) + ", but the task is " +
                           ctx.tf.task.ToString());
  }
  if (expected != cluster::TaskType::kEvaluator &&
      ctx.tf.cluster.count(cluster::TaskType::kChief) != 1) {
    return InvalidArgument("TF_CONFIG.cluster.chief: pstrain needs exactly one chief");
  }
  log::SetTag(ctx.tf.task.ToString());

  static constexpr proto::Role kRoles[] = {proto::Role::kChief, proto::Role::kWorker,
                                           proto::Role::kPs, proto::Role::kEvaluator};
  ctx.identity.role = kRoles[static_cast<int>(expected)];
  ctx.identity.task_index = ctx.tf.task.index;
  ctx.identity.cluster_id = cluster::ClusterId(ctx.tf.cluster);
  if (!flags.secret_file.empty()) {
    PS_ASSIGN_OR_RETURN(std::string secret, net::ReadSecretFile(flags.secret_file));
    ctx.identity.secret = std::move(secret);
  } else if (expected != cluster::TaskType::kEvaluator) {
    PS_LOG(Warning) << "no --secret-file: any process that can reach this task's port and "
                       "knows the cluster layout can talk to it";
  }
  if (expected != cluster::TaskType::kEvaluator) {
    const cluster::HostPort& me = ctx.tf.cluster.address(ctx.tf.task);
    ctx.listen_port = me.port;
    ctx.listen_host = !flags.bind.empty() ? flags.bind : IsLoopback(me.host) ? me.host : "0.0.0.0";
  }
  ctx.connect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.connect_timeout_sec * 1000));
  PS_ASSIGN_OR_RETURN(ctx.tls, net::TlsFromFlags(flags.tls_cert, flags.tls_key, flags.tls_ca));
  ctx.io_threads = flags.io_threads;
  ctx.max_connections = flags.max_connections;
  ctx.payload_budget_bytes = static_cast<uint64_t>(flags.payload_budget_mb) << 20;
  if (!(flags.chief_timeout_sec >= 0 && flags.chief_timeout_sec <= 1e6)) {
    return InvalidArgument("--chief-timeout: must be in 0..1000000 seconds");
  }
  ctx.chief_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.chief_timeout_sec * 1000));
  PS_ASSIGN_OR_RETURN(ctx.metrics, StartMetrics(flags, ctx.tf.task, ctx.listen_host));
  return ctx;
}

bool NamesNoTask(const DaemonFlags& flags) {
  if (!flags.tf_config_file.empty() || !flags.task_type.empty() || flags.task_index >= 0)
    return false;
  const char* env = std::getenv("TF_CONFIG");
  if (env == nullptr ||
      std::string_view(env).find_first_not_of(" \t\r\n") == std::string_view::npos)
    return true;
  auto json = ParseJson(env, "TF_CONFIG");
  if (!json.ok() || !json->is_object() || json->contains("task")) return false;
  auto cluster = json->find("cluster");
  return cluster == json->end() || (cluster->is_object() && cluster->empty());
}

Result<Metrics> BootstrapOutsideCluster(const DaemonFlags& flags, cluster::TaskType type) {
  log::Level level;
  if (!log::ParseLevel(flags.log_level, &level)) {
    return InvalidArgument("--log-level: unknown level " + QuoteInput(flags.log_level, '"'));
  }
  log::SetLevel(level);
  const cluster::TaskId task{type, 0};
  log::SetTag(task.ToString());
  return StartMetrics(flags, task, "");
}

Result<Metrics> StartMetrics(const DaemonFlags& flags, cluster::TaskId task,
                             const std::string& listen_host) {
  if (flags.metrics_port < -1 || flags.metrics_port > 65535)
    return InvalidArgument("--metrics-port: must be in 0..65535");
  if (flags.metrics_port < 0 && !flags.metrics_host.empty())
    return InvalidArgument("--metrics-host: needs --metrics-port");
  Metrics m;
  m.registry = std::make_shared<prom::Registry>(prom::Labels{
      {"task_type", cluster::TaskTypeName(task.type)}, {"task_index", std::to_string(task.index)}});
  // For the life of the registry: the process figures are the process's.
  m.registry->AddCollector(prom::WriteProcessMetrics).Release();
  // --check-config: the flags are checked above; nothing listens.
  if (flags.metrics_port < 0 || flags.check_config) return m;
  // A task with no listen address (the evaluator) is still scraped from elsewhere.
  const std::string host = !flags.metrics_host.empty() ? flags.metrics_host
                           : !listen_host.empty()      ? listen_host
                           : !flags.bind.empty()       ? flags.bind
                                                       : "0.0.0.0";
  PS_ASSIGN_OR_RETURN(
      auto server,
      prom::MetricsEndpoint::Start(
          prom::MetricsServerOptions(host, static_cast<uint16_t>(flags.metrics_port)), m.registry));
  PS_LOG(Info) << "metrics at http://" << host << ":" << server->port() << "/metrics";
  m.server = std::move(server);
  return m;
}

prom::Registry::Collection ExportServerStats(prom::Registry& registry, const net::Server& server) {
  return registry.AddCollector([&server](prom::Writer& w) {
    const net::Server::Stats s = server.stats(/*reset_max=*/false);
    auto d = [](uint64_t v) { return static_cast<double>(v); };
    w.Counter("pstrain_rpc_requests_total",
              "Requests this task's RPC server handed to its handlers.", d(s.requests));
    w.Counter(
        "pstrain_rpc_inline_requests_total",
        "Of those, requests handled on the I/O thread that read them (small pulls and pushes).",
        d(s.inline_requests));
    w.Counter("pstrain_rpc_received_bytes_total",
              "Bytes of whole frames this task's RPC server read.", d(s.bytes_received));
    w.Counter("pstrain_rpc_sent_bytes_total",
              "Bytes of whole frames this task's RPC server queued for sending.", d(s.bytes_sent));
    w.Gauge("pstrain_rpc_queue_depth", "Requests admitted but not yet started by a handler thread.",
            d(s.queue_depth));
    w.Gauge("pstrain_rpc_connections",
            "Open connections to this task's RPC server, handshakes included.", d(s.connections));
    w.Counter("pstrain_rpc_refused_connections_total",
              "Connections refused over --max-connections.", d(s.refused_connections));
    w.Gauge("pstrain_rpc_write_queue_bytes", "Reply bytes waiting to be written.",
            d(s.write_queue_bytes));
  });
}

net::ClientOptions DaemonContext::ClientFor(cluster::TaskId peer) const {
  net::ClientOptions o;
  const cluster::HostPort& hp = tf.cluster.address(peer);
  o.host = hp.host;
  o.port = hp.port;
  o.peer_name = peer.ToString();
  o.identity = identity;
  o.connect_deadline = connect_timeout;
  o.tls = tls;
  return o;
}

net::ServerOptions DaemonContext::ServerFor(std::vector<proto::Role> roles) const {
  net::ServerOptions o;
  o.host = listen_host;
  o.port = listen_port;
  o.identity = identity;
  o.max_connections = max_connections;
  o.payload_budget_bytes = payload_budget_bytes;
  o.tls = tls;
  o.admit = [roles = std::move(roles), me = name()](const proto::Hello& h) {
    for (auto r : roles) {
      if (h.role == r) return Status::Ok();
    }
    return PermissionDenied(std::string("a ") + proto::RoleName(h.role) + " may not connect to " +
                            me);
  };
  return o;
}

std::string TerminateReason(int sig) {
  PS_LOG(Warning) << "received " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
                  << " before the chief's Shutdown; stopping now";
  return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

Status SignalStatus(const std::string& reason) { return Aborted("terminated by " + reason); }

Status ShutdownStatus(const proto::Shutdown& shutdown) {
  if (!shutdown.retryable) return Status::Ok();
  return Unavailable("shut down after a retryable failure (" + shutdown.reason +
                     "): exits 138 so that the whole job is restarted");
}

namespace {
// The write end of the self-pipe of the one SignalWatcher (-1: none).
std::atomic<int> g_signal_pipe{-1};

extern "C" void WriteSignalToPipe(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe.load(), &b, 1);
  errno = saved;
}
}  // namespace

// A handler, not a blocked mask read through signalfd: threads started before main (OpenBLAS
// starts its pool in a library constructor unless OPENBLAS_NUM_THREADS=1) do not block the
// signals, and a process-directed signal landing on one of them would take the default
// action. A handler runs on whichever thread gets it and only writes the number to a pipe.
SignalWatcher::SignalWatcher() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    fd_ = fds[0];
    g_signal_pipe.store(fds[1]);
    struct sigaction sa {};
    sa.sa_handler = WriteSignalToPipe;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
}

void SignalWatcher::Stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  thread_.join();
  (void)!::read(wake_fd_, &one, sizeof one);  // re-arm for a later Start
}

SignalWatcher::~SignalWatcher() {
  Stop();
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  int w = g_signal_pipe.exchange(-1);
  if (w >= 0) ::close(w);
  if (fd_ >= 0) ::close(fd_);
  ::close(wake_fd_);
}

SignalWatcher::Watching SignalWatcher::Start(std::function<void(int)> on_signal) {
  Stop();
  thread_ = std::thread([this, on_signal = std::move(on_signal)] {
    for (;;) {
      pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      unsigned char sig = 0;
      if (fds[0].revents != 0 && ::read(fd_, &sig, 1) == 1) {
        last_signal_.store(sig);
        on_signal(sig);
      }
    }
  });
  return Watching(this);
}

}  // namespace ps::daemon

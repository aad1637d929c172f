// pstrain-serve: answers online requests with TensorFlow Serving's REST API
// (libps/serving/rest.h) for the models named by --model NAME=PATH or by a TF Serving
// model config file (--model-config-file), over HTTP (libps/http), following each
// training model dir as it writes checkpoints (daemons/serve/models.h). Outside any
// training cluster: no TF_CONFIG. SIGHUP: the config is read and applied again (a bad
// file keeps the one served). SIGTERM/SIGINT: /healthz fails at once, requests are
// answered for --drain-delay seconds more, then the ones under way finish and it exits 0.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>

#include <boost/program_options.hpp>

#include "daemons/serve/hangup.h"
#include "daemons/serve/models.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/daemon/daemon.h"
#include "libps/http/server.h"
#include "libps/model/blas.h"
#include "libps/prom/endpoint.h"
#include "libps/prom/process.h"
#include "libps/serving/bundle.h"
#include "libps/serving/model_config.h"
#include "libps/serving/rest.h"

namespace {

using namespace ps;
namespace po = boost::program_options;

struct Flags {
  std::vector<std::string> models;
  std::string model_config_file;
  int keep_versions = 2;
  bool allow_labels_for_unavailable = false;
  std::string host = "127.0.0.1";
  int port = 8501;
  int threads = 2;
  double poll_seconds = 1;
  double drain_delay = 0;
  int metrics_port = -1;
  double max_body_mb = 16;
  int max_connections = 256;
  std::string tls_cert, tls_key, tls_ca;
  std::string log_level = "info";
  bool check_config = false;
};

// The models the flags name: --model's, or --model-config-file's (read anew each call).
Result<std::vector<serving::ModelSpec>> ReadSpecs(const Flags& f) {
  if (!f.model_config_file.empty()) {
    PS_ASSIGN_OR_RETURN(auto specs, serving::ReadModelConfigFile(f.model_config_file));
    PS_RETURN_IF_ERROR(serve::Models::Check(specs));
    return specs;
  }
  std::vector<serving::ModelSpec> specs;
  std::set<std::string> names;
  for (const auto& m : f.models) {
    PS_ASSIGN_OR_RETURN(auto spec, serving::ParseModelFlag(m));
    if (!names.insert(spec.name).second) {
      return InvalidArgument("--model: two models named " + QuoteInput(spec.name, '"'));
    }
    specs.push_back(std::move(spec));
  }
  PS_RETURN_IF_ERROR(serve::Models::Check(specs));
  return specs;
}

Status CheckFlags(const Flags& f) {
  if (f.models.empty() && f.model_config_file.empty())
    return InvalidArgument("--model NAME=PATH or --model-config-file FILE is required");
  if (!f.models.empty() && !f.model_config_file.empty())
    return InvalidArgument(
        "--model and --model-config-file: give one or the other (name every model in the file)");
  if (f.keep_versions < 1 || f.keep_versions > 1000)
    return InvalidArgument("--keep-versions: must be in 1..1000");
  if (f.port < 0 || f.port > 65535) return InvalidArgument("--port: must be in 0..65535");
  if (f.metrics_port < -1 || f.metrics_port > 65535)
    return InvalidArgument("--metrics-port: must be in 0..65535");
  if (f.threads < 1 || f.threads > 256) return InvalidArgument("--threads: must be in 1..256");
  if (!(f.poll_seconds > 0)) return InvalidArgument("--poll-seconds: must be > 0");
  if (!(f.drain_delay >= 0)) return InvalidArgument("--drain-delay: must be >= 0");
  if (!(f.max_body_mb > 0)) return InvalidArgument("--max-body-mb: must be > 0");
  if (f.max_connections < 1) return InvalidArgument("--max-connections: must be >= 1");
  if (f.tls_cert.empty() != f.tls_key.empty())
    return InvalidArgument("--tls-cert and --tls-key: give both or neither");
  if (!f.tls_ca.empty() && f.tls_cert.empty())
    return InvalidArgument("--tls-ca: needs --tls-cert and --tls-key");
  log::Level level;
  if (!log::ParseLevel(f.log_level, &level))
    return InvalidArgument("--log-level: unknown level " + QuoteInput(f.log_level, '"'));
  log::SetLevel(level);
  return Status::Ok();
}

http::Response ToHttp(const serving::RestResponse& r) {
  auto out = http::Response::Json(r.status, r.body);
  for (const auto& h : r.headers) out.headers.push_back(h);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  daemon::SignalWatcher signals;
  Flags f;
  po::options_description desc("Options");
  desc.add_options()(
      "model", po::value(&f.models)->value_name("NAME=PATH"),
      "serve PATH as NAME (repeatable): a bundle (pstrain export) or a training model dir, "
      "its newest checkpoints loaded and followed")(
      "model-config-file", po::value(&f.model_config_file)->value_name("FILE"),
      "serve the models of a TensorFlow Serving model config file (ModelServerConfig text "
      "format; TF Serving's --model_config_file), read again on SIGHUP")(
      "keep-versions", po::value(&f.keep_versions)->value_name("N")->default_value(2),
      "full checkpoints of a model dir kept loaded (a latest policy without num_versions)")(
      "allow-version-labels-for-unavailable-models",
      po::bool_switch(&f.allow_labels_for_unavailable),
      "let a new version label name a version not loaded yet (TF Serving's flag of that name)")(
      "host", po::value(&f.host)->value_name("HOST")->default_value("127.0.0.1"),
      "address to listen on")("port", po::value(&f.port)->value_name("PORT")->default_value(8501),
                              "port of the REST API (0: any free port, logged)")(
      "threads", po::value(&f.threads)->value_name("N")->default_value(2),
      "HTTP threads: requests scored at once")(
      "poll-seconds", po::value(&f.poll_seconds)->value_name("S")->default_value(1),
      "how often to look for new deltas and checkpoints in model dirs")(
      "drain-delay", po::value(&f.drain_delay)->value_name("S")->default_value(0),
      "on SIGTERM/SIGINT, keep answering for S seconds with /healthz failing, then drain")(
      "max-body-mb", po::value(&f.max_body_mb)->value_name("MIB")->default_value(16),
      "largest request body; larger: 413")(
      "max-connections", po::value(&f.max_connections)->value_name("N")->default_value(256),
      "open connections at once; more are answered 503")(
      "metrics-port", po::value(&f.metrics_port)->value_name("PORT"),
      "also serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port, logged); "
      "/metrics on the API port always answers")("tls-cert",
                                                 po::value(&f.tls_cert)->value_name("FILE"),
                                                 "HTTPS: the server's certificate (PEM)")(
      "tls-key", po::value(&f.tls_key)->value_name("FILE"), "HTTPS: its private key (PEM)")(
      "tls-ca", po::value(&f.tls_ca)->value_name("FILE"),
      "HTTPS: require client certificates signed by this CA (PEM)")(
      "log-level", po::value(&f.log_level)->value_name("LEVEL")->default_value("info"),
      "debug, info, warning or error")(
      "check-config", po::bool_switch(&f.check_config),
      "check the flags and model paths, print what would be served and exit "
      "(0 valid, 2 not)");
  if (auto rc = daemon::ParseCommandLine(
          argc, argv,
          "Usage: pstrain-serve --model NAME=PATH [--model ...] [options]\n"
          "       pstrain-serve --model-config-file FILE [options]\n"
          "Serves models over TensorFlow Serving's REST API (/v1/models/NAME:predict).",
          desc)) {
    return *rc;
  }
  auto fail = [](const Status& st) { return daemon::FailStart("pstrain-serve", st); };
  log::SetTag("serve");
  if (Status st = CheckFlags(f); !st.ok()) return fail(st);
  auto specs = ReadSpecs(f);
  if (!specs.ok()) return fail(Status(Code::kInvalidArgument, specs.status().message()));
  if (f.check_config) {
    for (const auto& m : *specs) {
      std::string labels;
      for (const auto& [l, v] : m.labels) labels += " " + l + "=" + std::to_string(v);
      std::printf(
          "pstrain-serve: config ok: model %s: %s %s%s%s\n", m.name.c_str(),
          std::filesystem::exists(std::filesystem::path(m.base_path) / serving::kBundleManifest)
              ? "bundle"
              : "model dir",
          m.base_path.c_str(), labels.empty() ? "" : "; labels", labels.c_str());
    }
    return daemon::kExitOk;
  }
  auto registry =
      std::make_shared<prom::Registry>(prom::Labels{{"task_type", "serve"}, {"task_index", "0"}});
  registry->AddCollector(prom::WriteProcessMetrics).Release();
  serve::Models models({.keep_versions = f.keep_versions,
                        .allow_labels_for_unavailable = f.allow_labels_for_unavailable},
                       registry);
  auto& reloads =
      registry->Counter("pstrain_serving_config_reloads_total", "Model configs applied on SIGHUP");
  auto& reload_failures = registry->Counter(
      "pstrain_serving_config_reload_failures_total",
      "SIGHUPs whose config was refused (unreadable, invalid, a model path that is neither a "
      "bundle nor a model dir: the previous config serves on) or whose labels were refused");
  auto& reloaded_at = registry->Gauge(
      "pstrain_serving_config_last_reload_success_timestamp_seconds",
      "When the model config was last applied in full (unix seconds; start-up included)");
  // Scores must not depend on a thread count: `pstrain predict`'s setting.
  model::SetBlasThreads(1);

  const uint64_t body_limit = static_cast<uint64_t>(f.max_body_mb * (1 << 20));
  serving::RestApi api({.body_limit = body_limit}, models.served());
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  std::atomic<bool> ready{false}, draining{false};
  http::ServerOptions so;
  so.host = f.host;
  so.port = static_cast<uint16_t>(f.port);
  so.threads = f.threads;
  so.body_limit = 2 * body_limit;  // up to twice the limit the API answers 413 in JSON itself
  so.max_connections = f.max_connections;
  so.name = "pstrain-serve";
  if (!f.tls_cert.empty()) {
    so.tls = http::TlsOptions{.cert_file = f.tls_cert,
                              .key_file = f.tls_key,
                              .ca_file = f.tls_ca,
                              .require_client_cert = true};
  }
  so.on_request = [&](const http::Served& s) {
    const std::string model = api.ServedModelOf(std::string(s.path));
    const std::string code = std::to_string(s.status);
    registry
        ->Counter("pstrain_serving_requests_total",
                  "HTTP requests answered, by model and status code",
                  {{"model", model}, {"code", code}})
        .Add();
    if (s.status >= 400) {
      registry
          ->Counter("pstrain_serving_request_errors_total",
                    "Requests answered with an error (4xx, 5xx), by model and status code",
                    {{"model", model}, {"code", code}})
          .Add();
    }
    registry
        ->Histogram("pstrain_serving_request_duration_seconds",
                    "From a request's first byte to its response written", prom::LatencyBuckets(),
                    {{"model", model}})
        .Observe(std::chrono::duration<double>(s.duration).count());
  };
  auto handler = [&](const http::Request& req) -> http::Response {
    if (req.path == "/healthz") {
      if (draining.load()) return http::Response::Text(503, "draining\n");
      if (!ready.load()) return http::Response::Text(503, "loading\n");
      return http::Response::Text(200, "ok\n");
    }
    if (req.path == "/metrics") return prom::MetricsResponse(req, *registry);
    serving::RestResponse r = api.Handle(req.method, req.path, req.body);
    if (r.instances > 0) {
      std::vector<double> bounds;
      for (double b = 1; b <= 65536; b *= 2) bounds.push_back(b);
      registry
          ->Histogram("pstrain_serving_instances_per_request", "Instances in a predict request",
                      bounds, {{"model", r.model}})
          .Observe(static_cast<double>(r.instances));
    }
    return ToHttp(r);
  };
  auto server = http::Server::Start(so, handler);
  if (!server.ok()) return fail(server.status());
  std::printf("pstrain-serve: serving at http://%s:%u\n", f.host.c_str(), (*server)->port());
  std::fflush(stdout);
  PS_LOG(Info) << "serving at " << (f.tls_cert.empty() ? "http" : "https") << "://" << f.host << ":"
               << (*server)->port();
  // The API server's own figures: pstrain_http_*{server="api"}.
  auto http_stats = prom::ExportHttpStats(*registry, **server, "api");
  std::unique_ptr<prom::MetricsEndpoint> metrics_server;
  if (f.metrics_port >= 0) {
    auto m = prom::MetricsEndpoint::Start(
        prom::MetricsServerOptions(f.host, static_cast<uint16_t>(f.metrics_port)), registry);
    if (!m.ok()) return fail(m.status());
    metrics_server = std::move(*m);
    PS_LOG(Info) << "metrics at http://" << f.host << ":" << metrics_server->port() << "/metrics";
  }

  std::mutex mu;
  std::condition_variable cv;
  int signals_seen = 0, hangups = 0;
  auto watching = signals.Start([&](int) {
    std::lock_guard lock(mu);
    ++signals_seen;
    draining.store(true);
    cv.notify_all();
  });
  serve::HangupWatcher hangup([&] {
    std::lock_guard lock(mu);
    ++hangups;
    cv.notify_all();
  });
  if (Status st = models.Apply(*specs, /*startup=*/true); !st.ok()) {
    (*server)->Stop();
    return daemon::FinishDaemon("pstrain-serve", st, signals);
  }
  reloaded_at.Set(now());
  ready.store(true);
  PS_LOG(Info) << "ready: " << specs->size() << " model(s) loaded";
  auto reload = [&] {
    const std::string what =
        f.model_config_file.empty() ? std::string("the --model flags") : f.model_config_file;
    PS_LOG(Info) << "SIGHUP: applying " << what << " again";
    auto next = ReadSpecs(f);
    if (!next.ok()) {
      reload_failures.Add();
      PS_LOG(Error) << "config reload failed: " << next.status().message()
                    << " (serving on with the previous config)";
      return;
    }
    if (Status st = models.Apply(*next, /*startup=*/false); !st.ok()) {
      reload_failures.Add();
      PS_LOG(Error) << "config reload failed: " << st.message()
                    << " (its models were applied; that model's labels stay as they were)";
      return;
    }
    reloads.Add();
    reloaded_at.Set(now());
    PS_LOG(Info) << "config reloaded: " << next->size() << " model(s)";
  };
  const auto poll = std::chrono::duration<double>(f.poll_seconds);
  {
    std::unique_lock lock(mu);
    while (signals_seen == 0) {
      cv.wait_for(lock, poll, [&] { return signals_seen > 0 || hangups > 0; });
      if (signals_seen > 0) break;
      const bool hup = hangups > 0;
      hangups = 0;
      lock.unlock();
      if (hup) {
        reload();
      } else {
        models.Poll();
      }
      lock.lock();
    }
    PS_LOG(Info) << "stopping: /healthz fails now; answering for " << f.drain_delay
                 << " s more (another signal: at once)";
    cv.wait_for(lock, std::chrono::duration<double>(f.drain_delay),
                [&] { return signals_seen > 1; });
  }
  const bool clean = (*server)->Drain(std::chrono::milliseconds(10000));
  PS_LOG(Info) << "stopped" << (clean ? "" : " (connections still open after 10 s were closed)");
  return daemon::kExitOk;
}

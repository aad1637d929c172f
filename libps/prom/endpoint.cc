#include "libps/prom/endpoint.h"

namespace ps::prom {

http::Response MetricsResponse(const http::Request& request, const Registry& registry) {
  if (request.method != "GET" && request.method != "HEAD") {
    http::Response r = http::Response::Text(405, "only GET\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  if (request.path != "/metrics")
    return http::Response::Text(404, "not found; metrics are at /metrics\n");
  http::Response r = http::Response::Text(200, registry.Render());
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

http::ServerOptions MetricsServerOptions(const std::string& host, uint16_t port) {
  http::ServerOptions o;
  o.host = host;
  o.port = port;
  o.threads = 1;
  o.header_limit = size_t{8} << 10;
  o.body_limit = uint64_t{64} << 10;
  o.read_timeout = std::chrono::seconds(10);
  o.write_timeout = std::chrono::seconds(10);
  o.idle_timeout = std::chrono::seconds(30);
  o.max_connections = 16;
  o.name = "metrics endpoint";
  return o;
}

std::function<void(const http::Served&)> HttpDurationHook(
    Registry& registry, const std::string& server, std::function<void(const http::Served&)> next) {
  prom::Histogram& h = registry.Histogram(
      "pstrain_http_request_duration_seconds",
      "Time from a request's first byte to its response written, per HTTP server.",
      LatencyBuckets(), {{"server", server}});
  return [&h, next = std::move(next)](const http::Served& s) {
    h.Observe(std::chrono::duration<double>(s.duration).count());
    if (next) next(s);
  };
}

Registry::Collection ExportHttpStats(Registry& registry, const http::Server& http_server,
                                     const std::string& server) {
  return registry.AddCollector([&http_server, server](Writer& w) {
    const http::Server::Stats s = http_server.stats();
    auto d = [](uint64_t v) { return static_cast<double>(v); };
    const Labels labels{{"server", server}};
    w.Gauge("pstrain_http_connections", "Open connections to this HTTP server.", d(s.connections),
            labels);
    w.Counter("pstrain_http_refused_connections_total",
              "Connections over this HTTP server's cap, answered 503 and closed.",
              d(s.refused_connections), labels);
    for (size_t k = 1; k < s.responses_by_class.size(); ++k) {
      w.Counter("pstrain_http_responses_total",
                "Responses this HTTP server wrote, by status class.", d(s.responses_by_class[k]),
                {{"server", server}, {"code", std::to_string(k) + "xx"}});
    }
    w.Counter("pstrain_http_timeouts_total",
              "Connections this HTTP server closed because a request or response took too long.",
              d(s.timeouts), labels);
    w.Counter("pstrain_http_tls_failures_total",
              "TLS handshakes with this HTTP server that failed.", d(s.tls_failures), labels);
  });
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    http::ServerOptions options, const std::shared_ptr<Registry>& registry) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->registry_ = registry;
  options.on_request = HttpDurationHook(*registry, "metrics", std::move(options.on_request));
  std::shared_ptr<const Registry> served = registry;
  PS_ASSIGN_OR_RETURN(
      e->server_, http::Server::Start(std::move(options), [served](const http::Request& request) {
        return MetricsResponse(request, *served);
      }));
  e->collection_ = ExportHttpStats(*registry, *e->server_, "metrics");
  return e;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace ps::prom

// The /metrics endpoint on the HTTP module (libps/http), and the HTTP server's own figures
// as Prometheus metrics (for the endpoint itself and any other server of the module).
//
// GET or HEAD /metrics (a query string is ignored) → 200, the registry's exposition,
// Content-Type "text/plain; version=0.0.4; charset=utf-8". Another path → 404; another
// method → 405 with "Allow: GET, HEAD". The server itself answers malformed requests (400),
// heads over its limit (431), bodies over its limit (413) and connections over its cap
// (503): libps/http/server.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "libps/core/status.h"
#include "libps/http/server.h"
#include "libps/prom/registry.h"

namespace ps::prom {

// The answer to one request. Pure but for rendering the registry.
http::Response MetricsResponse(const http::Request& request, const Registry& registry);

// The endpoint's defaults on host:port: one thread, request heads up to 8 KiB, bodies up
// to 64 KiB, 10 s to read a request or write a response, 30 s idle between keep-alive
// requests, 16 connections at once; errors name the "metrics endpoint".
http::ServerOptions MetricsServerOptions(const std::string& host, uint16_t port);

// A hook for http::ServerOptions::on_request that observes every response's duration in
// pstrain_http_request_duration_seconds{server=`server`} and then calls `next` (if set).
// The histogram lives as long as `registry`.
std::function<void(const http::Served&)> HttpDurationHook(
    Registry& registry, const std::string& server,
    std::function<void(const http::Served&)> next = nullptr);

// Exports `http_server`'s counters (http::Server::Stats) as pstrain_http_* with the label
// server=`server` until the returned handle is destroyed; destroy it before the server.
[[nodiscard]] Registry::Collection ExportHttpStats(Registry& registry,
                                                   const http::Server& http_server,
                                                   const std::string& server);

// A daemon's /metrics endpoint: `registry` served on an http::Server, with the server's
// own figures in it (pstrain_http_*{server="metrics"}: ExportHttpStats, HttpDurationHook).
class MetricsEndpoint {
 public:
  // `options`: MetricsServerOptions and changes. Unavailable naming the address when it
  // cannot listen.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(http::ServerOptions options,
                                                        const std::shared_ptr<Registry>& registry);
  ~MetricsEndpoint();  // stops serving; a scrape in progress is cut off
  uint16_t port() const { return server_->port(); }
  http::Server& server() { return *server_; }

 private:
  MetricsEndpoint() = default;
  // In this order: the collection goes before the server, the server before the registry.
  std::shared_ptr<Registry> registry_;
  std::unique_ptr<http::Server> server_;
  Registry::Collection collection_;
};

}  // namespace ps::prom

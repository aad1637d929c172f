// The /metrics endpoint: a minimal HTTP/1.x server on its own thread and io_context, so
// a slow or hostile scraper never touches a training thread. Asio-free header.
//
// GET (or HEAD) /metrics (a query string is ignored) → 200, the registry's exposition,
// Content-Type "text/plain; version=0.0.4; charset=utf-8". Another path → 404; another
// method → 405; a request line that is not HTTP/1.x → 400; a request head over
// max_request_bytes → 431. One request per connection (Connection: close). A connection
// that has not been answered within `timeout` is closed; beyond max_connections at once,
// new ones are closed unanswered.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "libps/core/status.h"
#include "libps/prom/registry.h"

namespace ps::prom {

struct HttpOptions {
  size_t max_request_bytes = 8192;           // request line + headers
  std::chrono::milliseconds timeout{10000};  // per connection, from accept to the last byte written
  int max_connections = 16;
};

class MetricsServer {
 public:
  // Listens on host:port (port 0: the kernel picks; see port()). Unavailable naming the
  // address when it cannot.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, uint16_t port,
                                                      std::shared_ptr<const Registry> registry,
                                                      HttpOptions options = {});
  ~MetricsServer();  // stops serving; a scrape in progress is cut off
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  uint16_t port() const;

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The response to one request head (request line and headers, without the body):
// status line, headers and body. `registry` renders /metrics. Pure but for the render.
std::string HttpRespond(const std::string& head, const Registry& registry);

// A blocking HTTP/1.1 GET of http://host:port/target with Connection: close, for tests
// and tools: the status code and the body (chunked transfer decoded). Fails on a
// connection error, a malformed response, or after `timeout`.
struct HttpResponse {
  int status = 0;
  std::string headers;  // the header lines, "\r\n"-separated
  std::string body;
};
Result<HttpResponse> HttpGet(const std::string& host, uint16_t port, const std::string& target,
                             std::chrono::milliseconds timeout);

}  // namespace ps::prom

// A blocking HTTP/1.1 client on Boost.Beast, one request per connection. Asio-free header.
// Only the tests use it, so it is built into libps_test_support_dep (libps/http/meson.build:
// module_test_support), not into libps_dep; a program that needs it moves it back to
// module_sources.
#pragma once

#include <cstdint>
#include <string>

#include "libps/http/server.h"

namespace ps::http {

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";
  Fields headers;  // more fields; Host, Content-Length and Connection: close are set
  std::string body;
};

struct ClientResponse {
  int status = 0;
  Fields headers;
  std::string body;  // chunked transfer coding removed

  const std::string* Header(std::string_view name) const { return FindField(headers, name); }
};

// HTTPS: the server's certificate must be signed by ca_file (its host name is not
// checked: cluster-internal certificates name tasks, not hosts); cert_file and key_file,
// when given, are presented as the client certificate.
struct ClientTls {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// Sends `request` to host:port and reads the response (body up to 256 MiB). Fails
// (Unavailable naming the URL) when it cannot connect, the connection breaks, or
// `timeout` passes; ProtocolError on a malformed response. `tls` null: plain HTTP.
Result<ClientResponse> Fetch(const std::string& host, uint16_t port, const ClientRequest& request,
                             Millis timeout, const ClientTls* tls = nullptr);

// Fetch of GET `target`.
Result<ClientResponse> Get(const std::string& host, uint16_t port, const std::string& target,
                           Millis timeout);

}  // namespace ps::http

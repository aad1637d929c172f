// An HTTP/1.1 server on Boost.Beast: the /metrics endpoint of every daemon and the REST
// API of pstrain-serve. Asio-free header (pimpl).
//
// Threading: one io_context run by `threads` threads; each connection lives on its own
// strand, so its requests are read, handled and answered one after another, while other
// connections are served by the other threads. The handler runs on the I/O thread that
// read the request (a handler that computes holds that thread; with `threads` threads at
// most that many requests are handled at once).
//
// Per connection: HTTP/1.1 keep-alive (an HTTP/1.0 request is answered and the connection
// closed); a request is read whole (head, then body) before the handler sees it.
// Answers the server gives itself (each with "Connection: close", then closes):
//   400 a malformed request (also an unparsable chunked body)
//   413 a body over body_limit: a Content-Length over it is answered at once, before any
//       body byte is read (also under "Expect: 100-continue"); a chunked body when it
//       passes the limit
//   431 a request head (request line + header fields) over header_limit
//   500 the handler threw, or answered a status outside 100..999
//   503 a connection beyond max_connections: accepted (after its TLS handshake), answered
//       without reading its request, and closed; it does not count against the cap
// "Expect: 100-continue" with an acceptable length: "100 Continue" is sent before the body
// is read. A HEAD request gets the handler's response without its body (Content-Length as
// for the body). Timeouts close the connection without an answer: read_timeout for a
// request from its first byte to its last (and, on a new connection, for the TLS
// handshake and the first byte of the first request), idle_timeout between requests of a
// keep-alive connection, write_timeout for a response.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libps/core/status.h"

namespace ps::http {

using Millis = std::chrono::milliseconds;

// Header fields in order, names as sent (or as to be sent).
using Fields = std::vector<std::pair<std::string, std::string>>;

// The value of the first field named `name` (ASCII case-insensitive), or nullptr.
const std::string* FindField(const Fields& fields, std::string_view name);

struct Request {
  std::string method;  // as sent: "GET", "POST"
  std::string target;  // as sent: "/v1/models/m:predict?x=1"
  std::string path;    // the target up to its first '?' (not percent-decoded)
  std::string query;   // after the first '?'; empty when none
  int version = 11;    // 10 (HTTP/1.0) or 11 (HTTP/1.1)
  Fields headers;
  std::string body;  // chunked transfer coding removed
  std::string peer;  // "127.0.0.1:53122"
  bool tls = false;
  // Over TLS with a verified client certificate: its subject, one line
  // ("/CN=client"); else empty.
  std::string client_subject;

  const std::string* Header(std::string_view name) const { return FindField(headers, name); }
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";  // empty: no Content-Type field
  // More fields. The server sets Content-Length, Connection and Server itself.
  Fields headers;
  std::string body;
  bool close = false;  // close the connection after this response

  static Response Text(int status, std::string text);  // text/plain; charset=utf-8
  static Response Json(int status, std::string json);  // application/json
};

// Called for each request, concurrently for different connections, on an I/O thread. An
// exception it throws, or a status outside 100..999, is answered 500 (and logged).
using Handler = std::function<Response(const Request&)>;

struct TlsOptions {
  std::string cert_file;  // PEM: the server's certificate (chain)
  std::string key_file;   // PEM: its private key
  // PEM: the CA that client certificates must be signed by. Empty: clients are not asked
  // for a certificate.
  std::string ca_file;
  // With ca_file: a client without a certificate fails the handshake. false: a client may
  // send none (one it sends is still verified).
  bool require_client_cert = true;
};

// One response the server wrote whole (ServerOptions::on_request): handler responses and
// the server's own 4xx/5xx answers; not "100 Continue". The views are valid during the
// call only.
struct Served {
  std::string_view method;  // empty when the request line could not be read (400, 431, 503)
  std::string_view path;    // likewise
  int status = 0;
  // From the request's first byte (for a 503: the accept) to its response written.
  std::chrono::nanoseconds duration{0};
  uint64_t request_body_bytes = 0;
  uint64_t response_body_bytes = 0;  // as written (0 for HEAD)
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the kernel picks one; see Server::port()
  int threads = 1;
  size_t header_limit = size_t{8} << 10;    // request line + header fields, bytes; over: 431
  uint64_t body_limit = uint64_t{4} << 20;  // request body, bytes (after dechunking); over: 413
  Millis read_timeout{10000};
  Millis idle_timeout{60000};
  Millis write_timeout{10000};
  int max_connections = 256;      // open at once; more are answered 503 and closed
  std::optional<TlsOptions> tls;  // nullopt: plain HTTP
  // Quick and thread-safe (any I/O thread, concurrently): count, observe, never block.
  std::function<void(const Served&)> on_request;
  // Errors name it: "metrics endpoint 0.0.0.0:9400: cannot listen: ...".
  std::string name = "HTTP server";
};

class Server {
 public:
  // Loads the TLS files (errors name the file), binds and listens (SO_REUSEADDR), starts
  // the threads. Unavailable naming the address when it cannot listen.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options, Handler handler);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;  // the bound port

  // Counters since Start. Thread-safe.
  struct Stats {
    uint64_t connections = 0;           // open now (refused ones included while they last)
    uint64_t accepted_connections = 0;  // accepted since Start, refused ones included
    uint64_t refused_connections = 0;   // over max_connections: answered 503 and closed
    uint64_t responses = 0;             // written whole, as on_request sees them
    std::array<uint64_t, 6> responses_by_class{};  // [k]: kxx responses, k = 1..5
    uint64_t timeouts = 0;      // connections closed by read_timeout or write_timeout
    uint64_t tls_failures = 0;  // TLS handshakes that failed
  };
  Stats stats() const;

  // Graceful stop: stops accepting (new connections are refused by the kernel), closes
  // connections waiting for a request (no byte of one arrived), lets requests that have
  // begun arriving or are
  // being handled finish (their responses say "Connection: close"), and waits for them at
  // most `deadline`; then closes what is left (Stop). true when every connection ended by
  // itself. Not from a handler.
  bool Drain(Millis deadline);
  // Stops accepting, closes every connection at once (a response being written is cut
  // off), waits for running handlers to return and joins the threads. Idempotent. Not
  // from a handler.
  void Stop();

  struct Impl;

 private:
  explicit Server(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace ps::http

// One connection of the HTTP server: the TLS handshake, then requests read whole (head,
// "100 Continue", body), handed to the handler and answered, until the connection closes.
// Runs as one coroutine on the connection's strand (server_impl.h).
#include "libps/http/server_impl.h"

#include <type_traits>

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "libps/core/log.h"

namespace ps::http {

namespace beast = boost::beast;
namespace bhttp = beast::http;

namespace {

using TlsStream = beast::ssl_stream<beast::tcp_stream>;
constexpr auto kAwait = asio::use_awaitable;
// How long a closing connection waits for the client's end (its FIN, or TLS close_notify)
// after the last response, discarding what it still sends (at most kLingerBytes): closing
// with unread bytes would reset the connection, and the client could lose the response.
constexpr Millis kLinger{2000};
constexpr size_t kLingerBytes = size_t{1} << 20;

template <typename Stream>
constexpr bool kIsTls = std::is_same_v<Stream, TlsStream>;

template <typename Stream>
beast::tcp_stream& Lowest(Stream& s) {
  return beast::get_lowest_layer(s);
}

// A parse error (malformed or over a limit), as opposed to the connection failing.
bool IsParseError(const error_code& ec) {
  static const auto& category = bhttp::make_error_code(bhttp::error::bad_method).category();
  return ec.category() == category && ec != bhttp::error::end_of_stream &&
         ec != bhttp::error::partial_message;
}

bool CanHaveBody(int status) { return status >= 200 && status != 204 && status != 304; }

bhttp::response<bhttp::string_body> Build(Response r, bool head_only, bool keep_alive) {
  bhttp::response<bhttp::string_body> res;
  res.version(11);
  res.result(static_cast<unsigned>(r.status));
  res.set(bhttp::field::server, "pstrain");
  if (!r.content_type.empty()) res.set(bhttp::field::content_type, r.content_type);
  for (auto& [name, value] : r.headers) res.insert(name, value);
  const size_t length = r.body.size();
  if (CanHaveBody(r.status)) {
    res.content_length(length);
    if (!head_only) res.body() = std::move(r.body);
  }
  res.keep_alive(keep_alive);
  return res;
}

Response ErrorResponse(int status, const std::string& text) {
  Response r = Response::Text(status, text + "\n");
  r.close = true;
  return r;
}

std::string PeerAddress(const tcp::socket& socket) {
  error_code ec;
  const tcp::endpoint ep = socket.remote_endpoint(ec);
  if (ec) return "?";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

std::string ClientSubject(TlsStream& stream) {
  X509* cert = SSL_get0_peer_certificate(stream.native_handle());
  if (cert == nullptr || SSL_get_verify_result(stream.native_handle()) != X509_V_OK) return "";
  char line[512];
  X509_NAME_oneline(X509_get_subject_name(cert), line, sizeof line);
  return line;
}

// Ends the connection: our side first, then what the client still sends is read and
// dropped until its end, for at most kLinger.
template <typename Stream>
asio::awaitable<void> CloseGracefully(Stream& stream) {
  error_code ec;
  Lowest(stream).expires_after(kLinger);
  if constexpr (kIsTls<Stream>) {
    co_await stream.async_shutdown(asio::redirect_error(kAwait, ec));
  } else {
    Lowest(stream).socket().shutdown(tcp::socket::shutdown_send, ec);
    std::array<char, 16384> sink;
    size_t dropped = 0;
    while (!ec && dropped < kLingerBytes) {
      dropped += co_await Lowest(stream).async_read_some(asio::buffer(sink),
                                                         asio::redirect_error(kAwait, ec));
    }
  }
  Lowest(stream).socket().close(ec);
}

struct Session {
  Server::Impl& impl;
  ConnControl& control;
  std::string peer;
  std::string client_subject;

  template <typename Stream>
  asio::awaitable<void> Run(Stream& stream, bool refuse, Clock::time_point accepted);

  // Writes `response`; false when the connection failed (counted if by the timeout).
  template <typename Stream>
  asio::awaitable<bool> Write(Stream& stream, Response response, bool head_only, bool keep_alive,
                              std::string_view method, std::string_view path,
                              uint64_t request_body_bytes, Clock::time_point start);

  void TimedOut() { impl.counters.timeouts.fetch_add(1, std::memory_order_relaxed); }

  // Draining, and no byte of a request has reached the socket: the connection ends here
  // (Server::Drain's rule for idle connections).
  template <typename Stream>
  bool Drained(Stream& stream) {
    if (!impl.draining.load()) return false;
    error_code ec;
    return Lowest(stream).socket().available(ec) == 0;
  }
};

template <typename Stream>
asio::awaitable<bool> Session::Write(Stream& stream, Response response, bool head_only,
                                     bool keep_alive, std::string_view method,
                                     std::string_view path, uint64_t request_body_bytes,
                                     Clock::time_point start) {
  if (response.status < 100 || response.status > 999) {
    PS_LOG(Warning) << impl.options.name << ": " << method << " " << path
                    << ": the handler answered status " << response.status;
    response = ErrorResponse(500, "internal error");
    keep_alive = false;
  }
  const int status = response.status;
  auto res = Build(std::move(response), head_only, keep_alive);
  const uint64_t body_bytes = res.body().size();
  error_code ec;
  Lowest(stream).expires_after(impl.options.write_timeout);
  co_await bhttp::async_write(stream, res, asio::redirect_error(kAwait, ec));
  if (ec) {
    if (ec == beast::error::timeout) TimedOut();
    co_return false;
  }
  Served served;
  served.method = method;
  served.path = path;
  served.status = status;
  served.duration = Clock::now() - start;
  served.request_body_bytes = request_body_bytes;
  served.response_body_bytes = body_bytes;
  impl.Count(served);
  co_return true;
}

template <typename Stream>
asio::awaitable<void> Session::Run(Stream& stream, bool refuse, Clock::time_point accepted) {
  const ServerOptions& o = impl.options;
  error_code ec;
  if (Drained(stream)) co_return;
  if constexpr (kIsTls<Stream>) {
    Lowest(stream).expires_after(o.read_timeout);
    co_await stream.async_handshake(asio::ssl::stream_base::server,
                                    asio::redirect_error(kAwait, ec));
    if (ec) {
      impl.counters.tls_failures.fetch_add(1, std::memory_order_relaxed);
      PS_LOG(Debug) << o.name << ": TLS handshake with " << peer << " failed: " << ec.message();
      co_return;
    }
    client_subject = ClientSubject(stream);
  }
  if (refuse) {
    Response busy = ErrorResponse(
        503, "too many connections (" + std::to_string(o.max_connections) + " at most)");
    busy.headers.emplace_back("Retry-After", "1");
    if (co_await Write(stream, std::move(busy), false, false, "", "", 0, accepted))
      co_await CloseGracefully(stream);
    co_return;
  }
  beast::flat_buffer buffer;
  bool first = true;
  for (;;) {
    if (buffer.size() == 0) {
      // Waiting for a request: Drain closes the connection now (ConnControl).
      control.idle = true;
      if (Drained(stream)) co_return;
      Lowest(stream).expires_after(first ? o.read_timeout : o.idle_timeout);
      const size_t n =
          co_await stream.async_read_some(buffer.prepare(4096), asio::redirect_error(kAwait, ec));
      control.idle = false;
      if (ec) {
        if (first && ec == beast::error::timeout) TimedOut();
        co_return;
      }
      buffer.commit(n);
    }
    control.idle = false;
    first = false;
    const Clock::time_point start = Clock::now();
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(std::min<size_t>(o.header_limit, UINT32_MAX)));
    parser.body_limit(o.body_limit);
    Lowest(stream).expires_after(o.read_timeout);
    co_await bhttp::async_read_header(stream, buffer, parser, asio::redirect_error(kAwait, ec));
    if (!ec && parser.get().version() == 11 && !parser.is_done()) {
      const auto expect = parser.get()[bhttp::field::expect];
      if (beast::iequals(expect, "100-continue")) {
        bhttp::response<bhttp::empty_body> go{bhttp::status::continue_, 11};
        Lowest(stream).expires_after(o.write_timeout);
        co_await bhttp::async_write(stream, go, asio::redirect_error(kAwait, ec));
        if (ec) {
          if (ec == beast::error::timeout) TimedOut();
          co_return;
        }
        Lowest(stream).expires_after(o.read_timeout);
      }
    }
    if (!ec && !parser.is_done())
      co_await bhttp::async_read(stream, buffer, parser, asio::redirect_error(kAwait, ec));
    if (ec) {
      if (ec == beast::error::timeout) TimedOut();
      if (!IsParseError(ec)) co_return;
      Response bad;
      if (ec == bhttp::error::header_limit) {
        bad = ErrorResponse(431, "request head over " + std::to_string(o.header_limit) + " bytes");
      } else if (ec == bhttp::error::body_limit) {
        bad = ErrorResponse(413, "request body over " + std::to_string(o.body_limit) + " bytes");
      } else {
        bad = ErrorResponse(400, "bad request: " + ec.message());
      }
      // The method and path when the head was read (a body over the limit).
      std::string method, path;
      if (parser.is_header_done()) {
        method = std::string(parser.get().method_string());
        const auto target = parser.get().target();
        path = std::string(target.substr(0, target.find('?')));
      }
      if (co_await Write(stream, std::move(bad), false, false, method, path, 0, start))
        co_await CloseGracefully(stream);
      co_return;
    }

    auto& message = parser.get();
    Request request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    const size_t q = request.target.find('?');
    request.path = request.target.substr(0, q);
    if (q != std::string::npos) request.query = request.target.substr(q + 1);
    request.version = static_cast<int>(message.version());
    for (const auto& field : message) {
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    request.body = std::move(message.body());
    request.peer = peer;
    request.tls = kIsTls<Stream>;
    request.client_subject = client_subject;
    const bool wants_keep_alive = message.keep_alive() && message.version() == 11;

    Response response;
    try {
      response = impl.handler(request);
    } catch (const std::exception& e) {
      PS_LOG(Warning) << o.name << ": " << request.method << " " << request.path
                      << ": the handler failed: " << e.what();
      response = ErrorResponse(500, "internal error");
    } catch (...) {
      PS_LOG(Warning) << o.name << ": " << request.method << " " << request.path
                      << ": the handler failed";
      response = ErrorResponse(500, "internal error");
    }
    const bool keep_alive = wants_keep_alive && !response.close && !impl.draining.load();
    if (!co_await Write(stream, std::move(response), request.method == "HEAD", keep_alive,
                        request.method, request.path, request.body.size(), start))
      co_return;
    if (!keep_alive) {
      co_await CloseGracefully(stream);
      co_return;
    }
  }
}

// Clears ConnControl::socket when the session ends, on its strand.
struct Unregister {
  ConnControl& control;
  ~Unregister() {
    control.socket = nullptr;
    control.idle = false;
  }
};

}  // namespace

asio::awaitable<void> Server::Impl::Serve(tcp::socket socket, std::shared_ptr<ConnControl> control,
                                          bool refuse, Clock::time_point accepted) {
  Session session{*this, *control, PeerAddress(socket), ""};
  if (ssl) {
    TlsStream stream(std::move(socket), *ssl);
    control->socket = &Lowest(stream).socket();
    Unregister unregister{*control};
    co_await session.Run(stream, refuse, accepted);
  } else {
    beast::tcp_stream stream(std::move(socket));
    control->socket = &Lowest(stream).socket();
    Unregister unregister{*control};
    co_await session.Run(stream, refuse, accepted);
  }
}

}  // namespace ps::http

#include <utility>  // before Boost's coroutine headers under GCC 12 (STYLE.md)

#include "libps/http/client.h"

#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace ps::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr uint64_t kMaxResponseBody = uint64_t{256} << 20;

struct Exchange {
  const ClientRequest& request;
  std::string host_field;
  std::optional<ClientResponse> response;
  error_code ec;
  bool malformed = false;

  template <typename Stream>
  asio::awaitable<void> Run(Stream& stream) {
    bhttp::request<bhttp::string_body> req;
    req.version(11);
    req.method_string(request.method);
    req.target(request.target);
    req.set(bhttp::field::host, host_field);
    req.set(bhttp::field::user_agent, "pstrain");
    for (const auto& [name, value] : request.headers) req.insert(name, value);
    req.body() = request.body;
    if (!request.body.empty() || request.method == "POST" || request.method == "PUT")
      req.prepare_payload();
    req.keep_alive(false);
    co_await bhttp::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxResponseBody);
    parser.skip(request.method == "HEAD");
    co_await bhttp::async_read(stream, buffer, parser,
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      const auto& category = bhttp::make_error_code(bhttp::error::bad_method).category();
      malformed = ec.category() == category && ec != bhttp::error::end_of_stream &&
                  ec != bhttp::error::partial_message;
      co_return;
    }
    auto& res = parser.get();
    ClientResponse out;
    out.status = static_cast<int>(res.result_int());
    for (const auto& f : res) out.headers.emplace_back(f.name_string(), f.value());
    out.body = std::move(res.body());
    response = std::move(out);
  }
};

}  // namespace

Result<ClientResponse> Fetch(const std::string& host, uint16_t port, const ClientRequest& request,
                             Millis timeout, const ClientTls* tls) {
  const std::string url = std::string(tls != nullptr ? "https://" : "http://") + host + ":" +
                          std::to_string(port) + request.target;
  std::optional<asio::ssl::context> ctx;
  if (tls != nullptr) {
    ctx.emplace(asio::ssl::context::tls_client);
    error_code ec;
    ctx->set_verify_mode(asio::ssl::verify_peer, ec);
    if (!tls->ca_file.empty()) ctx->load_verify_file(tls->ca_file, ec);
    if (ec) return InvalidArgument(url + ": CA file " + tls->ca_file + ": " + ec.message());
    if (!tls->cert_file.empty()) {
      ctx->use_certificate_chain_file(tls->cert_file, ec);
      if (ec) return InvalidArgument(url + ": certificate " + tls->cert_file + ": " + ec.message());
      ctx->use_private_key_file(tls->key_file, asio::ssl::context::pem, ec);
      if (ec) return InvalidArgument(url + ": key " + tls->key_file + ": " + ec.message());
    }
  }
  // Declared before the io_context: the coroutine, destroyed with it on a timeout, refers
  // to them.
  Exchange exchange{request, host + ":" + std::to_string(port), std::nullopt, {}, false};
  bool connected = false;
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        tcp::resolver resolver(io);
        auto endpoints = co_await resolver.async_resolve(
            host, std::to_string(port), asio::redirect_error(asio::use_awaitable, exchange.ec));
        if (exchange.ec) co_return;
        beast::tcp_stream tcp_stream(io);
        co_await tcp_stream.async_connect(endpoints,
                                          asio::redirect_error(asio::use_awaitable, exchange.ec));
        if (exchange.ec) co_return;
        connected = true;
        if (ctx) {
          beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp_stream), *ctx);
          co_await stream.async_handshake(asio::ssl::stream_base::client,
                                          asio::redirect_error(asio::use_awaitable, exchange.ec));
          if (exchange.ec) co_return;
          co_await exchange.Run(stream);
          error_code ignored;
          beast::get_lowest_layer(stream).socket().close(ignored);
        } else {
          co_await exchange.Run(tcp_stream);
        }
      },
      asio::detached);
  io.run_for(timeout);
  if (!io.stopped()) {
    io.stop();
    return Unavailable(url + ": timed out after " + std::to_string(timeout.count()) + " ms");
  }
  if (exchange.response) return std::move(*exchange.response);
  if (exchange.malformed)
    return ProtocolError(url + ": malformed response: " + exchange.ec.message());
  return Unavailable(url + ": " + (connected ? "" : "cannot connect: ") + exchange.ec.message());
}

Result<ClientResponse> Get(const std::string& host, uint16_t port, const std::string& target,
                           Millis timeout) {
  ClientRequest request;
  request.target = target;
  return Fetch(host, port, request, timeout);
}

}  // namespace ps::http

#include <utility>  // before Boost's coroutine headers under GCC 12 (STYLE.md)

#include "libps/prom/http.h"

#include <atomic>
#include <cctype>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace ps::prom {

namespace asio = boost::asio;
using asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

std::string Response(int code, const char* reason, const std::string& content_type,
                     const std::string& body, bool head_only, const char* extra_header = nullptr) {
  std::string r = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\n";
  r += "Content-Type: " + content_type + "\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  if (extra_header != nullptr) r += std::string(extra_header) + "\r\n";
  r += "Connection: close\r\n\r\n";
  if (!head_only) r += body;
  return r;
}

std::string Plain(int code, const char* reason, const std::string& text, bool head_only = false,
                  const char* extra_header = nullptr) {
  return Response(code, reason, "text/plain; charset=utf-8", text + "\n", head_only, extra_header);
}

}  // namespace

std::string HttpRespond(const std::string& head, const Registry& registry) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  const std::string version = sp2 == std::string::npos ? "" : line.substr(sp2 + 1);
  if (version != "HTTP/1.0" && version != "HTTP/1.1")
    return Plain(400, "Bad Request", "bad request line");
  const std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only)
    return Plain(405, "Method Not Allowed", "only GET", false, "Allow: GET, HEAD");
  if (target != "/metrics")
    return Plain(404, "Not Found", "not found; metrics are at /metrics", head_only);
  return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", registry.Render(),
                  head_only);
}

// ---------------------------------------------------------------- MetricsServer

struct MetricsServer::Impl {
  Impl(std::shared_ptr<const Registry> r, HttpOptions o) : registry(std::move(r)), options(o) {}

  asio::awaitable<void> Accept();
  asio::awaitable<void> Serve(tcp::socket socket);

  // Declared before the io_context: coroutine frames destroyed with it still use these.
  std::shared_ptr<const Registry> registry;
  HttpOptions options;
  std::atomic<int> live{0};
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread thread;
};

asio::awaitable<void> MetricsServer::Impl::Accept() {
  for (;;) {
    error_code ec;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
      // Out of descriptors and the like: do not spin.
      asio::steady_timer pause(io, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (live.load() >= options.max_connections) {
      socket.close(ec);
      continue;
    }
    live.fetch_add(1);  // here, not in Serve: the next accept already sees it
    asio::co_spawn(io, Serve(std::move(socket)), asio::detached);
  }
}

// `live` counts this connection already (Accept).
asio::awaitable<void> MetricsServer::Impl::Serve(tcp::socket sock) {
  struct Leave {
    std::atomic<int>& live;
    ~Leave() { live.fetch_sub(1); }
  } leave{live};
  auto socket = std::make_shared<tcp::socket>(std::move(sock));
  asio::steady_timer deadline(io, options.timeout);
  deadline.async_wait([socket](error_code ec) {
    if (!ec) socket->close(ec);  // the pending read or write ends with an error
  });
  std::string head;
  error_code ec;
  const size_t n = co_await asio::async_read_until(
      *socket, asio::dynamic_buffer(head, options.max_request_bytes), "\r\n\r\n",
      asio::redirect_error(asio::use_awaitable, ec));
  std::string response;
  if (ec == asio::error::not_found) {
    response = Plain(431, "Request Header Fields Too Large",
                     "request head over " + std::to_string(options.max_request_bytes) + " bytes");
  } else if (ec) {
    deadline.cancel();
    co_return;
  } else {
    response = HttpRespond(head.substr(0, n), *registry);
  }
  co_await asio::async_write(*socket, asio::buffer(response),
                             asio::redirect_error(asio::use_awaitable, ec));
  deadline.cancel();
  socket->shutdown(tcp::socket::shutdown_both, ec);
  socket->close(ec);
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, uint16_t port, std::shared_ptr<const Registry> registry,
    HttpOptions options) {
  auto impl = std::make_unique<Impl>(std::move(registry), options);
  const std::string where = host + ":" + std::to_string(port);
  error_code ec;
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(host, std::to_string(port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty())
    return Unavailable("metrics endpoint " + where + ": " + ec.message());
  const tcp::endpoint ep = endpoints.begin()->endpoint();
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(64, ec);
  if (ec) return Unavailable("metrics endpoint " + where + ": cannot listen: " + ec.message());
  Impl* p = impl.get();
  asio::co_spawn(p->io, p->Accept(), asio::detached);
  p->thread = std::thread([p] { p->io.run(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::~MetricsServer() {
  impl_->io.stop();
  impl_->thread.join();
}

uint16_t MetricsServer::port() const {
  error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

// ---------------------------------------------------------------- HttpGet

namespace {

// Decodes a chunked body; false when it is malformed.
bool Dechunk(const std::string& in, std::string* out) {
  size_t pos = 0;
  for (;;) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) return false;
    size_t size = 0;
    try {
      size = std::stoul(in.substr(pos, eol - pos), nullptr, 16);
    } catch (const std::exception&) {
      return false;
    }
    pos = eol + 2;
    if (size == 0) return true;
    if (in.size() < pos + size + 2) return false;
    out->append(in, pos, size);
    pos += size + 2;
  }
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<HttpResponse> HttpGet(const std::string& host, uint16_t port, const std::string& target,
                             std::chrono::milliseconds timeout) {
  const std::string url = "http://" + host + ":" + std::to_string(port) + target;
  asio::io_context io;
  tcp::socket socket(io);
  tcp::resolver resolver(io);
  error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Unavailable(url + ": " + ec.message());
  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + host + ":" +
                              std::to_string(port) +
                              "\r\nUser-Agent: pstrain\r\nAccept: */*\r\nConnection: close\r\n\r\n";
  std::string raw;
  error_code result = asio::error::timed_out;
  asio::async_connect(socket, endpoints, [&](error_code e, const tcp::endpoint&) {
    if (e) {
      result = e;
      return;
    }
    asio::async_write(socket, asio::buffer(request), [&](error_code e2, size_t) {
      if (e2) {
        result = e2;
        return;
      }
      asio::async_read(
          socket, asio::dynamic_buffer(raw, size_t{64} << 20),
          [&](error_code e3, size_t) { result = e3 == asio::error::eof ? error_code() : e3; });
    });
  });
  io.run_for(timeout);
  if (result)
    return Unavailable(url + ": " +
                       (result == asio::error::timed_out ? "timed out" : result.message()));
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.compare(0, 7, "HTTP/1.") != 0 || raw.size() < 12) {
    return ProtocolError(url + ": malformed response");
  }
  HttpResponse r;
  r.status = std::atoi(raw.c_str() + 9);
  r.headers = raw.substr(0, end);
  std::string body = raw.substr(end + 4);
  if (Lower(r.headers).find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    if (!Dechunk(body, &r.body)) return ProtocolError(url + ": malformed chunked body");
  } else {
    r.body = std::move(body);
  }
  return r;
}

}  // namespace ps::prom

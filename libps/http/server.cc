// Listening, accepting, the connection table, Drain and Stop. One connection's requests
// are in session.cc.
#include "libps/http/server_impl.h"

#include <cctype>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "libps/core/log.h"

namespace ps::http {

namespace {

// OpenSSL's reason for the last failure, or `fallback`.
std::string OpenSslReason(const std::string& fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  const char* reason = ERR_reason_error_string(e);
  return reason != nullptr ? reason : fallback;
}

Result<asio::ssl::context> LoadTls(const TlsOptions& t, const std::string& name) {
  asio::ssl::context ctx(asio::ssl::context::tls_server);
  SSL_CTX* native = ctx.native_handle();
  ERR_clear_error();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1)
    return Internal(name + ": TLS: cannot require TLS 1.2");
  if (SSL_CTX_use_certificate_chain_file(native, t.cert_file.c_str()) != 1) {
    return InvalidArgument(name + ": TLS certificate " + t.cert_file + ": " +
                           OpenSslReason("cannot load the certificate"));
  }
  if (SSL_CTX_use_PrivateKey_file(native, t.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(native) != 1) {
    return InvalidArgument(name + ": TLS key " + t.key_file + ": " +
                           OpenSslReason("cannot load the private key"));
  }
  if (!t.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(native, t.ca_file.c_str(), nullptr) != 1) {
      return InvalidArgument(name + ": TLS CA " + t.ca_file + ": " +
                             OpenSslReason("cannot load the CA certificate"));
    }
    int mode = SSL_VERIFY_PEER;
    if (t.require_client_cert) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(native, mode, nullptr);
  }
  return ctx;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

const std::string* FindField(const Fields& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (IEquals(n, name)) return &v;
  }
  return nullptr;
}

Response Response::Text(int status, std::string text) {
  Response r;
  r.status = status;
  r.body = std::move(text);
  return r;
}

Response Response::Json(int status, std::string json) {
  Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(json);
  return r;
}

// ---------------------------------------------------------------- Impl

asio::awaitable<void> Server::Impl::Accept() {
  uint64_t next_id = 0;
  for (;;) {
    error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(
        asio::make_strand(io), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
      // Out of descriptors and the like: do not spin.
      asio::steady_timer pause(accept_strand, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    const Clock::time_point accepted = Clock::now();
    counters.accepted.fetch_add(1, std::memory_order_relaxed);
    auto control = std::make_shared<ConnControl>(socket.get_executor());
    const uint64_t id = next_id++;
    const bool admitted = Admit(id, control);
    asio::any_io_executor executor = socket.get_executor();
    // The session holds the Impl: a connection may outlive Stop's wait by a moment. It
    // leaves the table however it ends (an exception ends only its coroutine).
    struct Leaver {
      Leaver(std::shared_ptr<Impl> s, uint64_t i, bool r) : self(std::move(s)), id(i), refused(r) {}
      Leaver(const Leaver&) = delete;
      Leaver& operator=(const Leaver&) = delete;
      ~Leaver() { self->Leave(id, refused); }
      std::shared_ptr<Impl> self;
      uint64_t id;
      bool refused;
    };
    auto leaver = std::make_shared<Leaver>(shared_from_this(), id, !admitted);
    asio::co_spawn(
        executor,
        [leaver, s = std::move(socket), control, accepted]() mutable -> asio::awaitable<void> {
          co_await leaver->self->Serve(std::move(s), control, leaver->refused, accepted);
        },
        asio::detached);
  }
}

bool Server::Impl::Admit(uint64_t id, const std::shared_ptr<ConnControl>& control) {
  std::lock_guard lock(mu);
  const bool over = conns.size() - refusing >= static_cast<size_t>(options.max_connections);
  conns.emplace(id, control);
  if (over) {
    ++refusing;
    counters.refused.fetch_add(1, std::memory_order_relaxed);
  }
  return !over;
}

void Server::Impl::Leave(uint64_t id, bool refused) {
  std::lock_guard lock(mu);
  conns.erase(id);
  if (refused) --refusing;
  if (conns.empty()) all_closed.notify_all();
}

void Server::Impl::ForEachConnection(const std::function<void(ConnControl&)>& fn) {
  std::lock_guard lock(mu);
  for (const auto& entry : conns) {
    const auto& control = entry.second;
    asio::post(control->executor, [control, fn] { fn(*control); });
  }
}

void Server::Impl::CloseAcceptor() {
  asio::post(accept_strand, [self = shared_from_this()] {
    error_code ec;
    self->acceptor.close(ec);
  });
}

void Server::Impl::Count(const Served& served) {
  counters.responses.fetch_add(1, std::memory_order_relaxed);
  const int k = served.status / 100;
  if (k >= 1 && k <= 5) counters.by_class[static_cast<size_t>(k)].fetch_add(1);
  if (options.on_request) options.on_request(served);
}

// ---------------------------------------------------------------- Server

Server::Server(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options, Handler handler) {
  const std::string where = options.host + ":" + std::to_string(options.port);
  const std::string name = options.name + " " + where;
  if (options.threads < 1) return InvalidArgument(name + ": threads must be at least 1");
  if (options.max_connections < 1)
    return InvalidArgument(name + ": max_connections must be at least 1");
  auto impl = std::make_shared<Impl>(std::move(options), std::move(handler));
  if (impl->options.tls) {
    auto ctx = LoadTls(*impl->options.tls, name);
    if (!ctx.ok()) return ctx.status();
    impl->ssl.emplace(std::move(*ctx));
  }
  error_code ec;
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(impl->options.host, std::to_string(impl->options.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) return Unavailable(name + ": " + ec.message());
  const tcp::endpoint ep = endpoints.begin()->endpoint();
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable(name + ": cannot listen: " + ec.message());
  asio::co_spawn(impl->accept_strand, impl->Accept(), asio::detached);
  for (int i = 0; i < impl->options.threads; ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::~Server() { Stop(); }

uint16_t Server::port() const {
  error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

Server::Stats Server::stats() const {
  Stats s;
  {
    std::lock_guard lock(impl_->mu);
    s.connections = impl_->conns.size();
  }
  const auto& c = impl_->counters;
  s.accepted_connections = c.accepted.load();
  s.refused_connections = c.refused.load();
  s.responses = c.responses.load();
  for (size_t k = 0; k < s.responses_by_class.size(); ++k) s.responses_by_class[k] = c.by_class[k];
  s.timeouts = c.timeouts.load();
  s.tls_failures = c.tls_failures.load();
  return s;
}

bool Server::Drain(Millis deadline) {
  Impl& impl = *impl_;
  if (impl.stopped.load()) return true;
  impl.draining.store(true);
  impl.CloseAcceptor();
  // A session checks `draining` on its strand before it waits for a request, so a
  // connection is either closed here while it waits or sees the flag.
  // One whose next request has reached the socket is not idle. Cancelling (not closing)
  // its wait lets a read that has already taken bytes (Asio reads in the reactor before
  // the completion reaches the strand) complete with them.
  impl.ForEachConnection([](ConnControl& c) {
    error_code ec;
    if (c.idle && c.socket != nullptr && c.socket->available(ec) == 0) c.socket->cancel(ec);
  });
  bool all = false;
  {
    std::unique_lock lock(impl.mu);
    all = impl.all_closed.wait_for(lock, deadline, [&] { return impl.conns.empty(); });
  }
  Stop();
  return all;
}

void Server::Stop() {
  Impl& impl = *impl_;
  if (impl.stopped.exchange(true)) return;
  impl.draining.store(true);
  impl.CloseAcceptor();
  impl.ForEachConnection([](ConnControl& c) {
    error_code ec;
    if (c.socket != nullptr) c.socket->close(ec);
  });
  // Sessions end at once but for a handler still running, which the join waits for.
  for (auto& t : impl.threads) t.join();
  impl.threads.clear();
}

}  // namespace ps::http

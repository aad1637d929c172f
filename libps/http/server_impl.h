// Internal to libps/http: Server::Impl, shared by server.cc (listening, accepting,
// draining, stopping) and session.cc (one connection: TLS handshake, requests, answers).
#pragma once

#include <utility>  // before Boost's coroutine headers under GCC 12 (STYLE.md)

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/strand.hpp>

#include "libps/http/server.h"

namespace ps::http {

namespace asio = boost::asio;
using asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

// What Drain and Stop may do to a connection, from any thread: they post to its strand.
struct ConnControl {
  explicit ConnControl(asio::any_io_executor e) : executor(std::move(e)) {}
  asio::any_io_executor executor;  // the connection's strand
  // On the strand only: the socket while the session runs (null before and after), and
  // whether the session waits for a request (no byte of one read yet).
  tcp::socket* socket = nullptr;
  bool idle = false;
};

struct Server::Impl : std::enable_shared_from_this<Impl> {
  Impl(ServerOptions o, Handler h) : options(std::move(o)), handler(std::move(h)) {}

  // server.cc
  asio::awaitable<void> Accept();
  // Registers a connection; false when it is over max_connections (it is registered
  // all the same, as refused: Stop closes it too).
  bool Admit(uint64_t id, const std::shared_ptr<ConnControl>& control);
  void Leave(uint64_t id, bool refused);
  // Posts `fn(control)` to every open connection's strand.
  void ForEachConnection(const std::function<void(ConnControl&)>& fn);
  void CloseAcceptor();
  void Count(const Served& served);

  // session.cc: serves one accepted connection until it closes. `refuse`: answer 503.
  asio::awaitable<void> Serve(tcp::socket socket, std::shared_ptr<ConnControl> control, bool refuse,
                              Clock::time_point accepted);

  // Declared before the io_context: coroutine frames destroyed with it still use these.
  const ServerOptions options;
  const Handler handler;
  std::optional<asio::ssl::context> ssl;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};

  std::mutex mu;
  std::condition_variable all_closed;                                // conns became empty
  std::unordered_map<uint64_t, std::shared_ptr<ConnControl>> conns;  // guarded by mu
  size_t refusing = 0;  // of conns, those refused (answered 503); guarded by mu

  struct Counters {
    std::atomic<uint64_t> accepted{0}, refused{0}, responses{0}, timeouts{0}, tls_failures{0};
    std::array<std::atomic<uint64_t>, 6> by_class{};
  } counters;

  asio::io_context io;
  asio::strand<asio::io_context::executor_type> accept_strand{io.get_executor()};
  tcp::acceptor acceptor{accept_strand};
  std::vector<std::thread> threads;
};

}  // namespace ps::http

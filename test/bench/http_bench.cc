// The HTTP server (libps/http) over 127.0.0.1: small requests on keep-alive connections
// (one, and several at once), a new connection per request, and big bodies both ways.
// Clients are blocking POSIX sockets on threads of this process; the server's handler
// answers at once, so the figures are the transport's.
//
//   bench_http [--threads 2] [--seconds 2] [--connections 4] [--body-mib 4]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "libps/http/server.h"
#include "test/bench/bench_util.h"

using namespace ps;
using namespace ps::bench;

namespace {

struct Conn {
  int fd = -1;
  std::string pending;
  explicit Conn(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      Die("cannot connect");
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Conn() { ::close(fd); }
  void Send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) Die("send failed");
      off += static_cast<size_t>(n);
    }
  }
  // One response with a Content-Length; its body size.
  size_t Read() {
    size_t end;
    std::vector<char> buf(1 << 20);
    auto more = [&] {
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) Die("connection closed");
      pending.append(buf.data(), static_cast<size_t>(n));
    };
    while ((end = pending.find("\r\n\r\n")) == std::string::npos) more();
    if (pending.compare(0, 12, "HTTP/1.1 200") != 0) Die("not 200: " + pending.substr(0, 40));
    const size_t cl = pending.find("Content-Length: ");
    if (cl == std::string::npos || cl > end) Die("no Content-Length");
    const size_t length = std::strtoull(pending.c_str() + cl + 16, nullptr, 10);
    while (pending.size() < end + 4 + length) more();
    pending.erase(0, end + 4 + length);
    return length;
  }
};

// Runs `connections` client threads for `seconds`, each calling `one(port)` in a loop;
// requests/s over all of them.
template <typename F>
double Rate(uint16_t port, int connections, double seconds, F one) {
  std::atomic<uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  const auto t0 = Clock::now();
  for (int c = 0; c < connections; ++c) {
    clients.emplace_back([&] {
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        one(port);
        ++n;
      }
      done.fetch_add(n);
    });
  }
  while (Seconds(t0, Clock::now()) < seconds)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop.store(true);
  for (auto& t : clients) t.join();
  return static_cast<double>(done.load()) / Seconds(t0, Clock::now());
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, connections = 4;
  double seconds = 2, body_mib = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads") {
      threads = std::stoi(FlagValue(argc, argv, &i));
    } else if (a == "--seconds") {
      seconds = std::stod(FlagValue(argc, argv, &i));
    } else if (a == "--connections") {
      connections = std::stoi(FlagValue(argc, argv, &i));
    } else if (a == "--body-mib") {
      body_mib = std::stod(FlagValue(argc, argv, &i));
    } else {
      Die("unknown flag " + a);
    }
  }
  http::ServerOptions o;
  o.threads = threads;
  o.body_limit = static_cast<uint64_t>(body_mib * 2 * (1 << 20));
  auto server = Must(http::Server::Start(o,
                                         [](const http::Request& r) {
                                           if (r.method == "POST")
                                             return http::Response::Json(200, r.body);
                                           return http::Response::Text(200, "ok\n");
                                         }),
                     "start the server");
  const uint16_t port = server->port();
  std::printf("bench_http: %d server threads, %u cores, load %s\n", threads,
              std::thread::hardware_concurrency(), LoadAverage().c_str());
  const std::string get = "GET /v1/models/m HTTP/1.1\r\nHost: b\r\n\r\n";

  thread_local std::unique_ptr<Conn> kept;
  auto keep_alive = [&](uint16_t p) {
    if (!kept) kept = std::make_unique<Conn>(p);
    kept->Send(get);
    kept->Read();
  };
  const double one = Rate(port, 1, seconds, keep_alive);
  std::printf("%-44s %10.0f requests/s (%.1f us each)\n", "small GET, 1 keep-alive connection", one,
              1e6 / one);
  const double many = Rate(port, connections, seconds, keep_alive);
  std::printf("%-44s %10.0f requests/s\n",
              ("small GET, " + std::to_string(connections) + " keep-alive connections").c_str(),
              many);
  const double fresh = Rate(port, 1, seconds, [&](uint16_t p) {
    Conn c(p);
    c.Send("GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n");
    c.Read();
  });
  std::printf("%-44s %10.0f requests/s\n", "small GET, a new connection each", fresh);

  const std::string body(static_cast<size_t>(body_mib * (1 << 20)), 'x');
  const std::string post = "POST /v1/models/m:predict HTTP/1.1\r\nHost: b\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  std::unique_ptr<Conn> big;
  const double posts = Rate(port, 1, seconds, [&](uint16_t p) {
    if (!big) big = std::make_unique<Conn>(p);
    big->Send(post);
    if (big->Read() != body.size()) Die("echo size differs");
  });
  char what[64];
  std::snprintf(what, sizeof what, "POST of %g MiB echoed, keep-alive", body_mib);
  std::printf("%-44s %10.1f requests/s, %.0f MiB/s each way\n", what, posts, posts * body_mib);
  const auto s = server->stats();
  if (s.responses_by_class[2] != s.responses) Die("a response was not 2xx");
  return 0;
}

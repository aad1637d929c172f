// Helpers shared by the http unit tests: a raw blocking TCP client over POSIX sockets
// that sends arbitrary bytes and reads responses byte-exactly, every wait bounded by a
// hang guard (never used to synchronise), and a wait for a condition.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

namespace ps::httptest {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Guards a hung test only; no assertion depends on it being this long.
inline constexpr auto kHangGuard = 20s;

// Waits until `cond` holds (true) or the hang guard passes (false).
inline bool WaitUntil(const std::function<bool()>& cond) {
  const auto deadline = Clock::now() + kHangGuard;
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::yield();
  }
  return cond();
}

// A connect() to 127.0.0.1:port: 0, or the errno it failed with.
inline int TryConnect(uint16_t port, int* fd_out = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int err = rc == 0 ? 0 : errno;
  if (rc == 0 && fd_out != nullptr) {
    *fd_out = fd;
  } else {
    ::close(fd);
  }
  return err;
}

struct RawResponse {
  int status = 0;
  std::string head;  // status line and fields, up to the blank line
  std::string body;
  bool complete = false;  // a whole response arrived before EOF / the guard
  bool HasField(const std::string& line) const {
    return head.find("\r\n" + line + "\r\n") != std::string::npos;
  }
};

struct RawClient {
  int fd = -1;
  std::string pending;  // bytes read past the last response

  explicit RawClient(uint16_t port) { REQUIRE(TryConnect(port, &fd) == 0); }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // false when the peer has closed (EPIPE/ECONNRESET).
  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads more into `pending`: false on EOF, an error or the guard.
  bool ReadMore(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    pending.append(buf, static_cast<size_t>(n));
    return true;
  }

  // The next response (a "100 Continue" is one: status 100, no body). Reads a body of
  // Content-Length bytes unless `head_only` (a HEAD request's answer).
  RawResponse ReadResponse(bool head_only = false) {
    const auto deadline = Clock::now() + kHangGuard;
    RawResponse r;
    size_t end = 0;
    while ((end = pending.find("\r\n\r\n")) == std::string::npos) {
      if (!ReadMore(deadline)) return r;
    }
    r.head = pending.substr(0, end + 2);
    if (r.head.rfind("HTTP/1.", 0) != 0 || r.head.size() < 12) return r;
    r.status = std::atoi(r.head.c_str() + 9);
    size_t length = 0;
    const std::string lower = Lower(r.head);
    const size_t cl = lower.find("\r\ncontent-length: ");
    if (cl != std::string::npos && !head_only && r.status >= 200)
      length = std::strtoull(r.head.c_str() + cl + 18, nullptr, 10);
    while (pending.size() < end + 4 + length) {
      if (!ReadMore(deadline)) return r;
    }
    r.body = pending.substr(end + 4, length);
    pending.erase(0, end + 4 + length);
    r.complete = true;
    return r;
  }

  // True when the peer closes (EOF or reset) before the guard, with nothing more than
  // what is already pending (or anything, when `allow_data`).
  bool WaitEof(bool allow_data = false) {
    const auto deadline = Clock::now() + kHangGuard;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n < 0) return false;
      if (!allow_data) return false;
    }
  }

  static std::string Lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
};

// "GET /path HTTP/1.1" with Host and `extra` header lines ("Name: value\r\n" each).
inline std::string Get(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n";
}

inline std::string Post(const std::string& target, const std::string& body,
                        const std::string& extra = "") {
  return "POST " + target +
         " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra + "\r\n" + body;
}

}  // namespace ps::httptest

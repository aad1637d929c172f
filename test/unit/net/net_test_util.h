// Helpers shared by the net unit tests: identities, client options, and a blocking raw
// TCP client that can write arbitrary bytes (before or after a valid handshake).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "libps/net/frame.h"
#include "libps/net/transport.h"
#include "libps/proto/codec.h"

namespace ps::nettest {

using namespace std::chrono_literals;

inline constexpr uint64_t kCluster = 0xC0FFEE;

inline net::Identity Id(proto::Role role, int index, uint64_t cluster = kCluster,
                        std::optional<std::string> secret = std::nullopt) {
  return net::Identity{role, index, cluster, std::move(secret)};
}

inline net::ClientOptions ClientOpts(uint16_t port, net::Identity id) {
  net::ClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.peer_name = "ps:0";
  o.identity = std::move(id);
  o.connect_deadline = 5s;
  return o;
}

inline net::Buffer Floats(std::vector<float> v) {
  net::Buffer b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A blocking raw TCP client that can write arbitrary bytes after a valid handshake.
struct RawClient {
  int fd = -1;
  // `rcvbuf` > 0: a receive buffer that small (set before connecting), for peers that
  // must look like slow readers.
  // Wraps a connection accepted by a RawListener (a raw server side).
  struct Accepted {
    int fd;
  };
  explicit RawClient(Accepted a) : fd(a.fd) {
    timeval tv{5, 0};  // guard against a hung test only; not used to synchronise
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  explicit RawClient(uint16_t port, int rcvbuf = 0) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{5, 0};  // guard against a hung test only; not used to synchronise
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~RawClient() { ::close(fd); }
  void Write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
      if (k <= 0) return;  // the server may close on us mid-abuse
      c += k;
      n -= static_cast<size_t>(k);
    }
  }
  void WriteFrame(const std::vector<uint8_t>& env, uint64_t payload_bytes = 0) {
    auto h = net::EncodeHeader({static_cast<uint32_t>(env.size()), payload_bytes});
    Write(h.data(), h.size());
    Write(env.data(), env.size());
  }
  // Reads one frame; nullopt when the server closed the connection.
  std::optional<proto::Envelope> ReadFrame() {
    std::array<uint8_t, net::kFrameHeaderBytes> h;
    if (!ReadAll(h.data(), h.size())) return std::nullopt;
    auto hdr = net::DecodeHeader(h, net::Limits{});
    REQUIRE(hdr.ok());
    std::vector<uint8_t> env(hdr->envelope_bytes);
    REQUIRE(ReadAll(env.data(), env.size()));
    std::vector<uint8_t> payload(hdr->payload_bytes);
    REQUIRE(ReadAll(payload.data(), payload.size()));
    auto e = proto::Decode(env);
    REQUIRE(e.ok());
    return *e;
  }
  // Reads and drops until the server closes the connection: true on its close or reset,
  // false when the 5 s guard runs out first (the server kept the connection open).
  bool WaitClosed() {
    char scratch[4096];
    for (;;) {
      ssize_t k = ::recv(fd, scratch, sizeof scratch, 0);
      if (k == 0) return true;
      if (k < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
  }
  bool ReadAll(uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t k = ::recv(fd, p, n, 0);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  void Handshake(uint64_t cluster = kCluster) {
    proto::Hello hello{proto::kProtocolVersion, proto::Role::kWorker, 0, cluster,
                       std::vector<uint8_t>(16, 7)};
    WriteFrame(proto::Encode({1, false, 0, hello}));
    auto r = ReadFrame();
    REQUIRE(r);
    REQUIRE(std::holds_alternative<proto::HelloReply>(r->body));
    WriteFrame(proto::Encode({2, false, 0, proto::HelloProof{}}));
    auto ack = ReadFrame();
    REQUIRE(ack);
    REQUIRE(std::holds_alternative<proto::Ack>(ack->body));
  }
};

// A blocking listening socket on 127.0.0.1 with a kernel-chosen port, for a raw server
// side that a net::Client connects to.
struct RawListener {
  int fd = -1;
  uint16_t port = 0;
  RawListener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  ~RawListener() { ::close(fd); }
  RawClient::Accepted Accept() { return {::accept(fd, nullptr, nullptr)}; }
};

inline bool IsError(const std::optional<proto::Envelope>& e) {
  return e && std::holds_alternative<proto::Error>(e->body);
}

// One echo call (a Pull whose payload comes back) that must succeed.
inline void CheckEcho(net::Client& c) {
  auto r = c.CallSync(proto::Pull{}, net::OutPayload::Own(Floats({1.5f, -2.0f, 3.25f})));
  REQUIRE(r.ok());
  auto f = r->payload.floats();
  REQUIRE(f.size() == 3);
  CHECK(f[0] == 1.5f);
  CHECK(f[2] == 3.25f);
}

}  // namespace ps::nettest

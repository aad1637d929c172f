// Push/pull throughput of one ps and one worker over 127.0.0.1, against raw TCP
// between the same two processes. Not a test: run by scripts/bench-pushpull.sh.
//
//   bench_pushpull [--sizes 4k,1m,16m,64m] [--seconds 1] [--rounds 5] [--optimizer JSON]
//                  [--tls-dir DIR] [--no-caller-reads]
//                  [--early-apply-min-kib KIB]
//   bench_pushpull --serve TLS_DIR|"" EARLY_APPLY_MIN_BYTES   (internal: the ps side, spawned by the above)
//
// The parent spawns a second copy of itself with --serve: a net::Server + ps::server::Service
// over a ps::server::Store (as pstrain-ps runs them) and a plain blocking-socket server. The
// parent is the worker: a net::Client pushing dense float32 gradients (the ps applies
// SGD to them) and pulling the tensor back straight into its own buffer, one request at
// a time. The raw rows are the same transfers over a blocking socket with no framing,
// no allocation and no apply: push = send N bytes, receive a 1-byte ack; pull = send a
// 16-byte request, receive N bytes. GB/s is tensor payload bytes per second (1e9).
//
// Each (size, measurement) runs for --seconds (at least 3 transfers) and is repeated
// --rounds times, each rpc slice just before its raw slice, so that the load of other
// processes on the machine hits both alike. Reported: the median over rounds of each
// column's GB/s and of each round's rpc/raw ratio. Slices are 1 s by default: on this
// project's VM a loopback round trip takes ~15 µs when both threads share a core and ~55-60
// µs across cores, and in 0.1 s slices the raw pair often ran on one core, so its 4 KiB
// figure moved between 30 and 60 µs from run to run; in 1 s slices it measured 55-59 µs,
// the cross-core figure (two processes on two hosts never share a core; see
// docs/design/performance.md). A second table splits the time per transfer (from the
// median GB/s): the ps handler's mean time (apply or copy, measured in the ps process) and
// the rest (transport, both sides, and the wire). Under the first table, each size that has a
// target (docs/design/performance.md, "Targets") is checked against it.
//
// --tls-dir DIR (ca.pem, ps.pem/.key, worker.pem/.key as scripts/make-certs.sh makes them):
// the ps also listens with mutual TLS, and each round adds a push and a pull over a TLS
// connection; a third table gives their GB/s and the median per-round ratio to plain TCP.
//
// --no-caller-reads: the client's replies are read by its I/O thread, as before
// ClientOptions::caller_reads (a before/after comparison in one build).
// --early-apply-min-kib KIB: as pstrain-ps's flag (default 1024; 0: pushes are applied
// once their payload is in, as before early apply).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "libps/model/blas.h"
#include "libps/model/initializer.h"
#include "libps/net/tls.h"
#include "libps/net/transport.h"
#include "libps/server/service.h"
#include "libps/server/store.h"
#include "libps/server/wire_specs.h"
#include "test/bench/bench_util.h"

namespace {

using ps::bench::Check;
using ps::bench::Clock;
using ps::bench::Die;
using ps::bench::FlagValue;
using ps::bench::Must;
using ps::bench::Seconds;

constexpr uint64_t kClusterId = 0x62656e6368;  // "bench"
constexpr uint64_t kOpPush = 1, kOpPull = 2;

// ---------------------------------------------------------------- raw sockets

void WriteFull(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Die(std::string("raw send: ") + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// False on a clean EOF before the first byte.
bool ReadFull(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && got == 0) return false;
    if (r <= 0) Die(std::string("raw recv: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return true;
}

// header + payload in one gather write, as the transport writes a frame.
void WriteV(int fd, const void* head, size_t head_n, const void* body, size_t body_n) {
  iovec iov[2] = {{const_cast<void*>(head), head_n}, {const_cast<void*>(body), body_n}};
  int idx = 0;
  while (idx < 2) {
    ssize_t w = ::writev(fd, iov + idx, 2 - idx);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Die(std::string("raw writev: ") + std::strerror(errno));
    size_t left = static_cast<size_t>(w);
    while (idx < 2 && left >= iov[idx].iov_len) left -= iov[idx++].iov_len;
    if (idx < 2) {
      iov[idx].iov_base = static_cast<char*>(iov[idx].iov_base) + left;
      iov[idx].iov_len -= left;
    }
  }
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// The raw server: one connection at a time; requests are {op, bytes}.
void RawServe(int listen_fd) {
  std::vector<char> buf;
  for (;;) {
    int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) return;
    NoDelay(fd);
    uint64_t req[2];
    while (ReadFull(fd, req, sizeof req)) {
      if (buf.size() < req[1]) buf.resize(req[1], 1);  // touched once, reused after
      if (req[0] == kOpPush) {
        ReadFull(fd, buf.data(), req[1]);
        char ack = 1;
        WriteFull(fd, &ack, 1);
      } else {
        WriteFull(fd, buf.data(), req[1]);
      }
    }
    ::close(fd);
  }
}

int RawListen(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd, 4) != 0) {
    Die(std::string("raw listen: ") + std::strerror(errno));
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int RawConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    Die(std::string("raw connect: ") + std::strerror(errno));
  }
  NoDelay(fd);
  return fd;
}

// ---------------------------------------------------------------- the ps side

std::shared_ptr<ps::net::TlsContext> LoadTls(const std::string& dir, const std::string& name) {
  if (dir.empty()) return nullptr;
  return Must(ps::net::TlsContext::Load(dir + "/" + name + ".pem", dir + "/" + name + ".key",
                                        dir + "/ca.pem"),
              "TLS certificates in " + dir);
}

int Serve(const std::string& tls_dir, uint64_t early_apply_min_bytes) {
  ps::model::SetBlasThreads(1);
  ps::server::Store store;
  ps::server::Service service(&store);
  ps::net::Runtime runtime(2);  // as RunPsTask
  ps::net::ServerOptions options;
  options.identity = {ps::proto::Role::kPs, 0, kClusterId, std::nullopt};
  service.Attach(options, early_apply_min_bytes);  // as RunPsTask
  // Time inside the ps handler (apply / copy, buffer recycling, queueing the reply, or for
  // a small request handled on the I/O thread writing it: that send wakes the worker) per
  // (op, tensor bytes); the tensor's size is in its variable name "t<bytes>".
  std::mutex stats_mu;
  std::map<std::pair<char, uint64_t>, std::pair<int64_t, double>> stats;  // -> (count, seconds)
  auto handler = [&](ps::net::Request req, ps::net::Responder resp) {
    char op = 0;
    uint64_t bytes = 0;
    const std::vector<ps::proto::Slice>* items = nullptr;
    if (auto* m = std::get_if<ps::proto::Push>(&req.envelope.body)) op = 'u', items = &m->items;
    if (auto* m = std::get_if<ps::proto::Pull>(&req.envelope.body)) op = 'l', items = &m->items;
    if (items != nullptr && items->size() == 1)
      bytes = std::strtoull(items->front().var.c_str() + 1, nullptr, 10);
    auto t0 = Clock::now();
    service.Handle(std::move(req), std::move(resp));
    double sec = Seconds(t0, Clock::now());
    if (op != 0) {
      std::lock_guard lock(stats_mu);
      auto& st = stats[{op, bytes}];
      st.first += 1;
      st.second += sec;
    }
  };
  auto server = ps::net::Server::Start(runtime, options, handler);
  if (!server.ok()) Die(server.status().ToString());
  std::unique_ptr<ps::net::Server> tls_server;  // the same service over mutual TLS
  if (!tls_dir.empty()) {
    options.tls = LoadTls(tls_dir, "ps");
    tls_server = Must(ps::net::Server::Start(runtime, options, handler), "TLS server");
  }
  uint16_t raw_port = 0;
  int raw_fd = RawListen(&raw_port);
  std::thread raw([raw_fd] { RawServe(raw_fd); });
  std::printf("ports %u %u %u\n", static_cast<unsigned>((*server)->port()),
              static_cast<unsigned>(raw_port),
              tls_server ? static_cast<unsigned>(tls_server->port()) : 0u);
  std::fflush(stdout);
  char c;
  while (::read(0, &c, 1) > 0) {}  // until the parent closes our stdin
  if (tls_server) tls_server->Close();
  (*server)->Close();
  {
    std::lock_guard lock(stats_mu);
    for (const auto& [key, st] : stats) {
      std::printf("handler %c %llu %lld %.9f\n", key.first,
                  static_cast<unsigned long long>(key.second), static_cast<long long>(st.first),
                  st.second);
    }
    std::printf("end\n");
    std::fflush(stdout);
  }
  ::shutdown(raw_fd, SHUT_RDWR);
  ::close(raw_fd);
  raw.join();
  return 0;
}

// ---------------------------------------------------------------- the worker side

struct Child {
  pid_t pid = -1;
  int to_child = -1;    // its stdin
  int from_child = -1;  // its stdout
  uint16_t ps_port = 0, raw_port = 0, tls_port = 0;
};

Child Spawn(const std::string& tls_dir, uint64_t early_apply_min_bytes) {
  int in[2], out[2];
  if (::pipe(in) != 0 || ::pipe(out) != 0) Die("pipe failed");
  pid_t pid = ::fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::close(in[0]);
    ::close(in[1]);
    ::close(out[0]);
    ::close(out[1]);
    char self[] = "/proc/self/exe";
    char serve[] = "--serve";
    std::string dir = tls_dir;
    std::string early = std::to_string(early_apply_min_bytes);
    char* argv[] = {self, serve, dir.data(), early.data(), nullptr};
    ::execv(self, argv);
    std::_Exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  Child c;
  c.pid = pid;
  c.to_child = in[1];
  std::string line;
  char ch;
  while (::read(out[0], &ch, 1) == 1 && ch != '\n') line += ch;
  c.from_child = out[0];
  unsigned a = 0, b = 0, t = 0;
  if (std::sscanf(line.c_str(), "ports %u %u %u", &a, &b, &t) != 3)
    Die("the --serve child did not start: " + line);
  c.ps_port = static_cast<uint16_t>(a);
  c.raw_port = static_cast<uint16_t>(b);
  c.tls_port = static_cast<uint16_t>(t);
  return c;
}

uint64_t ParseSize(std::string s) {
  if (s.empty()) Die("empty size");
  uint64_t mult = 1;
  char last = static_cast<char>(std::tolower(static_cast<unsigned char>(s.back())));
  if (last == 'k') mult = 1024;
  if (last == 'm') mult = 1024 * 1024;
  if (last == 'g') mult = 1024ull * 1024 * 1024;
  if (mult != 1) s.pop_back();
  uint64_t n = std::strtoull(s.c_str(), nullptr, 10) * mult;
  if (n == 0 || n % 4096 != 0) Die("sizes must be positive multiples of 4 KiB: " + s);
  return n;
}

std::string VarName(uint64_t bytes) {
  std::string name = "t";  // (not "t" + ...: GCC 12 warns falsely under -Wrestrict)
  name += std::to_string(bytes);
  return name;
}

std::string SizeName(uint64_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

using ps::bench::Median;

// Runs `op` (moving `bytes`) for about `seconds` (at least 3 times, after 1 warm-up).
double Measure(uint64_t bytes, double seconds, const std::function<void()>& op) {
  op();
  int n = 0;
  auto t0 = Clock::now();
  double elapsed = 0;
  while (n < 3 || elapsed < seconds) {
    op();
    ++n;
    elapsed = Seconds(t0, Clock::now());
  }
  return static_cast<double>(bytes) * n / elapsed / 1e9;
}

struct Options {
  std::vector<uint64_t> sizes;
  double seconds = 1;
  int rounds = 5;
  std::string optimizer = R"({"type": "sgd", "learning_rate": 0.001})";
  std::string tls_dir;  // empty: no TLS rows
  bool caller_reads = true;
  uint64_t early_apply_min_bytes = ps::server::Service::kDefaultEarlyApplyBytes;
};

Options Parse(int argc, char** argv) {
  Options o;
  std::string sizes = "4k,1m,16m,64m";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return FlagValue(argc, argv, &i); };
    if (a == "--sizes")
      sizes = next();
    else if (a == "--seconds")
      o.seconds = std::atof(next().c_str());
    else if (a == "--rounds")
      o.rounds = std::atoi(next().c_str());
    else if (a == "--optimizer")
      o.optimizer = next();
    else if (a == "--tls-dir")
      o.tls_dir = next();
    else if (a == "--no-caller-reads")
      o.caller_reads = false;
    else if (a == "--early-apply-min-kib")
      o.early_apply_min_bytes = std::strtoull(next().c_str(), nullptr, 10) << 10;
    else
      Die("unknown flag " + a +
          " (flags: --sizes --seconds --rounds --optimizer --tls-dir --no-caller-reads "
          "--early-apply-min-kib)");
  }
  size_t pos = 0;
  while (pos <= sizes.size()) {
    size_t comma = sizes.find(',', pos);
    if (comma == std::string::npos) comma = sizes.size();
    o.sizes.push_back(ParseSize(sizes.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  if (o.seconds <= 0 || o.rounds < 1) Die("bad flag value");
  return o;
}

int Run(const Options& opt) {
  ps::model::SetBlasThreads(1);
  Child child = Spawn(opt.tls_dir, opt.early_apply_min_bytes);

  ps::net::Runtime runtime(2);  // as a worker's
  ps::net::ClientOptions co;
  co.host = "127.0.0.1";
  co.port = child.ps_port;
  co.peer_name = "ps:0";
  co.identity = {ps::proto::Role::kWorker, 0, kClusterId, std::nullopt};
  co.caller_reads = opt.caller_reads;
  auto client_r = ps::net::Client::Connect(runtime, co);
  if (!client_r.ok()) Die(client_r.status().ToString());
  auto client = *client_r;
  std::shared_ptr<ps::net::Client> tls_client;
  if (!opt.tls_dir.empty()) {
    co.port = child.tls_port;
    co.tls = LoadTls(opt.tls_dir, "worker");
    tls_client = Must(ps::net::Client::Connect(runtime, co), "TLS connect");
  }
  int raw = RawConnect(child.raw_port);

  // One variable per size: [bytes / 4096, 1024] float32, zeros, SGD on the ps.
  ps::proto::CreateShards create;
  const ps::Json optimizer_json = Must(ps::ParseJson(opt.optimizer, "--optimizer"), "--optimizer");
  create.optimizer = ps::server::OptimizerToWire(
      Must(ps::server::ParseOptimizer(optimizer_json, "--optimizer"), "--optimizer"));
  for (uint64_t bytes : opt.sizes) {
    const auto rows = static_cast<int64_t>(bytes / 4096);
    create.shards.push_back(ps::server::ShardDefToWire({.layout = {.var = VarName(bytes),
                                                                   .shard = 0,
                                                                   .num_shards = 1,
                                                                   .row_begin = 0,
                                                                   .rows = rows,
                                                                   .cols = 1024,
                                                                   .full_shape = {rows, 1024},
                                                                   .lazy = false},
                                                        .init = {},
                                                        .seed = 0}));
  }
  Check(client->CallSync(create).status(), "CreateShards");

  uint64_t max_bytes = *std::max_element(opt.sizes.begin(), opt.sizes.end());
  std::vector<float> grad(max_bytes / 4, 1.0f), pulled(max_bytes / 4, 0.0f);

  std::printf("load average at start: %s (%u cores)\n", ps::bench::LoadAverage().c_str(),
              std::thread::hardware_concurrency());
  std::printf(
      "one ps + one worker process over 127.0.0.1, one request at a time; median of %d rounds of %.2f s; "
      "ps optimizer %s\n",
      opt.rounds, opt.seconds, opt.optimizer.c_str());
  std::printf("%-8s %10s %10s %6s   %10s %10s %6s\n", "size", "push GB/s", "raw GB/s", "ratio",
              "pull GB/s", "raw GB/s", "ratio");
  std::map<uint64_t, std::pair<double, double>> ratio_of;  // size -> median push, pull ratio
  int64_t pushes = 0;
  std::map<uint64_t, std::array<double, 4>> best_of;  // size -> median GB/s of the 4 columns
  std::map<uint64_t, std::array<double, 4>> tls_of;   // size -> TLS push, ratio, TLS pull, ratio
  for (uint64_t bytes : opt.sizes) {
    const uint64_t floats = bytes / 4;
    ps::proto::Slice slice;
    slice.var = VarName(bytes);
    std::vector<std::span<std::byte>> into{std::as_writable_bytes(std::span(pulled).first(floats))};

    auto push_on = [&](ps::net::Client& c) {
      ps::proto::Push msg;
      msg.items = {slice};
      msg.global_step = pushes;
      msg.step_id = pushes;  // tracked, as a worker's (at most once)
      ps::net::OutPayload payload;
      payload.Add(std::span<const float>(grad).first(floats));
      Check(c.CallSync(std::move(msg), std::move(payload)).status(), "Push");
      ++pushes;
    };
    auto pull_on = [&](ps::net::Client& c) {
      ps::proto::Pull msg;
      msg.items = {slice};
      auto r = c.CallSync(std::move(msg), {}, into);
      Check(r.status(), "Pull");
      if (!r->payload_in_place) Die("pull reply was not received in place");
    };
    auto push = [&] { push_on(*client); };
    auto pull = [&] { pull_on(*client); };
    auto raw_push = [&] {
      uint64_t req[2] = {kOpPush, bytes};
      WriteV(raw, req, sizeof req, grad.data(), bytes);
      char ack;
      if (!ReadFull(raw, &ack, 1)) Die("raw server closed");
    };
    auto raw_pull = [&] {
      uint64_t req[2] = {kOpPull, bytes};
      WriteFull(raw, req, sizeof req);
      if (!ReadFull(raw, pulled.data(), bytes)) Die("raw server closed");
    };

    std::array<std::vector<double>, 4> runs,
        tls_runs;  // tls_runs: push, push ratio, pull, pull ratio
    std::vector<double> push_ratios, pull_ratios;
    for (int r = 0; r < opt.rounds; ++r) {
      runs[0].push_back(Measure(bytes, opt.seconds, push));
      runs[1].push_back(Measure(bytes, opt.seconds, raw_push));
      runs[2].push_back(Measure(bytes, opt.seconds, pull));
      runs[3].push_back(Measure(bytes, opt.seconds, raw_pull));
      push_ratios.push_back(runs[0].back() / runs[1].back());
      pull_ratios.push_back(runs[2].back() / runs[3].back());
      if (tls_client) {
        tls_runs[0].push_back(Measure(bytes, opt.seconds, [&] { push_on(*tls_client); }));
        tls_runs[1].push_back(tls_runs[0].back() / runs[0].back());
        tls_runs[2].push_back(Measure(bytes, opt.seconds, [&] { pull_on(*tls_client); }));
        tls_runs[3].push_back(tls_runs[2].back() / runs[2].back());
      }
    }
    if (tls_client) {
      tls_of[bytes] = {Median(tls_runs[0]), Median(tls_runs[1]), Median(tls_runs[2]),
                       Median(tls_runs[3])};
    }
    double best[4];
    for (int c = 0; c < 4; ++c) best[c] = Median(runs[static_cast<size_t>(c)]);
    // From zeros with a gradient of 1 everywhere, every value has moved down alike.
    pull();
    if (!(pulled[0] < 0.0f) || pulled[0] != pulled[floats - 1])
      Die("pulled values are not the pushed updates");
    best_of[bytes] = {best[0], best[1], best[2], best[3]};
    double push_ratio = Median(push_ratios), pull_ratio = Median(pull_ratios);
    ratio_of[bytes] = {push_ratio, pull_ratio};
    std::printf("%-8s %10.3f %10.3f %6.2f   %10.3f %10.3f %6.2f\n", SizeName(bytes).c_str(),
                best[0], best[1], push_ratio, best[2], best[3], pull_ratio);
    std::fflush(stdout);
  }
  std::printf("load average at end: %s\n", ps::bench::LoadAverage().c_str());
  // The targets: a 4 KiB call within 1.3 x the raw round trip (a ratio of at least
  // 1 / 1.3), 0.9 x raw at 1 and 16 MiB, 0.95 x at 64 MiB; other sizes have none.
  for (const auto& [bytes, ratios] : ratio_of) {
    double target = 0;
    if (bytes == 4096) target = 1 / 1.3;
    if (bytes == (1u << 20) || bytes == (16u << 20)) target = 0.9;
    if (bytes == (64u << 20)) target = 0.95;
    if (target == 0) continue;
    auto verdict = [&](double r) { return r >= target ? "met" : "NOT met"; };
    std::printf("target %s: ratio >= %.2f: push %.2f %s, pull %.2f %s\n", SizeName(bytes).c_str(),
                target, ratios.first, verdict(ratios.first), ratios.second, verdict(ratios.second));
  }

  ::close(raw);
  if (tls_client) tls_client->Close();
  client->Close();
  ::close(child.to_child);
  std::map<std::pair<char, uint64_t>, double> handler_us;  // mean per call
  {
    FILE* in = ::fdopen(child.from_child, "r");
    char line[256];
    while (in != nullptr && std::fgets(line, sizeof line, in) != nullptr) {
      char op;
      unsigned long long bytes;
      long long count;
      double sec;
      if (std::sscanf(line, "handler %c %llu %lld %lf", &op, &bytes, &count, &sec) == 4 &&
          count > 0) {
        handler_us[{op, bytes}] = 1e6 * sec / static_cast<double>(count);
      }
    }
    if (in != nullptr) std::fclose(in);
  }
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("the --serve child failed");

  std::printf("\nper transfer, us (median rounds): rpc = ps handler (mean) + transport and wire\n");
  std::printf("%-8s %10s %10s %10s   %10s %10s %10s\n", "size", "push rpc", "handler", "raw",
              "pull rpc", "handler", "raw");
  for (const auto& [bytes, b] : best_of) {
    auto us = [&](double gbps) { return static_cast<double>(bytes) / gbps / 1e3; };
    std::printf("%-8s %10.0f %10.0f %10.0f   %10.0f %10.0f %10.0f\n", SizeName(bytes).c_str(),
                us(b[0]), handler_us[{'u', bytes}], us(b[1]), us(b[2]), handler_us[{'l', bytes}],
                us(b[3]));
  }
  std::printf("(plain TCP calls that read their reply on the calling thread: %llu of them)\n",
              static_cast<unsigned long long>(client->caller_reads_for_testing()));
  if (!tls_of.empty()) {
    std::printf(
        "\nmutual TLS (%s), same ps and rounds; ratio = TLS / plain TCP rpc (median of rounds)\n",
        "TLS 1.3, ECDSA P-256 certificates, OpenSSL's default cipher suite");
    std::printf("%-8s %10s %6s   %10s %6s\n", "size", "push GB/s", "ratio", "pull GB/s", "ratio");
    for (const auto& [bytes, t] : tls_of) {
      std::printf("%-8s %10.3f %6.2f   %10.3f %6.2f\n", SizeName(bytes).c_str(), t[0], t[1], t[2],
                  t[3]);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--serve")
    return Serve(argv[2], std::strtoull(argv[3], nullptr, 10));
  return Run(Parse(argc, argv));
}

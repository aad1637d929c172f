// Sparse embedding throughput of one ps core: rows pulled and pushed per second for a
// big embedding table, dense and lazy. Not a test: run by scripts/bench-sparse.sh.
//
//   bench_sparse_ps [--rows 10000000] [--dim 16] [--batch 512] [--ids 26] [--zipf 1.05]
//                   [--clients 2] [--seconds 2] [--variants dense,lazy] [--prefill 1] [--cpu-time 0]
//                   [--prefill-batch 65536] [--pool-only 0]
//                   (variants: dense, lazy, lazy-evict: lazy with the 4-byte last-push stamp;
//                   index-bound, hash-bound, sweep: see below)
//
// Workload: --batch examples x --ids ids each, drawn Zipf(--zipf) over the table's rows
// (continuous inverse-CDF approximation, rank k -> row (k * 1000003) mod rows so hot rows
// are spread over the table as hashed ids are), de-duplicated and sorted per batch as a
// worker's RowsNeeded does. 256 batches are pre-drawn (seeded) and cycled.
//
// Per variant (a dense shard, or a lazy one that creates rows on first push), the ps
// optimizer is Adagrad and the table one shard of rows x dim float32:
//   in-process  the same Store::PullRows / PushRows calls in this thread, no network:
//               the baseline.
//   network     a ps::server::Service behind a net::Server with handler_threads = 1 (one ps
//               core; one I/O thread) in this process; --clients client threads, each
//               with its own net::Client over 127.0.0.1, one request at a time: a Pull
//               of the batch's unique rows, or a Push of their gradients.
// Pulls and pushes are measured separately for --seconds each. Reported: unique rows per
// second, payload MB/s (floats; the pull/push requests also carry 8 bytes per row id,
// not counted), and network / in-process. For the lazy variant, rows created and bytes
// per created row (Store::Memory) after the run. With --prefill 1 (default) the lazy
// shard first gets every row created (zero gradients, which leave Adagrad's values and
// accumulators unchanged), so both variants hold all rows: the state of a long-trained
// table, in pushes of --prefill-batch new rows (the "created ... in S s" line times them:
// one push of 1,000,000 rows into the fresh table shows what a big first push costs).
// --prefill 0 measures a fresh lazy table (creation on the measured pushes).
// --cpu-time 1 times the in-process runs in the thread's CPU time rather than wall-clock
// time, so that other jobs on a shared machine do not stretch them; the network rows stay
// wall-clock (several threads) and are then not compared with them.
// The ps answers pulls and pushes of up to 1 MiB on its I/O thread, as pstrain-ps does
// (server::Service::Inline); --pool-only 1 hands every request to the handler thread.
//
// index-bound and hash-bound (in-process only): upper bounds for a lazy table that keeps
// an index apart from its records, on this machine and workload. Records are values then
// Adagrad's accumulator (128 bytes for 16 floats) in row order. index-bound looks each row
// up in a direct array of 4-byte record numbers (no hashing, no probing, no key compare, no
// locks: what no table keyed by 64-bit ids can do), so a sorted batch visits both arrays
// in increasing address order, as a dense shard's rows are visited. hash-bound reads one
// 16-byte entry at the row's hashed slot of a table as big as a lazy shard's (load <= 0.7):
// a perfect hash table with this project's entry size, still without probing, key
// compares or locks. Both keep index and record misses in flight together (a two-stage
// prefetch pipeline); pulls copy the values, pushes apply Adagrad with the ApplyRows the
// Store uses. Printed against the dense variant's in-process rates of the same run when it
// ran first (e.g. --variants dense,index-bound,hash-bound,lazy).
//
// sweep (in-process only): what an eviction sweep costs the push that finds it due. A lazy
// shard with every row created at step 0 and ttl_steps 3200, so a sweep of every row is due
// every 400 steps and none is old enough to go, gets 3200 pushes of the batches, at steps
// 1 ... 3200; each push's wall time is recorded. Twice: sweeps on the pushing thread (an
// in-process Store's default) and handed to a sweeper thread (Store::SetSweepRunner, as
// pstrain-ps does). Printed: the median, 99th percentile and largest push time, and the
// pushes' total.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "libps/model/blas.h"
#include "libps/net/transport.h"
#include "libps/server/lazy_rows.h"
#include "libps/server/optimizer.h"
#include "libps/server/service.h"
#include "libps/server/store.h"
#include "test/bench/bench_util.h"

namespace {

using ps::bench::Check;
using ps::bench::Clock;
using ps::bench::Die;
using ps::bench::FlagValue;
using ps::bench::Must;
using ps::bench::Seconds;
constexpr uint64_t kClusterId = 0x737061727365;  // "sparse"
constexpr int kBatches = 256;

struct Options {
  int64_t rows = 10000000;
  int64_t dim = 16;
  int64_t batch = 512;
  int64_t ids = 26;
  double zipf = 1.05;
  int clients = 2;
  double seconds = 2;
  std::vector<std::string> variants = {"dense", "lazy"};
  bool prefill = true;
  int64_t prefill_batch = 65536;
  bool cpu_time = false;
  bool pool_only = false;
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v = FlagValue(argc, argv, &i);
    if (a == "--rows")
      o.rows = std::atoll(v.c_str());
    else if (a == "--dim")
      o.dim = std::atoll(v.c_str());
    else if (a == "--batch")
      o.batch = std::atoll(v.c_str());
    else if (a == "--ids")
      o.ids = std::atoll(v.c_str());
    else if (a == "--zipf")
      o.zipf = std::atof(v.c_str());
    else if (a == "--clients")
      o.clients = std::atoi(v.c_str());
    else if (a == "--seconds")
      o.seconds = std::atof(v.c_str());
    else if (a == "--prefill")
      o.prefill = v != "0";
    else if (a == "--prefill-batch")
      o.prefill_batch = std::atoll(v.c_str());
    else if (a == "--cpu-time")
      o.cpu_time = v != "0";
    else if (a == "--pool-only")
      o.pool_only = v != "0";
    else if (a == "--variants") {
      o.variants.clear();
      size_t p = 0;
      while (p <= v.size()) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        o.variants.push_back(v.substr(p, q - p));
        p = q + 1;
      }
    } else {
      Die("unknown flag " + a);
    }
  }
  if (o.rows < 1 || o.rows > (int64_t{1} << 40) || o.dim < 1 || o.batch < 1 || o.ids < 1 ||
      o.zipf <= 0 || o.clients < 1 || o.seconds <= 0 || o.prefill_batch < 1)
    Die("bad flag value");
  for (const auto& v : o.variants)
    if (v != "dense" && v != "lazy" && v != "lazy-evict" && v != "index-bound" &&
        v != "hash-bound" && v != "sweep")
      Die("--variants: dense, lazy, lazy-evict, index-bound, hash-bound, sweep, got " + v);
  return o;
}

// Sorted unique rows of each pre-drawn batch.
std::vector<std::vector<int64_t>> DrawBatches(const Options& o, int count, double* mean_unique) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const double n = static_cast<double>(o.rows);
  const double s = o.zipf;
  auto rank = [&]() -> int64_t {  // in [0, rows)
    const double u = u01(rng);
    double x = std::abs(s - 1.0) < 1e-9
                   ? std::pow(n, u)
                   : std::pow((std::pow(n, 1.0 - s) - 1.0) * u + 1.0, 1.0 / (1.0 - s));
    auto k = static_cast<int64_t>(x) - 1;
    return std::clamp<int64_t>(k, 0, o.rows - 1);
  };
  std::vector<std::vector<int64_t>> batches(static_cast<size_t>(count));
  double total = 0;
  for (auto& b : batches) {
    for (int64_t i = 0; i < o.batch * o.ids; ++i) {
      const auto k = static_cast<uint64_t>(rank());  // rows <= 2^40: k * 1000003 fits
      b.push_back(static_cast<int64_t>((k * 1000003u) % static_cast<uint64_t>(o.rows)));
    }
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    total += static_cast<double>(b.size());
  }
  *mean_unique = total / count;
  return batches;
}

struct Rate {
  double rows_per_s = 0;
  double mb_per_s = 0;
};

// This thread's CPU time, in seconds.
double ThreadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs fn(i) for `seconds` (at least 3 calls) of wall-clock time, or of this thread's CPU
// time when `cpu`; fn returns the rows it moved.
template <typename F>
Rate Measure(double seconds, int64_t dim, bool cpu, F&& fn) {
  int64_t rows = 0;
  int64_t i = 0;
  auto t0 = Clock::now();
  const double c0 = ThreadSeconds();
  auto elapsed = [&] { return cpu ? ThreadSeconds() - c0 : Seconds(t0, Clock::now()); };
  while (i < 3 || elapsed() < seconds) rows += fn(i++);
  const double el = elapsed();
  return {static_cast<double>(rows) / el, static_cast<double>(rows * dim * 4) / el / 1e6};
}

// base null: no comparison (a wall-clock rate against a CPU-time base).
void Row(const char* what, const Rate& r, const Rate* base) {
  if (base == nullptr) {
    std::printf("  %-22s %12.0f %10.1f %8s\n", what, r.rows_per_s, r.mb_per_s, "-");
    return;
  }
  std::printf("  %-22s %12.0f %10.1f %8.2f\n", what, r.rows_per_s, r.mb_per_s,
              r.rows_per_s / base->rows_per_s);
}

// The dense variant's in-process rates, for index-bound's comparison (zero: not run yet).
Rate g_dense_pull, g_dense_push;

// The benchmark's table: one shard of rows x dim float32.
ps::server::ShardDef TableDef(const Options& o, bool lazy, ps::model::RowPolicy policy = {}) {
  return {.layout = {.var = "emb/embeddings",
                     .shard = 0,
                     .num_shards = 1,
                     .row_begin = 0,
                     .rows = o.rows,
                     .cols = o.dim,
                     .full_shape = {o.rows, o.dim},
                     .lazy = lazy},
          .init = {ps::model::InitKind::kUniform, -0.05, 0.05},
          .seed = 1,
          .row_policy = policy};
}

// Creates every row of a lazy shard: pushes of --prefill-batch rows of zero gradients
// (which leave Adagrad's values and accumulators unchanged) at step 0.
void Prefill(ps::server::Store& store, const ps::server::ShardDef& def, const Options& o) {
  std::vector<int64_t> rows;
  const int64_t step = std::min(o.rows, o.prefill_batch);
  std::vector<float> zeros(static_cast<size_t>(step * o.dim), 0.0f);
  for (int64_t first = 0; first < o.rows; first += step) {
    rows.clear();
    for (int64_t r = first; r < std::min(o.rows, first + step); ++r) rows.push_back(r);
    Check(store.PushRows(def.key(), rows,
                         std::span(zeros).first(rows.size() * static_cast<size_t>(o.dim)), 0),
          "prefill");
  }
}

// variant: "dense", "lazy", or "lazy-evict" (lazy with a ttl too long to evict anything:
// what the last-push stamp of an evicting table costs).
void RunVariant(const Options& o, const std::string& variant,
                const std::vector<std::vector<int64_t>>& batches) {
  const bool lazy = variant != "dense";
  ps::server::Store store;
  ps::server::OptimizerSpec spec =
      ps::server::DefaultOptimizer(ps::server::OptimizerKind::kAdagrad);
  spec.learning_rate = 0.01;
  Check(store.Configure(spec), "Configure");
  ps::model::RowPolicy policy;
  if (variant == "lazy-evict") policy.ttl_steps = int64_t{1} << 31;
  const ps::server::ShardDef def = TableDef(o, lazy, policy);
  auto t0 = Clock::now();
  Check(store.Create(def), "Create");
  if (lazy && o.prefill) Prefill(store, def, o);
  const double create_s = Seconds(t0, Clock::now());
  const ps::server::ShardKey key = def.key();
  const auto dim = static_cast<size_t>(o.dim);
  size_t max_rows = 0;
  for (const auto& b : batches) max_rows = std::max(max_rows, b.size());
  const std::vector<float> grad(max_rows * dim, 0.001f);

  std::printf("\n%s shard: %lld x %lld float32, adagrad (created%s in %.2f s)\n", variant.c_str(),
              static_cast<long long>(o.rows), static_cast<long long>(o.dim),
              lazy && o.prefill ? " and every row pushed once" : "", create_s);
  std::printf("  %-22s %12s %10s %8s\n", "", "rows/s", "MB/s", "vs base");

  // In-process baseline. Pushes first, so the lazy variant's pulls see created rows.
  std::vector<float> out(max_rows * dim);
  int64_t step = 0;
  Rate base_push = Measure(o.seconds, o.dim, o.cpu_time, [&](int64_t i) {
    const auto& rows = batches[static_cast<size_t>(i) % batches.size()];
    Check(store.PushRows(key, rows, std::span(grad).first(rows.size() * dim), step++), "PushRows");
    return static_cast<int64_t>(rows.size());
  });
  Rate base_pull = Measure(o.seconds, o.dim, o.cpu_time, [&](int64_t i) {
    const auto& rows = batches[static_cast<size_t>(i) % batches.size()];
    Check(store.PullRows(key, rows, std::span(out).first(rows.size() * dim)), "PullRows");
    return static_cast<int64_t>(rows.size());
  });
  if (!lazy) g_dense_pull = base_pull, g_dense_push = base_push;

  // The ps: one handler thread, one I/O thread.
  ps::server::Service service(&store);
  ps::net::Runtime server_runtime(1);
  ps::net::ServerOptions so;
  so.identity = {ps::proto::Role::kPs, 0, kClusterId, std::nullopt};
  so.handler_threads = 1;
  if (!o.pool_only) service.Attach(so);  // as RunPsTask
  auto server = ps::net::Server::Start(server_runtime, so,
                                       [&](ps::net::Request req, ps::net::Responder resp) {
                                         service.Handle(std::move(req), std::move(resp));
                                       });
  if (!server.ok()) Die(server.status().ToString());
  ps::net::Runtime client_runtime(1);
  std::vector<std::shared_ptr<ps::net::Client>> clients;
  for (int c = 0; c < o.clients; ++c) {
    ps::net::ClientOptions co;
    co.host = "127.0.0.1";
    co.port = (*server)->port();
    co.peer_name = "ps:0";
    co.identity = {ps::proto::Role::kWorker, c, kClusterId, std::nullopt};
    auto client = ps::net::Client::Connect(client_runtime, co);
    if (!client.ok()) Die(client.status().ToString());
    clients.push_back(*client);
  }
  std::atomic<int64_t> step_id{0};
  auto over_network = [&](bool push) {
    std::atomic<int64_t> rows_moved{0};
    std::vector<std::thread> threads;
    auto t_start = Clock::now();
    for (int c = 0; c < o.clients; ++c) {
      threads.emplace_back([&, c] {
        std::vector<float> into(max_rows * dim);
        int64_t moved = 0;
        int64_t i = c * 17;
        auto t = Clock::now();
        while (Seconds(t, Clock::now()) < o.seconds) {
          const auto& rows = batches[static_cast<size_t>(i++) % batches.size()];
          ps::proto::Slice slice;
          slice.var = def.layout.var;
          slice.all_rows = false;
          slice.rows = rows;
          const size_t n = rows.size() * dim;
          if (push) {
            ps::proto::Push msg;
            msg.items = {std::move(slice)};
            msg.global_step = i;
            msg.step_id = step_id.fetch_add(1);
            ps::net::OutPayload payload;
            payload.parts.push_back(std::as_bytes(std::span(grad).first(n)));
            Check(clients[static_cast<size_t>(c)]
                      ->CallSync(std::move(msg), std::move(payload))
                      .status(),
                  "Push");
          } else {
            ps::proto::Pull msg;
            msg.items = {std::move(slice)};
            std::vector<std::span<std::byte>> dst{std::as_writable_bytes(std::span(into).first(n))};
            auto r = clients[static_cast<size_t>(c)]->CallSync(std::move(msg), {}, dst);
            Check(r.status(), "Pull");
          }
          moved += static_cast<int64_t>(rows.size());
        }
        rows_moved += moved;
      });
    }
    for (auto& th : threads) th.join();
    const double el = Seconds(t_start, Clock::now());
    const auto rows = static_cast<double>(rows_moved.load());
    return Rate{rows / el, rows * static_cast<double>(dim) * 4 / el / 1e6};
  };
  Rate net_push = over_network(true);
  Rate net_pull = over_network(false);
  for (auto& c : clients) c->Close();

  Row(o.cpu_time ? "pull in-process (cpu)" : "pull in-process", base_pull, &base_pull);
  Row("pull network", net_pull, o.cpu_time ? nullptr : &base_pull);
  Row(o.cpu_time ? "push in-process (cpu)" : "push in-process", base_push, &base_push);
  Row("push network", net_push, o.cpu_time ? nullptr : &base_push);
  auto mem = store.Memory(key);
  if (mem.ok()) {
    std::printf(
        "  memory: %lld rows allocated, %.1f MB, %.1f bytes per row (values + accumulator = %lld)\n",
        static_cast<long long>(mem->rows), static_cast<double>(mem->bytes) / 1e6,
        mem->rows > 0 ? static_cast<double>(mem->bytes) / static_cast<double>(mem->rows) : 0.0,
        static_cast<long long>(2 * o.dim * 4));
  }
}

// `bytes` bytes as the Store allocates its row arrays (huge pages from 2 MiB: a hint).
std::unique_ptr<std::byte, decltype(&std::free)> RowMemory(size_t bytes) {
  void* p = ps::server::AllocateAligned(bytes);
  if (p == nullptr) Die("bound: out of memory allocating " + std::to_string(bytes) + " bytes");
  return {static_cast<std::byte*>(p), &std::free};
}

// variant "index-bound" or "hash-bound" (see the top of this file).
void RunBound(const Options& o, const std::string& variant,
              const std::vector<std::vector<int64_t>>& batches) {
  const bool hashed = variant == "hash-bound";
  const auto dim = static_cast<size_t>(o.dim);
  const size_t record = 2 * dim;  // values, then Adagrad's accumulator
  const auto rows = static_cast<size_t>(o.rows);
  if (rows > UINT32_MAX) Die(variant + ": --rows above 2^32");
  // hash-bound: a power of two of 16-byte entries at load <= 0.7, as a lazy shard's
  // stripes hold in all; the record number sits in the entry's first 4 bytes.
  size_t slots = 16;
  while (rows * 10 > slots * 7) slots *= 2;
  const size_t words = hashed ? slots * 4 : rows;  // uint32 words of the index
  auto at = [&](int64_t r) -> size_t {
    return hashed ? (ps::server::HashRow(r) & (slots - 1)) * 4 : static_cast<size_t>(r);
  };
  auto index_mem = RowMemory(words * sizeof(uint32_t));
  auto record_mem = RowMemory(rows * record * sizeof(float));
  auto* index = reinterpret_cast<uint32_t*>(index_mem.get());
  auto* records = reinterpret_cast<float*>(record_mem.get());
  std::fill_n(index, words, 0u);  // hash-bound: slots no row hashed to name record 0
  // Rows whose hashed slots collide share the later one's record: a different random
  // line all the same, which is all the timing needs.
  for (size_t r = 0; r < rows; ++r) {
    index[at(static_cast<int64_t>(r))] = static_cast<uint32_t>(r);
    std::fill_n(records + r * record, dim, 0.01f);
    std::fill_n(records + r * record + dim, dim, 0.1f);
  }
  ps::server::OptimizerSpec spec =
      ps::server::DefaultOptimizer(ps::server::OptimizerKind::kAdagrad);
  spec.learning_rate = 0.01;
  size_t max_rows = 0;
  for (const auto& b : batches) max_rows = std::max(max_rows, b.size());
  const std::vector<float> grad(max_rows * dim, 0.001f);
  std::vector<float> out(max_rows * dim);
  constexpr size_t kAhead = ps::server::kPrefetchRows;  // rows, per pipeline stage, as the Store's
  // Runs fn(j, record of batch row j) for every row of batch i, with the index entry of
  // row j + 2 * kAhead and the record of row j + kAhead prefetched.
  auto each = [&](int64_t i, bool write, auto&& fn) {
    const auto& b = batches[static_cast<size_t>(i) % batches.size()];
    const size_t n = b.size();
    for (size_t j = 0; j < n; ++j) {
      if (j + 2 * kAhead < n) __builtin_prefetch(index + at(b[j + 2 * kAhead]));
      if (j + kAhead < n) {
        const float* r = records + static_cast<size_t>(index[at(b[j + kAhead])]) * record;
        // A pull reads the values, a push values and accumulator.
        ps::server::PrefetchBytes(r, (write ? record : dim) * sizeof(float), write);
      }
      fn(j, records + static_cast<size_t>(index[at(b[j])]) * record);
    }
    return static_cast<int64_t>(n);
  };
  int64_t step = 0;
  const Rate push = Measure(o.seconds, o.dim, o.cpu_time, [&](int64_t i) {
    ++step;
    return each(i, true, [&](size_t j, float* r) {
      ps::server::SlotRows slots_of;
      slots_of.data[0] = r + dim;
      ps::server::ApplyRows(spec, static_cast<float>(spec.learning_rate), step, {r, dim}, slots_of,
                            std::span(grad).subspan(j * dim, dim));
    });
  });
  const Rate pull = Measure(o.seconds, o.dim, o.cpu_time, [&](int64_t i) {
    return each(i, false, [&](size_t j, const float* r) {
      std::memcpy(out.data() + j * dim, r, dim * sizeof(float));
    });
  });
  if (hashed) {
    std::printf(
        "\nhash-bound: %lld rows, 16-byte index entries at hashed slots of %zu (%.0f MB), one slot read "
        "per row, %zu-byte records; no probing, key compare or locks (in-process)\n",
        static_cast<long long>(o.rows), slots, static_cast<double>(slots) * 16 / 1e6,
        record * sizeof(float));
  } else {
    std::printf(
        "\nindex-bound: %lld rows, a direct 4-byte index (%.0f MB) and %zu-byte records in row order; no "
        "hashing or locks (in-process)\n",
        static_cast<long long>(o.rows), static_cast<double>(rows) * 4 / 1e6,
        record * sizeof(float));
  }
  std::printf("  %-22s %12s %10s %8s\n", "", "rows/s", "MB/s", "vs dense");
  const bool dense = g_dense_pull.rows_per_s > 0;
  Row(o.cpu_time ? "pull in-process (cpu)" : "pull in-process", pull,
      dense ? &g_dense_pull : nullptr);
  Row(o.cpu_time ? "push in-process (cpu)" : "push in-process", push,
      dense ? &g_dense_push : nullptr);
}

}  // namespace

void RunSweep(const Options& o, const std::vector<std::vector<int64_t>>& batches) {
  constexpr int64_t kTtl = 3200;  // a sweep every kTtl / 8 = 400 steps
  std::printf(
      "\nsweep: lazy shard %lld x %lld float32, adagrad, ttl_steps %lld: every row created at step 0, "
      "then %lld pushes (a sweep of every row due every %lld; none evicts)\n",
      static_cast<long long>(o.rows), static_cast<long long>(o.dim), static_cast<long long>(kTtl),
      static_cast<long long>(kTtl), static_cast<long long>(kTtl / 8));
  std::printf("  %-22s %10s %10s %10s %12s\n", "sweeps run", "median ms", "p99 ms", "max ms",
              "total s");
  for (const bool handed_over : {false, true}) {
    ps::server::Store store;
    std::mutex mu;
    std::condition_variable cv;
    int handed = 0, swept = 0;            // guarded by mu
    boost::asio::thread_pool sweeper(1);  // after the store and what its work uses: stops first
    auto wait_for_sweeps = [&] {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return swept == handed; });
    };
    if (handed_over) {
      store.SetSweepRunner([&](std::function<void()> work) {
        {
          std::lock_guard lock(mu);
          ++handed;
        }
        boost::asio::post(sweeper, [&, work = std::move(work)] {
          work();
          std::lock_guard lock(mu);
          ++swept;
          cv.notify_all();
        });
      });
    }
    ps::server::OptimizerSpec spec =
        ps::server::DefaultOptimizer(ps::server::OptimizerKind::kAdagrad);
    spec.learning_rate = 0.01;
    Check(store.Configure(spec), "Configure");
    const ps::server::ShardDef def = TableDef(o, true, {.ttl_steps = kTtl});
    Check(store.Create(def), "Create");
    const auto dim = static_cast<size_t>(o.dim);
    Prefill(store, def, o);
    wait_for_sweeps();  // the prefill's (due at step 0)
    const int before = handed;
    size_t max_rows = 0;
    for (const auto& b : batches) max_rows = std::max(max_rows, b.size());
    const std::vector<float> grad(max_rows * dim, 0.001f);
    std::vector<double> ms;
    for (int64_t step = 1; step <= kTtl; ++step) {
      const auto& rows = batches[static_cast<size_t>(step) % batches.size()];
      const auto t = Clock::now();
      Check(store.PushRows(def.key(), rows, std::span(grad).first(rows.size() * dim), step),
            "PushRows");
      ms.push_back(1e3 * Seconds(t, Clock::now()));
    }
    wait_for_sweeps();
    double total = 0;
    for (double m : ms) total += m / 1e3;
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) {
      return ms[std::min(ms.size() - 1, static_cast<size_t>(q * static_cast<double>(ms.size())))];
    };
    const std::string sweeps_run = handed_over
                                       ? "sweeper thread (" + std::to_string(handed - before) + ")"
                                       : std::string("pushing thread");
    std::printf("  %-22s %10.2f %10.2f %10.2f %12.3f\n", sweeps_run.c_str(), at(0.5), at(0.99),
                ms.back(), total);
  }
}

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  ps::model::SetBlasThreads(1);
  double mean_unique = 0;
  auto batches = DrawBatches(o, kBatches, &mean_unique);
  std::printf("load average at start: %s (%u cores)\n", ps::bench::LoadAverage().c_str(),
              std::thread::hardware_concurrency());
  std::printf(
      "batch %lld examples x %lld ids, Zipf s=%.2f over %lld rows: %.0f unique rows per batch "
      "(mean of %d); %d client threads; %.1f s per measurement\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.ids), o.zipf,
      static_cast<long long>(o.rows), mean_unique, kBatches, o.clients, o.seconds);
  for (const auto& v : o.variants) {
    if (v == "index-bound" || v == "hash-bound") {
      RunBound(o, v, batches);
    } else if (v == "sweep") {
      RunSweep(o, batches);
    } else {
      RunVariant(o, v, batches);
    }
  }
  return 0;
}

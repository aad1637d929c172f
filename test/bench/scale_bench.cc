// Scaling figures for planning a cluster, measured with fake compute (the job key
// "fake_compute_ms": workers sleep instead of computing and push zero gradients), so that
// many workers fit on 2 cores. Not a test: run by scripts/bench-scale.sh.
//
//   bench_scale chief  --pstrain PATH [--workers 64] [--fake-compute-ms 10,0]
//                      [--steps-per-dispatch 1,10] [--log-every 1000] [--warmup 3] [--seconds 10]
//   bench_scale ps     --ps PATH [--clients 16] [--depth 1] [--bytes 4096] [--warmup 1] [--seconds 5]
//                      [--ps-cpu 0] [--client-cpu 1]
//   bench_scale fanout --pstrain PATH --job FILE [--ps-tasks 1,2,4,8] [--fake-compute-ms 0]
//                      [--steps 3000] [--log-every 100] [--skip-steps 500] [--combine 1]
//
// chief: the chief's CPU time per dispatched pack. `pstrain local` runs 1 ps and --workers
//   workers of a tiny job (logistic regression over 8 features, batch 1, so a step's pull and
//   push are a few bytes) with fake compute: every step sleeps --fake-compute-ms (10: each
//   worker wants 100 steps/s; 0: as fast as the machine goes), and a pack is
//   --steps-per-dispatch steps; one run per pair of the two lists. Each time the chief appends a progress line the CPU time
//   of every process is read from /proc/<pid>/stat (test/bench/cluster_run.h); over the
//   window from --warmup s after the first line to --seconds later (the run is then stopped
//   as by `pstrain stop`): packs dispatched = steps / steps per pack, the chief's CPU per
//   pack, its share of a core, and what that makes one chief core's pack rate.
// ps: one ps core's capacity for small pulls. A real pstrain-ps pinned to CPU --ps-cpu
//   (sched_setaffinity) serves one dense variable of --bytes; this process, pinned to
//   --client-cpu, plays the chief (creates the variable, sends Shutdown at the end) and
//   --clients workers, each its own connection with --depth pulls in flight (each sent
//   again from its completion; a worker keeps one pull per ps in flight, so 1 is realistic). Over --seconds after --warmup:
//   pulls per second and the ps's CPU per pull (/proc/<pid>/stat), and its share of the
//   core; if it is below 1, the ps was not saturated and 1e6 / (µs per pull) is the
//   capacity of a whole core.
// fanout: the step time of --job (the demo MLP) with fake compute and one worker, for each
//   --ps-tasks count: with fake_compute_ms 0 a step is its data, its pulls and its pushes,
//   fanned out over the ps tasks (the job's placement). The 1-ps run is repeated at the
//   end; ratios are against the mean of both 1-ps runs. --combine 1,0 runs each count with
//   the job's combine_push_pull true, then false (A/B in one run; ratios within each).
// Every figure comes with the load average: on a shared machine, CPU per request or pack
// is the steadier figure; rates move with the load.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "libps/cluster/tf_config.h"
#include "libps/core/json.h"
#include "libps/net/transport.h"
#include "libps/server/optimizer.h"
#include "libps/server/wire_specs.h"
#include "test/bench/bench_util.h"
#include "test/bench/cluster_run.h"

namespace {

constexpr const char* kUsage =
    "usage: bench_scale chief|ps|fanout [flags]   (scripts/bench-scale.sh runs it)\n"
    "  chief   the chief's CPU per dispatched pack with many fake-compute workers:\n"
    "          --pstrain PATH [--workers 64] [--fake-compute-ms 10,0] [--steps-per-dispatch 1,10]\n"
    "          [--log-every 1000] [--warmup 3] [--seconds 10]\n"
    "  ps      one pinned ps core's capacity for small pulls:\n"
    "          --ps PATH [--clients 16] [--depth 1] [--bytes 4096] [--warmup 1] [--seconds 5]\n"
    "          [--ps-cpu 0] [--client-cpu 1]\n"
    "  fanout  a job's step time with fake compute over 1, 2, 4, 8 ps tasks:\n"
    "          --pstrain PATH --job FILE [--ps-tasks 1,2,4,8] [--fake-compute-ms 0] [--steps 3000]\n"
    "          [--log-every 100] [--skip-steps 500] [--combine 1]   (1,0: A/B of combine_push_pull)\n"
    "See test/bench/scale_bench.cc for what each figure measures.\n";

using ps::Json;
using ps::bench::Check;
using ps::bench::Clock;
using ps::bench::Die;
using ps::bench::FlagValue;
using ps::bench::Must;
using ps::bench::Seconds;
namespace fs = std::filesystem;

using ps::bench::Median;

std::vector<double> NumberList(const std::string& text, const char* flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || v < 0) Die(std::string("bad ") + flag + " value " + item);
    out.push_back(v);
  }
  if (out.empty()) Die(std::string("empty ") + flag);
  return out;
}

struct Options {
  std::string command;
  std::string pstrain, ps_binary, job;
  // chief
  int workers = 64;
  std::vector<double> chief_fake_ms = {10, 0};
  std::vector<int> steps_per_dispatch = {1, 10};
  int64_t chief_log_every = 1000;
  double warmup = 3, seconds = 10;
  // ps
  int clients = 16;
  int depth = 1;  // pulls in flight per client
  int64_t bytes = 4096;
  int ps_cpu = 0, client_cpu = 1;
  // fanout
  std::vector<double> ps_tasks = {1, 2, 4, 8};
  double fanout_fake_ms = 0;
  std::vector<double> combine = {1};  // fanout: job.combine_push_pull per run (1 true, 0 false)
  int64_t steps = 3000, log_every = 100, skip_steps = 500;
};

Options Parse(int argc, char** argv) {
  Options o;
  if (argc < 2) Die("usage: bench_scale chief|ps|fanout [flags] (bench_scale --help)");
  o.command = argv[1];
  if (o.command == "--help" || o.command == "-h") {
    std::printf("%s", kUsage);
    std::exit(0);
  }
  bool seconds_set = false, warmup_set = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return FlagValue(argc, argv, &i); };
    if (a == "--pstrain")
      o.pstrain = next();
    else if (a == "--ps")
      o.ps_binary = next();
    else if (a == "--job")
      o.job = next();
    else if (a == "--workers")
      o.workers = std::atoi(next().c_str());
    else if (a == "--fake-compute-ms") {
      auto v = NumberList(next(), "--fake-compute-ms");
      o.chief_fake_ms = v;
      o.fanout_fake_ms = v.front();
    } else if (a == "--steps-per-dispatch") {
      o.steps_per_dispatch.clear();
      for (double v : NumberList(next(), "--steps-per-dispatch"))
        o.steps_per_dispatch.push_back(static_cast<int>(v));
    } else if (a == "--log-every")
      o.chief_log_every = o.log_every = std::atoll(next().c_str());
    else if (a == "--warmup")
      o.warmup = std::atof(next().c_str()), warmup_set = true;
    else if (a == "--seconds")
      o.seconds = std::atof(next().c_str()), seconds_set = true;
    else if (a == "--clients")
      o.clients = std::atoi(next().c_str());
    else if (a == "--depth")
      o.depth = std::atoi(next().c_str());
    else if (a == "--bytes")
      o.bytes = std::atoll(next().c_str());
    else if (a == "--ps-cpu")
      o.ps_cpu = std::atoi(next().c_str());
    else if (a == "--client-cpu")
      o.client_cpu = std::atoi(next().c_str());
    else if (a == "--ps-tasks")
      o.ps_tasks = NumberList(next(), "--ps-tasks");
    else if (a == "--combine")
      o.combine = NumberList(next(), "--combine");
    else if (a == "--steps")
      o.steps = std::atoll(next().c_str());
    else if (a == "--skip-steps")
      o.skip_steps = std::atoll(next().c_str());
    else
      Die("unknown flag " + a);
  }
  if (o.command == "ps") {
    if (!warmup_set) o.warmup = 1;
    if (!seconds_set) o.seconds = 5;
  }
  if (o.workers < 1 || o.chief_log_every < 1 || o.log_every < 1 || o.warmup < 0 || o.seconds <= 0 ||
      o.clients < 1 || o.depth < 1 || o.bytes < 4 || o.bytes % 4 != 0 || o.steps < 1 ||
      o.skip_steps < 0) {
    Die("bad flag value");
  }
  for (int spd : o.steps_per_dispatch) {
    if (spd < 1 || spd > 100000) Die("bad --steps-per-dispatch");
  }
  for (double p : o.ps_tasks) {
    if (p < 1 || p != static_cast<int>(p)) Die("bad --ps-tasks");
  }
  return o;
}

// "ps 41.8, workers 181.6": each entry's value times `scale`.
std::string CpuText(const std::vector<std::pair<std::string, double>>& cpu, double scale) {
  std::string out;
  char buf[96];
  for (const auto& [task, v] : cpu) {
    std::snprintf(buf, sizeof buf, "%s%s %.1f", out.empty() ? "" : ", ", task.c_str(), v * scale);
    out += buf;
  }
  return out;
}

// The summed CPU ms per step of the tasks whose names start with `prefix`.
double SumCpu(const std::vector<std::pair<std::string, double>>& cpu, const std::string& prefix) {
  double sum = 0;
  for (const auto& [task, ms] : cpu) {
    if (task.rfind(prefix, 0) == 0) sum += ms;
  }
  return sum;
}

// ---------------------------------------------------------------- chief

struct ChiefResult {
  double fake_ms = 0;
  int steps_per_pack = 1;
  double packs_per_sec = 0;
  double chief_us = 0;  // chief CPU µs per pack
};

ChiefResult RunChiefOnce(const Options& o, double fake_ms, int steps_per_pack) {
  Json job = {{"model", {{"type", "logistic_regression"}, {"num_features", 8}}},
              {"train_data", {{"format", "string_features"}, {"examples", 1000}, {"seed", 1}}},
              {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.01}}},
              {"batch_size", 1},
              {"steps", int64_t{1} << 40},  // stopped after the window
              {"steps_per_dispatch", steps_per_pack},
              {"log_every_steps", o.chief_log_every},
              {"checkpoint", {{"every_seconds", 0}}},
              {"fake_compute_ms", fake_ms},
              {"seed", 1}};
  auto run = ps::bench::RunLocalCluster(o.pstrain, ps::bench::LocalClusterJson(1, o.workers), job,
                                        o.warmup + o.seconds);
  // The window: the first line at least --warmup s after the first one, to the stop.
  const double t0 = run.lines.empty() ? 0 : run.lines.front().metrics.value("elapsed_sec", 0.0);
  size_t from = run.lines.size();
  for (size_t i = 0; i < run.lines.size() && i <= run.stop_line; ++i) {
    if (run.lines[i].metrics.value("elapsed_sec", 0.0) >= t0 + o.warmup && run.lines[i].all_cpu()) {
      from = i;
      break;
    }
  }
  size_t to = from;
  for (size_t i = from; i < run.lines.size() && i <= run.stop_line; ++i) {
    if (run.lines[i].all_cpu()) to = i;
  }
  auto cpu = ps::bench::CpuMsPerStep(run, from, to);
  if (cpu.empty())
    Die("chief: no measuring window in " + run.dir.string() + " (longer --seconds?)");
  const auto& a = run.lines[from].metrics;
  const auto& b = run.lines[to].metrics;
  const double steps = static_cast<double>(b["step"].get<int64_t>() - a["step"].get<int64_t>());
  const double sec = b["elapsed_sec"].get<double>() - a["elapsed_sec"].get<double>();
  ChiefResult r{fake_ms, steps_per_pack, steps / steps_per_pack / sec, 0};
  const double per_pack = 1000.0 * steps_per_pack;  // CPU ms per step -> µs per pack
  r.chief_us = SumCpu(cpu, "chief") * per_pack;
  std::vector<std::pair<std::string, double>> others = {{"ps", SumCpu(cpu, "ps:")},
                                                        {"workers", SumCpu(cpu, "worker:")},
                                                        {"launcher", SumCpu(cpu, "launcher")}};
  std::printf("%7.1f %6d %9.0f %9.0f %9.0f %10.1f %8.3f %11.0f   %s (%s)\n", fake_ms,
              steps_per_pack, o.workers * (fake_ms > 0 ? 1000.0 / fake_ms : 0.0), steps / sec,
              r.packs_per_sec, r.chief_us, r.chief_us * r.packs_per_sec / 1e6, 1e6 / r.chief_us,
              CpuText(others, per_pack).c_str(), ps::bench::LoadAverage().c_str());
  std::fflush(stdout);
  fs::remove_all(run.dir);
  return r;
}

int RunChief(const Options& o) {
  if (o.pstrain.empty()) Die("chief: --pstrain is required");
  std::printf(
      "chief: 1 ps + %d workers with fake compute, a tiny job (logistic regression over 8 features, batch 1);\n"
      "window: %.0f s after %.0f s of warm-up. \"1 core\": the packs/s one core of chief CPU would dispatch\n",
      o.workers, o.seconds, o.warmup);
  std::printf("%7s %6s %9s %9s %9s %10s %8s %11s   %s\n", "fake ms", "steps", "steps/s", "steps/s",
              "packs/s", "chief µs", "chief", "1 core",
              "CPU µs per pack of the others (load average)");
  std::printf("%7s %6s %9s %9s %9s %10s %8s %11s\n", "", "/pack", "wanted", "measured", "",
              "per pack", "cores", "packs/s");
  std::vector<ChiefResult> results;
  for (double fake_ms : o.chief_fake_ms) {
    for (int spd : o.steps_per_dispatch) results.push_back(RunChiefOnce(o, fake_ms, spd));
  }
  // The target, 1,000 workers at 100 steps/s each. The chief's CPU per pack falls as the
  // pack rate rises (one wake-up handles more replies), so the run with the most packs/s
  // gives the per-pack cost nearest the target's rate; the largest per pack measured is
  // the pessimistic bound.
  const ChiefResult* fastest = &results.front();
  double most_us = 0;
  for (const auto& r : results) {
    if (r.packs_per_sec > fastest->packs_per_sec) fastest = &r;
    most_us = std::max(most_us, r.chief_us);
  }
  const double steps_needed = 1000.0 * 100.0;
  std::printf(
      "summary: most packs/s here %.0f (%d workers, %d step(s)/pack, fake %.1f ms): chief %.1f µs CPU per pack; "
      "target 1,000 workers x 100 steps/s = %.0f steps/s:",
      fastest->packs_per_sec, o.workers, fastest->steps_per_pack, fastest->fake_ms,
      fastest->chief_us, steps_needed);
  for (int spd : {10, 1}) {
    const double packs = steps_needed / spd;
    std::printf(
        " %d step(s)/pack: %.0f packs/s x %.1f µs = %.2f chief cores (x %.1f µs, the most per pack "
        "measured: %.2f);",
        spd, packs, fastest->chief_us, packs * fastest->chief_us / 1e6, most_us,
        packs * most_us / 1e6);
  }
  std::printf("\n");
  return 0;
}

// ---------------------------------------------------------------- ps

// Pins the calling thread (and the threads it creates later) to `cpu`.
void PinTo(int cpu, const char* who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0)
    Die(std::string("cannot pin ") + who + " to CPU " + std::to_string(cpu));
}

int RunPs(const Options& o) {
  if (o.ps_binary.empty()) Die("ps: --ps PATH (pstrain-ps) is required");
  if (o.ps_cpu == o.client_cpu) Die("ps: --ps-cpu and --client-cpu must differ");
  // This process's threads (the clients) on one CPU, before any thread exists.
  PinTo(o.client_cpu, "the clients");
  auto ports = ps::bench::FreePorts(2 + o.clients);
  auto addr = [&](size_t i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  Json cluster = {{"chief", {addr(0)}}, {"ps", {addr(1)}}, {"worker", Json::array()}};
  for (int w = 0; w < o.clients; ++w) cluster["worker"].push_back(addr(2 + static_cast<size_t>(w)));
  const uint64_t cluster_id =
      ps::cluster::ClusterId(Must(ps::cluster::ParseClusterSpec(cluster, "cluster"), "cluster"));
  const std::string tf_config =
      Json{{"cluster", cluster}, {"task", {{"type", "ps"}, {"index", 0}}}}.dump();

  std::string tmpl = (fs::temp_directory_path() / "bench-scale-ps-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp failed");
  const fs::path dir = tmpl, log = dir / "ps.log";
  pid_t ps_pid = ::fork();
  if (ps_pid < 0) Die("fork failed");
  if (ps_pid == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(o.ps_cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) std::_Exit(125);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) std::_Exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setenv("TF_CONFIG", tf_config.c_str(), 1);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    std::string binary = o.ps_binary;
    char* args[] = {binary.data(), nullptr};
    ::execv(args[0], args);
    std::_Exit(127);
  }

  ps::net::Runtime runtime(1);  // the clients share one core: one I/O thread
  auto connect = [&](ps::proto::Role role, int index) {
    ps::net::ClientOptions co;
    co.host = "127.0.0.1";
    co.port = static_cast<uint16_t>(ports[1]);
    co.peer_name = "ps:0";
    co.identity = {role, index, cluster_id, std::nullopt};
    co.connect_deadline = std::chrono::seconds(20);
    return Must(ps::net::Client::Connect(runtime, co),
                "connecting to pstrain-ps (log " + log.string() + ")");
  };
  auto chief = connect(ps::proto::Role::kChief, 0);
  const int64_t floats = o.bytes / 4;
  ps::proto::CreateShards create;
  create.optimizer = ps::server::OptimizerToWire(
      Must(ps::server::ParseOptimizer(Json{{"type", "sgd"}, {"learning_rate", 0.01}}, "optimizer"),
           "optimizer"));
  create.shards.push_back(ps::server::ShardDefToWire({.layout = {.var = "v",
                                                                 .shard = 0,
                                                                 .num_shards = 1,
                                                                 .row_begin = 0,
                                                                 .rows = 1,
                                                                 .cols = floats,
                                                                 .full_shape = {1, floats},
                                                                 .lazy = false},
                                                      .init = {},
                                                      .seed = 0}));
  Check(chief->CallSync(create).status(), "CreateShards");

  // Each client: --depth pulls in flight, each sent again from its completion, each into
  // its own buffer.
  struct Loop {
    std::shared_ptr<ps::net::Client> client;
    std::vector<float> into;
  };
  std::vector<std::shared_ptr<ps::net::Client>> clients;
  for (int w = 0; w < o.clients; ++w) clients.push_back(connect(ps::proto::Role::kWorker, w));
  std::vector<Loop> loops;
  for (int k = 0; k < o.clients * o.depth; ++k) {
    loops.push_back({clients[static_cast<size_t>(k % o.clients)],
                     std::vector<float>(static_cast<size_t>(floats))});
  }
  std::atomic<int64_t> done{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  size_t running = loops.size();
  ps::Status first_error;
  ps::proto::Pull pull;
  pull.items.push_back({.var = "v", .shard = 0, .all_rows = true, .rows = {}});
  std::function<void(size_t)> issue = [&](size_t i) {
    std::vector<std::span<std::byte>> into{std::as_writable_bytes(std::span(loops[i].into))};
    loops[i].client->CallAsync(pull, {}, std::move(into), ps::net::Millis{0},
                               [&, i](ps::Result<ps::net::Reply> r) {
                                 if (!r.ok() || stop.load()) {
                                   std::lock_guard lock(mu);
                                   if (!r.ok() && first_error.ok()) first_error = r.status();
                                   if (--running == 0) cv.notify_all();
                                   return;
                                 }
                                 done.fetch_add(1);
                                 issue(i);
                               });
  };
  for (size_t i = 0; i < loops.size(); ++i) issue(i);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup));
  const double self0 = ps::bench::ProcessCpuSeconds(::getpid()),
               ps0 = ps::bench::ProcessCpuSeconds(ps_pid);
  const int64_t n0 = done.load();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  const double self1 = ps::bench::ProcessCpuSeconds(::getpid()),
               ps1 = ps::bench::ProcessCpuSeconds(ps_pid);
  const int64_t n1 = done.load();
  const double sec = Seconds(t0, Clock::now());
  stop = true;
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return running == 0; });
  }
  Check(first_error, "pull");
  Check(chief->CallSync(ps::proto::Shutdown{"bench_scale ps: done", false}).status(), "Shutdown");
  int status = 0;
  ::waitpid(ps_pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Die("pstrain-ps did not exit 0; log " + log.string());
  loops.clear();
  clients.clear();
  chief.reset();
  fs::remove_all(dir);

  const double pulls = static_cast<double>(n1 - n0);
  const double ps_us = 1e6 * (ps1 - ps0) / pulls, client_us = 1e6 * (self1 - self0) / pulls;
  const double ps_share = (ps1 - ps0) / sec;
  std::printf(
      "ps: pstrain-ps pinned to CPU %d, %d clients (one connection each, %d pull(s) in flight) pinned to CPU %d; "
      "pulls of %lld bytes; %.1f s window after %.1f s\n",
      o.ps_cpu, o.clients, o.depth, o.client_cpu, static_cast<long long>(o.bytes), o.seconds,
      o.warmup);
  std::printf(
      "pulls/s %.0f; ps CPU %.1f µs per pull (ps core busy %.2f); clients' CPU %.1f µs per pull; "
      "load average %s\n",
      pulls / sec, ps_us, ps_share, client_us, ps::bench::LoadAverage().c_str());
  std::printf(
      "summary: one ps core serves about %.0f small pulls/s (1e6 / %.1f µs of ps CPU per pull); measured %.0f/s "
      "with the core %.0f%% busy\n",
      1e6 / ps_us, ps_us, pulls / sec, 100 * ps_share);
  return 0;
}

// ---------------------------------------------------------------- fanout

struct FanoutResult {
  double step_ms = 0;  // median over windows
  ps::bench::Phases phases;
  std::vector<std::pair<std::string, double>> cpu;
  std::string load;  // the load average when the run ended
};

FanoutResult RunFanout(const Options& o, const Json& base, int num_ps, bool combine) {
  Json job = base;
  job["combine_push_pull"] = combine;
  job.erase("eval_data");
  job["steps"] = o.steps;
  job["log_every_steps"] = o.log_every;
  job["fake_compute_ms"] = o.fanout_fake_ms;
  auto run = ps::bench::RunLocalCluster(o.pstrain, ps::bench::LocalClusterJson(num_ps, 1), job);
  std::vector<double> ms;
  const Json* prev = nullptr;
  for (const auto& l : run.lines) {
    if (l.metrics["step"].get<int64_t>() < o.skip_steps) continue;
    if (prev != nullptr) {
      double steps =
          static_cast<double>(l.metrics["step"].get<int64_t>() - (*prev)["step"].get<int64_t>());
      double sec = l.metrics["elapsed_sec"].get<double>() - (*prev)["elapsed_sec"].get<double>();
      if (steps > 0 && sec > 0) ms.push_back(1000 * sec / steps);
    }
    prev = &l.metrics;
  }
  if (ms.size() < 3)
    Die("fanout: too few progress lines past step " + std::to_string(o.skip_steps) + " in " +
        run.dir.string());
  FanoutResult r;
  r.step_ms = Median(ms);
  auto phases = ps::bench::WorkerPhases(run, o.skip_steps);
  if (!phases.empty()) r.phases = phases.front();
  auto [from, to] = ps::bench::CpuWindow(run, o.skip_steps);
  r.cpu = ps::bench::CpuMsPerStep(run, from, to);
  r.load = ps::bench::LoadAverage();
  fs::remove_all(run.dir);
  return r;
}

int RunFanouts(const Options& o) {
  if (o.pstrain.empty() || o.job.empty()) Die("fanout: --pstrain and --job are required");
  Json base = Must(ps::ReadJsonFile(o.job), o.job);
  if (!base.is_object()) Die(o.job + ": expected a JSON object");
  if (!base.contains("base_dir")) base["base_dir"] = fs::absolute(o.job).parent_path().string();
  std::printf("fanout: %s, 1 worker, fake_compute_ms %.1f, %lld steps, timed past step %lld\n",
              o.job.c_str(), o.fanout_fake_ms, static_cast<long long>(o.steps),
              static_cast<long long>(o.skip_steps));
  std::printf("%-9s %9s %8s   %-32s %s\n", "ps tasks", "step ms", "vs 1 ps",
              "data/pull/compute/push ms",
              "CPU ms per step: worker, ps (all), chief, launcher (load average)");
  std::vector<int> order;
  for (double p : o.ps_tasks) order.push_back(static_cast<int>(p));
  const bool has_one = std::find(order.begin(), order.end(), 1) != order.end();
  if (has_one) order.push_back(1);  // 1 ps again at the end: the baseline is the mean of both
  struct Run {
    int ps;
    bool combine;
    FanoutResult r;
  };
  std::vector<Run> results;
  for (int p : order) {
    for (double c : o.combine) results.push_back({p, c != 0, RunFanout(o, base, p, c != 0)});
  }
  auto one_ps = [&](bool combine) {  // mean step time of the 1-ps runs with `combine`
    double sum = 0;
    int n = 0;
    for (const auto& run : results) {
      if (run.ps == 1 && run.combine == combine) sum += run.r.step_ms, ++n;
    }
    return n > 0 ? sum / n : 0;
  };
  const bool ab = o.combine.size() > 1;
  std::string summary = "summary:";
  for (const auto& [p, combine, r] : results) {
    const double one = one_ps(combine);
    char ratio[16] = "";
    if (one > 0) std::snprintf(ratio, sizeof ratio, "%.2f", r.step_ms / one);
    char ph[64];
    std::snprintf(ph, sizeof ph, "%.2f/%.2f/%.2f/%.2f", r.phases.data_ms, r.phases.pull_ms,
                  r.phases.compute_ms, r.phases.push_ms);
    const std::string label = std::to_string(p) + (ab ? (combine ? " comb" : " sep") : "");
    std::printf("%-9s %9.3f %8s   %-32s %.3f, %.3f, %.3f, %.3f (%s)\n", label.c_str(), r.step_ms,
                ratio, ph, SumCpu(r.cpu, "worker:"), SumCpu(r.cpu, "ps:"), SumCpu(r.cpu, "chief"),
                SumCpu(r.cpu, "launcher"), r.load.c_str());
    std::fflush(stdout);
    if (one > 0 && p != 1) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %d ps / 1 ps = %.2f%s;", p, r.step_ms / one,
                    ab ? (combine ? " (combined)" : " (separate)") : "");
      summary += buf;
    }
  }
  if (summary.back() == ';') {
    summary.pop_back();
    std::printf("%s (step time against the mean of the 1-ps runs)\n", summary.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  std::printf("load average at start: %s (%u cores)\n", ps::bench::LoadAverage().c_str(),
              std::thread::hardware_concurrency());
  std::fflush(stdout);
  int rc = 0;
  if (o.command == "chief")
    rc = RunChief(o);
  else if (o.command == "ps")
    rc = RunPs(o);
  else if (o.command == "fanout")
    rc = RunFanouts(o);
  else
    Die("unknown command " + o.command + " (chief, ps or fanout)");
  std::printf("load average at end: %s\n", ps::bench::LoadAverage().c_str());
  return rc;
}

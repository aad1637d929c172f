// Signals reach the daemons' handlers however the process was started. Without
// OPENBLAS_NUM_THREADS, OpenBLAS starts its worker threads in a library constructor,
// before main; a process-directed SIGTERM may land on such a thread. The daemons catch
// the signals with a handler (not a blocked mask), so it still reaches the SignalWatcher.
#include <signal.h>

#include <thread>

#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr const char* kProgress = "] step ";

TEST_CASE("SIGTERM to a chief started without OPENBLAS_NUM_THREADS is a graceful stop") {
  // OpenBLAS starts no extra thread on one core: nothing to show there.
  if (std::thread::hardware_concurrency() < 2) {
    WARN("needs >= 2 cores to start OpenBLAS threads: nothing to show here");
    return;
  }
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 1000000, 20, tmp / "model");
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(
      StartDaemon(spec, kChief, {"--job", job.string(), "--model-dir", (tmp / "model").string()},
                  {"OPENBLAS_NUM_THREADS"}));
  REQUIRE(chief.WaitForLine(kProgress, 120s));
  chief.Signal(SIGTERM);
  REQUIRE(chief.WaitExit(15s) == std::optional<int>(0));
  tasks.ExpectAllExit(0, 15s);
  CHECK(chief.HasLine("stop requested (SIGTERM)"));
}

TEST_CASE("SIGTERM to a ps started without OPENBLAS_NUM_THREADS reaches its handler") {
  if (std::thread::hardware_concurrency() < 2) {
    WARN("needs >= 2 cores to start OpenBLAS threads: nothing to show here");
    return;
  }
  auto spec = LocalCluster();
  Tasks tasks;
  Task& ps0 = tasks.Add(StartDaemon(spec, kPs0, {}, {"OPENBLAS_NUM_THREADS"}));
  REQUIRE(ps0.WaitForLine("serving on", 30s));
  ps0.Signal(SIGTERM);
  auto rc = ps0.WaitExit(15s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 128 + SIGTERM);  // stopped by a signal before the chief's Shutdown
  CHECK(ps0.HasLine("terminated by SIGTERM"));
}

}  // namespace
}  // namespace ps::integ

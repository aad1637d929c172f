// BatchGate (libps/serving/batch_gate.h), deterministically: every step waits for the
// gate's own state (BatchGate::state) or a latch, never for time.
#include <catch2/catch.hpp>

#include <atomic>
#include <latch>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <thread>

#include "libps/serving/batch_gate.h"

namespace ps::serving {
namespace {

// Yields until `done(gate.state())`; returns that state.
template <typename F>
BatchGate::State WaitFor(const BatchGate& gate, F done) {
  for (;;) {
    BatchGate::State s = gate.state();
    if (done(s)) return s;
    std::this_thread::yield();
  }
}

TEST_CASE("a writer waits for the batch in flight, a new batch waits behind the waiting writer") {
  BatchGate gate;
  std::shared_lock batch(gate);  // a batch in flight
  std::latch written(1), release(1);
  std::atomic<bool> writing{false};
  std::thread writer([&] {
    std::unique_lock lock(gate);
    writing = true;
    written.count_down();
    release.wait();
  });
  // The writer gets in only after the batch: it waits (it would be "writing" otherwise).
  BatchGate::State s =
      WaitFor(gate, [](const BatchGate::State& st) { return st.writer_waiting || st.writing; });
  CHECK(s.writer_waiting);
  CHECK(!s.writing);
  CHECK(s.batches == 1);
  CHECK(!writing);

  // A new batch now waits behind the writer (it would be in flight otherwise).
  std::atomic<bool> second_in{false};
  std::thread second([&] {
    std::shared_lock lock(gate);
    second_in = true;
  });
  s = WaitFor(gate, [](const BatchGate::State& st) { return st.queued == 1 || st.batches == 2; });
  CHECK(s.queued == 1);
  CHECK(s.batches == 1);

  // The batch ends: the writer writes, the new batch still waits.
  batch.unlock();
  written.wait();
  s = gate.state();
  CHECK(s.writing);
  CHECK(s.batches == 0);
  CHECK(s.queued == 1);
  CHECK(!second_in);
  // The writer is done: the new batch goes.
  release.count_down();
  writer.join();
  second.join();
  CHECK(second_in);
  s = gate.state();
  CHECK(!s.writing);
  CHECK(!s.writer_waiting);
  CHECK(s.batches == 0);
  CHECK(s.queued == 0);
}

TEST_CASE("a writer that throws while holding the gate releases it") {
  BatchGate gate;
  try {
    std::unique_lock lock(gate);
    throw std::runtime_error("bad_alloc, say");
  } catch (const std::runtime_error&) {}
  CHECK(!gate.state().writing);
  std::shared_lock batch(gate);  // would block forever if the writer still held it
  CHECK(gate.state().batches == 1);
}

}  // namespace
}  // namespace ps::serving

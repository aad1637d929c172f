// BatchGate: per-batch consistency between a bundle's scorers and its refresh
// (serving.cc). Internal to libps/serving; here so that it can be tested on its own.
//
// A batch holds the gate shared for its whole pass (std::shared_lock), a refresh holds it
// exclusively while it writes into the store (std::unique_lock): a batch sees the
// parameters wholly before or after a refresh. It prefers the writer (std::shared_mutex
// on glibc prefers readers, so scorers that keep overlapping would starve a refresh):
// once a writer waits, new batches wait behind it. It meets the SharedLockable
// requirements' names so that only RAII guards take it: an exception between locking and
// unlocking (bad_alloc, system_error) cannot leave it held.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ps::serving {

class BatchGate {
 public:
  // A batch: waits while a writer waits or writes.
  void lock_shared() {
    std::unique_lock lock(mu_);
    ++queued_;
    cv_.wait(lock, [&] { return !writer_; });
    --queued_;
    ++batches_;
  }
  void unlock_shared() {
    std::lock_guard lock(mu_);
    if (--batches_ == 0 && writer_) cv_.notify_all();
  }
  // The writer: waits for another writer, then (new batches now waiting) for the batches
  // in flight.
  void lock() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !writer_; });
    writer_ = true;
    cv_.wait(lock, [&] { return batches_ == 0; });
    writing_ = true;
  }
  void unlock() {
    {
      std::lock_guard lock(mu_);
      writer_ = writing_ = false;
    }
    cv_.notify_all();
  }

  // What the gate holds, for tests: batches in flight, batches waiting to enter, a
  // writer waiting (for the batches in flight) or writing.
  struct State {
    int64_t batches = 0;
    int64_t queued = 0;
    bool writer_waiting = false;
    bool writing = false;
  };
  State state() const {
    std::lock_guard lock(mu_);
    return {.batches = batches_,
            .queued = queued_,
            .writer_waiting = writer_ && !writing_,
            .writing = writing_};
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t batches_ = 0;  // in flight
  int64_t queued_ = 0;   // waiting in lock_shared
  bool writer_ = false;  // a writer waits or writes
  bool writing_ = false;
};

}  // namespace ps::serving

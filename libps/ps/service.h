// The ps task's request handling: CreateShards, Pull, Push, Save, Restore and Shutdown
// over a Store.
//
// Generations: every chief request raises the ps's generation to the chief's; a request
// from an older chief, or a pull/push stamped with an older generation (a worker still
// running a dead chief's steps), is refused with Aborted.
// At most once: the gradient of a step id is applied at most once per shard; a repeated
// push (a retried step, or a push resent after a lost reply) is acknowledged and counted
// in PushReply.skipped. Step ids from 0 to 2^28 are tracked; Restore forgets them all.
// Handle() is called on the server's handler pool, concurrently; the Store does the
// locking. Payloads are used in place: a pushed gradient is applied straight from the
// received buffer, a pull copies rows once, into the reply buffer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "libps/net/transport.h"
#include "libps/ps/store.h"

namespace ps::ps {

// Writes and reads this ps's shard files. The ps task provides it (libps/train), since
// the ps module does not depend on the checkpoint module. Called on handler threads.
class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  virtual Result<proto::SaveReply> Save(const proto::Save& request) = 0;
  virtual Status Restore(const proto::Restore& request) = 0;
};

class Service {
 public:
  // `checkpointer` may be null: Save and Restore then fail with FailedPrecondition.
  explicit Service(Store* store, Checkpointer* checkpointer = nullptr)
      : store_(store), checkpointer_(checkpointer) {}

  void Handle(net::Request request, net::Responder responder);

  // Blocks until a Shutdown request was answered (or RequestStop was called); returns
  // the reason given.
  std::string WaitForShutdown();
  void RequestStop(std::string reason);

  uint64_t generation() const { return generation_.load(); }
  // Answers GetStatus with StatusReply{source()} (the ps task's PsStatusJson). Unset:
  // GetStatus fails with Unavailable. Thread-safe; `source` runs on handler threads.
  void SetStatusSource(std::function<std::string()> source);
  uint64_t skipped_pushes() const { return skipped_.load(); }

 private:
  Status CreateShards(const proto::CreateShards& msg);
  Result<std::pair<proto::PullReply, net::Buffer>> Pull(const proto::Pull& msg);
  Result<proto::PushReply> Push(const proto::Push& msg, const net::Buffer& payload);
  // Floats a slice covers; errors name the slice.
  Result<uint64_t> SliceFloats(const proto::Slice& slice);

  // Marks step `step` applied to shard `key`; false if it already was.
  bool MarkApplied(const ShardKey& key, int64_t step);
  void UnmarkApplied(const ShardKey& key, int64_t step);
  Status CheckGeneration(const net::Request& request);

  Store* store_;
  Checkpointer* checkpointer_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> skipped_{0};
  std::mutex applied_mu_;
  std::map<ShardKey, std::vector<uint64_t>> applied_;  // bit per step id; guarded by applied_mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> shutdown_;  // guarded by mu_
  std::function<std::string()> status_source_;  // guarded by mu_
};

}  // namespace ps::ps

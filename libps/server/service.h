// The ps task's request handling: CreateShards, Pull, Push, Save, Restore and Shutdown
// over a Store.
//
// The ordering rules (generations, at most once, update modes, parked pulls, restores)
// are the UpdateMachine's (update_machine.h): the Service routes each request, asks the
// machine, and carries out its decisions against the Store and the transport, holding
// the locks the machine's contracts name. A pull that must wait holds no thread: the
// machine parks it and the Service keeps its responder until the push that makes it
// ready releases it. Restore, CreateShards with a new mode, ReleasePulls and shutdown
// fail parked pulls with Aborted.
// Handle() is called on the server's handler pool, or for the small pulls and pushes
// Inline() accepts on an I/O thread, concurrently; the Store does the locking. Payloads are used in place: a pushed gradient is applied straight from the
// received buffer, a pull copies rows once, into the reply buffer, except that an inline
// pull writes whole dense shards of kDirectPullBytes or more to the socket straight from
// the store (copying only what the socket does not take at once).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "libps/net/transport.h"
#include "libps/server/store.h"
#include "libps/server/update.h"
#include "libps/server/update_machine.h"

namespace ps::server {

// Writes and reads this ps's shard files. The ps task gets it from its main (ckpt::ShardCheckpointer), since
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
      : store_(store), checkpointer_(checkpointer) {
    machine_.SetInlineMaxBytes(kDefaultInlineBytes);
  }

  void Handle(net::Request request, net::Responder responder);

  // Tensor bytes up to which a pull or push is handled on the I/O thread (Inline), by
  // default (pstrain-ps --inline-max-kib). A 1 MiB Adam push takes ~60 us of the I/O
  // thread, less than the two thread hand-offs of the pool's path cost on a small VM
  // (measured with scripts/bench-scale.sh fanout).
  static constexpr uint64_t kDefaultInlineBytes = uint64_t{1} << 20;
  // Items of a pull handled inline that are whole dense shards of at least this many
  // bytes are written to the socket straight from the store, under the shard's locks
  // (Store::PullBorrowed, net::DirectReply); smaller ones cost less to copy than a
  // system call of their own.
  static constexpr uint64_t kDirectPullBytes = uint64_t{64} << 10;
  // A pull reply of at least this many bytes whose items are whole dense shards (too big
  // for the I/O thread) is queued at once and sent while it is being copied from the
  // store, a stripe at a time (net::PayloadProgress), so the copy overlaps the transfer.
  static constexpr uint64_t kProgressivePullBytes = uint64_t{4} << 20;
  // Sets that limit (0: every request goes to the pool). Thread-safe.
  void SetInlineMaxBytes(uint64_t bytes) { machine_.SetInlineMaxBytes(bytes); }
  // For net::ServerOptions::run_inline: a token (non-null) for requests cheap enough to
  // handle on an I/O thread, in async mode only (not hybrid): a pull or a push of at most
  // the inline limit (SetInlineMaxBytes; a push's pull after it counts with the push).
  // Null (the pool) in sync and bounded-staleness mode (PushSync holds
  // mode_mu_ across a whole sum, and pulls there take mode_mu_), for a request stamped
  // with a generation newer than the ps's (the fence's exclusive wait), with a push hook
  // set, and while a CreateShards, Save or Restore is pending or being handled: the token
  // holds the inline gate (shared) until the server drops it after the handler returned,
  // and those three take the gate exclusively for their whole duration, so none starts
  // while an inline handler runs and no inline handler starts while one runs.
  // Thread-safe, never blocks; takes the store's structure lock (shared) for a pull.
  std::shared_ptr<void> Inline(const net::Request& request);
  // Pushes of at least this many payload bytes are applied while they arrive, by
  // default (pstrain-ps --early-apply-min-kib; net::ServerOptions::watch_payload_min_bytes).
  static constexpr uint64_t kDefaultEarlyApplyBytes = uint64_t{1} << 20;
  // For net::ServerOptions::watch_payload: a watcher that applies an async push's
  // whole-shard dense gradients while its payload arrives (early apply), so the
  // optimizer's work overlaps receiving the rest; null for any other request, which is
  // then read whole and handled as usual (also a push of an untracked step, of another
  // mode, with a lazy or row item, or of a generation other than the ps's). Its at-most-once
  // marks are set at once; a push cut off mid-payload keeps the rows that arrived (logged,
  // early_cut()), and a retry of its step is acknowledged as applied. Handle() answers
  // the push once its payload is in. Called on an I/O thread; never blocks.
  std::shared_ptr<net::PayloadWatcher> WatchPush(const net::PeerInfo& peer,
                                                 const proto::Envelope& env,
                                                 uint64_t payload_bytes);
  // Points `options` at this service as pstrain-ps does: run_inline = Inline, and unless
  // early_apply_min_bytes is 0, watch_payload = WatchPush for payloads of at least it.
  void Attach(net::ServerOptions& options,
              uint64_t early_apply_min_bytes = kDefaultEarlyApplyBytes);
  // Pushes WatchPush took on (repeats skipped whole and failed ones included), and of them
  // those cut off before their payload was in.
  uint64_t early_pushes() const { return early_pushes_.load(); }
  uint64_t early_cut() const { return early_cut_.load(); }
  // Pushes that went through and then had the pull they carried served in their reply (a
  // worker's combine_push_pull); a push that failed is not counted.
  uint64_t push_pulls() const { return push_pulls_.load(); }
  // Inline handlers started (Inline returned a token). Testing and metrics.
  uint64_t inline_accepted() const { return inline_accepted_.load(); }
  // Pulls answered with items sent straight from the store (kDirectPullBytes). Testing.
  uint64_t direct_pulls() const { return direct_pulls_.load(); }
  // Pulls answered while their reply was being copied (kProgressivePullBytes). Testing.
  uint64_t progressive_pulls() const { return progressive_pulls_.load(); }
  // Testing hook: runs on the handler thread of a Save or Restore with the inline gate
  // held exclusively, before the checkpointer is called. Set before requests arrive.
  void SetLongOpHookForTesting(std::function<void()> hook) { long_op_hook_ = std::move(hook); }

  // Blocks until a Shutdown request was answered (or RequestStop was called); returns
  // it (RequestStop: its reason, not retryable).
  proto::Shutdown WaitForShutdown();
  void RequestStop(proto::Shutdown why);

  uint64_t generation() const { return machine_.generation(); }
  // Testing hook: runs on a push's handler thread after its generation check, with the
  // fence held, before its gradient is applied. Set before requests arrive.
  void SetPushHookForTesting(std::function<void()> hook) { push_hook_ = std::move(hook); }
  // Answers GetStatus with PsStatusReply{source()} (the ps task's PsStatusOf). Unset:
  // GetStatus fails with Unavailable. Thread-safe; `source` runs on handler threads.
  void SetStatusSource(std::function<proto::PsStatus()> source);
  uint64_t skipped_pushes() const { return skipped_.load(); }
  // Gradients (one shard's item of a push) applied on arrival: async mode, bounded
  // staleness and a hybrid job's async class. An item without rows is not counted.
  uint64_t applied_on_arrival() const { return applied_on_arrival_.load(); }
  // Words (64 steps each) of at-most-once marks held. Testing and metrics.
  size_t applied_mark_words() const;
  // Steps past the last Save that the at-most-once marks track.
  static constexpr int64_t kTrackedSteps = UpdateMachine::kTrackedSteps;

  using UpdateStats = server::UpdateStats;
  UpdateStats update_stats() const;

 private:
  // CreateShards, Save or Restore (body holds one), with the inline gate held.
  Result<proto::Body> HandleLongOp(const proto::Body& body, const net::PeerInfo& peer);
  Status CreateShards(const proto::CreateShards& msg);
  // A push applied while it arrived (WatchPush): applies what is left and answers it;
  // false for any other request.
  bool FinishEarly(net::Request& request, net::Responder& responder);
  // Pulls now, or parks the pull in the machine until the update mode lets it through.
  void PullOrWait(proto::Pull msg, net::Responder responder);
  // Answers a pull that may be served now; with `pushed`, the pull after that push,
  // answered in its PushReply.
  void Pull(const proto::Pull& msg, const SliceInfos& info, net::Responder& responder,
            std::optional<proto::PushReply> pushed = std::nullopt);
  // Pull's reply without the copy of big dense items when it can be written at once
  // (net::DirectReply: an inline pull in async mode); false: nothing was done, copy.
  // kProgressivePullBytes: true when it answered the pull (taking reply and buffer), false
  // (both untouched) when the pull is not one for it.
  // `body`: the reply (a PullReply, or the PushReply holding it).
  bool PullProgressive(const proto::Pull& msg, const SliceInfos& info, proto::Body& body,
                       net::Buffer& buffer, net::Responder& responder);
  bool PullDirect(const proto::Pull& msg, const SliceInfos& info, const proto::Body& body,
                  net::Responder& responder);
  // One item of a pull into dst [its floats].
  Status PullItem(const proto::Slice& item, std::span<float> dst);
  // A push with a pull after it (async mode only) gets that pull's items checked into
  // `pull_info` before anything is applied.
  Result<proto::PushReply> Push(const proto::Push& msg, const net::Buffer& payload,
                                SliceInfos* pull_info);
  // Sync steps (sync mode, or hybrid). grads[i]: item i's gradient.
  // on_arrival[i]: item i is of the async class (hybrid), applied on arrival.
  Result<proto::PushReply> PushSync(const proto::Push& msg,
                                    const std::vector<std::span<const float>>& grads,
                                    const SliceInfos& info, const std::vector<bool>& on_arrival);
  // Applies the gradients of msg's items (those `only` marks; empty: all) as they come,
  // each at most once per (shard, `worker`, `step`); returns how many were skipped as
  // already applied. An item the store refuses is unmarked and fails the push (the items
  // before it stay applied).
  Result<int32_t> ApplyOnArrival(const proto::Push& msg,
                                 const std::vector<std::span<const float>>& grads, int32_t worker,
                                 int64_t step, const std::vector<bool>& only);
  // Counts and logs `skipped` items of a repeated push of `step` (worker -1: any).
  void CountSkipped(int64_t step, int32_t worker, int32_t skipped);
  // Serves the parked pulls the machine releases as ready.
  void ServeReady();
  // Serves (why null) or fails `pulls`, parked pulls the machine handed back; mode_mu_
  // not held. Their responders are taken from waiting_ under it.
  void Answer(UpdateMachine::Waiting& pulls, const Status* why);
  // Errors name the slice.
  Result<SliceInfo> SliceOf(const proto::Slice& slice);
  Result<SliceInfos> SlicesOf(const std::vector<proto::Slice>& items);
  // The machine's generation check with its errors; a raised generation drains the fence.
  Status CheckGeneration(const net::Request& request);

  Store* store_;
  Checkpointer* checkpointer_;
  // The ordering state. Its mode part is guarded by mode_mu_, its marks part by
  // marks_mu_ (both, in that order, for Restored); its fence part needs no lock.
  UpdateMachine machine_;
  mutable std::mutex mode_mu_;
  // Replies owed to the pulls the machine holds parked, by ticket; guarded by mode_mu_.
  std::unordered_map<uint64_t, net::Responder> waiting_;
  uint64_t next_ticket_ = 0;  // guarded by mode_mu_
  mutable std::mutex marks_mu_;
  // Pushes: shared from check to applied; a new generation and Restore: exclusive.
  std::shared_mutex fence_;
  std::function<void()> push_hook_;  // testing
  // Inline handlers: shared (try_lock_shared, never waits) while one runs; CreateShards,
  // Save and Restore: exclusive for their whole duration. Order: before fence_.
  std::shared_mutex inline_gate_;
  std::atomic<uint64_t> inline_accepted_{0};
  std::atomic<uint64_t> direct_pulls_{0}, progressive_pulls_{0};
  std::function<void()> long_op_hook_;  // testing
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> applied_on_arrival_{0};
  class EarlyPush;
  std::atomic<uint64_t> early_pushes_{0}, early_cut_{0};
  std::atomic<uint64_t> push_pulls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<proto::Shutdown> shutdown_;         // guarded by mu_
  std::function<proto::PsStatus()> status_source_;  // guarded by mu_
};

}  // namespace ps::server

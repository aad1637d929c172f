// The ps task's request handling: CreateShards, Pull, Push, Save, Restore and Shutdown
// over a Store.
//
// Generations: every chief request raises the ps's generation to the chief's; a request
// from an older chief, or a pull/push stamped with an older generation (a worker still
// running a dead chief's steps), is refused with Aborted. The check and the push's
// application are one step against a newer chief: a push holds the generation fence
// (shared) from its check until its gradient is applied, and a chief request that raises
// the generation raises it, then takes the fence exclusively before it is handled, so it
// waits for the pushes that passed the old generation's check. No push of an older
// generation can therefore land after a new chief's first request (its CreateShards),
// in particular not between it and its Restore.
// At most once: the gradient of a step id is applied at most once per shard; a repeated
// push (a retried step, or a push resent after a lost reply) is acknowledged and counted
// in PushReply.skipped. A Save at step c trims the marks below c (the chief saves only
// when every step before c is applied, so a push below c is a repeat and is skipped);
// a push 2^28 or more steps past the last Save is refused rather than left untracked.
// Restore forgets them all.
// (Sync shards count their update's workers instead; the async class of a hybrid job,
// where every worker runs every step, tracks (step, worker).)
// Update modes (update.h, set by CreateShards): in sync mode each shard aggregates the
// gradients of an update and applies their average once; in bounded-staleness mode the
// ps keeps every worker's clock. In a hybrid job each shard follows its class's mode
// (ShardDef::sparse_class): steps are sync steps, the sync class's shards aggregate them
// and the async class's apply each worker's gradient on arrival; a pull waits only for
// the sync class's shards. A pull that must wait (sync: for its shards' version;
// bounded staleness: for the slowest worker) holds no thread: it is parked with its
// responder and answered by the push that makes it ready. Restore, CreateShards with a
// new mode and shutdown fail parked pulls with Aborted.
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
      : store_(store), checkpointer_(checkpointer) {}

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
  void SetInlineMaxBytes(uint64_t bytes) {
    inline_max_bytes_.store(bytes, std::memory_order_relaxed);
  }
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

  uint64_t generation() const { return generation_.load(); }
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
  static constexpr int64_t kTrackedSteps = int64_t{1} << 28;

  // Update-mode figures since start: the mode(s), gradients dropped as stale (sync), pulls
  // that had to wait, and in bounded-staleness mode the largest lead a pull was granted
  // with (its worker's step minus the slowest other worker's pushed steps; <= staleness).
  struct UpdateStats {
    UpdateSpec spec;
    uint64_t stale_dropped = 0;
    uint64_t waited_pulls = 0;
    int64_t max_lead = 0;
    int64_t min_version = 0, max_version = 0;  // sync: over the (sync class's) shards
    int64_t sync_shards = 0;  // shards here that aggregate sync steps (hybrid: the sync class's)
    uint64_t applied_on_arrival = 0;  // applied_on_arrival()
    bool configured = false;          // a CreateShards set `spec` (before: the default, async)
  };
  UpdateStats update_stats() const;

 private:
  // CreateShards, Save or Restore (body holds one), with the inline gate held.
  Result<proto::Body> HandleLongOp(const proto::Body& body, const net::PeerInfo& peer);
  Status CreateShards(const proto::CreateShards& msg);
  // What one item of a pull or push names: its shard's size and class.
  struct SliceInfo {
    uint64_t floats = 0;  // rows named (all rows when all_rows) * cols
    int64_t rows = 0;     // the shard's rows
    int64_t cols = 0;     // floats per row
    bool sparse = false;  // ShardDef::sparse_class
    bool lazy = false;    // ShardLayout::lazy
  };
  using SliceInfos = std::vector<SliceInfo>;  // [item]
  // Pulls now, or parks the pull until the update mode lets it through.
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
  // mode_mu_ held: OK unless a sync-class item of `msg` is for an update its shard has
  // not reached (the worker is ahead of it).
  Status CheckNotAhead(const proto::Push& msg, const SliceInfos& info);
  // mode_mu_ held: do the shards of class `sparse` aggregate sync steps?
  bool SyncClass(bool sparse) const { return update_.ModeOf(sparse) == UpdateMode::kSync; }
  // Applies the gradients of msg's items (those `only` marks; empty: all) as they come,
  // each at most once per (shard, `worker`, `step`); returns how many were skipped as
  // already applied. An item the store refuses is unmarked and fails the push (the items
  // before it stay applied).
  Result<int32_t> ApplyOnArrival(const proto::Push& msg,
                                 const std::vector<std::span<const float>>& grads, int32_t worker,
                                 int64_t step, const std::vector<bool>& only);
  // Counts and logs `skipped` items of a repeated push of `step` (worker -1: any).
  void CountSkipped(int64_t step, int32_t worker, int32_t skipped);
  // mode_mu_ held: sync and bounded-staleness requests must name their worker and clock.
  Status CheckTag(const char* op, int32_t worker, int64_t clock) const;
  // Under mode_mu_: may `msg` be served now? `step`: its clock on this ps's scale
  // (WorkerClock at arrival). Updates max_lead_ when it may, nothing else.
  bool Ready(const proto::Pull& msg, const SliceInfos& info, int64_t step);
  // Bounded staleness, mode_mu_ held: a message of worker `w` for `step` was seen.
  void Seen(int32_t w, int64_t step);
  // Bounded staleness, mode_mu_ held: worker `w`'s step `clock` on this ps's scale. A
  // worker process counts from 0; a restarted one continues at the count its
  // predecessor reached here, so it neither waits for nor stalls the others.
  int64_t WorkerClock(int32_t w, int64_t clock);
  // Serves the parked pulls that became ready.
  void ServeReady();
  void FailParked(const Status& why);
  // Errors name the slice.
  Result<SliceInfo> SliceOf(const proto::Slice& slice);
  Result<SliceInfos> SlicesOf(const std::vector<proto::Slice>& items);

  // Marks step `step` of `worker` (-1: any worker; a hybrid job's async class: the
  // pushing worker) applied to shard `key`; false if it already was (or is below the
  // last Save); FailedPrecondition if it is kTrackedSteps or more past the last Save.
  Result<bool> MarkApplied(const ShardKey& key, int32_t worker, int64_t step);
  void UnmarkApplied(const ShardKey& key, int32_t worker, int64_t step);
  // After a Save at `step`: forgets the marks below it (in whole words).
  void TrimApplied(int64_t step);
  Status CheckGeneration(const net::Request& request);

  // Sync mode: the update a shard is collecting gradients for, and their sum.
  struct SyncShard {
    int64_t version = 0;
    std::vector<int32_t> workers;                   // who contributed to `version`
    std::vector<float> dense_sum;                   // whole-shard pushes: [rows * cols]
    std::unordered_map<int64_t, size_t> row_index;  // sparse: shard-local row -> position
    std::vector<int64_t> rows;                      // sparse: rows in order of first push
    std::vector<float> row_sum;                     // sparse: [rows.size() * cols]
  };
  struct Parked {
    proto::Pull msg;
    SliceInfos info;
    int64_t step;
    net::Responder responder;
  };
  SyncShard& SyncState(const ShardKey& key);  // mode_mu_ held

  Store* store_;
  Checkpointer* checkpointer_;
  mutable std::mutex mode_mu_;  // guards the fields below up to parked_
  UpdateSpec update_;
  int64_t base_version_ = 0;  // sync: the version of shards not pushed since Restore
  std::map<ShardKey, SyncShard> sync_;
  std::vector<int64_t> clocks_;   // bounded staleness: [worker] steps pushed; -1 unknown
  std::vector<int64_t> offsets_;  // [worker] added to a restarted worker's own count
  std::vector<int64_t> seen_;     // [worker] the highest step heard of; -1 none
  std::vector<int64_t> idle_at_;  // [worker] idle from this step on (holds nobody back); -1 busy
  int64_t max_lead_ = 0;
  uint64_t waited_pulls_ = 0;
  std::vector<Parked> parked_;
  // Set by ReleasePulls (a ps is down): a pull that would wait fails with this instead,
  // until the next Restore or CreateShards.
  std::optional<Status> pulls_released_;
  std::atomic<uint64_t> stale_{0};
  std::atomic<uint64_t> generation_{0};
  // Pushes: shared from check to applied; a new generation and Restore: exclusive.
  std::shared_mutex fence_;
  std::function<void()> push_hook_;  // testing
  std::atomic<int> long_ops_{0};     // CreateShards, Save and Restore pending or being handled
  // Inline handlers: shared (try_lock_shared, never waits) while one runs; CreateShards,
  // Save and Restore: exclusive for their whole duration. Order: before fence_.
  std::shared_mutex inline_gate_;
  std::atomic<uint64_t> inline_max_bytes_{kDefaultInlineBytes};  // SetInlineMaxBytes
  std::atomic<UpdateMode> mode_{
      UpdateMode::kAsync};  // update_.StepMode(), for Inline (written under mode_mu_)
  std::atomic<uint64_t> inline_accepted_{0};
  std::atomic<uint64_t> direct_pulls_{0}, progressive_pulls_{0};
  std::function<void()> long_op_hook_;  // testing
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> applied_on_arrival_{0};
  class EarlyPush;
  std::atomic<uint64_t> restores_{0};  // Restores begun (raised with fence_ held exclusively)
  std::atomic<uint64_t> early_pushes_{0}, early_cut_{0};
  std::atomic<uint64_t> push_pulls_{0};
  bool configured_ = false;  // guarded by mode_mu_: a CreateShards set update_
  // The steps of one (shard, worker) applied: bit i of the words is step base + i; every
  // step below base counts as applied (base: the last Save's step, rounded down to 64).
  struct AppliedMarks {
    int64_t base = 0;
    std::vector<uint64_t> bits;
  };
  mutable std::mutex applied_mu_;
  // (shard, worker or -1) -> its marks; guarded by applied_mu_
  std::map<std::pair<ShardKey, int32_t>, AppliedMarks> applied_;
  bool window_logged_ = false;  // guarded by applied_mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<proto::Shutdown> shutdown_;         // guarded by mu_
  std::function<proto::PsStatus()> status_source_;  // guarded by mu_
};

}  // namespace ps::server

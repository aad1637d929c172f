// UpdateMachine: the ps's ordering rules as a pure state machine (after the chief's
// ChiefMachine): generation fencing, at-most-once marks, sync aggregation and versions,
// bounded-staleness clocks, which pulls wait and when they are released, and restores
// in the middle of it all. Plain state and no sockets, threads, locks, clocks or store:
// events come in as calls (a request arrived, a sync gradient came in, a push was
// applied, a Restore happened) and the results are decisions (refuse with this Status,
// skip as a repeat, apply this average, park this pull, release these pulls). The shell
// (Service, service.h) carries them out against the Store and the transport and holds
// the locks around the machine, which has three parts:
//  - the fence part (generation, Restore count, long ops pending, the step mode, the
//    inline limit): atomics, callable from any thread without a lock. What keeps a
//    decision true while the caller acts on it are the shell's fence and inline gate,
//    as each contract says;
//  - the marks part (Mark, Unmark, Saved, mark_words): the caller serializes its calls;
//  - the mode part (everything else): the caller serializes its calls, with another
//    lock than the marks part's. Restored spans both and needs both.
//
// Generations: every chief request raises the ps's generation to the chief's; a request
// from an older chief, or a pull/push stamped with an older generation (a worker still
// running a dead chief's steps), is refused. A push's check and its application are one
// step against a newer chief: the shell holds its fence (shared) from CheckGeneration
// until the gradient is applied, and when a chief request raises the generation
// (GenCheck::kRaised) the shell takes the fence exclusively before handling it, so no
// push of an older generation lands after a new chief's first request.
// At most once: the gradient of a step id is applied at most once per shard (Mark). A
// Save at step c trims the marks below c (Saved: the chief saves only once every step
// before c is applied, so a push below c is a repeat); a push kTrackedSteps or more past
// the last Save is refused rather than left untracked; Restored forgets them all. Sync
// shards count their update's workers instead (Contribute); the async class of a hybrid
// job, where every worker runs every step, marks (step, worker).
// Update modes (update.h, set by Configure): sync shards sum the gradients of an update
// and hand out their average once (Contribute, Advance); bounded staleness keeps every
// worker's clock (Pushed). A pull that must wait is parked here (ArrivePull) and handed
// back by ReleaseReady once a push made it ready; Restored, Configure with a new mode,
// ReleasePulls and ReleaseAll hand back every parked pull, to be failed.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "libps/core/status.h"
#include "libps/proto/messages.h"
#include "libps/server/store.h"
#include "libps/server/update.h"

namespace ps::server {

// What one item of a pull or push names: its shard's size and class.
struct SliceInfo {
  uint64_t floats = 0;  // rows named (all rows when all_rows) * cols
  int64_t rows = 0;     // the shard's rows
  int64_t cols = 0;     // floats per row
  bool sparse = false;  // ShardDef::sparse_class
  bool lazy = false;    // ShardLayout::lazy
};
using SliceInfos = std::vector<SliceInfo>;  // [item]

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
  uint64_t applied_on_arrival = 0;  // Service::applied_on_arrival()
  bool configured = false;          // a CreateShards set `spec` (before: the default, async)
};

class UpdateMachine {
 public:
  // Steps past the last Save that the at-most-once marks track.
  static constexpr int64_t kTrackedSteps = int64_t{1} << 28;

  // ---- Fence part (thread-safe) ----

  enum class GenCheck {
    kOk,      // current: go on
    kRaised,  // a chief's newer generation, now the ps's: first wait for the pushes that
              // passed the old one's check (the fence, exclusively), then handle it
    kStale,   // older than the ps's: refuse with Aborted
  };
  // A request stamped with generation `gen`; `from_chief`: a chief's request, which
  // raises the ps's generation to its own.
  GenCheck CheckGeneration(uint64_t gen, bool from_chief);
  uint64_t generation() const { return generation_.load(); }
  // Restores done (Restored).
  uint64_t restores() const { return restores_.load(); }

  // CreateShards, Save and Restore: pending or being handled from LongOpBegin to
  // LongOpEnd. While one is, no request starts on an I/O thread (InlineOpen) and no pull
  // reply is sent while it is copied (ProgressiveOpen).
  void LongOpBegin() { long_ops_.fetch_add(1); }
  void LongOpEnd() { long_ops_.fetch_sub(1); }

  // The step mode (UpdateSpec::StepMode of the last Configure; async before).
  UpdateMode step_mode() const { return mode_.load(); }

  // The inline gate: may a pull or push be handled on an I/O thread? Three checks in
  // order, each false ending it: InlineCandidate before the shell's gate (taken shared
  // without waiting; CreateShards, Save and Restore hold it exclusively), InlineOpen
  // with it held, and InlineFits for the request's tensor bytes.
  void SetInlineMaxBytes(uint64_t bytes) {
    inline_max_bytes_.store(bytes, std::memory_order_relaxed);
  }
  uint64_t inline_max_bytes() const { return inline_max_bytes_.load(std::memory_order_relaxed); }
  struct InlineAsk {
    bool push = false;            // a push (else a pull)
    uint64_t payload_bytes = 0;   // the push's payload
    bool early = false;           // the push was applied while it arrived (EarlyBegin)
    bool early_deferred = false;  // and some of its rows were left to the pool
    bool push_hook = false;       // a testing hook runs in every push
    uint64_t generation = 0;      // the request's
  };
  // False for a push over the limit (unless applied early, its reply all that is left),
  // a push with its rows left to the pool, a push while the hook is set, and a request of
  // a generation newer than the ps's (its check may wait for the fence).
  bool InlineCandidate(const InlineAsk& ask) const;
  // Gate held: no long op pending (one waiting for the gate gets it: glibc's rwlock
  // prefers readers) and async mode (the other modes' pulls and sums take the mode lock).
  bool InlineOpen() const { return long_ops_.load() == 0 && step_mode() == UpdateMode::kAsync; }
  // `bytes` (a push's payload plus what it or a pull reads) within the inline limit.
  bool InlineFits(uint64_t bytes) const { return bytes <= inline_max_bytes(); }

  // Early apply: may an async push be applied while its payload arrives? EarlyCandidate
  // before its items are looked at; then, with the fence taken shared without waiting,
  // EarlyBegin gives the ticket its parts are checked against (nullopt: a generation
  // other than the ps's). The shell then marks its items (Mark, worker -1) at once.
  bool EarlyCandidate(const proto::Push& msg, bool reply_frame, bool from_chief,
                      bool push_hook) const;
  struct EarlyTicket {
    uint64_t generation = 0, restores = 0;
  };
  std::optional<EarlyTicket> EarlyBegin(uint64_t gen) const;
  enum class PartCheck {
    kOk,
    kNewChief,  // a newer chief took over while it arrived: fail the push
    kRestored,  // the ps was restored (its marks forgotten) while it arrived: fail it
  };
  // Before each part of an early push is applied, with the fence held shared (on an I/O
  // thread only when the gate was taken at once and EarlyPartOpen).
  PartCheck CheckPart(const EarlyTicket& ticket) const;
  bool EarlyPartOpen() const { return long_ops_.load() == 0; }
  // Pull fast paths: a reply sent while it is copied (kProgressivePullBytes), with the
  // gate held shared; items written straight from the store (kDirectPullBytes).
  bool ProgressiveOpen() const { return long_ops_.load() == 0; }
  bool DirectOpen() const { return step_mode() == UpdateMode::kAsync; }

  // ---- Marks part (caller-serialized) ----

  // Marks step `step` of `worker` (-1: any worker; a hybrid job's async class: the
  // pushing worker) applied to shard `key`: true if it was not (apply it), false if it
  // already was or is below the last Save (a repeat: skip it); FailedPrecondition if it
  // is kTrackedSteps or more past the last Save. A step < 0 is untracked: true.
  Result<bool> Mark(const ShardKey& key, int32_t worker, int64_t step);
  // Undoes Mark (the store refused the gradient, or an early push could not start).
  void Unmark(const ShardKey& key, int32_t worker, int64_t step);
  // A Save at `step` (>= 0) succeeded: forgets the marks below it (in whole words).
  void Saved(int64_t step);
  // Words (64 steps each) of marks held.
  size_t mark_words() const;

  // ---- Mode part (caller-serialized) ----

  // A parked pull: the request, its items and its step on this ps's scale; `ticket` is
  // the shell's name for the reply it owes.
  struct WaitingPull {
    proto::Pull msg;
    SliceInfos info;
    int64_t step = 0;
    uint64_t ticket = 0;
  };
  using Waiting = std::vector<WaitingPull>;

  // CreateShards with `spec`: a new job's pulls may wait again (ReleasePulls undone). A
  // new mode resets every version, sum and clock and hands back every parked pull in
  // `failed`; returns whether it did.
  bool Configure(const UpdateSpec& spec, Waiting* failed);
  const UpdateSpec& spec() const { return update_; }

  // A push: checks its tag (CheckTag), that a pull after it is in async mode, and marks
  // in `on_arrival` [item] the items applied on arrival (async, bounded staleness, a
  // hybrid job's async class) rather than summed for a sync step. Returns the step mode.
  Result<UpdateMode> BeginPush(const proto::Push& msg, const SliceInfos& info,
                               std::vector<bool>* on_arrival) const;
  // Sync and bounded-staleness requests must name their worker and clock.
  Status CheckTag(const char* op, int32_t worker, int64_t clock) const;
  // Sync steps: OK unless a sync-class item of `msg` is for an update its shard has not
  // reached (the worker is ahead of it, e.g. of a shard a Restore moved back).
  Status CheckNotAhead(const proto::Push& msg, const SliceInfos& info);

  enum class Contribution {
    kStale,     // for an update the shard has applied (a backup's): dropped, counted
    kRepeat,    // this worker's gradient for the update is in already: skipped
    kAdded,     // summed; the update waits for more workers
    kComplete,  // summed, and the update has its replicas: apply `*average`, then Advance
  };
  // A sync-class shard's average, valid until Advance: [rows * cols] for a whole-shard
  // gradient, and/or `rows` with `row_values` [rows.size() * cols].
  struct Average {
    int64_t version = 0;  // the update it makes
    std::span<const float> dense;
    std::span<const int64_t> rows;
    std::span<const float> row_values;
  };
  // The gradient `grad` of worker `worker` for update `update` of shard `key`, whose
  // rows are `item`'s (all_rows: the whole shard) of `cols` floats each.
  Contribution Contribute(const ShardKey& key, const proto::Slice& item, int64_t update,
                          int32_t worker, std::span<const float> grad, size_t cols,
                          Average* average);
  // The shard's update is decided (applied, or dropped when the store refused it: the
  // shard moves on either way, so no worker waits for it forever): the next one starts.
  void Advance(const ShardKey& key);

  // Bounded staleness: worker `worker` pushed its step `clock` (idle: it is out of work).
  void Pushed(int32_t worker, int64_t clock, bool idle);

  enum class PullVerdict { kServe, kWait, kFail };
  // A pull arrived. kServe: answer it now (a pull without a clock reads what is there);
  // kWait: parked under `ticket` (msg and info moved in) until ReleaseReady hands it
  // back; kFail: answer *why (a bad tag, or pulls released).
  PullVerdict ArrivePull(proto::Pull& msg, SliceInfos& info, uint64_t ticket, Status* why);
  // The versions a pull's reply reports (sync steps: each item's shard's, INT64_MAX for
  // a hybrid job's async class; none otherwise): the data read after is at least as new.
  void Versions(const proto::Pull& msg, const SliceInfos& info, std::vector<int64_t>* out) const;
  // Appends to `ready` the parked pulls that may be served now.
  void ReleaseReady(Waiting* ready);
  // A ps is down (ReleasePulls): hands back every parked pull, and a pull that would
  // wait fails with `why` until the next Restored or Configure.
  void ReleasePulls(Status why, Waiting* failed);
  // Shutdown: hands back every parked pull.
  void ReleaseAll(Waiting* failed);

  // ---- Both parts (both serialized), with the fence held exclusively ----

  // The ps was restored to the checkpoint of step `step`: every mark is forgotten (the
  // steps after it run again), sync shards start at update `step`, every worker holds
  // nobody back until heard from again, pulls may wait again, the Restore count rises
  // (CheckPart) and every parked pull is handed back in `failed`.
  void Restored(int64_t step, Waiting* failed);

  // Mode part: the figures (sync_shards and applied_on_arrival are the shell's).
  UpdateStats Stats() const;
  size_t waiting() const { return parked_.size(); }

 private:
  struct SyncShard {
    int64_t version = 0;
    std::vector<int32_t> workers;                   // who contributed to `version`
    std::vector<float> dense_sum;                   // whole-shard pushes: [rows * cols]
    std::unordered_map<int64_t, size_t> row_index;  // sparse: shard-local row -> position
    std::vector<int64_t> rows;                      // sparse: rows in order of first push
    std::vector<float> row_sum;                     // sparse: [rows.size() * cols]
  };
  // The steps of one (shard, worker) applied: bit i of the words is step base + i; every
  // step below base counts as applied (base: the last Save's step, rounded down to 64).
  struct AppliedMarks {
    int64_t base = 0;
    std::vector<uint64_t> bits;
  };

  bool SyncClass(bool sparse) const { return update_.ModeOf(sparse) == UpdateMode::kSync; }
  SyncShard& SyncState(const ShardKey& key);
  int64_t VersionOf(const proto::Slice& item) const;
  bool Ready(const proto::Pull& msg, const SliceInfos& info, int64_t step);
  void Seen(int32_t w, int64_t step);
  // Worker `w`'s step `clock` on this ps's scale. A worker process counts from 0; a
  // restarted one continues at the count its predecessor reached here, so it neither
  // waits for nor stalls the others.
  int64_t WorkerClock(int32_t w, int64_t clock);
  void TakeParked(Waiting* out);

  // Fence part.
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> restores_{0};
  std::atomic<int> long_ops_{0};
  std::atomic<UpdateMode> mode_{UpdateMode::kAsync};  // update_.StepMode()
  std::atomic<uint64_t> inline_max_bytes_{0};

  // Marks part: (shard, worker or -1) -> its marks.
  std::map<std::pair<ShardKey, int32_t>, AppliedMarks> applied_;
  bool window_logged_ = false;

  // Mode part.
  UpdateSpec update_;
  bool configured_ = false;
  int64_t base_version_ = 0;  // sync: the version of shards not pushed since Restore
  std::map<ShardKey, SyncShard> sync_;
  std::vector<int64_t> clocks_;   // bounded staleness: [worker] steps pushed; -1 unknown
  std::vector<int64_t> offsets_;  // [worker] added to a restarted worker's own count
  std::vector<int64_t> seen_;     // [worker] the highest step heard of; -1 none
  std::vector<int64_t> idle_at_;  // [worker] idle from this step on (holds nobody back); -1 busy
  int64_t max_lead_ = 0;
  uint64_t waited_pulls_ = 0;
  uint64_t stale_ = 0;
  Waiting parked_;
  // Set by ReleasePulls: a pull that would wait fails with this instead.
  std::optional<Status> pulls_released_;
};

}  // namespace ps::server

// The in-memory parameter store of one ps task: variable shards, their optimizer slots,
// and the optimizer that applies pushed gradients. No networking; the ps service calls
// this API from its connection threads.
//
// Shapes: a shard holds `rows` consecutive rows of axis 0 of its variable, starting at
// global row `row_begin`; a row is `cols` floats (cols = product of full_shape[1:]).
// Values and every slot are one contiguous, 64-byte-aligned, row-major array
// [rows * cols] each. Row indices in PullRows/PushRows are shard-local (global row minus
// row_begin).
//
// Thread safety: every method may be called from any thread concurrently.
//  - Each shard's rows are split into up to 32 stripes of consecutive rows, each with a
//    mutex. Pull/Push/PullRows/PushRows hold one stripe lock at a time, so sparse pushes
//    to different parts of a big table run in parallel.
//  - Contract: every row is updated atomically with its slots. A pull sees each row
//    either wholly before or wholly after any given push — never a half-applied row —
//    but a pull of several rows may see a concurrent push applied to some rows and not
//    yet to others (TF's ps has no stronger guarantee). Pushes to the same row are
//    serialised, in an unspecified order.
//  - Create/Configure/Restore/ForEachShard hold the locks they need; Create of one shard
//    does not block traffic to others while it initialises values.
//
// Errors: unknown shard → NotFound; wrong buffer sizes, duplicate rows, bad defs →
// InvalidArgument; row outside the shard → OutOfRange; Create of an existing key with a
// different def → AlreadyExists; Create before Configure → FailedPrecondition. Every
// message names the shard as "<var>/part_<shard>".
//
// Zero-copy: Push/PushRows read the gradient in place from the caller's buffer (e.g. the
// receive buffer of a frame) and Pull/PullRows write straight into the caller's buffer
// (e.g. a send buffer); no intermediate copies. PullBorrowed lends a dense shard's values
// to a callback under the shard's locks instead: the ps writes them from there to the
// socket (server::Service, a big inline pull), copying only what the socket does not take.
//
// Lazy shards (ShardLayout::lazy, for hashed ids): no row is allocated up front. A row is
// created by the first PushRows that names it, at its initial value (model::FillInitial
// for that global row, exactly what a dense shard holds) with initial slots, and then
// updated. PullRows of a row not created yet returns its initial value without creating
// it, so a lazy and a dense shard of the same def train bit-identically. Created rows are
// dropped only by a restore or by eviction (below). Whole-shard Pull/Push/Restore of a
// lazy shard are InvalidArgument; checkpoints go through Read (ShardView::row_ids) and Fill
// (ShardFill::CreateRows). Storage (lazy_rows.h): 32 stripes chosen by a hash of the
// row, each an open-addressing table of 16-byte entries row -> (record reference, change
// epoch) (linear probing, load <= 0.7), and one record arena per shard (chunks doubling up
// to one 2 MiB huge page); a record is the row's values then each slot, (1 + slots) * cols
// floats (+ the stamp below), at a stable address. PullRows/PushRows look rows
// up stripe by stripe, prefetching probe slots and records a few rows ahead. Arrays of
// 2 MiB and more (dense values and slots, lazy tables and chunks) are advised as
// transparent huge pages. Memory() reports the bytes used. Records are named by 32-bit
// references, so a lazy shard holds at most about 2^31 to 2^32 rows (just under 2^32
// for 128-byte records; RecordArena::max_records); a push creating more fails with
// Internal "lazy shard full: at most N records", as it does "out of memory" when memory
// runs out first.
//
// Admission and eviction (ShardDef::row_policy, lazy shards only; model/row_policy.h).
//  - Admission (admit_min_count N > 1): a PushRows of a row not created yet counts the
//    row's id in the stripe's AdmitSketch (lazy_rows.h: a counting Bloom filter, 16 KiB
//    per stripe, 512 KiB per shard) and drops its gradient (rows_not_admitted) until the
//    estimate reaches N: that push creates the row (rows_admitted), applies its
//    gradient, and takes N off the id's counters. A row not admitted pulls its initial
//    value, as any row never created. The estimate is exact unless all 4 counters of the
//    id are shared with other pending ids (then it may be admitted early, probability at
//    most occupancy^4 <= 6.25%); aging halves a stripe's counters when over half are
//    non-zero, which may delay an id that is pushed rarely. Pulls do not count.
//  - Eviction (ttl_steps T, max_rows M): records then carry the row clock at their last
//    push (4 bytes after the slots; a late push of an old step counts as recent). After
//    a lazy push, a shard is swept when its ttl sweep is due (every max(1, T / 8) steps
//    of the row clock) or when it holds more than M' + M' / 16 rows, M' = ceil(M /
//    num_shards): by the pushing thread, or by the sweep runner's thread when one is set
//    (SetSweepRunner; pstrain-ps sets one), one stripe lock at a time, last stripe first,
//    while other threads keep pulling and pushing (a pushing thread that finds a sweep
//    running goes on). A sweep evicts the rows whose last push is more than T steps
//    behind the row clock, then the least recently pushed rows beyond M' (ties broken by
//    stripe, last first). EvictRows sweeps exactly (checkpoints call it). An evicted row's
//    record is reused; the row pulls its initial value again and, with admission, must
//    be admitted anew.
//  - Restore (ShardFill::DropRows) clears the shard's sketch (pending counts are lost);
//    ResetRowClock then stamps the restored rows as pushed at the checkpoint step.
//
// Design room for later modes (not implemented): "receive a gradient" (validate, look up
// the shard, compute lr) and "apply a gradient" (ApplyDense/ApplySparse under stripe
// locks) are separate private steps, so synchronous aggregation (accumulate N workers'
// gradients for a step into a per-shard buffer, then apply once), at-most-once
// application per (step id, shard) (a filter in front of apply), bounded staleness (a
// per-shard version counter bumped by apply, waited on by pull) slot in without changing
// the public calls below.
#pragma once

#include <array>
#include <atomic>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "libps/cluster/shard_layout.h"
#include "libps/core/status.h"
#include "libps/model/initializer.h"
#include "libps/model/row_policy.h"
#include "libps/server/optimizer.h"

namespace ps::server {

struct ShardKey {
  std::string var;
  int shard = 0;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>
  auto operator<=>(const ShardKey&) const = default;
  // "<var>/part_<shard>", as TF names partitions.
  std::string ToString() const;
};

// One shard as the store holds it: its layout, and how its initial values are drawn.
struct ShardDef {
  cluster::ShardLayout layout;  // lazy: see "Lazy shards" above
  model::InitSpec init;
  uint64_t seed = 0;                 // with var, row and col, determines initial values
  model::RowPolicy row_policy = {};  // lazy only: admission and eviction (see below)
  // The variable is pulled and pushed by rows (model::VariableDef::sparse): the "sparse"
  // class of a hybrid update (update.h). The store itself does not look at it.
  bool sparse = false;
  ShardKey key() const { return {layout.var, layout.shard}; }
  // Sparse class: `sparse`, or any lazy shard (always pushed by rows).
  bool sparse_class() const { return sparse || layout.lazy; }
  bool operator==(const ShardDef&) const = default;
};

// Checks a def on its own: cluster::ValidateShardLayout, then the initializer.
Status ValidateShardDef(const ShardDef& def);

// Monotonic counters since the store was built; bytes are payload floats * 4.
struct StoreStats {
  uint64_t pull_requests = 0;    // Pull + PullRows that succeeded
  uint64_t push_requests = 0;    // Push + PushRows that succeeded
  uint64_t failed_requests = 0;  // any of the four that returned an error
  uint64_t bytes_pulled = 0;
  uint64_t bytes_pushed = 0;  // gradient bytes applied
  uint64_t rows_pulled = 0;
  uint64_t rows_pushed = 0;
  // Lazy shards ("Admission and eviction"): rows created by an admitting push, gradient
  // rows dropped because their row was not admitted yet, rows evicted by ttl_steps and by
  // max_rows (sweeps and EvictRows).
  uint64_t rows_admitted = 0;
  uint64_t rows_not_admitted = 0;
  uint64_t rows_evicted_ttl = 0;
  uint64_t rows_evicted_max_rows = 0;
  // Gauges: lazy shards held, and their created rows now.
  int64_t lazy_shards = 0;
  int64_t live_rows = 0;
};

// A shard as ForEachShard/Read show it; spans are valid only inside the callback.
struct ShardView {
  const ShardDef& def;
  std::span<const float> values;  // [rows * cols]; empty for a lazy shard
  // In SlotDefs(optimizer) order, each [rows * cols]; the spans are empty for a lazy shard.
  std::vector<std::pair<std::string, std::span<const float>>> slots;
  // Lazy shards only: the created rows, shard-local, ascending [created rows].
  std::span<const int64_t> row_ids;
  // Lazy shards only: block b of created row row_ids[i], [cols] floats; block 0 is the
  // values, block 1 + k is slot k (the order of `slots`).
  std::function<std::span<const float>(size_t i, size_t block)> row;
  // Change epochs (Store, "Change epochs"): dense shards, each row's [rows]; lazy shards,
  // created row row_ids[i]'s, and the (row, epoch) of rows evicted since they were last
  // forgotten (Store::ForgetEvictions), in eviction order.
  std::span<const uint32_t> row_epochs;
  std::function<uint32_t(size_t i)> row_epoch;
  std::span<const std::pair<int64_t, uint32_t>> evicted;
};

// Memory held by one shard (Store::Memory).
struct ShardMemory {
  int64_t rows = 0;  // rows allocated: def.rows for a dense shard, created rows if lazy
  uint64_t bytes =
      0;  // values, slots, change epochs (dense), and for a lazy shard its row tables and chunk slack
};

// A slot's contents for Restore.
struct NamedSlot {
  std::string name;
  std::span<const float> values;  // [rows * cols]
};

class Store {
 public:
  Store();
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sets the optimizer once. Again with an equal spec: OK; with a different spec:
  // FailedPrecondition. Invalid spec: InvalidArgument.
  Status Configure(const OptimizerSpec& spec);
  // The configured optimizer; FailedPrecondition before Configure.
  Result<OptimizerSpec> optimizer() const;

  // Creates values (initialised per def.init) and the optimizer's slots (at their
  // initial values). Idempotent for an equal def; a different def for an existing key is
  // AlreadyExists. Requires Configure first.
  Status Create(const ShardDef& def);
  // Tests only, before Create on the same thread: lazy shards created from now on hold
  // at most this many record chunks (RecordArena's max_chunks; one chunk = the first 16
  // records), so that row creation fails as when memory runs out.
  void SetLazyChunkLimitForTesting(size_t chunks) { lazy_chunk_limit_ = chunks; }

  // Whole shard into out [rows * cols]. `copied`, if set, is called after each stripe
  // with the floats of `out` now final (from its start), holding no stripe lock.
  Status Pull(const ShardKey& key, std::span<float> out,
              const std::function<void(size_t)>& copied = nullptr);
  // Pull without the copy: calls fn once with the shard's values [rows * cols] while
  // holding the store's structure lock (shared) and every stripe lock of the shard (one
  // shard's at most: ThreadSanitizer tracks 64 held locks), so fn sees every row wholly
  // before or after any push, as Pull does. Pushes to the shard wait meanwhile: fn must
  // be quick, must not block and must not call into this Store. Counted as a Pull; the
  // same errors (fn is then not called).
  Status PullBorrowed(const ShardKey& key, const std::function<void(std::span<const float>)>& fn);
  // Shard-local rows into out [rows.size() * cols], in the order given (duplicates allowed).
  Status PullRows(const ShardKey& key, std::span<const int64_t> rows, std::span<float> out);

  // Applies the optimizer to the whole shard with gradient grad [rows * cols], using the
  // learning rate LearningRate(spec, global_step) (and global_step for Adam's bias
  // correction). The store's own global_step() is not changed.
  Status Push(const ShardKey& key, std::span<const float> grad, int64_t global_step);
  // Part of a whole-shard push: rows [row_begin, row_begin + grad.size() / cols) with
  // their gradient (whole rows, InvalidArgument otherwise), applied as Push would apply
  // them. A push applied in parts (Service's early apply) counts as one request: the part
  // with `first` set counts it; bytes and rows count for every part.
  Status PushPart(const ShardKey& key, int64_t row_begin, std::span<const float> grad,
                  int64_t global_step, bool first);
  // Sparse form: grad_rows [rows.size() * cols], row i of it for shard-local row rows[i].
  // Rows must be unique (InvalidArgument naming the duplicate) and in range
  // (OutOfRange); on any error nothing is applied. Only the given rows and their slots
  // change.
  Status PushRows(const ShardKey& key, std::span<const int64_t> rows,
                  std::span<const float> grad_rows, int64_t global_step);

  bool Contains(const ShardKey& key) const;
  Result<ShardDef> GetDef(const ShardKey& key) const;
  // Rows allocated and bytes used; takes each stripe lock in turn.
  Result<ShardMemory> Memory(const ShardKey& key) const;
  std::vector<ShardKey> Keys() const;  // sorted

  // Calls fn with one shard while holding all its stripe locks (a consistent snapshot of
  // that shard; pushes to it wait). fn must not call into this Store.
  Status Read(const ShardKey& key, const std::function<void(const ShardView&)>& fn) const;
  // Read for every shard, in key order; shards created meanwhile may be missed.
  void ForEachShard(const std::function<void(const ShardView&)>& fn) const;

  // Overwrites a created shard's values [rows * cols] and the named slots (each must be
  // one of SlotDefs(optimizer)); slots not given are reset to their initial value, so a
  // checkpoint written with another optimizer can be loaded by passing no slots.
  // InvalidArgument for a lazy shard (use Fill).
  Status Restore(const ShardKey& key, std::span<const float> values,
                 std::span<const NamedSlot> slots);

  struct Shard;  // private: defined in store_shard.h
  class ShardFill;
  // Rows a ShardFill::CreateRows made, in its order: their records, for WriteRows. Valid
  // until that shard is next pushed, swept or has its rows dropped (server::Service runs a
  // Restore holding both its inline gate and its push fence exclusively, so no push of
  // any kind happens while it fills, and ShardCheckpointer::Restore holds PauseSweeps, so
  // no handed-over sweep runs). Movable.
  class CreatedRows {
   public:
    size_t size() const { return records_.size(); }

   private:
    friend class ShardFill;
    const Shard* shard_ = nullptr;
    std::vector<float*> records_;
  };
  // Exclusive, in-place access to one shard's memory, so a checkpoint is read straight
  // into the store (no temporary buffer, no copy). Holds every stripe lock of the shard
  // (and the store's structure lock, shared) until destroyed. What it does not write keeps
  // its contents: a restore that reshards fills a shard piece by piece, over several
  // ShardFills (ckpt/store_io.h checks that every row of values and slots was written).
  // Not movable; one per thread at a time.
  class ShardFill {
   public:
    ~ShardFill();
    ShardFill(const ShardFill&) = delete;
    ShardFill& operator=(const ShardFill&) = delete;
    const ShardDef& def() const;
    // Dense shards only (empty for a lazy shard).
    std::span<float> values();  // [rows * cols]
    // The named slot's memory; InvalidArgument if the optimizer has no such slot, or for
    // a lazy shard.
    Result<std::span<float>> Slot(std::string_view name);
    // Sets the named slot of rows [first, first + rows) to the slot's initial value (a
    // checkpoint without that slot); the same errors as Slot, OutOfRange outside the shard.
    Status InitSlot(std::string_view name, int64_t first, int64_t rows);

    // Lazy shards only (InvalidArgument otherwise), as all three below. Drops every
    // created row and clears the admission sketch (pending counts are lost).
    Status DropRows();
    // Creates `rows` (shard-local, unique (InvalidArgument), in range (OutOfRange), none
    // created already (AlreadyExists)) at their initial values and slots, stamped as
    // pushed at step 0 (Store::ResetRowClock stamps them after a restore), and appends
    // their records to `created` in the order given.
    Status CreateRows(std::span<const int64_t> rows, CreatedRows* created);
    // Copies data [n * cols] into `block` ("values" or a slot name) of rows
    // [first, first + n) of `created` (made by CreateRows on this shard). A slot the
    // optimizer lacks is InvalidArgument; rows outside `created` OutOfRange.
    Status WriteRows(const CreatedRows& created, std::string_view block, int64_t first,
                     std::span<const float> data);
    // Delta checkpoints: drops `rows` that are created (others are ignored), and makes
    // `created` hold the records of `rows` (created as by CreateRows when missing, else
    // the existing ones, epoch reset to 0), in the order given.
    Status EraseRows(std::span<const int64_t> rows);
    Status UpsertRows(std::span<const int64_t> rows, CreatedRows* created);

   private:
    friend class Store;
    ShardFill(std::shared_lock<std::shared_mutex> lock, Shard* shard);
    std::shared_lock<std::shared_mutex> lock_;
    Shard* shard_;
  };
  Result<std::unique_ptr<ShardFill>> Fill(const ShardKey& key);

  // Admission and eviction. The row clock is the highest global step any PushRows was
  // given (the step ttl_steps counts in); ResetRowClock sets it (after a restore) and
  // stamps every created row of every evicting shard as pushed at `step`.
  int64_t row_clock() const { return row_clock_.load(std::memory_order_acquire); }
  void ResetRowClock(int64_t step);
  // Sweeps every evicting lazy shard now, exactly: rows older than ttl_steps and rows
  // beyond max_rows (least recently pushed first) are evicted. Checkpoints call it before
  // writing, so they hold only live rows. Takes one stripe lock at a time.
  void EvictRows();
  // Where the sweeps that pushes find due run. By default the push that finds one sweeps
  // the shard before it returns (a scan of every row of the shard). With a runner, that
  // push hands the sweep to `run` instead and returns at once; `run` must call the work
  // it is given once, on another thread, while the store exists. At most one sweep per
  // shard is handed over at a time. Set before the store serves other threads (a ps sets
  // it at start); null restores the default. EvictRows is unaffected.
  using SweepRunner = std::function<void(std::function<void()>)>;
  void SetSweepRunner(SweepRunner run) { sweep_runner_ = std::move(run); }
  // Holds off the sweeps handed over while it is held: it waits for one under way, and a
  // handed-over sweep that starts meanwhile does nothing (the next push hands it over
  // again). A restore holds it until ResetRowClock has stamped the restored rows: before
  // that they carry step 0 and a sweep at the old row clock would evict them.
  [[nodiscard]] std::unique_lock<std::shared_mutex> PauseSweeps() {
    return std::unique_lock(sweeps_mu_);
  }

  // Change epochs, for delta checkpoints. Every push stamps the rows it changes with the
  // current epoch (dense: a u32 per row; lazy: a u32 in the row's table entry); an eviction is
  // logged with it. A checkpoint, with training paused, calls BeginEpoch: the epoch it
  // returns, E, ends (rows changed from now on are stamped > E), so a later delta against
  // that checkpoint writes the rows stamped > E and the evictions logged > E. Nothing is
  // cleared when a checkpoint is written: a delta that is never committed costs nothing,
  // the next one (against the same parent) simply includes its rows again. Rows restored
  // by ShardFill are stamped 0. ForgetEvictions drops logged evictions <= upto (no
  // checkpoint a delta may still be based on is older).
  uint32_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  uint32_t BeginEpoch();
  void ForgetEvictions(uint32_t upto);

  // A step counter kept for the service and checkpoints; Push does not advance it.
  int64_t global_step() const { return global_step_.load(std::memory_order_acquire); }
  void SetGlobalStep(int64_t step) { global_step_.store(step, std::memory_order_release); }

  StoreStats stats() const;

 private:
  // Under a shared lock of mu_: the shard or NotFound naming `op` and the key.
  Result<Shard*> Find(const ShardKey& key, const char* op) const;
  // The "apply" half of a push: grad (whole rows from row_begin) already validated
  // against the shard.
  void ApplyDense(Shard& shard, int64_t row_begin, std::span<const float> grad,
                  int64_t global_step);
  // Push (part_begin nullopt) and PushPart; `count_request`: counts a push request.
  Status PushDense(const ShardKey& key, std::optional<int64_t> part_begin,
                   std::span<const float> grad, int64_t global_step, bool count_request);
  void ApplySparse(Shard& shard, std::span<const int64_t> rows, std::span<const float> grad_rows,
                   int64_t global_step);
  // ApplySparse for a lazy shard: creates missing rows first (admitted rows only, when the
  // shard admits) and, when it evicts, stamps every row pushed with `stamp` (the row
  // clock). Internal on out of memory (the rows before the failing one are then applied).
  Status ApplyLazy(Shard& shard, std::span<const int64_t> rows, std::span<const float> grad_rows,
                   int64_t global_step, int64_t stamp);
  // Counts a request's bytes and rows (and the request unless `request` is false: a later
  // part of one), or a failure.
  Status Count(Status st, bool pull, uint64_t bytes, uint64_t rows, bool request = true);
  // After a lazy push: when a sweep of `shard` is due, sweeps it unless another thread
  // does, or hands it to the sweep runner unless one is handed over already.
  void MaybeSweep(Shard& shard);
  static bool SweepDue(const Shard& shard, int64_t now);
  // The runner's work for the shard of `key`: sweeps it if a sweep is still due.
  void SweepHandedOver(const ShardKey& key);
  // One sweep at row clock `now`; sweep_mu held. `exact`: down to max_rows (else to
  // max_rows only once it is exceeded by more than a sixteenth).
  void Sweep(Shard& shard, int64_t now, bool exact);
  // Erases `victims` from stripe k (its lock held), logging each for delta checkpoints.
  // Counts them in the shard's live rows and in `counter` (evicted_ttl_ or
  // evicted_max_rows_); nothing throws once a row is erased.
  uint64_t Evict(Shard& shard, int64_t k, std::span<const int64_t> victims,
                 std::atomic<uint64_t>& counter);

  mutable std::shared_mutex mu_;  // guards shards_ (structure) and spec_
  std::optional<OptimizerSpec> spec_;
  std::map<ShardKey, std::unique_ptr<Shard>> shards_;

  std::atomic<int64_t> global_step_{0};
  std::atomic<int64_t> row_clock_{0};
  SweepRunner sweep_runner_;
  std::shared_mutex sweeps_mu_;  // PauseSweeps (unique), a handed-over sweep (shared); before mu_
  std::atomic<uint32_t> epoch_{1};
  std::atomic<uint64_t> rows_admitted_{0}, rows_not_admitted_{0}, evicted_ttl_{0},
      evicted_max_rows_{0};
  size_t lazy_chunk_limit_ = SIZE_MAX;
  std::atomic<uint64_t> pull_requests_{0}, push_requests_{0}, failed_requests_{0};
  std::atomic<uint64_t> bytes_pulled_{0}, bytes_pushed_{0}, rows_pulled_{0}, rows_pushed_{0};
};

}  // namespace ps::server

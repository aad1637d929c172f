// UpdateMachine driven call by call, without a store, sockets or threads: each scenario is
// the sequence of events the Service feeds it and the decisions it must give back.
#include <catch2/catch.hpp>

#include "libps/server/update_machine.h"

using namespace ps;
using namespace ps::server;
using M = UpdateMachine;

namespace {

const ShardKey kDense{"w", 0};
const ShardKey kEmb{"emb", 0};

proto::Slice Whole(const ShardKey& k) {
  proto::Slice s;
  s.var = k.var;
  s.shard = k.shard;
  return s;
}
proto::Slice Rows(const ShardKey& k, std::vector<int64_t> rows) {
  proto::Slice s = Whole(k);
  s.all_rows = false;
  s.rows = std::move(rows);
  return s;
}
SliceInfo DenseInfo() { return {.floats = 2, .rows = 1, .cols = 2}; }
SliceInfo SparseInfo(size_t rows) {
  return {.floats = rows * 2, .rows = 10, .cols = 2, .sparse = true};
}

UpdateSpec Spec(UpdateMode mode, int workers, int replicas = 0, int staleness = 4) {
  UpdateSpec s;
  s.mode = mode;
  s.num_workers = workers;
  s.replicas_to_aggregate = replicas;
  s.staleness = staleness;
  return s;
}

void Configure(M& m, const UpdateSpec& spec) {
  M::Waiting failed;
  m.Configure(spec, &failed);
  REQUIRE(failed.empty());
}

proto::Pull PullOf(std::vector<proto::Slice> items, int32_t worker, int64_t clock) {
  return {.items = std::move(items), .worker = worker, .clock = clock};
}

// Arrives a pull and returns the verdict (the pull is moved in when it waits).
M::PullVerdict Arrive(M& m, proto::Pull msg, SliceInfos info, uint64_t ticket,
                      Status* why = nullptr) {
  Status ignored;
  return m.ArrivePull(msg, info, ticket, why != nullptr ? why : &ignored);
}

std::vector<uint64_t> Tickets(const M::Waiting& w) {
  std::vector<uint64_t> t;
  for (const auto& p : w) t.push_back(p.ticket);
  std::sort(t.begin(), t.end());
  return t;
}

// A dense sync contribution of worker `w` for update `u` with gradient {g, g}.
M::Contribution Give(M& m, int32_t w, int64_t u, float g, M::Average* avg) {
  const std::vector<float> grad{g, g};
  return m.Contribute(kDense, Whole(kDense), u, w, grad, 2, avg);
}

}  // namespace

TEST_CASE("update machine, async: pushes apply on arrival once per step, pulls never wait") {
  M m;
  CHECK(m.step_mode() == UpdateMode::kAsync);
  proto::Push push{.items = {Whole(kDense)}, .step_id = 7};
  std::vector<bool> on_arrival;
  auto mode = m.BeginPush(push, {DenseInfo()}, &on_arrival);
  REQUIRE(mode.ok());
  CHECK(*mode == UpdateMode::kAsync);
  CHECK(on_arrival == std::vector<bool>{true});
  CHECK(*m.Mark(kDense, -1, 7));
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 3), {DenseInfo()}, 1) == M::PullVerdict::kServe);
  std::vector<int64_t> versions;
  m.Versions(PullOf({Whole(kDense)}, 0, 3), {DenseInfo()}, &versions);
  CHECK(versions.empty());
  CHECK(m.waiting() == 0);
  // An untracked step (no step id) is always applied.
  CHECK(*m.Mark(kDense, -1, -1));
  CHECK(*m.Mark(kDense, -1, -1));
}

TEST_CASE("update machine: a duplicate push is skipped; the store refusing it unmarks it") {
  M m;
  CHECK(*m.Mark(kDense, -1, 5));
  CHECK_FALSE(*m.Mark(kDense, -1, 5));  // resent after a lost reply
  CHECK(*m.Mark(kEmb, -1, 5));          // another shard: its own marks
  m.Unmark(kEmb, -1, 5);                // the store refused it
  CHECK(*m.Mark(kEmb, -1, 5));          // so its retry applies it
  CHECK(m.mark_words() == 2);
}

TEST_CASE("update machine: a duplicate combined push+pull is skipped and its pull still served") {
  M m;
  proto::Push push{.items = {Whole(kDense)}, .step_id = 9};
  push.pull = PullOf({Whole(kDense)}, -1, -1);
  std::vector<bool> on_arrival;
  REQUIRE(m.BeginPush(push, {DenseInfo()}, &on_arrival).ok());
  CHECK(*m.Mark(kDense, -1, 9));
  // The reply was lost; the worker resends push and pull together.
  REQUIRE(m.BeginPush(push, {DenseInfo()}, &on_arrival).ok());
  CHECK_FALSE(*m.Mark(kDense, -1, 9));
  CHECK(Arrive(m, *push.pull, {DenseInfo()}, 1) == M::PullVerdict::kServe);
  // Outside async mode a pull after a push is refused before anything is applied.
  Configure(m, Spec(UpdateMode::kSync, 2));
  push.worker = 0;
  push.clock = 0;
  auto r = m.BeginPush(push, {DenseInfo()}, &on_arrival);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
}

TEST_CASE("update machine: a Save trims the marks below it; 2^28 steps past it is refused") {
  M m;
  for (int64_t s = 0; s < 200; ++s) REQUIRE(*m.Mark(kDense, -1, s));
  CHECK(m.mark_words() >= 4);
  m.Saved(130);  // whole words: base 128
  CHECK(m.mark_words() >= 1);
  CHECK(m.mark_words() < 4);
  CHECK_FALSE(*m.Mark(kDense, -1, 20));  // below the checkpoint: a repeat
  CHECK_FALSE(*m.Mark(kDense, -1, 150));
  CHECK(*m.Mark(kDense, -1, 200));
  auto far = m.Mark(kDense, -1, 128 + M::kTrackedSteps);
  REQUIRE_FALSE(far.ok());
  CHECK(far.status().code() == Code::kFailedPrecondition);
}

TEST_CASE("update machine: generations fence a dead chief's late push and its takeover") {
  M m;
  CHECK(m.CheckGeneration(1, true) == M::GenCheck::kRaised);  // the first chief
  CHECK(m.CheckGeneration(1, true) == M::GenCheck::kOk);
  CHECK(m.CheckGeneration(1, false) == M::GenCheck::kOk);
  // A worker's push of generation 1 passes its check (the shell holds the fence)...
  // ...then a new chief takes over: the shell must drain the fence before handling it.
  CHECK(m.CheckGeneration(2, true) == M::GenCheck::kRaised);
  CHECK(m.generation() == 2);
  // A late push from the dead chief's steps, and the dead chief itself, are refused.
  CHECK(m.CheckGeneration(1, false) == M::GenCheck::kStale);
  CHECK(m.CheckGeneration(1, true) == M::GenCheck::kStale);
  CHECK(m.generation() == 2);
  // A worker already on the new generation goes on.
  CHECK(m.CheckGeneration(2, false) == M::GenCheck::kOk);
}

TEST_CASE("update machine: a CreateShards that raises the generation waits for a fenced push") {
  M m;
  REQUIRE(m.CheckGeneration(3, true) == M::GenCheck::kRaised);
  // An early push of generation 3 took its ticket under the fence.
  auto ticket = m.EarlyBegin(3);
  REQUIRE(ticket);
  CHECK(m.CheckPart(*ticket) == M::PartCheck::kOk);
  // The new chief's CreateShards: kRaised tells the shell to take the fence exclusively,
  // i.e. to wait for the push holding it; a part checked after the takeover fails.
  CHECK(m.CheckGeneration(4, true) == M::GenCheck::kRaised);
  CHECK(m.CheckPart(*ticket) == M::PartCheck::kNewChief);
  // A push of the old generation does not start early.
  CHECK_FALSE(m.EarlyBegin(3));
  // The same chief's next request does not wait again.
  CHECK(m.CheckGeneration(4, true) == M::GenCheck::kOk);
}

TEST_CASE("update machine: an early-applied push cut off mid-payload counts as applied") {
  M m;
  REQUIRE(m.CheckGeneration(1, true) == M::GenCheck::kRaised);
  proto::Push push{.items = {Whole(kDense), Whole(kEmb)}, .step_id = 11};
  REQUIRE(m.EarlyCandidate(push, false, false, false));
  auto ticket = m.EarlyBegin(1);
  REQUIRE(ticket);
  CHECK(*m.Mark(kDense, -1, 11));  // marked at once, before any row arrives
  CHECK(*m.Mark(kEmb, -1, 11));
  CHECK(m.EarlyPartOpen());
  CHECK(m.CheckPart(*ticket) == M::PartCheck::kOk);  // the first part applies
  // The connection drops before the rest: the retry of step 11 is acknowledged as
  // applied, so no gradient value is applied twice.
  CHECK_FALSE(*m.Mark(kDense, -1, 11));
  CHECK_FALSE(*m.Mark(kEmb, -1, 11));
  // A Restore while a push arrives fails its remaining parts and forgets the marks.
  auto second = m.EarlyBegin(1);
  REQUIRE(second);
  CHECK(*m.Mark(kDense, -1, 12));
  M::Waiting failed;
  m.Restored(0, &failed);
  CHECK(m.CheckPart(*second) == M::PartCheck::kRestored);
  CHECK(*m.Mark(kDense, -1, 12));
}

TEST_CASE("update machine: which pushes may start early") {
  M m;
  proto::Push push{.items = {Whole(kDense)}, .step_id = 1};
  CHECK(m.EarlyCandidate(push, false, false, false));
  CHECK_FALSE(m.EarlyCandidate(push, true, false, false));  // a reply frame
  CHECK_FALSE(m.EarlyCandidate(push, false, true, false));  // a chief's
  CHECK_FALSE(m.EarlyCandidate(push, false, false, true));  // the testing hook
  proto::Push untracked{.items = {Whole(kDense)}, .step_id = -1};
  CHECK_FALSE(m.EarlyCandidate(untracked, false, false, false));
  proto::Push combined = push;
  combined.pull = PullOf({Whole(kDense)}, -1, -1);
  CHECK_FALSE(m.EarlyCandidate(combined, false, false, false));
  proto::Push empty;
  empty.step_id = 1;
  CHECK_FALSE(m.EarlyCandidate(empty, false, false, false));  // no items
  Configure(m, Spec(UpdateMode::kBoundedStaleness, 2));
  CHECK_FALSE(m.EarlyCandidate(push, false, false, false));
}

TEST_CASE(
    "update machine: the fast paths' decision sequences: inline, direct and progressive pulls") {
  M m;
  m.SetInlineMaxBytes(1000);
  REQUIRE(m.CheckGeneration(2, true) == M::GenCheck::kRaised);
  const M::InlineAsk pull{.generation = 2};
  CHECK(m.InlineCandidate(pull));
  CHECK(m.InlineOpen());
  CHECK(m.InlineFits(1000));
  CHECK_FALSE(m.InlineFits(1001));
  CHECK_FALSE(m.InlineCandidate({.generation = 3}));  // newer: may wait for the fence
  CHECK(m.InlineCandidate({.push = true, .payload_bytes = 1000, .generation = 2}));
  CHECK_FALSE(m.InlineCandidate({.push = true, .payload_bytes = 1001, .generation = 2}));
  CHECK_FALSE(m.InlineCandidate({.push = true, .push_hook = true, .generation = 2}));
  // An early push has only its reply left, whatever its size; unless rows were deferred.
  CHECK(m.InlineCandidate({.push = true, .payload_bytes = 5000, .early = true, .generation = 2}));
  CHECK_FALSE(m.InlineCandidate({.push = true,
                                 .payload_bytes = 5000,
                                 .early = true,
                                 .early_deferred = true,
                                 .generation = 2}));
  // A CreateShards, Save or Restore pending closes it, and the other fast paths' gates.
  m.LongOpBegin();
  CHECK_FALSE(m.InlineOpen());
  CHECK_FALSE(m.EarlyPartOpen());
  CHECK_FALSE(m.ProgressiveOpen());
  m.LongOpEnd();
  CHECK(m.InlineOpen());
  CHECK(m.ProgressiveOpen());
  CHECK(m.DirectOpen());
  // Other modes go to the pool; direct pulls are async only.
  Configure(m, Spec(UpdateMode::kSync, 2));
  CHECK_FALSE(m.InlineOpen());
  CHECK_FALSE(m.DirectOpen());
  CHECK(m.ProgressiveOpen());
}

TEST_CASE("update machine, sync: an update's average is applied once it has every worker") {
  M m;
  Configure(m, Spec(UpdateMode::kSync, 2));
  CHECK(m.step_mode() == UpdateMode::kSync);
  // Worker 1 pulls for update 1 early: it waits for update 0 to be applied.
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 1, 1), {DenseInfo()}, 10) == M::PullVerdict::kWait);
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 0), {DenseInfo()}, 11) == M::PullVerdict::kServe);
  // A pull without a clock (evaluation) reads what is there.
  CHECK(Arrive(m, PullOf({Whole(kDense)}, -1, -1), {DenseInfo()}, 12) == M::PullVerdict::kServe);
  proto::Push push{.items = {Whole(kDense)}, .worker = 0, .clock = 0};
  std::vector<bool> on_arrival;
  REQUIRE(*m.BeginPush(push, {DenseInfo()}, &on_arrival) == UpdateMode::kSync);
  CHECK(on_arrival == std::vector<bool>{false});
  CHECK(m.CheckNotAhead(push, {DenseInfo()}).ok());
  M::Average avg;
  CHECK(Give(m, 0, 0, 1.0f, &avg) == M::Contribution::kAdded);
  CHECK(Give(m, 0, 0, 1.0f, &avg) == M::Contribution::kRepeat);  // resent
  M::Waiting ready;
  m.ReleaseReady(&ready);
  CHECK(ready.empty());
  CHECK(Give(m, 1, 0, 3.0f, &avg) == M::Contribution::kComplete);
  CHECK(avg.version == 0);
  CHECK(std::vector<float>(avg.dense.begin(), avg.dense.end()) == std::vector<float>{2.0f, 2.0f});
  CHECK(avg.rows.empty());
  m.Advance(kDense);
  m.ReleaseReady(&ready);
  CHECK(Tickets(ready) == std::vector<uint64_t>{10});
  std::vector<int64_t> versions;
  m.Versions(ready[0].msg, ready[0].info, &versions);
  CHECK(versions == std::vector<int64_t>{1});
  // A push for update 2 while the shard is at 1: the worker is ahead.
  push.clock = 2;
  CHECK(m.CheckNotAhead(push, {DenseInfo()}).code() == Code::kFailedPrecondition);
  // Without a worker and clock a sync request is refused.
  Status why;
  CHECK(Arrive(m, PullOf({Whole(kDense)}, -1, 3), {DenseInfo()}, 13, &why) ==
        M::PullVerdict::kFail);
  CHECK(why.code() == Code::kInvalidArgument);
}

TEST_CASE("update machine, sync: sparse sums add rows up and average over the workers") {
  M m;
  Configure(m, Spec(UpdateMode::kSync, 2));
  M::Average avg;
  const std::vector<float> g0{1, 1, 2, 2};  // rows 3, 5
  const std::vector<float> g1{4, 4};        // row 5
  CHECK(m.Contribute(kEmb, Rows(kEmb, {3, 5}), 0, 0, g0, 2, &avg) == M::Contribution::kAdded);
  CHECK(m.Contribute(kEmb, Rows(kEmb, {5}), 0, 1, g1, 2, &avg) == M::Contribution::kComplete);
  CHECK(std::vector<int64_t>(avg.rows.begin(), avg.rows.end()) == std::vector<int64_t>{3, 5});
  CHECK(std::vector<float>(avg.row_values.begin(), avg.row_values.end()) ==
        std::vector<float>{0.5f, 0.5f, 3.0f, 3.0f});
  CHECK(avg.dense.empty());
  m.Advance(kEmb);
  CHECK(m.Stats().max_version == 1);
}

TEST_CASE("update machine, sync with backup workers: the slowest worker's gradient is stale") {
  M m;
  Configure(m, Spec(UpdateMode::kSync, 3, 2));
  M::Average avg;
  CHECK(Give(m, 2, 0, 1.0f, &avg) == M::Contribution::kAdded);
  CHECK(Give(m, 0, 0, 1.0f, &avg) == M::Contribution::kComplete);  // 2 of 3 decide it
  m.Advance(kDense);
  CHECK(Give(m, 1, 0, 9.0f, &avg) == M::Contribution::kStale);  // the backup, too late
  CHECK(Give(m, 1, 1, 1.0f, &avg) == M::Contribution::kAdded);  // and on with update 1
  const UpdateStats s = m.Stats();
  CHECK(s.stale_dropped == 1);
  CHECK(s.min_version == 1);
  CHECK(s.configured);
}

TEST_CASE("update machine, sync: a restore in the middle of a step drops its sums") {
  M m;
  Configure(m, Spec(UpdateMode::kSync, 2));
  M::Average avg;
  for (int64_t u = 0; u < 5; ++u) {
    REQUIRE(Give(m, 0, u, 1.0f, &avg) == M::Contribution::kAdded);
    REQUIRE(Give(m, 1, u, 1.0f, &avg) == M::Contribution::kComplete);
    m.Advance(kDense);
  }
  // Update 5 half collected, worker 0's pull for update 6 parked, a mark set.
  CHECK(Give(m, 0, 5, 7.0f, &avg) == M::Contribution::kAdded);
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 6), {DenseInfo()}, 20) == M::PullVerdict::kWait);
  CHECK(*m.Mark(kEmb, 1, 5));
  const uint64_t restores = m.restores();
  M::Waiting failed;
  m.Restored(3, &failed);  // back to the checkpoint of step 3
  CHECK(Tickets(failed) == std::vector<uint64_t>{20});
  CHECK(m.restores() == restores + 1);
  CHECK(m.waiting() == 0);
  // Worker 1's push for update 5 arrives late: the shard is at 3 now, so it is ahead.
  proto::Push push{.items = {Whole(kDense)}, .worker = 1, .clock = 5};
  CHECK(m.CheckNotAhead(push, {DenseInfo()}).code() == Code::kFailedPrecondition);
  // Update 3 is collected afresh: worker 0's old partial sum is gone.
  CHECK(Give(m, 0, 3, 1.0f, &avg) == M::Contribution::kAdded);
  CHECK(Give(m, 1, 3, 3.0f, &avg) == M::Contribution::kComplete);
  CHECK(avg.version == 3);
  CHECK(avg.dense[0] == 2.0f);
  m.Advance(kDense);
  CHECK(*m.Mark(kEmb, 1, 5));  // the marks were forgotten: step 5 runs again
}

TEST_CASE("update machine, hybrid: the sync class aggregates, the async class applies on arrival") {
  M m;
  UpdateSpec spec = Spec(UpdateMode::kSync, 2);
  spec.sparse_mode = UpdateMode::kAsync;
  Configure(m, spec);
  CHECK(m.step_mode() == UpdateMode::kSync);
  proto::Push push{.items = {Whole(kDense), Rows(kEmb, {1})}, .worker = 0, .clock = 0};
  const SliceInfos info{DenseInfo(), SparseInfo(1)};
  std::vector<bool> on_arrival;
  REQUIRE(m.BeginPush(push, info, &on_arrival).ok());
  CHECK(on_arrival == std::vector<bool>{false, true});
  // The async class: at most once per (shard, update, worker).
  CHECK(*m.Mark(kEmb, 0, 0));
  CHECK(*m.Mark(kEmb, 1, 0));  // another worker's gradient for the same update
  CHECK_FALSE(*m.Mark(kEmb, 0, 0));
  // A pull of both classes for update 1 waits for the dense shard only.
  CHECK(Arrive(m, PullOf({Rows(kEmb, {1})}, 1, 1), {SparseInfo(1)}, 30) == M::PullVerdict::kServe);
  CHECK(Arrive(m, PullOf({Whole(kDense), Rows(kEmb, {1})}, 1, 1), info, 31) ==
        M::PullVerdict::kWait);
  M::Average avg;
  CHECK(Give(m, 0, 0, 1.0f, &avg) == M::Contribution::kAdded);
  CHECK(Give(m, 1, 0, 1.0f, &avg) == M::Contribution::kComplete);
  m.Advance(kDense);
  M::Waiting ready;
  m.ReleaseReady(&ready);
  REQUIRE(Tickets(ready) == std::vector<uint64_t>{31});
  std::vector<int64_t> versions;
  m.Versions(ready[0].msg, ready[0].info, &versions);
  CHECK(versions == std::vector<int64_t>{1, INT64_MAX});
  // The other way round: dense async, sparse sync.
  UpdateSpec other = Spec(UpdateMode::kAsync, 2);
  other.sparse_mode = UpdateMode::kSync;
  M::Waiting failed;
  CHECK(m.Configure(other, &failed));
  REQUIRE(m.BeginPush(push, info, &on_arrival).ok());
  CHECK(on_arrival == std::vector<bool>{true, false});
}

TEST_CASE("update machine, bounded staleness: a pull waits for the slowest worker") {
  M m;
  Configure(m, Spec(UpdateMode::kBoundedStaleness, 2, 0, 1));
  CHECK(m.step_mode() == UpdateMode::kBoundedStaleness);
  // Worker 0 runs ahead: its pull for step 1 is within S = 1 of worker 1 (at 0).
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 1), {DenseInfo()}, 1) == M::PullVerdict::kServe);
  m.Pushed(0, 1, false);
  // Step 2 is 2 ahead of worker 1: it waits.
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 2), {DenseInfo()}, 2) == M::PullVerdict::kWait);
  M::Waiting ready;
  m.ReleaseReady(&ready);
  CHECK(ready.empty());
  m.Pushed(1, 0, false);  // worker 1 pushed step 0: it is at 1
  m.ReleaseReady(&ready);
  CHECK(Tickets(ready) == std::vector<uint64_t>{2});
  const UpdateStats s = m.Stats();
  CHECK(s.waited_pulls == 1);
  CHECK(s.max_lead == 1);
  // A worker out of work holds nobody back.
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 3), {DenseInfo()}, 3) == M::PullVerdict::kWait);
  m.Pushed(1, 1, true);
  ready.clear();
  m.ReleaseReady(&ready);
  CHECK(Tickets(ready) == std::vector<uint64_t>{3});
}

TEST_CASE("update machine, bounded staleness: a restarted worker continues at its count") {
  M m;
  Configure(m, Spec(UpdateMode::kBoundedStaleness, 2, 0, 0));
  for (int64_t s = 0; s < 5; ++s) {
    m.Pushed(0, s, false);
    m.Pushed(1, s, false);
  }
  // Worker 1's process restarts and counts from 0: its step 0 is step 5 here, so worker
  // 0's pull for step 5 does not wait for it to redo steps 0..4...
  m.Pushed(1, 0, false);
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 5), {DenseInfo()}, 1) == M::PullVerdict::kServe);
  // ...and its own pull for its step 1 (6 here) waits for worker 0's step 5, in lock step.
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 1, 1), {DenseInfo()}, 2) == M::PullVerdict::kWait);
  M::Waiting ready;
  m.ReleaseReady(&ready);
  CHECK(ready.empty());
  m.Pushed(0, 5, false);
  m.ReleaseReady(&ready);
  CHECK(Tickets(ready) == std::vector<uint64_t>{2});
  // ...and after a restore a worker holds nobody back until it is heard from again.
  M::Waiting failed;
  m.Restored(5, &failed);
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 40), {DenseInfo()}, 3) == M::PullVerdict::kServe);
}

TEST_CASE("update machine: released pulls fail until the next Restore or CreateShards") {
  M m;
  Configure(m, Spec(UpdateMode::kSync, 2));
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 1), {DenseInfo()}, 1) == M::PullVerdict::kWait);
  M::Waiting failed;
  m.ReleasePulls(Aborted("pull released: ps 1 is down"), &failed);
  CHECK(Tickets(failed) == std::vector<uint64_t>{1});
  Status why;
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 1), {DenseInfo()}, 2, &why) == M::PullVerdict::kFail);
  CHECK(why.code() == Code::kAborted);
  // A pull that may be served is served.
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 0), {DenseInfo()}, 3) == M::PullVerdict::kServe);
  failed.clear();
  CHECK_FALSE(m.Configure(Spec(UpdateMode::kSync, 2), &failed));  // same mode: nothing reset
  CHECK(Arrive(m, PullOf({Whole(kDense)}, 0, 1), {DenseInfo()}, 4) == M::PullVerdict::kWait);
  // A new mode hands the parked pulls back; shutdown too.
  CHECK(m.Configure(Spec(UpdateMode::kBoundedStaleness, 2), &failed));
  CHECK(Tickets(failed) == std::vector<uint64_t>{4});
  m.ReleaseAll(&failed);
  CHECK(m.waiting() == 0);
}

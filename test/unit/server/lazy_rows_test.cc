// The row table of lazy shards (libps/server/lazy_rows.h): LazyStripe against a
// std::unordered_map reference under random inserts, lookups and updates (through Find and
// the batched, prefetching FindEach), growth with stable record addresses, and a lazy
// Store shard driven by several threads on different stripes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "libps/server/lazy_rows.h"
#include "libps/server/store.h"

using namespace ps::server;

namespace {

constexpr size_t kRecordFloats = 6;

// The record's floats as a function of the row and a version, so a mix-up shows.
void Stamp(float* record, int64_t row, int version) {
  for (size_t f = 0; f < kRecordFloats; ++f)
    record[f] = static_cast<float>(row % 100003) + static_cast<float>(f) * 0.25f +
                static_cast<float>(version) * 1000.0f;
}

bool HasStamp(const float* record, int64_t row, int version) {
  float want[kRecordFloats];
  Stamp(want, row, version);
  return std::memcmp(record, want, sizeof(want)) == 0;
}

// Rows of one stripe (k), so a single LazyStripe holds them as the store would.
int64_t RowInStripe(std::mt19937_64& rng, size_t k, int64_t id_space) {
  for (;;) {
    const auto row = static_cast<int64_t>(rng() % static_cast<uint64_t>(id_space));
    if (LazyStripeOf(HashRow(row)) == k) return row;
  }
}

}  // namespace

TEST_CASE("LazyStripe matches an unordered_map under random inserts, lookups and updates") {
  // A small id space makes repeats (lookups of present rows) common; a huge one makes
  // misses common.
  const int64_t id_space = GENERATE(int64_t{20000}, int64_t{1} << 40);
  CAPTURE(id_space);
  std::mt19937_64 rng(42);
  LazyStripe stripe;
  RecordArena arena(kRecordFloats);
  std::unordered_map<int64_t, std::pair<float*, int>> ref;  // row -> record, version
  for (int op = 0; op < 60000; ++op) {
    const int64_t row = RowInStripe(rng, 5, id_space);
    const uint64_t h = HashRow(row);
    LazyStripe::Entry* entry = stripe.Find(row, h);
    float* found = entry == nullptr ? nullptr : arena.At(entry->ref);
    auto it = ref.find(row);
    if (it == ref.end()) {
      REQUIRE(found == nullptr);
      LazyStripe::Entry* created = stripe.Insert(row, h, arena);
      REQUIRE(created != nullptr);
      REQUIRE(created->row == row);
      REQUIRE(created->epoch == 0);
      float* record = arena.At(created->ref);
      Stamp(record, row, 0);
      ref.emplace(row, std::make_pair(record, 0));
    } else {
      REQUIRE(found == it->second.first);  // addresses survive growth
      REQUIRE(HasStamp(found, row, it->second.second));
      Stamp(found, row, ++it->second.second);
    }
  }
  REQUIRE(stripe.count() == ref.size());
  size_t seen = 0;
  bool all_match = true;
  stripe.ForEach(arena, [&](int64_t row, const float* record, uint32_t) {
    ++seen;
    auto it = ref.find(row);
    all_match = all_match && it != ref.end() && it->second.first == record &&
                HasStamp(record, row, it->second.second);
  });
  CHECK(seen == ref.size());
  CHECK(all_match);
  CHECK(arena.bytes() >= ref.size() * kRecordFloats * sizeof(float));
  CHECK(stripe.bytes() >= ref.size() * 16);

  stripe.Clear();
  arena.Clear();
  CHECK(stripe.count() == 0);
  CHECK(stripe.bytes() == 0);
  CHECK(arena.bytes() == 0);
  CHECK(stripe.Find(ref.begin()->first, HashRow(ref.begin()->first)) == nullptr);
}

TEST_CASE("LazyStripe grows through many doublings and finds every row afterwards") {
  LazyStripe stripe;
  RecordArena arena(kRecordFloats);
  std::vector<std::pair<int64_t, float*>> inserted;
  // Consecutive rows (not one stripe's): the table is hash-addressed, any row fits.
  for (int64_t row = 0; row < 300000; ++row) {
    LazyStripe::Entry* entry = stripe.Insert(row * 7919, HashRow(row * 7919), arena);
    REQUIRE(entry != nullptr);
    float* record = arena.At(entry->ref);
    Stamp(record, row * 7919, 1);
    inserted.emplace_back(row * 7919, record);
  }
  CHECK(stripe.count() == inserted.size());
  bool ok = true;
  for (const auto& [row, record] : inserted) {
    const LazyStripe::Entry* e = stripe.Find(row, HashRow(row));
    ok = ok && e != nullptr && e->row == row && arena.At(e->ref) == record &&
         HasStamp(record, row, 1);
  }
  CHECK(ok);
  // Rows never inserted are absent (also right after a grow's rehash).
  for (int64_t row = 1; row < 7919 * 10; row += 7919)
    CHECK(stripe.Find(row, HashRow(row)) == nullptr);
  // Memory per row stays within records + table overhead at load >= 0.35 of 16-byte slots.
  // Table slots at load >= 0.35, records with at most one 2 MiB chunk of slack.
  CHECK(static_cast<double>(stripe.bytes()) <= static_cast<double>(inserted.size()) * 16 / 0.35);
  CHECK(arena.bytes() <= inserted.size() * kRecordFloats * sizeof(float) + kHugePage);
}

TEST_CASE(
    "LazyStripe::FindEach returns Find's answers in order, and creates exactly the rows create() accepts") {
  std::mt19937_64 rng(7);
  std::vector<LazyStripe> stripes(static_cast<size_t>(kLazyStripes));
  RecordArena arena(kRecordFloats);
  std::unordered_map<int64_t, std::pair<float*, uint32_t>> ref;  // row -> record, epoch
  StripeGroups groups;
  for (int batch = 0; batch < 200; ++batch) {
    // Unique rows, as PushRows guarantees; sizes around the prefetch distance and above.
    std::vector<int64_t> rows;
    const size_t n = 1 + rng() % (batch % 2 == 0 ? 20 : 3000);
    for (size_t i = 0; i < n; ++i) rows.push_back(static_cast<int64_t>(rng() % 50000));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    groups.Build(rows);
    std::vector<int> visits(rows.size(), 0);
    for (size_t k = 0; k < static_cast<size_t>(kLazyStripes); ++k) {
      uint32_t expect_j = groups.begin[k];
      int64_t last_create = -1;
      std::unordered_map<int64_t, bool> asked;  // rows create() was asked about -> answer
      // Rows divisible by 5 are refused (as admission refuses rows): left absent.
      const auto create = [&](uint32_t j) {
        REQUIRE(static_cast<int64_t>(j) > last_create);
        last_create = j;
        const int64_t row = rows[groups.order[j]];
        REQUIRE(ref.count(row) == 0);
        return asked.emplace(row, row % 5 != 0).first->second;
      };
      const uint32_t end = stripes[k].FindEach(
          rows, groups, groups.begin[k], groups.begin[k + 1], arena, kRecordFloats * sizeof(float),
          batch % 3 == 0, create,
          [&](uint32_t j, LazyStripe::Entry* entry, float* record, bool create_it) {
            REQUIRE(j == expect_j);
            ++expect_j;
            const uint32_t i = groups.order[j];
            REQUIRE(LazyStripeOf(groups.hashes[i]) == k);
            ++visits[i];
            const int64_t row = rows[i];
            auto it = ref.find(row);
            // Entries are written through too: an entry found before the
            // table grew under an insert of an earlier row must not be
            // handed out stale (the epoch would be lost).
            const auto epoch = static_cast<uint32_t>(batch + 1);
            if (it == ref.end()) {
              REQUIRE(entry == nullptr);
              REQUIRE(record == nullptr);
              REQUIRE(asked.count(row) == 1);
              REQUIRE(create_it == asked.at(row));
              if (!create_it) return;
              LazyStripe::Entry* created = stripes[k].Insert(row, groups.hashes[i], arena);
              REQUIRE(created != nullptr);
              float* rec = arena.At(created->ref);
              Stamp(rec, row, 0);
              created->epoch = epoch;
              ref.emplace(row, std::make_pair(rec, epoch));
            } else {
              REQUIRE(entry != nullptr);
              REQUIRE(entry->row == row);
              REQUIRE(entry->epoch == it->second.second);
              REQUIRE(record == it->second.first);
              REQUIRE(HasStamp(record, row, 0));
              entry->epoch = epoch;
              it->second.second = epoch;
            }
          });
      REQUIRE(end == groups.begin[k + 1]);
      REQUIRE(expect_j == groups.begin[k + 1]);
    }
    REQUIRE(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; }));
  }
  size_t total = 0;
  bool epochs_match = true;
  for (const auto& s : stripes) {
    total += s.count();
    s.ForEach(arena, [&](int64_t row, const float*, uint32_t epoch) {
      epochs_match = epochs_match && ref.at(row).second == epoch;
    });
  }
  CHECK(total == ref.size());
  CHECK(epochs_match);
}

TEST_CASE(
    "RecordArena: references name distinct records over many chunks; 128-byte records start cache lines") {
  // 16 floats of values + 16 of one slot: a full chunk is exactly one 2 MiB huge page.
  constexpr size_t kFloats = 32;
  RecordArena arena(kFloats);
  std::vector<uint32_t> refs;
  std::unordered_map<const float*, uint32_t> seen;
  bool aligned = true;
  for (int i = 0; i < 100000; ++i) {
    const uint32_t ref = arena.Allocate();
    REQUIRE(ref != RecordArena::kNone);
    float* r = arena.At(ref);
    aligned = aligned && reinterpret_cast<uintptr_t>(r) % 64 == 0;
    REQUIRE(seen.emplace(r, ref).second);  // no two references share a record
    for (size_t f = 0; f < kFloats; ++f)
      r[f] = static_cast<float>(i) + static_cast<float>(f) / 64.0f;
    refs.push_back(ref);
  }
  CHECK(aligned);
  bool intact = true;  // no record overlaps another: every one still holds what was written
  for (size_t i = 0; i < refs.size(); ++i) {
    const float* r = arena.At(refs[i]);
    for (size_t f = 0; f < kFloats; ++f)
      intact = intact && r[f] == static_cast<float>(i) + static_cast<float>(f) / 64.0f;
  }
  CHECK(intact);
  // 100000 records of 128 bytes: 12.8 MB, chunks doubling to 2 MiB, so under 2 MiB slack.
  CHECK(arena.bytes() >= 100000 * kFloats * sizeof(float));
  CHECK(arena.bytes() <= 100000 * kFloats * sizeof(float) + kHugePage);
  // Freed records come back first, most recently freed first.
  arena.Free(refs[5]);
  arena.Free(refs[77777]);
  CHECK(arena.Allocate() == refs[77777]);
  CHECK(arena.Allocate() == refs[5]);
  const uint64_t before = arena.bytes();
  CHECK(arena.Allocate() != RecordArena::kNone);
  CHECK(arena.bytes() >= before);
}

TEST_CASE(
    "lazy shard: threads pushing rows of different stripes while others pull end exactly as sequential") {
  // SGD with lr 1 and gradients -1 adds exactly 1 per push to every element: the final
  // value of a row is its initial value (zeros) plus its push count, whatever the order.
  Store store;
  OptimizerSpec spec = DefaultOptimizer(OptimizerKind::kSgd);
  spec.learning_rate = 1.0;
  REQUIRE(store.Configure(spec).ok());
  ShardDef def;
  def.layout.var = "emb";
  def.layout.rows = int64_t{1} << 30;
  def.layout.cols = 4;
  def.layout.full_shape = {def.layout.rows, 4};
  def.layout.lazy = true;
  def.init = {ps::model::InitKind::kZeros, 0, 0};
  REQUIRE(store.Create(def).ok());
  const ShardKey key = def.key();

  constexpr int kThreads = 4;
  constexpr int kRounds = 150;
  // Thread t owns the rows whose stripe is t mod kThreads; each thread also pushes a few
  // rows shared by all (so stripes are contended too).
  std::vector<std::vector<int64_t>> own(kThreads);
  std::mt19937_64 rng(11);
  for (int64_t made = 0; made < 4000;) {
    const auto row = static_cast<int64_t>(rng() % static_cast<uint64_t>(def.layout.rows));
    auto& mine = own[LazyStripeOf(HashRow(row)) % kThreads];
    if (std::find(mine.begin(), mine.end(), row) != mine.end()) continue;
    mine.push_back(row);
    ++made;
  }
  const std::vector<int64_t> shared = {3, 1000003, 77777777};
  std::vector<std::thread> threads;
  std::atomic<bool> torn{false};
  std::atomic<bool> failed{false};  // Catch2 assertions are not thread-safe: checked after join
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 r(static_cast<uint64_t>(100 + t));
      for (int round = 0; round < kRounds; ++round) {
        std::vector<int64_t> rows;
        // A growing prefix: later rows are created mid-run, so tables grow under traffic.
        const size_t n =
            own[static_cast<size_t>(t)].size() * static_cast<size_t>(round + 1) / kRounds;
        rows.assign(own[static_cast<size_t>(t)].begin(),
                    own[static_cast<size_t>(t)].begin() + static_cast<long>(n));
        rows.insert(rows.end(), shared.begin(), shared.end());
        std::vector<float> grad(rows.size() * 4, -1.0f);
        if (!store.PushRows(key, rows, grad, round).ok()) failed = true;
        // A pull sees every row whole: its 4 elements equal.
        std::vector<int64_t> probe;
        for (int i = 0; i < 64; ++i) {
          const auto& of = own[r() % kThreads];
          probe.push_back(of[r() % of.size()]);
        }
        std::sort(probe.begin(), probe.end());
        probe.erase(std::unique(probe.begin(), probe.end()), probe.end());
        std::vector<float> out(probe.size() * 4);
        if (!store.PullRows(key, probe, out).ok()) failed = true;
        for (size_t i = 0; i < probe.size(); ++i) {
          if (out[i * 4] != out[i * 4 + 1] || out[i * 4] != out[i * 4 + 3]) torn = true;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK_FALSE(failed.load());
  CHECK_FALSE(torn.load());

  // The sequential reference: how often each row was pushed.
  std::unordered_map<int64_t, int> pushes;
  for (int t = 0; t < kThreads; ++t) {
    for (int round = 0; round < kRounds; ++round) {
      const size_t n =
          own[static_cast<size_t>(t)].size() * static_cast<size_t>(round + 1) / kRounds;
      for (size_t i = 0; i < n; ++i) ++pushes[own[static_cast<size_t>(t)][i]];
      for (int64_t row : shared) ++pushes[row];
    }
  }
  std::vector<int64_t> all;
  for (const auto& [row, count] : pushes) all.push_back(row);
  std::sort(all.begin(), all.end());
  std::vector<float> out(all.size() * 4);
  REQUIRE(store.PullRows(key, all, out).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t c = 0; c < 4; ++c) wrong += out[i * 4 + c] != static_cast<float>(pushes[all[i]]);
  }
  CHECK(wrong == 0);
  CHECK(store.Memory(key)->rows == static_cast<int64_t>(all.size()));
}

TEST_CASE(
    "AllocateAligned: 64-byte alignment below 2 MiB, 2 MiB alignment from 2 MiB, memory writable") {
  for (size_t bytes :
       {size_t{1}, size_t{100}, size_t{4096}, kHugePage - 1, kHugePage, kHugePage * 3 / 2}) {
    CAPTURE(bytes);
    void* p = AllocateAligned(bytes);
    REQUIRE(p != nullptr);
    const auto at = reinterpret_cast<uintptr_t>(p);
    CHECK(at % (bytes >= kHugePage ? kHugePage : kAlign) == 0);
    std::memset(p, 0xab, bytes);
    CHECK(static_cast<unsigned char*>(p)[bytes - 1] == 0xab);
    std::free(p);
  }
  auto floats = AlignedFloats::Make(1000, "test");
  REQUIRE(floats.ok());
  CHECK(floats->size() == 1000);
  CHECK(reinterpret_cast<uintptr_t>(floats->data()) % kAlign == 0);
}

TEST_CASE(
    "LazyStripe: rows sharing home slots probe past each other, across the table's end, and erase back") {
  // Rows of stripe 0 whose home in a 16-slot table is its last line of four slots (six
  // rows) or its first (five): the last line's probe run overflows across the table's end
  // into the first, whatever the insertion order. Eleven rows stay below the 0.7 load that
  // would grow the table.
  std::vector<int64_t> rows;
  std::unordered_map<size_t, int> per_home;
  for (int64_t row = 0; rows.size() < 11; ++row) {
    const uint64_t h = HashRow(row);
    if (LazyStripeOf(h) != 0) continue;
    const auto home =
        static_cast<size_t>((h << kLazyStripeBits) >> 60) & ~size_t{3};  // LazyStripe::Home
    if ((home == 12 && per_home[home] < 6) || (home == 0 && per_home[home] < 5)) {
      ++per_home[home];
      rows.push_back(row);
    }
  }
  std::mt19937_64 rng(3);
  for (int round = 0; round < 200; ++round) {
    std::shuffle(rows.begin(), rows.end(), rng);  // insertion order decides who is displaced
    LazyStripe stripe;
    RecordArena arena(2);
    std::unordered_map<int64_t, float> ref;
    for (size_t n = 0; n < rows.size(); ++n) {
      LazyStripe::Entry* e = stripe.Insert(rows[n], HashRow(rows[n]), arena);
      REQUIRE(e != nullptr);
      arena.At(e->ref)[0] = static_cast<float>(n);
      e->epoch = static_cast<uint32_t>(100 + n);  // distinct per row: must move with it
      ref[rows[n]] = static_cast<float>(n);
    }
    REQUIRE(stripe.bytes() == 16 * sizeof(LazyStripe::Entry));  // no growth
    auto check = [&] {
      for (int64_t row : rows) {
        const LazyStripe::Entry* e = stripe.Find(row, HashRow(row));
        auto it = ref.find(row);
        REQUIRE((e != nullptr) == (it != ref.end()));
        if (e != nullptr) {
          REQUIRE(e->row == row);
          REQUIRE(arena.At(e->ref)[0] == it->second);
          REQUIRE(e->epoch == static_cast<uint32_t>(100 + it->second));
        }
      }
    };
    check();
    // Erase in a random order; every other row must still be found after each backward
    // shift, and an erased row can come back.
    std::vector<int64_t> order = rows;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t n = 0; n < 7; ++n) {
      REQUIRE(stripe.Erase(order[n], HashRow(order[n]), arena));
      ref.erase(order[n]);
      check();
    }
    LazyStripe::Entry* back = stripe.Insert(order[0], HashRow(order[0]), arena);
    REQUIRE(back != nullptr);
    arena.At(back->ref)[0] = 44.0f;
    back->epoch = 144;
    ref[order[0]] = 44.0f;
    check();
    REQUIRE(stripe.count() == rows.size() - 6);
  }
}

TEST_CASE("RecordArena: records stay where they are while another thread grows the arena") {
  // The store reads records (At) under one stripe's lock while a push to another stripe
  // allocates, growing the chunk directory. 32 KiB records make 64-record chunks, so a few
  // thousand records take over 32 chunks: the directory is copied twice meanwhile.
  // A data race here (At reading a directory that Allocate frees or writes) corrupts
  // nothing that the checks below would see in a plain build: this test can only fail
  // under ThreadSanitizer or AddressSanitizer (scripts/test-sanitize.sh).
  constexpr size_t kFloats = 8192;
  RecordArena arena(kFloats);
  std::vector<std::pair<uint32_t, float*>> early;
  for (int i = 0; i < 40; ++i) {
    const uint32_t ref = arena.Allocate();
    REQUIRE(ref != RecordArena::kNone);
    arena.At(ref)[0] = static_cast<float>(i);
    early.emplace_back(ref, arena.At(ref));
  }
  std::mutex stripe_a, stripe_b;  // as two stripe locks
  std::atomic<bool> done{false};
  std::atomic<bool> moved{false};
  std::thread reader([&] {
    while (!done.load()) {
      std::lock_guard g(stripe_a);
      for (size_t i = 0; i < early.size(); ++i) {
        const float* r = arena.At(early[i].first);
        if (r != early[i].second || r[0] != static_cast<float>(i)) moved = true;
      }
    }
  });
  std::vector<uint32_t> late;
  for (int i = 0; i < 2200; ++i) {
    std::lock_guard g(stripe_b);
    const uint32_t ref = arena.Allocate();
    if (ref == RecordArena::kNone) break;
    arena.At(ref)[kFloats - 1] = static_cast<float>(i);
    late.push_back(ref);
  }
  done = true;
  reader.join();
  CHECK_FALSE(moved.load());
  REQUIRE(late.size() == 2200);
  bool intact = true;
  for (size_t i = 0; i < late.size(); ++i)
    intact = intact && arena.At(late[i])[kFloats - 1] == static_cast<float>(i);
  CHECK(intact);
  CHECK(arena.bytes() >= (40 + 2200) * kFloats * sizeof(float));
}

TEST_CASE(
    "RecordArena: with records not dividing 2 MiB, each full-size chunk takes exactly one huge page") {
  // 33 floats = 132 bytes: 15887 records fill 2 MiB less 68 bytes, which AllocateAligned
  // would not advise as huge pages unless the chunk is rounded up to the page.
  constexpr size_t kFloats = 33;
  constexpr size_t kFull = kHugePage / (kFloats * sizeof(float));
  RecordArena arena(kFloats);
  // Chunks double from 16 records: 16 + 32 + ... + 8192 = 16368 records, then full ones.
  size_t allocated = 0;
  while (allocated < 16368) {
    REQUIRE(arena.Allocate() != RecordArena::kNone);
    ++allocated;
  }
  const uint64_t small = arena.bytes();
  CHECK(small == 16368 * kFloats * sizeof(float));
  for (int chunk = 1; chunk <= 3; ++chunk) {
    for (size_t i = 0; i < kFull; ++i) REQUIRE(arena.Allocate() != RecordArena::kNone);
    CHECK(arena.bytes() == small + chunk * kHugePage);
  }
}

TEST_CASE(
    "RecordArena: when references run out, Allocate says so through full(), and max_records counts them") {
  // Two chunks allowed (tests only): 16 + 32 records.
  RecordArena arena(4, 2);
  CHECK(arena.max_records() == 48);
  for (int i = 0; i < 48; ++i) REQUIRE(arena.Allocate() != RecordArena::kNone);
  CHECK_FALSE(arena.full());
  CHECK(arena.Allocate() == RecordArena::kNone);
  CHECK(arena.full());
  // A freed record is reused without a new chunk.
  arena.Free(5);
  CHECK(arena.Allocate() == 5);
  arena.Clear();
  CHECK_FALSE(arena.full());
  // The real limits: at least 2^31 - 1 records, and just under 2^32 for 128-byte records
  // (2^18 - 1 chunks: ten doubling from 16 to 8192 records, then 16384 to a chunk).
  CHECK(RecordArena(32).max_records() == 16368 + ((uint64_t{1} << 18) - 11) * 16384);
  for (size_t floats : {1, 6, 33, 100, 8193, 600000})
    CHECK(RecordArena(floats).max_records() >= (uint64_t{1} << 31) - 1);
}

TEST_CASE(
    "StripeGroups: rows grouped by stripe and sorted by home bits; small requests use few counters") {
  std::mt19937_64 rng(11);
  StripeGroups groups;
  for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{100}, size_t{5000},
                   size_t{8192}, size_t{100000}}) {
    std::vector<int64_t> rows(n);
    for (auto& r : rows) r = static_cast<int64_t>(rng() >> 4);
    groups.Build(rows);
    CHECK(groups.group_bits >= kLazyStripeBits);
    CHECK(groups.group_bits <= StripeGroups::kMaxGroupBits);
    // Counters: about one per row (at least one per stripe), not 2^13 for a 1-row pull.
    CHECK(groups.bucket.size() <= std::max<size_t>(2 * n, static_cast<size_t>(kLazyStripes)) + 1);
    if (n >= 8192) CHECK(groups.group_bits == StripeGroups::kMaxGroupBits);
    REQUIRE(groups.begin[0] == 0);
    REQUIRE(groups.begin[kLazyStripes] == n);
    std::vector<int> seen(n, 0);
    for (size_t k = 0; k < static_cast<size_t>(kLazyStripes); ++k) {
      uint64_t prev = 0;
      for (uint32_t j = groups.begin[k]; j < groups.begin[k + 1]; ++j) {
        const uint32_t i = groups.order[j];
        ++seen[i];
        REQUIRE(groups.hashes[i] == HashRow(rows[i]));
        REQUIRE(LazyStripeOf(groups.hashes[i]) == k);
        // The top kMaxGroupBits (stripe, then home slot's top bits) never decrease when
        // the request is large enough to use them all.
        const uint64_t key = groups.hashes[i] >> (64 - groups.group_bits);
        REQUIRE(key >= prev);
        prev = key;
        if (groups.group_bits == StripeGroups::kMaxGroupBits && j > groups.begin[k])
          REQUIRE((groups.hashes[groups.order[j - 1]] >> (64 - StripeGroups::kMaxGroupBits)) <=
                  key);
      }
    }
    REQUIRE(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  }
}

TEST_CASE("LazyStripe::FindEach: a big batch of new rows in home order keeps probes short") {
  // A 512k-row push to an empty shard gives each stripe 16k new rows, sorted by home
  // bits. Were the table grown while they were inserted, the rows so far would all have
  // homes near slot 0 of the grown table and pile into one probe run (hundreds of probes
  // per insert). FindEach grows the table for them all first.
  for (size_t n : {size_t{16384}, size_t{4096}}) {
    for (size_t before : {size_t{0}, size_t{1000}}) {
      std::mt19937_64 rng(n + before);
      LazyStripe stripe;
      RecordArena arena(2);
      std::unordered_map<int64_t, bool> have;
      std::vector<int64_t> rows;
      while (have.size() < before) {
        const int64_t row = RowInStripe(rng, 0, int64_t{1} << 40);
        if (have.emplace(row, true).second)
          REQUIRE(stripe.Insert(row, HashRow(row), arena) != nullptr);
      }
      while (rows.size() < n) {
        const int64_t row = RowInStripe(rng, 0, int64_t{1} << 40);
        if (have.emplace(row, true).second) rows.push_back(row);
      }
      StripeGroups groups;
      groups.Build(rows);
      REQUIRE(groups.begin[1] == n);
      const uint64_t probes_before = stripe.insert_probes();
      stripe.FindEach(
          rows, groups, 0, static_cast<uint32_t>(n), arena, 8, true, [](uint32_t) { return true; },
          [&](uint32_t j, LazyStripe::Entry* entry, float*, bool create) {
            REQUIRE(entry == nullptr);
            REQUIRE(create);
            const uint32_t i = groups.order[j];
            REQUIRE(stripe.Insert(rows[i], groups.hashes[i], arena) != nullptr);
          });
      REQUIRE(stripe.count() == n + before);
      // Linear probing from the start of a line of four slots at load <= 0.7 steps over
      // 1.1-1.9 occupied slots per insert on average, mostly within the home line already
      // read; the pile-up stepped over about 150 (4k rows) and 580 (16k rows).
      const uint64_t probes = stripe.insert_probes() - probes_before;
      INFO("rows " << n << " before " << before << ": " << probes << " slots stepped over");
      CHECK(static_cast<double>(probes) / static_cast<double>(n) < 4.0);
      for (int64_t row : rows) REQUIRE(stripe.Find(row, HashRow(row)) != nullptr);
    }
  }
}

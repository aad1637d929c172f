// The shard queue (shards.h) as a pure state machine, the cutting of text files into
// byte ranges at line boundaries, and the worker's LeaseReader.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "libps/data/byte_stream.h"
#include "libps/data/lease_reader.h"
#include "libps/data/record_format.h"
#include "libps/data/shards.h"
#include "libps/data/tf_example.h"
#include "libps/data/tfrecord.h"
#include "test/support/temp_dir.h"
#include "test/unit/data/test_util.h"

using ps::Json;
using ps::data::ByteRange;
using ps::data::ByteStream;
using ps::data::Lease;
using ps::data::LeaseReader;
using ps::data::LeaseSpec;
using ps::data::PackEnd;
using ps::data::Row;
using ps::data::Shard;
using ps::data::ShardQueue;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

// Every line of [begin, end) read through ByteStream's line ranges.
std::vector<std::string> LinesOf(const std::string& path, uint64_t begin, uint64_t end) {
  auto s = ByteStream::Open(path, ByteRange{begin, end, true});
  INFO(s.status().message());
  REQUIRE(s.ok());
  std::vector<std::string> out;
  std::string_view line;
  for (;;) {
    auto more = (*s)->NextLine(&line);
    REQUIRE(more.ok());
    if (!*more) break;
    out.emplace_back(line);
  }
  return out;
}

// Every cut of `text` into two and three ranges reads each line exactly once, in order.
void CheckEveryCut(const std::string& text, const std::vector<std::string>& want) {
  TempDir dir;
  const std::string path = dir.File("t.txt");
  WriteBytes(path, text);
  const uint64_t n = text.size();
  for (uint64_t a = 0; a <= n; ++a) {
    for (uint64_t b = a; b <= n; ++b) {
      std::vector<std::string> got;
      for (auto [x, y] : {std::pair{uint64_t{0}, a}, {a, b}, {b, UINT64_MAX}}) {
        auto part = LinesOf(path, x, y);
        got.insert(got.end(), part.begin(), part.end());
      }
      INFO("cuts at " << a << " and " << b);
      REQUIRE(got == want);
    }
  }
}

TEST_CASE("byte ranges cut at line boundaries: each line read once, whatever the cuts") {
  CheckEveryCut("aa\nbbb\n\nc\n", {"aa", "bbb", "", "c"});
  // CRLF lines, and a last line without a newline.
  CheckEveryCut("one\r\ntwo\r\nthree", {"one", "two", "three"});
  // A line crossing a cut: range [2, 9) of "x\nlong line\ny\n" holds "long line" (it starts
  // at 2), the next range starts after it.
  TempDir dir;
  WriteBytes(dir.File("c.txt"), "x\nlong line\ny\n");
  CHECK(LinesOf(dir.File("c.txt"), 0, 2) == std::vector<std::string>{"x"});
  CHECK(LinesOf(dir.File("c.txt"), 2, 5) == std::vector<std::string>{"long line"});
  CHECK(LinesOf(dir.File("c.txt"), 5, 20) == std::vector<std::string>{"y"});
  CHECK(LinesOf(dir.File("c.txt"), 3, 12).empty());
}

TEST_CASE("MakeShards: big plain text files are cut; TFRecord and gzip files are one shard") {
  TempDir dir;
  WriteBytes(dir.File("a.txt"), std::string(250, 'x'));
  WriteBytes(dir.File("b.txt"), std::string(100, 'x'));
  WriteBytes(dir.File("c.txt.gz"), ps::data::testing::Gzip(std::string(1000, 'x')));
  const std::vector<std::string> files = {dir.File("a.txt"), dir.File("b.txt"),
                                          dir.File("c.txt.gz")};
  auto text = ps::data::MakeShards(files, true, 100);
  REQUIRE(text.ok());
  const std::vector<Shard> want = {{0, 0, 100, true},
                                   {0, 100, 200, true},
                                   {0, 200, ps::data::kWholeFile, true},
                                   {1, 0, ps::data::kWholeFile, false},
                                   {2, 0, ps::data::kWholeFile, false}};
  CHECK(*text == want);
  auto records = ps::data::MakeShards(files, false, 100);
  REQUIRE(records.ok());
  CHECK(records->size() == 3u);
  auto missing = ps::data::MakeShards({dir.File("nope")}, true, 100);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Matchers::Contains("cannot stat file"));
  CHECK_FALSE(ps::data::MakeShards(files, true, 0).ok());
}

TEST_CASE("EpochOrder is a seeded permutation per epoch") {
  auto a = ps::data::EpochOrder(50, 7, 0, true);
  CHECK(a == ps::data::EpochOrder(50, 7, 0, true));
  CHECK(a != ps::data::EpochOrder(50, 7, 1, true));
  CHECK(std::set<uint32_t>(a.begin(), a.end()).size() == 50u);
  auto sorted = ps::data::EpochOrder(5, 7, 3, false);
  CHECK(sorted == std::vector<uint32_t>{0, 1, 2, 3, 4});
}

// A model of the shards' contents: shard s holds sizes[s] records; record r ends at byte
// 10 * (r + 1). Answers a lease the way a worker would; records trained are counted.
struct World {
  std::vector<int64_t> sizes;
  std::map<std::pair<uint32_t, int64_t>, int> trained;  // (shard, record) → times
  PackEnd Run(const Lease& l) {
    PackEnd e;
    const int64_t n = sizes[l.shard];
    const int64_t stop = std::min(n, l.start + l.take);
    e.records = std::max<int64_t>(0, stop - l.start);
    e.end_of_shard = l.start + l.take > n;  // a reader sees the end only by reading past it
    if (e.end_of_shard) e.total = n;
    e.end_byte = static_cast<uint64_t>(10 * std::max(stop, l.start));
    return e;
  }
  void Train(const Lease& l, const PackEnd& e) {
    for (int64_t r = l.start; r < l.start + e.records; ++r) trained[{l.shard, r}] += 1;
  }
};

ShardQueue MakeQueue(size_t shards, std::optional<int64_t> epochs, bool shuffle = true) {
  ShardQueue::Options o;
  for (size_t i = 0; i < shards; ++i) o.shards.push_back(Shard{static_cast<uint32_t>(i)});
  o.seed = 11;
  o.shuffle = shuffle;
  o.epochs = epochs;
  return ShardQueue(std::move(o));
}

void CheckEach(const World& w, int times) {
  for (uint32_t s = 0; s < w.sizes.size(); ++s) {
    for (int64_t r = 0; r < w.sizes[s]; ++r) {
      auto it = w.trained.find({s, r});
      INFO("shard " << s << " record " << r);
      REQUIRE(it != w.trained.end());
      REQUIRE(it->second == times);
    }
  }
}

TEST_CASE("ShardQueue: leases acknowledged in order cover every record once per epoch") {
  World w{{25, 0, 7, 40}, {}};
  auto q = MakeQueue(4, 2);
  int packs = 0;
  while (auto l = q.Take(packs % 3, 10)) {
    REQUIRE(l->take > 0);
    const PackEnd e = w.Run(*l);
    w.Train(*l, e);
    q.Ack(*l, e);
    REQUIRE(++packs < 100);
  }
  CHECK(q.Exhausted());
  CHECK(q.in_flight() == 0);
  CHECK(q.EpochsDone() == Approx(2.0));
  CHECK(q.records_counted() == 2 * 72);
  CheckEach(w, 2);
}

TEST_CASE("ShardQueue: a worker holds its shard; another worker gets the next shard") {
  auto q = MakeQueue(3, 1, false);
  auto a = q.Take(0, 10);
  auto b = q.Take(1, 10);
  auto a2 = q.Take(0, 10);
  REQUIRE((a && b && a2));
  CHECK(a->shard == 0);
  CHECK(b->shard == 1);
  CHECK(a2->shard == 0);
  CHECK(a2->start == 10);
  CHECK(a2->base_record == 0);  // the first pack is not acknowledged yet
  q.Ack(*a, PackEnd{10, 100, false});
  auto a3 = q.Take(0, 10);
  REQUIRE(a3);
  CHECK(a3->base_record == 10);  // after a
  CHECK(a3->base_byte == 100u);
  q.Ack(*a2, PackEnd{10, 200, false});
  auto a4 = q.Take(0, 10);
  REQUIRE(a4);
  CHECK(a4->start == 30);
  CHECK(a4->base_record == 20);  // a3 is not acknowledged: the base stays after a2
  CHECK(a4->base_byte == 200u);
}

TEST_CASE("ShardQueue: a lost worker's lease goes back and is given out again exactly") {
  World w{{30, 30}, {}};
  auto q = MakeQueue(2, 1, false);
  auto a = q.Take(0, 10);
  auto b = q.Take(0, 10);  // worker 0 holds shard 0: records 10..19
  REQUIRE((a && b));
  q.Release(*b);  // worker 0 lost with both in flight (a is acknowledged below: it was retried)
  auto e = w.Run(*a);
  w.Train(*a, e);
  q.Ack(*a, e);
  // Worker 1 gets the given-up records first.
  auto c = q.Take(1, 10);
  REQUIRE(c);
  CHECK(c->shard == 0);
  CHECK(c->start == 10);
  CHECK(c->take == 10);
  CHECK(c->base_record == 10);
  int packs = 0;
  for (auto l = c; l; l = q.Take(1, 10)) {
    auto end = w.Run(*l);
    w.Train(*l, end);
    q.Ack(*l, end);
    REQUIRE(++packs < 50);
  }
  CHECK(q.Exhausted());
  CheckEach(w, 1);
}

TEST_CASE("ShardQueue: restore rolls the position back; what followed is given out again") {
  World w{{23, 17, 31}, {}};
  auto q = MakeQueue(3, 2);
  Json saved;
  std::map<std::pair<uint32_t, int64_t>, int> at_save;
  int packs = 0;
  // Two workers, leases answered out of order now and then.
  std::vector<Lease> pending;
  while (true) {
    auto l = q.Take(packs % 2, 6);
    if (l) pending.push_back(*l);
    if (pending.empty()) break;
    if (pending.size() >= 2 || !l) {
      const size_t i = packs % 3 == 0 ? pending.size() - 1 : 0;
      Lease done = pending[i];
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      auto e = w.Run(done);
      w.Train(done, e);
      q.Ack(done, e);
    }
    if (++packs == 9) {
      // A checkpoint: nothing may be in flight.
      for (const Lease& p : pending) {
        auto e = w.Run(p);
        w.Train(p, e);
        q.Ack(p, e);
      }
      pending.clear();
      saved = q.Save();
      at_save = w.trained;
    }
    REQUIRE(packs < 500);
  }
  REQUIRE(q.Exhausted());
  // Roll back: training after the checkpoint is lost with the parameters.
  w.trained = at_save;
  REQUIRE(q.Restore(saved).ok());
  CHECK_FALSE(q.Exhausted());
  packs = 0;
  while (auto l = q.Take(packs % 2, 6)) {
    auto e = w.Run(*l);
    w.Train(*l, e);
    q.Ack(*l, e);
    REQUIRE(++packs < 500);
  }
  CHECK(q.Exhausted());
  CheckEach(w, 2);
  // A position saved for other shards is refused and changes nothing.
  auto other = MakeQueue(4, 2);
  CHECK_FALSE(other.Restore(saved).ok());
  CHECK(other.Take(0, 6).has_value());
}

TEST_CASE("ShardQueue: a save with leases in flight writes them as given back") {
  World w{{20}, {}};
  auto q = MakeQueue(1, 1);
  auto a = q.Take(0, 8);
  auto b = q.Take(0, 8);
  REQUIRE((a && b));
  auto e = w.Run(*a);
  w.Train(*a, e);
  q.Ack(*a, e);
  const Json saved = q.Save();
  auto r = MakeQueue(1, 1);
  REQUIRE(r.Restore(saved).ok());
  int packs = 0;
  while (auto l = r.Take(0, 8)) {
    auto end = w.Run(*l);
    w.Train(*l, end);
    r.Ack(*l, end);
    REQUIRE(++packs < 50);
  }
  CHECK(r.Exhausted());
  CheckEach(w, 1);
  // An answer to a lease of before the restore is ignored.
  r.Ack(*b, PackEnd{8, 160, false});
  CHECK(r.in_flight() == 0);
}

TEST_CASE("ShardQueue without epochs never ends; epoch e+1 is leased while e's tail runs") {
  auto q = MakeQueue(2, std::nullopt, false);
  auto a = q.Take(0, 5);
  auto b = q.Take(1, 5);
  auto c = q.Take(2, 5);  // the third worker starts epoch 1 while epoch 0 is in flight
  REQUIRE((a && b && c));
  CHECK(c->seq == 2);
  CHECK(c->shard == 0);
  q.Ack(*a, PackEnd{3, 30, true});
  q.Ack(*b, PackEnd{0, 0, true});
  CHECK(q.EpochsDone() == Approx(1.0));
  CHECK_FALSE(q.Exhausted());
}

// LibSVM lines "k%2 k+1:1": record k names itself.
std::string Lines(int64_t begin, int64_t end, const char* eol = "\n") {
  std::string s;
  for (int64_t k = begin; k < end; ++k)
    s.append(std::to_string(k % 2))
        .append(1, ' ')
        .append(std::to_string(k + 1))
        .append(":1")
        .append(eol);
  return s;
}

std::shared_ptr<const ps::data::RecordFormat> LibSvm() {
  Json j = Json::parse(R"({"num_features":1000000})");
  ps::JsonReader r(j, "job.train_data");
  auto f = ps::data::MakeRecordFormat("libsvm", r);
  REQUIRE(f.ok());
  return std::shared_ptr<const ps::data::RecordFormat>(std::move(*f));
}

// Drives a queue over `files` with LeaseReaders (one per worker) and returns how often
// each id was read.
std::map<int64_t, int> ReadAll(std::shared_ptr<const ps::data::RecordFormat> format,
                               const std::vector<std::string>& files, bool text,
                               int64_t shard_bytes, int64_t epochs, int workers) {
  auto shards = ps::data::MakeShards(files, text, shard_bytes);
  REQUIRE(shards.ok());
  ShardQueue::Options o;
  o.shards = *shards;
  o.seed = 5;
  o.epochs = epochs;
  ShardQueue q(o);
  std::vector<std::unique_ptr<LeaseReader>> readers;
  for (int i = 0; i < workers; ++i)
    readers.push_back(std::make_unique<LeaseReader>(format, false, "job.train_data"));
  std::map<int64_t, int> seen;
  std::vector<Row> rows;
  for (int pack = 0;; ++pack) {
    const int w = pack % workers;
    auto l = q.Take(w, 7);
    if (!l) break;
    const Shard& s = (*shards)[l->shard];
    auto e = readers[static_cast<size_t>(w)]->Read(LeaseSpec{files[s.file], s, *l}, &rows);
    INFO(e.status().message());
    REQUIRE(e.ok());
    REQUIRE(static_cast<int64_t>(rows.size()) == e->records);
    for (const Row& r : rows) seen[r.ids.at(0)] += 1;
    q.Ack(*l, *e);
    REQUIRE(pack < 100000);
  }
  CHECK(q.Exhausted());
  return seen;
}

TEST_CASE("LeaseReader over byte ranges, CRLF and gzip files: every record once per epoch") {
  TempDir dir;
  WriteBytes(dir.File("a.libsvm"), Lines(0, 100));
  WriteBytes(dir.File("b.libsvm"), Lines(100, 130, "\r\n") + "0 131:1");  // no final newline
  WriteBytes(dir.File("c.libsvm.gz"), ps::data::testing::Gzip(Lines(131, 200)));
  const std::vector<std::string> files = {dir.File("a.libsvm"), dir.File("b.libsvm"),
                                          dir.File("c.libsvm.gz")};
  for (int64_t shard_bytes : {int64_t{13}, int64_t{37}, int64_t{200}, int64_t{1} << 20}) {
    for (int workers : {1, 3}) {
      INFO("shard_bytes " << shard_bytes << ", " << workers << " workers");
      auto seen = ReadAll(LibSvm(), files, true, shard_bytes, 2, workers);
      REQUIRE(seen.size() == 200u);
      for (const auto& [id, n] : seen) {
        INFO("id " << id);
        CHECK(n == 2);
      }
    }
  }
}

TEST_CASE("ShardQueue: packs answered last-first, two in flight per worker, end every epoch") {
  World w{{25, 7, 40, 13}, {}};
  auto q = MakeQueue(4, 2);
  std::vector<Lease> pending;
  for (int round = 0; round < 1000; ++round) {
    for (int k = 0; k < 4 && pending.size() < 4; ++k) {
      auto l = q.Take(k % 2, 10);
      if (!l) break;
      pending.push_back(*l);
    }
    if (pending.empty()) break;
    Lease l = pending.back();
    pending.pop_back();
    auto e = w.Run(l);
    w.Train(l, e);
    q.Ack(l, e);
  }
  CHECK(q.AllGivenOut());
  CHECK(q.Exhausted());
  CHECK(q.EpochsDone() == Approx(2.0));
  CheckEach(w, 2);
}

TEST_CASE("LeaseReader over TFRecord files: every record once per epoch") {
  TempDir dir;
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    std::string data;
    for (int64_t k = f * 40; k < (f + 1) * 40 - f; ++k) {
      ps::data::TfExampleBuilder b;
      const int64_t label = k % 2;
      b.AddInt64("label", std::span(&label, 1));
      b.AddInt64("id", std::span(&k, 1));
      std::string rec;
      b.AppendTo(&rec);
      ps::data::AppendTfRecord(rec, &data);
    }
    files.push_back(dir.File(std::string("p").append(std::to_string(f)).append(".tfrecord")));
    WriteBytes(files.back(), f == 2 ? ps::data::testing::Gzip(data) : data);
  }
  Json j =
      Json::parse(R"({"label":"label","sparse":[{"feature":"id","type":"int64","vocab":1000}]})");
  ps::JsonReader r(j, "job.train_data");
  auto format = ps::data::MakeRecordFormat("tfrecord", r);
  REQUIRE(format.ok());
  auto seen = ReadAll(std::shared_ptr<const ps::data::RecordFormat>(std::move(*format)), files,
                      false, 1, 3, 2);
  CHECK(seen.size() == 117u);
  for (const auto& [id, n] : seen) CHECK(n == 3);
}

TEST_CASE("LeaseReader: a retried lease reads the same records; a shrunk file is an error") {
  TempDir dir;
  WriteBytes(dir.File("a.libsvm"), Lines(0, 50));
  const Shard shard{0, 0, ps::data::kWholeFile, false};
  LeaseReader first(LibSvm(), false, "d"), second(LibSvm(), false, "d");
  std::vector<Row> rows;
  const Lease l{0, 0, 0, 0, 20, 10, 1};
  auto a = first.Read(LeaseSpec{dir.File("a.libsvm"), shard, l}, &rows);
  REQUIRE(a.ok());
  std::vector<int64_t> ids;
  for (const Row& r : rows) ids.push_back(r.ids[0]);
  auto b = second.Read(LeaseSpec{dir.File("a.libsvm"), shard, l}, &rows);
  REQUIRE(b.ok());
  std::vector<int64_t> again;
  for (const Row& r : rows) again.push_back(r.ids[0]);
  CHECK(ids == again);
  CHECK(ids.front() == 20);
  CHECK(a->end_byte == b->end_byte);
  // From the byte offset of record 30 on, without skipping.
  const Lease next{0, 0, a->end_byte, 30, 30, 100, 1};
  auto c = second.Read(LeaseSpec{dir.File("a.libsvm"), shard, next}, &rows);
  REQUIRE(c.ok());
  CHECK(c->records == 20);
  CHECK(c->end_of_shard);
  CHECK(rows.front().ids[0] == 30);
  const Shard range{0, 0, 100, true};
  WriteBytes(dir.File("a.libsvm"), Lines(0, 2));
  LeaseReader third(LibSvm(), false, "d");
  auto d = third.Read(LeaseSpec{dir.File("a.libsvm"), range, Lease{0, 0, 90, 9, 9, 5, 1}}, &rows);
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.status().message(), Catch::Matchers::Contains("shrank to"));
}

}  // namespace

// Training data that keeps arriving: the shard queue in follow mode (files appended in
// order of arrival, each record leased once, what is done dropped, save and restore) and
// the FileFollower (done markers, quiet files, the bounded record, save and restore).
#include <fcntl.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>

#include "libps/data/follow.h"
#include "libps/data/shards.h"
#include "test/support/temp_dir.h"

using ps::Json;
using ps::data::Arrival;
using ps::data::FileFollower;
using ps::data::FollowOptions;
using ps::data::Lease;
using ps::data::PackEnd;
using ps::data::ParseFollow;
using ps::data::Shard;
using ps::data::ShardQueue;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

// Records per shard, by shard index (in follow mode, the sequence number), and the
// records trained.
struct World {
  std::map<uint32_t, int64_t> sizes;
  std::map<std::pair<uint32_t, int64_t>, int> trained;
  PackEnd Run(const Lease& l) const {
    PackEnd e;
    const int64_t n = sizes.at(l.shard);
    const int64_t stop = std::min(n, l.start + l.take);
    e.records = std::max<int64_t>(0, stop - l.start);
    e.end_of_shard = l.start + l.take > n;
    if (e.end_of_shard) e.total = n;
    e.end_byte = static_cast<uint64_t>(10 * std::max(stop, l.start));
    return e;
  }
  void Ack(ShardQueue& q, const Lease& l) {
    const PackEnd e = Run(l);
    for (int64_t r = l.start; r < l.start + e.records; ++r) trained[{l.shard, r}] += 1;
    q.Ack(l, e);
  }
  void CheckOnce() const {
    for (const auto& [shard, n] : sizes) {
      for (int64_t r = 0; r < n; ++r) {
        INFO("shard " << shard << " record " << r);
        auto it = trained.find({shard, r});
        REQUIRE(it != trained.end());
        CHECK(it->second == 1);
      }
    }
  }
};

ShardQueue FollowQueue() {
  ShardQueue::Options o;
  o.follow = true;
  return ShardQueue(std::move(o));
}

// Appends a file of `records.size()` shards (one per entry) and notes their sizes.
void AddFile(ShardQueue& q, World& w, const std::string& path, double arrival,
             const std::vector<int64_t>& records) {
  const auto first = static_cast<uint32_t>(w.sizes.size());
  std::vector<Shard> shards(records.size());
  for (size_t i = 0; i < records.size(); ++i)
    w.sizes[first + static_cast<uint32_t>(i)] = records[i];
  q.Append(path, arrival, shards);
}

// Takes and acknowledges leases for `worker` until nothing is left; returns the packs.
int Drain(ShardQueue& q, World& w, int worker, int64_t records) {
  int packs = 0;
  while (auto l = q.Take(worker, records)) {
    w.Ack(q, *l);
    REQUIRE(++packs < 1000);
  }
  return packs;
}

void Touch(const std::string& path, double mtime) {
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = static_cast<time_t>(mtime);
  times[0].tv_nsec = times[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::vector<std::string> Units(const std::vector<Arrival>& a) {
  std::vector<std::string> out;
  for (const auto& x : a) out.push_back(std::filesystem::path(x.unit).filename().string());
  return out;
}

}  // namespace

TEST_CASE("follow queue: files leased in order of arrival, each record once, state dropped") {
  auto q = FollowQueue();
  World w;
  CHECK_FALSE(q.CanTake());
  CHECK_FALSE(q.Take(0, 10).has_value());
  AddFile(q, w, "/d/a", 100, {25});
  AddFile(q, w, "/d/b", 101, {7, 30});  // a file cut into two byte ranges
  CHECK(q.CanTake());
  CHECK(q.files_waiting() == 2);
  // The first lease is of the first file to arrive.
  auto first = q.Take(0, 10);
  REQUIRE(first.has_value());
  CHECK(q.file(q.shard(first->shard).file) == "/d/a");
  w.Ack(q, *first);
  Drain(q, w, 1, 10);
  CHECK_FALSE(q.CanTake());
  CHECK(q.in_flight() == 0);
  CHECK(q.files_done() == 2);
  CHECK(q.files_waiting() == 0);
  const auto done = q.TakeFilesDone();
  // In the order done: worker 1 took b's shards (the next in the sequence) while worker
  // 0 held a, and finished them before it shared a's rest.
  CHECK(done == std::vector<double>{101, 100});
  CHECK(q.TakeFilesDone().empty());
  // Everything done is dropped: the saved position holds no shard and no file.
  Json saved = q.Save();
  CHECK(saved["follow"]["shards"].empty());
  CHECK(saved["follow"]["files"].empty());
  CHECK(saved["follow"]["shard_base"] == 3);
  // More arrives: leased after, trained once.
  AddFile(q, w, "/d/c", 102, {12});
  AddFile(q, w, "/d/empty", 103, {});  // no shard: done at once
  CHECK(q.files_done() == 3);
  Drain(q, w, 0, 5);
  CHECK(q.files_done() == 4);
  w.CheckOnce();
  CHECK(q.EpochsDone() == 0);
  CHECK_FALSE(q.Exhausted());
}

TEST_CASE("follow queue: a file's lag is known when its last shard is done, in any order") {
  auto q = FollowQueue();
  World w;
  AddFile(q, w, "/d/a", 10, {5, 5});
  auto a0 = q.Take(0, 10);  // shard 0 to worker 0
  auto a1 = q.Take(1, 10);  // shard 1 to worker 1
  REQUIRE(a0);
  REQUIRE(a1);
  CHECK(a0->shard != a1->shard);
  w.Ack(q, *a1);
  CHECK(q.TakeFilesDone().empty());
  w.Ack(q, *a0);
  CHECK(q.TakeFilesDone() == std::vector<double>{10});
}

TEST_CASE("follow queue: a restore rolls back; what was appended since is appended again") {
  auto q = FollowQueue();
  World w;
  AddFile(q, w, "/d/a", 1, {40});
  AddFile(q, w, "/d/b", 2, {40});
  auto l = q.Take(0, 10);
  w.Ack(q, *l);
  auto in_flight = q.Take(1, 10);  // written as given back
  REQUIRE(in_flight);
  const Json saved = q.Save();
  // After the save: more trained and another file appended; then the chief restarts.
  Drain(q, w, 0, 10);
  AddFile(q, w, "/d/c", 3, {9});
  auto restored = FollowQueue();
  REQUIRE(restored.Restore(saved).ok());
  CHECK(restored.files_waiting() == 2);
  CHECK(restored.files_done() == 0);
  // What the restored position holds is trained again from it: forget what was trained
  // after the save (it is rolled back with the parameters).
  World again;
  again.sizes = {{0, 40}, {1, 40}};
  for (int64_t r = 0; r < 10; ++r) again.trained[{0, r}] = 1;  // before the save
  Drain(restored, again, 0, 10);
  // The file that arrived after the save is appended again (the follower's record is
  // restored with the queue): shard index 2, as before.
  std::vector<Shard> c(1);
  restored.Append("/d/c", 3, c);
  again.sizes[2] = 9;
  Drain(restored, again, 1, 4);
  again.CheckOnce();
  CHECK(restored.files_done() == 3);
  // A position of another kind is refused, and the queue is unchanged.
  ShardQueue::Options o;
  o.shards = {Shard{0}};
  o.files = {"/x"};
  ShardQueue plain(std::move(o));
  CHECK_FALSE(plain.Restore(saved).ok());
  CHECK_FALSE(restored.Restore(plain.Save()).ok());
  CHECK(restored.files_done() == 3);
}

TEST_CASE("ParseFollow: true, an object, and its errors") {
  auto d = ParseFollow(Json(true), "job.train_data.follow");
  REQUIRE(d.ok());
  CHECK(d->poll_seconds == 10);
  CHECK(d->done_marker.empty());
  CHECK(d->quiet_seconds == 30);
  CHECK(d->max_age_seconds == 3600);
  auto m = ParseFollow(Json{{"poll_seconds", 0.5}, {"done_marker", "_SUCCESS"}}, "f");
  REQUIRE(m.ok());
  CHECK(m->done_marker == "_SUCCESS");
  CHECK(m->poll_seconds == 0.5);
  auto msg = [](const Json& j) { return ParseFollow(j, "f").status().message(); };
  CHECK_THAT(msg(Json(false)), Catch::Contains("false is not a mode"));
  CHECK_THAT(msg(Json(3)), Catch::Contains("must be true or an object"));
  CHECK_THAT(msg(Json{{"poll_seconds", 0}}), Catch::Contains("f.poll_seconds: must be in"));
  CHECK_THAT(msg(Json{{"done_marker", "a/b"}}), Catch::Contains("f.done_marker: must be a file"));
  CHECK_THAT(msg(Json{{"done_marker", "_S"}, {"quiet_seconds", 5}}),
             Catch::Contains("f.quiet_seconds: not with done_marker"));
  CHECK_THAT(msg(Json{{"max_age_seconds", -1}}), Catch::Contains("f.max_age_seconds: must be"));
  CHECK_THAT(msg(Json{{"pol_seconds", 1}}), Catch::Contains("f.pol_seconds: unknown key"));
}

TEST_CASE("FileFollower with a done marker: a directory is taken once, when its marker is there") {
  TempDir tmp;
  const std::string root = tmp.path();
  FollowOptions o;
  o.done_marker = "_SUCCESS";
  FileFollower f({root + "/*/*.txt", root + "/*/_SUCCESS"}, o);
  auto none = f.Scan(1000);
  REQUIRE(none.ok());
  CHECK(none->empty());
  CHECK(f.matched() == 0);
  WriteBytes(root + "/d1/b.txt", "x");
  WriteBytes(root + "/d1/a.txt", "x");
  WriteBytes(root + "/d2/a.txt", "x");
  auto waiting = f.Scan(2000);
  REQUIRE(waiting.ok());
  CHECK(waiting->empty());  // no marker yet
  CHECK(f.matched() == 3);
  WriteBytes(root + "/d2/_SUCCESS", "");
  Touch(root + "/d2/_SUCCESS", 500);
  WriteBytes(root + "/d1/_SUCCESS", "");
  Touch(root + "/d1/_SUCCESS", 600);
  auto got = f.Scan(2000);
  REQUIRE(got.ok());
  REQUIRE(Units(*got) == std::vector<std::string>{"d2", "d1"});  // in order of arrival
  CHECK((*got)[1].files == std::vector<std::string>{root + "/d1/a.txt", root + "/d1/b.txt"});
  CHECK((*got)[1].arrival == 600);
  // Taken once: a file added to a taken directory is not taken.
  WriteBytes(root + "/d1/c.txt", "x");
  auto again = f.Scan(3000);
  REQUIRE(again.ok());
  CHECK(again->empty());
  CHECK(f.recorded() == 2);
}

TEST_CASE("FileFollower by quiet files: taken once unchanged; the record is bounded") {
  TempDir tmp;
  const std::string root = tmp.path();
  FollowOptions o;
  o.quiet_seconds = 30;
  o.max_age_seconds = 100;
  FileFollower f({root + "/*.txt"}, o);
  WriteBytes(root + "/a.txt", "x");
  Touch(root + "/a.txt", 1000);
  WriteBytes(root + "/b.txt", "x");
  Touch(root + "/b.txt", 990);
  auto early = f.Scan(1010);  // a.txt changed 10 s ago, b.txt 20 s ago: neither quiet
  REQUIRE(early.ok());
  CHECK(early->empty());
  auto got = f.Scan(1030);  // b.txt quiet for 40 s, a.txt for 30 s
  REQUIRE(got.ok());
  CHECK(Units(*got) == std::vector<std::string>{"b.txt", "a.txt"});
  // A file every 10 s for 1000 s: each taken once, the record holds about max_age of them.
  for (int i = 0; i < 100; ++i) {
    const std::string name = root + "/f" + std::to_string(1000 + i) + ".txt";
    WriteBytes(name, "x");
    Touch(name, 1100 + 10 * i);
    auto one = f.Scan(1100 + 10 * i + 30);
    REQUIRE(one.ok());
    REQUIRE(one->size() == 1);
    CHECK(f.recorded() <= 11);
  }
  // A file that arrived before the record's window is not taken (it was, or arrived late).
  WriteBytes(root + "/late.txt", "x");
  Touch(root + "/late.txt", 1500);
  auto late = f.Scan(3000);
  REQUIRE(late.ok());
  CHECK(late->empty());
  // Saved and restored: nothing is taken again.
  const Json saved = f.Save();
  FileFollower g({root + "/*.txt"}, o);
  REQUIRE(g.Restore(saved).ok());
  auto none = g.Scan(3000);
  REQUIRE(none.ok());
  CHECK(none->empty());
  // A new one after the restore is taken.
  WriteBytes(root + "/new.txt", "x");
  Touch(root + "/new.txt", 2500);
  auto fresh = g.Scan(3000);
  REQUIRE(fresh.ok());
  CHECK(Units(*fresh) == std::vector<std::string>{"new.txt"});
  CHECK_FALSE(g.Restore(Json{{"taken", 3}}).ok());
}

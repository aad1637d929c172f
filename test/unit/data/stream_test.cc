// Streaming input (stream.h) driven through OpenDataset with LibSVM files whose
// example k has the single id k, so every batch row names the example it came from.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "libps/data/dataset.h"
#include "libps/data/stream.h"
#include "test/support/temp_dir.h"
#include "test/unit/data/test_util.h"

using Catch::Matchers::Contains;
using ps::Code;
using ps::Json;
using ps::data::Dataset;
using ps::data::DatasetOptions;
using ps::data::OpenDataset;
using ps::data::StreamingDataset;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

constexpr int64_t kIds = 100000;  // num_features of every file here

// Examples [begin, end): "label k+1:1" with label k % 2.
std::string Lines(int64_t begin, int64_t end) {
  std::string s;
  for (int64_t k = begin; k < end; ++k)
    s += std::to_string(k % 2) + " " + std::to_string(k + 1) + ":1\n";
  return s;
}

// Writes `files` files of `per_file` examples each (file f holds [f*per_file, ...)),
// named part-<f>.libsvm, every other one gzipped when `mix_gzip`.
void WriteParts(const TempDir& dir, int files, int64_t per_file, bool mix_gzip = false) {
  for (int f = 0; f < files; ++f) {
    std::string text = Lines(f * per_file, (f + 1) * per_file);
    if (mix_gzip && f % 2 == 1) text = ps::data::testing::Gzip(text);
    WriteBytes(dir.File("part-" + std::to_string(f) + ".libsvm"), text);
  }
}

Json Config(const std::string& files, int64_t shuffle_buffer = 16, const std::string& extra = "") {
  return Json::parse(R"({"format":"libsvm","files":[")" + files + R"("],"num_features":)" +
                     std::to_string(kIds) + R"(,"shuffle_buffer":)" +
                     std::to_string(shuffle_buffer) + extra + "}");
}

std::unique_ptr<Dataset> Open(const Json& config, DatasetOptions o) {
  auto d = OpenDataset(config, "job.train_data", o);
  INFO(d.status().message());
  REQUIRE(d.ok());
  return std::move(d).value();
}

// The example indices of `count` examples in batches of batch_size (checks the batch).
std::vector<int64_t> Take(Dataset& d, int64_t count, int64_t batch_size) {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < count) {
    auto b = d.Next(batch_size);
    INFO(b.status().message());
    REQUIRE(b.ok());
    if (b->size == 0) break;
    REQUIRE(b->sparse.size() == 1u);
    REQUIRE(b->sparse[0].offsets.size() == static_cast<size_t>(b->size + 1));
    for (int64_t r = 0; r < b->size; ++r) {
      REQUIRE(b->sparse[0].offsets[static_cast<size_t>(r + 1)] -
                  b->sparse[0].offsets[static_cast<size_t>(r)] ==
              1);
      const int64_t k =
          b->sparse[0].ids[static_cast<size_t>(b->sparse[0].offsets[static_cast<size_t>(r)])];
      CHECK(b->labels[static_cast<size_t>(r)] == static_cast<float>(k % 2));
      out.push_back(k);
    }
  }
  return out;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("stream: a single pass without shuffling reads the files in sorted order") {
  TempDir dir;
  WriteParts(dir, 3, 10, /*mix_gzip=*/true);
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  o.repeat = false;
  auto d = Open(Config("part-*.libsvm"), o);
  CHECK(d->info().examples == 0);
  CHECK(d->info().classes == 2);
  CHECK(Take(*d, 1000, 7) == Range(30));  // the last batch is short
  CHECK(d->done());
  auto empty = d->Next(7);
  REQUIRE(empty.ok());
  CHECK(empty->size == 0);
  CHECK(d->examples_seen() == 30);
}

TEST_CASE("stream: every epoch has every example once, in a new order from the seed") {
  TempDir dir;
  WriteParts(dir, 4, 25);
  DatasetOptions o;
  o.base_dir = dir.path();
  o.seed = 7;
  auto d = Open(Config("part-*.libsvm", 16), o);
  std::vector<int64_t> all = Take(*d, 300, 10);
  std::vector<int64_t> e0(all.begin(), all.begin() + 100), e1(all.begin() + 100, all.begin() + 200);
  // Every epoch reads every example once; the shuffle buffer (16) carries over epoch
  // boundaries, so in 300 outputs an example appears 3 times, give or take the 16 that
  // are still in the buffer or came early from epoch 3.
  std::map<int64_t, int> count;
  for (int64_t k : all) ++count[k];
  CHECK(count.size() == 100u);
  int exactly_three = 0;
  for (auto [k, n] : count) {
    CHECK(n >= 2);
    CHECK(n <= 4);
    exactly_three += n == 3;
  }
  CHECK(exactly_three >= 100 - 2 * 16);
  CHECK(e0 != Range(100));
  CHECK(e0 != e1);
  // The same seed gives the same stream; another seed another one.
  auto again = Open(Config("part-*.libsvm", 16), o);
  CHECK(Take(*again, 300, 10) == all);
  o.seed = 8;
  auto other = Open(Config("part-*.libsvm", 16), o);
  CHECK(Take(*other, 300, 10) != all);
}

TEST_CASE("stream: the shuffle buffer bounds how far an example can move ahead") {
  TempDir dir;
  WriteBytes(dir.File("one.libsvm"), Lines(0, 500));
  DatasetOptions o;
  o.base_dir = dir.path();
  o.repeat = false;
  for (int64_t buffer : {1, 8, 64}) {
    auto d = Open(Config("one.libsvm", buffer), o);
    auto got = Take(*d, 1000, 32);
    CHECK(Sorted(got) == Range(500));
    // Output position p can only hold an example among the first p + buffer read.
    for (size_t p = 0; p < got.size(); ++p) CHECK(got[p] < static_cast<int64_t>(p) + buffer);
    if (buffer == 1) CHECK(got == Range(500));
    if (buffer > 1) CHECK(got != Range(500));
  }
}

TEST_CASE("stream: file sharding splits the files, record sharding the records of fewer files") {
  TempDir dir;
  WriteParts(dir, 4, 10, /*mix_gzip=*/true);
  auto shard = [&](int w, int shards) {
    DatasetOptions o;
    o.base_dir = dir.path();
    o.num_shards = shards;
    o.shard_index = w;
    o.repeat = false;
    return Open(Config("part-*.libsvm"), o);
  };
  SECTION("4 files, 2 workers: by file, disjoint, all covered") {
    std::vector<int64_t> all;
    for (int w = 0; w < 2; ++w) {
      auto d = shard(w, 2);
      auto& s = dynamic_cast<StreamingDataset&>(*d);
      CHECK_FALSE(s.by_record());
      REQUIRE(s.shard_files().size() == 2u);
      CHECK_THAT(s.shard_files()[0], Contains("part-" + std::to_string(w)));
      auto got = Take(*d, 1000, 8);
      CHECK(got.size() == 20u);
      for (int64_t k : got) CHECK((k / 10) % 2 == w);  // files w and w + 2
      all.insert(all.end(), got.begin(), got.end());
    }
    CHECK(Sorted(all) == Range(40));
  }
  SECTION("4 files, 6 workers (more workers than files): by record, disjoint, all covered") {
    std::vector<int64_t> all;
    for (int w = 0; w < 6; ++w) {
      auto d = shard(w, 6);
      CHECK(dynamic_cast<StreamingDataset&>(*d).by_record());
      auto got = Take(*d, 1000, 8);
      CHECK(got.size() >= 6u);
      all.insert(all.end(), got.begin(), got.end());
    }
    CHECK(Sorted(all) == Range(40));
  }
  SECTION("training (repeat) with more workers than files keeps going past the epoch") {
    DatasetOptions o;
    o.base_dir = dir.path();
    o.num_shards = 5;
    o.shard_index = 4;
    auto d = Open(Config("part-*.libsvm"), o);
    auto got = Take(*d, 64, 16);
    CHECK(got.size() == 64u);
    for (int64_t k : got) CHECK((k / 10 + k % 10) % 5 == 4);  // (file + record) % shards
  }
}

TEST_CASE("stream: batch sizes may change between calls") {
  TempDir dir;
  WriteParts(dir, 2, 50);
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  o.repeat = false;
  auto d = Open(Config("part-*.libsvm"), o);
  std::vector<int64_t> got;
  for (int64_t n : {10, 3, 10, 25, 1, 100}) {
    auto part = Take(*d, n, n);
    CHECK(static_cast<int64_t>(part.size()) ==
          std::min<int64_t>(n, 100 - static_cast<int64_t>(got.size())));
    got.insert(got.end(), part.begin(), part.end());
  }
  CHECK(got == Range(100));
}

TEST_CASE("stream: empty files, globs that match nothing, a shard without examples") {
  TempDir dir;
  WriteBytes(dir.File("a-empty.libsvm"), "");
  WriteBytes(dir.File("b.libsvm"), Lines(0, 5));
  WriteBytes(dir.File("c-empty.libsvm"), ps::data::testing::Gzip(""));
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  o.repeat = false;
  auto d = Open(Config("*.libsvm"), o);
  CHECK(Take(*d, 100, 4) == Range(5));

  auto err = [&](const Json& config, DatasetOptions opts) {
    auto r = OpenDataset(config, "job.train_data", opts);
    REQUIRE_FALSE(r.ok());
    return r.status();
  };
  auto none = err(Config("nothing-*.tfrecord"), o);
  CHECK(none.code() == Code::kInvalidArgument);
  CHECK(none.message() ==
        "job.train_data.files[0]: '" + dir.File("nothing-*.tfrecord") + "' matches no file");
  CHECK_THAT(err(Config("/no/such/dir/x.libsvm"), o).message(), Contains("matches no file"));

  o.repeat = true;
  auto empty = err(Config("*-empty.libsvm"), o);
  CHECK(empty.code() == Code::kInvalidArgument);
  CHECK(empty.message() == "job.train_data: shard 0 of 1 has no examples (2 of 2 file(s))");
  o.repeat = false;
  auto pass = Open(Config("*-empty.libsvm"), o);  // a single pass over nothing is empty
  CHECK(Take(*pass, 10, 4).empty());
  CHECK(pass->done());
}

TEST_CASE("stream: config errors name the key") {
  DatasetOptions o;
  auto err = [&](const std::string& text) {
    auto r = OpenDataset(Json::parse(text), "job.train_data", o);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(
      err(R"({"format":"csv","files":["x"],"label":"y"})") ==
      "job.train_data.files: format 'csv' does not stream (tfrecord, criteo_tsv and libsvm do); use \"path\"");
  CHECK(err(R"({"format":"libsvm","files":["x"],"path":"y","num_features":3})") ==
        "job.train_data: give \"path\" (in memory) or \"files\" (streamed), not both");
  CHECK(err(R"({"format":"libsvm","files":[],"num_features":3})") ==
        "job.train_data.files: needs at least one file or pattern");
  CHECK(err(R"({"format":"libsvm","files":["x"],"num_features":3,"shuffle_buffer":-1})") ==
        "job.train_data.shuffle_buffer: must be in 0..2^27, got -1");
  CHECK(err(R"({"format":"libsvm","files":["x"],"num_features":3,"on_error":"ignore"})") ==
        "job.train_data.on_error: must be \"fail\" or \"skip\", got \"ignore\"");
  CHECK(
      err(R"({"format":"libsvm","files":["x"],"num_features":3,"classes":0})") ==
      "job.train_data.classes: must be at least 2 when streaming (the labels cannot be counted before "
      "training), got 0");
  CHECK(err(R"({"format":"libsvm","files":["x"],"num_features":3,"limit":5})") ==
        "job.train_data.limit: not supported with \"files\"");
  CHECK(err(R"({"format":"libsvm","files":["x"],"num_features":3,"bogus":5})") ==
        "job.train_data.bogus: unknown key");
}

TEST_CASE(
    "stream: a bad record fails the stream naming the file and line, or is skipped and counted") {
  TempDir dir;
  WriteBytes(dir.File("a.libsvm"),
             Lines(0, 10) + "1 oops\n" + Lines(10, 20) + "7 3:1\n" + Lines(20, 30));
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  o.repeat = false;
  SECTION("fail (the default)") {
    auto d = Open(Config("a.libsvm"), o);
    ps::Status st;
    for (int i = 0; i < 10 && st.ok(); ++i) st = d->Next(4).status();
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(st.message() == dir.File("a.libsvm") + ":11: bad feature 'oops'");
  }
  SECTION("skip") {
    auto d = Open(Config("a.libsvm", 16, R"(,"on_error":"skip")"), o);
    CHECK(Take(*d, 100, 4) == Range(30));
    CHECK(d->skipped() == 2);
  }
  SECTION("the first record is bad: the error comes from OpenDataset") {
    WriteBytes(dir.File("b.libsvm"), "2 1:1\n" + Lines(0, 3));
    auto r = OpenDataset(Config("b.libsvm"), "job.train_data", o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          dir.File("b.libsvm") + ":1: label 2 is out of range for 2 classes (expected -1, 0 or 1)");
  }
}

TEST_CASE("stream: LibSVM field_offsets group ids by field in order of appearance") {
  TempDir dir;
  WriteBytes(dir.File("f.libsvm"), "1 5:2 1:1 3:0.5 2:1\n0\n");
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  o.repeat = false;
  auto d = Open(
      Json::parse(
          R"({"format":"libsvm","files":"f.libsvm","num_features":6,"field_offsets":[0,2,4]})"),
      o);
  CHECK(d->info().field_vocab_sizes == std::vector<int64_t>{2, 2, 2});
  auto b = d->Next(4);
  REQUIRE(b.ok());
  REQUIRE(b->size == 2);
  CHECK(b->sparse[0].ids == std::vector<int64_t>{0, 1});  // ids 1, 2 (1-based) → 0, 1
  CHECK(b->sparse[0].values == std::vector<float>{1, 1});
  CHECK(b->sparse[1].ids == std::vector<int64_t>{0});  // id 3 → 2 → field 1, local 0
  CHECK(b->sparse[1].values == std::vector<float>{0.5f});
  CHECK(b->sparse[2].ids == std::vector<int64_t>{0});  // id 5 → 4 → field 2, local 0
  CHECK(b->sparse[2].values == std::vector<float>{2});
  CHECK(b->sparse[0].offsets == std::vector<int64_t>{0, 2, 2});
  CHECK(b->labels == std::vector<float>{1, 0});
}

TEST_CASE("stream: destroying a dataset that is reading ahead does not hang") {
  TempDir dir;
  WriteParts(dir, 2, 5000);
  DatasetOptions o;
  o.base_dir = dir.path();
  for (int i = 0; i < 5; ++i) {
    auto d = Open(Config("part-*.libsvm", 1000), o);
    if (i % 2 == 0) CHECK(Take(*d, 10, 10).size() == 10u);
  }
}

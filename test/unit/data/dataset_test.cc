#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "libps/data/dataset.h"
#include "test/support/temp_dir.h"
#include "test/unit/data/test_util.h"

using Catch::Matchers::Contains;
using ps::Code;
using ps::Json;
using ps::data::Dataset;
using ps::data::DatasetOptions;
using ps::data::ExampleTable;
using ps::data::InMemoryDataset;
using ps::data::OpenDataset;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

// Example i: dense = {i, -i}, label = i, sparse ids {i, i+1, ...} (i % 3 of them).
// Every batch row therefore names the example it came from.
ExampleTable MakeTable(int64_t n) {
  ExampleTable t;
  t.info.examples = n;
  t.info.dense_dim = 2;
  t.info.classes = 2;
  t.info.field_names = {"f"};
  t.info.field_vocab_sizes = {n + 3};
  t.sparse.resize(1);
  t.sparse[0].offsets.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    t.dense_f32.push_back(static_cast<float>(i));
    t.dense_f32.push_back(static_cast<float>(-i));
    t.labels.push_back(static_cast<float>(i));
    for (int64_t k = 0; k < i % 3; ++k) t.sparse[0].ids.push_back(i + k);
    t.sparse[0].offsets.push_back(static_cast<int64_t>(t.sparse[0].ids.size()));
  }
  return t;
}

std::unique_ptr<InMemoryDataset> Open(int64_t n, DatasetOptions o) {
  auto d = InMemoryDataset::Create(MakeTable(n), o);
  REQUIRE(d.ok());
  return std::move(d).value();
}

// Checks the batch is internally consistent and returns its example indices.
std::vector<int64_t> Indices(const ps::model::Batch& b) {
  REQUIRE(b.labels.size() == static_cast<size_t>(b.size));
  REQUIRE(b.dense_dim == 2);
  REQUIRE(b.dense.size() == static_cast<size_t>(b.size * 2));
  REQUIRE(b.sparse.size() == 1u);
  REQUIRE(b.sparse[0].offsets.size() == static_cast<size_t>(b.size + 1));
  CHECK(b.sparse[0].values.empty());
  std::vector<int64_t> out;
  for (int64_t r = 0; r < b.size; ++r) {
    auto i = static_cast<int64_t>(b.labels[static_cast<size_t>(r)]);
    CHECK(b.dense[static_cast<size_t>(2 * r)] == static_cast<float>(i));
    CHECK(b.dense[static_cast<size_t>(2 * r + 1)] == static_cast<float>(-i));
    int64_t begin = b.sparse[0].offsets[static_cast<size_t>(r)];
    int64_t end = b.sparse[0].offsets[static_cast<size_t>(r + 1)];
    REQUIRE(end - begin == i % 3);
    for (int64_t k = begin; k < end; ++k)
      CHECK(b.sparse[0].ids[static_cast<size_t>(k)] == i + (k - begin));
    out.push_back(i);
  }
  return out;
}

std::vector<int64_t> Take(Dataset& d, int64_t count, int64_t batch_size) {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < count) {
    auto b = d.Next(batch_size);
    REQUIRE(b.ok());
    auto idx = Indices(*b);
    out.insert(out.end(), idx.begin(), idx.end());
  }
  out.resize(static_cast<size_t>(count));
  return out;
}

}  // namespace

TEST_CASE("two shards are disjoint and each covers its half once per epoch") {
  const int64_t n = 11;
  DatasetOptions o;
  o.num_shards = 2;
  o.seed = 42;
  o.shard_index = 0;
  auto s0 = Open(n, o);
  o.shard_index = 1;
  auto s1 = Open(n, o);
  CHECK(s0->shard_size() == 6);
  CHECK(s1->shard_size() == 5);
  // Batches of 9 and 3 straddle epoch boundaries (shards of 6 and 5); 18 and 15 examples
  // are exactly 3 epochs each.
  auto seq0 = Take(*s0, 18, 9);
  auto seq1 = Take(*s1, 15, 3);
  CHECK(s0->examples_seen() == 18);
  CHECK(s1->examples_seen() == 15);
  for (size_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> a(seq0.begin() + 6 * epoch, seq0.begin() + 6 * (epoch + 1));
    std::vector<int64_t> b(seq1.begin() + 5 * epoch, seq1.begin() + 5 * (epoch + 1));
    std::vector<int64_t> all = a;
    all.insert(all.end(), b.begin(), b.end());
    std::sort(all.begin(), all.end());
    std::vector<int64_t> want(n);
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = i;
    CHECK(all == want);
    for (int64_t i : a) CHECK(i % 2 == 0);
    for (int64_t i : b) CHECK(i % 2 == 1);
  }
}

TEST_CASE("three shards of 10 examples: sizes 4, 3, 3 and i % 3 membership") {
  for (int64_t s = 0; s < 3; ++s) {
    DatasetOptions o;
    o.num_shards = 3;
    o.shard_index = s;
    o.shuffle = false;
    auto d = Open(10, o);
    auto got = Take(*d, d->shard_size(), 100);
    std::vector<int64_t> want;
    for (int64_t i = s; i < 10; i += 3) want.push_back(i);
    CHECK(got == want);
  }
}

TEST_CASE("shuffling is deterministic per seed and differs across epochs") {
  const int64_t n = 100;
  DatasetOptions o;
  o.seed = 7;
  auto a = Open(n, o);
  auto b = Open(n, o);
  auto seq_a = Take(*a, 3 * n, 32);
  auto seq_b = Take(*b, 3 * n, 32);
  CHECK(seq_a == seq_b);
  std::vector<int64_t> e0(seq_a.begin(), seq_a.begin() + n);
  std::vector<int64_t> e1(seq_a.begin() + n, seq_a.begin() + 2 * n);
  std::vector<int64_t> e2(seq_a.begin() + 2 * n, seq_a.end());
  CHECK(e0 != e1);
  CHECK(e1 != e2);
  std::vector<int64_t> sorted_e0 = e0;
  std::sort(sorted_e0.begin(), sorted_e0.end());
  CHECK(sorted_e0 != e0);  // actually shuffled
  for (auto* e : {&e0, &e1, &e2}) {
    std::sort(e->begin(), e->end());
    CHECK(*e == sorted_e0);  // every epoch is a permutation of the shard
  }
  CHECK(a->epoch() == 3);
  CHECK(a->examples_seen() == 320);  // ten batches of 32

  o.seed = 8;
  auto c = Open(n, o);
  CHECK(Take(*c, n, 32) != std::vector<int64_t>(seq_a.begin(), seq_a.begin() + n));

  SECTION("shuffle off keeps file order every epoch") {
    o.shuffle = false;
    auto d = Open(5, o);
    CHECK(Take(*d, 10, 3) == std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4});
  }
}

TEST_CASE("repeat mode always returns full batches spanning epochs") {
  DatasetOptions o;
  o.shuffle = false;
  auto d = Open(5, o);
  auto b1 = d->Next(3);
  REQUIRE(b1.ok());
  CHECK(Indices(*b1) == std::vector<int64_t>{0, 1, 2});
  CHECK(d->epoch() == 0);
  auto b2 = d->Next(3);
  REQUIRE(b2.ok());
  CHECK(Indices(*b2) == std::vector<int64_t>{3, 4, 0});
  CHECK(d->epoch() == 1);
  CHECK(d->examples_seen() == 6);
  CHECK_FALSE(d->done());
}

TEST_CASE("evaluation: a single pass ends with a short batch, then empty batches") {
  DatasetOptions o;
  o.repeat = false;
  o.seed = 3;
  auto d = Open(10, o);
  std::vector<int64_t> sizes;
  std::vector<int64_t> seen;
  for (int i = 0; i < 5; ++i) {
    auto b = d->Next(4);
    REQUIRE(b.ok());
    sizes.push_back(b->size);
    auto idx = Indices(*b);
    seen.insert(seen.end(), idx.begin(), idx.end());
    if (i == 2) CHECK(d->done());
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2, 0, 0});
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(d->done());
  CHECK(d->examples_seen() == 10);
  CHECK(d->epoch() == 1);

  SECTION("an exact multiple ends without a short batch") {
    auto e = Open(8, o);
    CHECK(e->Next(4)->size == 4);
    CHECK(e->Next(4)->size == 4);
    CHECK(e->done());
    auto last = e->Next(4);
    REQUIRE(last.ok());
    CHECK(last->size == 0);
    CHECK(last->sparse.size() == 1u);
    CHECK(last->sparse[0].offsets == std::vector<int64_t>{0});
  }
  SECTION("an empty shard ends at once") {
    o.num_shards = 20;
    o.shard_index = 15;
    auto e = Open(10, o);
    CHECK(e->done());
    CHECK(e->Next(4)->size == 0);
  }
}

TEST_CASE("SkipTo continues the same sequence") {
  DatasetOptions o;
  o.seed = 99;
  o.num_shards = 2;
  o.shard_index = 1;
  auto a = Open(31, o);
  auto full = Take(*a, 70, 10);
  auto b = Open(31, o);
  REQUIRE(b->SkipTo(30).ok());
  CHECK(b->epoch() == 2);
  CHECK(Take(*b, 40, 10) == std::vector<int64_t>(full.begin() + 30, full.end()));

  o.repeat = false;
  auto c = Open(31, o);
  CHECK(c->SkipTo(16).code() == Code::kInvalidArgument);
  REQUIRE(c->SkipTo(15).ok());
  CHECK(c->Next(5)->size == 0);
}

TEST_CASE(
    "ReadAhead returns the wrapped data set's batches, in order, and counts only those returned") {
  DatasetOptions o;
  o.seed = 5;
  o.num_shards = 2;
  o.shard_index = 1;
  auto plain = Open(37, o);  // 18 examples in this shard; 7 does not divide it
  auto ahead = ps::data::ReadAhead(Open(37, o));
  for (int i = 0; i < 12; ++i) {  // almost five epochs
    INFO("batch " << i);
    auto want = plain->Next(7);
    auto got = ahead->Next(7);
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    CHECK(got->dense == want->dense);
    CHECK(got->labels == want->labels);
    CHECK(got->sparse[0].ids == want->sparse[0].ids);
    CHECK(got->sparse[0].offsets == want->sparse[0].offsets);
    CHECK(ahead->examples_seen() == plain->examples_seen());
  }
  CHECK(ahead->Next(8).status().code() == Code::kInvalidArgument);  // the size read ahead is 7
  CHECK(ahead->Next(0).status().code() == Code::kInvalidArgument);
  CHECK(ahead->info().examples == 37);

  SECTION("a single pass: done only once its last example was returned") {
    o.repeat = false;
    auto single = ps::data::ReadAhead(Open(37, o));
    CHECK_FALSE(single->done());
    std::vector<int64_t> seen;
    std::vector<int64_t> sizes;
    for (int i = 0; i < 4; ++i) {
      auto b = single->Next(7);
      REQUIRE(b.ok());
      sizes.push_back(b->size);
      auto idx = Indices(*b);
      seen.insert(seen.end(), idx.begin(), idx.end());
      CHECK(single->done() == (i >= 2));  // as of the batches returned, not the one read ahead
    }
    CHECK(sizes == std::vector<int64_t>{7, 7, 4, 0});
    std::sort(seen.begin(), seen.end());
    CHECK(seen.size() == 18u);
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
    CHECK(single->examples_seen() == 18);
  }
  SECTION("destroyed while reading ahead, and before its first batch") {
    auto busy = ps::data::ReadAhead(Open(37, o));
    REQUIRE(busy->Next(7).ok());
    busy.reset();  // joins the reader, which is filling the next batch
    auto idle = ps::data::ReadAhead(Open(37, o));
    idle.reset();  // no reader was started
  }
}

TEST_CASE("bad options are errors, not crashes") {
  DatasetOptions o;
  o.num_shards = 0;
  CHECK(InMemoryDataset::Create(MakeTable(4), o).status().code() == Code::kInvalidArgument);
  o.num_shards = 2;
  o.shard_index = 2;
  CHECK(InMemoryDataset::Create(MakeTable(4), o).status().message() ==
        "shard_index 2 is out of range for 2 shards");
  o.num_shards = 8;
  o.shard_index = 5;
  CHECK(InMemoryDataset::Create(MakeTable(4), o).status().message() ==
        "shard 5 of 8 has no examples (the data set has 4)");
  auto d = Open(4, DatasetOptions{});
  CHECK(d->Next(0).status().code() == Code::kInvalidArgument);
  CHECK(d->Next(-3).status().code() == Code::kInvalidArgument);
}

TEST_CASE("OpenDataset: string_features config") {
  Json cfg = Json::parse(R"({"format":"string_features","examples":1000,"seed":1})");
  DatasetOptions o;
  o.num_shards = 2;
  auto d = OpenDataset(cfg, "job.data.train", o);
  REQUIRE(d.ok());
  const auto& info = (*d)->info();
  CHECK(info.examples == 1000);
  CHECK(info.dense_dim == 0);
  CHECK(info.classes == 2);
  CHECK(info.field_vocab_sizes == std::vector<int64_t>{8});
  CHECK(info.label_names == std::vector<std::string>{"yes", "no"});
  CHECK(dynamic_cast<InMemoryDataset&>(**d).shard_size() == 500);
  auto b = (*d)->Next(32);
  REQUIRE(b.ok());
  CHECK(b->size == 32);
  CHECK(b->dense_dim == 0);
  REQUIRE(b->sparse.size() == 1u);
  CHECK(b->sparse[0].ids.size() == 96u);
  for (size_t r = 0; r <= 32; ++r) CHECK(b->sparse[0].offsets[r] == static_cast<int64_t>(3 * r));
  for (size_t r = 0; r < 32; ++r) {
    bool has_avenger = false;
    for (size_t k = 0; k < 3; ++k) has_avenger |= b->sparse[0].ids[3 * r + k] == 1;
    CHECK(b->labels[r] == (has_avenger ? 0.0f : 1.0f));
  }
}

TEST_CASE("OpenDataset: strict config errors name the key") {
  DatasetOptions o;
  auto err = [&](const char* text) {
    auto d = OpenDataset(Json::parse(text), "job.data.train", o);
    REQUIRE_FALSE(d.ok());
    return d.status().message();
  };
  CHECK(err(R"({"format":"string_features","examples":10,"bogus":1})") ==
        "job.data.train.bogus: unknown key");
  CHECK(
      err(R"({"format":"parquet"})") ==
      "job.data.train.format: unknown format 'parquet' (expected idx, libsvm, csv, string_features, tfrecord "
      "or criteo_tsv)");
  CHECK(err(R"({"examples":10})") == "job.data.train.format: required key is missing");
  CHECK(err(R"({"format":"string_features","examples":0})") ==
        "job.data.train.examples: must be positive, got 0");
  CHECK(err(R"({"format":"string_features","examples":10,"oov_rate":2})") ==
        "job.data.train.oov_rate: must be in [0, 1], got 2.000000");
  CHECK(err(R"({"format":"libsvm","path":"x.libsvm"})") ==
        "job.data.train.num_features: required key is missing");
  CHECK(err(R"({"format":"libsvm","path":"x","num_features":"10"})") ==
        "job.data.train.num_features: expected an integer, got string");
  CHECK(err(R"({"format":"idx","images":"a"})") ==
        "job.data.train.labels: required key is missing");
  CHECK(err(R"({"format":"idx","images":"a","labels":"b","classes":1})") ==
        "job.data.train.classes: must be 0 (infer) or at least 2, got 1");
  CHECK(
      err(R"({"format":"csv","path":"a.csv","label":"y","categorical":[{"column":"c","vocab":[]}]})") ==
      "job.data.train.categorical[0].vocabulary: required key is missing");
  CHECK(err(R"({"format":"csv","path":"a.csv","label":"y","categorical":[3]})") ==
        "job.data.train.categorical[0]: expected a column name or an object, got number");
  CHECK(err(R"({"format":"csv","path":"a.csv","label":"y","delimiter":";;"})") ==
        "job.data.train.delimiter: must be one character other than '\"', got ';;'");
  CHECK(err(R"({"format":"string_features","examples":10,"limit":-1})") ==
        "job.data.train.limit: must not be negative, got -1");
  CHECK(err(R"([1])") == "job.data.train: must be a JSON object");
}

TEST_CASE("OpenDataset resolves relative paths against base_dir") {
  TempDir dir;
  WriteBytes(dir.File("x.libsvm"), "1 1:1\n0 2:1\n1 3:1\n");
  WriteBytes(dir.File("d.csv"), "label,v,c\nyes,1,a\nno,2,b\n");
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  auto d = OpenDataset(
      Json::parse(R"({"format":"libsvm","path":"x.libsvm","num_features":3,"limit":2})"), "data",
      o);
  REQUIRE(d.ok());
  CHECK((*d)->info().examples == 2);
  auto b = (*d)->Next(2);
  REQUIRE(b.ok());
  CHECK(b->sparse[0].ids == std::vector<int64_t>{0, 1});
  CHECK(b->sparse[0].values == std::vector<float>{1, 1});

  auto c = OpenDataset(Json::parse(R"({"format":"csv","path":"d.csv","label":"label","dense":["v"],
      "categorical":[{"column":"c","vocabulary":["b"]}],"label_vocabulary":["yes","no"]})"),
                       "data", o);
  REQUIRE(c.ok());
  auto cb = (*c)->Next(2);
  REQUIRE(cb.ok());
  CHECK(cb->dense == std::vector<float>{1, 2});
  CHECK(cb->sparse[0].ids == std::vector<int64_t>{0, 1});
  CHECK(cb->labels == std::vector<float>{0, 1});

  o.base_dir = dir.File("elsewhere");
  auto missing = OpenDataset(
      Json::parse(R"({"format":"libsvm","path":"x.libsvm","num_features":3})"), "data", o);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kInvalidArgument);
  CHECK_THAT(missing.status().message(), Contains(dir.File("elsewhere/x.libsvm")));
}

TEST_CASE("OpenDataset: Fashion-MNIST idx config, sharded") {
  Json cfg = Json::parse(R"({"format":"idx",
      "images":"t10k-images-idx3-ubyte.gz","labels":"t10k-labels-idx1-ubyte.gz"})");
  DatasetOptions o;
  o.base_dir = "/usr/share/datasets/fashion-mnist";
  o.num_shards = 3;
  o.shard_index = 2;
  o.repeat = false;
  o.shuffle = false;
  auto d = OpenDataset(cfg, "eval", o);
  REQUIRE(d.ok());
  CHECK((*d)->info().dense_dim == 784);
  CHECK((*d)->info().classes == 10);
  CHECK(dynamic_cast<InMemoryDataset&>(**d).shard_size() == 3333);  // indices 2, 5, ..., 9998
  auto b = (*d)->Next(2);
  REQUIRE(b.ok());
  // Test labels 2 and 5 (file order 9 2 1 1 6 1 ...).
  CHECK(b->labels == std::vector<float>{1, 1});
  CHECK(b->dense.size() == 2u * 784u);
}

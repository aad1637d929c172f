// The libsvm reader's "field_offsets": one sparse field per id range, field-local ids.
#include <catch2/catch.hpp>

#include "libps/data/dataset.h"
#include "libps/data/readers.h"
#include "test/support/temp_dir.h"

using Catch::Matchers::Contains;
using ps::Json;
using ps::data::DatasetOptions;
using ps::data::LibSvmOptions;
using ps::data::OpenDataset;
using ps::data::ReadLibSvm;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

TEST_CASE("LibSVM field_offsets: one field per range, ids made field-local") {
  TempDir dir;
  const std::string f = dir.File("ctr.libsvm");
  // num_features 8, fields [0,3) [3,5) [5,8); 1-based ids in the file.
  WriteBytes(f,
             "1 1:1 4:1 8:2\n"
             "0 6:1 3:0.5 2:1\n"  // field 0 twice (order kept), no id of field 1
             "0\n");
  LibSvmOptions o;
  o.num_features = 8;
  o.field_offsets = {0, 3, 5};
  auto t = ReadLibSvm(f, o);
  REQUIRE(t.ok());
  CHECK(t->info.examples == 3);
  CHECK(t->info.field_names == std::vector<std::string>{"field_0", "field_1", "field_2"});
  CHECK(t->info.field_vocab_sizes == std::vector<int64_t>{3, 2, 3});
  REQUIRE(t->sparse.size() == 3u);
  CHECK(t->sparse[0].offsets == std::vector<int64_t>{0, 1, 3, 3});
  CHECK(t->sparse[0].ids == std::vector<int64_t>{0, 2, 1});
  CHECK(t->sparse[0].values == std::vector<float>{1, 0.5f, 1});
  CHECK(t->sparse[1].offsets == std::vector<int64_t>{0, 1, 1, 1});
  CHECK(t->sparse[1].ids == std::vector<int64_t>{0});
  CHECK(t->sparse[2].offsets == std::vector<int64_t>{0, 1, 2, 2});
  CHECK(t->sparse[2].ids == std::vector<int64_t>{2, 0});
  CHECK(t->sparse[2].values == std::vector<float>{2, 1});

  SECTION("a single offset {0} is one field named field_0 over all ids") {
    o.field_offsets = {0};
    auto one = ReadLibSvm(f, o);
    REQUIRE(one.ok());
    CHECK(one->info.field_names == std::vector<std::string>{"field_0"});
    CHECK(one->info.field_vocab_sizes == std::vector<int64_t>{8});
    CHECK(one->sparse[0].ids == std::vector<int64_t>{0, 3, 7, 5, 2, 1});
  }
  SECTION("without field_offsets: unchanged, one field \"features\" of global ids") {
    o.field_offsets.clear();
    auto one = ReadLibSvm(f, o);
    REQUIRE(one.ok());
    CHECK(one->info.field_names == std::vector<std::string>{"features"});
    CHECK(one->sparse[0].ids == std::vector<int64_t>{0, 3, 7, 5, 2, 1});
  }
  SECTION("bad offsets") {
    o.field_offsets = {1, 3};
    CHECK_THAT(ReadLibSvm(f, o).status().message(),
               Contains(": field_offsets[0]: 1 (the first offset must be 0)"));
    o.field_offsets = {0, 3, 3};
    CHECK_THAT(ReadLibSvm(f, o).status().message(),
               Contains(": field_offsets[2]: 3: offsets must start at 0"));
    o.field_offsets = {0, 8};
    CHECK_THAT(ReadLibSvm(f, o).status().message(),
               Contains(": field_offsets[1]: 8: offsets must start at 0"));
  }
}

TEST_CASE("OpenDataset: field_offsets from the config, errors name the key") {
  TempDir dir;
  WriteBytes(dir.File("x.libsvm"), "1 1:1 3:1\n0 2:1 4:1\n");
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  auto d = OpenDataset(Json::parse(R"({"format":"libsvm","path":"x.libsvm","num_features":4,
                                       "field_offsets":[0,2]})"),
                       "data", o);
  REQUIRE(d.ok());
  CHECK((*d)->info().field_vocab_sizes == std::vector<int64_t>{2, 2});
  auto b = (*d)->Next(2);
  REQUIRE(b.ok());
  REQUIRE(b->sparse.size() == 2u);
  CHECK(b->sparse[0].ids == std::vector<int64_t>{0, 1});
  CHECK(b->sparse[1].ids == std::vector<int64_t>{0, 1});

  auto err = [&](const char* text) {
    auto r = OpenDataset(Json::parse(text), "job.train_data", o);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK_THAT(err(R"({"format":"libsvm","path":"x.libsvm","num_features":4,"field_offsets":[]})"),
             Contains("job.train_data.field_offsets: must not be empty"));
  CHECK_THAT(err(R"({"format":"libsvm","path":"x.libsvm","num_features":4,"field_offsets":[1,2]})"),
             Contains("job.train_data.field_offsets[0]: 1 (the first offset must be 0)"));
  CHECK_THAT(
      err(R"({"format":"libsvm","path":"x.libsvm","num_features":4,"field_offsets":[0,2,2]})"),
      Contains("job.train_data.field_offsets[2]: 2"));
  CHECK_THAT(err(R"({"format":"libsvm","path":"x.libsvm","num_features":4,"field_offsets":[0,4]})"),
             Contains("job.train_data.field_offsets[1]: 4"));
  CHECK_THAT(err(R"({"format":"libsvm","path":"x.libsvm","num_features":4,"field_offsets":"0"})"),
             Contains("job.train_data.field_offsets"));
}

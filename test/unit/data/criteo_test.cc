// The "criteo_tsv" format: Criteo's layout (label, 13 integer, 26 categorical columns,
// any but the label may be empty), hashed or hex ids, grouped fields, errors by line.
#include <catch2/catch.hpp>

#include <cmath>

#include "libps/data/dataset.h"
#include "libps/data/text.h"
#include "test/support/temp_dir.h"
#include "test/unit/data/test_util.h"

using ps::Code;
using ps::Json;
using ps::data::DatasetOptions;
using ps::data::OpenDataset;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

// label, then ints (13, "" = empty), then cats (26, "" = empty), tab-separated.
std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  ints.resize(13);
  cats.resize(26);
  std::string s = label;
  for (const auto& v : ints) s += "\t" + v;
  for (const auto& v : cats) s += "\t" + v;
  return s + "\n";
}

DatasetOptions Pass(const TempDir& dir) {
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  o.repeat = false;
  return o;
}

}  // namespace

TEST_CASE("criteo_tsv: dense log1p, hashed ids, empty fields") {
  TempDir dir;
  WriteBytes(dir.File("day_0"), Line("1", {"3", "", "-2", "0"}, {"68fd1e64", "", "80e26c9b"}) +
                                    Line("0", {}, {}) + "\n");
  for (const char* where : {R"("files":["day_*"])", R"("path":"day_0")"}) {
    auto d = OpenDataset(
        Json::parse(std::string(R"({"format":"criteo_tsv",)") + where + R"(,"buckets":1000})"),
        "job.train_data", Pass(dir));
    INFO(d.status().message());
    REQUIRE(d.ok());
    CHECK((*d)->info().dense_dim == 13);
    REQUIRE((*d)->info().field_names.size() == 26u);
    CHECK((*d)->info().field_names[25] == "C26");
    auto b = (*d)->Next(10);
    REQUIRE(b.ok());
    REQUIRE(b->size == 2);
    CHECK(b->labels == std::vector<float>{1, 0});
    CHECK(b->dense[0] == static_cast<float>(std::log1p(3.0)));
    CHECK(b->dense[1] == 0.0f);  // empty
    CHECK(b->dense[2] == 0.0f);  // negative counts as 0
    for (int i = 13; i < 26; ++i) CHECK(b->dense[static_cast<size_t>(i)] == 0.0f);
    CHECK(b->sparse[0].ids ==
          std::vector<int64_t>{static_cast<int64_t>(ps::data::HashBytes("68fd1e64") % 1000)});
    CHECK(b->sparse[1].ids.empty());  // empty column: no id
    CHECK(b->sparse[2].ids ==
          std::vector<int64_t>{static_cast<int64_t>(ps::data::HashBytes("80e26c9b") % 1000)});
    CHECK(b->sparse[0].offsets == std::vector<int64_t>{0, 1, 1});
    CHECK(b->sparse[0].values.empty());
  }
}

TEST_CASE("criteo_tsv: hex ids grouped into fields, raw or dropped dense columns") {
  TempDir dir;
  WriteBytes(dir.File("g.tsv"),
             Line("1", {"7"}, {"a", "3", "3", "", "1f"}) + Line("0", {}, {"0", "", "2"}));
  auto d = OpenDataset(
      Json::parse(R"({"format":"criteo_tsv","files":"g.tsv","dense":"raw","categorical_ids":"hex",
      "fields":[{"name":"small","columns":["C1"],"buckets":16},
                {"name":"multi","columns":["C2","C3",4,"C5"],"buckets":32}]})"),
      "job.train_data", Pass(dir));
  INFO(d.status().message());
  REQUIRE(d.ok());
  CHECK((*d)->info().field_names == std::vector<std::string>{"small", "multi"});
  CHECK((*d)->info().field_vocab_sizes == std::vector<int64_t>{16, 32});
  auto b = (*d)->Next(10);
  REQUIRE(b.ok());
  REQUIRE(b->size == 2);
  CHECK(b->dense[0] == 7.0f);
  CHECK(b->sparse[0].ids == std::vector<int64_t>{10, 0});
  CHECK(b->sparse[1].ids == std::vector<int64_t>{3, 3, 31, 2});  // C4 empty
  CHECK(b->sparse[1].offsets == std::vector<int64_t>{0, 3, 4});

  auto dropped = OpenDataset(
      Json::parse(R"({"format":"criteo_tsv","files":"g.tsv","dense":"drop","buckets":8})"),
      "job.train_data", Pass(dir));
  REQUIRE(dropped.ok());
  CHECK((*dropped)->info().dense_dim == 0);
}

TEST_CASE("criteo_tsv: bad lines name the file, line and column") {
  TempDir dir;
  const std::string good = Line("0", {}, {"1"});
  WriteBytes(dir.File("cols.tsv"), good + "1\t2\t3\n");
  WriteBytes(dir.File("int.tsv"), good + Line("1", {"", "x1"}, {}));
  WriteBytes(dir.File("label.tsv"), good + Line("2", {}, {}));
  WriteBytes(dir.File("hex.tsv"), good + Line("1", {}, {"zz"}));
  auto error_of = [&](const std::string& file, const std::string& ids = "hash") {
    auto d = OpenDataset(Json::parse(R"({"format":"criteo_tsv","files":")" + file +
                                     R"(","buckets":16,)" + R"("categorical_ids":")" + ids + "\"}"),
                         "job.train_data", Pass(dir));
    REQUIRE(d.ok());
    auto b = (*d)->Next(10);
    REQUIRE_FALSE(b.ok());
    CHECK(b.status().code() == Code::kInvalidArgument);
    return b.status().message();
  };
  CHECK(error_of("cols.tsv") ==
        dir.File("cols.tsv") +
            ":2: expected 40 tab-separated fields (label, 13 integer, 26 categorical), got 3");
  CHECK(error_of("int.tsv") ==
        dir.File("int.tsv") + ":2: column I2: expected an integer, got 'x1'");
  CHECK(error_of("label.tsv") == dir.File("label.tsv") + ":2: label: expected 0 or 1, got '2'");
  CHECK(error_of("hex.tsv", "hex") ==
        dir.File("hex.tsv") + ":2: column C1 (field 'C1'): expected a hex id below 16, got 'zz'");

  auto config_error = [&](const std::string& extra) {
    auto d = OpenDataset(Json::parse(R"({"format":"criteo_tsv","files":"x",)" + extra + "}"),
                         "job.train_data", Pass(dir));
    REQUIRE_FALSE(d.ok());
    return d.status().message();
  };
  CHECK(config_error(R"("dense":"log")") ==
        "job.train_data.dense: must be \"log1p\", \"raw\" or \"drop\", got \"log\"");
  CHECK(config_error(R"("buckets":[1,2])") ==
        "job.train_data.buckets: expected one integer, or one per categorical column (26), got 2");
  CHECK(config_error(R"("fields":[{"name":"a","columns":["C27"],"buckets":3}])") ==
        "job.train_data.fields[0].columns[0]: column 27 is not in C1..C26");
  CHECK(config_error(R"("integer_columns":2)") ==
        "job.train_data.buckets: required key is missing");
}

// TFRecord framing and tf.Example decoding: round trips through files (plain and
// gzip, streamed and in memory), wire compatibility with TensorFlow's schema (records
// encoded by hand from the protobuf wire format), and every error a bad record can give:
// corrupt CRC, truncated record, missing and mistyped features, on_error: skip.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>

#include "libps/core/crc32c.h"
#include "libps/data/dataset.h"
#include "libps/data/text.h"
#include "libps/data/tf_example.h"
#include "libps/data/tfrecord.h"
#include "test/support/temp_dir.h"
#include "test/unit/data/test_util.h"

using Catch::Matchers::Contains;
using ps::Code;
using ps::Json;
using ps::data::AppendTfRecord;
using ps::data::DatasetOptions;
using ps::data::OpenDataset;
using ps::data::Row;
using ps::data::TfExampleBuilder;
using ps::data::TfExampleDecoder;
using ps::data::TfExampleSpec;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

// Example k: click = k % 2, x = {k, -k}, site = {k % 10}, user = {k, k + 1},
// country = {"de"} / {"us"} / {"xx"} (k % 3), query = {"q<k>"} with weight k / 10.
std::string ExampleRecord(int64_t k) {
  TfExampleBuilder b;
  const int64_t click = k % 2, site = k % 10;
  const std::vector<int64_t> user{k, k + 1};
  const std::vector<float> x{static_cast<float>(k), static_cast<float>(-k)};
  const std::vector<std::string> country{k % 3 == 0 ? "de" : k % 3 == 1 ? "us" : "xx"};
  const std::vector<std::string> query{"q" + std::to_string(k)};
  const std::vector<float> weight{static_cast<float>(k) / 10};
  b.AddInt64("click", std::span(&click, 1));
  b.AddFloat("x", x);
  b.AddInt64("site", std::span(&site, 1));
  b.AddInt64("user", user);
  b.AddBytes("country", country);
  b.AddBytes("query", query);
  b.AddFloat("query_w", weight);
  b.AddInt64("unused", user);
  std::string out;
  b.AppendTo(&out);
  return out;
}

std::string Records(int64_t begin, int64_t end) {
  std::string out;
  for (int64_t k = begin; k < end; ++k) AppendTfRecord(ExampleRecord(k), &out);
  return out;
}

const char* kSpec = R"("label":"click",
  "dense":[{"feature":"x","shape":[2]}],
  "sparse":[{"feature":"site","type":"int64","vocab":10},
            {"feature":"user","name":"user_hashed","type":"int64","hash_buckets":50},
            {"feature":"country","type":"bytes","vocabulary":["de","us"]},
            {"feature":"query","type":"bytes","hash_buckets":100,"weights":"query_w"}])";

Json Config(const std::string& where, const std::string& extra = "") {
  return Json::parse(std::string(R"({"format":"tfrecord",)") + where + "," + kSpec + extra + "}");
}

DatasetOptions Pass(const TempDir& dir) {
  DatasetOptions o;
  o.base_dir = dir.path();
  o.shuffle = false;
  o.repeat = false;
  return o;
}

// Checks that batch row r is example k.
void CheckExample(const ps::model::Batch& b, int64_t r, int64_t k) {
  const auto u = static_cast<size_t>(r);
  CHECK(b.labels[u] == static_cast<float>(k % 2));
  CHECK(b.dense[2 * u] == static_cast<float>(k));
  CHECK(b.dense[2 * u + 1] == static_cast<float>(-k));
  auto ids = [&](size_t f) {
    const auto& s = b.sparse[f];
    return std::vector<int64_t>(s.ids.begin() + s.offsets[u], s.ids.begin() + s.offsets[u + 1]);
  };
  CHECK(ids(0) == std::vector<int64_t>{k % 10});
  CHECK(ids(1) == std::vector<int64_t>{static_cast<int64_t>(ps::data::HashInt(k) % 50),
                                       static_cast<int64_t>(ps::data::HashInt(k + 1) % 50)});
  CHECK(ids(2) == std::vector<int64_t>{k % 3 == 2 ? 0 : k % 3 + 1});  // "xx" is out of vocabulary
  CHECK(ids(3) == std::vector<int64_t>{
                      static_cast<int64_t>(ps::data::HashBytes("q" + std::to_string(k)) % 100)});
  // Values: 1 for the fields without weights, the weight for query.
  const auto& q = b.sparse[3];
  CHECK(q.values[static_cast<size_t>(q.offsets[u])] == static_cast<float>(k) / 10);
  CHECK(b.sparse[0].values[static_cast<size_t>(b.sparse[0].offsets[u])] == 1.0f);
}

}  // namespace

TEST_CASE("tfrecord: framing round trip and the reader's offsets") {
  TempDir dir;
  std::string file;
  const std::vector<std::string> payloads{"", "a", std::string(100000, 'z'), "last"};
  for (const auto& p : payloads) AppendTfRecord(p, &file);
  CHECK(file.size() == 4 * 16 + 1 + 100000 + 4);
  // The header is the length, then its masked CRC-32C (TensorFlow's layout).
  CHECK(file.substr(0, 8) == std::string(8, '\0'));
  uint32_t masked;
  std::memcpy(&masked, file.data() + 8, 4);
  CHECK(masked == ps::MaskedCrc32c(ps::Crc32c(0, file.data(), 8)));
  for (bool gzip : {false, true}) {
    WriteBytes(dir.File("r"), gzip ? ps::data::testing::Gzip(file) : file);
    auto stream = ps::data::ByteStream::Open(dir.File("r"));
    REQUIRE(stream.ok());
    ps::data::TfRecordReader reader(std::move(*stream));
    std::vector<uint64_t> offsets;
    for (const auto& p : payloads) {
      std::string_view got;
      auto more = reader.Next(&got);
      REQUIRE(more.ok());
      REQUIRE(*more);
      CHECK(got == p);
      offsets.push_back(reader.record_offset());
    }
    CHECK(offsets == std::vector<uint64_t>{0, 16, 33, 100049});
    std::string_view got;
    auto end = reader.Next(&got);
    REQUIRE(end.ok());
    CHECK_FALSE(*end);
  }
}

TEST_CASE("tf.Example: records encoded by hand from TensorFlow's wire format decode") {
  // Example{features{feature{key:"y" value{int64_list{value:[1]}}}
  //                  feature{key:"f" value{float_list{value:[0.5, 2]}}}
  //                  feature{key:"b" value{bytes_list{value:["us"]}}}
  //                  feature{key:"i" value{int64_list{value:[3, 300]} (unpacked)}}}}
  const std::string y = "\x0a\x01y\x12\x05\x1a\x03\x0a\x01\x01";
  const std::string f = std::string(
                            "\x0a\x01"
                            "f\x12\x0c\x12\x0a\x0a\x08") +
                        std::string("\x00\x00\x00\x3f\x00\x00\x00\x40", 8);
  const std::string b =
      "\x0a\x01"
      "b\x12\x06\x0a\x04\x0a\x02us";
  const std::string i = "\x0a\x01i\x12\x07\x1a\x05\x08\x03\x08\xac\x02";
  std::string features;
  for (const std::string& entry : {y, f, b, i}) {
    features += '\x0a';
    features += static_cast<char>(entry.size());
    features += entry;
  }
  const std::string example =
      "\x0a" + std::string(1, static_cast<char>(features.size())) + features;

  TfExampleSpec spec;
  spec.label = "y";
  spec.dense.push_back({"f", {2}, 2});
  ps::data::TfSparseSpec bs;
  bs.feature = bs.name = "b";
  bs.type = ps::data::TfSparseSpec::Type::kBytes;
  bs.map = ps::data::TfSparseSpec::Map::kVocabulary;
  bs.vocabulary = *ps::data::Vocabulary::Create({"de", "us"}, 1);
  bs.size = 3;
  ps::data::TfSparseSpec is;
  is.feature = is.name = "i";
  is.size = 1000;
  spec.sparse = {bs, is};
  TfExampleDecoder decoder(std::make_shared<const TfExampleSpec>(spec));
  Row row;
  ps::Status st = decoder.Decode(example, &row);
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(row.label == 1.0f);
  CHECK(row.dense == std::vector<float>{0.5f, 2.0f});
  CHECK(row.ids == std::vector<int64_t>{2, 3, 300});
  CHECK(row.ends == std::vector<uint32_t>{1, 3});

  // The builder writes what the hand encoding says (packed lists, entries in order).
  TfExampleBuilder builder;
  const int64_t one = 1;
  const std::vector<float> fv{0.5f, 2.0f};
  builder.AddInt64("y", std::span(&one, 1));
  builder.AddFloat("f", fv);
  std::string built;
  builder.AppendTo(&built);
  std::string want_features;
  for (const std::string& entry : {y, f}) {
    want_features += '\x0a';
    want_features += static_cast<char>(entry.size());
    want_features += entry;
  }
  CHECK(built == "\x0a" + std::string(1, static_cast<char>(want_features.size())) + want_features);
  CHECK(decoder.Decode("\x0a\x05garbage", &row).code() == Code::kInvalidArgument);
}

TEST_CASE("tfrecord: examples round trip, streamed and in memory, plain and gzip") {
  TempDir dir;
  WriteBytes(dir.File("a.tfrecord"), Records(0, 30));
  WriteBytes(dir.File("b.tfrecord.gz"), ps::data::testing::Gzip(Records(30, 50)));
  auto d =
      OpenDataset(Config(R"("files":["a.tfrecord","b.tfrecord*"])"), "job.train_data", Pass(dir));
  INFO(d.status().message());
  REQUIRE(d.ok());
  const auto& info = (*d)->info();
  CHECK(info.dense_dim == 2);
  CHECK(info.classes == 2);
  CHECK(info.field_names == std::vector<std::string>{"site", "user_hashed", "country", "query"});
  CHECK(info.field_vocab_sizes == std::vector<int64_t>{10, 50, 3, 100});
  int64_t k = 0;
  for (;;) {
    auto b = (*d)->Next(16);
    REQUIRE(b.ok());
    if (b->size == 0) break;
    for (int64_t r = 0; r < b->size; ++r) CheckExample(*b, r, k++);
  }
  CHECK(k == 50);

  auto m = OpenDataset(Config(R"("path":"b.tfrecord.gz")"), "job.eval_data", Pass(dir));
  INFO(m.status().message());
  REQUIRE(m.ok());
  CHECK((*m)->info().examples == 20);
  auto b = (*m)->Next(100);
  REQUIRE(b.ok());
  REQUIRE(b->size == 20);
  for (int64_t r = 0; r < 20; ++r) CheckExample(*b, r, 30 + r);
}

TEST_CASE("tfrecord: a corrupt data CRC names the file and offset; skip goes on") {
  TempDir dir;
  std::string bytes = Records(0, 10);
  const size_t third = Records(0, 2).size();  // offset of record 2
  bytes[third + 12 + 3] ^= 0x40;              // a byte of its data
  WriteBytes(dir.File("c.tfrecord"), bytes);
  auto fail = OpenDataset(Config(R"("files":"c.tfrecord")"), "job.train_data", Pass(dir));
  REQUIRE(fail.ok());  // the first record is fine
  ps::Status st;
  for (int i = 0; i < 5 && st.ok(); ++i) st = (*fail)->Next(4).status();
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message() == dir.File("c.tfrecord") + ": record at byte offset " +
                            std::to_string(third) + ": data CRC mismatch (corrupt record of " +
                            std::to_string(ExampleRecord(2).size()) + " bytes)");

  auto skip =
      OpenDataset(Config(R"("files":"c.tfrecord","on_error":"skip")"), "job.train_data", Pass(dir));
  REQUIRE(skip.ok());
  auto b = (*skip)->Next(100);
  REQUIRE(b.ok());
  REQUIRE(b->size == 9);
  for (int64_t r = 0; r < 9; ++r) CheckExample(*b, r, r < 2 ? r : r + 1);
  CHECK((*skip)->skipped() == 1);
}

TEST_CASE("tfrecord: a corrupt length or a truncated record ends the file") {
  TempDir dir;
  const std::string good = Records(0, 4);
  std::string bad_length = good + Records(4, 6);
  bad_length[good.size() + 2] ^= 0x01;  // a byte of record 4's length
  WriteBytes(dir.File("len.tfrecord"), bad_length);
  const std::string full = Records(0, 6);
  WriteBytes(dir.File("cut.tfrecord"), full.substr(0, full.size() - 7));
  WriteBytes(dir.File("cut-header.tfrecord"), good + Records(4, 5).substr(0, 5));
  struct Case {
    const char* file;
    std::string message;
    size_t good;
  };
  const std::string at = ": record at byte offset " + std::to_string(good.size()) + ": ";
  const std::string at5 = ": record at byte offset " + std::to_string(Records(0, 5).size()) + ": ";
  for (const Case& c :
       {Case{"len.tfrecord", at + "length CRC mismatch (corrupt header)", 4},
        Case{"cut.tfrecord",
             at5 + "truncated: " + std::to_string(ExampleRecord(5).size() + 4 - 7) + " of " +
                 std::to_string(ExampleRecord(5).size() + 4) + " bytes of data and CRC",
             5},
        Case{"cut-header.tfrecord", at + "truncated header: 5 of 12 bytes", 4}}) {
    INFO(c.file);
    auto fail = OpenDataset(Config(std::string(R"("files":")") + c.file + "\""), "job.train_data",
                            Pass(dir));
    REQUIRE(fail.ok());
    auto first = (*fail)->Next(100);
    REQUIRE_FALSE(first.ok());
    CHECK(first.status().code() == Code::kInvalidArgument);
    CHECK(first.status().message() == dir.File(c.file) + c.message);
    auto skip = OpenDataset(Config(std::string(R"("files":")") + c.file + R"(","on_error":"skip")"),
                            "job.train_data", Pass(dir));
    REQUIRE(skip.ok());
    auto b = (*skip)->Next(100);
    REQUIRE(b.ok());
    CHECK(b->size == static_cast<int64_t>(c.good));
    CHECK((*skip)->skipped() == 1);
  }
}

TEST_CASE("tfrecord: missing and mistyped features name the feature, file and offset") {
  TempDir dir;
  auto write = [&](const std::string& name, const std::function<void(TfExampleBuilder&)>& fill) {
    TfExampleBuilder b;
    fill(b);
    std::string rec;
    b.AppendTo(&rec);
    std::string file = Records(0, 1);
    const size_t offset = file.size();
    AppendTfRecord(rec, &file);
    WriteBytes(dir.File(name), file);
    return dir.File(name) + ": record at byte offset " + std::to_string(offset) + ": ";
  };
  const int64_t zero = 0, one = 1;
  const std::vector<float> x{1, 2};
  const std::vector<int64_t> ids{1};
  const std::vector<std::string> tokens{"de"};
  auto base = [&](TfExampleBuilder& b, bool site_as_float, bool with_user) {
    b.AddInt64("click", std::span(&one, 1));
    b.AddFloat("x", x);
    if (site_as_float) {
      b.AddFloat("site", x);
    } else {
      b.AddInt64("site", ids);
    }
    if (with_user) b.AddInt64("user", ids);
    b.AddBytes("country", tokens);
    b.AddBytes("query", tokens);
    b.AddFloat("query_w", std::span(x.data(), 1));
  };
  auto error_of = [&](const std::string& file, const std::string& extra = "") {
    auto d = OpenDataset(Config("\"files\":\"" + file + "\"", extra), "job.train_data", Pass(dir));
    REQUIRE(d.ok());
    auto b = (*d)->Next(10);
    REQUIRE_FALSE(b.ok());
    CHECK(b.status().code() == Code::kInvalidArgument);
    return b.status().message();
  };
  std::string at = write("mistyped", [&](TfExampleBuilder& b) { base(b, true, true); });
  CHECK(error_of("mistyped") == at + "feature 'site': expected int64_list, got float_list");
  at = write("missing", [&](TfExampleBuilder& b) { base(b, false, false); });
  CHECK(error_of("missing") == at + "feature 'user': missing");
  at = write("short", [&](TfExampleBuilder& b) {
    b.AddInt64("click", std::span(&zero, 1));
    b.AddFloat("x", std::span(x.data(), 1));
  });
  CHECK(error_of("short") == at + "feature 'x': expected 2 values, got 1");
  at = write("label", [&](TfExampleBuilder& b) {
    const int64_t two = 2;
    b.AddInt64("click", std::span(&two, 1));
  });
  CHECK(error_of("label") == at + "feature 'click': label 2.000000 is not a class index in 0..1");
  at = write("range", [&](TfExampleBuilder& b) {
    base(b, false, true);
    const int64_t big = 10;
    b.AddInt64("site", std::span(&big, 1));  // a repeated key: the last one counts
  });
  CHECK(error_of("range") == at + "feature 'site': id 10 is out of range [0, 10)");

  // "optional": a missing feature is an empty field.
  const std::string optional_user =
      R"(,"sparse":[{"feature":"user","type":"int64","vocab":5,"optional":true}])";
  auto d = OpenDataset(
      Json::parse(std::string(R"({"format":"tfrecord","files":"missing","label":"click")") +
                  optional_user + "}"),
      "job.train_data", Pass(dir));
  INFO(d.status().message());
  REQUIRE(d.ok());
  auto b = (*d)->Next(10);
  REQUIRE(b.ok());
  REQUIRE(b->size == 2);
  CHECK(b->sparse[0].offsets == std::vector<int64_t>{0, 2, 2});  // example 0 has user {0, 1}
}

TEST_CASE("tfrecord: feature spec errors name the key") {
  DatasetOptions o;
  auto err = [&](const std::string& extra) {
    auto r = OpenDataset(Json::parse(R"({"format":"tfrecord","files":"x",)" + extra + "}"),
                         "job.train_data", o);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(err(R"("sparse":[])") == "job.train_data.label: required key is missing");
  CHECK(err(R"("label":"y")") ==
        "job.train_data: needs at least one \"dense\" or \"sparse\" feature");
  CHECK(err(R"("label":"y","sparse":[{"feature":"a","type":"float","vocab":3}])") ==
        "job.train_data.sparse[0].type: must be \"int64\" or \"bytes\", got \"float\"");
  CHECK(
      err(R"("label":"y","sparse":[{"feature":"a","type":"int64"}])") ==
      "job.train_data.sparse[0]: needs exactly one of vocab (int64 ids as they are), hash_buckets, "
      "vocabulary (bytes)");
  CHECK(err(R"("label":"y","sparse":[{"feature":"a","type":"bytes","vocab":3}])") ==
        "job.train_data.sparse[0].vocab: needs type int64");
  CHECK(err(R"("label":"y","sparse":[{"feature":"a","type":"int64","hash_buckets":0}])") ==
        "job.train_data.sparse[0]: the field's size must be in [1, 2^31], got 0");
  CHECK(
      err(R"("label":"y","dense":[{"feature":"a","shape":[2,0]}])") ==
      "job.train_data.dense[0].shape: dimensions must be positive, with at most 2^24 values in all");
  CHECK(err(R"("label":"y","dense":[{"feature":"a","shape":[2],"dtype":"x"}])") ==
        "job.train_data.dense[0].dtype: unknown key");
}

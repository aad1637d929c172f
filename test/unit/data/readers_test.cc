#include <catch2/catch.hpp>

#include <array>
#include <filesystem>

#include <numeric>

#include "libps/data/readers.h"
#include "test/support/temp_dir.h"
#include "test/unit/data/test_util.h"

using Catch::Matchers::Contains;
using ps::Code;
using ps::data::CsvCategorical;
using ps::data::CsvOptions;
using ps::data::ExampleTable;
using ps::data::LibSvmOptions;
using ps::data::ReadCsv;
using ps::data::ReadIdx;
using ps::data::ReadLibSvm;
using ps::data::ReadMaybeGzipFile;
using ps::data::testing::BigEndian32;
using ps::data::testing::Gzip;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

namespace {

const std::string kDir = "/usr/share/datasets/fashion-mnist/";
const std::string kTrainImages = kDir + "train-images-idx3-ubyte.gz";
const std::string kTrainLabels = kDir + "train-labels-idx1-ubyte.gz";
const std::string kTestImages = kDir + "t10k-images-idx3-ubyte.gz";
const std::string kTestLabels = kDir + "t10k-labels-idx1-ubyte.gz";

std::string Idx3(uint32_t n, uint32_t rows, uint32_t cols, const std::string& pixels) {
  return BigEndian32(0x803) + BigEndian32(n) + BigEndian32(rows) + BigEndian32(cols) + pixels;
}
std::string Idx1(uint32_t n, const std::string& labels) {
  return BigEndian32(0x801) + BigEndian32(n) + labels;
}

}  // namespace

TEST_CASE("Fashion-MNIST train set parses: 60000 28x28 images, first label 9 (ankle boot)") {
  auto t = ReadIdx(kTrainImages, kTrainLabels);
  REQUIRE(t.ok());
  CHECK(t->info.examples == 60000);
  CHECK(t->info.dense_dim == 28 * 28);
  CHECK(t->info.classes == 10);
  CHECK(t->sparse.empty());
  CHECK(t->dense_u8.size() == 60000u * 784u);
  CHECK(t->dense_f32.empty());
  // The first ten labels, read from the file's bytes 8..17 with Python's gzip module.
  std::vector<float> first(t->labels.begin(), t->labels.begin() + 10);
  CHECK(first == std::vector<float>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  // Fashion-MNIST is balanced: 6000 training images per class.
  std::vector<int> counts(10, 0);
  for (float l : t->labels) counts.at(static_cast<size_t>(l))++;
  CHECK(counts == std::vector<int>(10, 6000));
  // Sum of the first image's 784 bytes (reference: Python's gzip module).
  int64_t sum = std::accumulate(t->dense_u8.begin(), t->dense_u8.begin() + 784, int64_t{0});
  CHECK(sum == 76247);
  // A batch gets x / 255 as float.
  auto b = t->StartBatch();
  t->AppendTo(0, &b);
  REQUIRE(b.size == 1);
  REQUIRE(b.dense.size() == 784u);
  double fsum = std::accumulate(b.dense.begin(), b.dense.end(), 0.0);
  CHECK(fsum == Approx(76247.0 / 255.0).epsilon(1e-6));
  CHECK(*std::max_element(b.dense.begin(), b.dense.end()) <= 1.0f);
  CHECK(b.labels == std::vector<float>{9});
  // More examples go after it, in the order given, each value exactly byte * (1 / 255).
  const std::array<int64_t, 3> more{2, 1, 59999};
  t->AppendTo(more, &b);
  REQUIRE(b.size == 4);
  REQUIRE(b.dense.size() == 4u * 784u);
  size_t exact = 0;
  const std::array<size_t, 4> examples{0, 2, 1, 59999};
  for (size_t e = 0; e < examples.size(); ++e) {
    for (size_t k = 0; k < 784u; ++k) {
      exact += b.dense[e * 784u + k] ==
               static_cast<float>(t->dense_u8[examples[e] * 784u + k]) * t->dense_u8_scale;
    }
  }
  CHECK(exact == 4u * 784u);
  CHECK(b.labels == std::vector<float>{9, 0, 0, t->labels[59999]});
}

TEST_CASE("Fashion-MNIST test set parses: 10000 images, 1000 per class") {
  auto t = ReadIdx(kTestImages, kTestLabels);
  REQUIRE(t.ok());
  CHECK(t->info.examples == 10000);
  CHECK(t->info.dense_dim == 784);
  std::vector<float> first(t->labels.begin(), t->labels.begin() + 10);
  CHECK(first == std::vector<float>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  std::vector<int> counts(10, 0);
  for (float l : t->labels) counts.at(static_cast<size_t>(l))++;
  CHECK(counts == std::vector<int>(10, 1000));
}

TEST_CASE("gzipped and raw IDX files give identical tables") {
  TempDir dir;
  auto images = ReadMaybeGzipFile(kTestImages);
  auto labels = ReadMaybeGzipFile(kTestLabels);
  REQUIRE(images.ok());
  REQUIRE(labels.ok());
  CHECK(images->size() == 16u + 10000u * 784u);
  WriteBytes(dir.File("images"), *images);
  WriteBytes(dir.File("labels"), *labels);
  auto gz = ReadIdx(kTestImages, kTestLabels);
  auto raw = ReadIdx(dir.File("images"), dir.File("labels"));
  REQUIRE(gz.ok());
  REQUIRE(raw.ok());
  CHECK(gz->info.examples == raw->info.examples);
  CHECK(gz->info.dense_dim == raw->info.dense_dim);
  CHECK(gz->dense_u8 == raw->dense_u8);
  CHECK(gz->labels == raw->labels);

  SECTION("concatenated gzip members read as one stream") {
    std::string half = images->substr(0, 1000);
    WriteBytes(dir.File("two.gz"), Gzip(half) + Gzip(images->substr(1000)));
    auto both = ReadMaybeGzipFile(dir.File("two.gz"));
    REQUIRE(both.ok());
    CHECK(*both == *images);
  }
}

TEST_CASE("IDX corruption is reported with file and offset") {
  TempDir dir;
  const std::string images = dir.File("img");
  const std::string labels = dir.File("lbl");
  WriteBytes(images, Idx3(3, 2, 2, std::string(12, '\x07')));
  WriteBytes(labels, Idx1(3, std::string("\x01\x00\x02", 3)));
  {
    auto ok = ReadIdx(images, labels);
    REQUIRE(ok.ok());
    CHECK(ok->info.classes == 3);
    CHECK(ok->labels == std::vector<float>{1, 0, 2});
  }

  SECTION("bad magic") {
    WriteBytes(images, BigEndian32(0x804) + Idx3(3, 2, 2, std::string(12, '\0')).substr(4));
    auto r = ReadIdx(images, labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() ==
          images + ": offset 0: bad magic 0x00000804, expected 0x00000803 (idx3 unsigned bytes)");
  }
  SECTION("labels file given as images") {
    auto r = ReadIdx(labels, labels);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Contains(labels + ": offset 0: bad magic 0x00000801"));
  }
  SECTION("truncated header") {
    WriteBytes(images, Idx3(3, 2, 2, "").substr(0, 10));
    auto r = ReadIdx(images, labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          images + ": offset 4: truncated: expected 12 bytes of dimensions, got 6");
  }
  SECTION("empty file") {
    WriteBytes(images, "");
    auto r = ReadIdx(images, labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          images + ": offset 0: truncated: expected 4 bytes of magic, got 0");
  }
  SECTION("truncated pixels") {
    WriteBytes(images, Idx3(3, 2, 2, std::string(11, '\0')));
    auto r = ReadIdx(images, labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          images + ": offset 16: truncated: expected 12 bytes of pixels, got 11");
  }
  SECTION("trailing bytes") {
    WriteBytes(labels, Idx1(3, std::string(5, '\0')));
    auto r = ReadIdx(images, labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == labels + ": offset 11: 2 trailing bytes after the labels");
  }
  SECTION("zero dimension") {
    WriteBytes(images, Idx3(3, 0, 2, ""));
    auto r = ReadIdx(images, labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == images + ": offset 8: dimension 1 is 0");
  }
  SECTION("count mismatch") {
    WriteBytes(labels, Idx1(2, std::string(2, '\0')));
    auto r = ReadIdx(images, labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() ==
          labels + ": offset 4: count mismatch: 2 labels for 3 images in " + images);
  }
  SECTION("label out of range for the configured classes") {
    auto r = ReadIdx(images, labels, 2);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == labels + ": offset 10: label 2 is out of range for 2 classes");
  }
  SECTION("missing file: a configuration error (InvalidArgument, exit 2)") {
    auto r = ReadIdx(dir.File("nope"), labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Contains(dir.File("nope")));
  }
  SECTION("a directory: a configuration error (InvalidArgument, exit 2), not an I/O error") {
    std::filesystem::create_directory(dir.File("sub"));
    auto r = ReadIdx(dir.File("sub"), labels);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Contains("Is a directory"));
  }
}

TEST_CASE("truncated real Fashion-MNIST images, raw and gzipped") {
  TempDir dir;
  auto images = ReadMaybeGzipFile(kTrainImages);
  REQUIRE(images.ok());
  const std::string cut = images->substr(0, 16 + 1234);
  const std::string gz = dir.File("train-images-idx3-ubyte.gz");
  WriteBytes(gz, Gzip(cut));
  auto r = ReadIdx(gz, kTrainLabels);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        gz + ": offset 16: truncated: expected 47040000 bytes of pixels, got 1234");

  SECTION("a cut gzip stream") {
    std::string whole = Gzip(images->substr(0, 100000));
    WriteBytes(gz, whole.substr(0, whole.size() / 2));
    auto c = ReadIdx(gz, kTrainLabels);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kInvalidArgument);
    CHECK_THAT(c.status().message(),
               Contains(gz + ": gzip: truncated stream at compressed offset"));
  }
  SECTION("corrupt gzip data") {
    std::string whole = Gzip(images->substr(0, 100000));
    for (size_t i = 20; i < 60; ++i) whole[i] = static_cast<char>(whole[i] ^ 0x5a);
    WriteBytes(gz, whole);
    auto c = ReadIdx(gz, kTrainLabels);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kInvalidArgument);
    CHECK_THAT(c.status().message(), Contains(gz + ": gzip: "));
    CHECK_THAT(c.status().message(), Contains("at compressed offset"));
  }
  SECTION("garbage after the gzip stream") {
    WriteBytes(gz, Gzip(cut) + "junk");
    auto c = ReadMaybeGzipFile(gz);
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.status().message(), Contains("4 trailing bytes after the gzip stream"));
  }
}

TEST_CASE("LibSVM parses labels, 1-based ids, values and comments") {
  TempDir dir;
  const std::string f = dir.File("clicks.libsvm");
  WriteBytes(f,
             "# a comment line\n"
             "1 1:0.5 3:2   # trailing comment\n"
             "-1 2:1.5\r\n"
             "\n"
             "+1 1000:1 qid:7\n"
             "-1\n");
  LibSvmOptions o;
  o.num_features = 1000;
  auto t = ReadLibSvm(f, o);
  REQUIRE(t.ok());
  CHECK(t->info.examples == 4);
  CHECK(t->info.classes == 2);
  CHECK(t->info.dense_dim == 0);
  CHECK(t->info.field_vocab_sizes == std::vector<int64_t>{1000});
  CHECK(t->labels == std::vector<float>{1, 0, 1, 0});
  REQUIRE(t->sparse.size() == 1u);
  CHECK(t->sparse[0].offsets == std::vector<int64_t>{0, 2, 3, 4, 4});
  CHECK(t->sparse[0].ids == std::vector<int64_t>{0, 2, 1, 999});
  CHECK(t->sparse[0].values == std::vector<float>{0.5f, 2.0f, 1.5f, 1.0f});

  SECTION("zero-based ids: 1000 is out of range") {
    o.zero_based = true;
    auto z = ReadLibSvm(f, o);
    REQUIRE_FALSE(z.ok());
    CHECK(z.status().message() == f + ":5: feature id 1000 is out of range [0, 999]");
  }
  SECTION("id 0 with 1-based ids") {
    WriteBytes(f, "1 1:1\n0 0:1\n");
    auto z = ReadLibSvm(f, o);
    REQUIRE_FALSE(z.ok());
    CHECK(z.status().message() ==
          f + ":2: feature id 0 is out of range [1, 1000] (ids are 1-based)");
  }
  SECTION("bad feature") {
    std::string text;
    for (int i = 0; i < 1042; ++i) text += "0 1:1\n";
    text += "1 2:1 x:1\n";
    WriteBytes(f, text);
    auto z = ReadLibSvm(f, o);
    REQUIRE_FALSE(z.ok());
    CHECK(z.status().code() == Code::kInvalidArgument);
    CHECK(z.status().message() == f + ":1043: bad feature 'x:1'");
  }
  SECTION("feature without value, bad value, bad label") {
    WriteBytes(f, "1 7\n");
    CHECK(ReadLibSvm(f, o).status().message() == f + ":1: bad feature '7'");
    WriteBytes(f, "1 7:abc\n");
    CHECK(ReadLibSvm(f, o).status().message() == f + ":1: bad feature '7:abc'");
    WriteBytes(f, "1 7:nan\n");
    CHECK(ReadLibSvm(f, o).status().message() == f + ":1: bad feature '7:nan'");
    WriteBytes(f, "0 1:1\nyes 7:1\n");
    CHECK(ReadLibSvm(f, o).status().message() == f + ":2: bad label 'yes'");
    WriteBytes(f, "0 1:1\n0.5 7:1\n");
    CHECK(ReadLibSvm(f, o).status().message() == f + ":2: bad label '0.5'");
  }
  SECTION("multi-class integer labels") {
    WriteBytes(f, "0 1:1\n2 2:1\n1 3:1\n");
    auto m = ReadLibSvm(f, o);
    REQUIRE(m.ok());
    CHECK(m->info.classes == 3);
    CHECK(m->labels == std::vector<float>{0, 2, 1});
    o.classes = 2;
    auto c = ReadLibSvm(f, o);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().message() == f + ":2: label 2 is out of range for 2 classes");
  }
  SECTION("-1 mixed with other labels") {
    WriteBytes(f, "-1 1:1\n1 1:1\n2 1:1\n");
    auto m = ReadLibSvm(f, o);
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().message() == f + ":3: label 2 in a file with -1 labels; expected -1 or +1");
  }
  SECTION("gzipped LibSVM") {
    WriteBytes(f, Gzip("1 1:0.5 3:2\n-1 2:1.5\n"));
    auto g = ReadLibSvm(f, o);
    REQUIRE(g.ok());
    CHECK(g->sparse[0].ids == std::vector<int64_t>{0, 2, 1});
  }
}

TEST_CASE("CSV: dense columns, categorical columns through a vocabulary, labels") {
  TempDir dir;
  const std::string f = dir.File("data.csv");
  WriteBytes(f,
             "y,a,b,color,ignored\n"
             "1,0.5,2,red,zzz\n"
             "0,1.5,-3,blue,zzz\n"
             "\n"
             "1,\"2.5\",4e1,green,q\n"
             "0,3,1,red,\"x,\"\"y\"\n");
  CsvOptions o;
  o.label = "y";
  o.dense = {"b", "a"};
  o.categorical = {CsvCategorical{"color", std::nullopt}};
  auto t = ReadCsv(f, o);
  REQUIRE(t.ok());
  CHECK(t->info.examples == 4);
  CHECK(t->info.dense_dim == 2);
  CHECK(t->info.classes == 2);
  CHECK(t->labels == std::vector<float>{1, 0, 1, 0});
  CHECK(t->dense_f32 == std::vector<float>{2, 0.5f, -3, 1.5f, 40, 2.5f, 1, 3});
  // Learned vocabulary: red (2), then blue and green (1 each) in byte order.
  CHECK(t->info.field_names == std::vector<std::string>{"color"});
  CHECK(t->info.field_vocab_sizes == std::vector<int64_t>{4});
  REQUIRE(t->sparse.size() == 1u);
  CHECK(t->sparse[0].ids == std::vector<int64_t>{1, 2, 3, 1});
  CHECK(t->sparse[0].offsets == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(t->sparse[0].values.empty());

  SECTION("fixed vocabulary sends unknown tokens to OOV id 0") {
    o.categorical = {CsvCategorical{"color", std::vector<std::string>{"blue", "red"}}};
    auto v = ReadCsv(f, o);
    REQUIRE(v.ok());
    CHECK(v->info.field_vocab_sizes == std::vector<int64_t>{3});
    CHECK(v->sparse[0].ids == std::vector<int64_t>{2, 1, 0, 2});
  }
  SECTION("string labels through a label vocabulary") {
    WriteBytes(f, "y,a\nno,1\nyes,2\nno,3\n");
    o.dense = {"a"};
    o.categorical.clear();
    o.label_vocabulary = std::vector<std::string>{"yes", "no"};
    auto v = ReadCsv(f, o);
    REQUIRE(v.ok());
    CHECK(v->labels == std::vector<float>{1, 0, 1});
    CHECK(v->info.label_names == std::vector<std::string>{"yes", "no"});
    WriteBytes(f, "a,y\n1,no\n2,maybe\n");
    auto bad = ReadCsv(f, o);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().message() == f + ":3:3: unknown label 'maybe' (label vocabulary: yes, no)");
  }
  SECTION("bad number names line, column and column name") {
    WriteBytes(f, "y,a,b,color,ignored\n1,0.5,2,red,z\n0,abc,1,red,z\n");
    auto bad = ReadCsv(f, o);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().message() == f + ":3:3: column 'a': bad number 'abc'");
    WriteBytes(f, "y,a,b,color,ignored\n1,0.5,,red,z\n");
    CHECK(ReadCsv(f, o).status().message() == f + ":2:7: column 'b': bad number ''");
  }
  SECTION("bad label") {
    WriteBytes(f, "y,a,b,color,ignored\n1,0.5,2,red,z\nx,1,1,red,z\n");
    CHECK(ReadCsv(f, o).status().message() == f + ":3:1: column 'y': bad label 'x'");
  }
  SECTION("wrong field count") {
    WriteBytes(f, "y,a,b,color,ignored\n1,0.5,2,red\n");
    CHECK(ReadCsv(f, o).status().message() == f + ":2: expected 5 fields, got 4");
  }
  SECTION("missing and duplicate columns") {
    WriteBytes(f, "y,a,color,ignored\n1,0.5,red,z\n");
    CHECK(ReadCsv(f, o).status().message() == f + ":1: no column 'b' in the header");
    WriteBytes(f, "y,a,b,a\n1,0.5,2,3\n");
    CHECK(ReadCsv(f, o).status().message() == f + ":1:7: duplicate column 'a'");
  }
  SECTION("unterminated quote") {
    WriteBytes(f, "y,a,b,color,ignored\n1,\"0.5,2,red,z\n");
    CHECK(ReadCsv(f, o).status().message() == f + ":2:3: unterminated quote");
  }
  SECTION("empty file") {
    WriteBytes(f, "");
    CHECK(ReadCsv(f, o).status().message() == f + ": empty file, expected a header line");
  }
}

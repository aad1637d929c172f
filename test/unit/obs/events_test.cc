#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "libps/core/crc32c.h"
#include "libps/obs/events.h"
#include "test/support/temp_dir.h"

using namespace ps;

namespace {

using ps::obs::EventWriter;
using ps::obs::ReadEventFile;
using ps::obs::ReadEvents;
using ps::obs::ScalarEvent;
using ps::testing::ReadBytes;
using ps::testing::TempDir;
using ps::testing::WriteBytes;

// "0a 03 76" -> bytes; spaces ignored.
std::string Hex(std::string_view hex) {
  std::string out;
  int hi = -1;
  for (char c : hex) {
    if (c == ' ' || c == '\n') continue;
    int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    REQUIRE(v >= 0);
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<char>(hi * 16 + v));
      hi = -1;
    }
  }
  REQUIRE(hi < 0);
  return out;
}

std::string Ascii(std::string_view s) { return std::string(s); }

}  // namespace

// The protobuf encoding by hand, from event.proto / summary.proto:
//   Event.wall_time  field 1, fixed64  -> key 0x09, 8 bytes little-endian double
//   Event.step       field 2, varint   -> key 0x10
//   Event.file_version field 3, bytes  -> key 0x1a, length, bytes
//   Event.summary    field 5, bytes    -> key 0x2a, length, Summary
//   Summary.value    field 1, bytes    -> key 0x0a, length, Value
//   Value.tag        field 1, bytes    -> key 0x0a, length, bytes
//   Value.simple_value field 2, fixed32 -> key 0x15, 4 bytes little-endian float
TEST_CASE("summary: events encode as hand-computed protobuf bytes") {
  // 256.5 = 0x4070080000000000; 1.5f = 0x3fc00000.
  CHECK(ps::obs::EncodeFileVersionEvent(256.5, "brain.Event:2") ==
        Hex("09 00 00 00 00 00 08 70 40 1a 0d") + Ascii("brain.Event:2"));
  CHECK(ps::obs::EncodeScalarEvent(256.5, 1, "v/1", 1.5f) ==
        Hex("09 00 00 00 00 00 08 70 40 10 01 2a 0c 0a 0a 0a 03") + Ascii("v/1") +
            Hex("15 00 00 c0 3f"));
  // Zero wall_time and step are left out (proto3); simple_value 0 is kept (a oneof member).
  CHECK(ps::obs::EncodeScalarEvent(0, 0, "a", 0.0f) ==
        Hex("2a 0a 0a 08 0a 01") + Ascii("a") + Hex("15 00 00 00 00"));
  // Multi-byte varint step: 300 = 0xac 0x02; a negative step is ten bytes (int64 as uint64).
  CHECK(ps::obs::EncodeScalarEvent(0, 300, "", 0.0f).substr(0, 3) == Hex("10 ac 02"));
  CHECK(ps::obs::EncodeScalarEvent(0, -1, "", 0.0f).substr(0, 11) ==
        Hex("10 ff ff ff ff ff ff ff ff ff 01"));
}

// Known-good files: these are the bytes other TensorBoard writers produce and test for
// (TensorFlow's event_file_loader test record, and tensorboard_logger's serialization test:
// wall_time 256.5, v/1 = 1.5 at step 1, v/22 = 16.0 at step 2).
TEST_CASE("summary: records match known-good event files byte for byte") {
  // 0x41d575dd25c00000 = 1440183447.0
  std::string tf_record =
      ps::obs::FrameRecord(ps::obs::EncodeFileVersionEvent(1440183447.0, "brain.Event:1"));
  CHECK(tf_record == Hex("18 00 00 00 00 00 00 00 a3 7f 4b 22 09 00 00 c0 25 dd 75 d5 41 1a 0d") +
                         Ascii("brain.Event:1") + Hex("ec f3 32 8d"));

  TempDir dir;
  {
    auto w = obs::EventWriter::Open(dir.path(), 256.5);
    REQUIRE(w.ok());
    REQUIRE(w->AddScalar("v/1", 1, 1.5, 256.5).ok());
    REQUIRE(w->AddScalar("v/22", 2, 16.0, 256.5).ok());
  }
  auto files = ps::obs::ListEventFiles(dir.path());
  REQUIRE(files.size() == 1);
  const std::string expected =
      Hex("18 00 00 00 00 00 00 00 a3 7f 4b 22 09 00 00 00 00 00 08 70 40 1a 0d") +
      Ascii("brain.Event:2") + Hex("bc 98 21 2b") +
      Hex("19 00 00 00 00 00 00 00 8b f1 08 28 09 00 00 00 00 00 08 70 40 10 01 2a 0c 0a 0a 0a 03") +
      Ascii("v/1") + Hex("15 00 00 c0 3f 2c ec c0 87") +
      Hex("1a 00 00 00 00 00 00 00 12 9b d8 2d 09 00 00 00 00 00 08 70 40 10 02 2a 0d 0a 0b 0a 04") +
      Ascii("v/22") + Hex("15 00 00 80 41 8f a3 b6 88");
  CHECK(ReadBytes(files[0]) == expected);
}

TEST_CASE("summary: file name, directory creation, and no overwriting") {
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof(host) - 1) == 0);
  CHECK(ps::obs::EventFileName(1732268000.9, "h1") == "events.out.tfevents.1732268000.h1");

  TempDir dir;
  const std::string sub = dir / "a/eval";
  auto w1 = obs::EventWriter::Open(sub, 1732268000.25);
  REQUIRE(w1.ok());
  CHECK(w1->path() == sub + "/events.out.tfevents.1732268000." + host);
  auto w2 = obs::EventWriter::Open(sub, 1732268000.75);  // same second: a new file beside it
  REQUIRE(w2.ok());
  CHECK(w2->path() == w1->path() + ".1");
  REQUIRE(w1->AddScalar("x", 1, 1.0).ok());
  CHECK(ps::obs::ListEventFiles(sub) == std::vector<std::string>{w1->path(), w2->path()});
  CHECK(ps::obs::ListEventFiles(dir / "missing").empty());
  // Each record is flushed at once: readable while the writer is still open.
  auto events = obs::ReadEvents(w1->path());
  REQUIRE(events.ok());
  REQUIRE(events->size() == 1);
  CHECK((*events)[0].tag == "x");
}

TEST_CASE("summary: scalars round-trip exactly") {
  TempDir dir;
  std::vector<obs::ScalarEvent> written = {
      {1732268001.125, 0, "train/loss", 2.302585f},
      {1732268002.5, 1, "train/accuracy", 0.0f},
      {1732268003.75, 500, "train/examples_per_sec", 35784.0f},
      {1732268004.0, int64_t{1} << 40, "eval/auc", -1.25e-7f},
      {0.0, -7, "", 1e30f},
      {1e9, 129, std::string(300, 't'), 0.5f},  // a tag longer than a one-byte varint length
  };
  std::string path;
  {
    auto w = obs::EventWriter::Open(dir.path(), 1732268000.0);
    REQUIRE(w.ok());
    path = w->path();
    for (const auto& e : written) REQUIRE(w->AddScalar(e.tag, e.step, e.value, e.wall_time).ok());
  }
  auto contents = obs::ReadEventFile(path);
  REQUIRE(contents.ok());
  CHECK(contents->file_version == "brain.Event:2");
  CHECK(contents->scalars == written);
}

TEST_CASE("summary: every flipped byte and every cut inside a record is detected") {
  TempDir dir;
  std::string path;
  {
    auto w = obs::EventWriter::Open(dir.path(), 100.0);
    REQUIRE(w.ok());
    path = w->path();
    REQUIRE(w->AddScalar("loss", 10, 0.5, 101.0).ok());
    REQUIRE(w->AddScalar("loss", 20, 0.25, 102.0).ok());
  }
  const std::string good = ReadBytes(path);
  REQUIRE(obs::ReadEventFile(path).ok());
  const std::string bad = dir / "bad";
  for (size_t i = 0; i < good.size(); ++i) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0x10);
    WriteBytes(bad, b);
    auto r = obs::ReadEventFile(bad);
    INFO("flipped byte " << i);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == ps::Code::kDataLoss);
  }
  // Record boundaries: 12 + 24 + 4, then two scalar records.
  const size_t first = 12 + 24 + 4;
  for (size_t n = 1; n < good.size(); ++n) {
    WriteBytes(bad, good.substr(0, n));
    auto r = obs::ReadEventFile(bad);
    INFO("cut at " << n);
    if (n == first || n == first + (good.size() - first) / 2) {
      CHECK(r.ok());
    } else {
      CHECK(r.status().code() == ps::Code::kDataLoss);
    }
  }
  // The message names the record and the problem.
  std::string b = good;
  b[first + 12] = static_cast<char>(b[first + 12] ^ 1);
  WriteBytes(bad, b);
  auto r = obs::ReadEventFile(bad);
  REQUIRE(!r.ok());
  CHECK(r.status().message() == bad + ": record 1 at offset 40: data checksum mismatch");
  CHECK(obs::ReadEventFile(dir / "nope").status().code() == ps::Code::kIo);
}

TEST_CASE("summary: the decoder skips unknown fields and non-scalar values") {
  // Event{step 3, summary{value{node_name(7)="n", tag="img", image(4)={}}, value{tag="s",
  // metadata(9)={}, simple_value=2}}, log_message(6)={}, source_metadata(10)={}}, with the step last.
  std::string v1 = Hex("3a 01") + "n" + Hex("0a 03") + "img" + Hex("22 00");
  std::string v2 = Hex("0a 01") + "s" + Hex("4a 00 15 00 00 00 40");
  std::string summary = Hex("0a") + std::string(1, static_cast<char>(v1.size())) + v1 + Hex("0a") +
                        std::string(1, static_cast<char>(v2.size())) + v2;
  std::string event = Hex("2a") + std::string(1, static_cast<char>(summary.size())) + summary +
                      Hex("32 00 52 00") + Hex("10 03");
  TempDir dir;
  WriteBytes(dir / "events.out.tfevents.1.h",
             ps::obs::FrameRecord(ps::obs::EncodeFileVersionEvent(1, "brain.Event:2")) +
                 ps::obs::FrameRecord(event));
  auto events = obs::ReadEvents(dir / "events.out.tfevents.1.h");
  REQUIRE(events.ok());
  REQUIRE(events->size() == 1);
  CHECK((*events)[0] == obs::ScalarEvent{0, 3, "s", 2.0f});

  // A known field with the wrong wire type, and a truncated sub-message, are DataLoss.
  WriteBytes(dir / "bad1",
             ps::obs::FrameRecord(Hex("11 00 00 00 00 00 00 00 00")));  // step as fixed64
  CHECK(obs::ReadEventFile(dir / "bad1").status().code() == ps::Code::kDataLoss);
  WriteBytes(dir / "bad2", ps::obs::FrameRecord(Hex("2a 05 0a 03 0a 01")));
  CHECK(obs::ReadEventFile(dir / "bad2").status().code() == ps::Code::kDataLoss);
}

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "libps/core/crc32c.h"

namespace {
uint32_t Crc(const std::vector<uint8_t>& v) { return ps::Crc32c(0, v.data(), v.size()); }

// Bit-at-a-time reference, straight from the definition of the reflected CRC.
uint32_t NaiveCrc32c(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}
}  // namespace

TEST_CASE("Crc32c: standard check value and RFC 3720 B.4 vectors") {
  CHECK(ps::Crc32c(0, "123456789", 9) == 0xE3069283u);
  CHECK(ps::Crc32c(0, "", 0) == 0u);
  std::vector<uint8_t> v(32, 0x00);
  CHECK(Crc(v) == 0x8A9136AAu);
  v.assign(32, 0xFF);
  CHECK(Crc(v) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint8_t>(i);
  CHECK(Crc(v) == 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint8_t>(31 - i);
  CHECK(Crc(v) == 0x113FDB5Cu);
  const std::vector<uint8_t> pdu = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
                                    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
                                    0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  CHECK(Crc(pdu) == 0xD9963A56u);
}

TEST_CASE("Crc32c: portable and hardware paths agree with a bitwise reference") {
  std::mt19937 rng(12345);
  std::vector<uint8_t> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const bool hw = ps::internal::HasHardwareCrc32c();
  INFO("hardware crc32c: " << hw);
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t len : {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 255, 1000, 4096}) {
      const uint8_t* p = buf.data() + offset;
      uint32_t ref = NaiveCrc32c(p, len);
      CHECK(ps::internal::Crc32cPortable(0, p, len) == ref);
      if (hw) CHECK(ps::internal::Crc32cHardware(0, p, len) == ref);
      CHECK(ps::Crc32c(0, p, len) == ref);
    }
  }
}

TEST_CASE("Crc32c: incremental equals one-shot for every split point") {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(300);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const uint32_t whole = ps::Crc32c(0, buf.data(), buf.size());
  for (size_t split = 0; split <= buf.size(); ++split) {
    uint32_t a = ps::Crc32c(0, buf.data(), split);
    CHECK(ps::Crc32c(a, buf.data() + split, buf.size() - split) == whole);
    uint32_t b = ps::internal::Crc32cPortable(0, buf.data(), split);
    CHECK(ps::internal::Crc32cPortable(b, buf.data() + split, buf.size() - split) == whole);
  }
}

TEST_CASE("MaskedCrc32c: TensorFlow's mask, and its inverse") {
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8, computed by hand (mod 2^32).
  CHECK(ps::MaskedCrc32c(0xE3069283u) == 0xC78AB0E5u);
  std::mt19937 rng(3);
  for (int i = 0; i < 1000; ++i) {
    uint32_t c = static_cast<uint32_t>(rng());
    CHECK(ps::UnmaskCrc32c(ps::MaskedCrc32c(c)) == c);
  }
  CHECK(ps::MaskedCrc32c(0) != 0u);
}

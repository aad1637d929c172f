// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4 and
// TensorFlow's record and checkpoint formats. Uses the SSE4.2 crc32 instruction when the
// CPU has it (checked once), a slicing-by-8 table otherwise; both give identical results.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ps {

// Extends the CRC `init` (a value previously returned by Crc32c, or 0 to start) with
// `n` bytes at `data`: Crc32c(Crc32c(0, a), b) == Crc32c(0, a ++ b).
// Crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t Crc32c(uint32_t init, const void* data, size_t n);

// TensorFlow's masked form, stored next to data that may itself contain CRCs
// (TFRecord framing): rotate right by 15 and add a constant.
inline uint32_t MaskedCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

namespace internal {
// The two implementations behind Crc32c, exposed for tests and benchmarks.
// Crc32cHardware must only be called when HasHardwareCrc32c() is true.
bool HasHardwareCrc32c();
uint32_t Crc32cPortable(uint32_t init, const void* data, size_t n);
uint32_t Crc32cHardware(uint32_t init, const void* data, size_t n);
}  // namespace internal

}  // namespace ps

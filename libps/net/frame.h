// The frame: a 24-byte header, an Envelope (FlatBuffers, verified), a raw payload.
//
//   offset  size  field
//   0       4     magic "PSTR"
//   4       2     frame format version (kFrameVersion)
//   6       2     flags (must be 0)
//   8       4     envelope length in bytes (1 .. limits.max_envelope_bytes)
//   12      4     reserved (must be 0)
//   16      8     payload length in bytes (0 .. limits.max_payload_bytes)
// All integers little-endian. Lengths are checked before anything is allocated.
#pragma once

#include <array>
#include <cstdint>

#include "libps/core/status.h"

namespace ps::net {

inline constexpr uint32_t kFrameMagic = 0x52545350;  // "PSTR" read as little-endian
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 24;

struct Limits {
  uint32_t max_envelope_bytes = 16u << 20;  // row-id lists travel in the envelope
  uint64_t max_payload_bytes = 2ull << 30;  // the largest tensor slice in one frame
};

// Until a peer has passed the handshake, its frames are a small envelope and no payload:
// a stranger announcing more is dropped before anything is allocated for it.
inline constexpr uint32_t kHandshakeEnvelopeBytes = 4096;
inline constexpr Limits kHandshakeLimits{kHandshakeEnvelopeBytes, 0};

struct FrameHeader {
  uint32_t envelope_bytes = 0;
  uint64_t payload_bytes = 0;
};

std::array<uint8_t, kFrameHeaderBytes> EncodeHeader(const FrameHeader& h);
// ProtocolError naming the bad field when magic, version, flags or a length is off.
Result<FrameHeader> DecodeHeader(const std::array<uint8_t, kFrameHeaderBytes>& bytes,
                                 const Limits& limits);

}  // namespace ps::net

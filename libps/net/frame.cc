#include "libps/net/frame.h"

#include <string>

namespace ps::net {
namespace {
template <typename T>
void Put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename T>
T Get(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}
}  // namespace

std::array<uint8_t, kFrameHeaderBytes> EncodeHeader(const FrameHeader& h) {
  std::array<uint8_t, kFrameHeaderBytes> b{};
  Put<uint32_t>(&b[0], kFrameMagic);
  Put<uint16_t>(&b[4], kFrameVersion);
  Put<uint16_t>(&b[6], 0);
  Put<uint32_t>(&b[8], h.envelope_bytes);
  Put<uint32_t>(&b[12], 0);
  Put<uint64_t>(&b[16], h.payload_bytes);
  return b;
}

Result<FrameHeader> DecodeHeader(const std::array<uint8_t, kFrameHeaderBytes>& b,
                                 const Limits& limits) {
  if (Get<uint32_t>(&b[0]) != kFrameMagic) return ProtocolError("frame: bad magic");
  if (uint16_t v = Get<uint16_t>(&b[4]); v != kFrameVersion)
    return ProtocolError("frame: unsupported frame version " + std::to_string(v) +
                         " (this build speaks " + std::to_string(kFrameVersion) + ")");
  if (Get<uint16_t>(&b[6]) != 0 || Get<uint32_t>(&b[12]) != 0)
    return ProtocolError("frame: reserved header bits are set");
  FrameHeader h;
  h.envelope_bytes = Get<uint32_t>(&b[8]);
  h.payload_bytes = Get<uint64_t>(&b[16]);
  if (h.envelope_bytes == 0) return ProtocolError("frame: empty envelope");
  if (h.envelope_bytes > limits.max_envelope_bytes)
    return ProtocolError("frame: envelope of " + std::to_string(h.envelope_bytes) +
                         " bytes exceeds the limit of " +
                         std::to_string(limits.max_envelope_bytes));
  if (h.payload_bytes > limits.max_payload_bytes)
    return ProtocolError("frame: payload of " + std::to_string(h.payload_bytes) +
                         " bytes exceeds the limit of " + std::to_string(limits.max_payload_bytes));
  return h;
}

}  // namespace ps::net

// Small parsing and hashing helpers shared by the readers of every format.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "libps/data/random.h"

namespace ps::data {

// The whole of s as a finite double ("+1.5" accepted); false otherwise.
inline bool ParseDouble(std::string_view s, double* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*out);
}

// The whole of s as a decimal int64 ("+3" accepted); false otherwise.
inline bool ParseInt(std::string_view s, int64_t* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// An integral label: "1", "+1", "-1", "1.0" are accepted.
inline bool ParseLabel(std::string_view s, int64_t* out) {
  if (ParseInt(s, out)) return true;
  double d;
  if (!ParseDouble(s, &d) || std::floor(d) != d || std::fabs(d) > 1e15) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

// The whole of s as 1 to 16 hex digits (either case); false otherwise.
inline bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Stable 64-bit hashes for hash buckets (FNV-1a finished by Mix64; not TensorFlow's
// FarmHash fingerprint, so bucket ids differ from tf.strings.to_hash_bucket_fast's).
inline uint64_t HashBytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return Mix64(h);
}
inline uint64_t HashInt(int64_t v) { return Mix64(static_cast<uint64_t>(v)); }

}  // namespace ps::data

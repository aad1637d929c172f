// Cluster secret and the HMAC-SHA256 proofs of the Hello handshake (OpenSSL).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/status.h"

namespace ps::net {

inline constexpr size_t kNonceBytes = 16;

// Reads a secret file: its bytes less one trailing newline; a file that cannot be opened
// or is empty → InvalidArgument.
// Warns (log) when the file is readable by group or others.
Result<std::string> ReadSecretFile(const std::string& path);

std::vector<uint8_t> RandomNonce();

// HMAC-SHA256(secret, label | client_nonce | server_nonce | cluster_id (8 bytes LE)).
std::vector<uint8_t> Proof(std::string_view secret, std::string_view label,
                           std::span<const uint8_t> client_nonce,
                           std::span<const uint8_t> server_nonce, uint64_t cluster_id);

// Constant-time comparison.
bool ProofEquals(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace ps::net

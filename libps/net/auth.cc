#include "libps/net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "libps/core/log.h"

namespace ps::net {

Result<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument("secret file " + path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string secret = ss.str();
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.empty()) return InvalidArgument("secret file " + path + ": is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    PS_LOG(Warning) << "secret file " << path << " is readable by group or others; chmod 600 it";
  }
  return secret;
}

std::vector<uint8_t> RandomNonce() {
  std::vector<uint8_t> n(kNonceBytes);
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    // RAND_bytes only fails without an entropy source; a predictable nonce would
    // weaken the proof, so this is treated as impossible on a working system.
    PS_ASSERT(false && "RAND_bytes failed");
  }
  return n;
}

std::vector<uint8_t> Proof(std::string_view secret, std::string_view label,
                           std::span<const uint8_t> client_nonce,
                           std::span<const uint8_t> server_nonce, uint64_t cluster_id) {
  std::vector<uint8_t> msg;
  msg.insert(msg.end(), label.begin(), label.end());
  msg.insert(msg.end(), client_nonce.begin(), client_nonce.end());
  msg.insert(msg.end(), server_nonce.begin(), server_nonce.end());
  for (int i = 0; i < 8; ++i) msg.push_back(static_cast<uint8_t>(cluster_id >> (8 * i)));
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(),
       out.data(), &len);
  out.resize(len);
  return out;
}

bool ProofEquals(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ps::net

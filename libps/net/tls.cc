#include "libps/net/conn.h"

#include <fstream>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace ps::net {

namespace {

// OpenSSL's reason for the last failure, or `fallback`.
std::string OpenSslReason(const std::string& fallback) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  const char* reason = ERR_reason_error_string(e);
  return reason != nullptr ? reason : fallback;
}

}  // namespace

TlsContext::TlsContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsContext::~TlsContext() = default;

Result<std::shared_ptr<TlsContext>> TlsContext::Load(const std::string& cert_file,
                                                     const std::string& key_file,
                                                     const std::string& ca_file) {
  auto impl = std::make_unique<Impl>();
  SSL_CTX* ctx = impl->ctx.native_handle();
  ERR_clear_error();
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
    return Internal("TLS: cannot require TLS 1.2");
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return InvalidArgument("--tls-cert " + cert_file + ": " +
                           OpenSslReason("cannot load the certificate"));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    std::string reason = OpenSslReason("cannot load the private key");
    if (reason.find("mismatch") != std::string::npos || reason == "cannot load the private key") {
      std::ifstream probe(key_file);
      if (probe) reason = "does not match the certificate in " + cert_file;
    }
    return InvalidArgument("--tls-key " + key_file + ": " + reason);
  }
  if (SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr) != 1) {
    return InvalidArgument("--tls-ca " + ca_file + ": " +
                           OpenSslReason("cannot load the CA certificate"));
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return std::shared_ptr<TlsContext>(new TlsContext(std::move(impl)));
}

Result<std::shared_ptr<TlsContext>> TlsFromFlags(const std::string& cert_file,
                                                 const std::string& key_file,
                                                 const std::string& ca_file) {
  const int given = !cert_file.empty() + !key_file.empty() + !ca_file.empty();
  if (given == 0) return std::shared_ptr<TlsContext>();
  if (given != 3)
    return InvalidArgument("--tls-cert, --tls-key and --tls-ca: give all three or none");
  return TlsContext::Load(cert_file, key_file, ca_file);
}

}  // namespace ps::net

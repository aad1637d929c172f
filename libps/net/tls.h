// Optional mutual TLS for the transport: OpenSSL through Asio's ssl::stream. Every peer
// presents a certificate signed by the cluster CA and checks the other's against it.
// Asio-free header (pimpl).
#pragma once

#include <memory>
#include <string>

#include "libps/core/status.h"

namespace ps::net {

class TlsContext {
 public:
  // Loads this task's certificate (chain) and private key and the cluster CA, all PEM.
  // TLS 1.2 or newer; peers without a certificate signed by the CA are refused.
  // Errors name the file and OpenSSL's reason.
  static Result<std::shared_ptr<TlsContext>> Load(const std::string& cert_file,
                                                  const std::string& key_file,
                                                  const std::string& ca_file);
  ~TlsContext();
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit TlsContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// All three of --tls-cert, --tls-key and --tls-ca, or none: nullptr when none is given.
// Errors name the flag.
Result<std::shared_ptr<TlsContext>> TlsFromFlags(const std::string& cert_file,
                                                 const std::string& key_file,
                                                 const std::string& ca_file);

}  // namespace ps::net

// Throwaway certificates for the TLS tests, made by the openssl command line in a
// temporary directory (removed when the object goes away): a CA; a server certificate
// signed by it for "localhost" and 127.0.0.1 (usable as a client certificate too, as
// redis's replication and cluster links need); a client certificate signed by it; and a
// second CA that signed nothing (the "wrong CA"). Elliptic-curve keys, valid two days.
#pragma once

#include <string>

namespace sluice::testing {

class TlsCertificates {
 public:
  // Aborts the test binary with openssl's log when a certificate cannot be made.
  TlsCertificates();
  ~TlsCertificates();
  TlsCertificates(const TlsCertificates&) = delete;
  TlsCertificates& operator=(const TlsCertificates&) = delete;

  const std::string& dir() const { return dir_; }
  std::string ca_file() const { return dir_ + "/ca.crt"; }
  std::string server_cert() const { return dir_ + "/server.crt"; }
  std::string server_key() const { return dir_ + "/server.key"; }
  std::string client_cert() const { return dir_ + "/client.crt"; }
  std::string client_key() const { return dir_ + "/client.key"; }
  std::string other_ca_file() const { return dir_ + "/other-ca.crt"; }

 private:
  std::string dir_;
};

}  // namespace sluice::testing

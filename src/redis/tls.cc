#include "redis/tls.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

namespace sluice::internal {
namespace asio = boost::asio;
namespace {

// OpenSSL's reason for the last failure, e.g. "No such file or directory" or "PEM lib".
std::string Reason(const boost::system::error_code& ec) {
  std::string reason = ec.message();
  if (ec.category() == asio::error::get_ssl_category()) {
    if (const char* r = ERR_reason_error_string(static_cast<unsigned long>(ec.value()))) {
      reason = r;
    }
  }
  return reason;
}

bool IsIpAddress(const std::string& name) {
  boost::system::error_code ec;
  asio::ip::make_address(name, ec);
  return !ec;
}

}  // namespace

StatusOr<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const TlsOptions& options) {
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  context->set_verify_mode(asio::ssl::verify_peer);
  boost::system::error_code ec;
  if (options.ca_file.empty()) {
    context->set_default_verify_paths(ec);
    if (ec) {
      return InvalidArgumentError("TLS: cannot load the system's trust store: " + Reason(ec) +
                                  "; give the CA file as ?ca=<file>");
    }
  } else if (context->load_verify_file(options.ca_file, ec); ec) {
    return InvalidArgumentError("TLS: cannot load the CA file \"" + options.ca_file +
                                "\" (ca=): " + Reason(ec));
  }
  if (!options.cert_file.empty()) {
    if (context->use_certificate_chain_file(options.cert_file, ec); ec) {
      return InvalidArgumentError("TLS: cannot load the client certificate \"" + options.cert_file +
                                  "\" (cert=): " + Reason(ec));
    }
    if (context->use_private_key_file(options.key_file, asio::ssl::context::pem, ec);
        ec && Reason(ec).find("mismatch") == std::string::npos) {
      return InvalidArgumentError("TLS: cannot load the client key \"" + options.key_file +
                                  "\" (key=): " + Reason(ec));
    }
    if (ec || SSL_CTX_check_private_key(context->native_handle()) != 1) {
      ERR_clear_error();
      return InvalidArgumentError("TLS: the client key \"" + options.key_file +
                                  "\" does not belong to the certificate \"" + options.cert_file +
                                  "\"");
    }
  }
  return context;
}

std::string TlsNameFor(const TlsOptions& options, const std::string& host) {
  return options.server_name.empty() ? host : options.server_name;
}

Status PrepareTlsSession(SSL* ssl, const std::string& name) {
  if (IsIpAddress(name)) {
    // No SNI for an address (RFC 6066); the certificate must hold it as an IP SAN.
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) {
      return InternalError("TLS: cannot set the address to verify: " + name);
    }
    return Status::Ok();
  }
  // SSL_set_tlsext_host_name, without its macro's C cast.
  if (SSL_set1_host(ssl, name.c_str()) != 1 ||
      SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(name.c_str())) != 1) {
    return InternalError("TLS: cannot set the server name to verify: " + name);
  }
  return Status::Ok();
}

Status TlsHandshakeError(SSL* ssl, const boost::system::error_code& ec, const TlsOptions& options,
                         const std::string& where, const std::string& name) {
  const long verify = SSL_get_verify_result(ssl);
  ERR_clear_error();
  const std::string head = "TLS handshake with redis " + where + " failed: ";
  if (verify != X509_V_OK) {
    std::string cause = X509_verify_cert_error_string(verify);
    switch (verify) {
      case X509_V_ERR_HOSTNAME_MISMATCH:
      case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return UnavailableError(head + "the server's certificate does not hold the name \"" + name +
                                "\" (" + cause +
                                "); connect by a name it holds, or give that name as sni=<name>");
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      case X509_V_ERR_CERT_SIGNATURE_FAILURE:
        return UnavailableError(head + "the server's certificate is not signed by a trusted CA (" +
                                cause + "; trusted: " +
                                (options.ca_file.empty()
                                     ? std::string("the system's trust store")
                                     : "the CA file \"" + options.ca_file + "\"") +
                                "); give the CA that signed it as ca=<file>");
      default: return UnavailableError(head + "the server's certificate was refused: " + cause);
    }
  }
  std::string reason = Reason(ec);
  if (ec == asio::ssl::error::stream_truncated || ec == asio::error::eof ||
      ec == asio::error::connection_reset) {
    reason = "the server closed the connection";
  }
  return UnavailableError(head + reason +
                          " (is it a TLS port? rediss:// needs the port redis serves TLS on, "
                          "its tls-port)");
}

}  // namespace sluice::internal

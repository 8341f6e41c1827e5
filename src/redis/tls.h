// TLS for the connection (rediss://): the client context made from TlsOptions, the
// server-name check set on each session, and handshake errors that name their cause.
//
// Verification is always on: the server's chain must end at a CA of options.ca_file (or
// of the system's trust store) and the certificate must hold the name connected to
// (options.server_name, else the host: a DNS name against its DNS names, an IP address
// against its IP addresses).
//
// Thread-safety: the functions are thread-safe; a context is shared read-only.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <memory>
#include <string>

#include <openssl/ssl.h>
#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include "redis/endpoint.h"
#include "sluice/status.h"

namespace sluice::internal {

// A client context: TLS >= 1.2, peer verification, the CA file or the system's trust
// store, the client certificate and key. InvalidArgument naming the file and OpenSSL's
// reason when one cannot be loaded.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(const TlsOptions& options);

// The name `host`'s certificate must hold: options.server_name, else `host`.
std::string TlsNameFor(const TlsOptions& options, const std::string& host);

// Before the handshake on `ssl`: the name to verify (`name`: DNS or IP address) and, for
// a DNS name, SNI. Internal when OpenSSL refuses them.
Status PrepareTlsSession(SSL* ssl, const std::string& name);

// Why the handshake on `ssl` with `where` failed (`ec`), naming the cause: the
// certificate's verification result (a CA not trusted, a name it does not hold) with what
// to give instead, or that the port may not speak TLS. Unavailable.
Status TlsHandshakeError(SSL* ssl, const boost::system::error_code& ec, const TlsOptions& options,
                         const std::string& where, const std::string& name);

}  // namespace sluice::internal

// Where one Redis server listens, and how to log in and whether over TLS: parsed from a
// redis://, rediss://, unix:// or redis[s]+sentinel:// URL. One Connection serves one
// Endpoint.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::internal {

// TLS to the server (rediss://). The server's certificate is always verified, against
// `ca_file` or the system's trust store, and must name the host the URL names (or
// `server_name`).
struct TlsOptions {
  bool enabled = false;
  std::string ca_file;      // PEM CA bundle; empty: the system's trust store
  std::string cert_file;    // PEM client certificate (chain), with key_file; empty: none
  std::string key_file;     // PEM private key of cert_file
  std::string server_name;  // the name to verify and send as SNI; empty: the host
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
  // "host:port", "[v6]:port".
  std::string Describe() const;
};

struct Endpoint {
  // kSentinel: the primary that `sentinels` name for `master_name` (asked at every
  // connect; see redis/sentinel.h); host and port are unused.
  enum class Kind { kTcp, kUnix, kSentinel };
  Kind kind = Kind::kTcp;
  std::string host = "127.0.0.1";
  uint16_t port = 6379;
  std::string path;  // unix socket path
  std::string user;  // ACL user; empty: "default"
  std::string password;
  int db = 0;
  TlsOptions tls;
  // kSentinel only. The data node logs in with user/password, the sentinels with
  // sentinel_user/sentinel_password (a sentinel has its own requirepass or ACL).
  std::vector<HostPort> sentinels;
  std::string master_name;
  std::string sentinel_user;
  std::string sentinel_password;

  // "127.0.0.1:6379", "unix:/run/redis.sock" or "primary \"mymaster\" of sentinels
  // h1:26379,h2:26379" — never a password.
  std::string Describe() const;
};

// Parses
//   redis://[[user]:password@]host[:port][/db]   (IPv6 hosts in brackets)
//   rediss://[[user]:password@]host[:port][/db][?ca=F&cert=F&key=F&sni=NAME]   (TLS)
//   unix:///path/to/socket[?db=N&user=U&password=P]
//   redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master-name[/db]
//       [?sentinel_user=U&sentinel_password=P]   (sentinel port 26379 when omitted)
//   rediss+sentinel://... the same over TLS, with the TLS parameters too
// User, password and parameter values may be percent-encoded. The query starts at the
// first '?' that a known parameter name and '=' follow, or that no '@' follows; the
// userinfo runs to the last '@' before it (so an unencoded password may hold '@', '/'
// and '?', and a parameter value '@'). A '?' and "name=" of an unknown name before an
// '@' is refused as ambiguous; so are an empty port ("h:") and a signed db ("/-0").
// The TLS parameters: ca, a PEM CA file (default: the system's trust store); cert and
// key, a client certificate and its key (both or neither); sni, the name the server's
// certificate must hold when it differs from the host (also sent as SNI).
// InvalidArgument names what is wrong.
StatusOr<Endpoint> ParseRedisUrl(std::string_view url);

// sluice::RedactUrl (sluice/client.h): `url` with its secrets masked, parsed or not.
std::string RedactUrl(std::string_view url);

// Whether `url` names a Redis Cluster (redis+cluster:// or rediss+cluster://).
bool IsClusterUrl(std::string_view url);

// Parses the seed nodes of a Redis Cluster:
//   redis+cluster://[[user]:password@]host[:port][,host[:port]...]
//   rediss+cluster://...[?ca=F&cert=F&key=F&sni=NAME]   (TLS, parameters as rediss://)
// Every seed gets the same user, password and TLS options; a cluster has database 0
// only (a /0 path is accepted, any other is refused). InvalidArgument names what is
// wrong.
StatusOr<std::vector<Endpoint>> ParseClusterUrl(std::string_view url);

}  // namespace sluice::internal

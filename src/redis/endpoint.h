// Where one Redis server listens, and how to log in: parsed from a redis:// or unix://
// URL. One Connection serves one Endpoint.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::internal {

struct Endpoint {
  enum class Kind { kTcp, kUnix };
  Kind kind = Kind::kTcp;
  std::string host = "127.0.0.1";
  uint16_t port = 6379;
  std::string path;  // unix socket path
  std::string user;  // ACL user; empty: "default"
  std::string password;
  int db = 0;

  // "127.0.0.1:6379" or "unix:/run/redis.sock" — never the password.
  std::string Describe() const;
};

// Parses
//   redis://[[user]:password@]host[:port][/db]   (IPv6 hosts in brackets)
//   unix:///path/to/socket[?db=N&user=U&password=P]
// User and password may be percent-encoded. InvalidArgument names what is wrong.
StatusOr<Endpoint> ParseRedisUrl(std::string_view url);

// Whether `url` names a Redis Cluster (redis+cluster://).
bool IsClusterUrl(std::string_view url);

// Parses the seed nodes of a Redis Cluster:
//   redis+cluster://[[user]:password@]host[:port][,host[:port]...]
// Every seed gets the same user and password; a cluster has database 0 only (a /0 path
// is accepted, any other is refused). InvalidArgument names what is wrong.
StatusOr<std::vector<Endpoint>> ParseClusterUrl(std::string_view url);

}  // namespace sluice::internal

// service/settings.h — what sluiced's flags (flags.h) mean together: the default failure
// policy, and where each listener binds, each host name resolved once, at start.
#pragma once

#include <cstdint>
#include <string>

#include "service/flags.h"
#include "sluice/decision.h"
#include "sluice/status.h"

namespace sluiced {

// One listener's address: as its flag gave it, and the IP address it binds.
struct ListenAddress {
  std::string flag;   // "--http-listen"
  std::string given;  // "localhost:8080", as given
  std::string host;   // an IP address: the host given, or the address its name resolved to
  uint16_t port = 0;
  // HOST:PORT of `host` ("[::1]:8080" for IPv6).
  std::string Bound() const;
  // The address for log lines: `given`, and what it resolved to when that is a name
  // ("localhost:8080 (127.0.0.1)").
  std::string Shown() const;
};

struct Settings {
  Flags flags;
  sluice::FailurePolicy default_policy = sluice::FailurePolicy::kOpen;
  ListenAddress http, grpc, admin, metrics;
};

// The listen address of `flag`'s `value` (HOST:PORT, [IPv6]:PORT). A host that is not an
// IP address is resolved (getaddrinfo): its first IPv4 address, else its first IPv6 one.
// InvalidArgument, naming the flag, when the value is not HOST:PORT or the name does not
// resolve.
sluice::StatusOr<ListenAddress> ResolveListenAddress(const std::string& flag,
                                                     const std::string& value);

// The settings of `flags`: InvalidArgument (naming the flag) for a failure mode that is
// not open, closed or local, or a listen address ResolveListenAddress refuses (not
// resolved with --check-config, which opens no listener).
sluice::StatusOr<Settings> MakeSettings(const Flags& flags);

}  // namespace sluiced

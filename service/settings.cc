#include "service/settings.h"

#include <netdb.h>
#include <sys/socket.h>

#include <memory>

#include "sluice/boost_first.h"  // before any Boost header

#include <boost/asio/ip/address.hpp>

namespace sluiced {

std::string ListenAddress::Bound() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

std::string ListenAddress::Shown() const {
  const std::string bound = Bound();
  return bound == given ? given : given + " (" + host + ")";
}

sluice::StatusOr<ListenAddress> ResolveListenAddress(const std::string& flag,
                                                     const std::string& value) {
  ListenAddress out{.flag = flag, .given = value};
  const auto refuse = [&](const std::string& why) {
    return sluice::InvalidArgumentError(flag + " " + value + ": " + why);
  };
  const auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0) return refuse("expected HOST:PORT");
  std::string host = value.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port = value.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return refuse("expected HOST:PORT, with a port of 0 to 65535");
  out.port = static_cast<uint16_t>(std::stoi(port));
  boost::system::error_code ec;
  (void)boost::asio::ip::make_address(host, ec);
  if (!ec) {
    out.host = host;
    return out;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    return refuse("cannot resolve '" + host + "': " + ::gai_strerror(rc) +
                  " (give an IP address, or a name this host resolves)");
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  const addrinfo* chosen = nullptr;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      chosen = a;
      break;
    }
    if (a->ai_family == AF_INET6 && chosen == nullptr) chosen = a;
  }
  char text[NI_MAXHOST];
  if (chosen == nullptr || ::getnameinfo(chosen->ai_addr, chosen->ai_addrlen, text, sizeof text,
                                         nullptr, 0, NI_NUMERICHOST) != 0)
    return refuse("'" + host + "' resolves to no IP address (give an IP address)");
  out.host = text;
  return out;
}

sluice::StatusOr<Settings> MakeSettings(const Flags& flags) {
  Settings s{.flags = flags};
  auto policy = sluice::ParseFailurePolicy(flags.default_policy);
  if (!policy.ok() || *policy == sluice::FailurePolicy::kDefault)
    return sluice::InvalidArgumentError(
        "--default-failure-mode: expected open, closed or local, not '" + flags.default_policy +
        "'");
  s.default_policy = *policy;
  if (!flags.check_config.empty()) return s;
  for (auto [flag, value, out] :
       {std::tuple{"--http-listen", &flags.http_listen, &s.http},
        std::tuple{"--grpc-listen", &flags.grpc_listen, &s.grpc},
        std::tuple{"--admin-listen", &flags.admin_listen, &s.admin},
        std::tuple{"--metrics-listen", &flags.metrics_listen, &s.metrics}}) {
    auto address = ResolveListenAddress(flag, *value);
    if (!address.ok()) return address.status();
    *out = std::move(*address);
  }
  return s;
}

}  // namespace sluiced

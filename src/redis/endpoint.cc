#include "redis/endpoint.h"

#include <charconv>

namespace sluice::internal {
namespace {

StatusOr<std::string> PercentDecode(std::string_view in, std::string_view what) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= in.size()) {
      return InvalidArgumentError("bad percent-encoding in " + std::string(what));
    }
    auto [ptr, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, value, 16);
    if (ec != std::errc() || ptr != in.data() + i + 3) {
      return InvalidArgumentError("bad percent-encoding in " + std::string(what));
    }
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

StatusOr<int> ParseDb(std::string_view text) {
  int db = -1;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), db);
  if (ec != std::errc() || ptr != text.data() + text.size() || db < 0 || db > 1000000) {
    return InvalidArgumentError("database must be a number >= 0, got \"" + std::string(text) +
                                "\"");
  }
  return db;
}

}  // namespace

std::string Endpoint::Describe() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

StatusOr<Endpoint> ParseRedisUrl(std::string_view url) {
  Endpoint ep;
  constexpr std::string_view kRedis = "redis://";
  constexpr std::string_view kUnix = "unix://";
  if (url.starts_with(kUnix)) {
    ep.kind = Endpoint::Kind::kUnix;
    std::string_view rest = url.substr(kUnix.size());
    std::string_view query;
    if (auto q = rest.find('?'); q != std::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest[0] != '/') {
      return InvalidArgumentError(
          "unix URL needs an absolute socket path: unix:///path/to/redis.sock");
    }
    ep.path = std::string(rest);
    while (!query.empty()) {
      std::string_view pair = query.substr(0, query.find('&'));
      query = pair.size() < query.size() ? query.substr(pair.size() + 1) : std::string_view();
      auto eq = pair.find('=');
      if (eq == std::string_view::npos) {
        return InvalidArgumentError("unix URL query needs name=value pairs, got \"" +
                                    std::string(pair) + "\"");
      }
      std::string_view name = pair.substr(0, eq), value = pair.substr(eq + 1);
      if (name == "db") {
        auto db = ParseDb(value);
        if (!db.ok()) return db.status();
        ep.db = *db;
      } else if (name == "user" || name == "password") {
        auto decoded = PercentDecode(value, name);
        if (!decoded.ok()) return decoded.status();
        (name == "user" ? ep.user : ep.password) = std::move(*decoded);
      } else {
        return InvalidArgumentError("unknown unix URL parameter \"" + std::string(name) +
                                    "\"; known: db, user, password");
      }
    }
    return ep;
  }
  if (!url.starts_with(kRedis)) {
    if (IsClusterUrl(url)) {
      return InvalidArgumentError(
          "redis+cluster:// names a Redis Cluster; this takes one server (redis:// or unix://)");
    }
    if (url.starts_with("rediss://")) {
      return InvalidArgumentError("rediss:// (TLS) is not supported yet; use redis:// or unix://");
    }
    // Never echo the URL: it may hold a password.
    const auto colon = url.find("://");
    const std::string scheme =
        colon == std::string_view::npos ? std::string() : std::string(url.substr(0, colon));
    bool plain =
        !scheme.empty() && scheme.size() <= 16 &&
        scheme.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789+.-") == std::string::npos;
    return InvalidArgumentError(
        (plain ? "unknown URL scheme \"" + scheme + "://\"" : std::string("URL has no scheme")) +
        "; use redis://host:port, unix:///path or memory://");
  }
  std::string_view rest = url.substr(kRedis.size());
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    std::string_view user, password = userinfo;
    if (auto colon = userinfo.find(':'); colon != std::string_view::npos) {
      user = userinfo.substr(0, colon);
      password = userinfo.substr(colon + 1);
    }
    auto u = PercentDecode(user, "user");
    if (!u.ok()) return u.status();
    auto p = PercentDecode(password, "password");
    if (!p.ok()) return p.status();
    ep.user = std::move(*u);
    ep.password = std::move(*p);
  }
  std::string_view hostport = rest.substr(0, rest.find('/'));
  std::string_view path =
      hostport.size() < rest.size() ? rest.substr(hostport.size() + 1) : std::string_view();
  std::string_view port_text;
  if (!hostport.empty() && hostport[0] == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) return InvalidArgumentError("unclosed [ in IPv6 host");
    ep.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return InvalidArgumentError("expected :port after ]");
      port_text = after.substr(1);
    }
  } else {
    auto colon = hostport.find(':');
    ep.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) port_text = hostport.substr(colon + 1);
  }
  if (ep.host.empty()) return InvalidArgumentError("redis URL has no host (redis://host:port)");
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      // Not echoed: in "redis://user:secret" (the @host forgotten) the "port" is a password.
      return InvalidArgumentError("port must be a number 1-65535");
    }
    ep.port = static_cast<uint16_t>(port);
  }
  if (!path.empty()) {
    auto db = ParseDb(path);
    if (!db.ok()) return db.status();
    ep.db = *db;
  }
  return ep;
}

bool IsClusterUrl(std::string_view url) {
  return url.starts_with("redis+cluster://");
}

StatusOr<std::vector<Endpoint>> ParseClusterUrl(std::string_view url) {
  constexpr std::string_view kCluster = "redis+cluster://";
  if (!IsClusterUrl(url)) {
    return InvalidArgumentError("a Redis Cluster URL starts with redis+cluster://");
  }
  std::string_view rest = url.substr(kCluster.size());
  std::string_view userinfo;
  bool has_userinfo = false;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    has_userinfo = true;
  }
  std::string_view hosts = rest.substr(0, rest.find('/'));
  if (hosts.size() < rest.size()) {
    std::string_view path = rest.substr(hosts.size() + 1);
    if (!path.empty() && path != "0") {
      return InvalidArgumentError("a Redis Cluster has database 0 only");
    }
  }
  if (hosts.empty()) {
    return InvalidArgumentError("redis+cluster URL has no seed node (redis+cluster://host:port)");
  }
  std::vector<Endpoint> seeds;
  while (true) {
    const size_t comma = hosts.find(',');
    std::string_view one = hosts.substr(0, comma);
    if (one.empty()) return InvalidArgumentError("redis+cluster URL has an empty seed node");
    std::string single = "redis://";
    if (has_userinfo) {
      single.append(userinfo);
      single.push_back('@');
    }
    single.append(one);
    auto endpoint = ParseRedisUrl(single);
    if (!endpoint.ok()) return endpoint.status();
    seeds.push_back(*std::move(endpoint));
    if (comma == std::string_view::npos) break;
    hosts = hosts.substr(comma + 1);
  }
  return seeds;
}

}  // namespace sluice::internal

#include "redis/endpoint.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <iterator>

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
  // Digits only: from_chars takes a sign, and "-0" is not a database number.
  if (text.empty() || text[0] < '0' || text[0] > '9' || ec != std::errc() ||
      ptr != text.data() + text.size() || db < 0 || db > 1000000) {
    return InvalidArgumentError("database must be a number >= 0, got \"" + std::string(text) +
                                "\"");
  }
  return db;
}

// The query parameters of a URL: name=value pairs joined by '&', each value
// percent-decoded. Never echoes a value (it may be a password).
Status ForEachParameter(std::string_view query, std::string_view what,
                        const std::function<Status(std::string_view, std::string)>& each) {
  while (!query.empty()) {
    std::string_view pair = query.substr(0, query.find('&'));
    query = pair.size() < query.size() ? query.substr(pair.size() + 1) : std::string_view();
    auto eq = pair.find('=');
    if (eq == std::string_view::npos) {
      // Not echoed: a pair without '=' may be a stray piece of a password.
      return InvalidArgumentError(std::string(what) + " URL query needs name=value pairs");
    }
    std::string_view name = pair.substr(0, eq);
    auto value = PercentDecode(pair.substr(eq + 1), name);
    if (!value.ok()) return value.status();
    if (Status s = each(name, *std::move(value)); !s.ok()) return s;
  }
  return Status::Ok();
}

StatusOr<HostPort> ParseHostPort(std::string_view hostport, uint16_t default_port) {
  HostPort out;
  out.port = default_port;
  std::string_view port_text;
  bool has_port = false;
  if (!hostport.empty() && hostport[0] == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) return InvalidArgumentError("unclosed [ in IPv6 host");
    out.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return InvalidArgumentError("expected :port after ]");
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    auto colon = hostport.find(':');
    out.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = hostport.substr(colon + 1);
    }
  }
  if (out.host.empty()) return InvalidArgumentError("redis URL has no host (redis://host:port)");
  if (out.host.find_first_of("?@# ") != std::string::npos) {
    // Not echoed: a misplaced piece of a password may sit there.
    return InvalidArgumentError(
        "redis URL host holds a character a host name cannot ('?', '@', "
        "'#' or a space); percent-encode them in the password");
  }
  if (has_port && port_text.empty()) {
    return InvalidArgumentError("port is empty after ':' (host:port, or host alone for " +
                                std::to_string(default_port) + ")");
  }
  if (has_port) {
    unsigned port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      // Not echoed: in "redis://user:secret" (the @host forgotten) the "port" is a password.
      return InvalidArgumentError("port must be a number 1-65535");
    }
    out.port = static_cast<uint16_t>(port);
  }
  return out;
}

// The parameter names any network URL form takes (which form takes which is checked
// after the split): a '?' followed by one of them and '=' starts the query even when an
// '@' follows, as in "?ca=/certs/a@b.pem".
constexpr std::string_view kParameterNames[] = {"ca",  "cert",          "key",
                                                "sni", "sentinel_user", "sentinel_password"};

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

// A URL after its "scheme://", cut into userinfo, the host list and path, and the query.
// An unencoded password may hold '@', '/' and '?', and a parameter value may hold '@', so
// the query is found first: it starts at the first '?' that no '@' follows, or that is
// followed by a known parameter name and '='. The userinfo then runs to the last '@'
// before the query. A '?' followed by some other "name=" and, later, an '@' is
// `ambiguous`: a password's '?' or an unknown parameter whose value holds an '@'.
struct UrlParts {
  bool has_userinfo = false;
  std::string_view userinfo;
  std::string_view authority;  // hosts and path
  bool has_query = false;
  std::string_view query;
  bool ambiguous = false;
};

UrlParts SplitUrl(std::string_view rest) {
  UrlParts out;
  size_t q = rest.find('?');
  for (; q != std::string_view::npos; q = rest.find('?', q + 1)) {
    const std::string_view after = rest.substr(q + 1);
    if (after.find('@') == std::string_view::npos) break;
    size_t n = 0;
    while (n < after.size() && IsNameChar(after[n])) ++n;
    if (n == 0 || n == after.size() || after[n] != '=') continue;
    if (std::find(std::begin(kParameterNames), std::end(kParameterNames), after.substr(0, n)) !=
        std::end(kParameterNames)) {
      break;
    }
    out.ambiguous = true;
  }
  std::string_view before = rest;
  if (q != std::string_view::npos) {
    out.has_query = true;
    out.query = rest.substr(q + 1);
    before = rest.substr(0, q);
  }
  if (const size_t at = before.rfind('@'); at != std::string_view::npos) {
    out.has_userinfo = true;
    out.userinfo = before.substr(0, at);
    before = before.substr(at + 1);
  }
  out.authority = before;
  return out;
}

// The network forms: redis[s]://, redis[s]+cluster://, redis[s]+sentinel://.
enum class Form { kSingle, kCluster, kSentinel };

struct NetworkUrl {
  Form form = Form::kSingle;
  bool tls = false;
  std::string user, password;
  std::vector<HostPort> hosts;  // one for kSingle
  std::string_view path;        // after the first '/' of the authority
  Endpoint options;             // tls and sentinel credentials from the query
};

constexpr std::string_view kSchemes[] = {"redis://",          "rediss://",
                                         "redis+cluster://",  "rediss+cluster://",
                                         "redis+sentinel://", "rediss+sentinel://"};

// The userinfo's user and password, percent-decoded, into `out`.
Status ParseUserinfo(std::string_view userinfo, NetworkUrl& out) {
  std::string_view user, password = userinfo;
  if (auto colon = userinfo.find(':'); colon != std::string_view::npos) {
    user = userinfo.substr(0, colon);
    password = userinfo.substr(colon + 1);
  }
  auto u = PercentDecode(user, "user");
  if (!u.ok()) return u.status();
  auto p = PercentDecode(password, "password");
  if (!p.ok()) return p.status();
  out.user = std::move(*u);
  out.password = std::move(*p);
  return Status::Ok();
}

// The host list of `out.form` ("host:port", or a comma-separated list of seed nodes or
// sentinels) into `out.hosts`.
Status ParseHosts(std::string_view hosts, NetworkUrl& out) {
  const uint16_t default_port = out.form == Form::kSentinel ? 26379 : 6379;
  if (out.form == Form::kSingle) {
    auto one = ParseHostPort(hosts, default_port);
    if (!one.ok()) return one.status();
    out.hosts.push_back(*std::move(one));
    return Status::Ok();
  }
  const char* what = out.form == Form::kCluster ? "redis+cluster" : "redis+sentinel";
  if (hosts.empty()) {
    return InvalidArgumentError(std::string(what) + " URL has no " +
                                (out.form == Form::kCluster ? "seed node" : "sentinel") + " (" +
                                what + "://host:port)");
  }
  while (true) {
    const size_t comma = hosts.find(',');
    std::string_view one = hosts.substr(0, comma);
    if (one.empty()) return InvalidArgumentError(std::string(what) + " URL has an empty host");
    auto parsed = ParseHostPort(one, default_port);
    if (!parsed.ok()) return parsed.status();
    out.hosts.push_back(*std::move(parsed));
    if (comma == std::string_view::npos) return Status::Ok();
    hosts = hosts.substr(comma + 1);
  }
}

// One query parameter (TLS files and name, a Sentinel's own credentials) into `out`.
Status ApplyParameter(std::string_view name, std::string value, NetworkUrl& out) {
  TlsOptions& tls = out.options.tls;
  if (name == "ca" || name == "cert" || name == "key" || name == "sni") {
    if (!out.tls) {
      return InvalidArgumentError("the TLS parameter \"" + std::string(name) +
                                  "\" needs a TLS URL (rediss://, rediss+cluster://, "
                                  "rediss+sentinel://)");
    }
    if (value.empty()) {
      return InvalidArgumentError("the TLS parameter \"" + std::string(name) + "\" is empty");
    }
    (name == "ca"     ? tls.ca_file
     : name == "cert" ? tls.cert_file
     : name == "key"  ? tls.key_file
                      : tls.server_name) = std::move(value);
    return Status::Ok();
  }
  if (out.form == Form::kSentinel && (name == "sentinel_user" || name == "sentinel_password")) {
    (name == "sentinel_user" ? out.options.sentinel_user : out.options.sentinel_password) =
        std::move(value);
    return Status::Ok();
  }
  std::string known = out.tls ? "ca, cert, key, sni" : "";
  if (out.form == Form::kSentinel) {
    known += std::string(known.empty() ? "" : ", ") + "sentinel_user, sentinel_password";
  }
  return InvalidArgumentError("unknown URL parameter \"" + std::string(name.substr(0, 32)) + "\"" +
                              (known.empty()
                                   ? "; this URL takes none (TLS parameters need rediss://)"
                                   : "; known: " + known));
}

StatusOr<NetworkUrl> ParseNetworkUrl(std::string_view url) {
  NetworkUrl out;
  std::string_view rest;
  for (size_t i = 0; i < std::size(kSchemes); ++i) {
    if (url.starts_with(kSchemes[i])) {
      out.tls = i % 2 == 1;
      out.form = static_cast<Form>(i / 2);
      rest = url.substr(kSchemes[i].size());
      break;
    }
  }
  const UrlParts parts = SplitUrl(rest);
  if (parts.ambiguous) {
    // Not echoed: either side may be a piece of the password.
    return InvalidArgumentError(
        "redis URL is ambiguous: a '?' followed by name=... comes before an '@'; "
        "percent-encode a '?' in the password as %3F or an '@' in a parameter value as %40");
  }
  if (parts.has_userinfo) {
    if (Status s = ParseUserinfo(parts.userinfo, out); !s.ok()) return s;
  }
  rest = parts.authority;
  const std::string_view hosts = rest.substr(0, rest.find('/'));
  out.path = hosts.size() < rest.size() ? rest.substr(hosts.size() + 1) : std::string_view();
  if (Status s = ParseHosts(hosts, out); !s.ok()) return s;
  out.options.tls.enabled = out.tls;
  Status params =
      ForEachParameter(parts.query, "redis", [&](std::string_view name, std::string value) {
        return ApplyParameter(name, std::move(value), out);
      });
  if (!params.ok()) return params;
  if (out.options.tls.cert_file.empty() != out.options.tls.key_file.empty()) {
    return InvalidArgumentError(
        "a TLS client certificate needs both cert= (the certificate) and key= (its key)");
  }
  return out;
}

}  // namespace

std::string HostPort::Describe() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string Endpoint::Describe() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  if (kind == Kind::kSentinel) {
    std::string out = "primary \"" + master_name + "\" of sentinels ";
    for (size_t i = 0; i < sentinels.size(); ++i) {
      if (i > 0) out += ",";
      out += sentinels[i].Describe();
    }
    return out;
  }
  return HostPort{host, port}.Describe();
}

StatusOr<Endpoint> ParseRedisUrl(std::string_view url) {
  Endpoint ep;
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
    Status params =
        ForEachParameter(query, "unix", [&](std::string_view name, std::string value) -> Status {
          if (name == "db") {
            auto db = ParseDb(value);
            if (!db.ok()) return db.status();
            ep.db = *db;
          } else if (name == "user" || name == "password") {
            (name == "user" ? ep.user : ep.password) = std::move(value);
          } else {
            return InvalidArgumentError("unknown unix URL parameter \"" +
                                        std::string(name.substr(0, 32)) +
                                        "\"; known: db, user, password");
          }
          return Status::Ok();
        });
    if (!params.ok()) return params;
    return ep;
  }
  if (IsClusterUrl(url)) {
    return InvalidArgumentError(
        "redis+cluster:// names a Redis Cluster; this takes one server (redis://, rediss://, "
        "redis+sentinel:// or unix://)");
  }
  if (!std::any_of(std::begin(kSchemes), std::end(kSchemes),
                   [&](std::string_view s) { return url.starts_with(s); })) {
    // Never echo the URL: it may hold a password.
    const auto colon = url.find("://");
    const std::string scheme =
        colon == std::string_view::npos ? std::string() : std::string(url.substr(0, colon));
    bool plain =
        !scheme.empty() && scheme.size() <= 16 &&
        scheme.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789+.-") == std::string::npos;
    return InvalidArgumentError(
        (plain ? "unknown URL scheme \"" + scheme + "://\"" : std::string("URL has no scheme")) +
        "; use redis://host:port, rediss://host:port (TLS), redis+sentinel://host:port/master, "
        "unix:///path or memory://");
  }
  auto parsed = ParseNetworkUrl(url);
  if (!parsed.ok()) return parsed.status();
  ep.user = std::move(parsed->user);
  ep.password = std::move(parsed->password);
  ep.tls = std::move(parsed->options.tls);
  std::string_view db_text = parsed->path;
  if (parsed->form == Form::kSentinel) {
    ep.kind = Endpoint::Kind::kSentinel;
    ep.sentinels = std::move(parsed->hosts);
    ep.host.clear();
    ep.port = 0;
    ep.sentinel_user = std::move(parsed->options.sentinel_user);
    ep.sentinel_password = std::move(parsed->options.sentinel_password);
    std::string_view name = db_text.substr(0, db_text.find('/'));
    db_text = name.size() < db_text.size() ? db_text.substr(name.size() + 1) : std::string_view();
    auto decoded = PercentDecode(name, "master name");
    if (!decoded.ok()) return decoded.status();
    if (decoded->empty()) {
      return InvalidArgumentError(
          "redis+sentinel URL needs the master's name: redis+sentinel://host:port/master-name");
    }
    ep.master_name = std::move(*decoded);
  } else {
    ep.host = std::move(parsed->hosts.front().host);
    ep.port = parsed->hosts.front().port;
  }
  if (!db_text.empty()) {
    auto db = ParseDb(db_text);
    if (!db.ok()) return db.status();
    ep.db = *db;
  }
  return ep;
}

bool IsClusterUrl(std::string_view url) {
  return url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://");
}

StatusOr<std::vector<Endpoint>> ParseClusterUrl(std::string_view url) {
  if (!IsClusterUrl(url)) {
    return InvalidArgumentError(
        "a Redis Cluster URL starts with redis+cluster:// (or rediss+cluster:// for TLS)");
  }
  auto parsed = ParseNetworkUrl(url);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->path.empty() && parsed->path != "0") {
    return InvalidArgumentError("a Redis Cluster has database 0 only");
  }
  std::vector<Endpoint> seeds;
  for (HostPort& host : parsed->hosts) {
    Endpoint seed;
    seed.host = std::move(host.host);
    seed.port = host.port;
    seed.user = parsed->user;
    seed.password = parsed->password;
    seed.tls = parsed->options.tls;
    seeds.push_back(std::move(seed));
  }
  return seeds;
}

std::string RedactUrl(std::string_view url) {
  constexpr std::string_view kMask = "***";
  const size_t scheme_end = url.find("://");
  const size_t start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  std::string out(url.substr(0, start));
  std::string_view rest = url.substr(start);
  // As the parser reads it (SplitUrl). A URL the parser refuses as ambiguous is masked
  // to its last '@', as if the password held the '?'. A unix socket path has no userinfo
  // (it may hold an '@').
  if (!url.starts_with("unix://")) {
    std::string_view userinfo;
    bool has_userinfo = false;
    if (const UrlParts parts = SplitUrl(rest); parts.ambiguous) {
      if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
        has_userinfo = true;
        userinfo = rest.substr(0, at);
        rest = rest.substr(at + 1);
      }
    } else if (parts.has_userinfo) {
      has_userinfo = true;
      userinfo = parts.userinfo;
      rest = rest.substr(userinfo.size() + 1);
    }
    if (has_userinfo) {
      if (const size_t colon = userinfo.find(':'); colon != std::string_view::npos)
        out.append(userinfo.substr(0, colon + 1));
      out.append(kMask);
      out.push_back('@');
    }
  }
  const size_t q = rest.find('?');
  out.append(rest.substr(0, q));
  if (q == std::string_view::npos) return out;
  out.push_back('?');
  std::string_view query = rest.substr(q + 1);
  constexpr std::string_view kShown[] = {"db", "user", "sentinel_user", "ca", "cert", "key", "sni"};
  for (bool first = true;; first = false) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (!first) out.push_back('&');
    const size_t eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    if (eq != std::string_view::npos &&
        std::find(std::begin(kShown), std::end(kShown), name) != std::end(kShown)) {
      out.append(pair);
    } else {
      // An unknown name, or a piece without '=' (a stray part of a password), is masked.
      out.append(eq == std::string_view::npos ? std::string_view() : name);
      if (eq != std::string_view::npos) out.push_back('=');
      out.append(kMask);
    }
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
  return out;
}

}  // namespace sluice::internal

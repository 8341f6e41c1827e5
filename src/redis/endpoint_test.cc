// ParseRedisUrl: the accepted URL forms, every rejection, and that the password never
// shows in Describe() or in an error message.
#include "redis/endpoint.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace sluice::internal {
namespace {

using namespace std::string_literals;

// Parses `url`, failing the test (and returning a default Endpoint) if it is rejected.
Endpoint ParseOk(std::string_view url) {
  StatusOr<Endpoint> parsed = ParseRedisUrl(url);
  EXPECT_TRUE(parsed.ok()) << url << ": " << parsed.status().ToString();
  return parsed.ok() ? *parsed : Endpoint{};
}

// Parses `url` expecting InvalidArgument; returns the message.
std::string ParseError(std::string_view url) {
  StatusOr<Endpoint> parsed = ParseRedisUrl(url);
  EXPECT_FALSE(parsed.ok()) << url << " was accepted as "
                            << (parsed.ok() ? parsed->Describe() : "");
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << url;
  return parsed.status().message();
}

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

TEST(ParseRedisUrl, HostOnlyUsesDefaults) {
  Endpoint ep = ParseOk("redis://cache.internal");
  EXPECT_EQ(ep.kind, Endpoint::Kind::kTcp);
  EXPECT_EQ(ep.host, "cache.internal");
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(ep.db, 0);
  EXPECT_EQ(ep.user, "");
  EXPECT_EQ(ep.password, "");
  EXPECT_EQ(ep.Describe(), "cache.internal:6379");
}

TEST(ParseRedisUrl, HostAndPort) {
  Endpoint ep = ParseOk("redis://10.1.2.3:6380");
  EXPECT_EQ(ep.host, "10.1.2.3");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.Describe(), "10.1.2.3:6380");
  EXPECT_EQ(ParseOk("redis://h:1").port, 1);
  EXPECT_EQ(ParseOk("redis://h:65535").port, 65535);
}

TEST(ParseRedisUrl, Database) {
  Endpoint ep = ParseOk("redis://localhost:6379/3");
  EXPECT_EQ(ep.host, "localhost");
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(ep.db, 3);
  EXPECT_EQ(ParseOk("redis://localhost/15").db, 15);
  EXPECT_EQ(ParseOk("redis://localhost/0").db, 0);
  EXPECT_EQ(ParseOk("redis://localhost/").db, 0) << "an empty path keeps the default db";
}

TEST(ParseRedisUrl, PasswordOnly) {
  Endpoint ep = ParseOk("redis://:s3cret@redis.example:6390/1");
  EXPECT_EQ(ep.user, "");
  EXPECT_EQ(ep.password, "s3cret");
  EXPECT_EQ(ep.host, "redis.example");
  EXPECT_EQ(ep.port, 6390);
  EXPECT_EQ(ep.db, 1);
}

TEST(ParseRedisUrl, UserAndPassword) {
  Endpoint ep = ParseOk("redis://alice:s3cret@redis.example");
  EXPECT_EQ(ep.user, "alice");
  EXPECT_EQ(ep.password, "s3cret");
  EXPECT_EQ(ep.host, "redis.example");
  EXPECT_EQ(ep.port, 6379);
}

TEST(ParseRedisUrl, EmptyPasswordAfterUser) {
  Endpoint ep = ParseOk("redis://alice:@h");
  EXPECT_EQ(ep.user, "alice");
  EXPECT_EQ(ep.password, "");
  EXPECT_EQ(ep.host, "h");
}

TEST(ParseRedisUrl, PercentEncodedUserAndPassword) {
  Endpoint ep = ParseOk("redis://al%69ce:p%40ss%3Aw%2Fd%25%23%3f@h:7000");
  EXPECT_EQ(ep.user, "alice");
  EXPECT_EQ(ep.password, "p@ss:w/d%#?");
  EXPECT_EQ(ep.host, "h");
  EXPECT_EQ(ep.port, 7000);
  EXPECT_EQ(ParseOk("redis://:%00x@h").password, "\0x"s);
  EXPECT_EQ(ParseOk("redis://:%ff@h").password, "\xff");
}

TEST(ParseRedisUrl, UnencodedAtInPasswordSplitsAtTheLastAt) {
  Endpoint ep = ParseOk("redis://u:a@b@h:6380");
  EXPECT_EQ(ep.user, "u");
  EXPECT_EQ(ep.password, "a@b");
  EXPECT_EQ(ep.host, "h");
  EXPECT_EQ(ep.port, 6380);
}

TEST(ParseRedisUrl, Ipv6InBrackets) {
  Endpoint ep = ParseOk("redis://[::1]:6380");
  EXPECT_EQ(ep.host, "::1");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.Describe(), "[::1]:6380");

  Endpoint no_port = ParseOk("redis://:pw@[fe80::1:2]/4");
  EXPECT_EQ(no_port.host, "fe80::1:2");
  EXPECT_EQ(no_port.port, 6379);
  EXPECT_EQ(no_port.db, 4);
  EXPECT_EQ(no_port.password, "pw");
  EXPECT_EQ(no_port.Describe(), "[fe80::1:2]:6379");
}

TEST(ParseRedisUrl, UnixSocketWithParameters) {
  Endpoint ep = ParseOk("unix:///run/redis/redis.sock?db=2&user=u&password=p");
  EXPECT_EQ(ep.kind, Endpoint::Kind::kUnix);
  EXPECT_EQ(ep.path, "/run/redis/redis.sock");
  EXPECT_EQ(ep.db, 2);
  EXPECT_EQ(ep.user, "u");
  EXPECT_EQ(ep.password, "p");
  EXPECT_EQ(ep.Describe(), "unix:/run/redis/redis.sock");
}

TEST(ParseRedisUrl, UnixSocketWithoutParameters) {
  Endpoint ep = ParseOk("unix:///tmp/redis.sock");
  EXPECT_EQ(ep.kind, Endpoint::Kind::kUnix);
  EXPECT_EQ(ep.path, "/tmp/redis.sock");
  EXPECT_EQ(ep.db, 0);
  EXPECT_EQ(ep.user, "");
  EXPECT_EQ(ep.password, "");
}

TEST(ParseRedisUrl, UnixPasswordIsPercentDecoded) {
  Endpoint ep = ParseOk("unix:///s?password=a%26b%3Dc&user=x%20y");
  EXPECT_EQ(ep.password, "a&b=c");
  EXPECT_EQ(ep.user, "x y");
}

TEST(ParseRedisUrl, RejectsUnknownScheme) {
  for (const char* url :
       {"http://h:6379", "https://h", "tcp://h", "h:6379", "", "redis:/h", "unix:/tmp/s"}) {
    const std::string message = ParseError(url);
    EXPECT_FALSE(message.empty()) << url;
  }
  EXPECT_TRUE(Contains(ParseError("http://h:6379"), "scheme"));
}

TEST(ParseRedisUrl, Rediss) {
  Endpoint ep = ParseOk("rediss://app:pw@redis.example:6380/2");
  EXPECT_EQ(ep.kind, Endpoint::Kind::kTcp);
  EXPECT_TRUE(ep.tls.enabled);
  EXPECT_EQ(ep.host, "redis.example");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 2);
  EXPECT_EQ(ep.user, "app");
  EXPECT_EQ(ep.password, "pw");
  EXPECT_EQ(ep.tls.ca_file, "") << "default: the system's trust store";
  EXPECT_EQ(ep.tls.cert_file, "");
  EXPECT_EQ(ep.tls.server_name, "");
  EXPECT_FALSE(ParseOk("redis://h").tls.enabled);
}

TEST(ParseRedisUrl, RedissParameters) {
  Endpoint ep = ParseOk(
      "rediss://:p%3Fw@10.0.0.1:6380?ca=/etc/ca.pem&cert=/c%26d.pem&key=/k.pem&sni=redis.internal");
  EXPECT_EQ(ep.password, "p?w");
  EXPECT_EQ(ep.host, "10.0.0.1");
  EXPECT_EQ(ep.tls.ca_file, "/etc/ca.pem");
  EXPECT_EQ(ep.tls.cert_file, "/c&d.pem");
  EXPECT_EQ(ep.tls.key_file, "/k.pem");
  EXPECT_EQ(ep.tls.server_name, "redis.internal");
  EXPECT_EQ(ParseOk("rediss://h/3?ca=/x").db, 3);
  // A '?' in an unencoded password belongs to the password (the query follows the '@').
  EXPECT_EQ(ParseOk("rediss://:a?b@h?ca=/x").password, "a?b");
}

// A parameter value may hold an unencoded '@' (a file path): the query is found before
// the userinfo, so the '@' neither makes a user of the host nor drops the parameters.
TEST(ParseRedisUrl, AtInAParameterValueKeepsHostAndParameters) {
  Endpoint ep = ParseOk("rediss://127.0.0.1:7000?ca=/tmp/a@b.pem");
  EXPECT_EQ(ep.host, "127.0.0.1");
  EXPECT_EQ(ep.port, 7000);
  EXPECT_EQ(ep.user, "");
  EXPECT_EQ(ep.password, "");
  EXPECT_EQ(ep.tls.ca_file, "/tmp/a@b.pem");

  Endpoint both = ParseOk("rediss://u:p@w@h:6380/2?cert=/c@1.pem&key=/k@1.pem&sni=r@x");
  EXPECT_EQ(both.user, "u");
  EXPECT_EQ(both.password, "p@w");
  EXPECT_EQ(both.host, "h");
  EXPECT_EQ(both.port, 6380);
  EXPECT_EQ(both.db, 2);
  EXPECT_EQ(both.tls.cert_file, "/c@1.pem");
  EXPECT_EQ(both.tls.key_file, "/k@1.pem");
  EXPECT_EQ(both.tls.server_name, "r@x");

  // A password's '?' stays the password's when no parameter name follows it.
  Endpoint question = ParseOk("rediss://:a?b@h?ca=/x@y");
  EXPECT_EQ(question.password, "a?b");
  EXPECT_EQ(question.host, "h");
  EXPECT_EQ(question.tls.ca_file, "/x@y");

  Endpoint sentinel = ParseOk("rediss+sentinel://s1:5000/m?sentinel_password=a@b&ca=/c@d");
  ASSERT_EQ(sentinel.sentinels.size(), 1u);
  EXPECT_EQ(sentinel.sentinels[0].Describe(), "s1:5000");
  EXPECT_EQ(sentinel.sentinel_password, "a@b");
  EXPECT_EQ(sentinel.tls.ca_file, "/c@d");

  auto seeds = ParseClusterUrl("rediss+cluster://h1:7000,h2:7001?ca=/a@b.pem");
  ASSERT_TRUE(seeds.ok()) << seeds.status().ToString();
  ASSERT_EQ(seeds->size(), 2u);
  EXPECT_EQ((*seeds)[0].host, "h1");
  EXPECT_EQ((*seeds)[0].password, "");
  EXPECT_EQ((*seeds)[1].tls.ca_file, "/a@b.pem");
}

// "?name=value" of a name no URL takes, with an '@' after it: a password's '?' or a
// parameter's '@' cannot be told apart, so the URL is refused with what to encode, and
// nothing of it is echoed.
TEST(ParseRedisUrl, RefusesAQueryAndUserinfoThatCannotBeToldApart) {
  for (const char* url : {"redis://u:hunter2?pw=x@h", "rediss://h?hunter2=a@b"}) {
    const std::string message = ParseError(url);
    EXPECT_TRUE(Contains(message, "%3F")) << url << ": " << message;
    EXPECT_TRUE(Contains(message, "%40")) << url << ": " << message;
    EXPECT_FALSE(Contains(message, "hunter2")) << url << ": " << message;
    EXPECT_FALSE(Contains(RedactUrl(url), "hunter2")) << url << ": " << RedactUrl(url);
  }
}

TEST(ParseRedisUrl, RejectsAnEmptyPort) {
  for (const char* url : {"redis://h:", "redis://h:/0", "redis://[::1]:", "rediss://h:?ca=/x",
                          "redis+sentinel://s1:,s2/m", "redis://u:p@h:"}) {
    const std::string message = ParseError(url);
    EXPECT_TRUE(Contains(message, "port")) << url << ": " << message;
  }
  EXPECT_FALSE(ParseClusterUrl("redis+cluster://h1:7000,h2:").ok());
}

TEST(ParseRedisUrl, RejectsASignedDatabase) {
  for (const char* url : {"redis://h/-0", "redis://h/+0", "redis://h/+1", "unix:///s?db=-0",
                          "redis+sentinel://s/m/-0"}) {
    const std::string message = ParseError(url);
    EXPECT_TRUE(Contains(message, "database")) << url << ": " << message;
  }
  EXPECT_FALSE(ParseClusterUrl("redis+cluster://h/-0").ok());
}

TEST(ParseRedisUrl, RejectsBadTlsParameters) {
  EXPECT_TRUE(Contains(ParseError("redis://h?ca=/x"), "rediss://"));
  EXPECT_TRUE(Contains(ParseError("rediss://h?cert=/c"), "key="));
  EXPECT_TRUE(Contains(ParseError("rediss://h?key=/k"), "cert="));
  EXPECT_TRUE(Contains(ParseError("rediss://h?ca="), "empty"));
  EXPECT_TRUE(Contains(ParseError("rediss://h?verify=none"), "verify"));
  EXPECT_TRUE(Contains(ParseError("rediss://h?ca"), "name=value"));
  EXPECT_TRUE(Contains(ParseError("rediss://h?ca=%zz"), "percent"));
}

TEST(ParseRedisUrl, Sentinel) {
  Endpoint ep = ParseOk("redis+sentinel://app:pw@s1:5000,s2,[::1]:5002/mymaster/3");
  EXPECT_EQ(ep.kind, Endpoint::Kind::kSentinel);
  ASSERT_EQ(ep.sentinels.size(), 3u);
  EXPECT_EQ(ep.sentinels[0].Describe(), "s1:5000");
  EXPECT_EQ(ep.sentinels[1].Describe(), "s2:26379") << "the sentinel port by default";
  EXPECT_EQ(ep.sentinels[2].Describe(), "[::1]:5002");
  EXPECT_EQ(ep.master_name, "mymaster");
  EXPECT_EQ(ep.db, 3);
  EXPECT_EQ(ep.user, "app") << "user and password log in to the data nodes";
  EXPECT_EQ(ep.password, "pw");
  EXPECT_EQ(ep.sentinel_password, "");
  EXPECT_FALSE(ep.tls.enabled);
  EXPECT_EQ(ep.Describe(), "primary \"mymaster\" of sentinels s1:5000,s2:26379,[::1]:5002");

  Endpoint secured =
      ParseOk("rediss+sentinel://s1/m?sentinel_user=watch&sentinel_password=s%40cret&ca=/ca.pem");
  EXPECT_TRUE(secured.tls.enabled);
  EXPECT_EQ(secured.tls.ca_file, "/ca.pem");
  EXPECT_EQ(secured.sentinel_user, "watch");
  EXPECT_EQ(secured.sentinel_password, "s@cret");
  EXPECT_EQ(secured.db, 0);
  EXPECT_FALSE(Contains(secured.Describe(), "s@cret"));
}

TEST(ParseRedisUrl, RejectsBadSentinelUrls) {
  EXPECT_TRUE(Contains(ParseError("redis+sentinel://s1:5000"), "master"));
  EXPECT_TRUE(Contains(ParseError("redis+sentinel://s1:5000/"), "master"));
  EXPECT_TRUE(Contains(ParseError("redis+sentinel:///m"), "sentinel"));
  ParseError("redis+sentinel://s1,,s2/m");
  EXPECT_TRUE(Contains(ParseError("redis+sentinel://s1:0/m"), "port"));
  EXPECT_TRUE(Contains(ParseError("redis+sentinel://s1/m/x"), "database"));
  EXPECT_TRUE(Contains(ParseError("redis+sentinel://s1/m?ca=/x"), "rediss"));
  EXPECT_TRUE(Contains(ParseError("redis://h?sentinel_password=x"), "sentinel_password"));
}

TEST(ParseClusterUrl, TlsSeedsShareTheOptions) {
  auto seeds =
      ParseClusterUrl("rediss+cluster://:pw@h1:7000,h2:7001?ca=/ca.pem&sni=cluster.internal");
  ASSERT_TRUE(seeds.ok()) << seeds.status().ToString();
  ASSERT_EQ(seeds->size(), 2u);
  for (const Endpoint& seed : *seeds) {
    EXPECT_TRUE(seed.tls.enabled);
    EXPECT_EQ(seed.tls.ca_file, "/ca.pem");
    EXPECT_EQ(seed.tls.server_name, "cluster.internal");
    EXPECT_EQ(seed.password, "pw");
  }
  EXPECT_TRUE(IsClusterUrl("rediss+cluster://h"));
  EXPECT_FALSE((*ParseClusterUrl("redis+cluster://h")).front().tls.enabled);
  EXPECT_FALSE(ParseClusterUrl("redis+cluster://h?ca=/x").ok());
  EXPECT_FALSE(ParseRedisUrl("rediss+cluster://h").ok()) << "one server only";
}

TEST(ParseRedisUrl, RejectsBadPorts) {
  for (const char* url :
       {"redis://h:0", "redis://h:70000", "redis://h:65536", "redis://h:abc", "redis://h:-1",
        "redis://h:+1", "redis://h:12x", "redis://h: 1", "redis://h:99999999999999999999",
        "redis://[::1]:0", "redis://[::1]:abc"}) {
    const std::string message = ParseError(url);
    EXPECT_TRUE(Contains(message, "port")) << url << ": " << message;
  }
}

TEST(ParseRedisUrl, RejectsBadDatabases) {
  for (const char* url :
       {"redis://h/-1", "redis://h/abc", "redis://h/1x", "redis://h/0/1", "redis://h:6379/-1",
        "unix:///s?db=-1", "unix:///s?db=abc", "unix:///s?db="}) {
    const std::string message = ParseError(url);
    EXPECT_TRUE(Contains(message, "database")) << url << ": " << message;
  }
}

TEST(ParseRedisUrl, RejectsMissingHost) {
  for (const char* url : {"redis://", "redis://:6379", "redis:///0", "redis://u:p@",
                          "redis://u:p@:6379/1", "redis://[]:6379"}) {
    ParseError(url);
  }
  EXPECT_TRUE(Contains(ParseError("redis://:6379"), "host"));
}

TEST(ParseRedisUrl, RejectsMalformedIpv6) {
  EXPECT_TRUE(Contains(ParseError("redis://[::1:6379"), "["));
  ParseError("redis://[::1]6379");
}

TEST(ParseRedisUrl, RejectsBadUnixUrls) {
  const std::string unknown = ParseError("unix:///s?timeout=5");
  EXPECT_TRUE(Contains(unknown, "timeout")) << unknown;
  ParseError("unix:///s?db=1&bogus=1");
  ParseError("unix:///s?db");          // not name=value
  ParseError("unix:///s?&db=1");       // empty pair
  ParseError("unix://relative.sock");  // not absolute
  ParseError("unix://");
}

TEST(ParseRedisUrl, RejectsBadPercentEncoding) {
  for (const char* url : {"redis://:%4@h", "redis://:%zz@h", "redis://:%@h", "redis://:a%4@h",
                          "redis://:%g0@h", "redis://:%-1@h", "redis://:%+1@h", "redis://%zz:p@h",
                          "unix:///s?password=%4", "unix:///s?password=%zz", "unix:///s?user=%"}) {
    const std::string message = ParseError(url);
    EXPECT_TRUE(Contains(message, "percent")) << url << ": " << message;
  }
  EXPECT_TRUE(Contains(ParseError("redis://:%zz@h"), "password"));
  EXPECT_TRUE(Contains(ParseError("redis://%zz:p@h"), "user"));
}

TEST(EndpointDescribe, NeverContainsThePassword) {
  for (const char* url :
       {"redis://:hunter2pw@h", "redis://u:hunter2pw@h:6380/2", "redis://:hunter2pw@[::1]:6380",
        "unix:///s?password=hunter2pw", "unix:///s?user=u&password=hunter2pw&db=3"}) {
    Endpoint ep = ParseOk(url);
    EXPECT_EQ(ep.password, "hunter2pw") << url;
    EXPECT_FALSE(Contains(ep.Describe(), "hunter2pw")) << url << " -> " << ep.Describe();
  }
}

// Error messages get logged; they must not carry the credentials of the URL either.
TEST(ParseRedisUrl, ErrorsDoNotContainThePassword) {
  for (const char* url :
       {"redis://u:hunter2pw@h:0", "redis://u:hunter2pw@h:abc", "redis://u:hunter2pw@h/abc",
        "redis://%zz:hunter2pw@h", "rediss://u:hunter2pw@h:0", "unix:///s?password=hunter2pw&x=1",
        "redis+sentinel://u:hunter2pw@s/m/x", "rediss://h?sentinel_password=hunter2pw",
        "redis://h?hunter2pw"}) {
    const std::string message = ParseError(url);
    EXPECT_FALSE(Contains(message, "hunter2")) << url << " -> " << message;
  }
}

// Regression: the "no host" error once echoed the whole URL, password included.
TEST(ParseRedisUrl, MissingHostErrorDoesNotContainThePassword) {
  for (const char* url : {"redis://u:hunter2pw@", "redis://:hunter2pw@:6379"}) {
    const std::string message = ParseError(url);
    EXPECT_FALSE(Contains(message, "hunter2")) << url << " -> " << message;
  }
}

// Regression: the "unknown scheme" error once echoed the first 16 bytes of the URL, which
// for a short scheme reach into the password.
TEST(ParseRedisUrl, UnknownSchemeErrorDoesNotContainThePassword) {
  for (const char* url : {"http://:hunter2pw@h", "ftp://u:hunter2pw@h", "hunter2pw@h:6379",
                          "u:hunter2pw@h", "HTTP://:hunter2pw@h"}) {
    const std::string message = ParseError(url);
    EXPECT_FALSE(Contains(message, "hunter2")) << url << " -> " << message;
  }
  EXPECT_TRUE(Contains(ParseError("http://:hunter2pw@h"), "http")) << "the scheme is named";
}

// RedactUrl: what sluiced and the CLI log or show in place of a URL. The password goes
// and the rest stays readable, for the accepted forms and for malformed ones alike.
TEST(RedactUrl, MasksEveryPasswordAndKeepsTheRest) {
  const std::pair<const char*, const char*> cases[] = {
      {"redis://default:hunter2pw@127.0.0.1:6379", "redis://default:***@127.0.0.1:6379"},
      {"redis://:hunter2pw@h/3", "redis://:***@h/3"},
      {"redis://hunter2pw@h", "redis://***@h"},
      {"redis://u:hun@ter/2?pw@h:1/2", "redis://u:***@h:1/2"},
      {"rediss://u:hunter2pw@h?ca=/etc/ca.pem&sni=r.example",
       "rediss://u:***@h?ca=/etc/ca.pem&sni=r.example"},
      {"redis+sentinel://u:hunter2pw@s1,s2:26380/m?sentinel_user=x&sentinel_password=hunter2pw",
       "redis+sentinel://u:***@s1,s2:26380/m?sentinel_user=x&sentinel_password=***"},
      {"redis+cluster://u:hunter2pw@a:7000,b:7001", "redis+cluster://u:***@a:7000,b:7001"},
      {"unix:///run/redis@1.sock?db=2&user=app&password=hunter2pw",
       "unix:///run/redis@1.sock?db=2&user=app&password=***"},
      {"unix:///s?pass%77ord=hunter2pw", "unix:///s?pass%77ord=***"},
      {"redis://h?hunter2pw", "redis://h?***"},
      {"rediss://127.0.0.1:7000?ca=/tmp/a@b.pem", "rediss://127.0.0.1:7000?ca=/tmp/a@b.pem"},
      {"rediss://u:hunter2pw@h?ca=/a@b&key=/k", "rediss://u:***@h?ca=/a@b&key=/k"},
      {"u:hunter2pw@h:6379", "u:***@h:6379"},
      {"ftp://u:hunter2pw@h", "ftp://u:***@h"},
      {"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
      {"memory://", "memory://"},
      {"", ""},
  };
  for (const auto& [url, shown] : cases) {
    EXPECT_EQ(RedactUrl(url), shown) << url;
    EXPECT_FALSE(Contains(RedactUrl(url), "hunter2")) << url;
  }
}

}  // namespace
}  // namespace sluice::internal

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

TEST(ParseRedisUrl, RejectsRedissMentioningTls) {
  const std::string message = ParseError("rediss://h:6380");
  EXPECT_TRUE(Contains(message, "TLS")) << message;
  EXPECT_TRUE(Contains(ParseError("rediss://:pw@h"), "TLS"));
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
        "redis://%zz:hunter2pw@h", "rediss://u:hunter2pw@h", "unix:///s?password=hunter2pw&x=1"}) {
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

}  // namespace
}  // namespace sluice::internal

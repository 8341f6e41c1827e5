// sluiced end to end: the built binary against a private redis-server, over HTTP.
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <optional>
#include <random>
#include <regex>
#include <set>
#include "service/tests/sluiced_process.h"

#include "sluice/client.h"
#include "testing/redis_cluster.h"
#include "testing/redis_server.h"

namespace sluiced {
namespace {

using nlohmann::json;
using testing::Call;
using testing::Connection;
using testing::HttpReply;
using testing::Request;
using testing::Sluiced;
using testing::TempDir;

std::string ExampleConfig() {
  return testing::ReadAll(std::string(SLUICED_SOURCE_DIR) + "/examples/config/shop.yaml");
}

std::string Check(const std::vector<std::vector<std::pair<std::string, std::string>>>& descriptors,
                  int hits = 0, const std::string& domain = "shop") {
  json j;
  j["domain"] = domain;
  if (hits) j["hits"] = hits;
  j["descriptors"] = json::array();
  for (const auto& d : descriptors) {
    json entries = json::array();
    for (const auto& [k, v] : d) entries.push_back({{"key", k}, {"value", v}});
    j["descriptors"].push_back({{"entries", entries}});
  }
  return j.dump();
}

std::string SignIn(const std::string& account) {
  return Check({{{"route", "sign_in"}, {"account", account}}});
}

class E2e : public ::testing::Test {
 protected:
  void SetUp() override { config_.Write("shop.yaml", ExampleConfig()); }
  // Every key sluiced wrote carries an expiry (design.md §1, rule 1).
  void TearDown() override {
    if (redis_.running()) {
      EXPECT_EQ(redis_.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
    }
  }
  std::vector<std::string> Flags() {
    return {"--deadline-ms", "200", "--admin-token", "s3cret", "--read-timeout-ms", "700"};
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

TEST_F(E2e, CheckAnswers200Then429WithRateLimitHeaders) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  for (int i = 0; i < 3; ++i) {
    HttpReply r = Call(s.http_port(), "POST", "/v1/check", SignIn("alice"));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("ratelimit-policy"), "\"sign_in\";q=3;w=60");
    EXPECT_EQ(r.header("ratelimit").rfind("\"sign_in\";r=" + std::to_string(2 - i) + ";t=", 0), 0u)
        << r.header("ratelimit");
    EXPECT_EQ(json::parse(r.body)["descriptors"][0]["source"], "store");
  }
  HttpReply refused = Call(s.http_port(), "POST", "/v1/check", SignIn("alice"));
  ASSERT_EQ(refused.status, 429);
  const int retry_after = std::stoi(refused.header("retry-after"));
  EXPECT_GE(retry_after, 1);
  EXPECT_LE(retry_after, 60);
  EXPECT_EQ(refused.header("ratelimit").rfind("\"sign_in\";r=0;t=", 0), 0u);
  json body = json::parse(refused.body);
  EXPECT_EQ(body["allowed"], false);
  EXPECT_EQ(body["code"], "OVER_LIMIT");
  EXPECT_EQ(body["descriptors"][0]["reason"], "over_limit");
  // Another account has its own counter.
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("bob")).status, 200);
  // hits: a request of 4 can never pass a limit of 3.
  HttpReply big = Call(s.http_port(), "POST", "/v1/check",
                       Check({{{"route", "sign_in"}, {"account", "carol"}}}, 4));
  EXPECT_EQ(big.status, 429);
  EXPECT_EQ(json::parse(big.body)["descriptors"][0]["reason"], "cost_exceeds_limit");
  // A descriptor no rule matches is not limited.
  HttpReply none = Call(s.http_port(), "POST", "/v1/check", Check({{{"nothing", "here"}}}));
  EXPECT_EQ(none.status, 200);
  EXPECT_TRUE(json::parse(none.body)["descriptors"][0]["limit"].is_null());
  // Unlimited by wildcard, limited otherwise.
  EXPECT_EQ(json::parse(Call(s.http_port(), "POST", "/v1/check", Check({{{"api_key", "beta-7"}}}))
                            .body)["descriptors"][0]["limit"]["unlimited"],
            true);
  EXPECT_EQ(json::parse(Call(s.http_port(), "POST", "/v1/check", Check({{{"api_key", "k1"}}}))
                            .body)["descriptors"][0]["remaining"],
            99);
}

TEST_F(E2e, CompositeRefusalSpendsNothing) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const std::string acme = Check({{{"tenant", "acme"}}, {{"api", "search"}}});
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", acme).status, 200);
  HttpReply refused = Call(s.http_port(), "POST", "/v1/check", acme);
  ASSERT_EQ(refused.status, 429);
  EXPECT_EQ(refused.header("ratelimit-policy"), "\"per_tenant\";q=4;w=60");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", acme).status, 429);
  // The global limit (6/min) spent 4, not 10: another tenant still gets 2.
  const std::string zed = Check({{{"tenant", "zed"}}, {{"api", "search"}}});
  HttpReply ok = Call(s.http_port(), "POST", "/v1/check", zed);
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(ok.header("ratelimit").rfind("\"search_global\";r=1;", 0), 0u)
      << ok.header("ratelimit");
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", zed).status, 200);
  HttpReply global = Call(s.http_port(), "POST", "/v1/check", zed);
  EXPECT_EQ(global.status, 429);
  EXPECT_EQ(global.header("ratelimit-policy"), "\"search_global\";q=6;w=60");
}

TEST_F(E2e, EnvoyJsonEndpoint) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const std::string body =
      R"({"domain":"shop","hitsAddend":9,"descriptors":[{"entries":[{"key":"route","value":"checkout"},{"key":"account","value":"a"}]}]})";
  HttpReply r = Call(s.http_port(), "POST", "/json", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(
      json::parse(r.body),
      json::parse(
          R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"checkout","requestsPerUnit":10,"unit":"MINUTE"},"durationUntilReset":")" +
          json::parse(r.body)["statuses"][0]["durationUntilReset"].get<std::string>() +
          R"(","limitRemaining":1}]})"));
  HttpReply over = Call(s.http_port(), "POST", "/json", body);
  EXPECT_EQ(over.status, 429);
  EXPECT_EQ(json::parse(over.body)["overallCode"], "OVER_LIMIT");
  // Unknown domains limit nothing on envoy-ratelimit's endpoint.
  HttpReply unknown =
      Call(s.http_port(), "POST", "/json",
           R"({"domain":"nope","descriptors":[{"entries":[{"key":"a","value":"b"}]}]})");
  EXPECT_EQ(unknown.status, 200);
  EXPECT_EQ(json::parse(unknown.body)["overallCode"], "OK");
}

// Each descriptor of an admitted multi-descriptor request reports its own limit's
// state on envoy-ratelimit's /json and on /v1/check, not only the tightest one.
TEST_F(E2e, EveryDescriptorOfAnAdmittedCompositeReportsItsState) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const std::string body =
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"api","value":"search"}]},{"entries":[{"key":"tenant","value":"t9"}]}]})";
  HttpReply r = Call(s.http_port(), "POST", "/json", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json statuses = json::parse(r.body)["statuses"];
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0]["currentLimit"]["name"], "search_global");
  EXPECT_EQ(statuses[0]["limitRemaining"], 5) << r.body;
  EXPECT_EQ(statuses[1]["limitRemaining"], 3) << r.body;
  for (const auto& st : statuses) {
    ASSERT_TRUE(st.contains("durationUntilReset")) << r.body;
    const int seconds = std::stoi(st["durationUntilReset"].get<std::string>());
    EXPECT_GT(seconds, 0);
    EXPECT_LE(seconds, 60);
  }
  HttpReply v1 = Call(s.http_port(), "POST", "/v1/check", body);
  ASSERT_EQ(v1.status, 200) << v1.body;
  const json d = json::parse(v1.body)["descriptors"];
  EXPECT_EQ(d[0]["remaining"], 4) << v1.body;
  EXPECT_EQ(d[1]["remaining"], 2) << v1.body;
  EXPECT_GT(d[0]["reset_after_ms"].get<int64_t>(), 0);
  EXPECT_EQ(v1.header("ratelimit").rfind("\"per_tenant\";r=2;", 0), 0u) << v1.header("ratelimit");
}

// A RateLimitOverride limits any descriptor of a known domain, as envoy-ratelimit
// applies it: one no rule matches, one under an unlimited rule, one under a shadow rule
// (an override is enforced) and one under a rule of requests_per_unit 0.
TEST_F(E2e, LimitOverridesApplyToEveryDescriptorOfAKnownDomain) {
  config_.Write("o.yaml", R"(domain: o
descriptors:
  - key: free
    rate_limit: {unlimited: true}
  - key: dark
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
)");
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  auto overridden = [](const std::string& domain, const std::string& key) {
    return R"({"domain":")" + domain + R"(","descriptors":[{"entries":[{"key":")" + key +
           R"(","value":"v"}],"limit":{"requestsPerUnit":2,"unit":"HOUR"}}]})";
  };
  for (const std::string key : {"nowhere", "free", "dark", "banned"}) {
    SCOPED_TRACE(key);
    const std::string body = overridden("o", key);
    for (int i = 0; i < 2; ++i) {
      HttpReply r = Call(port, "POST", "/json", body);
      ASSERT_EQ(r.status, 200) << r.body;
      json st = json::parse(r.body)["statuses"][0];
      EXPECT_EQ(st["currentLimit"]["requestsPerUnit"], 2) << r.body;
      EXPECT_EQ(st["currentLimit"]["unit"], "HOUR") << r.body;
      EXPECT_EQ(st["limitRemaining"], 1 - i) << r.body;
    }
    HttpReply over = Call(port, "POST", "/json", body);
    EXPECT_EQ(over.status, 429) << over.body;
    EXPECT_EQ(json::parse(over.body)["statuses"][0]["code"], "OVER_LIMIT") << over.body;
  }
  // An override of 0 refuses; without an override the descriptor is not limited.
  HttpReply zero = Call(
      port, "POST", "/json",
      R"({"domain":"o","descriptors":[{"entries":[{"key":"z","value":"v"}],"limit":{"requestsPerUnit":0,"unit":"MINUTE"}}]})");
  EXPECT_EQ(zero.status, 429) << zero.body;
  EXPECT_EQ(Call(port, "POST", "/v1/check", Check({{{"nowhere", "v"}}}, 0, "o")).status, 200);
  // An unknown domain limits nothing, override or not.
  EXPECT_EQ(Call(port, "POST", "/json", overridden("unknown", "nowhere")).status, 200);
}

// The RateLimit headers never show a shadow-mode limit (it refuses nobody, so r=0 from
// it would make well-behaved clients back off for nothing), and a bucket's policy says
// what it admits: its burst, refilled over the window that rate takes to fill it.
TEST_F(E2e, RateLimitHeadersShowEnforcedLimitsAndBucketsTruthfully) {
  config_.Write("h.yaml", R"(domain: h
descriptors:
  - key: dark
    shadow_mode: true
    rate_limit: {name: dark, unit: minute, requests_per_unit: 1}
  - key: user
    rate_limit: {name: user, unit: minute, requests_per_unit: 100}
  - key: bucket
    algorithm: token_bucket
    burst: 10
    rate_limit: {name: bucket, unit: second, requests_per_unit: 1}
  - key: slow
    algorithm: gcra
    burst: 2
    rate_limit: {name: slow, unit: hour, requests_per_unit: 1}
)");
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  const std::string both = Check({{{"dark", "a"}}, {{"user", "a"}}}, 0, "h");
  EXPECT_EQ(Call(port, "POST", "/v1/check", both).status, 200);
  HttpReply second = Call(port, "POST", "/v1/check", both);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(json::parse(second.body)["descriptors"][0]["shadow_refused"], true) << second.body;
  EXPECT_EQ(second.header("ratelimit").rfind("\"user\";r=98;", 0), 0u)
      << second.header("ratelimit");
  EXPECT_EQ(second.header("ratelimit-policy"), "\"user\";q=100;w=60");
  // A shadow limit alone: no RateLimit headers at all.
  HttpReply alone = Call(port, "POST", "/v1/check", Check({{{"dark", "a"}}}, 0, "h"));
  EXPECT_EQ(alone.status, 200);
  EXPECT_EQ(alone.header("ratelimit"), "");
  EXPECT_EQ(alone.header("ratelimit-policy"), "");
  // Burst 10 at 1/s: 10 requests per 10 s; burst 2 at 1/h: 2 per 2 h.
  HttpReply bucket = Call(port, "POST", "/v1/check", Check({{{"bucket", "b"}}}, 0, "h"));
  EXPECT_EQ(bucket.header("ratelimit-policy"), "\"bucket\";q=10;w=10");
  HttpReply slow = Call(port, "POST", "/v1/check", Check({{{"slow", "c"}}}, 0, "h"));
  EXPECT_EQ(slow.header("ratelimit-policy"), "\"slow\";q=2;w=7200");
}

// "hits": 0 on /v1/check reports without spending; at the limit it answers whether one
// more request would pass (it would not: 429), where envoy-ratelimit answers OK.
TEST_F(E2e, HitsZeroPeeksAndAtTheLimitAsksWhetherOneMorePasses) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  const std::string peek =
      R"({"domain":"shop","hits":0,"descriptors":[{"entries":[{"key":"route","value":"sign_in"},{"key":"account","value":"p"}]}]})";
  for (int i = 0; i < 2; ++i) {
    HttpReply r = Call(port, "POST", "/v1/check", peek);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["descriptors"][0]["remaining"], 3) << r.body;
  }
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Call(port, "POST", "/v1/check", SignIn("p")).status, 200);
  HttpReply at = Call(port, "POST", "/v1/check", peek);
  EXPECT_EQ(at.status, 429) << at.body;
  EXPECT_EQ(json::parse(at.body)["descriptors"][0]["remaining"], 0) << at.body;
  EXPECT_EQ(json::parse(at.body)["descriptors"][0]["reason"], "over_limit") << at.body;
  // The same reading on envoy-ratelimit's /json with a descriptor's hitsAddend of 0.
  HttpReply envoy = Call(
      port, "POST", "/json",
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"route","value":"sign_in"},{"key":"account","value":"p"}],"hitsAddend":0}]})");
  EXPECT_EQ(envoy.status, 429) << envoy.body;
  EXPECT_EQ(json::parse(envoy.body)["statuses"][0]["limitRemaining"], 0) << envoy.body;
}

// The HTTP listener's robustness, on whichever threads it runs.
void ExpectBadRequestsGetClearErrorsAndNeverStickAWorker(int port) {
  HttpReply malformed = Call(port, "POST", "/v1/check", "{\"domain\":");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(json::parse(malformed.body)["error"].get<std::string>().rfind("malformed JSON", 0), 0u);
  HttpReply unknown = Call(port, "POST", "/v1/check", Check({{{"a", "b"}}}, 0, "nope"));
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(json::parse(unknown.body)["error"], "unknown domain 'nope'");
  HttpReply huge_value = Call(port, "POST", "/v1/check",
                              Check({{{"route", "sign_in"}, {"account", std::string(5000, 'x')}}}));
  EXPECT_EQ(huge_value.status, 400);
  EXPECT_EQ(json::parse(huge_value.body)["error"], "an entry's value is longer than 1024 bytes");
  HttpReply oversized = Call(port, "POST", "/v1/check", std::string(100 * 1024, ' '));
  EXPECT_EQ(oversized.status, 413);
  HttpReply big_header =
      Call(port, "POST", "/v1/check", SignIn("x"), "X-Junk: " + std::string(20000, 'j') + "\r\n");
  EXPECT_EQ(big_header.status, 431);
  Connection garbage(port);
  ASSERT_TRUE(garbage.Send("THIS IS NOT HTTP\r\n\r\n"));
  EXPECT_EQ(garbage.Read().status, 400);
  EXPECT_EQ(Call(port, "GET", "/v1/check").status, 405);
  EXPECT_EQ(Call(port, "GET", "/nowhere").status, 404);
  // Slowloris: a request that trickles in is cut off at --read-timeout-ms (700 ms).
  Connection slow(port, std::chrono::seconds(5));
  ASSERT_TRUE(slow.Send("POST /v1/check HTTP/1.1\r\nHost: x\r\n"));
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    closed = !slow.Send("X-Slow: 1\r\n");
  }
  if (!closed) closed = slow.ClosedByPeer();
  EXPECT_TRUE(closed) << "a slow client was not disconnected";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  // An idle kept-alive connection is closed as well.
  Connection idle(port, std::chrono::seconds(3));
  EXPECT_TRUE(idle.ClosedByPeer());
  // Keep-alive: several requests on one connection; the service still answers.
  Connection keep(port);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(keep.Send(Request("GET", "/healthz")));
    EXPECT_EQ(keep.Read().status, 200);
  }
  EXPECT_EQ(Call(port, "POST", "/v1/check", SignIn("after")).status, 200);
}

// `Expect: 100-continue`: the 100 comes before the body is sent (a client such as curl
// otherwise waits a second for it); a declared body over the limit gets 413 at once, an
// unknown expectation 417.
TEST_F(E2e, ExpectContinueIsAnsweredBeforeTheBody) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const std::string body = SignIn("expect");
  const std::string head =
      "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nExpect: 100-continue\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  Connection c(s.http_port(), std::chrono::seconds(5));
  ASSERT_TRUE(c.Send(head));
  EXPECT_EQ(c.Read().status, 100);  // nothing of the body is sent before it
  ASSERT_TRUE(c.Send(body));
  const HttpReply checked = c.Read();
  EXPECT_EQ(checked.status, 200) << checked.body;
  EXPECT_EQ(json::parse(checked.body)["descriptors"][0]["source"], "store") << checked.body;
  // The connection is kept alive: a second request with the same expectation.
  ASSERT_TRUE(c.Send(head));
  EXPECT_EQ(c.Read().status, 100);
  ASSERT_TRUE(c.Send(body));
  EXPECT_EQ(c.Read().status, 200);

  Connection big(s.http_port(), std::chrono::seconds(5));
  ASSERT_TRUE(
      big.Send("POST /v1/check HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
               "Content-Length: 1000000\r\n\r\n"));
  const HttpReply too_large = big.Read();
  EXPECT_EQ(too_large.status, 413) << too_large.body;
  EXPECT_EQ(too_large.header("connection"), "close");

  Connection odd(s.http_port(), std::chrono::seconds(5));
  ASSERT_TRUE(
      odd.Send("POST /v1/check HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n"
               "Content-Length: 5\r\n\r\n"));
  const HttpReply refused = odd.Read();
  EXPECT_EQ(refused.status, 417) << refused.body;
  EXPECT_NE(refused.body.find("200-ok"), std::string::npos) << refused.body;
}

// Default: HTTP on the store client's I/O thread (--http-threads 0).
TEST_F(E2e, BadRequestsGetClearErrorsAndNeverStickAWorker) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  ExpectBadRequestsGetClearErrorsAndNeverStickAWorker(s.http_port());
}

// HTTP on threads of its own: the same answers, and a clean stop with a connection
// left open.
TEST_F(E2e, OwnHttpThreadsAnswerTheSame) {
  auto flags = Flags();
  flags.insert(flags.end(), {"--http-threads", "2"});
  Sluiced s(config_.path(), redis_.url(), flags);
  ExpectBadRequestsGetClearErrorsAndNeverStickAWorker(s.http_port());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("own")).status, 200);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("own")).status, 429);
  Connection open(s.http_port());
  ASSERT_TRUE(open.Send(Request("GET", "/healthz")));
  EXPECT_EQ(open.Read().status, 200);
}

TEST_F(E2e, LeasesAcquireHeartbeatRelease) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const std::string body =
      R"({"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"dana"}]})";
  std::vector<std::string> handles;
  for (int i = 0; i < 3; ++i) {
    HttpReply r = Call(s.http_port(), "POST", "/v1/leases", body);
    ASSERT_EQ(r.status, 201) << r.body;
    handles.push_back(json::parse(r.body)["lease"]);
    EXPECT_EQ(r.header("location"), "/v1/leases/" + handles.back());
    EXPECT_EQ(json::parse(r.body)["live"], i + 1);
  }
  HttpReply full = Call(s.http_port(), "POST", "/v1/leases", body);
  EXPECT_EQ(full.status, 429);
  EXPECT_FALSE(full.header("retry-after").empty());
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/leases/" + handles[0] + "/heartbeat").status, 200);
  EXPECT_EQ(Call(s.http_port(), "DELETE", "/v1/leases/" + handles[0]).status, 204);
  // A release is idempotent; a heartbeat of a released lease finds it gone from Redis.
  EXPECT_EQ(Call(s.http_port(), "DELETE", "/v1/leases/" + handles[0]).status, 204);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/leases/" + handles[0] + "/heartbeat").status, 410);
  // The released slot is free again (the release reached Redis before this acquire).
  HttpReply again;
  for (int i = 0; i < 50 && again.status != 201; ++i) {
    again = Call(s.http_port(), "POST", "/v1/leases", body);
    if (again.status != 201) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(again.status, 201) << again.body;
  // A descriptor of a rate limit is not a concurrency limit.
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/leases",
                 R"({"domain":"shop","entries":[{"key":"tenant","value":"a"}]})")
                .status,
            400);

  // Admin: list and release every lease of the id (audited).
  const std::string auth = "Authorization: Bearer s3cret\r\n";
  HttpReply list = Call(s.admin_port(), "POST", "/admin/leases/list", body, auth);
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(json::parse(list.body)["leases"].size(), 3u);
  HttpReply no_reason = Call(s.admin_port(), "POST", "/admin/leases/release", body, auth);
  EXPECT_EQ(no_reason.status, 400);
  const std::string release =
      R"({"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"dana"}],"actor":"ops@example","reason":"stuck player"})";
  HttpReply released = Call(s.admin_port(), "POST", "/admin/leases/release", release, auth);
  ASSERT_EQ(released.status, 200) << released.body;
  EXPECT_EQ(json::parse(released.body)["released"], 3);
  EXPECT_NE(s.audit_log().find("\"actor\":\"ops@example\""), std::string::npos) << s.audit_log();
  EXPECT_NE(s.log().find("admin release_all"), std::string::npos);
  // Inspect: the id's key as Redis holds it, decoded (2 of sign-in's 3 spent).
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("zoe")).status, 200);
  HttpReply inspect = Call(
      s.admin_port(), "POST", "/admin/inspect",
      R"({"domain":"shop","entries":[{"key":"route","value":"sign_in"},{"key":"account","value":"zoe"}]})",
      auth);
  ASSERT_EQ(inspect.status, 200) << inspect.body;
  const json seen = json::parse(inspect.body);
  ASSERT_EQ(seen["keys"].size(), 1u) << inspect.body;
  EXPECT_EQ(seen["keys"][0]["used"], 2) << inspect.body;
  EXPECT_GT(seen["keys"][0]["ttl_ms"], 0) << inspect.body;
  EXPECT_LE(seen["keys"][0]["ttl_ms"], 60000) << inspect.body;
  EXPECT_EQ(seen["keys"][0]["problem"], "") << inspect.body;
}

// std::mt19937_64 as far as an observer needs it: the inverse of its output tempering,
// and its recurrence x[k+312] = x[k+156] ^ twist(x[k], x[k+1]).
uint64_t Untemper(uint64_t y) {
  y ^= y >> 43;
  y ^= (y << 37) & 0xFFF7EEE000000000ULL;
  uint64_t x = y;
  for (int i = 0; i < 4; ++i) x = y ^ ((x << 17) & 0x71D67FFFEDA60000ULL);
  y = x;
  for (int i = 0; i < 3; ++i) x = y ^ ((x >> 29) & 0x5555555555555555ULL);
  return x;
}
uint64_t Temper(uint64_t y) {
  y ^= (y >> 29) & 0x5555555555555555ULL;
  y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
  y ^= (y << 37) & 0xFFF7EEE000000000ULL;
  return y ^ (y >> 43);
}
// The next two outputs of an mt19937_64 whose last 312 outputs were `outputs`.
std::pair<uint64_t, uint64_t> PredictMt(const std::vector<uint64_t>& outputs) {
  std::vector<uint64_t> x;
  for (uint64_t o : outputs) x.push_back(Untemper(o));
  auto next = [&x](std::size_t k) {
    const uint64_t y = (x[k] & ~0x7FFFFFFFULL) | (x[k + 1] & 0x7FFFFFFFULL);
    return x[k + 156] ^ (y >> 1) ^ ((y & 1) ? 0xB5026F5AA96619E9ULL : 0);
  };
  const std::size_t n = x.size();
  x.push_back(next(n - 312));
  x.push_back(next(n - 311));
  return {Temper(x[n]), Temper(x[n + 1])};
}
// Reads a handle as the two 64-bit words printed in hex; nothing when it is not that.
std::optional<std::pair<uint64_t, uint64_t>> HexWords(const std::string& handle) {
  if (handle.size() != 32 || handle.find_first_not_of("0123456789abcdef") != std::string::npos)
    return std::nullopt;
  return std::pair{std::stoull(handle.substr(0, 16), nullptr, 16),
                   std::stoull(handle.substr(16), nullptr, 16)};
}

// A caller who collects handles learns nothing about the next one: 156 handles are
// exactly the outputs a seeded std::mt19937_64 needs to be rebuilt (the predictor is
// checked on a local generator first, so it would catch one), and handles carry 128
// bits or more, all distinct.
TEST_F(E2e, LeaseHandlesAreUnpredictable) {
  std::mt19937_64 local(20261202);
  std::vector<uint64_t> seen;
  for (int i = 0; i < 312; ++i) seen.push_back(local());
  const auto expected = PredictMt(seen);
  ASSERT_EQ(expected.first, local());
  ASSERT_EQ(expected.second, local());

  config_.Write("pool.yaml",
                "domain: pool\ndescriptors:\n  - key: job\n    algorithm: concurrency\n"
                "    rate_limit: {requests_per_unit: 1000}\n");
  Sluiced s(config_.path(), "memory://", Flags());
  const std::string body = R"({"domain":"pool","entries":[{"key":"job","value":"j"}]})";
  std::vector<std::string> handles;
  std::vector<uint64_t> words;
  for (int i = 0; i < 157; ++i) {
    HttpReply r = Call(s.http_port(), "POST", "/v1/leases", body);
    ASSERT_EQ(r.status, 201) << r.body;
    handles.push_back(json::parse(r.body)["lease"]);
    if (auto w = HexWords(handles.back()); w && i < 156) {
      words.push_back(w->first);
      words.push_back(w->second);
    }
  }
  std::set<std::string> distinct(handles.begin(), handles.end());
  EXPECT_EQ(distinct.size(), handles.size());
  for (const auto& h : handles) {
    // base64url (6 bits a character) or hex (4): 128 bits at least.
    const bool hex = h.find_first_not_of("0123456789abcdef") == std::string::npos;
    EXPECT_GE(h.size() * (hex ? 4 : 6), 128u) << h;
    EXPECT_EQ(
        h.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
        std::string::npos)
        << h;
  }
  if (words.size() == 312) {
    // The two words of a handle may have been drawn in either order.
    for (bool swapped : {false, true}) {
      std::vector<uint64_t> drawn = words;
      if (swapped)
        for (std::size_t i = 0; i < drawn.size(); i += 2) std::swap(drawn[i], drawn[i + 1]);
      auto predicted = PredictMt(drawn);
      if (swapped) std::swap(predicted.first, predicted.second);
      char hex[33];
      std::snprintf(hex, sizeof hex, "%016llx%016llx",
                    static_cast<unsigned long long>(predicted.first),
                    static_cast<unsigned long long>(predicted.second));
      EXPECT_NE(handles.back(), hex) << "the 157th handle was predicted from the 156 before it";
    }
  }
}

// A handle reaches its own lease only: releasing one domain's lease leaves another
// domain's lease held, and a handle altered by one character reaches nothing.
TEST_F(E2e, AHandleReachesOnlyItsOwnLease) {
  config_.Write("la.yaml",
                "domain: la\ndescriptors:\n  - key: job\n    algorithm: concurrency\n"
                "    rate_limit: {requests_per_unit: 1}\n");
  config_.Write("lb.yaml",
                "domain: lb\ndescriptors:\n  - key: job\n    algorithm: concurrency\n"
                "    rate_limit: {requests_per_unit: 1}\n");
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  const std::string a_body = R"({"domain":"la","entries":[{"key":"job","value":"x"}]})";
  const std::string b_body = R"({"domain":"lb","entries":[{"key":"job","value":"x"}]})";
  HttpReply a = Call(port, "POST", "/v1/leases", a_body);
  HttpReply b = Call(port, "POST", "/v1/leases", b_body);
  ASSERT_EQ(a.status, 201) << a.body;
  ASSERT_EQ(b.status, 201) << b.body;
  const std::string a_handle = json::parse(a.body)["lease"];
  const std::string b_handle = json::parse(b.body)["lease"];
  ASSERT_NE(a_handle, b_handle);
  // One character altered anywhere: either no handle at all (404) or one whose lease is
  // not in Redis (410), and B's lease is untouched.
  for (std::size_t at = 0; at < b_handle.size(); ++at) {
    std::string altered = b_handle;
    altered[at] = altered[at] == 'A' ? 'B' : 'A';
    const int heartbeat = Call(port, "POST", "/v1/leases/" + altered + "/heartbeat").status;
    EXPECT_TRUE(heartbeat == 404 || heartbeat == 410) << at << ": " << heartbeat;
    const int release = Call(port, "DELETE", "/v1/leases/" + altered).status;
    EXPECT_TRUE(release == 404 || release == 204) << at << ": " << release;
  }
  EXPECT_EQ(Call(port, "DELETE", "/v1/leases/" + a_handle).status, 204);
  EXPECT_EQ(Call(port, "DELETE", "/v1/leases/" + a_handle).status, 204);
  // B's lease is still held, by sluiced and in the store: heartbeats pass, the cap is full.
  EXPECT_EQ(Call(port, "POST", "/v1/leases/" + b_handle + "/heartbeat").status, 200);
  EXPECT_EQ(Call(port, "POST", "/v1/leases", b_body).status, 429);
  // A's slot came free.
  HttpReply again;
  for (int i = 0; i < 50 && again.status != 201; ++i) {
    again = Call(port, "POST", "/v1/leases", a_body);
    if (again.status != 201) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(Call(port, "DELETE", "/v1/leases/" + b_handle).status, 204);
}

// The live lease members of the one lease set in `redis` (every lease of one id).
int64_t LiveLeases(const sluice::testing::RedisServer& redis) {
  const auto keys = redis.Command({"KEYS", "sluice:*}:cc"});
  if (keys.elements.empty()) return 0;
  EXPECT_EQ(keys.elements.size(), 1u);
  return redis
      .Command({"ZCOUNT", keys.elements[0].str, "(" + std::to_string(redis.NowMs()), "+inf"})
      .integer;
}

// Two sluiced on one Redis, as behind a load balancer: a lease acquired through one is
// heartbeaten and released through the other, and neither a graceful stop, a SIGKILL
// nor a restart of an instance changes a slot (the cap of 3 holds throughout).
TEST_F(E2e, LeasesLiveInRedisWhicheverInstanceGrantedThem) {
  const std::string body =
      R"({"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"dana"}]})";
  auto a = std::make_unique<Sluiced>(config_.path(), redis_.url(), Flags());
  auto b = std::make_unique<Sluiced>(config_.path(), redis_.url(), Flags());
  std::vector<std::string> handles;
  for (int i = 0; i < 3; ++i) {
    HttpReply r = Call(a->http_port(), "POST", "/v1/leases", body);
    ASSERT_EQ(r.status, 201) << r.body;
    handles.push_back(json::parse(r.body)["lease"]);
  }
  for (const auto& h : handles) {
    HttpReply r = Call(b->http_port(), "POST", "/v1/leases/" + h + "/heartbeat");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_GT(json::parse(r.body)["expires_in_ms"].get<int64_t>(), 25000) << r.body;
  }
  EXPECT_EQ(Call(b->http_port(), "POST", "/v1/leases", body).status, 429);
  // A graceful stop of the granting instance (drain and all) releases nothing.
  EXPECT_EQ(a->Stop(), 0) << a->log();
  EXPECT_EQ(LiveLeases(redis_), 3);
  EXPECT_EQ(Call(b->http_port(), "POST", "/v1/leases", body).status, 429);
  for (const auto& h : handles)
    EXPECT_EQ(Call(b->http_port(), "POST", "/v1/leases/" + h + "/heartbeat").status, 200);
  // Its replacement knows every lease, though it granted none.
  a = std::make_unique<Sluiced>(config_.path(), redis_.url(), Flags());
  EXPECT_EQ(Call(a->http_port(), "POST", "/v1/leases/" + handles[0] + "/heartbeat").status, 200);
  // A crash of the other changes nothing either.
  b->Signal(SIGKILL);
  b->Stop();
  EXPECT_EQ(LiveLeases(redis_), 3);
  EXPECT_EQ(Call(a->http_port(), "POST", "/v1/leases", body).status, 429);
  EXPECT_EQ(Call(a->http_port(), "DELETE", "/v1/leases/" + handles[0]).status, 204);
  EXPECT_EQ(LiveLeases(redis_), 2);
  EXPECT_EQ(Call(a->http_port(), "POST", "/v1/leases", body).status, 201);
  EXPECT_EQ(Call(a->http_port(), "POST", "/v1/leases/" + handles[0] + "/heartbeat").status, 410);
}

// A handle that is not one sluiced wrote gets 404 (or 400 from the HTTP layer) and
// touches no slot: garbage, truncated, extended, over-long, another version.
TEST_F(E2e, MalformedLeaseHandlesAreRefusedWithoutTouchingASlot) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  HttpReply granted =
      Call(port, "POST", "/v1/leases",
           R"({"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"dana"}]})");
  ASSERT_EQ(granted.status, 201) << granted.body;
  const std::string handle = json::parse(granted.body)["lease"];
  EXPECT_LE(handle.size(), 440u);
  std::vector<std::string> bad = {"x",
                                  "!!!!",
                                  "%00%01",
                                  handle.substr(0, handle.size() - 1),
                                  handle.substr(0, handle.size() - 4),
                                  handle.substr(0, handle.size() / 2),
                                  handle + "AAAA",
                                  handle + "A",
                                  std::string(441, 'A'),
                                  std::string(4000, 'A'),
                                  "B" + handle.substr(1),  // another version
                                  "AQ"};
  std::mt19937_64 random(20261205);
  for (int i = 0; i < 50; ++i) {
    std::string noise;
    for (std::size_t j = 0; j < handle.size(); ++j)
      noise.push_back(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[random() % 64]);
    bad.push_back(noise);
  }
  for (const std::string& h : bad) {
    const int heartbeat = Call(port, "POST", "/v1/leases/" + h + "/heartbeat").status;
    EXPECT_TRUE(heartbeat == 404 || heartbeat == 400 || heartbeat == 431) << h << ": " << heartbeat;
    const int release = Call(port, "DELETE", "/v1/leases/" + h).status;
    EXPECT_TRUE(release == 404 || release == 400 || release == 431) << h << ": " << release;
  }
  EXPECT_EQ(LiveLeases(redis_), 1);
  EXPECT_EQ(Call(port, "POST", "/v1/leases/" + handle + "/heartbeat").status, 200);
  EXPECT_TRUE(s.running());
}

// A lease whose limit a reload removes: its handle names no configured limit, so
// heartbeats and releases get 404 without a store call, and its slot stays in Redis
// until lease_ttl after its last heartbeat (nothing frees it early, nothing keeps it
// for ever); when the limit comes back by the same path, the handle works again.
TEST_F(E2e, ALeaseWhoseLimitAReloadRemovesKeepsItsSlotUntilItsTtl) {
  const std::string with_jobs =
      "domain: jobs\ndescriptors:\n  - key: job\n    algorithm: concurrency\n"
      "    lease_ttl: 3s\n    rate_limit: {requests_per_unit: 1}\n";
  config_.Write("jobs.yaml", with_jobs);
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  const std::string body = R"({"domain":"jobs","entries":[{"key":"job","value":"j"}]})";
  HttpReply granted = Call(port, "POST", "/v1/leases", body);
  ASSERT_EQ(granted.status, 201) << granted.body;
  const std::string handle = json::parse(granted.body)["lease"];
  auto reloaded = [&](int times) {
    for (int i = 0; i < 200; ++i) {
      std::size_t count = 0;
      const std::string log = s.log();
      for (std::size_t at = 0; (at = log.find("config reloaded", at)) != std::string::npos; ++at)
        ++count;
      if (static_cast<int>(count) >= times) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  };
  config_.Write("jobs.yaml",
                "domain: jobs\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, "
                "requests_per_unit: 5}\n");
  ASSERT_TRUE(reloaded(1)) << s.log();
  HttpReply heartbeat = Call(port, "POST", "/v1/leases/" + handle + "/heartbeat");
  EXPECT_EQ(heartbeat.status, 404);
  EXPECT_NE(heartbeat.body.find("no lease of a configured concurrency limit"), std::string::npos)
      << heartbeat.body;
  EXPECT_EQ(Call(port, "DELETE", "/v1/leases/" + handle).status, 404);
  EXPECT_EQ(LiveLeases(redis_), 1);  // not freed early
  // Back by the same path within lease_ttl: the same lease, still held.
  config_.Write("jobs.yaml", with_jobs);
  ASSERT_TRUE(reloaded(2)) << s.log();
  EXPECT_EQ(Call(port, "POST", "/v1/leases/" + handle + "/heartbeat").status, 200);
  EXPECT_EQ(Call(port, "POST", "/v1/leases", body).status, 429);
  // Removed again and not heartbeaten: the slot frees lease_ttl after the last heartbeat.
  config_.Write("jobs.yaml",
                "domain: jobs\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, "
                "requests_per_unit: 5}\n");
  ASSERT_TRUE(reloaded(3)) << s.log();
  std::this_thread::sleep_for(std::chrono::milliseconds(3300));
  EXPECT_EQ(LiveLeases(redis_), 0);
}

// The store's password never reaches sluiced's log or its admin listener: the URL is
// shown with its password masked, in the "serving" line, in "not reachable yet" and in
// /admin/config.
TEST(E2eSecrets, TheStorePasswordIsNeverLoggedOrShown) {
  sluice::testing::RedisServer redis({.requirepass = "hunter2-secret"});
  TempDir config;
  config.Write("shop.yaml", ExampleConfig());
  const std::string url = redis.url();
  ASSERT_NE(url.find("hunter2-secret"), std::string::npos) << url;
  {
    Sluiced s(config.path(), url, {"--admin-token", "s3cret", "--deadline-ms", "200"});
    EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("p")).status, 200);
    HttpReply shown =
        Call(s.admin_port(), "GET", "/admin/config", "", "Authorization: Bearer s3cret\r\n");
    ASSERT_EQ(shown.status, 200);
    EXPECT_EQ(shown.body.find("hunter2"), std::string::npos) << shown.body;
    EXPECT_NE(json::parse(shown.body)["store"].get<std::string>().find(":***@127.0.0.1:"),
              std::string::npos)
        << shown.body;
    EXPECT_NE(s.log().find("store=redis://:***@127.0.0.1:"), std::string::npos) << s.log();
    EXPECT_EQ(s.log().find("hunter2"), std::string::npos) << s.log();
  }
  redis.Kill();
  Sluiced down(config.path(), url, {"--connect-wait-ms", "100"});
  EXPECT_NE(down.log().find("store redis://:***@127.0.0.1:"), std::string::npos) << down.log();
  EXPECT_NE(down.log().find("not reachable yet"), std::string::npos) << down.log();
  EXPECT_EQ(down.log().find("hunter2"), std::string::npos) << down.log();
}

// GET /admin/breaker (token s3cret), parsed.
json BreakerOf(const Sluiced& s) {
  HttpReply r =
      Call(s.admin_port(), "GET", "/admin/breaker", "", "Authorization: Bearer s3cret\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  return r.status == 200 ? json::parse(r.body) : json::object();
}

// Sends `checks` round after round until /admin/breaker says at least `open` domains are
// open (at most 10 s); its last answer.
json CheckUntilOpen(const Sluiced& s, const std::vector<std::string>& checks, int open) {
  json breaker;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    for (const std::string& c : checks) Call(s.http_port(), "POST", "/v1/check", c);
    breaker = BreakerOf(s);
    if (breaker.value("open_domains", 0) >= open) break;
  }
  return breaker;
}

// One server is one fault domain: an open breaker names the store itself, by its URL with
// the password masked, on /admin/breaker and in the log's breaker line.
TEST(E2eSecrets, AnOpenBreakerNamesTheStoreWithItsPasswordMasked) {
  sluice::testing::RedisServer redis({.requirepass = "hunter2-secret"});
  TempDir config;
  config.Write("shop.yaml", ExampleConfig());
  Sluiced s(config.path(), redis.url(), {"--admin-token", "s3cret", "--deadline-ms", "100"});
  const std::string checkout = Check({{{"route", "checkout"}, {"account", "b"}}});
  ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", checkout).status, 200);
  const json closed = BreakerOf(s);
  EXPECT_EQ(closed.value("breaker", json()), "closed") << closed;
  EXPECT_EQ(closed.value("domains", json()), 1) << closed;
  EXPECT_EQ(closed.value("open_domains", json()), 0) << closed;
  EXPECT_EQ(closed.value("open", json()), json::array()) << closed;
  redis.Pause();
  const json open = CheckUntilOpen(s, {checkout}, 1);
  redis.Resume();
  ASSERT_EQ(open.value("open_domains", 0), 1) << open;
  EXPECT_EQ(open.value("domains", json()), 1) << open;
  EXPECT_NE(open.value("breaker", json()), "closed") << open;
  ASSERT_EQ(open.value("open", json()).size(), 1u) << open;
  const std::string shown = open.value("open", json())[0];
  EXPECT_EQ(shown.rfind("redis://:***@127.0.0.1:", 0), 0u) << open;
  EXPECT_EQ(open.value("store", json()), shown) << open;
  EXPECT_EQ(open.dump().find("hunter2"), std::string::npos) << open;
  for (int i = 0; i < 100 && s.log().find("domains open: redis://:***@") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(s.log().find("store breaker closed -> open (1 of 1 domains open: redis://:***@"),
            std::string::npos)
      << s.log();
  EXPECT_EQ(s.log().find("hunter2"), std::string::npos) << s.log();
}

TEST_F(E2e, BearerSchemeIsCaseInsensitiveAndActorsWithNewlinesAreRefused) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  EXPECT_EQ(
      Call(s.admin_port(), "GET", "/admin/config", "", "Authorization: bearer s3cret\r\n").status,
      200);
  EXPECT_EQ(
      Call(s.admin_port(), "GET", "/admin/config", "", "Authorization: BEARER s3cret\r\n").status,
      200);
  const std::string forged =
      R"({"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"dana"}],)"
      R"("actor":"ops\n2026-01-01T00:00:00.000+0000 info forged","reason":"stuck"})";
  HttpReply refused = Call(s.admin_port(), "POST", "/admin/leases/release", forged,
                           "Authorization: Bearer s3cret\r\n");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(s.log().find("info forged"), std::string::npos) << s.log();
}

TEST_F(E2e, AdminNeedsTheBearerToken) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  HttpReply missing = Call(s.admin_port(), "GET", "/admin/config");
  EXPECT_EQ(missing.status, 401);
  EXPECT_NE(missing.body.find("admin calls need Authorization: Bearer <token>"), std::string::npos)
      << missing.body;
  EXPECT_EQ(
      Call(s.admin_port(), "GET", "/admin/config", "", "Authorization: Bearer wrong\r\n").status,
      401);
  EXPECT_EQ(
      Call(s.admin_port(), "GET", "/admin/config", "", "Authorization: Bearer s3cre\r\n").status,
      401);
  EXPECT_EQ(
      Call(s.admin_port(), "GET", "/admin/config", "", "Authorization: Basic s3cret\r\n").status,
      401);
  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/leases/release", "{}").status, 401);
  HttpReply config =
      Call(s.admin_port(), "GET", "/admin/config", "", "Authorization: Bearer s3cret\r\n");
  ASSERT_EQ(config.status, 200);
  EXPECT_EQ(json::parse(config.body)["rules"].size(), 8u)
      << "examples/config/shop.yaml has 8 limits";
  HttpReply breaker =
      Call(s.admin_port(), "GET", "/admin/breaker", "", "Authorization: Bearer s3cret\r\n");
  ASSERT_EQ(breaker.status, 200);
  EXPECT_EQ(json::parse(breaker.body)["breaker"], "closed");
  // One log line per admin action; refused calls too (at most one a second, the rest
  // counted in the next line).
  auto logged = [&](const std::string& line) {
    for (int i = 0; i < 100; ++i) {
      if (s.log().find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  EXPECT_TRUE(logged("admin call refused (no or wrong bearer token): GET /admin/config"))
      << s.log();
  EXPECT_TRUE(logged("admin config rules=8")) << s.log();
  EXPECT_TRUE(logged("admin breaker state=closed")) << s.log();
  EXPECT_EQ(s.log().find("s3cre"), std::string::npos) << "a token never reaches the log";
  // Admin calls are not on the public listener.
  EXPECT_EQ(
      Call(s.http_port(), "GET", "/admin/config", "", "Authorization: Bearer s3cret\r\n").status,
      404);
}

TEST_F(E2e, MetricsPassPromtoolAndCountDecisions) {
  // A limit with detailed_metric: a series per descriptor (envoy-ratelimit's per-value
  // stats) beside the limit's own.
  config_.Write("det.yaml",
                "domain: det\ndescriptors:\n  - key: user\n    detailed_metric: true\n"
                "    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}\n");
  Sluiced s(config_.path(), redis_.url(), Flags());
  for (int i = 0; i < 4; ++i) Call(s.http_port(), "POST", "/v1/check", SignIn("m"));
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", Check({{{"user", "u1"}}}, 0, "det")).status,
            200);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", Check({{{"user", "u1"}}}, 0, "det")).status,
            429);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", Check({{{"user", "u2"}}}, 0, "det")).status,
            200);
  ASSERT_EQ(Call(s.http_port(), "POST", "/v1/leases",
                 R"({"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"m"}]})")
                .status,
            201);
  HttpReply m = Call(s.metrics_port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  // Every series the Grafana dashboard of examples/ queries is on the page.
  const json dashboard = json::parse(
      testing::ReadAll(std::string(SLUICED_SOURCE_DIR) + "/examples/grafana-dashboard.json"));
  const std::regex metric_name(R"(\bsluiced?_[a-z_]+)");
  std::set<std::string> queried;
  for (const auto& panel : dashboard["panels"]) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"];
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric_name), end; it != end; ++it)
        queried.insert(it->str());
    }
  }
  EXPECT_GE(queried.size(), 10u);
  for (const auto& name : queried)
    EXPECT_NE(m.body.find("\n" + name), std::string::npos)
        << "the dashboard queries " << name << ", which /metrics does not have";
  for (
      const char* line :
      {R"(sluiced_descriptor_decisions_total{domain="det",limit="per_user",descriptor="user=u1",outcome="allowed"} 1)",
       R"(sluiced_descriptor_decisions_total{domain="det",limit="per_user",descriptor="user=u1",outcome="over_limit"} 1)",
       R"(sluiced_descriptor_decisions_total{domain="det",limit="per_user",descriptor="user=u2",outcome="allowed"} 1)",
       R"(sluiced_decisions_total{domain="det",limit="per_user",outcome="allowed",source="store"} 2)"}) {
    EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
  }
  EXPECT_EQ(m.body.find("descriptor=\"account=m\""), std::string::npos)
      << "a limit without detailed_metric has no per-descriptor series";
  EXPECT_NE(
      m.body.find(
          R"(sluiced_decisions_total{domain="shop",limit="sign_in",outcome="allowed",source="store"} 3)"),
      std::string::npos)
      << m.body;
  EXPECT_NE(
      m.body.find(
          R"(sluiced_decisions_total{domain="shop",limit="sign_in",outcome="over_limit",source="store"} 1)"),
      std::string::npos);
  EXPECT_NE(m.body.find("sluiced_store_latency_seconds_bucket"), std::string::npos);
  EXPECT_NE(m.body.find("sluice_breaker_state"), std::string::npos);
  // The RLQS quota calls' own client, told apart by a label.
  EXPECT_NE(m.body.find(R"(sluice_breaker_state{state="closed",client="quota"} 1)"),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("sluiced_config_reloads_total 1"), std::string::npos);
  std::string promtool;
  EXPECT_TRUE(testing::PromtoolAccepts(m.body, promtool)) << promtool;
  EXPECT_EQ(Call(s.http_port(), "GET", "/healthz").status, 200);
  HttpReply ready = Call(s.http_port(), "GET", "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(json::parse(ready.body)["status"], "ready");
}

// Metrics name descriptor values (lease ids, detailed_metric descriptors): the public
// listener does not serve them, its 404 names the metrics listener, which does.
TEST_F(E2e, PublicListenerDoesNotServeMetrics) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  ASSERT_EQ(
      Call(
          s.http_port(), "POST", "/v1/leases",
          R"({"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"alice@example.com"}]})")
          .status,
      201);
  for (const char* method : {"GET", "POST"}) {
    HttpReply pub = Call(s.http_port(), method, "/metrics");
    EXPECT_EQ(pub.status, 404) << method;
    EXPECT_NE(pub.body.find("metrics listener (--metrics-listen, 127.0.0.1:" +
                            std::to_string(s.metrics_port()) + ")"),
              std::string::npos)
        << pub.body;
    EXPECT_EQ(pub.body.find("alice"), std::string::npos) << pub.body;
  }
  // Probes stay on the public listener.
  EXPECT_EQ(Call(s.http_port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(Call(s.http_port(), "GET", "/readyz").status, 200);
  HttpReply m = Call(s.metrics_port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("alice@example.com"), std::string::npos) << m.body;
  // The metrics listener serves metrics only.
  EXPECT_EQ(Call(s.metrics_port(), "POST", "/v1/check", SignIn("a")).status, 404);
  EXPECT_EQ(Call(s.metrics_port(), "POST", "/metrics").status, 405);
}

// --metrics-token: every scrape needs the bearer token (Prometheus' `authorization`).
TEST_F(E2e, MetricsTokenIsAskedOfEveryScrape) {
  auto flags = Flags();
  flags.insert(flags.end(), {"--metrics-token", "m3trics"});
  Sluiced s(config_.path(), redis_.url(), flags);
  HttpReply none = Call(s.metrics_port(), "GET", "/metrics");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.header("www-authenticate"), "Bearer");
  EXPECT_EQ(none.body.find("sluice"), std::string::npos) << none.body;
  EXPECT_EQ(Call(s.metrics_port(), "GET", "/metrics", "", "Authorization: Bearer wrong\r\n").status,
            401);
  HttpReply ok = Call(s.metrics_port(), "GET", "/metrics", "", "Authorization: bearer m3trics\r\n");
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("sluiced_config_reloads_total 1"), std::string::npos) << ok.body;
  EXPECT_EQ(s.log().find("m3trics"), std::string::npos) << "a token never reaches the log";
}

// 3,000 leases of distinct ids: the per-id lease gauges stop at 1,000 ids. sluiced holds
// no lease itself (each lives in Redis only), so the library keeps the 1,000 ids whose
// live count it read most recently, and the page stays valid for promtool.
TEST_F(E2e, LeaseSeriesAreCapped) {
  config_.Write("many.yaml",
                "domain: many\ndescriptors:\n  - key: user\n    algorithm: concurrency\n"
                "    lease_ttl: 120s\n    rate_limit: {name: per_user, requests_per_unit: 2}\n");
  Sluiced s(config_.path(), redis_.url(), Flags());
  constexpr int kLeases = 3000;
  {
    Connection c(s.http_port(), std::chrono::seconds(10));
    ASSERT_TRUE(c.connected());
    for (int i = 0; i < kLeases; ++i) {
      // u0 holds two leases: among the ids kept, whatever the order of the others.
      const std::string user = i == kLeases - 1 ? "u0" : "u" + std::to_string(i);
      ASSERT_TRUE(c.Send(
          Request("POST", "/v1/leases",
                  R"({"domain":"many","entries":[{"key":"user","value":")" + user + R"("}]})")));
      HttpReply r = c.Read();
      ASSERT_EQ(r.status, 201) << i << " " << r.body;
    }
  }
  HttpReply m = Call(s.metrics_port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  auto lines_of = [&](const std::string& prefix) {
    std::vector<std::string> lines;
    std::istringstream in(m.body);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(prefix, 0) == 0) lines.push_back(line);
    return lines;
  };
  const std::string limiter = "many.user";
  for (const char* name :
       {"sluice_leases_held{", "sluice_leases_live{", "sluice_leases_live_max_1m{"}) {
    const auto lines = lines_of(std::string(name) + "limiter=\"" + limiter);
    EXPECT_EQ(lines.size(), 1000u) << name;
  }
  EXPECT_EQ(lines_of("sluice_leases_").size(), 3000u);
  EXPECT_NE(m.body.find("sluice_leases_live{limiter=\"" + limiter + "\",id=\"user=u0\"} 2"),
            std::string::npos);
  EXPECT_NE(m.body.find("sluice_leases_held{limiter=\"" + limiter + "\",id=\"user=u0\"} 0"),
            std::string::npos);
  EXPECT_EQ(m.body.find("sluiced_leases_held"), std::string::npos);
  std::string promtool;
  EXPECT_TRUE(testing::PromtoolAccepts(m.body, promtool)) << promtool;
}

TEST_F(E2e, ReloadKeepsOldConfigOnErrorAndNeverResetsCounters) {
  const std::string v1 =
      "domain: r\ndescriptors:\n  - key: user\n    rate_limit: {name: per_user, unit: minute, "
      "requests_per_unit: 3}\n";
  config_.Write("r.yaml", v1);
  Sluiced s(config_.path(), redis_.url(), Flags());
  const std::string u = Check({{{"user", "u1"}}}, 0, "r");
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 200);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 200);
  // A broken file: refused, the old config (and its limits) stay.
  config_.Write("r.yaml",
                "domain: r\ndescriptors:\n  - key: user\n    rate_limit: {unit: eon, "
                "requests_per_unit: 5}\n");
  s.Signal(SIGHUP);
  bool logged = false;
  for (int i = 0; i < 100 && !logged; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    logged = s.log().find("refused, keeping the previous config: " + config_.path() +
                          "/r.yaml:4:24: unknown unit 'eon'") != std::string::npos;
  }
  EXPECT_TRUE(logged) << s.log();
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 200);  // third of 3
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 429);
  // Raised to 5 by a file change (no signal): 3 spent stay spent, 2 more pass.
  config_.Write("r.yaml",
                "domain: r\ndescriptors:\n  - key: user\n    rate_limit: {name: per_user, unit: "
                "minute, requests_per_unit: 5}\n");
  bool reloaded = false;
  for (int i = 0; i < 150 && !reloaded; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reloaded = s.log().find("config reloaded (file change)") != std::string::npos;
  }
  ASSERT_TRUE(reloaded) << s.log();
  HttpReply r = Call(s.http_port(), "POST", "/v1/check", u);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("ratelimit-policy"), "\"per_user\";q=5;w=60");
  EXPECT_EQ(r.header("ratelimit").rfind("\"per_user\";r=1;", 0), 0u) << r.header("ratelimit");
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 200);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 429);
  HttpReply m = Call(s.metrics_port(), "GET", "/metrics");
  EXPECT_NE(m.body.find("sluiced_config_reload_failures_total 1"), std::string::npos);
  EXPECT_NE(m.body.find("sluiced_config_reloads_total 2"), std::string::npos);
  // The other two ways: a broken file noticed by the watcher (no signal) is refused too,
  // and a good file loaded by SIGHUP applies at once.
  auto appears = [&](const std::string& line) {
    for (int i = 0; i < 150; ++i) {
      if (s.log().find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  config_.Write("r.yaml", "domain: r\ndescriptors:\n  - key: [user\n");
  EXPECT_TRUE(appears("config reload (file change) refused, keeping the previous config: " +
                      config_.path() + "/r.yaml:"))
      << s.log();
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 429) << "the old limits stay";
  config_.Write("r.yaml",
                "domain: r\ndescriptors:\n  - key: user\n    rate_limit: {name: per_user, unit: "
                "minute, requests_per_unit: 6}\n");
  s.Signal(SIGHUP);
  ASSERT_TRUE(appears("config reloaded (SIGHUP)")) << s.log();
  HttpReply sixth = Call(s.http_port(), "POST", "/v1/check", u);
  EXPECT_EQ(sixth.status, 200) << "5 spent of 6";
  EXPECT_EQ(sixth.header("ratelimit-policy"), "\"per_user\";q=6;w=60");
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 429);
}

TEST_F(E2e, ShadowModeReplacesOverridesAndLeaseExpiry) {
  config_.Write("x.yaml", R"(domain: x
descriptors:
  - key: dark
    shadow_mode: true
    rate_limit: {name: dark, unit: minute, requests_per_unit: 1}
  - key: banned
    rate_limit: {name: banned, unit: minute, requests_per_unit: 0}
  - key: vip
    rate_limit: {name: vip, unit: minute, requests_per_unit: 100, replaces: [{name: banned}]}
  - key: bucket
    algorithm: token_bucket
    burst: 2
    rate_limit: {name: bucket, unit: hour, requests_per_unit: 1}
  - key: short
    algorithm: concurrency
    lease_ttl: 600ms
    rate_limit: {name: short, requests_per_unit: 1}
)");
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  // Shadow mode: over the limit, still allowed, and counted as shadow_refused.
  EXPECT_EQ(Call(port, "POST", "/v1/check", Check({{{"dark", "a"}}}, 0, "x")).status, 200);
  HttpReply shadow = Call(port, "POST", "/v1/check", Check({{{"dark", "a"}}}, 0, "x"));
  EXPECT_EQ(shadow.status, 200);
  EXPECT_EQ(json::parse(shadow.body)["descriptors"][0]["shadow_refused"], true);
  EXPECT_NE(Call(s.metrics_port(), "GET", "/metrics")
                .body.find(R"(limit="dark",outcome="shadow_refused",source="store"} 1)"),
            std::string::npos);
  // requests_per_unit 0 refuses; a matching `replaces` lifts it.
  EXPECT_EQ(Call(port, "POST", "/v1/check", Check({{{"banned", "b"}}}, 0, "x")).status, 429);
  EXPECT_EQ(
      Call(port, "POST", "/v1/check", Check({{{"banned", "b"}}, {{"vip", "b"}}}, 0, "x")).status,
      200);
  // token_bucket with a burst of 2.
  EXPECT_EQ(Call(port, "POST", "/v1/check", Check({{{"bucket", "c"}}}, 0, "x")).status, 200);
  EXPECT_EQ(Call(port, "POST", "/v1/check", Check({{{"bucket", "c"}}}, 0, "x")).status, 200);
  EXPECT_EQ(Call(port, "POST", "/v1/check", Check({{{"bucket", "c"}}}, 0, "x")).status, 429);
  // A limit override (Envoy's RateLimitOverride) through /json: 1 per minute.
  const std::string o =
      R"({"domain":"x","descriptors":[{"entries":[{"key":"vip","value":"o"}],"limit":{"requestsPerUnit":1,"unit":"MINUTE"}}]})";
  EXPECT_EQ(Call(port, "POST", "/json", o).status, 200);
  HttpReply overridden = Call(port, "POST", "/json", o);
  EXPECT_EQ(overridden.status, 429);
  EXPECT_EQ(json::parse(overridden.body)["statuses"][0]["currentLimit"]["requestsPerUnit"], 1);
  // A lease whose holder stops heartbeating is dropped after lease_ttl and its slot freed.
  const std::string lease = R"({"domain":"x","entries":[{"key":"short","value":"d"}]})";
  HttpReply first = Call(port, "POST", "/v1/leases", lease);
  ASSERT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(Call(port, "POST", "/v1/leases", lease).status, 429);
  int status = 0;
  for (int i = 0; i < 60 && status != 201; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = Call(port, "POST", "/v1/leases", lease).status;
  }
  EXPECT_EQ(status, 201);
  EXPECT_EQ(Call(port, "POST",
                 "/v1/leases/" + json::parse(first.body)["lease"].get<std::string>() + "/heartbeat")
                .status,
            410);
}

// A config that makes a descriptor its own child (a YAML alias) is refused at start-up
// and on a reload; a running sluiced keeps serving the config it had.
TEST_F(E2e, AliasBombsAreRefusedAtStartAndOnReload) {
  const std::string self_alias = "domain: r\ndescriptors: &x [ {key: k, descriptors: *x} ]\n";
  {
    TempDir bad;
    bad.Write("r.yaml", self_alias);
    Sluiced refused(bad.path(), "memory://", Flags(), /*expect_start=*/false);
    EXPECT_EQ(refused.WaitExit(std::chrono::seconds(10)), 1) << refused.log();
    EXPECT_NE(refused.log().find("config refused, not starting: " + bad.path() +
                                 "/r.yaml:2:41: YAML aliases (*name) are not accepted"),
              std::string::npos)
        << refused.log();
  }
  config_.Write("r.yaml",
                "domain: r\ndescriptors:\n  - key: user\n    rate_limit: {name: per_user, unit: "
                "minute, requests_per_unit: 2}\n");
  Sluiced s(config_.path(), redis_.url(), Flags());
  const std::string u = Check({{{"user", "u1"}}}, 0, "r");
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 200);
  auto appears = [&](const std::string& line, std::size_t times) {
    for (int i = 0; i < 150; ++i) {
      std::size_t n = 0;
      const std::string log = s.log();
      for (auto at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++n;
      if (n >= times) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  config_.Write("r.yaml", self_alias);
  s.Signal(SIGHUP);
  EXPECT_TRUE(appears("refused, keeping the previous config: " + config_.path() +
                          "/r.yaml:2:41: YAML aliases (*name) are not accepted",
                      1))
      << s.log();
  ASSERT_TRUE(s.running());
  // The doubling kind: 2^12 rules from 14 lines.
  std::string bomb =
      "domain: r\ndescriptors:\n  - key: a0\n    descriptors: &a0 [{key: k, rate_limit: "
      "{unit: second, requests_per_unit: 1}}]\n";
  for (int i = 1; i <= 12; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    bomb += "  - key: a" + std::to_string(i) + "\n    descriptors: &a" + std::to_string(i) +
            " [{key: k, descriptors: " + prev + "}, {key: j, descriptors: " + prev + "}]\n";
  }
  config_.Write("r.yaml", bomb);
  s.Signal(SIGHUP);
  EXPECT_TRUE(appears("/r.yaml:6:45: YAML aliases (*name) are not accepted", 1)) << s.log();
  // Still serving the previous config: per_user, 2 a minute, 1 spent.
  HttpReply second = Call(s.http_port(), "POST", "/v1/check", u);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.header("ratelimit-policy"), "\"per_user\";q=2;w=60");
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", u).status, 429);
  EXPECT_EQ(s.log().find("config reloaded"), std::string::npos) << s.log();
}

// The config's bounds, on the built binary: descriptors nested over 64 levels, a file
// over 4 MiB and over 100,000 rate limits across files are refused at start-up (exit 1,
// file:line:column) and on a reload, which keeps the running config.
TEST_F(E2e, ConfigsOverTheirBoundsAreRefusedAtStartAndOnReload) {
  std::string deep = "domain: deep\ndescriptors: ";
  for (int i = 1; i <= 65; ++i) deep += "[{key: k" + std::to_string(i) + ", descriptors: ";
  deep.replace(deep.rfind("descriptors: "), std::string::npos,
               "rate_limit: {unit: second, requests_per_unit: 1}");
  for (int i = 0; i < 65; ++i) deep += "}]";
  deep += "\n";
  const std::string one_rule =
      "domain: big\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: "
      "1}\n";
  const std::string big = one_rule + "# " + std::string(4 << 20, 'x') + "\n";
  // 34,000 rules a file (2.2 MB), three files: 102,000.
  auto many = [](int file) {
    std::string yaml = "domain: m" + std::to_string(file) + "\ndescriptors:\n";
    for (int i = 0; i < 34000; ++i)
      yaml +=
          "- {key: k" + std::to_string(i) + ", rate_limit: {unit: second, requests_per_unit: 1}}\n";
    return yaml;
  };
  const struct {
    std::vector<std::pair<std::string, std::string>> files;
    std::string error;
  } cases[] = {
      {{{"deep.yaml", deep}}, "/deep.yaml:2:"},
      {{{"big.yaml", big}}, "/big.yaml:1:1: the file has "},
      {{{"m0.yaml", many(0)}, {"m1.yaml", many(1)}, {"m2.yaml", many(2)}},
       ": more than 100000 rate limits in the configuration"},
  };
  const std::string explanation[] = {"descriptors nested deeper than 64 levels",
                                     "more than the 4194304 a config file may have",
                                     "rate limits in the configuration"};
  for (std::size_t c = 0; c < std::size(cases); ++c) {
    SCOPED_TRACE(explanation[c]);
    TempDir bad;
    for (const auto& [name, text] : cases[c].files) bad.Write(name, text);
    Sluiced refused(bad.path(), "memory://", Flags(), /*expect_start=*/false);
    EXPECT_EQ(refused.WaitExit(std::chrono::seconds(30)), 1) << refused.log().substr(0, 2000);
    const std::string log = refused.log();
    EXPECT_NE(log.find("config refused, not starting: " + bad.path()), std::string::npos)
        << log.substr(0, 2000);
    EXPECT_NE(log.find(cases[c].error), std::string::npos) << log.substr(0, 2000);
    EXPECT_NE(log.find(explanation[c]), std::string::npos) << log.substr(0, 2000);
  }
  // On a reload: refused, the running config kept.
  Sluiced s(config_.path(), redis_.url(), Flags());
  ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("r")).status, 200);
  config_.Write("deep.yaml", deep);
  bool refused = false;
  for (int i = 0; i < 100 && !refused; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    refused = s.log().find("descriptors nested deeper than 64 levels") != std::string::npos;
  }
  EXPECT_TRUE(refused) << s.log();
  EXPECT_NE(s.log().find("config reload (file change) refused, keeping the previous config"),
            std::string::npos)
      << s.log();
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("r")).status, 200);
  EXPECT_EQ(json::parse(Call(s.http_port(), "POST", "/v1/check", SignIn("r"))
                            .body)["descriptors"][0]["limit"]["name"],
            "sign_in");
}

// envoy-ratelimit's wildcards over HTTP: a '*' anywhere in a value (each any run of
// bytes), in config order before the bare key; value "" is the bare key.
TEST_F(E2e, WildcardsAnywhereInAValueChooseTheLimit) {
  config_.Write("w.yaml", R"(domain: w
descriptors:
  - key: path
    value: foo*bar
    rate_limit: {name: foo_bar, unit: minute, requests_per_unit: 1}
  - key: path
    value: "*.png"
    rate_limit: {name: png, unit: minute, requests_per_unit: 2}
  - key: path
    value: a*b*c
    rate_limit: {name: abc, unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {name: any_path, unit: minute, requests_per_unit: 4}
  - key: user
    value: ""
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 5}
)");
  Sluiced s(config_.path(), redis_.url(), Flags());
  auto limit_of = [&](const std::string& key, const std::string& value) {
    HttpReply r = Call(s.http_port(), "POST", "/v1/check", Check({{{key, value}}}, 0, "w"));
    EXPECT_EQ(r.status, 200) << r.body;
    const json limit = json::parse(r.body)["descriptors"][0]["limit"];
    return limit.is_null() ? std::string("(none)") : limit["name"].get<std::string>();
  };
  EXPECT_EQ(limit_of("path", "foo-x-bar"), "foo_bar");
  EXPECT_EQ(limit_of("path", "foobar"), "foo_bar");
  EXPECT_EQ(limit_of("path", "xfoobar"), "any_path");
  EXPECT_EQ(limit_of("path", "img/cat.png"), "png");
  EXPECT_EQ(limit_of("path", "a-b-c"), "abc");
  EXPECT_EQ(limit_of("path", "a-c-b"), "any_path");
  EXPECT_EQ(limit_of("user", "alice"), "per_user");
  // One counter per wildcard rule and distinct value: foo-y-bar has its own 1.
  EXPECT_EQ(
      Call(s.http_port(), "POST", "/v1/check", Check({{{"path", "foo-x-bar"}}}, 0, "w")).status,
      429);
  EXPECT_EQ(
      Call(s.http_port(), "POST", "/v1/check", Check({{{"path", "foo-y-bar"}}}, 0, "w")).status,
      200);
}

TEST_F(E2e, RefusesToStartOnABadConfig) {
  config_.Write("bad.yaml",
                "domain: b\ndescriptors:\n  - key: k\n    algorithm: nope\n    rate_limit: {unit: "
                "second, requests_per_unit: 1}\n");
  Sluiced s(config_.path(), redis_.url(), Flags(), /*expect_start=*/false);
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(10)), 1);
  EXPECT_NE(s.log().find("config refused, not starting: " + config_.path() +
                         "/bad.yaml:4:16: unknown algorithm 'nope'"),
            std::string::npos)
      << s.log();
}

TEST_F(E2e, RedisStoppedAndRestarted) {
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  const std::string seat = Check({{{"route", "seat_map"}, {"session", "s1"}}});
  const std::string checkout = Check({{{"route", "checkout"}, {"account", "c1"}}});
  ASSERT_EQ(Call(port, "POST", "/v1/check", SignIn("e")).status, 200);
  redis_.Kill();
  // sign-in is closed: 503 with Retry-After; seat map open: 200 fail_open; checkout: the
  // default policy (open).
  HttpReply closed = Call(port, "POST", "/v1/check", SignIn("e"));
  EXPECT_EQ(closed.status, 503) << closed.body;
  EXPECT_GE(std::stoi(closed.header("retry-after").empty() ? "0" : closed.header("retry-after")),
            1);
  EXPECT_EQ(json::parse(closed.body)["descriptors"][0]["reason"], "store_unavailable");
  HttpReply open = Call(port, "POST", "/v1/check", seat);
  EXPECT_EQ(open.status, 200);
  EXPECT_EQ(json::parse(open.body)["descriptors"][0]["source"], "fail_open");
  HttpReply dflt = Call(port, "POST", "/v1/check", checkout);
  EXPECT_EQ(dflt.status, 200);
  EXPECT_EQ(json::parse(dflt.body)["descriptors"][0]["source"], "fail_open");
  HttpReply ready = Call(port, "GET", "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(json::parse(ready.body)["status"], "degraded");
  EXPECT_EQ(Call(port, "GET", "/readyz?strict=1").status, 503);
  EXPECT_EQ(Call(port, "GET", "/readyz?strict").status, 503);
  EXPECT_EQ(Call(port, "GET", "/readyz?strict=false").status, 200);
  EXPECT_EQ(Call(port, "GET", "/readyz?strict=0").status, 200);
  EXPECT_EQ(Call(port, "GET", "/readyz?nonstrict=1").status, 200);
  EXPECT_EQ(Call(port, "GET", "/readyz?strict=maybe").status, 400);
  redis_.Start();
  // Recovery without restarting sluiced: the store decides again.
  std::string source;
  for (int i = 0; i < 100 && source != "store"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    HttpReply r = Call(port, "POST", "/v1/check", SignIn("f"));
    if (r.status == 200) source = json::parse(r.body)["descriptors"][0]["source"];
  }
  EXPECT_EQ(source, "store");
  EXPECT_EQ(json::parse(Call(port, "GET", "/readyz").body)["status"], "ready");
  HttpReply m = Call(s.metrics_port(), "GET", "/metrics");
  EXPECT_NE(m.body.find(R"(outcome="unavailable",source="fail_closed")"), std::string::npos);
}

// A Redis at maxmemory under noeviction answers reads but refuses every write: the
// readiness probe writes (a check), so /readyz says degraded, names the refusal, and
// says ready again once memory is freed.
TEST_F(E2e, ReadinessIsDegradedWhileTheStoreRefusesWrites) {
  sluice::testing::RedisServer full(
      {.extra_args = {"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}});
  Sluiced s(config_.path(), full.url(), Flags());
  const int port = s.http_port();
  json ready = json::parse(Call(port, "GET", "/readyz").body);
  EXPECT_EQ(ready["status"], "ready") << ready;
  EXPECT_EQ(ready["store"], "reachable") << ready;
  // One script fills it past maxmemory (a script that has written goes on writing), so
  // memory stays over the limit afterwards: a small write is refused.
  full.Command({"EVAL",
                "for i = 1, 8000 do redis.call('SET', 'fill:' .. i, string.rep('x', 1024)) end",
                "0"});
  const auto small = full.Command({"SET", "fill:small", "1"});
  const bool refused = small.type == sluice::testing::RedisValue::Type::kError &&
                       small.str.find("OOM") != std::string::npos;
  ASSERT_TRUE(refused) << "the store never refused a write";
  // Reads still pass (a peek is answered), writes do not.
  HttpReply r = Call(port, "GET", "/readyz");
  EXPECT_EQ(r.status, 200);
  const json degraded = json::parse(r.body);
  EXPECT_EQ(degraded["status"], "degraded") << degraded;
  EXPECT_EQ(degraded["store"], "refusing writes") << degraded;
  EXPECT_NE(degraded.value("error", "").find("OOM command not allowed"), std::string::npos)
      << degraded;
  EXPECT_EQ(degraded["answering"], "failure policies") << degraded;
  EXPECT_EQ(r.body.find(std::to_string(full.port())), std::string::npos)
      << "the public listener does not name the store's address: " << r.body;
  EXPECT_EQ(Call(port, "GET", "/readyz?strict").status, 503);
  // A check meanwhile is answered by its policy (sign-in: closed).
  EXPECT_EQ(Call(port, "POST", "/v1/check", SignIn("oom")).status, 503);
  full.Command({"FLUSHALL"});
  int status = 0;
  json again;
  for (int i = 0; i < 200 && status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    HttpReply a = Call(port, "GET", "/readyz?strict");
    status = a.status;
    if (status == 200) again = json::parse(a.body);
  }
  ASSERT_EQ(status, 200);
  EXPECT_EQ(again["status"], "ready") << again;
  EXPECT_EQ(full.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
}

// A store whose maxmemory-policy can evict sluice's keys (every one has an expiry) is
// named in /readyz's detail, with a warning; sluiced is still ready (it serves).
TEST_F(E2e, ReadinessNamesAMemoryPolicyThatCanEvictLimits) {
  sluice::testing::RedisServer lru({.extra_args = {"--maxmemory-policy", "allkeys-lru"}});
  Sluiced s(config_.path(), lru.url(), Flags());
  json detail;
  int status = 0;
  for (int i = 0; i < 100 && !detail.contains("memory_policy"); ++i) {
    HttpReply r = Call(s.http_port(), "GET", "/readyz?strict");
    status = r.status;
    detail = json::parse(r.body);
    if (!detail.contains("memory_policy"))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200) << detail;
  EXPECT_EQ(detail["status"], "ready") << detail;
  EXPECT_EQ(detail["memory_policy"], "allkeys-lru") << detail;
  EXPECT_EQ(detail["evicted_keys"], 0) << detail;
  EXPECT_NE(detail.value("warning", "").find("can evict sluice's keys"), std::string::npos)
      << detail;
  // noeviction (the fixture's default): named, no warning.
  Sluiced plain(config_.path(), redis_.url(), Flags());
  json quiet;
  for (int i = 0; i < 100 && !quiet.contains("memory_policy"); ++i) {
    quiet = json::parse(Call(plain.http_port(), "GET", "/readyz").body);
    if (!quiet.contains("memory_policy"))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(quiet["memory_policy"], "noeviction") << quiet;
  EXPECT_FALSE(quiet.contains("warning")) << quiet;
}

TEST_F(E2e, LocalPolicyAndLeasesWhileRedisIsDown) {
  // failure_mode: local answers from sluiced's own store with the limit divided by
  // local_servers (here 2 of 4 per minute: 2 admitted, then 429, source local_fallback);
  // leases: a closed cap refuses with 503, an open one grants a lease no store holds,
  // and a lease granted before Redis went away is released without an error surfacing.
  config_.Write("loc.yaml",
                "domain: loc\ndescriptors:\n"
                "  - key: user\n    failure_mode: local\n    local_servers: 2\n"
                "    rate_limit: {name: per_user, unit: minute, requests_per_unit: 4}\n"
                "  - key: job\n    algorithm: concurrency\n    failure_mode: closed\n"
                "    rate_limit: {name: jobs, requests_per_unit: 1}\n"
                "  - key: task\n    algorithm: concurrency\n    failure_mode: open\n"
                "    rate_limit: {name: tasks, requests_per_unit: 1}\n");
  Sluiced s(config_.path(), redis_.url(), Flags());
  const int port = s.http_port();
  const std::string user = Check({{{"user", "u1"}}}, 0, "loc");
  const std::string job = R"({"domain":"loc","entries":[{"key":"job","value":"j1"}]})";
  const std::string task = R"({"domain":"loc","entries":[{"key":"task","value":"t1"}]})";
  HttpReply held = Call(port, "POST", "/v1/leases", job);
  ASSERT_EQ(held.status, 201) << held.body;
  const std::string handle = json::parse(held.body)["lease"];
  redis_.Kill();
  for (int i = 0; i < 2; ++i) {
    HttpReply r = Call(port, "POST", "/v1/check", user);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["descriptors"][0]["source"], "local_fallback");
  }
  HttpReply over = Call(port, "POST", "/v1/check", user);
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(json::parse(over.body)["descriptors"][0]["source"], "local_fallback");
  EXPECT_FALSE(over.header("retry-after").empty());
  HttpReply refused = Call(port, "POST", "/v1/leases",
                           R"({"domain":"loc","entries":[{"key":"job","value":"j2"}]})");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_FALSE(refused.header("retry-after").empty());
  HttpReply granted = Call(port, "POST", "/v1/leases", task);
  EXPECT_EQ(granted.status, 201) << granted.body;
  // The lease granted while Redis was up: its release is taken (202) and sent again by
  // sluiced until it lands, the caller answered at once.
  HttpReply pending = Call(port, "DELETE", "/v1/leases/" + handle);
  EXPECT_EQ(pending.status, 202) << pending.body;
  // A lease the open policy granted is in no store: heartbeats and its release succeed.
  const std::string task_handle = json::parse(granted.body)["lease"];
  EXPECT_EQ(Call(port, "POST", "/v1/leases/" + task_handle + "/heartbeat").status, 200);
  EXPECT_EQ(Call(port, "DELETE", "/v1/leases/" + task_handle).status, 204);
  redis_.Start();
  // Back: the store decides again, and j1's slot is free (the retried release, or the
  // restart's empty data).
  HttpReply again;
  for (int i = 0; i < 100 && again.status != 201; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    again = Call(port, "POST", "/v1/leases", job);
  }
  EXPECT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(json::parse(again.body)["source"], "store") << again.body;
}

TEST_F(E2e, StartsAndServesWhenRedisIsDown) {
  {
    redis_.Kill();
    Sluiced s(config_.path(), redis_.url(), Flags());
    ASSERT_TRUE(s.running());
    EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("g")).status, 503);
    EXPECT_EQ(json::parse(Call(s.http_port(), "GET", "/readyz").body)["status"], "degraded");
    redis_.Start();
    int status = 0;
    for (int i = 0; i < 100 && status != 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      status = Call(s.http_port(), "POST", "/v1/check", SignIn("g")).status;
    }
    EXPECT_EQ(status, 200);
  }
}

TEST_F(E2e, MemoryStoreAndEnvironmentVariables) {
  ::setenv("SLUICED_ADMIN_TOKEN", "from-env", 1);
  Sluiced s(config_.path(), "memory://", {"--deadline-ms", "200"});
  ::unsetenv("SLUICED_ADMIN_TOKEN");
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", SignIn("h")).status, 200);
  EXPECT_EQ(Call(s.admin_port(), "GET", "/admin/breaker", "", "Authorization: Bearer from-env\r\n")
                .status,
            200);
}

// `colocate: true` on a Redis Cluster: a tenant's limit and its users' limits sit in the
// tenant's slot, so the two limits of one request are one script there (a composite
// whose keys share a slot), and every key keeps its expiry.
// CPU time (user + system, clock ticks) a process has used so far.
long CpuTicks(pid_t pid) {
  const std::string stat = testing::ReadAll("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

// Out of descriptors, a listener must not spin: the pending connection stays in the
// backlog and the listening socket stays readable, so an accept retried at once fails at
// once for as long as the shortage lasts (accept_backoff.h). Shown to fail with the
// retry made immediate: sluiced then burns ~2 cores (both listeners' threads spinning).
// Not run under the sanitizers (Makefile: SANITIZED_TESTS): their runtime needs a free
// descriptor of its own (UBSan's vptr check probes memory through a pipe).
TEST_F(E2e, ListenersBackOffWhenOutOfDescriptorsAndRecover) {
  Sluiced s(config_.path(), "memory://", Flags());
  ASSERT_TRUE(s.running());
  const pid_t pid = s.pid();
  std::size_t open_fds = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    ++open_fds;
  rlimit old{};
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, nullptr, &old), 0);
  // Room for one more connection (and one spare for whatever sluiced opens meanwhile).
  rlimit tight = old;
  tight.rlim_cur = open_fds + 2;
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, &tight, nullptr), 0);
  std::vector<std::unique_ptr<Connection>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<Connection>(s.http_port()));
    ASSERT_TRUE(held.back()->Send(testing::Request("GET", "/healthz")));
  }
  // Connected by the kernel (the backlog), not accepted by sluiced.
  std::vector<std::unique_ptr<Connection>> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(std::make_unique<Connection>(s.http_port()));
    waiting.push_back(std::make_unique<Connection>(s.grpc_port()));
    ASSERT_TRUE(waiting.back()->connected());
  }
  ASSERT_TRUE(waiting.front()->Send(testing::Request("GET", "/healthz")));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline &&
         (s.log().find("http listener: accept failed") == std::string::npos ||
          s.log().find("grpc listener: accept failed") == std::string::npos))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(s.log().find("http listener: accept failed"), std::string::npos) << s.log();
  ASSERT_NE(s.log().find("grpc listener: accept failed"), std::string::npos) << s.log();
  // A busy loop would use about one second of CPU per second per listener; backing off
  // uses next to nothing. The bound is far from both.
  const long before = CpuTicks(pid);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const long used = CpuTicks(pid) - before;
  EXPECT_LT(used, ::sysconf(_SC_CLK_TCK) * 3 / 10)
      << "sluiced used " << used << " ticks in 1 s while out of descriptors";
  // Descriptors back: the waiting connections are accepted and served; nothing was lost.
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, &old, nullptr), 0);
  held.clear();
  HttpReply late = waiting.front()->Read();
  EXPECT_EQ(late.status, 200) << s.log();
  EXPECT_EQ(Call(s.http_port(), "GET", "/healthz").status, 200);
  const auto again = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < again &&
         s.log().find("grpc listener: accepting again") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(s.log().find("http listener: accepting again"), std::string::npos) << s.log();
  EXPECT_NE(s.log().find("grpc listener: accepting again"), std::string::npos) << s.log();
}

TEST(E2eCluster, ColocatedLimitsOfATenantShareItsSlot) {
  sluice::testing::RedisCluster cluster;
  TempDir config;
  config.Write("co.yaml", R"(domain: co
descriptors:
  - key: tenant
    colocate: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: user
        colocate: true
        rate_limit: {unit: minute, requests_per_unit: 2}
)");
  Sluiced s(config.path(), cluster.url(), {"--deadline-ms", "500"});
  const std::vector<std::string> tenants = {"acme", "globex", "initech", "umbrella"};
  for (const std::string& t : tenants) {
    const std::string body = Check({{{"tenant", t}}, {{"tenant", t}, {"user", "u1"}}}, 0, "co");
    EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", body).status, 200) << t;
    EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", body).status, 200) << t;
    HttpReply refused = Call(s.http_port(), "POST", "/v1/check", body);
    EXPECT_EQ(refused.status, 429) << refused.body;
  }
  // A refused request spent nothing of the tenant's limit: 2 of 100 used.
  HttpReply tenant_only =
      Call(s.http_port(), "POST", "/v1/check", Check({{{"tenant", "acme"}}}, 0, "co"));
  EXPECT_EQ(json::parse(tenant_only.body)["descriptors"][0]["remaining"], 97);
  const std::vector<std::string> keys = cluster.Keys("sluice:*");
  EXPECT_EQ(keys.size(), 2 * tenants.size());
  std::set<uint16_t> slots;
  for (const auto& k : keys) slots.insert(cluster.KeySlot(k));
  // Two keys per tenant, one slot per tenant (fewer if two tenants share one).
  EXPECT_LE(slots.size(), tenants.size());
  EXPECT_EQ(cluster.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
}

// A Redis Cluster has a breaker per primary: one primary stalled opens its breaker only.
// /admin/breaker counts the primaries, names the open one by its address, and the ids of
// the other primaries are still decided by the store; once the primary is back, every
// breaker closes.
TEST(E2eCluster, AdminBreakerShowsEachPrimarysBreaker) {
  // A node timeout above the stall: the other primaries keep serving their slots (else
  // they refuse every slot, CLUSTERDOWN, once the stalled one is deemed failed).
  sluice::testing::RedisCluster cluster({.node_timeout_ms = 60000});
  TempDir config;
  config.Write("shop.yaml", ExampleConfig());
  Sluiced s(config.path(), cluster.url(), {"--admin-token", "s3cret", "--deadline-ms", "100"});
  std::vector<std::string> checks;
  for (int i = 0; i < 30; ++i)
    checks.push_back(Check({{{"route", "checkout"}, {"account", "a" + std::to_string(i)}}}));
  for (const std::string& c : checks)
    ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", c).status, 200);
  const json closed = BreakerOf(s);
  EXPECT_EQ(closed.value("breaker", json()), "closed") << closed;
  EXPECT_EQ(closed.value("domains", json()), 3) << closed;
  EXPECT_EQ(closed.value("open_domains", json()), 0) << closed;
  EXPECT_EQ(closed.value("open", json()), json::array()) << closed;

  sluice::testing::RedisServer& stalled = cluster.node(0);
  stalled.Pause();
  const json open = CheckUntilOpen(s, checks, 1);
  int by_store = 0;
  for (const std::string& c : checks) {
    HttpReply r = Call(s.http_port(), "POST", "/v1/check", c);
    if (r.status == 200 && json::parse(r.body)["descriptors"][0]["source"] == "store") ++by_store;
  }
  const std::string metrics = Call(s.metrics_port(), "GET", "/metrics").body;
  stalled.Resume();
  ASSERT_EQ(open.value("open_domains", 0), 1) << open;
  EXPECT_EQ(open.value("domains", json()), 3) << open;
  EXPECT_NE(open.value("breaker", json()), "closed") << open;
  EXPECT_EQ(open.value("open", json()),
            json::array({"127.0.0.1:" + std::to_string(stalled.port())}))
      << open;
  EXPECT_EQ(open.value("store", json()), cluster.url()) << open;
  EXPECT_GT(by_store, 0) << "the ids of the healthy primaries are decided by the store";
  EXPECT_NE(metrics.find("\nsluice_breaker_domains 3\n"), std::string::npos) << metrics;

  json after;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    for (const std::string& c : checks) Call(s.http_port(), "POST", "/v1/check", c);
    after = BreakerOf(s);
    if (after.value("open_domains", -1) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(after.value("breaker", json()), "closed") << after;
  EXPECT_EQ(after.value("open", json()), json::array()) << after;
  EXPECT_EQ(after.value("domains", json()), 3) << after;
}

}  // namespace
}  // namespace sluiced

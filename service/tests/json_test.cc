#include "service/json_api.h"

#include <gtest/gtest.h>

namespace sluiced::json_test {
namespace {

TEST(Json, CheckRequest) {
  auto r = ParseCheckRequest(R"({"domain":"shop","hits":3,"descriptors":[
      {"entries":[{"key":"route","value":"sign_in"},{"key":"account","value":"a"}]},
      {"entries":[{"key":"k"}],"hits":0}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->domain, "shop");
  EXPECT_EQ(r->hits, 3u);
  ASSERT_EQ(r->descriptors.size(), 2u);
  EXPECT_EQ(r->descriptors[0].entries[1], (std::pair<std::string, std::string>{"account", "a"}));
  EXPECT_FALSE(r->descriptors[0].hits.has_value());
  EXPECT_EQ(r->descriptors[1].hits, 0u);
  EXPECT_EQ(r->descriptors[1].entries[0].second, "");
}

// An explicit top-level "hits": 0 on /v1/check is a peek of every descriptor that has no
// hits of its own (both parsers); envoy-ratelimit's hitsAddend 0 on /json is proto3's
// default, a hit of 1.
TEST(Json, TopLevelHitsZeroPeeks) {
  const std::string body =
      R"({"domain":"shop","hits":0,"descriptors":[{"entries":[{"key":"k","value":"v"}]},{"entries":[{"key":"k"}],"hits":2}]})";
  for (const auto& r : {ParseCheckRequest(body), ParseCheckRequestTree(body)}) {
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->descriptors.size(), 2u);
    EXPECT_EQ(r->descriptors[0].hits, std::optional<uint64_t>(0));
    EXPECT_EQ(r->descriptors[1].hits, std::optional<uint64_t>(2));
  }
  CheckRequest fast;
  ASSERT_TRUE(FastParseCheckRequest(body, fast));
  EXPECT_EQ(fast.descriptors[0].hits, std::optional<uint64_t>(0));
  auto absent = ParseCheckRequest(R"({"domain":"shop","descriptors":[{"entries":[{"key":"k"}]}]})");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->descriptors[0].hits.has_value());
  auto envoy = ParseEnvoyJsonRequest(
      R"({"domain":"shop","hitsAddend":0,"descriptors":[{"entries":[{"key":"k"}]}]})");
  ASSERT_TRUE(envoy.ok());
  EXPECT_FALSE(envoy->descriptors[0].hits.has_value());
}

TEST(Json, EnvoyJsonRequestUsesProto3Names) {
  auto r = ParseEnvoyJsonRequest(R"({"domain":"d","hitsAddend":2,"descriptors":[
      {"entries":[{"key":"k","value":"v"}],"hitsAddend":"7","limit":{"requestsPerUnit":9,"unit":"HOUR"}}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->hits, 2u);
  EXPECT_EQ(r->descriptors[0].hits, 7u);
  ASSERT_TRUE(r->descriptors[0].limit.has_value());
  EXPECT_EQ(r->descriptors[0].limit->requests_per_unit, 9);
  EXPECT_EQ(r->descriptors[0].limit->unit, Unit::kHour);
}

std::string ErrorOf(std::string_view body) {
  auto r = ParseCheckRequest(body);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? "" : r.status().message();
}

TEST(Json, ClearErrors) {
  EXPECT_EQ(
      ErrorOf("{"),
      "malformed JSON: [json.exception.parse_error.101] parse error at line 1, column 2: "
      "syntax error while parsing object key - unexpected end of input; expected string literal");
  EXPECT_EQ(ErrorOf("[]"), "the body must be a JSON object");
  EXPECT_EQ(ErrorOf(R"({"descriptors":[]})"), "missing domain");
  EXPECT_EQ(ErrorOf(R"({"domain":7,"descriptors":[]})"), "domain must be a string");
  EXPECT_EQ(ErrorOf(R"({"domain":"d"})"), "missing descriptors");
  EXPECT_EQ(ErrorOf(R"({"domain":"d","descriptors":[{}]})"), "a descriptor has no entries");
  EXPECT_EQ(ErrorOf(R"({"domain":"d","descriptors":[{"entries":[]}]})"),
            "a descriptor needs at least one entry");
  EXPECT_EQ(ErrorOf(R"({"domain":"d","descriptors":[{"entries":[{"value":"v"}]}]})"),
            "an entry has no key");
  EXPECT_EQ(ErrorOf(R"({"domain":"d","hits":-1,"descriptors":[]})"), "hits must not be negative");
  EXPECT_EQ(ErrorOf(R"({"domain":"d","hits":1e99,"descriptors":[]})"),
            "hits must be a whole number");
  EXPECT_EQ(ErrorOf(R"({"domain":"d","hits":4294967296,"descriptors":[]})"),
            "hits must be at most 4294967295");
  const std::string huge(2000, 'x');
  EXPECT_EQ(ErrorOf(R"({"domain":"d","descriptors":[{"entries":[{"key":"k","value":")" + huge +
                    R"("}]}]})"),
            "an entry's value is longer than 1024 bytes");
  std::string many = R"({"domain":"d","descriptors":[)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + R"({"entries":[{"key":"k"}]})";
  EXPECT_EQ(ErrorOf(many + "]}"), "at most 64 descriptors per request");
}

TEST(Json, RateLimitHeadersFollowTheDraft) {
  auto rule = std::make_shared<Rule>();
  rule->name = "login";
  rule->unit = Unit::kMinute;
  rule->requests_per_unit = 5;
  CheckResult result;
  result.overall = Code::kOverLimit;
  result.headline = 0;
  DescriptorResult s;
  s.code = Code::kOverLimit;
  s.rule = rule;
  s.limit = 5;
  s.unit = Unit::kMinute;
  sluice::Decision d;
  d.allowed = false;
  d.limit = 5;
  d.remaining = 0;
  d.reset_after = std::chrono::milliseconds(16001);
  d.retry_after = std::chrono::milliseconds(16001);
  s.decision = d;
  result.statuses.push_back(s);
  auto headers = RateLimitHeaders(result);
  ASSERT_EQ(headers.size(), 3u);
  EXPECT_EQ(headers[0],
            (std::pair<std::string, std::string>{"RateLimit-Policy", "\"login\";q=5;w=60"}));
  EXPECT_EQ(headers[1], (std::pair<std::string, std::string>{"RateLimit", "\"login\";r=0;t=17"}));
  EXPECT_EQ(headers[2], (std::pair<std::string, std::string>{"Retry-After", "17"}));
  EXPECT_EQ(
      FormatEnvoyJsonResponse(result),
      R"({"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"login","requestsPerUnit":5,"unit":"MINUTE"},"durationUntilReset":"17s","limitRemaining":0}]})");
}

bool SameRequest(const CheckRequest& a, const CheckRequest& b) {
  if (a.domain != b.domain || a.hits != b.hits || a.descriptors.size() != b.descriptors.size())
    return false;
  for (std::size_t i = 0; i < a.descriptors.size(); ++i) {
    const auto& x = a.descriptors[i];
    const auto& y = b.descriptors[i];
    if (x.entries != y.entries || x.hits != y.hits || x.limit.has_value() != y.limit.has_value())
      return false;
  }
  return true;
}

// The hot request shape is parsed without a JSON tree, with the general parser's
// results; whatever else it sees it declines (and the general parser answers).
TEST(Json, FastParserAgreesWithTheGeneralOneOrDeclines) {
  const std::vector<std::string> taken = {
      R"({"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u42"}]}]})",
      R"( { "descriptors" : [ { "hits" : 0 , "entries" : [ {"value":"v","key":"k"}, {"key":"x"} ] } ,
          {"entries":[{"key":"a","value":""}],"hits":1099511627776} ] , "hits" : 4294967295 ,
          "domain" : "d" } )",
      R"({"domain":"d","descriptors":[]})"};
  for (const auto& body : taken) {
    CheckRequest fast;
    ASSERT_TRUE(FastParseCheckRequest(body, fast)) << body;
    auto tree = ParseCheckRequestTree(body);
    ASSERT_TRUE(tree.ok()) << tree.status().message();
    EXPECT_TRUE(SameRequest(fast, *tree)) << body;
  }
  const std::vector<std::string> declined = {
      R"({"domain":"d","descriptors":[],"extra":1})",
      R"({"domain":"d","domain":"e","descriptors":[]})",
      R"({"domain":"d\u0041","descriptors":[]})",
      R"({"domain":"d","hits":"3","descriptors":[]})",
      R"({"domain":"d","hits":01,"descriptors":[]})",
      R"({"domain":"d","hits":1.0,"descriptors":[]})",
      R"({"domain":"d","hits":4294967296,"descriptors":[]})",
      R"({"domain":"d","hits_addend":2,"descriptors":[]})",
      R"({"domain":"","descriptors":[]})",
      R"({"domain":"d","descriptors":[{"entries":[]}]})",
      R"({"domain":"d","descriptors":[{"entries":[{"key":""}]}]})",
      R"({"domain":"d","descriptors":[{"entries":[{"key":"k","value":null}]}]})",
      R"({"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"unit":"SECOND"}}]})",
      R"({"domain":"d","descriptors":[]} x)",
      R"({"domain":"d","descriptors":[]},)",
      R"({"domain":"d","descriptors":[{"entries":[{"key":"k"}]},]})",
      "{\"domain\":\"d\xc3\xa9\",\"descriptors\":[]}",
      "[]",
      "{"};
  for (const auto& body : declined) {
    CheckRequest fast;
    EXPECT_FALSE(FastParseCheckRequest(body, fast)) << body;
  }
}

// "hits" (and a descriptor's) may be a JSON string of decimal digits, as proto3's JSON
// writes 64-bit integers: "5" is 5. Only digits (no sign, space, exponent or fraction),
// at most 19 of them, and the same bounds as a number.
TEST(Json, HitsAsAStringOfDigitsIsTheNumberAndNothingElseIs) {
  // What the server calls (the fast reader declines strings, the tree parser takes them).
  auto parsed = ParseCheckRequest(
      R"({"domain":"d","hits":"5","descriptors":[{"entries":[{"key":"k"}],"hits":"7"}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->hits, 5u);
  ASSERT_EQ(parsed->descriptors.size(), 1u);
  EXPECT_EQ(parsed->descriptors[0].hits, 7u);
  for (const char* hits : {R"("")", R"(" 5")", R"("+5")", R"("-5")", R"("5.0")", R"("5e0")",
                           R"("0x5")", R"("4294967296")", R"("12345678901234567890")"}) {
    const std::string body =
        std::string(R"({"domain":"d","hits":)") + hits + R"(,"descriptors":[]})";
    auto refused = ParseCheckRequest(body);
    EXPECT_FALSE(refused.ok()) << body;
    if (!refused.ok()) {
      EXPECT_NE(refused.status().message().find("hits"), std::string::npos) << body;
    }
  }
}

// The response body is written without a JSON tree, byte for byte as the tree's dump.
TEST(Json, FastFormatterMatchesTheTreeByteForByte) {
  auto rule = std::make_shared<Rule>();
  rule->name = "per \"user\"\n\xff";
  rule->unit = Unit::kMinute;
  rule->requests_per_unit = 5;
  rule->shadow_mode = true;
  auto unnamed = std::make_shared<Rule>();
  unnamed->path = "shop.user";
  unnamed->kind = RuleKind::kGcra;
  for (int variant = 0; variant < 4; ++variant) {
    CheckResult result;
    result.overall = variant == 1   ? Code::kOverLimit
                     : variant == 2 ? Code::kUnavailable
                                    : Code::kOk;
    DescriptorResult a;
    a.code = result.overall;
    a.rule = variant % 2 ? rule : unnamed;
    a.limit = 5 + variant;
    a.unit = Unit::kHour;
    sluice::Decision d;
    d.allowed = variant != 1;
    d.remaining = variant * 1000000007LL;
    d.reset_after = std::chrono::milliseconds(16001);
    d.retry_after = std::chrono::milliseconds(variant);
    d.source = static_cast<sluice::DecisionSource>(variant);
    d.shadow_refused = variant == 3;
    d.store_failure = static_cast<sluice::StoreFailure>(variant);  // kNone for variant 0
    if (variant != 2) a.decision = d;
    if (variant == 2) a.error = "store: \"down\"";
    DescriptorResult none;  // no rule matched
    result.statuses = {a, none};
    EXPECT_EQ(FormatCheckResponse(result), FormatCheckResponseTree(result)) << variant;
  }
  EXPECT_EQ(FormatCheckResponse(CheckResult{}), FormatCheckResponseTree(CheckResult{}));
}

}  // namespace
}  // namespace sluiced::json_test

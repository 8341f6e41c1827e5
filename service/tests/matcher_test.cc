#include "service/matcher.h"

#include <gtest/gtest.h>

namespace sluiced {
namespace {

std::shared_ptr<const Config> Load(const std::string& yaml) {
  auto c = BuildConfig({{"m.yaml", yaml}});
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : nullptr;
}

const char* kTree = R"(domain: d
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {name: sub_any, unit: second, requests_per_unit: 10}
      - key: subkey1
        value: exact
        rate_limit: {name: sub_exact, unit: second, requests_per_unit: 20}
  - key: key1
    rate_limit: {name: key1_any, unit: minute, requests_per_unit: 5}
  - key: path
    value: /api/v1*
    rate_limit: {name: api_v1, unit: second, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {name: api, unit: second, requests_per_unit: 4}
  - key: path
    rate_limit: {name: path_any, unit: second, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {name: banned, unit: second, requests_per_unit: 0}
  - key: vip
    rate_limit: {name: vip, unit: second, requests_per_unit: 100, replaces: [{name: banned}]}
)";

std::string RuleName(const Config& c, const Entries& e) {
  const Match m = MatchDescriptor(*c.FindDomain("d"), e);
  return m.rule ? m.rule->DisplayName() : "<none>";
}

TEST(Matcher, MostSpecificFirst) {
  auto c = Load(kTree);
  ASSERT_TRUE(c);
  EXPECT_EQ(RuleName(*c, {{"key1", "value1"}, {"subkey1", "exact"}}), "sub_exact");
  EXPECT_EQ(RuleName(*c, {{"key1", "value1"}, {"subkey1", "other"}}), "sub_any");
  EXPECT_EQ(RuleName(*c, {{"key1", "zzz"}}), "key1_any");
  // key1_value1 has no limit of its own: a one-entry descriptor is not limited.
  EXPECT_EQ(RuleName(*c, {{"key1", "value1"}}), "<none>");
  // Deeper than the tree: no limit (envoy-ratelimit's depth rule).
  EXPECT_EQ(RuleName(*c, {{"key1", "zzz"}, {"subkey1", "exact"}}), "<none>");
  EXPECT_EQ(RuleName(*c, {{"key1", "value1"}, {"subkey1", "exact"}, {"x", "y"}}), "<none>");
  EXPECT_EQ(RuleName(*c, {{"unknown", "v"}}), "<none>");
}

TEST(Matcher, WildcardPrefixInConfigOrderThenBareKey) {
  auto c = Load(kTree);
  ASSERT_TRUE(c);
  EXPECT_EQ(RuleName(*c, {{"path", "/api/v1/users"}}), "api_v1");
  EXPECT_EQ(RuleName(*c, {{"path", "/api/v2"}}), "api");
  EXPECT_EQ(RuleName(*c, {{"path", "/api/"}}), "api");  // an empty rest matches
  EXPECT_EQ(RuleName(*c, {{"path", "/other"}}), "path_any");
}

TEST(Matcher, IdIsPerDistinctValueAndUnambiguous) {
  auto c = Load(kTree);
  const auto& d = *c->FindDomain("d");
  const Match a = MatchDescriptor(d, {{"key1", "alice"}});
  const Match b = MatchDescriptor(d, {{"key1", "bob"}});
  EXPECT_EQ(a.rule, b.rule);
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(a.id, "key1=alice");
  EXPECT_EQ(DescriptorId({{"a", "b,c=d"}}), "a=b\\,c\\=d");
  EXPECT_NE(DescriptorId({{"a", "b"}, {"c", "d"}}), DescriptorId({{"a", "b,c=d"}}));
}

TEST(Matcher, ReplacesDropsTheNamedLimit) {
  auto c = Load(kTree);
  const auto& d = *c->FindDomain("d");
  std::vector<Match> matches = {MatchDescriptor(d, {{"banned", "x"}}),
                                MatchDescriptor(d, {{"vip", "x"}})};
  ASSERT_TRUE(matches[0].rule && matches[1].rule);
  ApplyReplaces(matches);
  EXPECT_EQ(matches[0].rule, nullptr);
  ASSERT_NE(matches[1].rule, nullptr);
  EXPECT_EQ(matches[1].rule->name, "vip");
  std::vector<Match> alone = {MatchDescriptor(d, {{"banned", "x"}})};
  ApplyReplaces(alone);
  EXPECT_NE(alone[0].rule, nullptr);
}

}  // namespace
}  // namespace sluiced

namespace sluiced {
namespace {

TEST(Matcher, WildcardsAnywhereInAValue) {
  auto c = Load(R"(domain: w
descriptors:
  - key: path
    value: foo*bar
    rate_limit: {name: foo_bar, unit: second, requests_per_unit: 1}
  - key: path
    value: "*.png"
    rate_limit: {name: png, unit: second, requests_per_unit: 2}
  - key: path
    value: a*b*c
    rate_limit: {name: abc, unit: second, requests_per_unit: 3}
  - key: path
    rate_limit: {name: any, unit: second, requests_per_unit: 4}
)");
  ASSERT_NE(c, nullptr);
  const DomainConfig& d = c->domains[0];
  auto name = [&](const std::string& v) {
    Match m = MatchDescriptor(d, {{"path", v}});
    return m.rule ? m.rule->DisplayName() : std::string("(none)");
  };
  EXPECT_EQ(name("foobar"), "foo_bar");
  EXPECT_EQ(name("foo-x-bar"), "foo_bar");
  EXPECT_EQ(name("foo-x-ba"), "any");
  EXPECT_EQ(name("xfoobar"), "any");
  EXPECT_EQ(name("cat.png"), "png");
  EXPECT_EQ(name(".png"), "png");
  EXPECT_EQ(name("abc"), "abc");
  EXPECT_EQ(name("a-b-c"), "abc");
  EXPECT_EQ(name("a-c-b"), "any");
  EXPECT_EQ(name("abcb"), "any");  // must end with the last literal part
  EXPECT_EQ(name("foo*bar"), "foo_bar");
}

TEST(Matcher, AnEmptyValueIsABareKey) {
  auto c = Load(R"(domain: e
descriptors:
  - key: user
    value: ""
    rate_limit: {name: per_user, unit: second, requests_per_unit: 1}
)");
  ASSERT_NE(c, nullptr);
  Match m = MatchDescriptor(c->domains[0], {{"user", "alice"}});
  ASSERT_TRUE(m.rule);
  EXPECT_EQ(m.rule->DisplayName(), "per_user");
  EXPECT_EQ(m.id, "user=alice");
  // The same node as a bare key: two of them at one level are duplicates.
  auto dup = BuildConfig({{"dup.yaml", R"(domain: e
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    value: ""
    rate_limit: {unit: second, requests_per_unit: 2}
)"}});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("duplicate descriptor 'user'"), std::string::npos)
      << dup.status().message();
}

TEST(Matcher, NewerEnvoyRatelimitKeysAreRefusedByName) {
  for (const char* key : {"quota_mode", "value_to_metric", "metadata", "share_threshold"}) {
    SCOPED_TRACE(key);
    auto c = BuildConfig({{"k.yaml", std::string(R"(domain: k
descriptors:
  - key: path
    value: a*
    )") + key + R"(: true
    rate_limit: {unit: second, requests_per_unit: 1}
)"}});
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find(std::string(key) + " is not supported by sluiced"),
              std::string::npos)
        << c.status().message();
    EXPECT_EQ(c.status().message().rfind("k.yaml:5:5: ", 0), 0u) << c.status().message();
  }
}

}  // namespace
}  // namespace sluiced

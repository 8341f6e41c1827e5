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

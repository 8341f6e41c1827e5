#include "service/config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace sluiced {
namespace {

sluice::StatusOr<std::shared_ptr<const Config>> Build(const std::string& yaml,
                                                      const std::string& file = "t.yaml") {
  return BuildConfig({{file, yaml}});
}

// The error of a config that must be refused.
std::string ErrorOf(const std::string& yaml) {
  auto c = BuildConfig({{"bad.yaml", yaml}});
  EXPECT_FALSE(c.ok()) << yaml;
  return c.ok() ? "" : c.status().message();
}

const char* kEnvoyStyle = R"(domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: remote_address
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 10
    shadow_mode: true
    detailed_metric: true
  - key: to_number
    value: "4045551212"
    descriptors:
      - key: from_number
        rate_limit:
          unit: day
          requests_per_unit: 0
  - key: path
    value: /api/*
    rate_limit:
      unlimited: true
  - key: banned
    rate_limit:
      name: banned_limit
      unit: hour
      requests_per_unit: 1
  - key: user
    rate_limit:
      unit: year
      requests_per_unit: 5
      replaces:
        - name: banned_limit
)";

TEST(Config, AcceptsEnvoyRatelimitFormatUnchanged) {
  auto c = Build(kEnvoyStyle);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const Config& config = **c;
  ASSERT_EQ(config.domains.size(), 1u);
  EXPECT_EQ(config.domains[0].domain, "mongo_cps");
  ASSERT_EQ(config.rules.size(), 7u);
  const Rule& users = *config.rules[0];
  EXPECT_EQ(users.unit, Unit::kSecond);
  EXPECT_EQ(users.requests_per_unit, 500);
  EXPECT_EQ(users.kind, RuleKind::kFixedWindow);
  EXPECT_TRUE(users.ToLimit().aligned);  // envoy-ratelimit's windows are aligned
  EXPECT_EQ(users.ToLimit().window, std::chrono::seconds(1));
  EXPECT_EQ(users.limiter_name, "mongo_cps.database_users");
  const Rule& per_ip = *config.rules[2];
  EXPECT_EQ(per_ip.name, "per_ip");
  EXPECT_TRUE(per_ip.shadow_mode);
  EXPECT_TRUE(per_ip.detailed_metric);
  EXPECT_EQ(per_ip.DisplayName(), "per_ip");
  EXPECT_EQ(config.rules[3]->requests_per_unit, 0);
  EXPECT_EQ(config.rules[3]->path, "mongo_cps/to_number_4045551212/from_number");
  // An unnamed rule is shown (answers, headers, metrics' `limit`) by its limiter name, the
  // spelling of the admin API and the CLI.
  EXPECT_EQ(config.rules[3]->limiter_name, "mongo_cps.to_number_4045551212.from_number");
  EXPECT_EQ(config.rules[3]->DisplayName(), "mongo_cps.to_number_4045551212.from_number");
  EXPECT_TRUE(config.rules[4]->unlimited);
  EXPECT_EQ(config.rules[6]->replaces, std::vector<std::string>{"banned_limit"});
  EXPECT_EQ(config.rules[6]->unit, Unit::kYear);
  // The wildcard and the path-like value make a name that is hashed, still valid.
  EXPECT_LE(config.rules[4]->limiter_name.size(), 64u);
  EXPECT_EQ(config.rules[4]->limiter_name.find('/'), std::string::npos);
  const auto& path_node = config.domains[0].descriptors[4];
  EXPECT_TRUE(path_node.wildcard);
}

TEST(Config, SluiceExtensions) {
  auto c = Build(R"(domain: ext
descriptors:
  - key: a
    algorithm: token_bucket
    burst: 20
    failure_mode: local
    local_servers: 4
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: b
    algorithm: gcra
    failure_mode: closed
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: c
    algorithm: sliding_log
    failure_mode: open
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: d
    algorithm: sliding_window
    rate_limit: {unit: week, requests_per_unit: 9}
  - key: e
    algorithm: concurrency
    lease_ttl: 1500ms
    max_waiters: 7
    rate_limit: {requests_per_unit: 3}
  - key: f
    algorithm: fixed_window
    colocate: true
    rate_limit: {unit: month, requests_per_unit: 1}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const auto& r = (*c)->rules;
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(r[0]->kind, RuleKind::kTokenBucket);
  EXPECT_EQ(r[0]->ToLimit().limit, 20);
  EXPECT_EQ(r[0]->ToLimit().refill, 5);
  EXPECT_EQ(r[0]->failure_mode, sluice::FailurePolicy::kLocal);
  EXPECT_EQ(r[0]->local_servers, 4);
  EXPECT_EQ(r[1]->ToLimit().algorithm, sluice::Algorithm::kGcra);
  EXPECT_EQ(r[1]->ToLimit().limit, 60);  // no burst: the rate
  EXPECT_EQ(r[1]->failure_mode, sluice::FailurePolicy::kClosed);
  EXPECT_EQ(r[2]->ToLimit().algorithm, sluice::Algorithm::kSlidingLog);
  EXPECT_EQ(r[2]->failure_mode, sluice::FailurePolicy::kOpen);
  EXPECT_EQ(r[3]->ToLimit().window, std::chrono::hours(24 * 7));
  EXPECT_EQ(r[4]->kind, RuleKind::kConcurrency);
  EXPECT_EQ(r[4]->lease_ttl, std::chrono::milliseconds(1500));
  EXPECT_EQ(r[4]->max_waiters, 7);
  EXPECT_EQ(r[1]->max_waiters, sluice::ConcurrencyOptions{}.max_waiters);
  EXPECT_EQ(r[5]->ToLimit().window, std::chrono::hours(24 * 30));
  EXPECT_EQ(r[0]->failure_mode == sluice::FailurePolicy::kDefault, false);
  EXPECT_EQ(r[3]->failure_mode, sluice::FailurePolicy::kDefault);
  EXPECT_TRUE(r[5]->colocate);
  EXPECT_FALSE(r[0]->colocate);
}

// debit_entry: the key of the entry that marks a request as a debit of the limit; for
// rate limits, not for concurrency limits.
TEST(Config, DebitEntry) {
  auto c = Build(R"(domain: ai
descriptors:
  - key: account
    rate_limit: {unit: minute, requests_per_unit: 10000}
    debit_entry: stream_done
  - key: user
    algorithm: gcra
    debit_entry: done
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 10}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*c)->rules[0]->debit_entry, "stream_done");
  EXPECT_EQ((*c)->rules[1]->debit_entry, "done");
  EXPECT_EQ((*c)->rules[2]->debit_entry, "");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    algorithm: concurrency\n    "
                    "debit_entry: done\n    rate_limit: {requests_per_unit: 3}\n"),
            "bad.yaml:5:18: debit_entry applies to rate limits, not to algorithm: concurrency");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    debit_entry: \"\"\n    "
                    "rate_limit: {unit: second, requests_per_unit: 3}\n"),
            "bad.yaml:4:18: debit_entry must not be empty");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    debit_entry: done\n"),
            "bad.yaml:4:18: debit_entry needs a rate_limit on the same descriptor");
}

// block_duration: how long an id refused over the rule's limit stays refused; for rate
// limits, not for concurrency limits.
TEST(Config, BlockDuration) {
  auto c = Build(R"(domain: auth
descriptors:
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 5}
    block_duration: 15m
  - key: otp
    algorithm: gcra
    block_duration: 500ms
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: page
    rate_limit: {unit: second, requests_per_unit: 10}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*c)->rules[0]->block_duration, std::chrono::minutes(15));
  EXPECT_EQ((*c)->rules[1]->block_duration, std::chrono::milliseconds(500));
  EXPECT_EQ((*c)->rules[2]->block_duration, std::chrono::milliseconds(0));
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    algorithm: concurrency\n    "
                    "block_duration: 1m\n    rate_limit: {requests_per_unit: 3}\n"),
            "bad.yaml:5:21: block_duration applies to rate limits, not to algorithm: concurrency");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    block_duration: soon\n    "
                    "rate_limit: {unit: second, requests_per_unit: 3}\n"),
            "bad.yaml:4:21: block_duration must be a duration such as 500ms, 30s, 2m or 1h");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    block_duration: 0s\n    "
                    "rate_limit: {unit: second, requests_per_unit: 3}\n"),
            "bad.yaml:4:21: block_duration must be between 1ms and 366 days");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    block_duration: 9000h\n    "
                    "rate_limit: {unit: second, requests_per_unit: 3}\n"),
            "bad.yaml:4:21: block_duration must be between 1ms and 366 days");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    block_duration: 1m\n"),
            "bad.yaml:4:21: block_duration needs a rate_limit on the same descriptor");
}

TEST(Config, ErrorsNameFileLineColumnAndWhatIsWrong) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n "
                    "     requests_per_unit: 1\n"),
            "bad.yaml:5:13: unknown unit 'fortnight' (expected second, minute, hour, day, week, "
            "month or year)");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n    "
                    "  requests_per_unit: -3\n"),
            "bad.yaml:6:26: requests_per_unit must be a whole number between 0 and 1099511627776");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    rate_limt:\n      unit: second\n"),
            "bad.yaml:4:5: unknown key 'rate_limt' in descriptor (expected one of: key, value, "
            "rate_limit, "
            "descriptors, shadow_mode, detailed_metric, algorithm, burst, lease_ttl, max_waiters, "
            "failure_mode, local_servers, colocate, debit_entry, block_duration)");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - value: x\n"),
            "bad.yaml:3:5: descriptor needs a key");
  EXPECT_EQ(ErrorOf("descriptors: []\n"), "bad.yaml:1:1: missing domain");
  EXPECT_EQ(
      ErrorOf("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 3}\n"),
      "bad.yaml:4:17: rate_limit needs a unit (or unlimited: true)");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    algorithm: leaky\n    rate_limit: "
                    "{unit: second, requests_per_unit: 3}\n"),
            "bad.yaml:4:16: unknown algorithm 'leaky' (expected fixed_window, sliding_window, "
            "sliding_log, token_bucket, gcra or concurrency)");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    burst: 5\n    rate_limit: {unit: "
                    "second, requests_per_unit: 3}\n"),
            "bad.yaml:4:12: burst applies to algorithm token_bucket or gcra only");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    failure_mode: maybe\n    rate_limit: "
                    "{unit: second, requests_per_unit: 3}\n"),
            "bad.yaml:4:19: unknown failure_mode 'maybe' (expected open, closed or local)");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    algorithm: concurrency\n    "
                    "lease_ttl: soon\n    rate_limit: {requests_per_unit: 3}\n"),
            "bad.yaml:5:16: lease_ttl must be a duration such as 500ms, 30s, 2m or 1h");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: s\n    algorithm: concurrency\n"
                    "    max_waiters: 0\n    rate_limit: {requests_per_unit: 3}\n"),
            "bad.yaml:5:18: max_waiters must be between 1 and 4096, not 0");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: s\n    max_waiters: 5\n"
                    "    rate_limit: {unit: second, requests_per_unit: 3}\n"),
            "bad.yaml:4:18: max_waiters applies to algorithm concurrency only");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    failure_mode: open\n"),
            "bad.yaml:4:19: failure_mode needs a rate_limit on the same descriptor");
  EXPECT_EQ(
      ErrorOf("domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: a\n    value: x\n"),
      "bad.yaml:5:5: duplicate descriptor 'a_x' at this level");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                    "requests_per_unit: 1, replaces: [{name: ghost}]}\n"),
            "bad.yaml:4:17: replaces names 'ghost', which no rate_limit of domain 'd' has");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    algorithm: concurrency\n    "
                    "colocate: true\n    rate_limit: {requests_per_unit: 3}\n"),
            "bad.yaml:5:15: colocate applies to rate limits, not to algorithm: concurrency");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    colocate: true\n"),
            "bad.yaml:4:15: colocate needs a rate_limit on the same descriptor");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: perhaps\n"),
            "bad.yaml:4:18: shadow_mode must be true or false");
  // YAML syntax errors carry the parser's position.
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: [a\n").rfind("bad.yaml:", 0), 0u);
  EXPECT_EQ(ErrorOf("- just\n- a list\n"),
            "bad.yaml:1:1: the document must be a map with a domain");
  EXPECT_EQ(ErrorOf(""), "bad.yaml:1:1: the document must be a map with a domain");
}

TEST(Config, DirectoryOfYamlFilesOneDomainEach) {
  char tmpl[] = "/tmp/sluiced_config_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/a.yaml") << "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: "
                                    "{unit: second, requests_per_unit: 1}\n";
  std::ofstream(dir + "/b.yml") << "domain: beta\n";
  std::ofstream(dir + "/notes.txt") << "not yaml: [";
  auto c = LoadConfig(dir);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*c)->domains.size(), 2u);
  EXPECT_NE((*c)->FindDomain("alpha"), nullptr);
  EXPECT_NE((*c)->FindDomain("beta"), nullptr);
  EXPECT_EQ((*c)->FindDomain("gamma"), nullptr);
  std::ofstream(dir + "/c.yaml") << "domain: alpha\n";
  auto dup = LoadConfig(dir);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(),
            dir + "/c.yaml:1:1: domain 'alpha' is already defined in " + dir + "/a.yaml");
  auto missing = LoadConfig(dir + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), dir + "/nope: no such file or directory");
  std::filesystem::remove_all(dir);
}

// descriptors nested `levels` deep, one rate limit at the bottom.
std::string Nested(int levels) {
  std::string yaml = "domain: d\ndescriptors:\n";
  std::string indent = "  ";
  for (int i = 1; i <= levels; ++i) {
    yaml += indent + "- key: k" + std::to_string(i) + "\n";
    if (i == levels) {
      yaml += indent + "  rate_limit: {unit: second, requests_per_unit: 1}\n";
    } else {
      yaml += indent + "  descriptors:\n";
    }
    indent += "    ";
  }
  return yaml;
}

// Aliases are refused where they stand: a descriptor its own child recursed until the
// stack overflowed, and doubling aliases made a few lines into hundreds of thousands of
// rules.
TEST(Config, YamlAliasesAreRefused) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors: &x [ {key: k, descriptors: *x} ]\n"),
            "bad.yaml:2:41: YAML aliases (*name) are not accepted: write each descriptor out");
  // Each list twice the one before: 2^12 rules out of 14 lines.
  std::string bomb =
      "domain: d\ndescriptors:\n  - key: a0\n    descriptors: &a0 [{key: k, rate_limit: "
      "{unit: second, requests_per_unit: 1}}]\n";
  for (int i = 1; i <= 12; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    bomb += "  - key: a" + std::to_string(i) + "\n    descriptors: &a" + std::to_string(i) +
            " [{key: k, descriptors: " + prev + "}, {key: j, descriptors: " + prev + "}]\n";
  }
  EXPECT_EQ(ErrorOf(bomb),
            "bad.yaml:6:45: YAML aliases (*name) are not accepted: write each descriptor out");
  // An alias of a plain scalar too: there is no safe subset worth the exceptions.
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: &k user\n    descriptors:\n"
                    "      - key: *k\n        rate_limit: {unit: second, requests_per_unit: 1}\n"),
            "bad.yaml:5:14: YAML aliases (*name) are not accepted: write each descriptor out");
  // An anchor alone is harmless and accepted.
  EXPECT_TRUE(Build("domain: d\ndescriptors:\n  - key: &k user\n"
                    "    rate_limit: {unit: second, requests_per_unit: 1}\n")
                  .ok());
}

TEST(Config, DescriptorDepthIsBounded) {
  auto deepest = Build(Nested(64));
  ASSERT_TRUE(deepest.ok()) << deepest.status().message();
  EXPECT_EQ((*deepest)->rules.size(), 1u);
  const std::string too_deep = ErrorOf(Nested(65));
  EXPECT_EQ(too_deep.rfind("bad.yaml:", 0), 0u) << too_deep;
  EXPECT_NE(too_deep.find(": descriptors nested deeper than 64 levels"), std::string::npos)
      << too_deep;
  // Nesting that is no descriptor tree at all is refused before it is built.
  const std::string brackets = "domain: d\nx: " + std::string(100000, '[') + "\n";
  const std::string deep = ErrorOf(brackets);
  EXPECT_EQ(deep.rfind("bad.yaml:2:", 0), 0u) << deep;
  EXPECT_NE(deep.find("nested deeper than 136 levels"), std::string::npos) << deep;
  ConfigLimits shallow{.max_depth = 2};
  auto c = BuildConfig({{"s.yaml", Nested(3)}}, shallow);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("descriptors nested deeper than 2 levels"), std::string::npos)
      << c.status().message();
}

TEST(Config, RuleCountIsBoundedAcrossFiles) {
  const std::string three =
      "descriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
      "  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
      "  - key: c\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
  ConfigLimits four{.max_rules = 4};
  EXPECT_TRUE(BuildConfig({{"a.yaml", "domain: a\n" + three}}, four).ok());
  auto both =
      BuildConfig({{"a.yaml", "domain: a\n" + three}, {"b.yaml", "domain: b\n" + three}}, four);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(), "b.yaml:6:17: more than 4 rate limits in the configuration");
  // The default admits a large config.
  std::string many = "domain: m\ndescriptors:\n";
  for (int i = 0; i < 2000; ++i)
    many += "  - key: k" + std::to_string(i) +
            "\n    rate_limit: {unit: second, "
            "requests_per_unit: 1}\n";
  auto big = Build(many);
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ((*big)->rules.size(), 2000u);
}

TEST(Config, FileSizeIsBounded) {
  const std::string yaml =
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: "
      "second, requests_per_unit: 1}\n";
  ConfigLimits small{.max_file_bytes = yaml.size() - 1};
  auto refused = BuildConfig({{"f.yaml", yaml}}, small);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "f.yaml:1:1: the file has " + std::to_string(yaml.size()) + " bytes, more than the " +
                std::to_string(yaml.size() - 1) + " a config file may have");
  EXPECT_TRUE(BuildConfig({{"f.yaml", yaml}}, {.max_file_bytes = yaml.size()}).ok());
  // From disk: refused by its size, before it is read.
  char tmpl[] = "/tmp/sluiced_config_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/big.yaml") << yaml << "# " << std::string(5 << 20, 'x') << "\n";
  auto big = LoadConfig(dir);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find(dir + "/big.yaml:1:1: the file has "), std::string::npos)
      << big.status().message();
  EXPECT_NE(big.status().message().find("more than the 4194304 a config file may have"),
            std::string::npos)
      << big.status().message();
  std::ofstream(dir + "/big.yaml") << yaml;
  EXPECT_TRUE(LoadConfig(dir).ok());
  std::filesystem::remove_all(dir);
}

TEST(Config, LimiterNamesAreStableAndValid) {
  auto a = Build(kEnvoyStyle);
  auto b = Build(kEnvoyStyle);
  ASSERT_TRUE(a.ok() && b.ok());
  for (std::size_t i = 0; i < (*a)->rules.size(); ++i) {
    EXPECT_EQ((*a)->rules[i]->limiter_name, (*b)->rules[i]->limiter_name);
    const auto& name = (*a)->rules[i]->limiter_name;
    EXPECT_GE(name.size(), 1u);
    EXPECT_LE(name.size(), 64u);
    EXPECT_EQ(
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"),
        std::string::npos)
        << name;
  }
  // Two values that sanitize alike still get two limiters.
  auto c = Build(
      "domain: d\ndescriptors:\n  - key: k\n    value: a b\n    rate_limit: {unit: second, "
      "requests_per_unit: 1}\n"
      "  - key: k\n    value: a_b\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*c)->rules[0]->limiter_name, (*c)->rules[1]->limiter_name);
}

}  // namespace
}  // namespace sluiced

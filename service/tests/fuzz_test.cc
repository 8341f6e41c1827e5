// A bounded random-input driver for the config loader and the JSON request parsers
// (libFuzzer would need clang): mutations of valid inputs plus random bytes, for a
// fixed number of iterations with a printed seed (SLUICED_FUZZ_SEED to change it). Each input must
// yield a value or an error, never a crash or an exception. SLUICED_FUZZ_ITERATIONS runs longer
// locally.
#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

#include "service/config.h"
#include "service/json_api.h"

namespace sluiced {
namespace {

// Fixed by default (printed, so a failure can be replayed); SLUICED_FUZZ_SEED=random
// or a number explores further.
uint64_t Seed(uint64_t fixed) {
  const char* env = std::getenv("SLUICED_FUZZ_SEED");
  if (!env) return fixed;
  if (std::string(env) == "random") return std::random_device{}();
  return std::strtoull(env, nullptr, 10);
}

int Iterations() {
  const char* env = std::getenv("SLUICED_FUZZ_ITERATIONS");
  return env ? std::atoi(env) : 20000;
}

std::string Mutate(std::mt19937_64& rng, std::string s, const std::vector<std::string>& tokens) {
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    const std::size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (!s.empty() && at < s.size()) s.erase(at, 1 + rng() % 8);
        break;
      case 1: s.insert(at, 1, static_cast<char>(rng() % 256)); break;
      case 2: s.insert(at, tokens[rng() % tokens.size()]); break;
      case 3:
        if (at < s.size()) s[at] = static_cast<char>(rng() % 128);
        break;
      case 4: {
        const std::size_t from = s.empty() ? 0 : rng() % s.size();
        s.insert(at, s.substr(from, rng() % 32));
        break;
      }
      case 5: s = s.substr(0, at); break;
    }
  }
  return s;
}

TEST(Fuzz, ConfigLoaderNeverCrashes) {
  const uint64_t seed = Seed(20261130);
  std::printf("fuzz config seed=%llu iterations=%d\n", static_cast<unsigned long long>(seed),
              Iterations());
  std::mt19937_64 rng(seed);
  const std::vector<std::string> seeds = {
      "domain: d\ndescriptors:\n  - key: a\n    value: b*\n    rate_limit:\n      unit: second\n   "
      "   requests_per_unit: 5\n"
      "    descriptors:\n      - key: c\n        algorithm: token_bucket\n        burst: 3\n       "
      " rate_limit: {unit: minute, requests_per_unit: 1}\n",
      "domain: x\ndescriptors:\n  - key: s\n    algorithm: concurrency\n    lease_ttl: 30s\n    "
      "failure_mode: closed\n    rate_limit: {requests_per_unit: 3, name: n}\n"
      "  - key: t\n    rate_limit: {unlimited: true}\n  - key: u\n    rate_limit: {unit: day, "
      "requests_per_unit: 1, replaces: [{name: n}]}\n"};
  const std::vector<std::string> tokens = {"\n",
                                           "  ",
                                           "- ",
                                           ": ",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "key",
                                           "value",
                                           "rate_limit",
                                           "descriptors",
                                           "unit",
                                           "requests_per_unit",
                                           "99999999999999999999",
                                           "-1",
                                           "&a",
                                           "*a",
                                           "!!binary",
                                           "'",
                                           "\"",
                                           "\t",
                                           "algorithm",
                                           "gcra",
                                           "~",
                                           "%YAML 1.2\n---\n"};
  int accepted = 0;
  for (int i = 0; i < Iterations(); ++i) {
    const std::string input = Mutate(rng, seeds[rng() % seeds.size()], tokens);
    auto c = BuildConfig({{"fuzz.yaml", input}});
    if (c.ok())
      ++accepted;
    else
      EXPECT_EQ(c.status().message().rfind("fuzz.yaml", 0), 0u) << c.status().message();
  }
  std::printf("accepted %d of %d mutated configs\n", accepted, Iterations());
  EXPECT_GT(accepted, 0);
}

TEST(Fuzz, JsonParsersNeverCrash) {
  const uint64_t seed = Seed(14);
  std::printf("fuzz json seed=%llu iterations=%d\n", static_cast<unsigned long long>(seed),
              Iterations());
  std::mt19937_64 rng(seed);
  const std::vector<std::string> seeds = {
      R"({"domain":"shop","hits":2,"descriptors":[{"entries":[{"key":"route","value":"x"},{"key":"a","value":"b"}],"hits":1}]})",
      R"({"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":3,"unit":"SECOND"},"hitsAddend":0}]})",
      R"({"domain":"d","entries":[{"key":"streams"},{"key":"account","value":"bob"}]})"};
  const std::vector<std::string> tokens = {
      "{",       "}",       "[",           "]",       ",",   ":",
      "\"",      "null",    "true",        "1e400",   "-0",  "18446744073709551616",
      "\\u0000", "\\ud800", "\"entries\"", "\"key\"", "\xff"};
  int accepted = 0;
  for (int i = 0; i < Iterations(); ++i) {
    const std::string input = Mutate(rng, seeds[rng() % seeds.size()], tokens);
    auto a = ParseCheckRequest(input);
    if (CheckRequest fast; FastParseCheckRequest(input, fast)) {
      // The fast parser takes only what the general one takes, with the same result.
      auto tree = ParseCheckRequestTree(input);
      ASSERT_TRUE(tree.ok()) << input;
      EXPECT_EQ(fast.domain, tree->domain);
      EXPECT_EQ(fast.hits, tree->hits);
      ASSERT_EQ(fast.descriptors.size(), tree->descriptors.size());
      for (std::size_t k = 0; k < fast.descriptors.size(); ++k) {
        EXPECT_EQ(fast.descriptors[k].entries, tree->descriptors[k].entries);
        EXPECT_EQ(fast.descriptors[k].hits, tree->descriptors[k].hits);
      }
    }
    auto b = ParseEnvoyJsonRequest(input);
    auto c = ParseDescriptorRequest(input);
    accepted += a.ok() + b.ok() + c.ok();
    if (a.ok()) {
      // Whatever parses formats back as valid JSON.
      CheckResult r;
      r.statuses.resize(a->descriptors.size());
      EXPECT_EQ(FormatCheckResponse(r), FormatCheckResponseTree(r));
    }
  }
  std::printf("accepted %d of %d parses\n", accepted, 3 * Iterations());
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace sluiced

// The quota shares twin (QuotaShareStep) on explicit times: the rule on worked examples,
// and its invariant over random call sequences: after any call, the live grants of a
// bucket sum to at most its rate, and the reply describes the bucket as it is then. The
// Lua script is held to the same replies by tests/differential_quota_test.cc.
#include "algo/quota_shares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

namespace sluice::internal {
namespace {

constexpr int64_t kT0 = 1'700'000'000'123;

QuotaShareArgs Ask(std::string client, int64_t demand, int64_t rate, int64_t hold = 10'000) {
  return {.client = std::move(client), .demand_milli = demand, .rate_milli = rate, .hold_ms = hold};
}

std::string Show(const QuotaShareReply& r) {
  return "{" + std::to_string(r.grant_milli) + ", " + std::to_string(r.total_demand_milli) + ", " +
         std::to_string(r.clients) + ", " + std::to_string(r.assigned_milli) + "}";
}

TEST(QuotaShares, SharesConvergeToTheDemandsProportionsAsClientsRenew) {
  QuotaShareState s;
  const int64_t rate = 100'000;
  // Alone and below the rate: its demand with headroom (200%), capped by the rate.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 60'000, rate), kT0)),
            Show({100'000, 60'000, 1, 100'000}));
  // B: a 40% share is wanted, nothing is left.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 40'000, rate), kT0)), Show({0, 100'000, 2, 100'000}));
  // A renews to its 60%; then B gets its 40%.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 60'000, rate), kT0 + 1)),
            Show({60'000, 100'000, 2, 60'000}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 40'000, rate), kT0 + 2)),
            Show({40'000, 100'000, 2, 100'000}));
  // Demand above the rate: proportional shares of the rate, floored.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 300'000, rate), kT0 + 3)),
            Show({60'000, 340'000, 2, 100'000}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 40'000, rate), kT0 + 4)),
            Show({11'764, 340'000, 2, 71'764}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 300'000, rate), kT0 + 5)),
            Show({88'235, 340'000, 2, 99'999}));
}

TEST(QuotaShares, HeadroomCapsAClientWhileTheTotalDemandIsBelowTheRate) {
  QuotaShareState s;
  EXPECT_EQ(QuotaShareStep(s, Ask("a", 10, 1000), kT0).grant_milli, 20);
  QuotaShareArgs more = Ask("a", 10, 1000);
  more.headroom_percent = 1000;
  EXPECT_EQ(QuotaShareStep(s, more, kT0).grant_milli, 100);
  more.headroom_percent = 100;
  EXPECT_EQ(QuotaShareStep(s, more, kT0).grant_milli, 10);
  // At or above the rate no headroom applies: the share is the proportion.
  EXPECT_EQ(QuotaShareStep(s, Ask("a", 1000, 1000), kT0).grant_milli, 1000);
  // No demand, no grant; the client is live all the same.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 0, 1000), kT0)), Show({0, 0, 1, 0}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 0, 1000), kT0)), Show({0, 0, 2, 0}));
}

TEST(QuotaShares, ExpiredClientsAndReleasesGiveTheirShareBack) {
  QuotaShareState s;
  QuotaShareStep(s, Ask("a", 1000, 1000, 500), kT0);
  EXPECT_EQ(QuotaShareStep(s, Ask("b", 1000, 1000), kT0 + 499).grant_milli, 0);
  // A is live while now < its expiry: at kT0 + 500 it is gone.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 1000, 1000), kT0 + 500)), Show({1000, 1000, 1, 1000}));
  EXPECT_EQ(s.clients.size(), 1u);
  QuotaShareArgs release{.client = "b", .release = true};
  EXPECT_EQ(Show(QuotaShareStep(s, release, kT0 + 501)), Show({0, 0, 0, 0}));
  EXPECT_TRUE(s.empty());
  // Releasing a client that is not there changes nothing.
  QuotaShareStep(s, Ask("c", 10, 1000), kT0 + 502);
  release.client = "nobody";
  EXPECT_EQ(Show(QuotaShareStep(s, release, kT0 + 503)), Show({0, 10, 1, 20}));
}

TEST(QuotaShares, ANewClientBeyondTheCapIsRefusedAndNotRecorded) {
  QuotaShareState s;
  for (int i = 0; i < kMaxQuotaClients; ++i) {
    QuotaShareStep(s, Ask("c" + std::to_string(i), 1, 1'000'000), kT0);
  }
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("new", 1, 1'000'000), kT0)), Show({0, 1024, 1024, 2048}));
  EXPECT_EQ(s.clients.count("new"), 0u);
  EXPECT_EQ(QuotaShareStep(s, Ask("c3", 1, 1'000'000), kT0).grant_milli, 2);
}

// The invariant: after any call, with one rate per bucket, the live grants sum to at most
// the rate, and the reply's clients, total demand and sum of grants are the bucket's.
TEST(QuotaShares, LiveGrantsNeverSumAboveTheRate) {
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    const int64_t rate = seed == 1 ? 1 : 1 + pick(seed == 2 ? 1000 : kMaxQuotaRateMilli);
    QuotaShareState s;
    int64_t now = kT0;
    int64_t most = 0;  // the highest sum of live grants seen
    for (int step = 0; step < 20'000; ++step) {
      now += pick(3) == 0 ? pick(200) : 0;
      QuotaShareArgs args = Ask("c" + std::to_string(pick(40)), 0, rate, 1 + pick(1000));
      const int64_t r = pick(4);
      args.demand_milli = r == 0 ? 0 : r == 1 ? pick(kMaxQuotaRateMilli + 1) : pick(rate * 2 + 1);
      args.headroom_percent = 100 + pick(9901);
      args.release = pick(15) == 0;
      const QuotaShareReply reply = QuotaShareStep(s, args, now);
      int64_t grants = 0, demand = 0, live = 0;
      for (const auto& [client, c] : s.clients) {
        ASSERT_GT(c.expires_ms, now);
        grants += c.grant_milli;
        demand += c.demand_milli;
        ++live;
        ASSERT_GE(c.grant_milli, 0);
      }
      ASSERT_LE(grants, rate) << "seed " << seed << " step " << step;
      ASSERT_EQ(Show(reply), Show({reply.grant_milli, demand, live, grants}))
          << "seed " << seed << " step " << step;
      if (!args.release && reply.total_demand_milli < rate) {
        // Headroom: at most headroom% of its demand (+1: the double product, rounded).
        ASSERT_LE(reply.grant_milli, args.demand_milli * args.headroom_percent / 100 + 1);
      }
      most = std::max(most, grants);
    }
    // And the rate is used: the sum of the grants came near it at some point.
    EXPECT_GE(most * 10, rate * 9) << "seed " << seed;
  }
}

TEST(QuotaShares, ArgumentsAreValidatedWithAClearMessage) {
  const auto message = [](const QuotaShareArgs& a) { return ValidateQuotaShareArgs(a).ToString(); };
  QuotaShareArgs a = Ask("a", 1, 1);
  EXPECT_TRUE(ValidateQuotaShareArgs(a).ok());
  a.client = "";
  EXPECT_NE(message(a).find("client must be 1-64 bytes, got 0"), std::string::npos);
  a.client = std::string(65, 'x');
  EXPECT_NE(message(a).find("got 65"), std::string::npos);
  a = Ask("a", -1, 1);
  EXPECT_NE(message(a).find("demand_milli must be between 0 and 1000000000000, got -1"),
            std::string::npos);
  a = Ask("a", 1, 0);
  EXPECT_NE(message(a).find("rate_milli must be between 1 and"), std::string::npos);
  a = Ask("a", 1, kMaxQuotaRateMilli + 1);
  EXPECT_NE(message(a).find("rate_milli"), std::string::npos);
  a = Ask("a", 1, 1, 0);
  EXPECT_NE(message(a).find("hold (ms) must be between 1 and"), std::string::npos);
  a = Ask("a", 1, 1);
  a.headroom_percent = 99;
  EXPECT_NE(message(a).find("headroom_percent must be between 100 and 10000, got 99"),
            std::string::npos);
  // A release reads the client only.
  EXPECT_TRUE(ValidateQuotaShareArgs({.client = "a", .release = true}).ok());
  EXPECT_FALSE(ValidateQuotaShareArgs({.client = "", .release = true}).ok());
}

}  // namespace
}  // namespace sluice::internal

// The quota shares twin (QuotaShareStep) on explicit times: the rule on worked examples
// (the reserve, the fold, the budget), and its invariant over random call sequences:
// after any call, the recorded grants of a bucket sum to at most its rate, the kept sums
// are the clients', and the reply describes the bucket as it is then. The Lua script is
// held to the same replies by tests/differential_quota_test.cc.
#include "algo/quota_shares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>

namespace sluice::internal::quota_shares_test {
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
  const int64_t rate = 100'000;  // the reserve: 1'562; the holders share 98'438
  // Alone and below the rate: its demand with headroom (200%), capped by the rate less the
  // reserve.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 60'000, rate), kT0)),
            Show({98'438, 60'000, 1, 98'438}));
  // B holds nothing: a 39% share is wanted, the reserve is what is left.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 40'000, rate), kT0)),
            Show({1'562, 100'000, 2, 100'000}));
  // A renews to its 60% of 98'438; then B gets its 40%.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 60'000, rate), kT0 + 1)),
            Show({59'062, 100'000, 2, 60'624}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 40'000, rate), kT0 + 2)),
            Show({39'375, 100'000, 2, 98'437}));
  // Demand above the rate: proportional shares of 98'438, floored.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 300'000, rate), kT0 + 3)),
            Show({59'063, 340'000, 2, 98'438}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 40'000, rate), kT0 + 4)),
            Show({11'580, 340'000, 2, 70'643}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 300'000, rate), kT0 + 5)),
            Show({86'857, 340'000, 2, 98'437}));
  // A newcomer while the holders have everything but the reserve: granted from it.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("c", 10'000, rate), kT0 + 6)),
            Show({1'563, 350'000, 3, 100'000}));
}

// A lone client using the whole rate leaves the reserve free: the next client's first
// call is granted a share at once, not 0.
TEST(QuotaShares, ANewcomerBesideALoneHeavyClientGetsAShareAtItsFirstCall) {
  for (const int64_t rate : {10'000, 100'000, 1'000'000}) {
    QuotaShareState s;
    EXPECT_EQ(QuotaShareStep(s, Ask("heavy", 4 * rate, rate), kT0).grant_milli,
              rate - rate / kQuotaReservePart);
    EXPECT_EQ(QuotaShareStep(s, Ask("heavy", 4 * rate, rate), kT0 + 5000).grant_milli,
              rate - rate / kQuotaReservePart);
    // A subscription: one request a second.
    const QuotaShareReply newcomer = QuotaShareStep(s, Ask("new", 1000, rate), kT0 + 5001);
    EXPECT_GT(newcomer.grant_milli, 0) << "rate " << rate;
    EXPECT_LE(newcomer.assigned_milli, rate);
  }
}

// Newcomers that took the reserve push the sum above S; each holder's renewal gives the
// excess back, but a holder keeps at least half of its grant a renewal: it never drops to
// 0 (DENY_ALL for an interval) because a newcomer came.
TEST(QuotaShares, AHolderSqueezedBackToTheReserveKeepsHalfItsGrant) {
  QuotaShareState s;
  const int64_t rate = 64'000;  // the reserve: 1'000; S = 63'000
  // 100 holders of 1'000 each: after three rounds, S / 100 each.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i) QuotaShareStep(s, Ask("h" + std::to_string(i), 1000, rate), kT0);
  }
  for (const auto& [client, c] : s.clients) ASSERT_EQ(c.grant_milli, 630) << client;
  // The newcomer wants 1'235 and takes the whole reserve.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("new", 2000, rate), kT0 + 1)),
            Show({1'000, 102'000, 101, 64'000}));
  // h0 wants 617, S - the others' grants is -370: it keeps half its 630.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("h0", 1000, rate), kT0 + 2)),
            Show({315, 102'000, 101, 63'685}));
  // h1: S - the others' grants is 630 - 685 < 315: half again; h2: 630 - 370 = 260 < 315.
  EXPECT_EQ(QuotaShareStep(s, Ask("h1", 1000, rate), kT0 + 3).grant_milli, 315);
  EXPECT_EQ(QuotaShareStep(s, Ask("h2", 1000, rate), kT0 + 4).grant_milli, 315);
  // Back at S: the next holder gets S - the others' grants (its want, 617, is more).
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("h3", 1000, rate), kT0 + 5)),
            Show({575, 102'000, 101, 63'000}));
}

TEST(QuotaShares, HeadroomCapsAClientWhileTheTotalDemandIsBelowTheRate) {
  QuotaShareState s;
  EXPECT_EQ(QuotaShareStep(s, Ask("a", 10, 1000), kT0).grant_milli, 20);
  QuotaShareArgs more = Ask("a", 10, 1000);
  more.headroom_percent = 1000;
  EXPECT_EQ(QuotaShareStep(s, more, kT0).grant_milli, 100);
  more.headroom_percent = 100;
  EXPECT_EQ(QuotaShareStep(s, more, kT0).grant_milli, 10);
  // At or above the rate less the reserve (1000 - 15) no headroom applies: the share is
  // the proportion of it.
  EXPECT_EQ(QuotaShareStep(s, Ask("a", 1000, 1000), kT0).grant_milli, 985);
  // No demand, no grant; the client is recorded all the same.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("a", 0, 1000), kT0)), Show({0, 0, 1, 0}));
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 0, 1000), kT0)), Show({0, 0, 2, 0}));
  // A demand above 10^7 requests a second is recorded as 10^7.
  EXPECT_EQ(QuotaShareStep(s, Ask("b", kMaxQuotaRateMilli, 1000), kT0).total_demand_milli,
            kMaxQuotaRecordedDemandMilli);
}

TEST(QuotaShares, ExpiredClientsAndReleasesGiveTheirShareBack) {
  QuotaShareState s;
  QuotaShareStep(s, Ask("a", 1000, 1000, 500), kT0);
  // B is new: the reserve.
  EXPECT_EQ(QuotaShareStep(s, Ask("b", 1000, 1000), kT0 + 499).grant_milli, 15);
  // A is recorded while now < its expiry: at kT0 + 500 it is folded out.
  EXPECT_EQ(Show(QuotaShareStep(s, Ask("b", 1000, 1000), kT0 + 500)), Show({985, 1000, 1, 985}));
  EXPECT_EQ(s.clients.size(), 1u);
  QuotaShareArgs release{.client = "b", .release = true};
  EXPECT_EQ(Show(QuotaShareStep(s, release, kT0 + 501)), Show({0, 0, 0, 0}));
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.by_expiry.empty());
  // Releasing a client that is not there changes nothing.
  QuotaShareStep(s, Ask("c", 10, 1000), kT0 + 502);
  release.client = "nobody";
  EXPECT_EQ(Show(QuotaShareStep(s, release, kT0 + 503)), Show({0, 10, 1, 20}));
}

// A call folds out at most kQuotaFold expired clients, earliest first: until then their
// grants count (the sum bound only gains), and the backlog shrinks call by call.
TEST(QuotaShares, ExpiredClientsAreFoldedOutAFewPerCall) {
  QuotaShareState s;
  for (int i = 0; i < 20; ++i) {
    QuotaShareStep(s, Ask("c" + std::to_string(100 + i), 1000, 1'000'000, 1000 + i), kT0);
  }
  ASSERT_EQ(s.clients.size(), 20u);
  QuotaShareReply r = QuotaShareStep(s, Ask("late", 1000, 1'000'000), kT0 + 5000);
  EXPECT_EQ(r.clients, 20 - kQuotaFold + 1);
  EXPECT_EQ(s.clients.count("c100"), 0u);  // the earliest went first
  EXPECT_EQ(s.clients.count("c119"), 1u);
  r = QuotaShareStep(s, Ask("late", 1000, 1'000'000), kT0 + 5001);
  EXPECT_EQ(r.clients, 20 - 2 * kQuotaFold + 1);
  r = QuotaShareStep(s, Ask("late", 1000, 1'000'000), kT0 + 5002);
  EXPECT_EQ(Show(r), Show({2000, 1000, 1, 2000}));
}

// The budget bounds a bucket's clients in bytes; a new client that does not fit is refused
// (full), never recorded; a client already recorded renews; a release makes room.
TEST(QuotaShares, ANewClientBeyondTheBudgetIsRefusedAndNotRecorded) {
  QuotaShareState s;
  const int64_t each = QuotaClientCost("c1");
  auto ask = [&](std::string client) {
    QuotaShareArgs a = Ask(std::move(client), 1000, 1'000'000);
    a.budget_bytes = 3 * each;
    return a;
  };
  for (const char* c : {"c1", "c2", "c3"}) EXPECT_FALSE(QuotaShareStep(s, ask(c), kT0).full);
  EXPECT_EQ(s.bytes, 3 * each);
  QuotaShareReply r = QuotaShareStep(s, ask("c4"), kT0);
  EXPECT_TRUE(r.full);
  EXPECT_EQ(Show(r), Show({0, 3000, 3, 6000}));
  EXPECT_EQ(s.clients.count("c4"), 0u);
  EXPECT_EQ(QuotaShareStep(s, ask("c2"), kT0 + 1).grant_milli, 2000);
  QuotaShareStep(s, {.client = "c1", .release = true}, kT0 + 2);
  r = QuotaShareStep(s, ask("c4"), kT0 + 3);
  EXPECT_FALSE(r.full);
  EXPECT_EQ(r.grant_milli, 2000);
}

// The invariant: after any call, with one rate per bucket, the recorded grants sum to at
// most the rate, the kept sums and the expiry index are the clients', and the reply's
// clients, total demand and sum of grants are the bucket's.
TEST(QuotaShares, RecordedGrantsNeverSumAboveTheRate) {
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    const int64_t rate = seed == 1 ? 1 : 1 + pick(seed == 2 ? 1000 : kMaxQuotaRateMilli);
    QuotaShareState s;
    int64_t now = kT0;
    int64_t most = 0;  // the highest sum of recorded grants seen
    for (int step = 0; step < 20'000; ++step) {
      now += pick(3) == 0 ? pick(200) : 0;
      QuotaShareArgs args = Ask("c" + std::to_string(pick(40)), 0, rate, 1 + pick(1000));
      const int64_t r = pick(4);
      args.demand_milli = r == 0 ? 0 : r == 1 ? pick(kMaxQuotaRateMilli + 1) : pick(rate * 2 + 1);
      args.headroom_percent = 100 + pick(9901);
      args.release = pick(15) == 0;
      const QuotaShareReply reply = QuotaShareStep(s, args, now);
      int64_t grants = 0, demand = 0, bytes = 0;
      std::set<std::pair<int64_t, std::string>> index;
      for (const auto& [client, c] : s.clients) {
        grants += c.grant_milli;
        demand += c.demand_milli;
        bytes += QuotaClientCost(client);
        index.insert({c.expires_ms, client});
        ASSERT_GE(c.grant_milli, 0);
      }
      ASSERT_LE(grants, rate) << "seed " << seed << " step " << step;
      ASSERT_EQ(Show({0, s.demand_milli, static_cast<int64_t>(s.clients.size()), s.grant_milli}),
                Show({0, demand, static_cast<int64_t>(s.clients.size()), grants}));
      ASSERT_EQ(s.bytes, bytes);
      ASSERT_EQ(s.by_expiry, index);
      ASSERT_EQ(Show(reply),
                Show({reply.grant_milli, demand, static_cast<int64_t>(s.clients.size()), grants}))
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
  a = Ask("a", 1, 1);
  a.budget_bytes = 0;
  EXPECT_NE(message(a).find("budget (bytes) must be between 1 and"), std::string::npos);
  // A release reads the client only.
  EXPECT_TRUE(ValidateQuotaShareArgs({.client = "a", .release = true}).ok());
  EXPECT_FALSE(ValidateQuotaShareArgs({.client = "", .release = true}).ok());
}

}  // namespace
}  // namespace sluice::internal::quota_shares_test

// QuotaShares through a Client on a real redis-server (src/algo/quota_shares.lua, sent
// alone by EVALSHA): after every call of a random sequence the bucket's key has an expiry
// (or is gone) and the live grants sum to at most the rate, on the model clock and on
// Redis's own; the script survives SCRIPT FLUSH; a store that cannot answer gives the
// call's error.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

namespace sluice::quota_redis_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::shared_ptr<Client> Connect(const testing::RedisServer& server,
                                std::shared_ptr<const Clock> clock = nullptr) {
  return testing::ConnectClient(
      server, {.prefix = "qt", .deadline = milliseconds(500), .model_clock = std::move(clock)});
}

// The sum of the grants stored in the bucket whose fields expire after `now_ms`.
int64_t LiveGrants(const testing::RedisServer& server, const std::string& key, int64_t now_ms) {
  int64_t sum = 0;
  const testing::RedisValue v = server.Command({"HGETALL", key});
  for (size_t i = 0; i + 1 < v.elements.size(); i += 2) {
    if (v.elements[i].str.empty()) continue;  // the kept sums
    long long expires = 0, demand = 0, grant = 0;
    EXPECT_EQ(
        std::sscanf(v.elements[i + 1].str.c_str(), "%lld %lld %lld", &expires, &demand, &grant), 3);
    if (expires > now_ms) sum += grant;
  }
  return sum;
}

// A random sequence of assigns and releases over three buckets of fixed rates; after every
// call the key has an expiry (or is gone) and its live grants sum to at most the rate.
void RunSequence(const testing::RedisServer& server, const std::shared_ptr<Client>& client,
                 const std::shared_ptr<testing::FakeClock>& clock, uint32_t seed) {
  auto shares = *client->MakeQuotaShares("rlqs");
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  const int64_t rates[] = {1, 7'500, 1'000'000};
  int64_t most = 0;
  for (int step = 0; step < 400; ++step) {
    const int b = static_cast<int>(pick(3));
    if (clock) clock->Advance(milliseconds(pick(60)));
    QuotaShareRequest r{.id = "route/" + std::to_string(b),
                        .client = "envoy-" + std::to_string(pick(6)),
                        .demand_milli = pick(3 * rates[b]),
                        .rate_milli = rates[b],
                        .hold = milliseconds(clock ? 1 + pick(300) : 1000 + pick(1000)),
                        .release = pick(12) == 0};
    auto grant = shares.AssignSync(r);
    ASSERT_TRUE(grant.ok()) << grant.status().ToString();
    const std::string key = *shares.KeyFor(r.id);
    const long long pttl = server.Command({"PTTL", key}).integer;
    ASSERT_TRUE(pttl > 0 || pttl == -2) << "step " << step << ": PTTL " << pttl;
    ASSERT_LE(grant->assigned_milli, rates[b]) << "step " << step;
    const int64_t now = clock ? clock->NowMs() : server.NowMs();
    ASSERT_LE(LiveGrants(server, key, now), rates[b]) << "step " << step;
    most = std::max(most, grant->assigned_milli * 1000 / rates[b]);
  }
  EXPECT_EQ(most, 1000) << "the rate was never fully assigned";
  EXPECT_EQ(server.KeysWithoutTtl("qt:*"), std::vector<std::string>{});
}

TEST(QuotaRedis, EveryCallLeavesTheBucketWithAnExpiryAndAtMostItsRate) {
  testing::RedisServer server;
  auto clock = std::make_shared<testing::FakeClock>();
  auto client = Connect(server, clock);
  ASSERT_NE(client, nullptr);
  RunSequence(server, client, clock, 1);
}

TEST(QuotaRedis, OnRedisOwnClockToo) {
  testing::RedisServer server;
  auto client = Connect(server);
  ASSERT_NE(client, nullptr);
  RunSequence(server, client, nullptr, 2);
  // Without a model clock there is no grace: the key lives as long as its latest grant.
  auto shares = *client->MakeQuotaShares("ttl");
  ASSERT_TRUE(
      shares
          .AssignSync(
              {.id = "b", .client = "c", .demand_milli = 10, .rate_milli = 100, .hold = seconds(3)})
          .ok());
  const long long pttl = server.Command({"PTTL", *shares.KeyFor("b")}).integer;
  EXPECT_LE(pttl, 3000);
  EXPECT_GT(pttl, 2000);
}

// The commands a call runs inside Redis, from INFO commandstats since the last
// CONFIG RESETSTAT: name -> calls (the script calls themselves and the test's own left out).
std::map<std::string, int64_t> CommandsRun(const testing::RedisServer& server) {
  std::map<std::string, int64_t> out;
  std::istringstream info(server.Command({"INFO", "commandstats"}).str);
  for (std::string line; std::getline(info, line);) {
    const auto colon = line.find(':');
    if (line.rfind("cmdstat_", 0) != 0 || colon == std::string::npos) continue;
    const std::string name = line.substr(8, colon - 8);
    if (name == "evalsha" || name == "eval" || name == "config" || name == "info") continue;
    out[name] = std::stoll(line.substr(line.find("calls=") + 6));
  }
  return out;
}

// A call's work in Redis does not grow with the bucket's clients: a renewal runs the same
// commands at 10 clients as at 2,000, and never reads the whole bucket (HGETALL).
TEST(QuotaRedis, ACallsWorkInRedisDoesNotGrowWithTheBucketsClients) {
  testing::RedisServer server;
  auto client = Connect(server);
  ASSERT_NE(client, nullptr);
  auto shares = *client->MakeQuotaShares("rlqs");
  std::map<int, std::map<std::string, int64_t>> per_size;
  for (const int clients : {10, 2000}) {
    QuotaShareRequest r{.id = "size" + std::to_string(clients),
                        .demand_milli = 1000,
                        .rate_milli = 1'000'000,
                        .hold = seconds(60)};
    for (int i = 0; i < clients; ++i) {
      r.client = "envoy-" + std::to_string(i);
      ASSERT_TRUE(shares.AssignSync(r).ok());
    }
    server.Command({"CONFIG", "RESETSTAT"});
    for (int i = 0; i < 20; ++i) {
      r.client = "envoy-" + std::to_string(i * 7 % clients);
      r.demand_milli = 1000 + i;
      auto g = shares.AssignSync(r);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      EXPECT_EQ(g->clients, clients);
    }
    per_size[clients] = CommandsRun(server);
    EXPECT_EQ(per_size[clients].count("hgetall"), 0u) << "clients " << clients;
  }
  EXPECT_EQ(per_size[10], per_size[2000]);
  EXPECT_GT(per_size[10]["hset"], 0);
}

TEST(QuotaRedis, TheScriptIsSentAgainAfterAScriptFlush) {
  testing::RedisServer server;
  auto client = Connect(server);
  ASSERT_NE(client, nullptr);
  auto shares = *client->MakeQuotaShares("api");
  const QuotaShareRequest r{
      .id = "b", .client = "c", .demand_milli = 10, .rate_milli = 100, .hold = seconds(5)};
  ASSERT_TRUE(shares.AssignSync(r).ok());
  server.Command({"SCRIPT", "FLUSH"});
  auto again = shares.AssignSync(r);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->grant_milli, 20);
}

TEST(QuotaRedis, AStoreThatCannotAnswerGivesTheCallsError) {
  testing::RedisServer server;
  auto client = Connect(server);
  ASSERT_NE(client, nullptr);
  auto shares = *client->MakeQuotaShares("api");
  const QuotaShareRequest r{
      .id = "b", .client = "c", .demand_milli = 10, .rate_milli = 100, .hold = seconds(5)};
  server.Pause();
  auto paused = shares.AssignSync(r);
  server.Resume();
  EXPECT_EQ(paused.status().code(), StatusCode::kDeadlineExceeded) << paused.status().ToString();
  server.Kill();
  auto down = shares.AssignSync(r);
  EXPECT_TRUE(down.status().code() == StatusCode::kUnavailable ||
              down.status().code() == StatusCode::kDeadlineExceeded)
      << down.status().ToString();
}

}  // namespace
}  // namespace sluice::quota_redis_test

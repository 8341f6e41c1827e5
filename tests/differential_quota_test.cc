// Differential tests: the quota shares script (src/algo/quota_shares.lua) on a real
// redis-server vs its in-memory twin (QuotaShareStep), on a model clock passed as ARGV[2],
// with the arguments RedisStore sends. Random traces over a few buckets mix clients that
// join, renew, stop calling (their grants expire), release, ask for nothing, and ask for
// more than the rate; rates change mid-trace; steps land exactly on grant expiries and
// 1 ms before them. After every step the replies, the stored hash and the key's expiry
// must agree with the twin (the clients, the kept sums and the expiry index), and the keys
// must have an expiry unless they are gone. Drift is injected mid-trace (a field that
// sluice never writes, a lost index, a lost hash, a value of another type at either key):
// the script rebuilds its sums and goes on agreeing with the twin. Also: the budget, the
// format of an earlier release, a key that lost its expiry, and Redis's own clock.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algo/quota_shares.h"
#include "differential.h"
#include "redis/scripts.h"
#include "testing/redis_server.h"

namespace sluice::differential_quota_test {
namespace {

using internal::kModelClockGraceMs;
using internal::QuotaClient;
using internal::QuotaShareArgs;
using internal::QuotaShareReply;
using internal::QuotaShareState;
using internal::QuotaShareStep;
using testing::Printable;
using testing::RedisServer;
using testing::RedisValue;
using testing::ShowReply;

std::string Show(const QuotaShareReply& r) {
  return "{grant " + std::to_string(r.grant_milli) + ", demand " +
         std::to_string(r.total_demand_milli) + ", clients " + std::to_string(r.clients) +
         ", assigned " + std::to_string(r.assigned_milli) + (r.full ? ", full" : "") + "}";
}

// The kept sums as the script writes them into the hash's "" field.
std::string ShowSums(const QuotaShareState& s) {
  return std::to_string(s.demand_milli) + " " + std::to_string(s.grant_milli) + " " +
         std::to_string(s.clients.size()) + " " + std::to_string(s.bytes);
}

std::string Show(const std::set<std::pair<int64_t, std::string>>& index) {
  std::string out;
  for (const auto& [expires, client] : index) out += client + "@" + std::to_string(expires) + " ";
  return out;
}

// The bucket's expiry index key, beside its hash: "...}:qs" -> "...}:qx".
std::string IndexKey(const std::string& key) {
  return key.substr(0, key.size() - 2) + "qx";
}

std::string Show(const std::map<std::string, QuotaClient>& clients) {
  std::string s = "{";
  for (const auto& [client, c] : clients) {
    s += client + "=" + std::to_string(c.expires_ms) + "/" + std::to_string(c.demand_milli) + "/" +
         std::to_string(c.grant_milli) + " ";
  }
  return s + "}";
}

// The script by EVAL, with the arguments RedisStore::AssignQuota sends.
RedisValue Eval(const RedisServer& server, const std::string& key, const std::string& now,
                const QuotaShareArgs& a) {
  return server.Command({"EVAL", std::string(internal::kQuotaSharesLua), "2", key, IndexKey(key),
                         a.release ? "1" : "0", now, a.client, std::to_string(a.demand_milli),
                         std::to_string(a.rate_milli), std::to_string(a.hold_ms),
                         std::to_string(a.headroom_percent), std::to_string(a.budget_bytes)});
}

// The reply as RedisStore parses it; false (and `error`) when malformed.
bool Parse(const RedisValue& v, QuotaShareReply& out, std::string& error) {
  if (v.type != RedisValue::Type::kArray || v.elements.size() != 5) {
    error = "not an array of 5: " + ShowReply(v);
    return false;
  }
  for (const auto& e : v.elements) {
    if (e.type != RedisValue::Type::kInteger) {
      error = "a non-integer field: " + ShowReply(v);
      return false;
    }
  }
  out = {v.elements[0].integer, v.elements[1].integer, v.elements[2].integer, v.elements[3].integer,
         v.elements[4].integer != 0};
  return true;
}

// The stored hash's clients, as the twin keeps them (the sums' field "" aside).
std::map<std::string, QuotaClient> Stored(const RedisServer& server, const std::string& key) {
  std::map<std::string, QuotaClient> clients;
  const RedisValue v = server.Command({"HGETALL", key});
  for (size_t i = 0; i + 1 < v.elements.size(); i += 2) {
    if (v.elements[i].str.empty()) continue;
    QuotaClient c;
    if (std::sscanf(v.elements[i + 1].str.c_str(), "%ld %ld %ld", &c.expires_ms, &c.demand_milli,
                    &c.grant_milli) != 3) {
      c.expires_ms = -1;  // shows as a difference
    }
    clients[v.elements[i].str] = c;
  }
  return clients;
}

// Runs one call on both sides and compares the replies, the stored hash and the key's
// expiry; returns the twin's reply.
QuotaShareReply Both(const RedisServer& server, const std::string& key, QuotaShareState& twin,
                     const QuotaShareArgs& args, int64_t now, const std::string& context) {
  const QuotaShareReply want = QuotaShareStep(twin, args, now);
  QuotaShareReply got;
  std::string error;
  const RedisValue raw = Eval(server, key, std::to_string(now), args);
  const std::string where =
      context + " key " + key + " now " + std::to_string(now) + " client " + args.client +
      (args.release ? " release" : "") + " demand " + std::to_string(args.demand_milli) + " rate " +
      std::to_string(args.rate_milli) + " hold " + std::to_string(args.hold_ms) + " headroom " +
      std::to_string(args.headroom_percent) + "\n  redis raw: " + ShowReply(raw) +
      "\n  twin:      " + Show(want);
  EXPECT_TRUE(Parse(raw, got, error)) << where << "\n  " << error;
  EXPECT_EQ(Show(got), Show(want)) << where;
  EXPECT_EQ(Show(Stored(server, key)), Show(twin.clients)) << where;
  if (twin.clients.empty()) {
    EXPECT_EQ(server.Command({"EXISTS", key, IndexKey(key)}).integer, 0)
        << where << "\n  an empty bucket is no key";
    return want;
  }
  EXPECT_EQ(server.Command({"HGET", key, ""}).str, ShowSums(twin)) << where;
  std::set<std::pair<int64_t, std::string>> index;
  const RedisValue z = server.Command({"ZRANGE", IndexKey(key), "0", "-1", "WITHSCORES"});
  for (size_t i = 0; i + 1 < z.elements.size(); i += 2) {
    index.insert({std::stoll(z.elements[i + 1].str), z.elements[i].str});
  }
  EXPECT_EQ(Show(index), Show(twin.by_expiry)) << where;
  for (const std::string& k : {key, IndexKey(key)}) {
    const long long pttl = server.Command({"PTTL", k}).integer;
    const int64_t need = twin.MaxExpiry() - now + kModelClockGraceMs;
    EXPECT_GT(pttl, 0) << where << "\n  " << k << " has no expiry";
    EXPECT_LE(pttl, need) << where << "\n  an expiry past the latest grant";
    EXPECT_GE(pttl + 1000, need) << where << "\n  " << k << " expires before its latest grant";
  }
  return want;
}

struct TraceConfig {
  uint32_t seed = 1;
  int steps = 3000;
  int buckets = 3;
  int clients = 8;  // per bucket
  int64_t max_hold_ms = 2000;
};

void RunQuotaTrace(const RedisServer& server, const TraceConfig& config) {
  std::cout << "quota differential trace: seed=" << config.seed << " steps=" << config.steps
            << "\n";
  std::mt19937_64 rng(config.seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  const std::string prefix = "dquota" + std::to_string(config.seed);
  struct Bucket {
    std::string key;
    QuotaShareState twin;
    int64_t rate = 0;
  };
  auto some_rate = [&]() -> int64_t {
    switch (pick(5)) {
      case 0: return 1 + pick(10);  // below one request per second
      case 1: return 1000 * (1 + pick(100));
      case 2: return internal::kMaxQuotaRateMilli;
      default: return 1 + pick(1'000'000);
    }
  };
  auto some_demand = [&](int64_t rate) -> int64_t {
    switch (pick(6)) {
      case 0: return 0;
      case 1: return internal::kMaxQuotaRateMilli;
      case 2: return pick(rate + 1);  // at most the rate
      case 3: return std::min(internal::kMaxQuotaRateMilli, rate + pick(rate + 1));  // or more
      default: return pick(std::max<int64_t>(2, rate / 3));
    }
  };
  std::vector<Bucket> buckets(static_cast<size_t>(config.buckets));
  for (int i = 0; i < config.buckets; ++i) {
    Bucket& b = buckets[static_cast<size_t>(i)];
    b.key = prefix + ":{q:bucket" + std::to_string(i) + "}:qs";
    b.rate = some_rate();
  }
  int64_t now = 1'700'000'000'000 + 11 * static_cast<int64_t>(config.seed);
  std::map<std::string, int> seen;
  for (int step = 0; step < config.steps && !::testing::Test::HasFailure(); ++step) {
    Bucket& b = buckets[static_cast<size_t>(pick(config.buckets))];
    // Time: stay, onto (or 1 ms before) the bucket's next expiry, past every hold, or a
    // little (so that clients mostly renew before their hold ends).
    const int64_t time_kind = pick(40);
    if (time_kind < 12) {
      ++seen["time: stay"];
    } else if (time_kind < 18) {
      int64_t next = 0;
      for (const auto& [client, c] : b.twin.clients) {
        if (c.expires_ms > now && (next == 0 || c.expires_ms < next)) next = c.expires_ms;
      }
      if (next > 0) {
        const int64_t before = pick(2);
        now = std::max(now, next - before);
        ++seen[now == next ? "time: at an expiry" : "time: 1 ms before an expiry"];
      }
    } else if (time_kind == 18) {
      now += config.max_hold_ms + pick(3);
    } else {
      now += pick(config.max_hold_ms / 50 + 1);
    }
    if (pick(50) == 0) {
      b.rate = some_rate();  // a config change mid-trace
      ++seen["rate changed"];
    }
    if (pick(150) == 0) {
      // The index lost (evicted, deleted by hand): the next call rebuilds it from the hash.
      server.Command({"DEL", IndexKey(b.key)});
      ++seen["index lost"];
    }
    if (pick(300) == 0) {
      // The hash lost: the index alone is no bucket; the next call starts it afresh.
      server.Command({"DEL", b.key});
      b.twin = QuotaShareState{};
      ++seen["hash lost"];
    }
    if (pick(300) == 0) {
      // A value of another type at the index: deleted, rebuilt from the hash.
      server.Command({"DEL", IndexKey(b.key)});
      server.Command({"SET", IndexKey(b.key), "foreign", "PX", "600000"});
      ++seen["foreign index"];
    }
    if (pick(80) == 0) {
      // A field sluice never writes: the next call drops it, as the twin never had it.
      server.Command({"HSET", b.key, "junk", pick(2) ? "not numbers" : "1 2"});
      if (server.Command({"PTTL", b.key}).integer == -1) {
        server.Command({"PEXPIRE", b.key, "600000"});
      }
      ++seen["junk field"];
    }
    if (pick(150) == 0) {
      // A value of another type: the next call takes it for no bucket at all.
      server.Command({"DEL", b.key});
      server.Command({"SET", b.key, "foreign", "PX", "600000"});
      b.twin = QuotaShareState{};
      ++seen["foreign value"];
    }
    QuotaShareArgs args;
    args.client = "c" + std::to_string(pick(config.clients));
    if (pick(20) == 0) args.client += "\xff\x01 ";
    args.release = pick(10) == 0;
    args.rate_milli = b.rate;
    args.demand_milli = some_demand(b.rate);
    args.hold_ms = 1 + pick(pick(3) == 0 ? 10 : config.max_hold_ms);
    args.headroom_percent = pick(3) == 0 ? 100 + pick(9901) : 200;
    // Now and then a budget of a few clients: some are refused.
    if (pick(8) == 0) args.budget_bytes = internal::QuotaClientCost("cc") * (1 + pick(5));
    const bool known = b.twin.clients.count(args.client) > 0;
    const std::size_t before = b.twin.clients.size();
    const QuotaShareReply r =
        Both(server, b.key, b.twin, args, now,
             "seed " + std::to_string(config.seed) + " step " + std::to_string(step) + ":");
    if (args.release) {
      ++seen[known ? "release live" : "release unknown"];
    } else {
      ++seen[known ? "renew" : "join"];
      if (r.full) ++seen["full"];
      if (r.grant_milli == 0) ++seen["grant 0"];
      if (!known && !r.full && r.grant_milli > 0 &&
          r.assigned_milli > args.rate_milli - args.rate_milli / internal::kQuotaReservePart) {
        ++seen["newcomer takes the reserve"];
      }
      if (r.total_demand_milli < args.rate_milli && args.demand_milli > 0) ++seen["headroom"];
      if (r.assigned_milli == args.rate_milli) ++seen["rate fully assigned"];
      if (r.grant_milli > 0 && r.grant_milli < args.demand_milli) ++seen["less than demand"];
    }
    // Without a fold the call leaves one client more (a join), one less (a release of a
    // recorded client) or as many.
    const int64_t unfolded = static_cast<int64_t>(before) +
                             (!args.release && !known && !r.full ? 1 : 0) -
                             (args.release && known ? 1 : 0);
    if (r.clients < unfolded) ++seen["folded out"];
  }
  std::cout << "  reached:";
  for (const auto& [what, n] : seen) std::cout << " [" << what << "]=" << n;
  std::cout << "\n";
  for (const char* what :
       {"join", "renew", "release live", "release unknown", "grant 0", "headroom",
        "rate fully assigned", "less than demand", "time: at an expiry",
        "time: 1 ms before an expiry", "rate changed", "junk field", "index lost", "full",
        "newcomer takes the reserve", "folded out"}) {
    EXPECT_GT(seen[what], 0) << "seed " << config.seed << " never reached: " << what;
  }
  EXPECT_EQ(server.KeysWithoutTtl(prefix + ":*"), std::vector<std::string>{});
}

TEST(QuotaDifferential, RandomTraces) {
  RedisServer server;
  for (uint32_t seed : {20261204u, 3u, 55u, 808u}) {
    RunQuotaTrace(server, {.seed = seed, .clients = 4 + static_cast<int>(seed % 9)});
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(QuotaDifferential, ShortHoldsCrossExpiriesOften) {
  RedisServer server;
  for (uint32_t seed : {9u, 99u}) {
    RunQuotaTrace(server, {.seed = seed, .steps = 2000, .clients = 12, .max_hold_ms = 30});
    if (::testing::Test::HasFailure()) return;
  }
}

// 2,000 clients (the old cap was 1,024): all recorded and granted; a mass expiry is folded
// out 8 per call; a bucket at its budget refuses a newcomer (full) until one leaves.
TEST(QuotaDifferential, ManyClientsTheFoldAndTheBudget) {
  RedisServer server;
  const std::string key = "many:{q:b}:qs";
  QuotaShareState twin;
  const int64_t t = 1'700'000'000'000;
  QuotaShareArgs args{.demand_milli = 1000, .rate_milli = 10'000'000, .hold_ms = 5000};
  for (int i = 0; i < 2000; ++i) {
    args.client = "client" + std::to_string(i);
    args.hold_ms = i < 20 ? 1000 : 5000;  // the first 20 end first
    // The replies only (the whole bucket is compared below: each comparison reads it all).
    const QuotaShareReply want = QuotaShareStep(twin, args, t);
    QuotaShareReply got;
    std::string error;
    ASSERT_TRUE(Parse(Eval(server, key, std::to_string(t), args), got, error)) << error;
    ASSERT_EQ(Show(got), Show(want)) << args.client;
    ASSERT_EQ(got.clients, i + 1);
    ASSERT_GT(got.grant_milli, 0);
  }
  args.client = "client1999";
  EXPECT_EQ(Both(server, key, twin, args, t + 1000, "fold").clients, 2000 - 8);
  EXPECT_EQ(Both(server, key, twin, args, t + 1001, "fold").clients, 2000 - 16);
  EXPECT_EQ(Both(server, key, twin, args, t + 1002, "fold").clients, 2000 - 20);
  args.budget_bytes = twin.bytes;  // full
  args.client = "newcomer";
  QuotaShareReply r = Both(server, key, twin, args, t + 1003, "over the budget");
  EXPECT_TRUE(r.full);
  EXPECT_EQ(r.grant_milli, 0);
  EXPECT_EQ(server.Command({"HEXISTS", key, "newcomer"}).integer, 0);
  Both(server, key, twin, {.client = "client300", .release = true}, t + 1004, "release");
  r = Both(server, key, twin, args, t + 1005, "joins after a release");
  EXPECT_FALSE(r.full);
  EXPECT_GT(r.grant_milli, 0);
}

// A bucket written by an earlier release (a hash of clients, no sums, no index) is
// rebuilt at its first call and agrees with a twin that had the same clients.
TEST(QuotaDifferential, ABucketOfTheEarlierFormatIsRebuilt) {
  RedisServer server;
  const std::string key = "old:{q:b}:qs";
  const int64_t t = 1'700'000'000'000;
  QuotaShareState twin;
  for (const auto& [client, c] : std::map<std::string, QuotaClient>{
           {"a", {t + 3000, 600, 500}}, {"b", {t + 10, 300, 300}}, {"c", {t + 5000, 0, 0}}}) {
    server.Command({"HSET", key, client,
                    std::to_string(c.expires_ms) + " " + std::to_string(c.demand_milli) + " " +
                        std::to_string(c.grant_milli)});
    twin.clients[client] = c;
    twin.by_expiry.insert({c.expires_ms, client});
    twin.demand_milli += c.demand_milli;
    twin.grant_milli += c.grant_milli;
    twin.bytes += internal::QuotaClientCost(client);
  }
  server.Command({"PEXPIRE", key, "100000"});
  const QuotaShareReply r = Both(
      server, key, twin, {.client = "d", .demand_milli = 100, .rate_milli = 1000, .hold_ms = 100},
      t + 20, "first call");
  EXPECT_EQ(r.clients, 3);  // b folded out, d recorded
}

TEST(QuotaDifferential, AKeyThatLostItsExpiryGetsOneBackAtEveryCall) {
  RedisServer server;
  const std::string key = "persist:{q:b}:qs";
  QuotaShareState twin;
  const int64_t t = 1'700'000'000'000;
  Both(server, key, twin, {.client = "a", .demand_milli = 5, .rate_milli = 10, .hold_ms = 3000}, t,
       "a");
  Both(server, key, twin, {.client = "b", .demand_milli = 5, .rate_milli = 10, .hold_ms = 100}, t,
       "b");
  for (const QuotaShareArgs& args :
       {QuotaShareArgs{.client = "c", .demand_milli = 5, .rate_milli = 10, .hold_ms = 10},
        QuotaShareArgs{.client = "zzz", .release = true},
        QuotaShareArgs{.client = "b", .release = true}}) {
    server.Command({"PERSIST", key});
    server.Command({"PERSIST", IndexKey(key)});
    ASSERT_EQ(server.Command({"PTTL", key}).integer, -1);
    Both(server, key, twin, args, t + 50, "after PERSIST");  // checks PTTL > 0
  }
  EXPECT_EQ(server.KeysWithoutTtl("persist:*"), std::vector<std::string>{});
}

TEST(QuotaDifferential, ArgumentsOutOfRangeAreErrorReplies) {
  RedisServer server;
  const std::string key = "bad:{q:b}:qs";
  const QuotaShareArgs good{
      .client = "a", .demand_milli = 5, .rate_milli = 10, .hold_ms = 100, .headroom_percent = 200};
  auto error_of = [&](QuotaShareArgs args, std::string now = "1700000000000") {
    const RedisValue v = Eval(server, key, now, args);
    return v.type == RedisValue::Type::kError ? v.str : "not an error: " + ShowReply(v);
  };
  QuotaShareArgs a = good;
  a.client = "";
  EXPECT_NE(error_of(a).find("client must be 1-64 bytes"), std::string::npos);
  a.client = std::string(65, 'x');
  EXPECT_NE(error_of(a).find("client must be 1-64 bytes"), std::string::npos);
  a = good;
  a.demand_milli = -1;
  EXPECT_NE(error_of(a).find("demand_milli must be an integer from 0"), std::string::npos);
  a = good;
  a.rate_milli = 0;
  EXPECT_NE(error_of(a).find("rate_milli must be an integer from 1"), std::string::npos);
  a.rate_milli = internal::kMaxQuotaRateMilli + 1;
  EXPECT_NE(error_of(a).find("rate_milli"), std::string::npos);
  a = good;
  a.hold_ms = 0;
  EXPECT_NE(error_of(a).find("hold (ms) must be"), std::string::npos);
  a = good;
  a.headroom_percent = 99;
  EXPECT_NE(error_of(a).find("headroom_percent must be an integer from 100 to 10000"),
            std::string::npos);
  // The twin's checks agree, argument by argument.
  for (QuotaShareArgs bad : {QuotaShareArgs{.client = ""},
                             QuotaShareArgs{.client = "a",
                             .demand_milli = 1,
                             .rate_milli = 10,
                             .hold_ms = 1,
                             .headroom_percent = 10'001},
                             QuotaShareArgs{.client = "a", .demand_milli = 1, .hold_ms = 1}}) {
    EXPECT_FALSE(internal::ValidateQuotaShareArgs(bad).ok());
    EXPECT_EQ(Eval(server, key, "1", bad).type, RedisValue::Type::kError);
  }
  EXPECT_TRUE(internal::ValidateQuotaShareArgs(good).ok());
  // A release reads only the client.
  EXPECT_EQ(Eval(server, key, "1", {.client = "a", .release = true}).type,
            RedisValue::Type::kArray);
  EXPECT_EQ(server.Command({"EXISTS", key}).integer, 0);
}

TEST(QuotaDifferential, TheRedisClockHasNoGrace) {
  RedisServer server;
  const std::string key = "clock:{q:b}:qs";
  const int64_t before = server.NowMs();
  const RedisValue v = Eval(
      server, key, "", {.client = "a", .demand_milli = 5, .rate_milli = 10, .hold_ms = 30'000});
  ASSERT_EQ(v.type, RedisValue::Type::kArray) << ShowReply(v);
  const std::map<std::string, QuotaClient> stored = Stored(server, key);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_GE(stored.at("a").expires_ms, before + 30'000);
  EXPECT_LT(stored.at("a").expires_ms, before + 31'000);
  const long long pttl = server.Command({"PTTL", key}).integer;
  EXPECT_LE(pttl, 30'000);
  EXPECT_GT(pttl, 29'000);
}

}  // namespace
}  // namespace sluice::differential_quota_test

// A Redis whose maxmemory-policy can evict sluice's keys (every key has an expiry, so any
// policy but noeviction can) is never met in silence: the client reads the policy and
// the server's evicted_keys at start and every eviction_check_interval, shows them in
// Health() and the metrics, warns once, and limiters that refuse such a store are
// answered by their failure policy while it can evict. Against a real redis-server whose
// policy is changed with CONFIG SET while the client runs.
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/metrics.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Eventually;

struct Warnings {
  std::mutex mu;
  std::vector<std::string> seen;
  std::vector<std::string> Get() {
    std::lock_guard lock(mu);
    return seen;
  }
};

std::shared_ptr<Client> Connect(const testing::RedisServer& redis, Warnings* warnings,
                                std::string url = {}) {
  ClientOptions options{.url = url.empty() ? redis.url() : url,
                        .deadline = milliseconds(500),
                        .eviction_check_interval = milliseconds(100)};
  if (warnings) {
    options.on_warning = [warnings](const std::string& w) {
      std::lock_guard lock(warnings->mu);
      warnings->seen.push_back(w);
    };
  }
  auto client = Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status().message();
  return client.ok() ? *client : nullptr;
}

double Sample(const Client& client, const std::string& name) {
  for (const MetricSample& s : client.Metrics())
    if (s.name == name) return s.value;
  return -1;
}

void SetPolicy(const testing::RedisServer& redis, const std::string& policy) {
  ASSERT_EQ(redis.Command({"CONFIG", "SET", "maxmemory-policy", policy}).str, "OK");
}

TEST(Eviction, ThePolicyIsReadAtStartAndFollowedWithOneWarning) {
  testing::RedisServer redis;
  Warnings warnings;
  auto client = Connect(redis, &warnings);
  ASSERT_TRUE(client);
  // Read before Create returned (it waits for the first reading).
  StoreHealth health = client->Health();
  EXPECT_EQ(health.memory_policy, "noeviction");
  EXPECT_FALSE(health.evicting);
  EXPECT_EQ(health.memory_policy_error, "");
  EXPECT_EQ(Sample(*client, "sluice_store_evicting"), 0);
  EXPECT_TRUE(warnings.Get().empty());

  SetPolicy(redis, "volatile-lru");
  ASSERT_TRUE(Eventually([&] { return client->Health().evicting; }, seconds(5)));
  EXPECT_EQ(client->Health().memory_policy, "volatile-lru");
  EXPECT_EQ(Sample(*client, "sluice_store_evicting"), 1);
  ASSERT_TRUE(Eventually([&] { return !warnings.Get().empty(); }, seconds(5)));
  EXPECT_NE(warnings.Get()[0].find("volatile-lru"), std::string::npos) << warnings.Get()[0];
  EXPECT_NE(warnings.Get()[0].find("noeviction"), std::string::npos) << warnings.Get()[0];
  // Readings go on (every 100 ms) without another warning for the same policy.
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_EQ(warnings.Get().size(), 1u);

  // Back to noeviction, then evicting again: warned again.
  SetPolicy(redis, "noeviction");
  ASSERT_TRUE(Eventually([&] { return !client->Health().evicting; }, seconds(5)));
  SetPolicy(redis, "allkeys-lfu");
  ASSERT_TRUE(Eventually([&] { return warnings.Get().size() == 2; }, seconds(5)));
  EXPECT_NE(warnings.Get()[1].find("allkeys-lfu"), std::string::npos) << warnings.Get()[1];
}

TEST(Eviction, KeysTheServerEvictsAreCountedAndWarnedOf) {
  testing::RedisServer redis;
  Warnings warnings;
  auto client = Connect(redis, &warnings);
  ASSERT_TRUE(client);
  SetPolicy(redis, "volatile-lru");
  ASSERT_TRUE(Eventually([&] { return warnings.Get().size() == 1; }, seconds(5)));
  EXPECT_EQ(client->Health().evicted_keys, 0);
  // A small maxmemory, then more ids than fit: Redis evicts sluice's keys.
  ASSERT_EQ(redis.Command({"CONFIG", "SET", "maxmemory", "3mb"}).str, "OK");
  auto limiter = client->MakeLimiter("otp", {.limit = 3, .window = seconds(600)});
  ASSERT_TRUE(limiter.ok());
  // Until the server has evicted some (at most 100,000 ids).
  auto server_evicted = [&] {
    const std::string info = redis.Command({"INFO", "stats"}).str;
    const auto at = info.find("evicted_keys:");
    return at == std::string::npos ? 0 : std::stoll(info.substr(at + 13));
  };
  for (int i = 0; i < 100'000 && (i % 1000 != 0 || server_evicted() == 0); ++i) {
    auto d = limiter->Check("user:" + std::to_string(i));
    ASSERT_TRUE(d.ok()) << d.status().message();
  }
  ASSERT_GT(server_evicted(), 0);
  ASSERT_TRUE(Eventually([&] { return client->Health().evicted_keys > 0; }, seconds(5)));
  EXPECT_GT(Sample(*client, "sluice_store_evicted_keys"), 0);
  ASSERT_TRUE(Eventually([&] { return warnings.Get().size() == 2; }, seconds(5)));
  EXPECT_NE(warnings.Get()[1].find("evicted"), std::string::npos) << warnings.Get()[1];
}

TEST(Eviction, ALimiterThatMustNotBeResetRefusesAnEvictingStore) {
  testing::RedisServer redis;
  auto client = Connect(redis, nullptr);
  ASSERT_TRUE(client);
  const Limit limit{.limit = 3, .window = seconds(600)};
  const LimiterOptions refusing{.on_failure = FailurePolicy::kClosed,
                                .refuse_evicting_store = true};
  auto login = client->MakeLimiter("login", limit, refusing);
  ASSERT_TRUE(login.ok()) << login.status().message();
  auto plain = client->MakeLimiter("search", limit, {.on_failure = FailurePolicy::kClosed});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(login->Check("u1")->source, DecisionSource::kStore);

  SetPolicy(redis, "allkeys-lru");
  ASSERT_TRUE(Eventually([&] { return client->Health().evicting; }, seconds(5)));
  // The refusing limiter is answered by its policy; the other one by the store.
  auto refused = login->Check("u1");
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->source, DecisionSource::kFailClosed);
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(plain->Check("u1")->source, DecisionSource::kStore);
  // New ones are not made at all.
  auto otp = client->MakeLimiter("otp", limit, refusing);
  ASSERT_FALSE(otp.ok());
  EXPECT_EQ(otp.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(otp.status().message().find("allkeys-lru"), std::string::npos)
      << otp.status().message();
  auto slots = client->MakeConcurrencyLimiter(
      "exports", {.limit = 2, .on_failure = FailurePolicy::kClosed, .refuse_evicting_store = true});
  ASSERT_FALSE(slots.ok());
  EXPECT_EQ(slots.status().code(), StatusCode::kFailedPrecondition);

  SetPolicy(redis, "noeviction");
  ASSERT_TRUE(
      Eventually([&] { return login->Check("u2")->source == DecisionSource::kStore; }, seconds(5)));
  EXPECT_TRUE(client->MakeLimiter("otp", limit, refusing).ok());
}

// The application's ACL rule set (docs/design.md §8) has INFO but not CONFIG: enough.
TEST(Eviction, TheApplicationsAclRuleSetReadsThePolicy) {
  testing::RedisServer redis;
  std::vector<std::string> setuser = {"ACL",       "SETUSER",   "sluice-app",    "on",   ">pw",
                                      "resetkeys", "~sluice:*", "resetchannels", "-@all"};
  for (const char* c : {"+info",
                        "+script|load",
                        "+evalsha",
                        "+eval",
                        "+time",
                        "+get",
                        "+set",
                        "+setrange",
                        "+del",
                        "+pexpire",
                        "+pttl",
                        "+incrby",
                        "+decrby",
                        "+pexpireat",
                        "+pexpiretime",
                        "+zadd",
                        "+zcard",
                        "+zcount",
                        "+zrange",
                        "+zrem",
                        "+zremrangebyrank",
                        "+zremrangebyscore",
                        "+zscore",
                        "+xadd"})
    setuser.push_back(c);
  ASSERT_EQ(redis.Command(setuser).str, "OK");
  auto client =
      Connect(redis, nullptr, "redis://sluice-app:pw@127.0.0.1:" + std::to_string(redis.port()));
  ASSERT_TRUE(client);
  EXPECT_EQ(client->Health().memory_policy, "noeviction");
  EXPECT_EQ(client->Health().memory_policy_error, "");
  SetPolicy(redis, "volatile-ttl");
  ASSERT_TRUE(Eventually([&] { return client->Health().evicting; }, seconds(5)));
}

// Until a reading succeeds the policy is unknown (no gauge, nothing refused), with the
// reason; readings are retried every second, so it is known soon after the store is up.
TEST(Eviction, AStoreNotReachedYetLeavesThePolicyUnknownUntilItIs) {
  testing::RedisServer redis;
  redis.Kill();
  ClientOptions options{.url = redis.url(),
                        .deadline = milliseconds(50),
                        .connect_timeout = milliseconds(200),
                        .connect_in_background = true,
                        .eviction_check_interval = seconds(60)};
  auto client = Client::Create(std::move(options));
  ASSERT_TRUE(client.ok()) << client.status().message();
  ASSERT_TRUE(
      Eventually([&] { return (*client)->Health().memory_policy_error != ""; }, seconds(5)));
  EXPECT_EQ((*client)->Health().memory_policy, "");
  EXPECT_FALSE((*client)->Health().evicting);
  EXPECT_EQ(Sample(**client, "sluice_store_evicting"), -1);
  auto login = (*client)->MakeLimiter("login", {.limit = 3, .window = seconds(60)},
                                      {.refuse_evicting_store = true});
  EXPECT_TRUE(login.ok()) << login.status().message();
  redis.Start();
  ASSERT_TRUE(
      Eventually([&] { return (*client)->Health().memory_policy == "noeviction"; }, seconds(10)));
  EXPECT_EQ((*client)->Health().memory_policy_error, "");
  EXPECT_EQ(Sample(**client, "sluice_store_evicting"), 0);
}

}  // namespace
}  // namespace sluice

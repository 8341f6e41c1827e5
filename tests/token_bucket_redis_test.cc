// The token bucket on a real redis-server through the public API: semantics on Redis's
// clock and on a model clock (boundaries 1 ms before and at each refill), peek, refund and
// reset, the key and its TTL rules (expiry = full time, repaired on touch, stale state
// pruned), and exactness under contention (processes x threads on one key).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/processes.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice::token_bucket_redis_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::RedisServer;

constexpr char kPrefix[] = "tbtest";
constexpr int64_t kT0 = 1'700'000'000'000;

// A stored bucket: four big-endian doubles, as token_bucket.lua packs them.
std::string Pack(std::initializer_list<int64_t> values) {
  std::string out;
  for (int64_t v : values) {
    const auto bits = std::bit_cast<uint64_t>(static_cast<double>(v));
    for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(bits >> shift));
  }
  return out;
}
std::vector<int64_t> Unpack(const std::string& value) {
  std::vector<int64_t> fields;
  for (std::size_t at = 0; at + 8 <= value.size(); at += 8) {
    uint64_t bits = 0;
    for (std::size_t i = 0; i < 8; ++i) bits = bits << 8 | static_cast<uint8_t>(value[at + i]);
    fields.push_back(static_cast<int64_t>(std::bit_cast<double>(bits)));
  }
  return fields;
}
// Whole tokens missing in a stored bucket (a fraction counts as a whole token), or -1
// for another value.
int64_t UsedOf(const std::string& value) {
  const std::vector<int64_t> f = Unpack(value);
  if (value.size() != 32) return -1;
  return f[0] + (f[1] > 0 ? 1 : 0);
}

Limit Bucket(int64_t capacity, int64_t refill, milliseconds window) {
  return {
      .algorithm = Algorithm::kTokenBucket, .limit = capacity, .window = window, .refill = refill};
}

class TokenBucketRedis : public testing::RedisAlgorithmTest {
 protected:
  // Every call here must reach the script: no denial cache, and a store failure is a
  // refusal that says so, never an admission.
  TokenBucketRedis() : RedisAlgorithmTest(kPrefix, testing::ScriptOptions()) {}
};

TEST_F(TokenBucketRedis, AdmitsTheCapacityAndDoesNotCountRefusals) {
  // 3 tokens, one back per second: nothing comes back while the test runs.
  auto limiter = *Connect()->MakeLimiter("login", Limit::TokenBucket(3, 1));
  // Redis's clock runs while the test does (slowly on a loaded box): the next token is
  // at most a second after the first spend, so bounds below allow for what has passed.
  const auto start = std::chrono::steady_clock::now();
  const auto passed = [&start] {
    return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start) +
           milliseconds(2);  // Redis TIME is read in whole milliseconds
  };
  for (int64_t i = 2; i >= 0; --i) {
    auto d = limiter.Check("account:101");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->remaining, i);
    EXPECT_EQ(d->limit, 3);
    EXPECT_EQ(d->source, DecisionSource::kStore);
  }
  const std::string key = *limiter.KeyFor("account:101");
  const std::string spent = Get(key);
  for (int i = 0; i < 5; ++i) {
    auto d = limiter.Check("account:101");
    ASSERT_THAT(d, IsOk());
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->reason, RefusalReason::kOverLimit);
    EXPECT_EQ(d->remaining, 0);
    EXPECT_GE(d->retry_after, milliseconds(1000) - passed());
    EXPECT_LE(d->retry_after, milliseconds(1000));
    EXPECT_GE(d->reset_after, milliseconds(3000) - passed());
    EXPECT_LE(d->reset_after, milliseconds(3000));
    EXPECT_EQ(d->RetryAfterSeconds(), 1);
  }
  EXPECT_EQ(Get(key), spent) << "refusals took nothing and wrote nothing";
  EXPECT_EQ(UsedOf(spent), 3) << spent;
  EXPECT_TRUE(limiter.Check("account:402")->allowed) << "another id has its own bucket";
}

TEST_F(TokenBucketRedis, BoundariesOnAModelClock) {
  // 5 tokens, 3 per second: tokens come back at 333⅓, 666⅔, 1000 ms... after emptying.
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto limiter = *Connect(clock)->MakeLimiter("edge", Bucket(5, 3, seconds(1)));
  auto all = limiter.Check("x", {.cost = 5});
  ASSERT_TRUE(all->allowed);
  EXPECT_EQ(all->reset_after, milliseconds(1667));
  auto empty = limiter.Check("x");
  EXPECT_FALSE(empty->allowed);
  EXPECT_EQ(empty->retry_after, milliseconds(334));
  clock->Advance(milliseconds(333));  // 1 ms before the first token
  auto before = limiter.Check("x");
  EXPECT_FALSE(before->allowed);
  EXPECT_EQ(before->retry_after, milliseconds(1));
  clock->Advance(milliseconds(1));  // exactly when it is back
  auto at = limiter.Check("x");
  EXPECT_TRUE(at->allowed);
  EXPECT_EQ(at->remaining, 0);
  EXPECT_EQ(at->reset_after, milliseconds(1666));  // full at 1666⅔ + 333⅓ ms
  // The second token is back at 666⅔ ms: refused at 666, admitted at 667.
  clock->Advance(milliseconds(332));
  auto second = limiter.Check("x");
  EXPECT_FALSE(second->allowed);
  EXPECT_EQ(second->retry_after, milliseconds(1));
  clock->Advance(milliseconds(1));
  EXPECT_TRUE(limiter.Check("x")->allowed);
}

TEST_F(TokenBucketRedis, TheKeyExpiresWhenTheBucketIsFull) {
  auto limiter = *Connect()->MakeLimiter("api", Bucket(100, 10, seconds(60)));
  auto d = limiter.Check("u", {.cost = 30});  // 30 tokens at 10 per minute: 180 s
  ASSERT_TRUE(d->allowed);
  EXPECT_GT(d->reset_after, milliseconds(179'000));
  EXPECT_LE(d->reset_after, milliseconds(180'000));
  const std::string key = *limiter.KeyFor("u");
  EXPECT_EQ(key, std::string(kPrefix) + ":{api:u}:tb");
  const int64_t pttl = Pttl(key);
  EXPECT_GT(pttl, 179'000);
  EXPECT_LE(pttl, d->reset_after.count());
  // A bucket that is full again has no key: its refund fills it and deletes the key.
  EXPECT_TRUE(limiter.Refund("u", 30)->allowed);
  EXPECT_TRUE(server_.Keys(std::string(kPrefix) + ":*").empty());
}

TEST_F(TokenBucketRedis, StaleStateIsPrunedByTheCallThatReadsIt) {
  // On a model clock the key outlives its full time by the grace; the next call must
  // see a full bucket and drop the key.
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto limiter = *Connect(clock)->MakeLimiter("stale", Bucket(4, 4, seconds(1)));
  ASSERT_TRUE(limiter.Check("s", {.cost = 4})->allowed);
  const std::string key = *limiter.KeyFor("s");
  clock->Advance(milliseconds(1000));
  ASSERT_FALSE(server_.Keys(key).empty()) << "the grace keeps the key in Redis";
  auto peek = limiter.Peek("s");
  EXPECT_TRUE(peek->allowed);
  EXPECT_EQ(peek->remaining, 4);
  EXPECT_EQ(peek->reset_after, milliseconds(0));
  EXPECT_TRUE(server_.Keys(key).empty());
}

TEST_F(TokenBucketRedis, CostIsAllOrNothingAndCostAboveCapacityCreatesNoKey) {
  auto limiter = *Connect()->MakeLimiter("upload", Bucket(10, 1, seconds(60)));
  EXPECT_TRUE(limiter.Check("u", {.cost = 7})->allowed);
  auto d = limiter.Check("u", {.cost = 4});
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->remaining, 3);
  EXPECT_EQ(d->reason, RefusalReason::kOverLimit);
  EXPECT_TRUE(limiter.Check("u", {.cost = 3})->allowed);
  auto too_big = limiter.Check("v", {.cost = 11});
  EXPECT_FALSE(too_big->allowed);
  EXPECT_EQ(too_big->reason, RefusalReason::kCostExceedsLimit);
  EXPECT_TRUE(server_.Keys(std::string(kPrefix) + ":{upload:v}:tb").empty());
}

TEST_F(TokenBucketRedis, PeekRefundAndReset) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto limiter = *Connect(clock)->MakeLimiter("ops", Bucket(10, 10, seconds(1)));
  // Peek on a missing key: full, and nothing is created.
  auto fresh = limiter.Peek("p", {.cost = 10});
  EXPECT_TRUE(fresh->allowed);
  EXPECT_EQ(fresh->remaining, 10);
  EXPECT_TRUE(server_.Keys(std::string(kPrefix) + ":*").empty());
  ASSERT_TRUE(limiter.Check("p", {.cost = 6})->allowed);
  clock->Advance(milliseconds(50));  // 5.5 missing
  auto peek = limiter.Peek("p", {.cost = 5});
  EXPECT_FALSE(peek->allowed);
  EXPECT_EQ(peek->remaining, 4);
  EXPECT_EQ(peek->reset_after, milliseconds(550));
  EXPECT_EQ(peek->retry_after, milliseconds(50));
  auto refund = limiter.Refund("p", 2);  // 3.5 missing
  EXPECT_TRUE(refund->allowed);
  EXPECT_EQ(refund->remaining, 6);
  EXPECT_EQ(refund->reset_after, milliseconds(350));
  EXPECT_TRUE(limiter.Peek("p", {.cost = 5})->allowed);
  auto reset = limiter.Reset("p");
  EXPECT_TRUE(reset->allowed);
  EXPECT_EQ(reset->remaining, 10);
  EXPECT_TRUE(server_.Keys(std::string(kPrefix) + ":*").empty());
  // A refund on a full bucket is a no-op that creates nothing.
  EXPECT_EQ(limiter.Refund("p", 3)->remaining, 10);
  EXPECT_TRUE(server_.Keys(std::string(kPrefix) + ":*").empty());
}

TEST_F(TokenBucketRedis, KeyThatLostItsExpiryGetsItBackOnTouch) {
  auto limiter = *Connect()->MakeLimiter("persist", Bucket(2, 1, seconds(20)));
  const std::string key = *limiter.KeyFor("victim");
  // Admitted path: the write sets the expiry again.
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  EXPECT_GT(Pttl(key), 0);
  // Refused path: the bucket is empty; a refusal gives the expiry back...
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  ASSERT_FALSE(limiter.Check("victim")->allowed);
  const int64_t pttl = Pttl(key);
  EXPECT_GT(pttl, 39'000);
  EXPECT_LE(pttl, 40'000);
  // ...and never moves an existing one.
  EXPECT_FALSE(limiter.Check("victim")->allowed);
  EXPECT_LE(Pttl(key), pttl);
  // Peek path.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  EXPECT_FALSE(limiter.Peek("victim")->allowed);
  EXPECT_GT(Pttl(key), 0);
}

TEST_F(TokenBucketRedis, SeededWithoutTtlTheNextCallGivesItOne) {
  auto limiter = *Connect()->MakeLimiter("seeded", Bucket(5, 5, seconds(10)));
  const std::string key = *limiter.KeyFor("s");
  const int64_t now = RedisNowMs();
  // 5 tokens missing as of now, full in 10 s — written without any expiry.
  ASSERT_EQ(server_.Command({"SET", key, Pack({5, 0, now, 10'000})}).str, "OK");
  ASSERT_EQ(Pttl(key), -1);
  auto d = limiter.Check("s");
  EXPECT_FALSE(d->allowed);
  EXPECT_GT(Pttl(key), 9'000);
  EXPECT_LE(Pttl(key), 10'000);
  // A value sluice did not write is dropped by the call that reads it: a full bucket.
  ASSERT_EQ(server_.Command({"SET", key, "not a bucket"}).str, "OK");
  auto peek = limiter.Peek("s");
  EXPECT_TRUE(peek->allowed);
  EXPECT_EQ(peek->remaining, 5);
  EXPECT_TRUE(server_.Keys(key).empty());
  ASSERT_EQ(server_.Command({"SET", key, "garbage"}).str, "OK");
  EXPECT_EQ(limiter.Check("s")->remaining, 4);
  EXPECT_GT(Pttl(key), 0);
}

TEST_F(TokenBucketRedis, PlanChangeAppliesOnTheNextCallWithoutReset) {
  auto limiter = *Connect()->MakeLimiter("plan", Limit::TokenBucket(2, 1));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_FALSE(limiter.Check("acct")->allowed);
  auto d = limiter.Check("acct", {.limit = Limit::TokenBucket(4, 1)});
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 1);
  EXPECT_EQ(d->limit, 4);
  // Back to 2: 3 are missing, more than the bucket holds: it is empty, and the next
  // token is a second away (not the 2 s the old deficit would take).
  auto down = limiter.Check("acct");
  EXPECT_FALSE(down->allowed);
  EXPECT_EQ(down->remaining, 0);
  // (Redis's clock ran since the first spend: allow for it, as above.)
  EXPECT_GE(down->retry_after,
            milliseconds(1000) - milliseconds(2) -
                std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start));
  EXPECT_LE(down->retry_after, milliseconds(1000));
}

// ---------------------------------------------------------------------------------------
// Exactness under contention

// In a child process: `threads` threads each make `calls` checks; returns admitted cost.
int64_t Hammer(const std::string& url, int threads, int calls, int64_t capacity, bool mixed_costs) {
  auto client = Client::Create({.url = url,
                                .prefix = kPrefix,
                                .deadline = milliseconds(5000),
                                .on_failure = FailurePolicy::kClosed,
                                .denial_cache_size = 0});
  if (!client.ok()) return -1;
  // One token back per 366 days: nothing refills while the test runs.
  auto limiter = *(*client)->MakeLimiter("hot", Bucket(capacity, 1, kMaxWindow));
  return testing::HammerOneId(limiter, threads, calls, mixed_costs, {DecisionSource::kStore});
}

int64_t RunProcesses(const RedisServer& server, int processes, int threads, int calls,
                     int64_t capacity, bool mixed_costs) {
  return testing::SumOverChildren(
      processes, [&] { return Hammer(server.url(), threads, calls, capacity, mixed_costs); });
}

TEST_F(TokenBucketRedis, ProcessesTimesThreadsAdmitExactlyTheCapacity) {
  // 4 processes x 8 threads x 100 calls = 3200 attempts on a bucket of 500.
  EXPECT_EQ(RunProcesses(server_, 4, 8, 100, 500, false), 500);
  const std::string value = Get(std::string(kPrefix) + ":{hot:the-one-key}:tb");
  EXPECT_EQ(UsedOf(value), 500) << value;
}

TEST_F(TokenBucketRedis, MixedCostsNeverExceedTheCapacity) {
  // Costs 1-3: the admitted total can stop short by at most 2, never go over.
  const int64_t admitted = RunProcesses(server_, 3, 6, 100, 1000, true);
  EXPECT_LE(admitted, 1000);
  EXPECT_GE(admitted, 998);
  const std::string value = Get(std::string(kPrefix) + ":{hot:the-one-key}:tb");
  EXPECT_EQ(UsedOf(value), admitted)
      << value << ": the stored bucket disagrees with what the callers were told";
}

}  // namespace
}  // namespace sluice::token_bucket_redis_test

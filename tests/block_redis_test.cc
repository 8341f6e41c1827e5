// Block duration (LimiterOptions::block_for) on a real redis-server, on Redis's own clock
// (the path production takes): a refusal over the limit holds the id refused for the
// block across every client, the block lives in Redis beside the id's key with its
// expiry, a client's repeated checks are answered by its denial cache without a Redis
// call, a reset clears the block and its end ends it. The step-by-step decisions (every
// boundary) are held to the twins by tests/differential*_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "sluice/sluice.h"
#include "testing/redis_fixture.h"
#include "testing/status_matchers.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using testing::IsOk;

constexpr milliseconds kBlock{1000};

class BlockRedis : public testing::RedisAlgorithmTest {
 protected:
  // Denial cache on (the default size), every other option as the scripts' tests have.
  BlockRedis() : RedisAlgorithmTest("blocktest", Options()) {}
  static ClientOptions Options() {
    ClientOptions o = testing::ScriptOptions();
    o.denial_cache_size = 1000;
    return o;
  }

  // A token bucket of 2 that is full again 100 ms after it is emptied: without a block,
  // a refused id passes again within 50 ms.
  static Limit Bucket() {
    return {.algorithm = Algorithm::kTokenBucket, .limit = 2, .window = milliseconds(100)};
  }
  Limiter Make(const std::shared_ptr<Client>& client, milliseconds block = kBlock,
               Limit limit = Bucket()) {
    auto limiter = client->MakeLimiter("login", limit, {.block_for = block});
    EXPECT_THAT(limiter, IsOk());
    return *std::move(limiter);
  }
  // The script calls Redis has run (INFO commandstats: EVALSHA and EVAL).
  int64_t ScriptCalls() const {
    const std::string info = server_.Command({"INFO", "commandstats"}).str;
    int64_t calls = 0;
    for (const char* command : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
      const auto at = info.find(command);
      if (at != std::string::npos) calls += std::stoll(info.substr(at + std::strlen(command)));
    }
    return calls;
  }
  // Spends the bucket and gets the refusal that starts the block.
  Decision Refuse(const Limiter& limiter, const std::string& id) {
    EXPECT_TRUE(limiter.Check(id, {.cost = 2})->allowed);
    const StatusOr<Decision> refused = limiter.Check(id);
    EXPECT_THAT(refused, IsOk());
    return refused.ok() ? *refused : Decision{};
  }
};

TEST_F(BlockRedis, ARefusalBlocksTheIdForEveryClientUntilTheBlockEnds) {
  auto first = Connect();
  auto second = Connect();  // another server of the fleet: its own denial cache
  const Limiter a = Make(first);
  const Limiter b = Make(second);
  const Decision refused = Refuse(a, "u1");
  const auto blocked_at = std::chrono::steady_clock::now();  // at or after the script ran
  EXPECT_FALSE(refused.allowed);
  EXPECT_TRUE(refused.blocked) << refused.ToString();
  EXPECT_EQ(refused.reason, RefusalReason::kOverLimit);
  EXPECT_EQ(refused.retry_after, kBlock) << "the block, longer than the bucket's own wait";
  // The block is a key beside the id's, in its slot, expiring when the block ends.
  const std::string block_key = *a.KeyFor("u1") + ".blk";
  EXPECT_GT(Pttl(block_key), 0);
  EXPECT_LE(Pttl(block_key), kBlock.count());
  // The bucket refills within 100 ms; the block holds on every client, whatever the cost.
  std::this_thread::sleep_for(milliseconds(150));
  const StatusOr<Decision> elsewhere = b.Check("u1");
  ASSERT_THAT(elsewhere, IsOk());
  EXPECT_FALSE(elsewhere->allowed) << elsewhere->ToString();
  EXPECT_TRUE(elsewhere->blocked);
  EXPECT_EQ(elsewhere->source, DecisionSource::kStore);
  EXPECT_GT(elsewhere->retry_after.count(), 0);
  EXPECT_LE(elsewhere->retry_after, kBlock - milliseconds(150));
  // A check during the block does not extend it: the key's expiry did not move.
  EXPECT_LE(Pttl(block_key), kBlock.count() - 150);
  // Checks of any cost are answered by each client's denial cache: no script call.
  const int64_t calls = ScriptCalls();
  for (int64_t cost : {1, 2, 1}) {
    for (const Limiter* limiter : {&a, &b}) {
      const StatusOr<Decision> cached = limiter->Check("u1", {.cost = cost});
      ASSERT_THAT(cached, IsOk());
      EXPECT_FALSE(cached->allowed);
      EXPECT_TRUE(cached->blocked);
      EXPECT_EQ(cached->source, DecisionSource::kCachedDenial) << cached->ToString();
    }
  }
  EXPECT_EQ(ScriptCalls(), calls) << "a blocked id's checks reached Redis";
  // Another id is not blocked.
  EXPECT_TRUE(b.Check("u2")->allowed);
  // The block's end ends it (and its key with it).
  std::this_thread::sleep_until(blocked_at + kBlock + milliseconds(5));
  const StatusOr<Decision> after = b.Check("u1");
  ASSERT_THAT(after, IsOk());
  EXPECT_TRUE(after->allowed) << after->ToString();
  EXPECT_EQ(Pttl(block_key), -2);
}

TEST_F(BlockRedis, AResetClearsTheBlock) {
  auto client = Connect();
  const Limiter limiter = Make(client);
  ASSERT_TRUE(Refuse(limiter, "u1").blocked);
  const std::string block_key = *limiter.KeyFor("u1") + ".blk";
  ASSERT_GT(Pttl(block_key), 0);
  ASSERT_THAT(limiter.Reset("u1"), IsOk());
  EXPECT_EQ(Pttl(block_key), -2);
  const StatusOr<Decision> after = limiter.Check("u1");
  ASSERT_THAT(after, IsOk());
  EXPECT_TRUE(after->allowed) << after->ToString();
  // A limiter without a block resets it too (an operator's tool may not know the rule).
  ASSERT_TRUE(Refuse(limiter, "u2").blocked);
  const std::string other_key = *limiter.KeyFor("u2") + ".blk";
  ASSERT_GT(Pttl(other_key), 0);
  auto plain = client->MakeLimiter("login", Bucket());
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(plain->Reset("u2"), IsOk());
  EXPECT_EQ(Pttl(other_key), -2);
}

TEST_F(BlockRedis, PeeksCostsAboveTheLimitAndDebitsStartNoBlock) {
  auto client = Connect();
  const Limiter limiter = Make(client);
  const std::string block_key = *limiter.KeyFor("u1") + ".blk";
  ASSERT_TRUE(limiter.Check("u1", {.cost = 2})->allowed);
  const StatusOr<Decision> peek = limiter.Peek("u1");
  ASSERT_THAT(peek, IsOk());
  EXPECT_FALSE(peek->allowed);
  EXPECT_FALSE(peek->blocked);
  const StatusOr<Decision> too_big = limiter.Check("u1", {.cost = 3});
  ASSERT_THAT(too_big, IsOk());
  EXPECT_EQ(too_big->reason, RefusalReason::kCostExceedsLimit);
  EXPECT_FALSE(too_big->blocked);
  const StatusOr<Decision> debit = limiter.Debit("u1", 2);
  ASSERT_THAT(debit, IsOk());
  EXPECT_GT(debit->debt, 0);
  EXPECT_FALSE(debit->blocked);
  EXPECT_EQ(Pttl(block_key), -2) << "no block key written";
  // The next check, refused by the debt, starts the block.
  const StatusOr<Decision> check = limiter.Check("u1");
  ASSERT_THAT(check, IsOk());
  EXPECT_TRUE(check->blocked) << check->ToString();
  EXPECT_GT(Pttl(block_key), 0);
}

TEST_F(BlockRedis, WithoutABlockARefusalWritesNoBlockAndAnOldOneStopsHolding) {
  auto client = Connect();
  const Limiter blocking = Make(client);
  ASSERT_TRUE(Refuse(blocking, "u1").blocked);
  // The same limiter with its block removed (limits are arguments): the stored block no
  // longer holds, and its refusals start none.
  auto plain = client->MakeLimiter("login", Bucket(), {.cache_denials = false});
  ASSERT_THAT(plain, IsOk());
  std::this_thread::sleep_for(milliseconds(120));  // the bucket is full again
  EXPECT_TRUE(plain->Check("u1", {.cost = 2})->allowed);
  ASSERT_THAT(blocking.Reset("u1"), IsOk());
  EXPECT_TRUE(plain->Check("u1", {.cost = 2})->allowed);
  const StatusOr<Decision> refused = plain->Check("u1");
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->allowed);
  EXPECT_FALSE(refused->blocked);
  EXPECT_EQ(Pttl(*plain->KeyFor("u1") + ".blk"), -2);
}

TEST_F(BlockRedis, TheLimitThatRefusesACompositeCheckIsBlocked) {
  auto client = Connect();
  // One slot: co-located by the part before ':'; the first limit is the one that refuses.
  auto user = client->MakeLimiter(
      "user", {.algorithm = Algorithm::kFixedWindow, .limit = 1, .window = milliseconds(60'000)},
      {.block_for = kBlock, .colocate = LimiterOptions::Colocate{}});
  auto tenant = client->MakeLimiter(
      "tenant",
      {.algorithm = Algorithm::kFixedWindow, .limit = 100, .window = milliseconds(60'000)},
      {.block_for = kBlock, .colocate = LimiterOptions::Colocate{}});
  ASSERT_THAT(user, IsOk());
  ASSERT_THAT(tenant, IsOk());
  const LimitCheck checks[] = {{&*user, "acme:u1"}, {&*tenant, "acme"}};
  ASSERT_TRUE(CheckComposite(checks, {})->decision.allowed);
  const StatusOr<CompositeDecision> refused = CheckComposite(checks, {});
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->decision.allowed);
  EXPECT_EQ(refused->decided_by, 0u);
  EXPECT_TRUE(refused->decision.blocked) << refused->decision.ToString();
  EXPECT_GT(Pttl(*user->KeyFor("acme:u1") + ".blk"), 0);
  EXPECT_EQ(Pttl(*tenant->KeyFor("acme") + ".blk"), -2) << "the tenant's limit did not refuse";
}

TEST(BlockOptions, AreValidated) {
  auto client = Client::Create({.url = "memory://"});
  ASSERT_THAT(client, IsOk());
  const Limit limit{.algorithm = Algorithm::kFixedWindow, .limit = 1, .window = milliseconds(10)};
  EXPECT_FALSE((*client)->MakeLimiter("a", limit, {.block_for = milliseconds(-1)}).ok());
  EXPECT_FALSE(
      (*client)->MakeLimiter("a", limit, {.block_for = kMaxWindow + milliseconds(1)}).ok());
  LimiterOptions budget{.block_for = kBlock};
  budget.local_budget.enabled = true;
  EXPECT_FALSE((*client)->MakeLimiter("a", limit, budget).ok());
  LimiterOptions sync{.block_for = kBlock};
  sync.sync.enabled = true;
  EXPECT_FALSE((*client)->MakeLimiter("a", limit, sync).ok());
  EXPECT_THAT((*client)->MakeLimiter("a", limit, {.block_for = kBlock}), IsOk());
}

}  // namespace
}  // namespace sluice

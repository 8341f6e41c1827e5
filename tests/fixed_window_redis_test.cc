// The fixed window on a real redis-server through the public API: semantics, key
// layout, TTL rules, the three call styles, and "95 of 100 used, 20 at once".
#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <barrier>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "sluice/asio.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::RedisServer;

class FixedWindowRedis : public testing::RedisAlgorithmTest {
 protected:
  FixedWindowRedis() : RedisAlgorithmTest("fwtest", {.deadline = milliseconds(500)}) {}
};

TEST_F(FixedWindowRedis, AdmitsTheLimitAndDoesNotCountRefusals) {
  auto limiter = *Connect()->MakeLimiter("login", {.limit = 3, .window = seconds(60)});
  for (int i = 2; i >= 0; --i) {
    auto d = limiter.Check("account:101");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->remaining, i);
    EXPECT_EQ(d->limit, 3);
    EXPECT_EQ(d->source, DecisionSource::kStore);
    EXPECT_GT(d->reset_after, milliseconds(59'000));
    EXPECT_LE(d->reset_after, milliseconds(60'000));
  }
  for (int i = 0; i < 5; ++i) {
    auto d = limiter.Check("account:101");
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->reason, RefusalReason::kOverLimit);
    EXPECT_EQ(d->retry_after, d->reset_after);
  }
  // Refusals did not count: the stored count is still 3.
  std::string key = *limiter.KeyFor("account:101");
  EXPECT_EQ(server_.Command({"GET", key}).str, "3");
  // Another id has its own budget.
  EXPECT_TRUE(limiter.Check("account:402")->allowed);
}

TEST_F(FixedWindowRedis, CostIsAllOrNothing) {
  auto limiter = *Connect()->MakeLimiter("upload", {.limit = 10, .window = seconds(60)});
  EXPECT_TRUE(limiter.Check("u", {.cost = 7})->allowed);
  auto d = limiter.Check("u", {.cost = 4});
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->remaining, 3);
  EXPECT_TRUE(limiter.Check("u", {.cost = 3})->allowed);
  auto too_big = limiter.Check("v", {.cost = 11});
  EXPECT_FALSE(too_big->allowed);
  EXPECT_EQ(too_big->reason, RefusalReason::kCostExceedsLimit);
  EXPECT_TRUE(server_.Keys("fwtest:{upload:v}:fw2").empty()) << "a refusal created a key";
}

TEST_F(FixedWindowRedis, KeysAreHashTaggedEscapedAndExpire) {
  auto limiter = *Connect()->MakeLimiter("api", {.limit = 5, .window = seconds(30)});
  const std::string hostile("a}b{c%d\0e#", 10);
  ASSERT_THAT(limiter.Check(hostile), IsOk());
  auto keys = server_.Keys("fwtest:*");
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0], "fwtest:{api:a%7Db%7Bc%25d%00e%23}:fw2");
  long long pttl = server_.Command({"PTTL", keys[0]}).integer;
  EXPECT_GT(pttl, 29'000);
  EXPECT_LE(pttl, 30'000);
  // A huge id gets a bounded key.
  ASSERT_THAT(limiter.Check(std::string(100'000, 'x')), IsOk());
  for (const auto& k : server_.Keys("fwtest:*")) EXPECT_LT(k.size(), 200u);
}

TEST_F(FixedWindowRedis, KeyThatLostItsExpiryGetsItBackOnTouch) {
  auto limiter = *Connect()->MakeLimiter("persist", {.limit = 2, .window = seconds(20)});
  const std::string key = *limiter.KeyFor("victim");
  // Admitted path.
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  ASSERT_EQ(server_.Command({"PTTL", key}).integer, -1);
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  EXPECT_GT(server_.Command({"PTTL", key}).integer, 0);
  // Refused path: the limit is spent, the key loses its TTL, a refused check repairs it.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  auto refused = limiter.Check("victim");
  EXPECT_FALSE(refused->allowed);
  long long pttl = server_.Command({"PTTL", key}).integer;
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 20'000);
  // A refusal never moves an existing expiry.
  long long before = server_.Command({"PTTL", key}).integer;
  EXPECT_FALSE(limiter.Check("victim")->allowed);
  EXPECT_LE(server_.Command({"PTTL", key}).integer, before);
}

TEST_F(FixedWindowRedis, WindowEdgesOnAModelClock) {
  auto clock = std::make_shared<testing::FakeClock>(1'000'000'000);
  auto limiter = *Connect(clock)->MakeLimiter("edge", {.limit = 2, .window = seconds(10)});
  EXPECT_TRUE(limiter.Check("x")->allowed);
  clock->Advance(milliseconds(3'000));
  EXPECT_TRUE(limiter.Check("x")->allowed);
  clock->Advance(milliseconds(6'999));  // 1 ms before the window (opened at t0) ends
  auto before = limiter.Check("x");
  EXPECT_FALSE(before->allowed);
  EXPECT_EQ(before->retry_after, milliseconds(1));
  clock->Advance(milliseconds(1));  // exactly at the end
  auto at = limiter.Check("x");
  EXPECT_TRUE(at->allowed);
  EXPECT_EQ(at->remaining, 1);
  EXPECT_EQ(at->reset_after, milliseconds(10'000));
}

TEST_F(FixedWindowRedis, AlignedWindowsEndOnMultiplesOfTheWindow) {
  auto clock = std::make_shared<testing::FakeClock>(1'000'000'300);
  auto limiter =
      *Connect(clock)->MakeLimiter("aligned", {.limit = 1, .window = seconds(1), .aligned = true});
  auto d = limiter.Check("x");
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->reset_after, milliseconds(700));
  clock->Advance(milliseconds(699));
  EXPECT_FALSE(limiter.Check("x")->allowed);
  clock->Advance(milliseconds(1));
  auto next = limiter.Check("x");
  EXPECT_TRUE(next->allowed);
  EXPECT_EQ(next->reset_after, milliseconds(1000));
}

TEST_F(FixedWindowRedis, NinetyFiveOfHundredUsedTwentyAtOnceAdmitsExactlyFive) {
  auto client = Connect();
  auto limiter = *client->MakeLimiter("burst", {.limit = 100, .window = seconds(60)});
  for (int i = 0; i < 95; ++i) ASSERT_TRUE(limiter.Check("tenant")->allowed);
  std::atomic<int> allowed{0}, refused{0};
  std::barrier start(20);
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      auto d = limiter.Check("tenant");
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      (d->allowed ? allowed : refused)++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 5);
  EXPECT_EQ(refused.load(), 15);
}

TEST_F(FixedWindowRedis, CallbackAndCoroutineStyles) {
  auto limiter = *Connect()->MakeLimiter("styles", {.limit = 2, .window = seconds(60)});
  std::promise<StatusOr<Decision>> promise;
  limiter.CheckAsync("s", {}, [&](StatusOr<Decision> d) { promise.set_value(std::move(d)); });
  auto first = promise.get_future().get();
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->remaining, 1);

  boost::asio::io_context io;
  std::vector<bool> allowed;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        for (int i = 0; i < 2; ++i) {
          auto d = co_await AsyncCheck(limiter, "s", {}, boost::asio::use_awaitable);
          allowed.push_back(d.ok() && d->allowed);
        }
      },
      boost::asio::detached);
  io.run();
  EXPECT_EQ(allowed, (std::vector<bool>{true, false}));
}

TEST_F(FixedWindowRedis, PlanUpgradeAppliesOnTheNextCallWithoutReset) {
  auto limiter = *Connect()->MakeLimiter("plan", {.limit = 2, .window = seconds(60)});
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_FALSE(limiter.Check("acct")->allowed);
  auto d = limiter.Check("acct", {.limit = Limit{.limit = 4, .window = seconds(60)}});
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 1);
}

}  // namespace
}  // namespace sluice

// Limits are arguments (docs/design.md §1 rule 5, §3): every parameter of a Limit may change
// between calls and the next decision follows the new one at once, on a real
// redis-server for all five algorithms — a plan upgrade gives the new tokens at once, a
// shortened window or a downgrade is never outlived by a window end, TAT or count
// computed under the older parameter — and a key of any other Redis type is replaced,
// never turned into a script error (which would go to the failure policy: under
// `closed`, a refusal for ever).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice::plan_change_redis_test {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using testing::RedisServer;

constexpr char kPrefix[] = "plantest";
constexpr int64_t kT0 = 1'700'000'000'040;  // not on a minute: aligned windows matter

constexpr Algorithm kAll[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                              Algorithm::kSlidingLog, Algorithm::kTokenBucket, Algorithm::kGcra};

class PlanChangeRedis : public testing::RedisAlgorithmTest {
 protected:
  // Every call must reach the script (no denial cache) and a script error must show as
  // an error, not as a policy decision.
  PlanChangeRedis() : RedisAlgorithmTest(kPrefix, testing::ScriptOptions()) {}
};

Limit Per(Algorithm algorithm, int64_t limit, milliseconds window, bool aligned = false) {
  return {.algorithm = algorithm, .limit = limit, .window = window, .aligned = aligned};
}

// 100 per minute, spent to the last unit, upgraded to 500 per minute (refill 0: the rate
// moves with the limit): the 400 new units are there at once, and not one more.
TEST_F(PlanChangeRedis, AnUpgradeGivesItsNewUnitsAtOnce) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto client = Connect(clock);
  for (Algorithm algorithm : kAll) {
    SCOPED_TRACE(std::string(AlgorithmName(algorithm)));
    auto limiter = *client->MakeLimiter("upgrade", Per(algorithm, 100, minutes(1)));
    auto spent = limiter.Check("tenant", {.cost = 100});
    ASSERT_TRUE(spent.ok()) << spent.status().ToString();
    ASSERT_TRUE(spent->allowed);
    ASSERT_FALSE(limiter.Check("tenant")->allowed);
    clock->Advance(milliseconds(1));
    const CheckOptions upgraded{.cost = 400, .limit = Per(algorithm, 500, minutes(1))};
    auto more = limiter.Check("tenant", upgraded);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    EXPECT_TRUE(more->allowed) << more->ToString();
    EXPECT_EQ(more->remaining, 0) << more->ToString();
    auto over = limiter.Check("tenant", {.limit = Per(algorithm, 500, minutes(1))});
    ASSERT_THAT(over, IsOk());
    EXPECT_FALSE(over->allowed) << over->ToString();
  }
}

// A day's window, spent, then the configuration moves to a minute: the old day never
// outlives the change — the id has its budget again about a minute later, not a day.
TEST_F(PlanChangeRedis, AShortenedWindowAppliesAtOnce) {
  for (bool aligned : {false, true}) {
    auto clock = std::make_shared<testing::FakeClock>(kT0);
    auto client = Connect(clock);
    for (Algorithm algorithm : kAll) {
      if (aligned && algorithm != Algorithm::kFixedWindow) continue;
      SCOPED_TRACE(std::string(AlgorithmName(algorithm)) + (aligned ? " aligned" : ""));
      const std::string id = "user" + std::to_string(aligned);
      auto limiter = *client->MakeLimiter("shorten", Per(algorithm, 10, hours(24), aligned));
      ASSERT_TRUE(limiter.Check(id, {.cost = 10})->allowed);
      const CheckOptions minute{.limit = Per(algorithm, 10, minutes(1), aligned)};
      auto refused = limiter.Check(id, minute);
      ASSERT_TRUE(refused.ok()) << refused.status().ToString();
      EXPECT_FALSE(refused->allowed);
      EXPECT_LE(refused->retry_after, minutes(2)) << refused->ToString();
      EXPECT_LE(refused->reset_after, minutes(2)) << refused->ToString();
      clock->Advance(minutes(2) + milliseconds(1));
      auto again = limiter.Check(id, minute);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      EXPECT_TRUE(again->allowed) << again->ToString();
      // The stored state follows the minute too: its key expires within two minutes.
      const std::string key = *limiter.KeyFor(id);
      EXPECT_LE(server_.Command({"PTTL", key}).integer, 2 * 60'000 + 60'000 /* model grace */);
    }
  }
}

// A downgrade from 1000 a day to 10 a minute: the day's deficit does not carry over
// beyond one refill of the new, smaller bucket.
TEST_F(PlanChangeRedis, ADowngradeCostsAtMostOneRefillOfTheNewBucket) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto client = Connect(clock);
  for (Algorithm algorithm : {Algorithm::kTokenBucket, Algorithm::kGcra}) {
    SCOPED_TRACE(std::string(AlgorithmName(algorithm)));
    auto limiter = *client->MakeLimiter("downgrade", Per(algorithm, 1000, hours(24)));
    ASSERT_TRUE(limiter.Check("tenant", {.cost = 1000})->allowed);
    const CheckOptions small{.limit = Per(algorithm, 10, minutes(1))};
    auto refused = limiter.Check("tenant", small);
    ASSERT_TRUE(refused.ok()) << refused.status().ToString();
    EXPECT_FALSE(refused->allowed);
    EXPECT_EQ(refused->retry_after, seconds(6)) << refused->ToString();
    EXPECT_EQ(refused->reset_after, minutes(1)) << refused->ToString();
    clock->Advance(seconds(6));
    EXPECT_TRUE(limiter.Check("tenant", small)->allowed);
    EXPECT_FALSE(limiter.Check("tenant", small)->allowed);
  }
}

// Values of every Redis type at an id's key (a stray SET, HSET, LPUSH ... by someone
// else) are replaced by the next call, whatever it is, for every algorithm.
TEST_F(PlanChangeRedis, AForeignValueOfAnyTypeIsReplaced) {
  auto client = Connect();
  const std::vector<std::vector<std::string>> writers = {
      {"SET", "", "not sluice's"}, {"HSET", "", "f", "v"}, {"RPUSH", "", "a", "b"},
      {"SADD", "", "a"},           {"ZADD", "", "1", "a"}, {"XADD", "", "*", "f", "v"},
  };
  const char* ops[] = {"check", "peek", "refund", "reset"};
  for (Algorithm algorithm : kAll) {
    auto limiter = *client->MakeLimiter("foreign", Per(algorithm, 3, minutes(1)));
    for (const auto& writer : writers) {
      for (const char* op : ops) {
        SCOPED_TRACE(std::string(AlgorithmName(algorithm)) + " " + writer[0] + " " + op);
        const std::string id = "id-" + writer[0] + "-" + op;
        const std::string key = *limiter.KeyFor(id);
        std::vector<std::string> command = writer;
        command[1] = key;
        server_.Command(command);
        server_.Command({"EXPIRE", key, "600"});  // teardown checks sluice keys' TTLs
        StatusOr<Decision> d = InternalError("unset");
        if (op == std::string("check")) d = limiter.Check(id);
        if (op == std::string("peek")) d = limiter.Peek(id);
        if (op == std::string("refund")) d = limiter.Refund(id, 1);
        if (op == std::string("reset")) d = limiter.Reset(id);
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        EXPECT_TRUE(d->allowed) << d->ToString();
        EXPECT_EQ(d->source, DecisionSource::kStore);
        const std::string type = server_.Command({"TYPE", key}).str;
        if (op == std::string("check")) {
          EXPECT_EQ(d->remaining, 2) << d->ToString();
          // The check's own state replaced the foreign value.
          EXPECT_EQ(type, algorithm == Algorithm::kSlidingLog ? "zset" : "string");
          if (type == "string") {
            EXPECT_NE(server_.Command({"GET", key}).str, "not sluice's");
          }
        } else {
          EXPECT_EQ(d->remaining, 3) << d->ToString();
          EXPECT_EQ(type, "none") << "the foreign value is deleted";
        }
        // Either gone or sluice's own state: a second check decides normally.
        auto next = limiter.Check(id);
        ASSERT_TRUE(next.ok()) << next.status().ToString();
        EXPECT_TRUE(next->allowed);
      }
    }
  }
}

// The lease script: heartbeat, list and release-all on a key some other writer replaced
// by another type answer as if the set were gone, instead of a script error.
TEST_F(PlanChangeRedis, LeaseOperationsReplaceAForeignValue) {
  auto client = Connect();
  auto streams = *client->MakeConcurrencyLimiter(
      "streams", {.limit = 2, .lease_ttl = seconds(30), .heartbeat_interval = seconds(10)});
  auto a = streams.Acquire("user");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(a->acquired);
  const std::string key = *streams.KeyFor("user");
  auto replace = [&] {
    server_.Command({"DEL", key});
    server_.Command({"HSET", key, "f", "v"});
    server_.Command({"EXPIRE", key, "600"});
  };

  replace();
  auto listed = streams.List("user");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
  EXPECT_EQ(server_.Command({"EXISTS", key}).integer, 0);

  replace();
  const Status hb = a->lease.Heartbeat();
  EXPECT_EQ(a->lease.loss(), LeaseLoss::kGone) << hb.ToString();
  EXPECT_EQ(server_.Command({"EXISTS", key}).integer, 0);

  replace();
  const std::string log = ::testing::TempDir() + "/plan_change_release.log";
  auto released =
      ReleaseAll(streams, "user", {.actor = "test", .reason = "foreign value"}, {.log_path = log});
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->released, 0);
  EXPECT_EQ(server_.Command({"EXISTS", key}).integer, 0);

  // And the id works again.
  auto b = streams.Acquire("user");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->acquired);
}

}  // namespace
}  // namespace sluice::plan_change_redis_test

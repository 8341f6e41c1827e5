// Runtime overrides on a real redis-server (src/algo/overrides.lua): set through one
// client, applied by a second client's refresh within the bound (waited for, bounded;
// the decision says "runtime"), cleared the same way; the script and its twin give the
// same replies to one sequence on a model clock; the bounds (the 1,001st id refused, 31
// days refused, the end of an override ends it); every key keeps an expiry.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "algo/overrides.h"
#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"
#include "memory/memory_store.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/fake_clock.h"
#include "testing/redis_fixture.h"
#include "testing/status_matchers.h"

namespace sluice::overrides_redis_test {
namespace {

using internal::OverrideCall;
using internal::OverrideOp;
using internal::OverrideReply;
using std::chrono::milliseconds;
using std::chrono::seconds;

class OverridesRedisTest : public testing::RedisAlgorithmTest {
 protected:
  OverridesRedisTest() : RedisAlgorithmTest("ovt", {.deadline = milliseconds(2000)}) {}
  std::string Log() const {
    return ::testing::TempDir() + "ovt-audit-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl";
  }
};

StatusOr<OverrideReply> RunCall(internal::Store& store, OverrideCall call) {
  call.deadline = std::chrono::steady_clock::now() + seconds(2);
  return internal::WaitFor<StatusOr<OverrideReply>>(
      [&](internal::OverrideCallback done) { store.Overrides(std::move(call), std::move(done)); });
}

OverrideCall Set(std::string key, std::string id, int64_t limit, int64_t lifetime_ms,
                 int64_t now_ms) {
  OverrideCall call;
  call.op = OverrideOp::kSet;
  call.keys = {std::move(key)};
  call.entry = {std::move(id), limit, 0, 0, 0, "ana", "r"};
  call.lifetime_ms = lifetime_ms;
  call.now_ms = now_ms;
  return call;
}

TEST_F(OverridesRedisTest, ASecondClientAppliesItWithinTheBound) {
  auto setter = Connect(nullptr, /*runtime_overrides=*/true);
  auto other = Connect(nullptr, /*runtime_overrides=*/true);
  auto login_here = *setter->MakeLimiter("login", {.limit = 2, .window = seconds(60)});
  auto login_there = *other->MakeLimiter("login", {.limit = 2, .window = seconds(60)});
  ASSERT_TRUE(login_there.Check("acme")->allowed);
  ASSERT_TRUE(login_there.Check("acme")->allowed);
  ASSERT_FALSE(login_there.Check("acme")->allowed);  // and cached
  const auto set_at = std::chrono::steady_clock::now();
  auto set = SetOverride(login_here, "acme", {.limit = 500, .ttl = seconds(3600)},
                         {"ana", "tenant acme: 500/min for an hour"}, {.log_path = Log()});
  ASSERT_THAT(set, testing::IsOk());
  // The other client's refresh (once a second) brings it: bounded wait, then the
  // mechanism is what the decision says.
  ASSERT_TRUE(testing::Eventually(
      [&] { return login_there.Peek("acme")->limit_source == LimitSource::kRuntimeOverride; },
      seconds(10)));
  const auto took =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - set_at);
  std::printf("applied by the second client %lld ms after the set\n",
              static_cast<long long>(took.count()));
  auto d = login_there.Check("acme");
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->limit, 500);
  EXPECT_EQ(d->remaining, 497);
  EXPECT_EQ(d->limit_source, LimitSource::kRuntimeOverride);
  const std::string key = internal::MakeOverridesKey(prefix_, "login");
  EXPECT_GT(Pttl(key), 3'590'000);  // the hash lives as long as its longest override
  // Cleared through the second client: the first one's copy follows.
  ASSERT_THAT(ClearOverride(login_there, "acme", {"ana", "done"}, {.log_path = Log()}),
              testing::IsOk());
  ASSERT_TRUE(testing::Eventually(
      [&] { return login_here.Peek("acme")->limit_source == LimitSource::kLimiter; }, seconds(10)));
  EXPECT_FALSE(login_here.Check("acme")->allowed);  // 3 of 2 spent: the own limit again
  const std::vector<std::string> names = {"login"};
  EXPECT_THAT(ListOverrides(*setter, names), testing::IsOkAndHolds(::testing::IsEmpty()));
}

TEST_F(OverridesRedisTest, ScriptAndTwinAgreeAndKeepTheBounds) {
  auto client = Connect(nullptr, /*runtime_overrides=*/true);
  internal::Store& redis = *internal::ClientFactory::StoreOf(*client);
  internal::MemoryStore twin(std::make_shared<testing::FakeClock>(0));
  const std::string key = internal::MakeOverridesKey(prefix_, "api");
  const int64_t t0 = RedisNowMs();
  // 1,000 ids, ten of them for 1 s; the 1,001st is refused by both.
  for (int i = 0; i < 1000; ++i) {
    const int64_t life = i < 10 ? 1000 : 3'600'000;
    auto r = RunCall(redis, Set(key, "id" + std::to_string(i), i, life, t0));
    auto m = RunCall(twin, Set(key, "id" + std::to_string(i), i, life, t0));
    ASSERT_TRUE(r.ok() && m.ok() && r->change.done && m->change.done) << i;
  }
  for (internal::Store* store :
       {static_cast<internal::Store*>(&redis), static_cast<internal::Store*>(&twin)}) {
    auto full = RunCall(*store, Set(key, "one-more", 1, 3'600'000, t0));
    ASSERT_THAT(full, testing::IsOk());
    EXPECT_FALSE(full->change.done);
    EXPECT_EQ(full->change.live, 1000);
    // 31 days is refused (the script's error reply, the twin's InvalidArgument); 30 days
    // is not (replacing an id already there).
    auto too_long = RunCall(*store, Set(key, "id20", 1, 31LL * 24 * 3600 * 1000, t0));
    ASSERT_FALSE(too_long.ok());
    EXPECT_THAT(too_long.status().message(), ::testing::HasSubstr("bad lifetime"));
    EXPECT_THAT(RunCall(*store, Set(key, "id20", 1, 30LL * 24 * 3600 * 1000, t0)), testing::IsOk());
  }
  // A read with nothing held gets everything; with the counter held, nothing more.
  OverrideCall read;
  read.keys = {key, internal::MakeOverridesKey(prefix_, "none")};
  read.known = {-1, -1};
  read.now_ms = t0;
  auto r = RunCall(redis, read);
  auto m = RunCall(twin, read);
  ASSERT_TRUE(r.ok() && m.ok());
  EXPECT_EQ(r->read.hashes[0].counter, m->read.hashes[0].counter);
  EXPECT_EQ(r->read.hashes[0].entries.size(), 1000u);
  EXPECT_EQ(m->read.hashes[0].entries.size(), 1000u);
  EXPECT_EQ(r->read.hashes[1].counter, 0);
  read.known = {r->read.hashes[0].counter, 0};
  auto again = RunCall(redis, read);
  ASSERT_THAT(again, testing::IsOk());
  EXPECT_FALSE(again->read.hashes[0].changed);
  EXPECT_TRUE(again->read.hashes[0].entries.empty());
  // After the ten short ones end, the 1,001st fits, on both, with the same answer.
  for (internal::Store* store :
       {static_cast<internal::Store*>(&redis), static_cast<internal::Store*>(&twin)}) {
    auto fits = RunCall(*store, Set(key, "one-more", 1, 3'600'000, t0 + 1000));
    ASSERT_THAT(fits, testing::IsOk());
    EXPECT_TRUE(fits->change.done);
    ASSERT_TRUE(fits->change.after.has_value());
    EXPECT_EQ(fits->change.after->expires_at_ms, t0 + 1000 + 3'600'000);
  }
  // The model clock's grace (60 s) on top of the longest override, as every script.
  EXPECT_GT(Pttl(key), 30LL * 24 * 3600 * 1000 - 10'000);
}

TEST_F(OverridesRedisTest, AnOverrideEndsAtItsExpiryInEveryClient) {
  auto clock = std::make_shared<testing::FakeClock>(RedisNowMs());
  auto client = Connect(clock, /*runtime_overrides=*/true);
  auto api = *client->MakeLimiter("api", {.limit = 10, .window = seconds(1)});
  ASSERT_THAT(
      SetOverride(api, "t", {.limit = 1, .ttl = seconds(5)}, {"a", "b"}, {.log_path = Log()}),
      testing::IsOk());
  ASSERT_TRUE(testing::Eventually(
      [&] { return api.Peek("t")->limit_source == LimitSource::kRuntimeOverride; }, seconds(10)));
  clock->Advance(milliseconds(4999));
  EXPECT_EQ(api.Peek("t")->limit, 1);
  clock->Advance(milliseconds(1));
  auto d = api.Peek("t");  // ended: no refresh needed, no store read
  EXPECT_EQ(d->limit, 10);
  EXPECT_EQ(d->limit_source, LimitSource::kLimiter);
}

}  // namespace
}  // namespace sluice::overrides_redis_test

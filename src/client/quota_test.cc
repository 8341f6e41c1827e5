// QuotaShares through a Client on the embedded store (memory://, the twin on the store's own
// map and clock): argument checks, keys apart from limiters', delivery never inside
// Assign, store failures as errors, and the embedded store freeing a bucket whose grants
// all ended. The script is held to the twin by tests/differential_quota_test.cc and runs
// through a Client on Redis in tests/quota_redis_test.cc.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "client/client_core.h"
#include "memory/memory_store.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/fault_store.h"
#include "testing/status_matchers.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using testing::StatusIs;

QuotaShareRequest Ask(std::string client, int64_t demand, int64_t rate = 100'000) {
  return {.id = "bucket",
          .client = std::move(client),
          .demand_milli = demand,
          .rate_milli = rate,
          .hold = seconds(10)};
}

TEST(QuotaSharesClient, NamesAndArgumentsAreChecked) {
  auto client = *Client::Create({.url = "memory://"});
  EXPECT_THAT(client->MakeQuotaShares("").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("quota shares name")));
  EXPECT_THAT(client->MakeQuotaShares("a{b").status(), StatusIs(StatusCode::kInvalidArgument));
  auto shares = *client->MakeQuotaShares("api");
  EXPECT_EQ(shares.name(), "api");
  QuotaShareRequest r = Ask("a", 1);
  r.id = "";
  EXPECT_THAT(shares.AssignSync(r), StatusIs(StatusCode::kInvalidArgument, HasSubstr("id")));
  r = Ask(std::string(65, 'c'), 1);
  EXPECT_THAT(shares.AssignSync(r), StatusIs(StatusCode::kInvalidArgument, HasSubstr("client")));
  r = Ask("a", -5);
  EXPECT_THAT(shares.AssignSync(r),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("demand_milli")));
  r = Ask("a", 1, 0);
  EXPECT_THAT(shares.AssignSync(r),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("rate_milli")));
  r = Ask("a", 1);
  r.hold = milliseconds(0);
  EXPECT_THAT(shares.AssignSync(r), StatusIs(StatusCode::kInvalidArgument, HasSubstr("hold")));
  r = Ask("a", 1);
  r.headroom_percent = 50;
  EXPECT_THAT(shares.AssignSync(r),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("headroom_percent")));
  // A release needs no rate, demand or hold.
  EXPECT_TRUE(shares.AssignSync({.id = "bucket", .client = "a", .release = true}).ok());
}

TEST(QuotaSharesClient, BucketKeysAreApartFromALimitersOfTheSameName) {
  auto client = *Client::Create({.url = "memory://", .prefix = "p"});
  auto shares = *client->MakeQuotaShares("api");
  auto limiter = *client->MakeLimiter("api", {.limit = 5, .window = seconds(1)});
  EXPECT_EQ(*shares.KeyFor("t{1}"), "p:{api:t%7B1%7D}:qs");
  EXPECT_NE(*shares.KeyFor("t{1}"), *limiter.KeyFor("t{1}"));
  EXPECT_THAT(shares.KeyFor("").status(), StatusIs(StatusCode::kInvalidArgument));
  // Both work side by side on the same name and id.
  EXPECT_TRUE(limiter.Check("bucket")->allowed);
  EXPECT_EQ(shares.AssignSync(Ask("a", 1000))->grant_milli, 2000);
  EXPECT_TRUE(limiter.Check("bucket")->allowed);
}

TEST(QuotaSharesClient, GrantsFollowTheRuleAndSumToAtMostTheRate) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto client = *Client::Create({.url = "memory://", .model_clock = clock});
  auto shares = *client->MakeQuotaShares("api");
  // Alone: the rate less the reserve (100'000 / 64), kept for newcomers.
  auto a = shares.AssignSync(Ask("a", 60'000));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->grant_milli, 98'438);
  // B is new: granted from the reserve.
  auto b = *shares.AssignSync(Ask("b", 40'000));
  EXPECT_EQ(b.grant_milli, 1'562);
  EXPECT_EQ(b.total_demand_milli, 100'000);
  EXPECT_EQ(b.clients, 2);
  EXPECT_EQ(b.assigned_milli, 100'000);
  EXPECT_FALSE(b.full);
  // Renewed: 60% and 40% of 98'438.
  EXPECT_EQ(shares.AssignSync(Ask("a", 60'000))->grant_milli, 59'062);
  EXPECT_EQ(shares.AssignSync(Ask("b", 40'000))->grant_milli, 39'375);
  // Other buckets are apart.
  QuotaShareRequest other = Ask("a", 5);
  other.id = "other";
  EXPECT_EQ(shares.AssignSync(other)->clients, 1);
  // A's hold ends: B gets the whole rate less the reserve.
  clock->Advance(seconds(10));
  auto alone = *shares.AssignSync(Ask("b", 400'000));
  EXPECT_EQ(alone.grant_milli, 98'438);
  EXPECT_EQ(alone.clients, 1);
  // B gives its grant back.
  auto released = *shares.AssignSync({.id = "bucket", .client = "b", .release = true});
  EXPECT_EQ(released.grant_milli, 0);
  EXPECT_EQ(released.clients, 0);
  EXPECT_EQ(released.assigned_milli, 0);
}

TEST(QuotaSharesClient, DoneRunsOnAnIoThreadNeverInsideAssign) {
  auto client = *Client::Create({.url = "memory://"});
  auto shares = *client->MakeQuotaShares("api");
  // A result known at once (the embedded store, a bad argument) is posted: `done` runs on
  // another thread than the caller's.
  for (const QuotaShareRequest& r : {Ask("a", 1), Ask("", 1)}) {
    std::promise<std::thread::id> ran_on;
    shares.Assign(r,
                  [&](StatusOr<QuotaShareGrant>) { ran_on.set_value(std::this_thread::get_id()); });
    EXPECT_NE(ran_on.get_future().get(), std::this_thread::get_id())
        << "client \"" << r.client << "\"";
  }
}

TEST(QuotaSharesClient, StoreFailuresComeBackAsTheirErrors) {
  auto memory = std::make_shared<internal::MemoryStore>(std::make_shared<SystemClock>());
  auto faults = std::make_shared<testing::FaultStore>(memory);
  auto client = *internal::ClientFactory::WithStore({.url = "memory://"}, faults);
  auto shares = *client->MakeQuotaShares("api");
  faults->FailNext(1, UnavailableError("down"));
  EXPECT_THAT(shares.AssignSync(Ask("a", 1)), StatusIs(StatusCode::kUnavailable));
  faults->FailNext(1, DeadlineExceededError("slow"));
  EXPECT_THAT(shares.AssignSync(Ask("a", 1)), StatusIs(StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(shares.AssignSync(Ask("a", 1)).ok());
}

TEST(QuotaSharesClient, TheEmbeddedStoreFreesABucketOnceItsGrantsEnded) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto memory = std::make_shared<internal::MemoryStore>(clock);
  auto client = *internal::ClientFactory::WithStore({.url = "memory://"}, memory);
  auto shares = *client->MakeQuotaShares("api");
  for (int i = 0; i < 50; ++i) {
    QuotaShareRequest r = Ask("c" + std::to_string(i % 5), 10);
    r.id = "bucket" + std::to_string(i / 5);
    r.hold = milliseconds(100 + i);
    ASSERT_TRUE(shares.AssignSync(r).ok());
  }
  EXPECT_EQ(memory->KeyCount(), 10u);
  EXPECT_EQ(memory->EntryCount(), 10u);
  clock->Advance(milliseconds(148));
  EXPECT_EQ(memory->KeyCount(), 1u);  // bucket9's last grant ends at +149 ms, bucket8's at +144
  clock->Advance(milliseconds(internal::MemoryStore::kSlotMs + 1));
  for (size_t i = 0; i < internal::MemoryStore::kShards; ++i) memory->ReclaimStep();
  EXPECT_EQ(memory->KeyCount(), 0u);
  EXPECT_EQ(memory->EntryCount(), 0u);
}

}  // namespace
}  // namespace sluice

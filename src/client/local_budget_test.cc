// Local budgets (LimiterOptions::local_budget) on the embedded store under a model
// clock: several limiters on one client stand for servers sharing one store.
#include "client/local_budget.h"

#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <memory>
#include <vector>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using testing::FakeClock;

constexpr int64_t kStart = 1'700'000'000'000;  // a multiple of 1000: windows line up

std::shared_ptr<Client> MemoryClient(std::shared_ptr<const Clock> clock) {
  auto client = Client::Create({.url = "memory://", .model_clock = std::move(clock)});
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return *client;
}

LimiterOptions Budgeted(int64_t hot = 50, int64_t max_slice = 0) {
  LimiterOptions o;
  o.local_budget = {.enabled = true,
                    .hot_checks_per_second = hot,
                    .slice_period = milliseconds(50),
                    .max_slice = max_slice};
  return o;
}

const Limit kPerSecond{.limit = 1000, .window = milliseconds(1000), .aligned = true};

// Four servers, each 500 requests a second on one id for 5 seconds (2,000/s of demand
// against 1,000/s): never more than the limit in any window, and no less than the
// limit minus what the slices can hold (4 servers x 100).
TEST(LocalBudget, ServersSharingAStoreNeverAdmitMoreThanTheLimit) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  std::vector<Limiter> servers;
  for (int i = 0; i < 4; ++i)
    servers.push_back(*client->MakeLimiter("hot", kPerSecond, Budgeted()));
  std::map<int64_t, int64_t> admitted;  // window -> admitted
  int64_t local = 0, store = 0;
  for (int64_t step = 0; step < 5 * 500; ++step) {  // one request per server every 2 ms
    clock->Set(kStart + step * 2);
    for (Limiter& server : servers) {
      StatusOr<Decision> d = server.Check("tenant:1");
      ASSERT_THAT(d, testing::IsOk());
      if (!d->allowed) continue;
      ++admitted[(clock->NowMs() - kStart) / 1000];
      ++(d->source == DecisionSource::kLocalBudget ? local : store);
    }
  }
  ASSERT_EQ(admitted.size(), 5u);
  std::cout << "admitted per window:";
  for (const auto& [window, n] : admitted) std::cout << " " << n;
  std::cout << "; from slices " << local << ", from the store " << store << "\n";
  for (const auto& [window, n] : admitted) {
    EXPECT_LE(n, 1000) << "window " << window;
    EXPECT_GE(n, 1000 - 4 * 100) << "window " << window;
  }
  // Slices did most of the work: far fewer store calls than admitted requests.
  EXPECT_GT(local, 4 * store) << "local " << local << " store " << store;
}

TEST(LocalBudget, AColdIdDecidesExactlyAsWithout) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  const Limit three{.limit = 3, .window = milliseconds(1000), .aligned = true};
  auto budgeted = *client->MakeLimiter("cold", three, Budgeted(/*hot=*/1000));
  auto plain = *client->MakeLimiter("plain", three);
  for (int i = 0; i < 5; ++i) {
    StatusOr<Decision> a = budgeted.Check("u");
    StatusOr<Decision> b = plain.Check("u");
    ASSERT_THAT(a, testing::IsOk());
    ASSERT_THAT(b, testing::IsOk());
    EXPECT_EQ(a->allowed, b->allowed) << i;
    EXPECT_EQ(a->remaining, b->remaining) << i;
    EXPECT_EQ(a->source, b->source) << i;  // the store, then cached denials, as without
    EXPECT_NE(a->source, DecisionSource::kLocalBudget) << i;
    clock->Advance(milliseconds(10));
  }
}

TEST(LocalBudget, ASliceEndsWithTheWindowThatCountedIt) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  auto limiter = *client->MakeLimiter("edge", kPerSecond, Budgeted(/*hot=*/5, /*max_slice=*/40));
  // A call a millisecond from 800 ms into window 0: hot at once. Stop right after a
  // store call that took a fresh slice, so the slice still holds units at the window's end.
  Decision took;
  for (int i = 0; i < 190; ++i) {
    clock->Set(kStart + 800 + i);
    StatusOr<Decision> d = limiter.Check("x");
    ASSERT_THAT(d, testing::IsOk());
    ASSERT_TRUE(d->allowed);
    took = *d;
    if (i >= 100 && d->source == DecisionSource::kStore && d->remaining > 1000 - 200) break;
  }
  ASSERT_EQ(took.source, DecisionSource::kStore);
  const int64_t counted = 1000 - took.remaining;  // what the store counted, slices included
  // Window 1: the units left in window 0's slice are not spent (the store counts window 1
  // from 0): the first call goes to the store, which has counted nothing yet.
  clock->Set(kStart + 1000);
  StatusOr<Decision> d = limiter.Check("x");
  ASSERT_THAT(d, testing::IsOk());
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_GT(counted, 0);
}

TEST(LocalBudget, ARefundOfASliceDecisionGoesBackToTheSlice) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  auto limiter = *client->MakeLimiter("refund", kPerSecond, Budgeted(/*hot=*/5, /*max_slice=*/10));
  Decision from_slice;
  for (int i = 0; i < 40 && from_slice.source != DecisionSource::kLocalBudget; ++i) {
    clock->Advance(milliseconds(1));
    from_slice = *limiter.Check("r");
  }
  ASSERT_EQ(from_slice.source, DecisionSource::kLocalBudget);
  const int64_t left = from_slice.remaining;
  StatusOr<Decision> refund = limiter.Refund("r", 1, {.counted_by = DecisionSource::kLocalBudget});
  ASSERT_THAT(refund, testing::IsOk());
  EXPECT_EQ(refund->source, DecisionSource::kLocalBudget);
  StatusOr<Decision> next = limiter.Check("r");
  ASSERT_THAT(next, testing::IsOk());
  EXPECT_EQ(next->source, DecisionSource::kLocalBudget);
  EXPECT_EQ(next->remaining, left);  // the refunded unit was spent again
}

TEST(LocalBudget, OnlyForFixedWindowAndWithSaneOptions) {
  auto client = MemoryClient(std::make_shared<FakeClock>(kStart));
  EXPECT_THAT(client->MakeLimiter("tb", Limit::TokenBucket(10, 10), Budgeted()),
              testing::StatusIs(StatusCode::kInvalidArgument));
  LimiterOptions bad = Budgeted();
  bad.local_budget.slice_period = milliseconds(0);
  EXPECT_THAT(client->MakeLimiter("fw", kPerSecond, bad),
              testing::StatusIs(StatusCode::kInvalidArgument));
}

// The slice arithmetic alone.
TEST(LocalBudgets, SlicesFollowTheRateAndAreCapped) {
  internal::LocalBudgets budgets({.enabled = true,
                                  .hot_checks_per_second = 100,
                                  .slice_period = milliseconds(50),
                                  .max_slice = 20},
                                 /*limit=*/1000);
  // Cold: only the cost is asked for.
  EXPECT_FALSE(budgets.TrySpend("a", 1, 0).has_value());
  EXPECT_EQ(budgets.Want("a", 1, 0), 1);
  // 1,000 calls in one second: hot; a slice of 50 ms of that rate is 50, capped at 20.
  for (int i = 0; i < 1000; ++i) budgets.TrySpend("a", 1, i);
  EXPECT_EQ(budgets.Want("a", 1, 1000), 21);
  budgets.Fill("a", 20, /*sent_ms=*/1000, /*reset_after_ms=*/500);
  EXPECT_EQ(budgets.Held(1000), 20);
  ASSERT_TRUE(budgets.TrySpend("a", 5, 1200).has_value());
  EXPECT_EQ(budgets.Held(1200), 15);
  EXPECT_FALSE(budgets.TrySpend("a", 1, 1500).has_value());  // its window is over
  EXPECT_EQ(budgets.Held(1500), 0);
  EXPECT_FALSE(budgets.GiveBack("a", 1, 1500));
}

}  // namespace
}  // namespace sluice

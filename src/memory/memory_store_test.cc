// MemoryStore: the fixed window semantics behind the Store interface, key expiry on the
// store's clock, reclaiming of expired keys (bounded per call, whichever ids the calls
// are for, and per periodic step, with no call at all), and exactness under concurrent
// calls.
#include "memory/memory_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice::internal {
namespace {

using sluice::testing::FakeClock;
using std::chrono::milliseconds;
using std::chrono::seconds;

CheckCall Call(std::string key, int64_t limit, milliseconds window, int64_t cost = 1,
               bool aligned = false) {
  return CheckCall{.key = std::move(key),
                   .limit = Limit{.limit = limit, .window = window, .aligned = aligned},
                   .cost = cost};
}

class MemoryStoreTest : public ::testing::Test {
 protected:
  // Decides `call` on the store's clock; fails the test on an error.
  Decision Check(const CheckCall& call) {
    EXPECT_FALSE(call.now_ms.has_value());
    StatusOr<Decision> d = store_.CheckNow(call);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? *d : Decision{};
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  MemoryStore store_{clock_};
};

TEST_F(MemoryStoreTest, AdmitsExactlyLimitThenRefuses) {
  for (int64_t i = 1; i <= 4; ++i) {
    Decision d = Check(Call("k", 4, seconds(10)));
    EXPECT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.limit, 4);
    EXPECT_EQ(d.remaining, 4 - i);
    EXPECT_EQ(d.retry_after, milliseconds(0));
    EXPECT_EQ(d.reset_after, seconds(10));
    EXPECT_EQ(d.source, DecisionSource::kStore);
  }
  clock_->Advance(milliseconds(2500));
  Decision refused = Check(Call("k", 4, seconds(10)));
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.reason, RefusalReason::kOverLimit);
  EXPECT_EQ(refused.remaining, 0);
  EXPECT_EQ(refused.reset_after, milliseconds(7500));
  EXPECT_EQ(refused.retry_after, milliseconds(7500));
  EXPECT_EQ(refused.RetryAfterSeconds(), 8);
}

TEST_F(MemoryStoreTest, RefusedRequestsAreNotCounted) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Check(Call("k", 3, seconds(1))).allowed);
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(Check(Call("k", 3, seconds(1))).allowed);
  clock_->Advance(seconds(1));
  Decision d = Check(Call("k", 3, seconds(1)));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2) << "the refusals of the last window count for nothing";
}

TEST_F(MemoryStoreTest, CostIsAdmittedOnlyIfAllOfItFits) {
  EXPECT_EQ(Check(Call("k", 10, seconds(1), 7)).remaining, 3);
  Decision refused = Check(Call("k", 10, seconds(1), 4));
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.reason, RefusalReason::kOverLimit);
  EXPECT_EQ(refused.remaining, 3);
  Decision exact = Check(Call("k", 10, seconds(1), 3));
  EXPECT_TRUE(exact.allowed);
  EXPECT_EQ(exact.remaining, 0);
}

TEST_F(MemoryStoreTest, CostAboveLimitIsRefusedWithReasonAndCreatesNoKey) {
  Decision d = Check(Call("k", 5, seconds(1), 6));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(d.remaining, 5);
  EXPECT_EQ(store_.KeyCount(), 0u);

  ASSERT_TRUE(Check(Call("k", 5, seconds(1), 2)).allowed);
  Decision again = Check(Call("k", 5, seconds(1), 6));
  EXPECT_EQ(again.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(again.remaining, 3);
  // Nothing was consumed by the refusal: 3 are still left.
  Decision rest = Check(Call("k", 5, seconds(1), 3));
  EXPECT_TRUE(rest.allowed);
  EXPECT_EQ(rest.remaining, 0);
}

TEST_F(MemoryStoreTest, WindowBoundaries) {
  ASSERT_TRUE(Check(Call("k", 1, seconds(1))).allowed);
  clock_->Advance(milliseconds(999));
  Decision before = Check(Call("k", 1, seconds(1)));
  EXPECT_FALSE(before.allowed) << "1 ms before the end";
  EXPECT_EQ(before.retry_after, milliseconds(1));
  clock_->Advance(milliseconds(1));
  Decision at = Check(Call("k", 1, seconds(1)));
  EXPECT_TRUE(at.allowed) << "at the end";
  EXPECT_EQ(at.reset_after, seconds(1)) << "a fresh window opens at the request";
}

TEST_F(MemoryStoreTest, AlignedWindowsEndOnMultiples) {
  clock_->Set(1'700'000'012'345);
  Decision d = Check(Call("k", 1, seconds(10), 1, /*aligned=*/true));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reset_after, milliseconds(7655));
  clock_->Set(1'700'000'019'999);
  EXPECT_FALSE(Check(Call("k", 1, seconds(10), 1, true)).allowed);
  clock_->Set(1'700'000'020'000);
  Decision next = Check(Call("k", 1, seconds(10), 1, true));
  EXPECT_TRUE(next.allowed);
  EXPECT_EQ(next.reset_after, seconds(10));
}

TEST_F(MemoryStoreTest, KeysExpireAtTheWindowEnd) {
  ASSERT_TRUE(Check(Call("a", 5, seconds(2))).allowed);
  clock_->Advance(milliseconds(500));
  ASSERT_TRUE(Check(Call("b", 5, seconds(2))).allowed);
  EXPECT_EQ(store_.KeyCount(), 2u);

  clock_->Advance(milliseconds(1499));  // 1 ms before a's end
  EXPECT_EQ(store_.KeyCount(), 2u);
  clock_->Advance(milliseconds(1));  // a's end
  EXPECT_EQ(store_.KeyCount(), 1u);
  clock_->Advance(milliseconds(499));  // 1 ms before b's end
  EXPECT_EQ(store_.KeyCount(), 1u);
  clock_->Advance(milliseconds(1));  // b's end
  EXPECT_EQ(store_.KeyCount(), 0u);
}

TEST_F(MemoryStoreTest, RefusalsDoNotExtendAKeysLife) {
  ASSERT_TRUE(Check(Call("k", 1, seconds(1))).allowed);
  clock_->Advance(milliseconds(900));
  EXPECT_FALSE(Check(Call("k", 1, seconds(1))).allowed);
  clock_->Advance(milliseconds(100));
  EXPECT_EQ(store_.KeyCount(), 0u);
}

TEST_F(MemoryStoreTest, DistinctKeysAreIndependent) {
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Check(Call("alice", 2, seconds(1))).allowed);
  EXPECT_FALSE(Check(Call("alice", 2, seconds(1))).allowed);
  Decision bob = Check(Call("bob", 2, seconds(1)));
  EXPECT_TRUE(bob.allowed);
  EXPECT_EQ(bob.remaining, 1);
  // Keys differing only in a NUL byte or by case are different keys.
  EXPECT_TRUE(Check(Call(std::string("alice\0", 6), 2, seconds(1))).allowed);
  EXPECT_TRUE(Check(Call("Alice", 2, seconds(1))).allowed);
  EXPECT_EQ(store_.KeyCount(), 4u);

  clock_->Advance(milliseconds(500));
  ASSERT_TRUE(Check(Call("carol", 1, seconds(1))).allowed);
  clock_->Advance(milliseconds(500));
  // alice's window is over; carol's is not.
  EXPECT_TRUE(Check(Call("alice", 2, seconds(1))).allowed);
  EXPECT_FALSE(Check(Call("carol", 1, seconds(1))).allowed);
}

TEST_F(MemoryStoreTest, ExplicitNowOverridesTheStoreClock) {
  CheckCall call = Call("k", 1, seconds(1));
  call.now_ms = 5'000;
  StatusOr<Decision> first = store_.CheckNow(call);
  ASSERT_THAT(first, IsOk());
  EXPECT_TRUE(first->allowed);
  call.now_ms = 5'999;
  StatusOr<Decision> refused = store_.CheckNow(call);
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->retry_after, milliseconds(1));
  call.now_ms = 6'000;
  StatusOr<Decision> again = store_.CheckNow(call);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->allowed);
}

TEST_F(MemoryStoreTest, CheckCallsBackOnceWithTheSameDecision) {
  int calls = 0;
  Decision seen;
  store_.Check(Call("k", 2, seconds(1)), [&](StatusOr<Decision> d) {
    ++calls;
    ASSERT_THAT(d, IsOk());
    seen = *d;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(seen.allowed);
  EXPECT_EQ(seen.remaining, 1);
  // The callback path and CheckNow share the state.
  EXPECT_EQ(Check(Call("k", 2, seconds(1))).remaining, 0);
}

// Many short-lived keys: KeyCount sees only the live ones.
TEST_F(MemoryStoreTest, KeyCountCountsOnlyLiveKeysAfterManyExpire) {
  constexpr int kKeys = 100'000;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("old:" + std::to_string(i), 1, milliseconds(1))).allowed);
  }
  EXPECT_EQ(store_.KeyCount(), static_cast<std::size_t>(kKeys));
  clock_->Advance(milliseconds(1));
  EXPECT_EQ(store_.KeyCount(), 0u);
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("new:" + std::to_string(i), 1, milliseconds(1))).allowed);
  }
  EXPECT_EQ(store_.KeyCount(), static_cast<std::size_t>(kKeys));
  // The old keys were dropped, not merely hidden: they start fresh windows.
  Decision old = Check(Call("old:0", 1, milliseconds(1)));
  EXPECT_TRUE(old.allowed);
  EXPECT_EQ(store_.KeyCount(), static_cast<std::size_t>(kKeys) + 1);
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
std::size_t HeapInUse() {
  return mallinfo2().uordblks;
}
#else
std::size_t HeapInUse() {
  return 0;
}
#endif

// KeyCount filters by expiry, so it cannot show whether expired entries are actually
// freed. The heap can: a second generation of as many keys, inserted after the first
// expired, must reuse the first one's memory instead of adding as much again.
TEST_F(MemoryStoreTest, SweepingFreesExpiredKeys) {
  constexpr int kKeys = 100'000;
  const std::size_t start = HeapInUse();
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("gen1:" + std::to_string(i), 1, milliseconds(1))).allowed);
  }
  const std::size_t after_first = HeapInUse();
  if (after_first < start || after_first - start < kKeys * std::size_t{32}) {
    GTEST_SKIP() << "mallinfo2() does not reflect this allocator (sanitizer build?): " << start
                 << " -> " << after_first;
  }
  const std::size_t first_growth = after_first - start;

  // Reclaimable once their index slot is over (MemoryStore::kSlotMs).
  clock_->Advance(milliseconds(MemoryStore::kSlotMs + 2));
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("gen2:" + std::to_string(i), 1, milliseconds(1))).allowed);
  }
  const std::size_t after_second = HeapInUse();
  const std::size_t second_growth = after_second > after_first ? after_second - after_first : 0;
  std::printf("heap growth: first generation %zu bytes, second generation %zu bytes\n",
              first_growth, second_growth);
  EXPECT_LT(second_growth, first_growth / 2)
      << "expired entries were not freed: the store holds both generations";
  EXPECT_EQ(store_.KeyCount(), static_cast<std::size_t>(kKeys));
}

// 20,000 ids expire, then light traffic on ONE id (one shard): every call frees a
// bounded number of expired entries (its own shard and one other), and the store soon
// holds only the live one.
TEST_F(MemoryStoreTest, LightTrafficOnOneIdReclaimsEveryExpiredEntry) {
  constexpr int kKeys = 20'000;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("old:" + std::to_string(i), 5, seconds(1))).allowed);
  }
  // Half of them leases too (the lease path files and frees entries the same way).
  for (int i = 0; i < kKeys / 2; ++i) {
    LeaseCall lease{.args = {.op = LeaseOp::kAcquire, .token = "t", .limit = 1, .ttl_ms = 1000},
                    .key = "lease:" + std::to_string(i)};
    ASSERT_EQ(store_.LeaseNow(lease).reply.code, 1);
  }
  const std::size_t held = store_.EntryCount();
  EXPECT_EQ(held, static_cast<std::size_t>(kKeys + kKeys / 2));
  clock_->Advance(seconds(1) + milliseconds(MemoryStore::kSlotMs));
  EXPECT_EQ(store_.KeyCount(), 0u);
  EXPECT_EQ(store_.EntryCount(), held) << "nothing is freed without calls";

  int calls = 0;
  std::size_t before = held;
  std::size_t most_freed_by_one_call = 0;
  while (store_.EntryCount() > 1 && calls < 5'000) {
    (void)Check(Call("busy", 1'000'000, seconds(1)));
    clock_->Advance(milliseconds(1));
    ++calls;
    const std::size_t after = store_.EntryCount();
    ASSERT_LE(after, before + 1);
    most_freed_by_one_call = std::max(most_freed_by_one_call, before + 1 - after);
    before = after;
  }
  std::printf("%zu expired entries freed by %d calls on one id, at most %zu by one call\n", held,
              calls, most_freed_by_one_call);
  EXPECT_EQ(store_.EntryCount(), 1u) << "after " << calls << " calls";
  EXPECT_LE(most_freed_by_one_call, static_cast<std::size_t>(2 * MemoryStore::kReclaimPerCall));
}

// No call pays for the whole store: while a second generation of ids arrives after the
// first expired, each call frees at most its bound (its own shard's and one other's).
TEST_F(MemoryStoreTest, NoCallFreesMoreThanItsBound) {
  constexpr int kKeys = 50'000;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("gen1:" + std::to_string(i), 1, milliseconds(1))).allowed);
  }
  clock_->Advance(milliseconds(MemoryStore::kSlotMs + 2));
  std::size_t before = store_.EntryCount();
  std::size_t most = 0;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("gen2:" + std::to_string(i), 1, milliseconds(10'000))).allowed);
    const std::size_t after = store_.EntryCount();
    ASSERT_LE(after, before + 1);
    most = std::max(most, before + 1 - after);
    before = after;
  }
  EXPECT_LE(most, static_cast<std::size_t>(2 * MemoryStore::kReclaimPerCall));
  EXPECT_EQ(store_.EntryCount(), static_cast<std::size_t>(kKeys)) << "the first generation is gone";
}

// With no calls at all, reclaim steps (a Client runs one every kStepPeriod) free every
// expired entry: each step at most kShardsPerStep x kReclaimPerCall entries, and a
// backlog within a few rotations of kShards / kShardsPerStep steps.
TEST_F(MemoryStoreTest, ReclaimStepsFreeExpiredEntriesWithoutCalls) {
  constexpr int kKeys = 40'000;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(Check(Call("old:" + std::to_string(i), 1, seconds(1))).allowed);
  }
  ASSERT_TRUE(Check(Call("live", 1, seconds(1000))).allowed);
  EXPECT_EQ(store_.ReclaimStep(), 0u) << "nothing has expired yet";
  clock_->Advance(seconds(1) + milliseconds(MemoryStore::kSlotMs));
  ASSERT_EQ(store_.EntryCount(), static_cast<std::size_t>(kKeys) + 1);

  constexpr std::size_t kStepsPerRotation = MemoryStore::kShards / MemoryStore::kShardsPerStep;
  std::size_t steps = 0, most = 0;
  while (store_.EntryCount() > 1 && steps < 100 * kStepsPerRotation) {
    most = std::max(most, store_.ReclaimStep());
    ++steps;
  }
  std::printf("%d expired entries freed by %zu steps (%zu rotations), at most %zu by one step\n",
              kKeys, steps, (steps + kStepsPerRotation - 1) / kStepsPerRotation, most);
  EXPECT_EQ(store_.EntryCount(), 1u) << "after " << steps << " steps";
  EXPECT_LE(most, MemoryStore::kShardsPerStep * MemoryStore::kReclaimPerCall);
  // A shard holds about kKeys / kShards = 156 of them (a hash spreads them; twice that at
  // most), freed kReclaimPerCall per rotation.
  const std::size_t rotations = 2 * kKeys / MemoryStore::kShards / MemoryStore::kReclaimPerCall + 1;
  EXPECT_LE(steps, rotations * kStepsPerRotation);
}

// The index follows expiries that move: a token bucket's expiry (when it is full again)
// moves later as it is spent and earlier when a refund fills it.
TEST_F(MemoryStoreTest, ReclaimFollowsExpiriesMovedEitherWay) {
  const auto bucket = [](std::string key, int64_t cost, Op op = Op::kConsume) {
    CheckCall call{
        .op = op,
        .key = std::move(key),
        .limit = Limit{.algorithm = Algorithm::kTokenBucket, .limit = 10, .window = seconds(10)},
        .cost = cost};
    return call;
  };
  const auto tick = [&](int calls) {
    for (int i = 0; i < calls; ++i) (void)Check(Call("tick", 1'000'000, seconds(1000)));
  };
  // Later: 1 token missing (full in 1 s), then 5 more (full 5 s after that).
  ASSERT_TRUE(Check(bucket("later", 1)).allowed);
  ASSERT_TRUE(Check(bucket("later", 5)).allowed);
  // Earlier: 8 missing (full in 8 s), then 7 refunded (full in 1 s).
  ASSERT_TRUE(Check(bucket("earlier", 8)).allowed);
  ASSERT_TRUE(Check(bucket("earlier", 7, Op::kRefund)).allowed);
  clock_->Advance(seconds(1) + milliseconds(MemoryStore::kSlotMs));
  tick(600);  // every shard visited twice
  EXPECT_EQ(store_.EntryCount(), 2u) << "later's entry stays (refiled), earlier's is freed";
  Decision d = Check(bucket("later", 1, Op::kPeek));
  EXPECT_LT(d.remaining, 9) << "6 missing, 2 refilled since: its state was kept";
  clock_->Advance(seconds(5) + milliseconds(MemoryStore::kSlotMs));
  tick(600);
  EXPECT_EQ(store_.EntryCount(), 1u) << "only tick";
}

TEST(MemoryStore, ConcurrentChecksOnOneKeyAdmitExactlyTheLimit) {
  auto clock = std::make_shared<FakeClock>();
  MemoryStore store(clock);
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 500;
  constexpr int64_t kLimit = 1000;

  std::atomic<int> errors{0};
  std::vector<std::vector<int64_t>> remaining_seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        StatusOr<Decision> d = store.CheckNow(Call("hot", kLimit, seconds(60)));
        if (!d.ok()) {
          errors.fetch_add(1);
        } else if (d->allowed) {
          remaining_seen[t].push_back(d->remaining);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(errors.load(), 0);
  std::multiset<int64_t> all;
  for (const auto& seen : remaining_seen) all.insert(seen.begin(), seen.end());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kLimit));
  // Each admission saw its own count: the remaining values are exactly 999 … 0, once each.
  std::set<int64_t> distinct(all.begin(), all.end());
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kLimit));
  if (!distinct.empty()) {
    EXPECT_EQ(*distinct.begin(), 0);
    EXPECT_EQ(*distinct.rbegin(), kLimit - 1);
  }
  StatusOr<Decision> after = store.CheckNow(Call("hot", kLimit, seconds(60)));
  ASSERT_THAT(after, IsOk());
  EXPECT_FALSE(after->allowed);
}

TEST(MemoryStore, ConcurrentChecksOnManyKeysStayExact) {
  auto clock = std::make_shared<FakeClock>();
  MemoryStore store(clock);
  constexpr int kThreads = 8;
  constexpr int kKeys = 64;
  constexpr int64_t kLimit = 10;
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 5; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          StatusOr<Decision> d = store.CheckNow(Call("k" + std::to_string(k), kLimit, seconds(1)));
          if (d.ok() && d->allowed) admitted.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // 8 × 5 = 40 calls per key, 10 of which fit.
  EXPECT_EQ(admitted.load(), kKeys * kLimit);
  EXPECT_EQ(store.KeyCount(), static_cast<std::size_t>(kKeys));
}

}  // namespace
}  // namespace sluice::internal

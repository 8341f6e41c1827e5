// Periodic sync (LimiterOptions::sync) on the embedded store under a model clock:
// several limiters on one client stand for servers sharing one store; syncs are due on
// the model clock and run from checks, so every run is the same.
#include "client/synced_counts.h"

#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "algo/fixed_window.h"
#include "client/client_core.h"
#include "memory/memory_store.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/fault_store.h"
#include "testing/status_matchers.h"

namespace sluice::synced_counts_test {
namespace {

using std::chrono::milliseconds;
using testing::FakeClock;

constexpr int64_t kStart = 1'700'000'000'000;  // a multiple of 1000: windows line up

std::shared_ptr<Client> MemoryClient(std::shared_ptr<const Clock> clock) {
  auto client = Client::Create({.url = "memory://", .model_clock = std::move(clock)});
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return *client;
}

LimiterOptions Synced(int64_t hot = 50, int64_t servers = 4, int64_t interval_ms = 100) {
  LimiterOptions o;
  o.sync = {.enabled = true,
            .hot_checks_per_second = hot,
            .sync_interval = milliseconds(interval_ms),
            .servers = servers};
  return o;
}

LimiterOptions Budgeted(int64_t hot) {
  LimiterOptions o;
  o.local_budget = {.enabled = true, .hot_checks_per_second = hot};
  return o;
}

const Limit kPerSecond{.limit = 1000, .window = milliseconds(1000), .aligned = true};

// The window a decision counts in (aligned, one second): the model time's.
int64_t WindowOf(const FakeClock& clock) {
  return (clock.NowMs() - kStart) / 1000;
}

struct FleetRun {
  std::map<int64_t, int64_t> admitted;  // per window
  int64_t most_in_an_interval = 0;      // the fleet's admissions in one 100 ms interval
  int64_t local = 0, decided = 0, syncs = 0;
};

// Four servers sharing one store, each `rates[i]` requests a second on one id (spread
// over the milliseconds) for 6 seconds, synced every 100 ms with `servers` as the N of
// remaining / N.
FleetRun RunFourServers(const std::vector<int64_t>& rates, int64_t servers = 4) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  std::vector<Limiter> limiters;
  for (size_t i = 0; i < rates.size(); ++i) {
    limiters.push_back(*client->MakeLimiter("hot", kPerSecond, Synced(50, servers)));
  }
  FleetRun run;
  std::map<int64_t, int64_t> per_interval;
  for (int64_t ms = 0; ms < 6000; ++ms) {
    clock->Set(kStart + ms);
    for (size_t i = 0; i < limiters.size(); ++i) {
      const int64_t due = (ms + 1) * rates[i] / 1000 - ms * rates[i] / 1000;
      for (int64_t k = 0; k < due; ++k) {
        StatusOr<Decision> d = limiters[i].Check("tenant:1");
        EXPECT_TRUE(d.ok()) << d.status().ToString();
        if (!d.ok()) return run;
        ++run.decided;
        if (d->source == DecisionSource::kLocalSync) ++run.local;
        if (!d->allowed) continue;
        ++run.admitted[WindowOf(*clock)];
        ++per_interval[ms / 100];
      }
    }
  }
  for (const auto& [i, n] : per_interval)
    run.most_in_an_interval = std::max(run.most_in_an_interval, n);
  run.syncs = static_cast<int64_t>(client->stats().syncs);
  std::cout << "admitted per window:";
  for (const auto& [w, n] : run.admitted) std::cout << " " << n;
  std::cout << "; most in a 100 ms interval " << run.most_in_an_interval << "; decided locally "
            << run.local << " of " << run.decided << ", syncs " << run.syncs << "\n";
  return run;
}

// Every window admits at most the limit + (N - 1) / N x limit (the bound that holds
// whatever the timing, design.md §7) and, the syncs being regular here, at most the
// limit + (N - 1) / N x the most the fleet admitted in one interval; at least 80% of the
// limit where demand is above it (the first window warms up: ids turn hot); syncs are
// a small fraction of the decisions.
void ExpectWithinTheBounds(const FleetRun& run, int64_t demand) {
  for (const auto& [w, n] : run.admitted) {
    EXPECT_LE(n, 1000 + 3 * 1000 / 4) << "window " << w;
    EXPECT_LE(n, 1000 + 3 * run.most_in_an_interval / 4) << "window " << w;
    if (w > 0 && demand > 1000) {
      EXPECT_GE(n, 800) << "window " << w;
    }
  }
  EXPECT_GT(run.local, run.decided * 9 / 10) << "most decisions are local";
  EXPECT_LT(run.syncs * 10, run.decided);
}

TEST(Sync, FourServersEvenTrafficStayWithinTheBounds) {
  ExpectWithinTheBounds(RunFourServers({500, 500, 500, 500}), 2000);
}

TEST(Sync, FourServersSkewedTrafficStayWithinTheBounds) {
  ExpectWithinTheBounds(RunFourServers({1600, 300, 200, 100}), 2200);
}

TEST(Sync, FourServersFloodingStayWithinTheBounds) {
  ExpectWithinTheBounds(RunFourServers({4000, 4000, 4000, 4000}), 16000);
}

// Each sync gives a process remaining / N. Were the share not divided (N = 1), four
// flooding servers would each spend all that is left: the bound checked above fails.
TEST(Sync, WithoutTheDivisionTheBoundIsExceeded) {
  const FleetRun run = RunFourServers({4000, 4000, 4000, 4000}, /*servers=*/1);
  int64_t worst = 0;
  for (const auto& [w, n] : run.admitted) worst = std::max(worst, n);
  EXPECT_GT(worst, 1000 + 3 * 1000 / 4);
}

// A cold id (called less than hot_checks_per_second) decides exactly as the plain shared
// path: the same decisions, field by field, through checks of mixed costs, peeks,
// refunds and a window's end, under either mode.
TEST(Sync, AColdIdDecidesExactlyAsWithoutEitherMode) {
  for (const char* mode : {"sync", "prefetch"}) {
    auto clock = std::make_shared<FakeClock>(kStart);
    auto client = MemoryClient(clock);
    const Limit five{.limit = 5, .window = milliseconds(1000), .aligned = true};
    const LimiterOptions options =
        std::string(mode) == "sync" ? Synced(/*hot=*/1000) : Budgeted(/*hot=*/1000);
    auto moded = *client->MakeLimiter("moded", five, options);
    auto plain = *client->MakeLimiter("plain", five);
    std::mt19937 rng(7);
    for (int i = 0; i < 300; ++i) {
      const int64_t cost = 1 + static_cast<int64_t>(rng() % 3);
      const int kind = static_cast<int>(rng() % 10);
      StatusOr<Decision> a = InternalError("unset"), b = InternalError("unset");
      if (kind < 7) {
        a = moded.Check("u", {.cost = cost});
        b = plain.Check("u", {.cost = cost});
      } else if (kind < 9) {
        a = moded.Peek("u", {.cost = cost});
        b = plain.Peek("u", {.cost = cost});
      } else {
        a = moded.Refund("u", 1);
        b = plain.Refund("u", 1);
      }
      ASSERT_THAT(a, testing::IsOk());
      ASSERT_THAT(b, testing::IsOk());
      EXPECT_EQ(a->ToString(), b->ToString()) << mode << " step " << i;
      EXPECT_NE(a->source, DecisionSource::kLocalSync) << mode << " step " << i;
      EXPECT_NE(a->source, DecisionSource::kLocalBudget) << mode << " step " << i;
      clock->Advance(milliseconds(1 + rng() % 60));  // < 1000 a second: never hot
    }
  }
}

// An id turns hot, is counted locally, and when its rate falls below half the threshold
// it leaves: its last count is pushed, and later checks take the store path again, with
// the store holding every admission of the window.
TEST(Sync, AnIdLeavesTheLocalModeWhenItCools) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  const Limit big{.limit = 100000, .window = milliseconds(60000), .aligned = true};
  auto limiter = *client->MakeLimiter("cooling", big, Synced(/*hot=*/100, /*servers=*/1));
  auto plain = *client->MakeLimiter("cooling", big);  // same keys, the plain path
  int64_t admitted = 0, local = 0;
  for (int i = 0; i < 1000; ++i) {  // 1,000 a second for a second
    clock->Set(kStart + i);
    StatusOr<Decision> d = limiter.Check("x");
    ASSERT_THAT(d, testing::IsOk());
    ASSERT_TRUE(d->allowed);
    ++admitted;
    if (d->source == DecisionSource::kLocalSync) ++local;
  }
  EXPECT_GT(local, 900);
  // Then 10 a second: it cools within two seconds and returns to the store.
  Decision last;
  for (int i = 0; i < 40; ++i) {
    clock->Set(kStart + 1000 + i * 100);
    StatusOr<Decision> d = limiter.Check("x");
    ASSERT_THAT(d, testing::IsOk());
    ++admitted;
    last = *d;
  }
  EXPECT_EQ(last.source, DecisionSource::kStore);
  // Every admission is in the store: its remaining is the limit minus all of them.
  StatusOr<Decision> peek = plain.Peek("x");
  ASSERT_THAT(peek, testing::IsOk());
  EXPECT_EQ(peek->remaining, 100000 - admitted);
}

// The store fails: the share held keeps being spent, then the failure policy answers.
TEST(Sync, StoreDownSpendsTheShareThenThePolicy) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto faults =
      std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock));
  auto client = *internal::ClientFactory::WithStore(
      {.url = "memory://", .on_failure = FailurePolicy::kClosed, .model_clock = clock}, faults);
  const Limit limit{.limit = 1000, .window = milliseconds(10000), .aligned = true};
  auto limiter = *client->MakeLimiter("down", limit, Synced(/*hot=*/10, /*servers=*/4));
  for (int i = 0; i < 50; ++i) {  // hot, synced: a share of 1000 / 4 minus what it spent
    clock->Set(kStart + i);
    ASSERT_TRUE(limiter.Check("x")->allowed);
  }
  faults->FailRandomly(1.0, UnavailableError("injected: redis down"));
  int64_t local = 0;
  Decision d;
  for (int i = 0; i < 400; ++i) {
    clock->Set(kStart + 50 + i);
    d = *limiter.Check("x");
    if (d.source != DecisionSource::kLocalSync) break;
    ASSERT_TRUE(d.allowed);
    ++local;
  }
  std::cout << "admitted locally with the store down: " << local << "\n";
  EXPECT_GT(local, 100);
  EXPECT_LE(local, 250);
  EXPECT_EQ(d.source, DecisionSource::kFailClosed);
  EXPECT_FALSE(d.allowed);
}

TEST(Sync, OnlyForFixedWindowAndWithSaneOptions) {
  auto client = MemoryClient(std::make_shared<FakeClock>(kStart));
  EXPECT_THAT(client->MakeLimiter("tb", Limit::TokenBucket(10, 10), Synced()),
              testing::StatusIs(StatusCode::kInvalidArgument));
  LimiterOptions bad = Synced();
  bad.sync.sync_interval = milliseconds(0);
  EXPECT_THAT(client->MakeLimiter("fw", kPerSecond, bad),
              testing::StatusIs(StatusCode::kInvalidArgument));
  LimiterOptions both = Synced();
  both.local_budget.enabled = true;
  EXPECT_THAT(client->MakeLimiter("fw", kPerSecond, both),
              testing::StatusIs(StatusCode::kInvalidArgument));
}

// The sync step of the twin (fixed_window.lua op 4 is held to it by the Redis test).
TEST(Sync, TheSyncStepAddsOnlyToTheWindowThatAdmitted) {
  std::optional<internal::FixedWindowState> state;
  int64_t expires = 0;
  const internal::AlgoArgs learn{internal::Op::kSync, 0, 10, 1000, 0, true};
  // No window: one is opened (count 0), and named.
  internal::AlgoReply r = internal::FixedWindowStep(state, learn, 1500, expires);
  EXPECT_EQ(r, (internal::AlgoReply{1, 10, 500, 2000}));
  // Seven units of that window: added; never above the limit.
  r = internal::FixedWindowStep(state, {internal::Op::kSync, 7, 10, 1000, 2000, true}, 1600,
                                expires);
  EXPECT_EQ(r, (internal::AlgoReply{1, 3, 400, 2000}));
  r = internal::FixedWindowStep(state, {internal::Op::kSync, 7, 10, 1000, 2000, true}, 1700,
                                expires);
  EXPECT_EQ(r, (internal::AlgoReply{1, 0, 300, 2000}));
  // Units of a window that is over are dropped; the new window is named.
  r = internal::FixedWindowStep(state, {internal::Op::kSync, 5, 10, 1000, 2000, true}, 2100,
                                expires);
  EXPECT_EQ(r, (internal::AlgoReply{1, 10, 900, 3000}));
  EXPECT_EQ(expires, 3000);
}

// A hot id whose requests cost more than one share (limit / servers) can never be
// admitted from a share: such requests are decided exactly by the store, as on a cold
// id, and admitted while the store has room for them.
TEST(SyncedCounts, ACostAboveTheShareIsDecidedByTheStore) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  const Limit limit{.limit = 1000, .window = std::chrono::seconds(60)};
  auto limiter = *client->MakeLimiter("big", limit, Synced(/*hot=*/50, /*servers=*/10));
  for (int i = 0; i < 100; ++i) {
    clock->Advance(milliseconds(5));
    ASSERT_TRUE(limiter.Check("hot")->allowed);
  }
  int admitted = 0, from_store = 0;
  for (int i = 0; i < 20; ++i) {
    clock->Advance(milliseconds(5));
    auto d = limiter.Check("hot", {.cost = 150});
    ASSERT_THAT(d, testing::IsOk());
    admitted += d->allowed;
    // The store's decision, or its refusal remembered by the denial cache.
    from_store += d->source == DecisionSource::kStore || d->source == DecisionSource::kCachedDenial;
  }
  // 900 left at most (100 spent): 6 requests of 150 fit, whatever was synced yet.
  EXPECT_GE(admitted, 5);
  EXPECT_LE(admitted, 6);
  EXPECT_EQ(from_store, 20) << "a request larger than any share was decided locally";
}

}  // namespace
}  // namespace sluice::synced_counts_test

namespace sluice::synced_counts_test {
namespace {

// A reset forgets the id's count in the store, and what this process admitted and had
// not pushed yet with it: after the reset the id gets the whole limit (one process, so
// its share is all that is left), the units admitted before the reset not counted again.
TEST(SyncedCounts, AResetForgetsTheUnitsNotPushedYet) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  const Limit limit{.limit = 1000, .window = std::chrono::seconds(60), .aligned = true};
  auto limiter = *client->MakeLimiter("reset", limit, Synced(/*hot=*/50, /*servers=*/1));
  int local = 0;
  for (int i = 0; i < 300; ++i) {
    clock->Advance(milliseconds(1));
    auto d = limiter.Check("x");
    ASSERT_TRUE(d.ok() && d->allowed);
    local += d->source == DecisionSource::kLocalSync;
  }
  ASSERT_GT(local, 0) << "the id never turned hot";
  ASSERT_THAT(limiter.Reset("x"), testing::IsOk());
  int64_t admitted = 0;
  for (int i = 0; i < 3000; ++i) {
    clock->Advance(milliseconds(1));
    auto d = limiter.Check("x");
    ASSERT_THAT(d, testing::IsOk());
    admitted += d->allowed;
  }
  EXPECT_EQ(admitted, limit.limit);
}

}  // namespace
}  // namespace sluice::synced_counts_test

namespace sluice::synced_counts_test {
namespace {

// An id that cools pushes its last count; when that push fails (the store is down just
// then), the units are pushed again once the store answers: every admission ends up in
// the store.
TEST(SyncedCounts, ACooledIdsFailedLastPushIsPushedAgain) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto faults =
      std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock));
  auto client = *internal::ClientFactory::WithStore(
      {.url = "memory://",
       .on_failure = FailurePolicy::kOpen,
       .breaker_failures = 1000000,  // its cool-down is on the real clock: never opened here
       .model_clock = clock},
      faults);
  const Limit limit{.limit = 100000, .window = std::chrono::seconds(60), .aligned = true};
  auto limiter = *client->MakeLimiter("cooled", limit, Synced(/*hot=*/100, /*servers=*/1));
  auto plain = *client->MakeLimiter("cooled", limit);  // same keys, the plain path
  int64_t admitted = 0, local = 0;
  for (int i = 0; i < 1000; ++i) {  // 1,000 a second for a second: hot
    clock->Advance(milliseconds(1));
    auto d = limiter.Check("x");
    ASSERT_TRUE(d.ok() && d->allowed && d->source != DecisionSource::kFailOpen);
    ++admitted;
    local += d->source == DecisionSource::kLocalSync;
  }
  ASSERT_GT(local, 900);
  // The store goes down; x is called no more and cools (checks of a cold id run the
  // syncs on the model clock): its last push fails.
  faults->FailRandomly(1.0, UnavailableError("injected: redis down"));
  for (int i = 0; i < 40; ++i) {
    clock->Advance(milliseconds(100));
    ASSERT_THAT(limiter.Check("other"), testing::IsOk());
  }
  // The store is back: a few more intervals.
  faults->FailRandomly(0.0, Status::Ok());
  for (int i = 0; i < 10; ++i) {
    clock->Advance(milliseconds(100));
    ASSERT_THAT(limiter.Check("other"), testing::IsOk());
  }
  auto peek = plain.Peek("x");
  ASSERT_THAT(peek, testing::IsOk());
  ASSERT_EQ(peek->source, DecisionSource::kStore);
  EXPECT_EQ(limit.limit - peek->remaining, admitted) << "admissions never pushed to the store";
}

}  // namespace
}  // namespace sluice::synced_counts_test

// Local budgets (LimiterOptions::local_budget) on the embedded store under a model
// clock: several limiters on one client stand for servers sharing one store.
#include "client/local_budget.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "memory/memory_store.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/fault_store.h"
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

TEST(LocalBudget, NotForTheSlidingLogAndOnlyWithSaneOptions) {
  auto client = MemoryClient(std::make_shared<FakeClock>(kStart));
  EXPECT_THAT(
      client->MakeLimiter(
          "log", {.algorithm = Algorithm::kSlidingLog, .limit = 10, .window = milliseconds(1000)},
          Budgeted()),
      testing::StatusIs(StatusCode::kInvalidArgument));
  for (const Limit& ok :
       {kPerSecond, Limit::TokenBucket(10, 10), Limit::Gcra(10, 10),
        Limit{.algorithm = Algorithm::kSlidingWindow, .limit = 10, .window = milliseconds(1000)}}) {
    EXPECT_THAT(client->MakeLimiter("ok", ok, Budgeted()), testing::IsOk());
  }
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
                                 kPerSecond);
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

// How long a slice lives, per algorithm (docs/design.md §7).
TEST(LocalBudgets, ASliceLivesWhileItsUnitsStillCount) {
  using internal::LocalBudgets;
  EXPECT_EQ(LocalBudgets::SliceLifeMs(kPerSecond, 20, 400), 400);
  EXPECT_EQ(LocalBudgets::SliceLifeMs(kPerSecond, 20, 5000), LocalBudgets::kMaxSliceLifeMs);
  // Sliding window of 1 s: reset_after runs to the end of the next window.
  const Limit sliding{
      .algorithm = Algorithm::kSlidingWindow, .limit = 1000, .window = milliseconds(1000)};
  EXPECT_EQ(LocalBudgets::SliceLifeMs(sliding, 20, 1400), 399);
  EXPECT_LE(LocalBudgets::SliceLifeMs(sliding, 20, 900), 0);
  // Buckets of 1,000 refilled at 1,000/s: 20 tokens refill in 20 ms; 1,000/s at 3/s:
  // 20 tokens in 6,666.7 ms.
  for (Limit bucket : {Limit::TokenBucket(1000, 1000), Limit::Gcra(1000, 1000)}) {
    EXPECT_EQ(LocalBudgets::SliceLifeMs(bucket, 20, 500), 478);
    EXPECT_EQ(LocalBudgets::SliceLifeMs(bucket, 20, 21), -1);  // a nearly full bucket
    bucket.refill = 3;
    EXPECT_EQ(LocalBudgets::SliceLifeMs(bucket, 20, 7000), 7000 - 2 - 6667);
  }
}

// ---------------------------------------------------------------------------------------
// Every algorithm with slices, on varied demand: servers on one store under a model clock.

struct Admissions {
  std::vector<int64_t> per_ms;  // admitted at each ms of the run
  int64_t local = 0, store = 0;
};

// `servers` limiters on one store; at ms t server i sends demand(i, t) checks of id "h".
template <typename Demand>
Admissions Drive(const Limit& limit, const LimiterOptions& options, int servers, int64_t ms,
                 Demand demand) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  std::vector<Limiter> limiters;
  for (int i = 0; i < servers; ++i) limiters.push_back(*client->MakeLimiter("h", limit, options));
  Admissions out;
  out.per_ms.assign(static_cast<size_t>(ms), 0);
  for (int64_t t = 0; t < ms; ++t) {
    clock->Set(kStart + t);
    for (int i = 0; i < servers; ++i) {
      for (int n = demand(i, t); n > 0; --n) {
        StatusOr<Decision> d = limiters[static_cast<size_t>(i)].Check("h");
        EXPECT_TRUE(d.ok()) << d.status().ToString();
        if (!d.ok() || !d->allowed) continue;
        ++out.per_ms[static_cast<size_t>(t)];
        ++(d->source == DecisionSource::kLocalBudget ? out.local : out.store);
      }
    }
  }
  return out;
}

// Phases of 20-300 ms in which each server sends, every ms, 0 to 3 checks with a
// probability of its own: floods, trickles, silences (the bucket fills up again), bursts.
class VariedDemand {
 public:
  VariedDemand(int servers, int64_t ms, uint32_t seed) : rng_(seed) {
    int64_t t = 0;
    while (t < ms) {
      const int64_t length = 20 + static_cast<int64_t>(rng_() % 281);
      std::vector<std::pair<int, int>> phase;  // per server: per-mille probability, count
      for (int i = 0; i < servers; ++i) {
        static constexpr int kChances[] = {0, 0, 20, 100, 400, 1000, 1000};
        phase.emplace_back(kChances[rng_() % 7], 1 + static_cast<int>(rng_() % 3));
      }
      phases_.push_back({t, std::move(phase)});
      t += length;
    }
  }
  int operator()(int server, int64_t t) {
    while (at_ + 1 < phases_.size() && phases_[at_ + 1].first <= t) ++at_;
    const auto [chance, count] = phases_[at_].second[static_cast<size_t>(server)];
    return static_cast<int>(rng_() % 1000) < chance ? count : 0;
  }

 private:
  std::mt19937 rng_;
  std::vector<std::pair<int64_t, std::vector<std::pair<int, int>>>> phases_;
  size_t at_ = 0;
};

// The largest excess over `capacity + refill × (b − a) / window` of what was admitted in
// any interval [a, b] of at most `span` ms (the bucket's own bound: > 0 is an overshoot).
int64_t WorstBucketExcess(const std::vector<int64_t>& per_ms, const Limit& limit, int64_t span) {
  const int64_t rate = limit.refill == 0 ? limit.limit : limit.refill;
  const int64_t w = limit.window.count();
  std::vector<int64_t> sum(per_ms.size() + 1, 0);
  for (size_t i = 0; i < per_ms.size(); ++i) sum[i + 1] = sum[i] + per_ms[i];
  int64_t worst = INT64_MIN;
  for (size_t a = 0; a < per_ms.size(); ++a) {
    for (size_t b = a; b < per_ms.size() && static_cast<int64_t>(b - a) <= span; ++b) {
      const int64_t admitted = sum[b + 1] - sum[a];
      const int64_t bound = limit.limit + rate * static_cast<int64_t>(b - a) / w;
      worst = std::max(worst, admitted - bound);
    }
  }
  return worst;
}

// The largest excess over the limit of the sliding-window estimate of what was admitted
// (floor(previous × (w − e) / w) + current at every ms; windows aligned to the clock).
int64_t WorstSlidingExcess(const std::vector<int64_t>& per_ms, const Limit& limit) {
  const int64_t w = limit.window.count();
  int64_t worst = INT64_MIN, previous = 0, current = 0;
  for (size_t t = 0; t < per_ms.size(); ++t) {
    const int64_t e = (kStart + static_cast<int64_t>(t)) % w;
    if (e == 0 && t > 0) {
      previous = current;
      current = 0;
    }
    current += per_ms[t];
    worst = std::max(worst, previous * (w - e) / w + current - limit.limit);
  }
  return worst;
}

class Sliced : public ::testing::TestWithParam<Algorithm> {
 protected:
  // 200 per 200 ms (a bucket of 200 refilled at 1/ms), so that a bucket slice's life
  // (at most the 200 ms a whole bucket takes to refill) stays under the 1 s cap and the
  // checks below see the exact bound; slices of at most 20.
  Limit TheLimit() const {
    return {.algorithm = GetParam(),
            .limit = 200,
            .window = milliseconds(200),
            .aligned = GetParam() == Algorithm::kFixedWindow};
  }
  // Never over the algorithm's own bound; > 0 is an overshoot.
  int64_t WorstExcess(const std::vector<int64_t>& per_ms) const {
    const Limit limit = TheLimit();
    switch (GetParam()) {
      case Algorithm::kSlidingWindow: return WorstSlidingExcess(per_ms, limit);
      case Algorithm::kTokenBucket:
      case Algorithm::kGcra: return WorstBucketExcess(per_ms, limit, 1000);
      default: {
        int64_t worst = INT64_MIN;
        std::map<int64_t, int64_t> windows;
        for (size_t t = 0; t < per_ms.size(); ++t) {
          windows[(kStart + static_cast<int64_t>(t)) / limit.window.count()] += per_ms[t];
        }
        for (const auto& [k, n] : windows) worst = std::max(worst, n - limit.limit);
        return worst;
      }
    }
  }
};

std::string AlgorithmParamName(const ::testing::TestParamInfo<Algorithm>& param) {
  return std::string(AlgorithmName(param.param));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Sliced,
                         ::testing::Values(Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                                           Algorithm::kTokenBucket, Algorithm::kGcra),
                         AlgorithmParamName);

// Varied demand from four servers, several seeds: never over the algorithm's bound.
TEST_P(Sliced, NeverOverTheBoundOnVariedDemand) {
  int64_t local = 0, store = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    VariedDemand demand(4, 8000, seed);
    const Admissions run = Drive(TheLimit(), Budgeted(/*hot=*/20), 4, 8000,
                                 [&](int server, int64_t t) { return demand(server, t); });
    EXPECT_LE(WorstExcess(run.per_ms), 0) << "seed " << seed;
    local += run.local;
    store += run.store;
  }
  std::cout << AlgorithmName(GetParam()) << ": " << local << " admitted from slices, " << store
            << " by the store\n";
  EXPECT_GT(local * 20, local + store) << "slices were taken and spent";
}

// Four servers flooding (each 2 checks a ms, 8 times the limit): every aligned window
// admits no less than the limit less what four slices hold (4 × 20), less 2 for the
// edges (the previous window's weight at the last ms; a bucket refills 199 tokens
// between a window's first and last ms), and never more than the bound. (Only a fixed
// window's slices carry a flood: a bucket or a sliding window frees units one at a
// time, so cost + slice rarely fits and checks take the plain path.)
TEST_P(Sliced, AFloodFillsToWithinTheSlices) {
  const Admissions run =
      Drive(TheLimit(), Budgeted(/*hot=*/20), 4, 4000, [](int, int64_t) { return 2; });
  EXPECT_LE(WorstExcess(run.per_ms), 0);
  // Whole windows (aligned for both window algorithms) after the first one.
  int64_t least = INT64_MAX;
  for (int64_t from = 400; from + 200 <= 4000; from += 200) {
    int64_t n = 0;
    for (int64_t t = from; t < from + 200; ++t) n += run.per_ms[static_cast<size_t>(t)];
    least = std::min(least, n);
  }
  std::cout << AlgorithmName(GetParam()) << ": at least " << least << " admitted per window; "
            << run.local << " from slices, " << run.store << " by the store\n";
  EXPECT_GE(least, 200 - 4 * 20 - 2);
  if (GetParam() == Algorithm::kFixedWindow) {
    EXPECT_GT(run.local, 2 * run.store);
  }
}

// Four servers each sending a check every 5 ms (80% of the limit, hot): everything is
// admitted, mostly from slices.
TEST_P(Sliced, BelowTheLimitSlicesCarryTheLoad) {
  const Admissions run = Drive(TheLimit(), Budgeted(/*hot=*/20), 4, 4000,
                               [](int server, int64_t t) { return (t + server) % 5 == 0; });
  int64_t admitted = 0;
  for (int64_t n : run.per_ms) admitted += n;
  std::cout << AlgorithmName(GetParam()) << ": " << admitted << " of 3200 admitted; " << run.local
            << " from slices, " << run.store << " by the store\n";
  EXPECT_LE(WorstExcess(run.per_ms), 0);
  EXPECT_EQ(admitted, 3200);
  EXPECT_GT(run.local, 2 * run.store);
}

// The edge a slice's life guards: server A takes a slice, goes quiet, and X ms later
// spends what it holds while server B drains whatever the store has left. For every X,
// the fleet stays within the bound: a bucket's slice must be over before the bucket
// would have refilled it, a window's before its window ends.
TEST_P(Sliced, ASliceNeverOutlivesTheBudgetItCameFrom) {
  int spent_late = 0;
  for (int64_t x = 1; x <= 260; ++x) {
    auto clock = std::make_shared<FakeClock>(kStart);
    auto client = MemoryClient(clock);
    auto a = *client->MakeLimiter("edge", TheLimit(), Budgeted(/*hot=*/20));
    auto b = *client->MakeLimiter("edge", TheLimit());
    std::vector<int64_t> per_ms(600, 0);
    int64_t t = 0;
    for (; t < 150; ++t) {  // A, one check a ms, until a store call gives it a fresh slice
      clock->Set(kStart + t);
      StatusOr<Decision> d = a.Check("x");
      ASSERT_THAT(d, testing::IsOk());
      if (d->allowed) ++per_ms[static_cast<size_t>(t)];
      if (t >= 30 && d->allowed && d->source == DecisionSource::kStore && d->remaining > 0) break;
    }
    t += x;
    clock->Set(kStart + t);
    for (int i = 0; i < 25; ++i) {
      StatusOr<Decision> d = a.Check("x");
      ASSERT_THAT(d, testing::IsOk());
      if (!d->allowed) continue;
      ++per_ms[static_cast<size_t>(t)];
      if (d->source == DecisionSource::kLocalBudget) ++spent_late;
    }
    for (int i = 0; i < 400; ++i) {
      StatusOr<Decision> d = b.Check("x");
      ASSERT_THAT(d, testing::IsOk());
      if (d->allowed) ++per_ms[static_cast<size_t>(t)];
    }
    per_ms.resize(static_cast<size_t>(t) + 1);
    ASSERT_LE(WorstExcess(per_ms), 0) << "A spent its slice " << x << " ms after taking it";
  }
  EXPECT_GT(spent_late, 0) << "the slices were spent at some of the offsets";
}

// A cold id decides field by field as without the option (the store, then cached
// denials, as without).
TEST_P(Sliced, AColdIdDecidesExactlyAsWithout) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  Limit three = TheLimit();
  three.limit = 3;
  auto budgeted = *client->MakeLimiter("cold", three, Budgeted(/*hot=*/1000));
  auto plain = *client->MakeLimiter("plain", three);
  for (int i = 0; i < 40; ++i) {
    StatusOr<Decision> a = budgeted.Check("u");
    StatusOr<Decision> b = plain.Check("u");
    ASSERT_THAT(a, testing::IsOk());
    ASSERT_THAT(b, testing::IsOk());
    EXPECT_EQ(a->ToString(), b->ToString()) << i;
    EXPECT_EQ(a->retry_after, b->retry_after) << i;
    EXPECT_NE(a->source, DecisionSource::kLocalBudget) << i;
    clock->Advance(milliseconds(7 + 11 * (i % 3)));
  }
}

// sliding_window: units a slice did not spend before its window ended are given back to
// that window's count (now the previous one), which weighs less in the next window; the
// next window's own count is not touched.
TEST(LocalBudget, SlidingWindowLeftoversGoBackToTheirOwnWindow) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  const Limit sliding{
      .algorithm = Algorithm::kSlidingWindow, .limit = 1000, .window = milliseconds(1000)};
  auto limiter = *client->MakeLimiter("sw", sliding, Budgeted(/*hot=*/5, /*max_slice=*/40));
  auto plain = *client->MakeLimiter("sw", sliding);  // the same key, no slices
  // A call a ms from 800 ms into window 0; stop right after a store call took a slice.
  Decision took;
  for (int i = 0; i < 150; ++i) {
    clock->Set(kStart + 800 + i);
    took = *limiter.Check("x");
    ASSERT_TRUE(took.allowed);
    if (i >= 100 && took.source == DecisionSource::kStore) break;
  }
  ASSERT_EQ(took.source, DecisionSource::kStore);
  const Decision spent = *limiter.Check("x");
  ASSERT_EQ(spent.source, DecisionSource::kLocalBudget);
  const int64_t held = spent.remaining;                       // left in the slice
  const int64_t counted = 1000 - plain.Peek("x")->remaining;  // window 0's count
  ASSERT_GT(held, 1);
  // Window 1: the slice is over; the next check gives its units back, then takes anew.
  clock->Set(kStart + 1500);
  ASSERT_TRUE(limiter.Check("x")->allowed);
  // At e = 500 window 0's count weighs half; at e = 999, nothing (for counts < 1000).
  const int64_t half = plain.Peek("x")->remaining;
  clock->Set(kStart + 1999);
  const int64_t none = plain.Peek("x")->remaining;
  EXPECT_EQ(half - none, -((counted - held) * 500 / 1000))
      << "window 0 counted " << counted << ", " << held << " of them never spent";
}

// The store down, on_failure = local: a request asks the store for its cost plus a
// slice, and the local fallback must decide the request's own cost against the divided
// limit, as without slices: a hot id gets limit / servers, each refusal is over_limit.
TEST(LocalBudget, TheLocalFallbackDecidesTheRequestsOwnCostNotTheSlice) {
  for (const milliseconds slice_period : {milliseconds(50), milliseconds(1000)}) {
    for (const bool budgeted : {false, true}) {
      auto clock = std::make_shared<FakeClock>(kStart);
      auto faults = std::make_shared<testing::FaultStore>(
          std::make_shared<internal::MemoryStore>(clock), /*seed=*/3);
      faults->FailRandomly(1.0, UnavailableError("injected: redis stopped"));
      auto client = *internal::ClientFactory::WithStore(
          {.url = "memory://", .breaker_failures = 1000000, .model_clock = clock}, faults);
      LimiterOptions options = Budgeted(/*hot=*/50);
      options.local_budget.enabled = budgeted;
      options.local_budget.slice_period = slice_period;
      options.on_failure = FailurePolicy::kLocal;
      options.servers = 10;
      auto limiter = *client->MakeLimiter(
          "fallback", {.limit = 1000, .window = std::chrono::seconds(20)}, options);
      int admitted = 0, over_limit = 0, other = 0;
      for (int i = 0; i < 300; ++i) {
        clock->Advance(milliseconds(5));
        auto d = limiter.Check("hot");
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        EXPECT_EQ(d->source, DecisionSource::kLocalFallback);
        if (d->allowed) {
          ++admitted;
        } else if (d->reason == RefusalReason::kOverLimit) {
          ++over_limit;
        } else {
          ++other;
        }
      }
      SCOPED_TRACE(::testing::Message()
                   << "budgets " << budgeted << ", slice_period " << slice_period.count() << " ms");
      EXPECT_EQ(admitted, 100);
      EXPECT_EQ(over_limit, 200);
      EXPECT_EQ(other, 0) << "refused for another reason (cost_exceeds_limit: the slice)";
    }
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A reset forgets the id's count in the store, and this process's live slice of it too:
// after the reset, the id gets the limit and no more (a slice kept would be spent on
// top, its units no longer counted anywhere).
TEST(LocalBudget, AResetDropsThisProcesssLiveSlice) {
  auto clock = std::make_shared<FakeClock>(kStart);
  auto client = MemoryClient(clock);
  const Limit limit{.limit = 100, .window = std::chrono::seconds(60), .aligned = true};
  auto limiter = *client->MakeLimiter("reset", limit, Budgeted(/*hot=*/10, /*max_slice=*/20));
  Decision last;
  for (int i = 0; i < 200 && !(last.source == DecisionSource::kLocalBudget && last.remaining > 0);
       ++i) {
    clock->Advance(milliseconds(5));
    last = *limiter.Check("x");
  }
  ASSERT_EQ(last.source, DecisionSource::kLocalBudget) << "the id never took a slice";
  ASSERT_GT(last.remaining, 0);
  ASSERT_THAT(limiter.Reset("x"), testing::IsOk());
  int64_t admitted = 0, from_slices = 0;
  for (int i = 0; i < 300; ++i) {
    clock->Advance(milliseconds(1));
    auto d = limiter.Check("x");
    ASSERT_THAT(d, testing::IsOk());
    admitted += d->allowed;
    from_slices += d->allowed && d->source == DecisionSource::kLocalBudget;
  }
  std::cout << "after the reset: " << admitted << " admitted, " << from_slices
            << " of them from slices\n";
  EXPECT_EQ(admitted, limit.limit);
}

}  // namespace
}  // namespace sluice

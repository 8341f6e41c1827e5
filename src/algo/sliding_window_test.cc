// The sliding window counter twin (SlidingWindowStep) on explicit times: no clock, no
// sleeping. Boundaries are tested 1 ms before and at each rollover, reset and retry moment.
#include "algo/sliding_window.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>

#include "sluice/limits.h"

namespace sluice::internal::sliding_window_test {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kW = 1000;                // the window of most tests
constexpr int64_t kT0 = 1'700'000'000'000;  // a multiple of kW: a window starts here

// An id's stored state as the embedded store keeps it: dropped once it has expired.
struct Id {
  std::optional<SlidingWindowState> state;
  int64_t expires_at_ms = 0;

  AlgoReply Call(Op op, int64_t cost, int64_t limit, int64_t window_ms, int64_t now_ms,
                 int64_t refill = 0) {
    if (state && expires_at_ms <= now_ms) state.reset();
    return SlidingWindowStep(state, {op, cost, limit, window_ms, refill, false}, now_ms,
                             expires_at_ms);
  }
  AlgoReply Consume(int64_t now, int64_t limit, int64_t cost = 1, int64_t w = kW) {
    return Call(Op::kConsume, cost, limit, w, now);
  }
  AlgoReply Peek(int64_t now, int64_t limit, int64_t cost = 1, int64_t w = kW) {
    return Call(Op::kPeek, cost, limit, w, now);
  }
  AlgoReply Refund(int64_t now, int64_t limit, int64_t amount, int64_t w = kW) {
    return Call(Op::kRefund, amount, limit, w, now);
  }
};

void ExpectState(const std::optional<SlidingWindowState>& state, int64_t start, int64_t current,
                 int64_t previous) {
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->start_ms, start);
  EXPECT_EQ(state->current, current);
  EXPECT_EQ(state->previous, previous);
}

TEST(SlidingWindowStep, FirstRequestOpensTheAlignedWindow) {
  Id id;
  AlgoReply r = id.Consume(kT0 + 123, 5);
  // The estimate is 0 again once the 1 has become the previous count and weighs
  // floor(1 * (1000 - e) / 1000) = 0, i.e. at e = 1 of the next window.
  EXPECT_EQ(r, (AlgoReply{1, 4, kT0 + 1001 - (kT0 + 123), 0}));
  ExpectState(id.state, kT0, 1, 0);
  EXPECT_EQ(id.expires_at_ms, kT0 + 1001);
}

TEST(SlidingWindowStep, AdmitsTheLimitAndDoesNotCountRefusals) {
  Id id;
  for (int64_t i = 1; i <= 5; ++i) EXPECT_EQ(id.Consume(kT0 + i, 5).remaining, 5 - i);
  for (int i = 0; i < 50; ++i) {
    AlgoReply r = id.Consume(kT0 + 10 + i, 5);
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(r.remaining, 0);
  }
  ExpectState(id.state, kT0, 5, 0);
  Decision d = MakeDecision(id.Consume(kT0 + 100, 5), 5);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, RefusalReason::kOverLimit);
  EXPECT_GT(d.retry_after, milliseconds(0));
}

TEST(SlidingWindowStep, RolloverOneMsBeforeAndAtTheBoundary) {
  Id id;
  ASSERT_EQ(id.Consume(kT0 + 500, 10, 4).code, 1);
  // 1 ms before the boundary: still the same window.
  AlgoReply before = id.Consume(kT0 + 999, 10, 6);
  EXPECT_EQ(before.code, 1);
  ExpectState(id.state, kT0, 10, 0);
  AlgoReply refused = id.Consume(kT0 + 999, 10);
  EXPECT_EQ(refused.code, 0);
  // At the boundary the 10 are the previous window and weigh fully (e = 0) ...
  AlgoReply at = id.Consume(kT0 + 1000, 10);
  EXPECT_EQ(at.code, 0);
  EXPECT_EQ(at.remaining, 0);
  EXPECT_EQ(at.retry_after_ms, 1);
  ExpectState(id.state, kT0, 10, 0);  // a refusal does not even store the rolled form
  // ... and 1 ms later they weigh floor(10 * 999 / 1000) = 9.
  AlgoReply after = id.Consume(kT0 + 1001, 10);
  EXPECT_EQ(after.code, 1);
  EXPECT_EQ(after.remaining, 0);
  ExpectState(id.state, kT0 + 1000, 1, 10);
}

TEST(SlidingWindowStep, PreviousCountIsWeightedByTheOverlapRoundedDown) {
  Id id;
  ASSERT_EQ(id.Consume(kT0 + 10, 10, 10).code, 1);
  // floor(10 * (1000 - e) / 1000): 10 at e = 0, 9 from e = 1, 7 for e in [201, 300], 6
  // from e = 301, 0 from e = 901.
  const std::pair<int64_t, int64_t> cases[] = {{0, 10},  {1, 9},   {100, 9}, {101, 8},
                                               {250, 7}, {300, 7}, {301, 6}, {900, 1}};
  for (auto [e, used] : cases) {
    AlgoReply r = id.Peek(kT0 + 1000 + e, 10);
    EXPECT_EQ(r.remaining, 10 - used) << "e=" << e;
    ASSERT_TRUE(id.state) << "e=" << e;
    EXPECT_EQ(SlidingWindowUsed(*id.state, kW, kT0 + 1000 + e), used) << "e=" << e;
  }
  // At e = 901 the estimate is 0 for good: the state is gone.
  EXPECT_EQ(id.Peek(kT0 + 1901, 10), (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(id.state.has_value());
}

TEST(SlidingWindowStep, CurrentAndWeightedPreviousAddUp) {
  Id id;
  ASSERT_EQ(id.Consume(kT0 + 10, 10, 8).code, 1);
  // e = 500: the previous 8 weigh 4, so 6 fit and the 7th does not.
  AlgoReply six = id.Consume(kT0 + 1500, 10, 6);
  EXPECT_EQ(six, (AlgoReply{1, 0, kT0 + 3000 + 1 - 167 - (kT0 + 1500), 0}));
  ExpectState(id.state, kT0 + 1000, 6, 8);
  AlgoReply seventh = id.Consume(kT0 + 1500, 10);
  EXPECT_EQ(seventh.code, 0);
  // 6 + 1 fit once the 8 weigh <= 3: 8 * (1000 - e) < 4000, e >= 501.
  EXPECT_EQ(seventh.retry_after_ms, 1);
}

TEST(SlidingWindowStep, TwoWindowsLaterTheStateIsGone) {
  Id id;
  ASSERT_EQ(id.Consume(kT0 + 500, 5, 3).code, 1);
  // The 3 weigh until floor(3 * (1000 - e) / 1000) = 0: e >= 1000 + 1 - ceil(1000 / 3).
  EXPECT_EQ(id.expires_at_ms, kT0 + 1667);
  EXPECT_EQ(id.Peek(kT0 + 1666, 5).remaining, 4);
  ASSERT_TRUE(id.state);
  EXPECT_EQ(id.Peek(kT0 + 1667, 5), (AlgoReply{1, 5, 0, 0}));
  EXPECT_FALSE(id.state.has_value());

  // A current count of at least a window's ms weighs until the very end of the next window.
  Id busy;
  ASSERT_EQ(busy.Consume(kT0, 5000, 2000).code, 1);
  EXPECT_EQ(busy.expires_at_ms, kT0 + 2000);
  EXPECT_EQ(busy.Peek(kT0 + 1999, 5000).remaining, 5000 - 2);
  EXPECT_EQ(busy.Peek(kT0 + 2000, 5000), (AlgoReply{1, 5000, 0, 0}));
  EXPECT_FALSE(busy.state.has_value());
}

TEST(SlidingWindowStep, StaleStateIsPrunedByTheCallThatReadsIt) {
  // Called directly (no store expiring it first), the twin itself drops a dead state.
  std::optional<SlidingWindowState> state = SlidingWindowState{kT0, 3, 0};
  int64_t expires_at = 0;
  AlgoReply r = SlidingWindowStep(state, {Op::kPeek, 1, 5, kW, 0, false}, kT0 + 5000, expires_at);
  EXPECT_EQ(r, (AlgoReply{1, 5, 0, 0}));
  EXPECT_FALSE(state.has_value());
  // A consume on it starts afresh in the window of `now`.
  state = SlidingWindowState{kT0, 3, 7};
  r = SlidingWindowStep(state, {Op::kConsume, 2, 5, kW, 0, false}, kT0 + 5250, expires_at);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.remaining, 3);
  ExpectState(state, kT0 + 5000, 2, 0);
  // Counts that are both 0 are never live.
  state = SlidingWindowState{kT0, 0, 0};
  r = SlidingWindowStep(state, {Op::kPeek, 1, 5, kW, 0, false}, kT0, expires_at);
  EXPECT_EQ(r, (AlgoReply{1, 5, 0, 0}));
  EXPECT_FALSE(state.has_value());
}

TEST(SlidingWindowStep, CostIsAllOrNothing) {
  Id id;
  ASSERT_EQ(id.Consume(kT0, 10, 7).code, 1);
  AlgoReply refused = id.Consume(kT0 + 1, 10, 4);
  EXPECT_EQ(refused.code, 0);
  EXPECT_EQ(refused.remaining, 3);
  ExpectState(id.state, kT0, 7, 0);
  EXPECT_EQ(id.Consume(kT0 + 2, 10, 3).remaining, 0);
  ExpectState(id.state, kT0, 10, 0);
}

TEST(SlidingWindowStep, CostAboveLimitIsRefusedWithItsReasonAndChangesNothing) {
  Id id;
  EXPECT_EQ(id.Consume(kT0, 5, 6), (AlgoReply{2, 5, 0, 0}));
  EXPECT_FALSE(id.state.has_value()) << "a refusal created state";
  EXPECT_EQ(id.Peek(kT0, 5, 6).code, 2);

  ASSERT_EQ(id.Consume(kT0, 5, 2).code, 1);
  const SlidingWindowState before = *id.state;
  AlgoReply r = id.Consume(kT0 + 10, 5, 100);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.remaining, 3);
  EXPECT_EQ(r.retry_after_ms, r.reset_after_ms);
  ExpectState(id.state, before.start_ms, before.current, before.previous);
  Decision d = MakeDecision(r, 5);
  EXPECT_EQ(d.reason, RefusalReason::kCostExceedsLimit);
  // Cost == limit is admitted on an empty state.
  Id fresh;
  EXPECT_EQ(fresh.Consume(kT0, 5, 5).code, 1);
}

TEST(SlidingWindowStep, PeekReportsWithoutSpending) {
  Id id;
  ASSERT_EQ(id.Consume(kT0, 3, 2).code, 1);
  AlgoReply yes = id.Peek(kT0 + 1, 3);
  EXPECT_EQ(yes.code, 1);
  EXPECT_EQ(yes.remaining, 1);
  AlgoReply no = id.Peek(kT0 + 1, 3, 2);
  EXPECT_EQ(no.code, 0);
  ExpectState(id.state, kT0, 2, 0);
  // The same answer a consume gives, without its effect.
  Id twin = id;
  AlgoReply consumed = twin.Consume(kT0 + 1, 3, 2);
  EXPECT_EQ(no, consumed);
  // Peek on no state: full, nothing created.
  Id none;
  EXPECT_EQ(none.Peek(kT0, 3), (AlgoReply{1, 3, 0, 0}));
  EXPECT_FALSE(none.state.has_value());
}

TEST(SlidingWindowStep, RefundTakesFromCurrentThenPreviousNeverBelowZero) {
  Id id;
  ASSERT_EQ(id.Consume(kT0, 10, 6).code, 1);
  ASSERT_EQ(id.Consume(kT0 + 1000, 10, 3).code, 1);  // e = 0: 6 weigh 6; 6 + 3 <= 10
  ExpectState(id.state, kT0 + 1000, 3, 6);
  // 2 of the current 3.
  AlgoReply r = id.Refund(kT0 + 1500, 10, 2);
  EXPECT_EQ(r.code, 1);
  ExpectState(id.state, kT0 + 1000, 1, 6);
  EXPECT_EQ(r.remaining, 10 - (1 + 3));
  // 1 from the current, 3 from the previous.
  r = id.Refund(kT0 + 1500, 10, 4);
  ExpectState(id.state, kT0 + 1000, 0, 3);
  EXPECT_EQ(r.remaining, 10 - 1);  // floor(3 * 500 / 1000) = 1
  EXPECT_EQ(r.reset_after_ms, kT0 + 1000 + 1001 - 334 - (kT0 + 1500));
  // More than is left: all gone, the state is deleted.
  r = id.Refund(kT0 + 1500, 10, 50);
  EXPECT_EQ(r, (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(id.state.has_value());
  // A refund with no state is a no-op (amount above the limit included).
  EXPECT_EQ(id.Refund(kT0 + 1500, 10, 11), (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(id.state.has_value());
}

TEST(SlidingWindowStep, RefundAfterRolloverGivesBackFromThePreviousWindow) {
  Id id;
  ASSERT_EQ(id.Consume(kT0 + 900, 4, 4).code, 1);
  // The window rolled: the 4 are the previous count, weighing floor(4 * 900 / 1000) = 3.
  EXPECT_EQ(id.Peek(kT0 + 1100, 4).remaining, 1);
  AlgoReply r = id.Refund(kT0 + 1100, 4, 2);
  ExpectState(id.state, kT0 + 1000, 0, 2);
  EXPECT_EQ(r.remaining, 4 - 1);  // floor(2 * 900 / 1000) = 1
  EXPECT_EQ(r.reset_after_ms, kT0 + 1501 - (kT0 + 1100));
  EXPECT_EQ(id.expires_at_ms, kT0 + 1501);
}

// Local budgets: a take is a consume whose reply names the window's end; a give-back
// takes units from the named window's own count only.
TEST(SlidingWindowStep, ATakeNamesItsWindowAndAGiveBackLandsOnlyInIt) {
  Id id;
  AlgoReply r = id.Call(Op::kTake, 6, 20, kW, kT0 + 300);
  EXPECT_EQ(r, (AlgoReply{1, 14, kT0 + 2001 - 167 - (kT0 + 300), kT0 + 1000}));
  r = id.Call(Op::kTake, 4, 20, kW, kT0 + 400);
  EXPECT_EQ(r.retry_after_ms, kT0 + 1000);
  ExpectState(id.state, kT0, 10, 0);
  // A refused take is a refused consume (its retry_after).
  Id twin = id;
  EXPECT_EQ(id.Call(Op::kTake, 11, 20, kW, kT0 + 500), twin.Consume(kT0 + 500, 20, 11));
  // Given back to the current window (named by its end): from its count only.
  r = id.Call(Op::kGiveBack, 3, 20, kW, kT0 + 500, /*window end=*/kT0 + 1000);
  EXPECT_EQ(r.code, 1);
  ExpectState(id.state, kT0, 7, 0);
  EXPECT_EQ(r.remaining, 13);
  // A window that is neither current nor previous: nothing.
  id.Call(Op::kGiveBack, 3, 20, kW, kT0 + 500, kT0);
  id.Call(Op::kGiveBack, 3, 20, kW, kT0 + 500, kT0 + 2000);
  id.Call(Op::kGiveBack, 3, 20, kW, kT0 + 500, kT0 + 999);
  ExpectState(id.state, kT0, 7, 0);
  // In the next window: 2 counted there; a give-back naming the window that ended takes
  // from the previous count alone, never below 0.
  ASSERT_EQ(id.Consume(kT0 + 1100, 20, 2).code, 1);
  ExpectState(id.state, kT0 + 1000, 2, 7);
  id.Call(Op::kGiveBack, 5, 20, kW, kT0 + 1200, kT0 + 1000);
  ExpectState(id.state, kT0 + 1000, 2, 2);
  id.Call(Op::kGiveBack, 5, 20, kW, kT0 + 1200, kT0 + 1000);
  ExpectState(id.state, kT0 + 1000, 2, 0);
  // Two windows later the named window is neither: the current count is untouched.
  ASSERT_EQ(id.Consume(kT0 + 2100, 20, 1).code, 1);
  id.Call(Op::kGiveBack, 5, 20, kW, kT0 + 2200, kT0 + 1000);
  ExpectState(id.state, kT0 + 2000, 1, 2);
  // With no state, a give-back (even of more than the limit) is a no-op.
  Id none;
  EXPECT_EQ(none.Call(Op::kGiveBack, 50, 20, kW, kT0, kT0 + 1000), (AlgoReply{1, 20, 0, 0}));
  EXPECT_FALSE(none.state.has_value());
}

TEST(SlidingWindowStep, ResetForgetsTheId) {
  Id id;
  ASSERT_EQ(id.Consume(kT0, 2, 2).code, 1);
  EXPECT_EQ(id.Call(Op::kReset, 1, 2, kW, kT0 + 1), (AlgoReply{1, 2, 0, 0}));
  EXPECT_FALSE(id.state.has_value());
  EXPECT_EQ(id.Consume(kT0 + 2, 2, 2).code, 1);
}

TEST(SlidingWindowStep, LimitChangeDecidesOnTheStoredCounts) {
  Id id;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(id.Consume(kT0, 5).code, 1);
  ASSERT_EQ(id.Consume(kT0, 5).code, 0);
  AlgoReply raised = id.Consume(kT0 + 1, 8);
  EXPECT_EQ(raised.code, 1);
  EXPECT_EQ(raised.remaining, 2);
  ExpectState(id.state, kT0, 6, 0);
  // Lowered below what is counted: refused, remaining clamps to 0, and retry_after is when
  // the 6 weigh at most 3 - 1 in the next window: floor(6 * (1000 - m) / 1000) <= 2,
  // 6 * (1000 - m) < 3000, m >= 501.
  AlgoReply lowered = id.Consume(kT0 + 2, 3);
  EXPECT_EQ(lowered.code, 0);
  EXPECT_EQ(lowered.remaining, -3);
  EXPECT_EQ(MakeDecision(lowered, 3).remaining, 0);
  EXPECT_EQ(lowered.retry_after_ms, kT0 + 1501 - (kT0 + 2));
  EXPECT_EQ(id.Peek(kT0 + 1500, 3).code, 0);
  EXPECT_EQ(id.Peek(kT0 + 1501, 3).code, 1);
}

TEST(SlidingWindowStep, NegativeModelTimesAlignToMultiplesToo) {
  Id id;
  ASSERT_EQ(id.Consume(-5500, 3).code, 1);
  ExpectState(id.state, -6000, 1, 0);
  Id exact;
  ASSERT_EQ(exact.Consume(-5000, 3).code, 1);
  ExpectState(exact.state, -5000, 1, 0);
}

TEST(SlidingWindowStep, ClockSteppingBackWeighsAsAtTheWindowStart) {
  std::optional<SlidingWindowState> state = SlidingWindowState{kT0, 2, 10};
  int64_t expires_at = 0;
  AlgoReply r = SlidingWindowStep(state, {Op::kPeek, 1, 20, kW, 0, false}, kT0 - 300, expires_at);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.remaining, 20 - 12);
  EXPECT_EQ(r.reset_after_ms, kT0 + 2000 + 1 - 500 - (kT0 - 300));
  // Up to a whole window back the state stands; further back it is dropped.
  r = SlidingWindowStep(state, {Op::kPeek, 1, 20, kW, 0, false}, kT0 - 1000, expires_at);
  EXPECT_EQ(r.remaining, 20 - 12);
  ASSERT_TRUE(state.has_value());
  r = SlidingWindowStep(state, {Op::kPeek, 1, 20, kW, 0, false}, kT0 - 1001, expires_at);
  EXPECT_EQ(r, (AlgoReply{1, 20, 0, 0}));
  EXPECT_FALSE(state.has_value());
}

// Properties that must hold after any call, on random traces (fixed, printed seeds):
// retry_after is exact (passes at now + retry_after, not 1 ms earlier), reset_after is
// exact (the estimate is 0 from then on, not 1 ms earlier) and is when the state expires.
void CheckBoundaries(uint32_t seed, int64_t max_limit, int64_t w, int steps) {
  std::cout << "sliding window boundaries: seed=" << seed << " max_limit=" << max_limit
            << " window_ms=" << w << "\n";
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  Id id;
  int64_t now = kT0 + pick(w);
  int64_t limit = 1 + pick(max_limit);
  int refusals = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " step " << step);
    switch (pick(4)) {
      case 0: break;
      case 1: now += pick(w / 8 + 1); break;
      case 2: now += pick(w + 1); break;
      default: now += 1; break;
    }
    if (pick(30) == 0) limit = 1 + pick(max_limit);
    const int64_t cost = pick(5) == 0 ? 1 + pick(limit) : 1 + pick(std::max<int64_t>(1, limit / 8));
    const bool refund = pick(12) == 0;
    AlgoReply r = refund ? id.Refund(now, limit, cost, w) : id.Consume(now, limit, cost, w);
    ASSERT_TRUE(r.code == 0 || r.code == 1) << r.code;
    if (id.state) {
      EXPECT_EQ(id.expires_at_ms, now + r.reset_after_ms);
      EXPECT_EQ(limit - SlidingWindowUsed(*id.state, w, now), r.remaining);
      EXPECT_GT(SlidingWindowUsed(*id.state, w, now + r.reset_after_ms - 1), 0);
      EXPECT_EQ(SlidingWindowUsed(*id.state, w, now + r.reset_after_ms), 0);
    } else {
      EXPECT_EQ(r, (AlgoReply{1, limit, 0, 0}));
    }
    if (r.code == 0) {
      ++refusals;
      ASSERT_GT(r.retry_after_ms, 0);
      ASSERT_LE(r.retry_after_ms, r.reset_after_ms);
      Id probe = id;
      EXPECT_EQ(probe.Peek(now + r.retry_after_ms - 1, limit, cost, w).code, 0);
      probe = id;
      EXPECT_EQ(probe.Peek(now + r.retry_after_ms, limit, cost, w).code, 1);
    }
  }
  EXPECT_GT(refusals, steps / 20);
}

TEST(SlidingWindowStep, RetryAfterAndResetAfterAreExact) {
  CheckBoundaries(1, 12, 1000, 3000);
  CheckBoundaries(2, 5, 7, 3000);
  CheckBoundaries(3, 3, 1, 2000);
  CheckBoundaries(4, 100'000, 60'000, 3000);
}

// Counts near 2^40 and windows near 366 days make products far above 2^53: the twin
// computes them exactly (the script digit by digit); the boundaries stay exact.
TEST(SlidingWindowStep, HugeLimitsAndWindowsStayExact) {
  CheckBoundaries(5, kMaxLimit, kMaxWindow.count(), 3000);
  CheckBoundaries(6, kMaxLimit, 3'600'000, 3000);
  Id id;
  const int64_t w = kMaxWindow.count();
  ASSERT_EQ(id.Consume(0, kMaxLimit, kMaxLimit, w).code, 1);
  // floor(2^40 * (w - e) / w) at e = w / 3 (w is a multiple of 3): exactly 2/3 of 2^40,
  // rounded down.
  EXPECT_EQ(id.Peek(w + w / 3, kMaxLimit, 1, w).remaining, kMaxLimit - (kMaxLimit * 2) / 3);
}

// A debit is added to the current count whether it fits or not, the estimate never above
// twice the limit, and checks pass again once the window has slid far enough.
TEST(SlidingWindowDebit, RecoversAsTheWindowSlides) {
  Id id;
  // 30 into an empty id: 20 counted (10 below zero), the rest dropped.
  EXPECT_EQ(id.Call(Op::kDebit, 30, 10, kW, kT0), (AlgoReply{0, -10, 1951, 1501}));
  ExpectState(id.state, kT0, 20, 0);
  // 500 ms into the next window the 20 weigh floor(20 * 500 / 1000) = 10: still full.
  EXPECT_EQ(id.Consume(kT0 + 1500, 10).code, 0);
  // 1 ms later they weigh 9: one unit passes.
  EXPECT_EQ(id.Consume(kT0 + 1501, 10), (AlgoReply{1, 0, 500, 0}));
  // A further debit stops at the bound whatever its size.
  EXPECT_EQ(id.Call(Op::kDebit, 1'000'000, 10, kW, kT0 + 1502).remaining, -10);
}

TEST(SlidingWindowDebit, ThatFitsLeavesRoomAndResetClearsADebt) {
  Id id;
  EXPECT_EQ(id.Call(Op::kDebit, 4, 10, kW, kT0), (AlgoReply{1, 6, 1751, 0}));
  EXPECT_EQ(id.Call(Op::kDebit, 100, 10, kW, kT0 + 1).remaining, -10);
  EXPECT_EQ(id.Call(Op::kReset, 1, 10, kW, kT0 + 2), (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(id.state.has_value());
  EXPECT_EQ(id.Consume(kT0 + 3, 10).code, 1);
}

}  // namespace
}  // namespace sluice::internal::sliding_window_test

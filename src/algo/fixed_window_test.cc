// The fixed window twin (FixedWindowStep) and the decision both stores build from its
// outcome (FixedWindowDecision), on explicit times: no clock, no sleeping.
#include "algo/fixed_window.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

namespace sluice::internal {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kT0 = 1'700'000'000'123;  // an arbitrary, unaligned start time

// One request through the twin, as both stores decide it.
struct Step {
  FixedWindowOutcome outcome;
  Decision decision;
};

Step Decide(std::optional<FixedWindowState>& state, const FixedWindowArgs& args, int64_t now_ms) {
  Step step;
  step.outcome = FixedWindowStep(state, args, now_ms);
  step.decision = FixedWindowDecision(step.outcome, args.limit);
  return step;
}

FixedWindowArgs Args(int64_t limit, int64_t window_ms, int64_t cost = 1, bool aligned = false) {
  return FixedWindowArgs{.limit = limit, .window_ms = window_ms, .cost = cost, .aligned = aligned};
}

void ExpectSameState(const std::optional<FixedWindowState>& a,
                     const std::optional<FixedWindowState>& b) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (a) {
    EXPECT_EQ(a->count, b->count);
    EXPECT_EQ(a->ends_ms, b->ends_ms);
  }
}

TEST(FixedWindowStep, AdmitsExactlyLimitThenRefuses) {
  std::optional<FixedWindowState> state;
  const FixedWindowArgs args = Args(5, 1000);
  for (int64_t i = 1; i <= 5; ++i) {
    Step s = Decide(state, args, kT0 + i);
    EXPECT_EQ(s.outcome.code, 1) << "request " << i;
    EXPECT_EQ(s.outcome.count, i);
    EXPECT_TRUE(s.decision.allowed);
    EXPECT_EQ(s.decision.remaining, 5 - i);
    EXPECT_EQ(s.decision.reason, RefusalReason::kNone);
  }
  for (int i = 0; i < 3; ++i) {
    Step s = Decide(state, args, kT0 + 10 + i);
    EXPECT_EQ(s.outcome.code, 0);
    EXPECT_EQ(s.outcome.count, 5);
    EXPECT_FALSE(s.decision.allowed);
    EXPECT_EQ(s.decision.remaining, 0);
    EXPECT_EQ(s.decision.reason, RefusalReason::kOverLimit);
  }
}

TEST(FixedWindowStep, RefusedRequestsAreNotCounted) {
  std::optional<FixedWindowState> state;
  const FixedWindowArgs args = Args(3, 1000);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Decide(state, args, kT0).outcome.code, 1);
  const std::optional<FixedWindowState> full = state;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(Decide(state, args, kT0 + 500).outcome.code, 0);
  ExpectSameState(state, full);
  EXPECT_EQ(state->count, 3);

  // The next window starts from zero, not from the refusals.
  Step next = Decide(state, args, kT0 + 1000);
  EXPECT_EQ(next.outcome.code, 1);
  EXPECT_EQ(next.outcome.count, 1);
  EXPECT_EQ(next.decision.remaining, 2);
}

TEST(FixedWindowStep, CostIsAdmittedOnlyIfAllOfItFits) {
  std::optional<FixedWindowState> state;
  EXPECT_EQ(Decide(state, Args(10, 1000, 4), kT0).outcome.count, 4);
  EXPECT_EQ(Decide(state, Args(10, 1000, 4), kT0).outcome.count, 8);

  // 8 + 4 > 10: refused, and none of the 4 is consumed.
  Step refused = Decide(state, Args(10, 1000, 4), kT0 + 1);
  EXPECT_EQ(refused.outcome.code, 0);
  EXPECT_EQ(refused.outcome.count, 8);
  EXPECT_EQ(refused.decision.remaining, 2);
  EXPECT_EQ(refused.decision.reason, RefusalReason::kOverLimit);
  EXPECT_EQ(state->count, 8);

  // 3 does not fit either; exactly the 2 that are left do.
  EXPECT_EQ(Decide(state, Args(10, 1000, 3), kT0 + 2).outcome.code, 0);
  Step exact = Decide(state, Args(10, 1000, 2), kT0 + 3);
  EXPECT_EQ(exact.outcome.code, 1);
  EXPECT_EQ(exact.outcome.count, 10);
  EXPECT_EQ(exact.decision.remaining, 0);
  EXPECT_EQ(Decide(state, Args(10, 1000, 1), kT0 + 4).outcome.code, 0);
}

TEST(FixedWindowStep, CostEqualToLimitIsAdmittedOnAFreshWindow) {
  std::optional<FixedWindowState> state;
  Step s = Decide(state, Args(7, 1000, 7), kT0);
  EXPECT_EQ(s.outcome.code, 1);
  EXPECT_EQ(s.decision.remaining, 0);
}

TEST(FixedWindowStep, CostAboveLimitIsRefusedWithReasonAndTouchesNoState) {
  // No key yet: it stays absent (the refusal opens no window).
  std::optional<FixedWindowState> state;
  Step s = Decide(state, Args(5, 1000, 6), kT0);
  EXPECT_EQ(s.outcome.code, 2);
  EXPECT_FALSE(s.decision.allowed);
  EXPECT_EQ(s.decision.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(s.decision.remaining, 5);
  EXPECT_FALSE(state.has_value());

  // A window in progress keeps its count and end.
  ASSERT_EQ(Decide(state, Args(5, 1000, 2), kT0).outcome.code, 1);
  const std::optional<FixedWindowState> before = state;
  Step again = Decide(state, Args(5, 1000, 100), kT0 + 10);
  EXPECT_EQ(again.outcome.code, 2);
  EXPECT_EQ(again.outcome.count, 2);
  EXPECT_EQ(again.decision.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(again.decision.remaining, 3);
  ExpectSameState(state, before);

  // Even when the window is not full, cost > limit is refused as such, not as over limit.
  EXPECT_EQ(Decide(state, Args(5, 1000, 6), kT0 + 11).decision.reason,
            RefusalReason::kCostExceedsLimit);
  ExpectSameState(state, before);
}

TEST(FixedWindowStep, WindowOpensAtTheFirstAdmittedRequest) {
  std::optional<FixedWindowState> state;
  // A refusal (cost > limit) at kT0 opens nothing ...
  ASSERT_EQ(Decide(state, Args(2, 1000, 3), kT0).outcome.code, 2);
  // ... so the window opens at the first admitted request, 400 ms later.
  Step first = Decide(state, Args(2, 1000), kT0 + 400);
  EXPECT_EQ(first.outcome.code, 1);
  EXPECT_EQ(first.outcome.ttl_ms, 1000);
  EXPECT_EQ(state->ends_ms, kT0 + 1400);
  EXPECT_EQ(first.decision.reset_after, milliseconds(1000));

  Step second = Decide(state, Args(2, 1000), kT0 + 700);
  EXPECT_EQ(second.outcome.ttl_ms, 700);
  EXPECT_EQ(state->ends_ms, kT0 + 1400) << "later requests do not move the window";
}

TEST(FixedWindowStep, OneMillisecondBeforeTheEndIsStillRefused) {
  std::optional<FixedWindowState> state;
  const FixedWindowArgs args = Args(2, 1000);
  ASSERT_EQ(Decide(state, args, kT0).outcome.code, 1);
  ASSERT_EQ(Decide(state, args, kT0 + 1).outcome.code, 1);
  Step s = Decide(state, args, kT0 + 999);
  EXPECT_EQ(s.outcome.code, 0);
  EXPECT_EQ(s.outcome.ttl_ms, 1);
  EXPECT_EQ(s.decision.reset_after, milliseconds(1));
  EXPECT_EQ(s.decision.retry_after, milliseconds(1));
  EXPECT_EQ(s.decision.RetryAfterSeconds(), 1);
}

TEST(FixedWindowStep, AtTheEndAFreshWindowOpens) {
  std::optional<FixedWindowState> state;
  const FixedWindowArgs args = Args(2, 1000);
  ASSERT_EQ(Decide(state, args, kT0).outcome.code, 1);
  ASSERT_EQ(Decide(state, args, kT0 + 1).outcome.code, 1);
  Step s = Decide(state, args, kT0 + 1000);
  EXPECT_EQ(s.outcome.code, 1);
  EXPECT_EQ(s.outcome.count, 1);
  EXPECT_EQ(s.outcome.ttl_ms, 1000);
  EXPECT_EQ(s.decision.remaining, 1);
  EXPECT_EQ(state->ends_ms, kT0 + 2000) << "the new window opens now, not at the old end";
}

TEST(FixedWindowStep, LongAfterTheEndAFreshWindowOpensAtThatTime) {
  std::optional<FixedWindowState> state;
  ASSERT_EQ(Decide(state, Args(1, 1000), kT0).outcome.code, 1);
  Step s = Decide(state, Args(1, 1000), kT0 + 123'456);
  EXPECT_EQ(s.outcome.code, 1);
  EXPECT_EQ(state->ends_ms, kT0 + 123'456 + 1000);
}

TEST(FixedWindowStep, AlignedWindowsEndAtMultiplesOfTheWindow) {
  std::optional<FixedWindowState> state;
  const FixedWindowArgs args = Args(2, 1000, 1, /*aligned=*/true);
  Step first = Decide(state, args, 12'345);
  EXPECT_EQ(first.outcome.code, 1);
  EXPECT_EQ(state->ends_ms, 13'000);
  EXPECT_EQ(first.outcome.ttl_ms, 655);
  EXPECT_EQ(first.decision.reset_after, milliseconds(655));

  ASSERT_EQ(Decide(state, args, 12'900).outcome.code, 1);
  Step refused = Decide(state, args, 12'999);
  EXPECT_EQ(refused.outcome.code, 0);
  EXPECT_EQ(refused.outcome.ttl_ms, 1);

  // At the multiple the next window opens and runs a whole window.
  Step next = Decide(state, args, 13'000);
  EXPECT_EQ(next.outcome.code, 1);
  EXPECT_EQ(next.outcome.count, 1);
  EXPECT_EQ(state->ends_ms, 14'000);
  EXPECT_EQ(next.outcome.ttl_ms, 1000);

  // After an idle gap the window is still aligned, not opened at the request.
  Step later = Decide(state, args, 20'001);
  EXPECT_EQ(later.outcome.code, 1);
  EXPECT_EQ(state->ends_ms, 21'000);
  EXPECT_EQ(later.outcome.ttl_ms, 999);
}

TEST(FixedWindowStep, AlignedStartExactlyOnAMultipleRunsAWholeWindow) {
  for (int64_t start : {int64_t{0}, int64_t{60'000}, int64_t{1'700'000'040'000}}) {
    std::optional<FixedWindowState> state;
    Step s = Decide(state, Args(3, 60'000, 1, /*aligned=*/true), start);
    EXPECT_EQ(s.outcome.code, 1) << start;
    EXPECT_EQ(state->ends_ms, start + 60'000) << start;
    EXPECT_EQ(s.outcome.ttl_ms, 60'000) << start;
  }
}

TEST(FixedWindowStep, AlignedWindowOnRealisticClock) {
  std::optional<FixedWindowState> state;
  Step s = Decide(state, Args(1, 60'000, 1, /*aligned=*/true), kT0);
  EXPECT_EQ(s.outcome.code, 1);
  EXPECT_EQ(state->ends_ms % 60'000, 0);
  EXPECT_GT(state->ends_ms, kT0);
  EXPECT_LE(state->ends_ms - kT0, 60'000);
}

// Limits are arguments (DESIGN.md §1.5): a changed limit applies to the current window.
TEST(FixedWindowStep, LimitChangeTakesEffectOnTheNextCall) {
  std::optional<FixedWindowState> state;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Decide(state, Args(5, 1000), kT0).outcome.code, 1);
  ASSERT_EQ(Decide(state, Args(5, 1000), kT0).outcome.code, 0);
  Step raised = Decide(state, Args(8, 1000), kT0 + 1);
  EXPECT_EQ(raised.outcome.code, 1);
  EXPECT_EQ(raised.outcome.count, 6);
  EXPECT_EQ(raised.decision.limit, 8);
  EXPECT_EQ(raised.decision.remaining, 2);
}

TEST(FixedWindowStep, RemainingIsNeverNegativeWhenTheLimitDrops) {
  std::optional<FixedWindowState> state;
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Decide(state, Args(10, 1000), kT0).outcome.code, 1);
  Step lowered = Decide(state, Args(3, 1000), kT0 + 1);
  EXPECT_EQ(lowered.outcome.code, 0);
  EXPECT_EQ(lowered.outcome.count, 10);
  EXPECT_EQ(lowered.decision.limit, 3);
  EXPECT_EQ(lowered.decision.remaining, 0);
  EXPECT_EQ(state->count, 10);
}

TEST(FixedWindowDecision, RemainingIsNeverNegative) {
  EXPECT_EQ(FixedWindowDecision({.code = 0, .count = 50, .ttl_ms = 10}, 5).remaining, 0);
  EXPECT_EQ(FixedWindowDecision({.code = 1, .count = 5, .ttl_ms = 10}, 5).remaining, 0);
  EXPECT_EQ(FixedWindowDecision({.code = 2, .count = 9, .ttl_ms = 10}, 5).remaining, 0);
  EXPECT_EQ(FixedWindowDecision({.code = 1, .count = 1, .ttl_ms = 10}, 5).remaining, 4);
}

TEST(FixedWindowDecision, AllowedHasZeroRetryAfterAndResetAfterTheTtl) {
  Decision d = FixedWindowDecision({.code = 1, .count = 3, .ttl_ms = 4200}, 10);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limit, 10);
  EXPECT_EQ(d.remaining, 7);
  EXPECT_EQ(d.reset_after, milliseconds(4200));
  EXPECT_EQ(d.retry_after, milliseconds(0));
  EXPECT_EQ(d.RetryAfterSeconds(), 0);
  EXPECT_EQ(d.reason, RefusalReason::kNone);
  EXPECT_EQ(d.source, DecisionSource::kStore);
}

TEST(FixedWindowDecision, RefusedRetryAfterEqualsResetAfter) {
  Decision over = FixedWindowDecision({.code = 0, .count = 10, .ttl_ms = 4200}, 10);
  EXPECT_FALSE(over.allowed);
  EXPECT_EQ(over.reason, RefusalReason::kOverLimit);
  EXPECT_EQ(over.reset_after, milliseconds(4200));
  EXPECT_EQ(over.retry_after, over.reset_after);
  EXPECT_EQ(over.RetryAfterSeconds(), 5);
  EXPECT_EQ(over.source, DecisionSource::kStore);

  Decision too_big = FixedWindowDecision({.code = 2, .count = 0, .ttl_ms = 1000}, 10);
  EXPECT_FALSE(too_big.allowed);
  EXPECT_EQ(too_big.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(too_big.retry_after, too_big.reset_after);
  EXPECT_EQ(too_big.remaining, 10);
}

TEST(FixedWindowStep, RetryAfterIsZeroWhenAllowedAndResetAfterWhenRefused) {
  std::optional<FixedWindowState> state;
  const FixedWindowArgs args = Args(1, 5000);
  Step allowed = Decide(state, args, kT0);
  EXPECT_EQ(allowed.decision.retry_after, milliseconds(0));
  EXPECT_EQ(allowed.decision.reset_after, milliseconds(5000));
  Step refused = Decide(state, args, kT0 + 1234);
  EXPECT_EQ(refused.decision.reset_after, milliseconds(5000 - 1234));
  EXPECT_EQ(refused.decision.retry_after, refused.decision.reset_after);
}

TEST(DecisionRetryAfterSeconds, RoundsUp) {
  Decision d;
  const std::pair<int64_t, int64_t> cases[] = {{0, 0},    {1, 1},    {999, 1},  {1000, 1},
                                               {1001, 2}, {1999, 2}, {2000, 2}, {59'001, 60}};
  for (auto [ms, seconds] : cases) {
    d.retry_after = milliseconds(ms);
    EXPECT_EQ(d.RetryAfterSeconds(), seconds) << ms << " ms";
  }
}

// A model clock may stand anywhere, including before the epoch (the twin's floored
// modulo is written for that). A first request at a negative time should open a window of
// `window_ms`, as at any other time.
// BUG: with no state the twin (and fixed_window.lua) start from ends = 0, so for now < 0
// the "window over" branch is skipped and the window runs until 0 instead.
TEST(FixedWindowStep, FirstRequestAtNegativeModelTimeOpensAWholeWindow) {
  std::optional<FixedWindowState> state;
  Step s = Decide(state, Args(1, 1000), -5000);
  EXPECT_EQ(s.outcome.code, 1);
  EXPECT_EQ(s.outcome.ttl_ms, 1000);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->ends_ms, -4000);

  std::optional<FixedWindowState> aligned;
  Step a = Decide(aligned, Args(1, 1000, 1, /*aligned=*/true), -5500);
  EXPECT_EQ(a.outcome.ttl_ms, 500);
  ASSERT_TRUE(aligned.has_value());
  EXPECT_EQ(aligned->ends_ms, -5000);
}

}  // namespace
}  // namespace sluice::internal

// The token bucket twin (TokenBucketStep) and the Decision both stores build from its
// reply, on explicit times: no clock, no sleeping. Boundaries are checked 1 ms before and
// at each refill and full moment.
#include "algo/token_bucket.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "algo/algorithm.h"
#include "sluice/decision.h"
#include "sluice/limits.h"

namespace sluice::internal::token_bucket_test {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kT0 = 1'700'000'000'123;  // an arbitrary, unaligned start time
constexpr int64_t kUnset = -777'777;        // expires_at_ms before a call

using State = std::optional<TokenBucketState>;

std::string Show(const AlgoReply& r) {
  return "{" + std::to_string(r.code) + ", " + std::to_string(r.remaining) + ", " +
         std::to_string(r.reset_after_ms) + ", " + std::to_string(r.retry_after_ms) + "}";
}

struct Step {
  AlgoReply reply;
  Decision decision;
  int64_t expires_at_ms = kUnset;
};

// One call through the twin, as the memory store makes it: state past its expiry is gone.
Step Call(State& state, const AlgoArgs& args, int64_t now_ms) {
  Step step;
  step.reply = TokenBucketStep(state, args, now_ms, step.expires_at_ms);
  step.decision = MakeDecision(step.reply, args.limit);
  if (state) {
    // Whatever remains expires exactly when the bucket is full again.
    EXPECT_EQ(step.expires_at_ms, state->at_ms + state->full_in_ms) << Show(step.reply);
    EXPECT_GT(step.expires_at_ms, now_ms);
  }
  return step;
}

AlgoArgs Args(Op op, int64_t limit, int64_t window_ms, int64_t refill, int64_t cost = 1) {
  return AlgoArgs{.op = op, .cost = cost, .limit = limit, .window_ms = window_ms, .refill = refill};
}
AlgoArgs Consume(int64_t limit, int64_t window_ms, int64_t refill, int64_t cost = 1) {
  return Args(Op::kConsume, limit, window_ms, refill, cost);
}
AlgoArgs Peek(int64_t limit, int64_t window_ms, int64_t refill, int64_t cost = 1) {
  return Args(Op::kPeek, limit, window_ms, refill, cost);
}
AlgoArgs Refund(int64_t limit, int64_t window_ms, int64_t refill, int64_t amount) {
  return Args(Op::kRefund, limit, window_ms, refill, amount);
}

bool Same(const State& a, const State& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->tokens == b->tokens && a->fraction == b->fraction && a->at_ms == b->at_ms &&
                a->full_in_ms == b->full_in_ms);
}

// ---------------------------------------------------------------------------------------
// Consume

TEST(TokenBucketStep, MissingStateIsAFullBucket) {
  State state;
  Step s = Call(state, Consume(10, 1000, 0), kT0);
  EXPECT_EQ(s.reply, (AlgoReply{1, 9, 100, 0}));  // 10 per 1000 ms: one token per 100 ms
  EXPECT_TRUE(s.decision.allowed);
  EXPECT_EQ(s.decision.remaining, 9);
  EXPECT_EQ(s.decision.reset_after, milliseconds(100));
  EXPECT_EQ(s.expires_at_ms, kT0 + 100);
  ASSERT_TRUE(state);
  EXPECT_EQ(state->tokens, 1);
  EXPECT_EQ(state->fraction, 0);
}

TEST(TokenBucketStep, AdmitsTheCapacityAtOnceThenRefusesUntilATokenIsBack) {
  State state;
  for (int64_t i = 1; i <= 10; ++i) {
    Step s = Call(state, Consume(10, 1000, 0), kT0);
    EXPECT_EQ(s.reply, (AlgoReply{1, 10 - i, 100 * i, 0})) << i;
  }
  Step refused = Call(state, Consume(10, 1000, 0), kT0 + 99);  // 1 ms before a token
  EXPECT_EQ(refused.reply, (AlgoReply{0, 0, 901, 1}));
  EXPECT_EQ(refused.decision.reason, RefusalReason::kOverLimit);
  EXPECT_EQ(refused.decision.retry_after, milliseconds(1));
  Step at = Call(state, Consume(10, 1000, 0), kT0 + 100);  // exactly when it is back
  EXPECT_EQ(at.reply, (AlgoReply{1, 0, 1000, 0}));
  EXPECT_EQ(at.expires_at_ms, kT0 + 1100);
}

TEST(TokenBucketStep, RefillThatDoesNotDivideTheWindowIsExact) {
  // 5 tokens, 3 per 1000 ms: tokens come back at 333⅓, 666⅔, 1000, 1333⅓, 1666⅔ ms.
  State state;
  ASSERT_EQ(Call(state, Consume(5, 1000, 3, 5), kT0).reply, (AlgoReply{1, 0, 1667, 0}));
  EXPECT_EQ(state->tokens, 5);
  EXPECT_EQ(state->fraction, 0);
  EXPECT_EQ(Call(state, Peek(5, 1000, 3), kT0).reply, (AlgoReply{0, 0, 1667, 334}));
  const int64_t back[] = {334, 667, 1000, 1334, 1667};  // rounded up to the ms
  int64_t now = kT0;
  for (int i = 0; i < 5; ++i) {
    const int64_t t = kT0 + back[i];
    // Peeks, so nothing is taken: i tokens are back 1 ms before the moment, i + 1 at it.
    Step before = Call(state, Peek(5, 1000, 3, i + 1), t - 1);
    EXPECT_EQ(before.reply.code, 0) << "1 ms before token " << i;
    EXPECT_EQ(before.reply.retry_after_ms, 1) << i;
    EXPECT_EQ(before.reply.reset_after_ms, kT0 + 1667 - (t - 1)) << i;
    Step at = Call(state, Peek(5, 1000, 3, i + 1), t);
    EXPECT_EQ(at.reply.code, 1) << "at token " << i;
    EXPECT_EQ(at.reply.remaining, i + 1) << i;
    now = t;
  }
  // Full at 1666⅔ ms: the state expires at 1667 and the bucket reports full.
  EXPECT_EQ(Call(state, Peek(5, 1000, 3), now).reply, (AlgoReply{1, 5, 0, 0}));
  EXPECT_FALSE(state) << "a bucket found full is deleted";
}

TEST(TokenBucketStep, FractionsCarryAcrossCalls) {
  // 1000 tokens per 3000 ms, one every 3 ms: a request every ms from an empty bucket
  // keeps the partial tokens between calls, so exactly 1000 pass in 3000 ms.
  State state;
  ASSERT_EQ(Call(state, Consume(1000, 3000, 0, 1000), kT0).reply.code, 1);
  int64_t admitted = 0;
  for (int64_t t = 1; t <= 3000; ++t) {
    if (Call(state, Consume(1000, 3000, 0), kT0 + t).reply.code == 1) ++admitted;
  }
  EXPECT_EQ(admitted, 1000);
}

TEST(TokenBucketStep, CostIsAdmittedOnlyIfAllOfItFits) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 7), kT0).reply, (AlgoReply{1, 3, 700, 0}));
  Step refused = Call(state, Consume(10, 1000, 0, 4), kT0);
  EXPECT_EQ(refused.reply, (AlgoReply{0, 3, 700, 100}));  // one token short: 100 ms
  EXPECT_EQ(state->tokens, 7) << "the refused 4 took nothing";
  EXPECT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0 + 99).reply.code, 0);
  EXPECT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0 + 100).reply, (AlgoReply{1, 0, 1000, 0}));
}

TEST(TokenBucketStep, CostAboveCapacityIsRefusedWithReasonAndTouchesNothing) {
  State state;
  Step none = Call(state, Consume(5, 1000, 0, 6), kT0);
  EXPECT_EQ(none.reply, (AlgoReply{2, 5, 0, 0}));
  EXPECT_EQ(none.decision.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_FALSE(state);
  EXPECT_EQ(none.expires_at_ms, kUnset);

  ASSERT_EQ(Call(state, Consume(5, 1000, 0, 2), kT0).reply.code, 1);
  const State before = state;
  Step live = Call(state, Consume(5, 1000, 0, 100), kT0 + 100);
  EXPECT_EQ(live.reply, (AlgoReply{2, 3, 300, 300}));
  EXPECT_EQ(live.decision.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_TRUE(Same(state, before));
  // A peek says the same.
  EXPECT_EQ(Call(state, Peek(5, 1000, 0, 6), kT0 + 100).reply, live.reply);
}

TEST(TokenBucketStep, RefusedRequestsAreNotCounted) {
  State state;
  ASSERT_EQ(Call(state, Consume(3, 3000, 0, 3), kT0).reply.code, 1);
  const State empty = state;
  for (int i = 0; i < 100; ++i) {
    Step s = Call(state, Consume(3, 3000, 0), kT0 + i);
    EXPECT_EQ(s.reply, (AlgoReply{0, 0, 3000 - i, 1000 - i}));
  }
  EXPECT_TRUE(Same(state, empty));
  // The first token is back exactly when it would have been without the refusals.
  EXPECT_EQ(Call(state, Consume(3, 3000, 0), kT0 + 999).reply.code, 0);
  EXPECT_EQ(Call(state, Consume(3, 3000, 0), kT0 + 1000).reply, (AlgoReply{1, 0, 3000, 0}));
}

TEST(TokenBucketStep, KeyExpiresExactlyWhenTheBucketIsFull) {
  State state;
  Step s = Call(state, Consume(4, 1000, 2, 3), kT0);  // 3 tokens at 2 per s: 1500 ms
  EXPECT_EQ(s.reply, (AlgoReply{1, 1, 1500, 0}));
  EXPECT_EQ(s.expires_at_ms, kT0 + 1500);
  // 1 ms before: not full yet; the state is still there.
  Step before = Call(state, Peek(4, 1000, 2), kT0 + 1499);
  EXPECT_EQ(before.reply, (AlgoReply{1, 3, 1, 0}));
  EXPECT_TRUE(state);
  // At the full moment a store has dropped the key: a missing key is a full bucket...
  State gone;
  EXPECT_EQ(Call(gone, Peek(4, 1000, 2), kT0 + 1500).reply, (AlgoReply{1, 4, 0, 0}));
  // ...and a store that still shows it (Redis expires a key 1 ms after its PX) says the
  // same and deletes it.
  EXPECT_EQ(Call(state, Peek(4, 1000, 2), kT0 + 1500).reply, (AlgoReply{1, 4, 0, 0}));
  EXPECT_FALSE(state);
}

TEST(TokenBucketStep, AdmittedTokensExpireFromTheirOwnTime) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 5), kT0).expires_at_ms, kT0 + 500);
  Step later = Call(state, Consume(10, 1000, 0, 5), kT0 + 200);  // 3 left of the 5
  EXPECT_EQ(later.reply, (AlgoReply{1, 2, 800, 0}));
  EXPECT_EQ(later.expires_at_ms, kT0 + 1000);
  EXPECT_EQ(state->at_ms, kT0 + 200);
  EXPECT_EQ(state->tokens, 8);
}

// ---------------------------------------------------------------------------------------
// Peek, refund, reset

TEST(TokenBucketPeek, OnNoStateReportsAFullBucketAndCreatesNothing) {
  State state;
  EXPECT_EQ(Call(state, Peek(5, 1000, 0, 5), kT0).reply, (AlgoReply{1, 5, 0, 0}));
  EXPECT_EQ(Call(state, Peek(5, 1000, 0, 6), kT0).reply, (AlgoReply{2, 5, 0, 0}));
  EXPECT_FALSE(state);
}

TEST(TokenBucketPeek, ReportsTheBucketNowAndNeverChangesIt) {
  State state;
  ASSERT_EQ(Call(state, Consume(5, 1000, 0, 3), kT0).reply.code, 1);
  const State before = state;
  Step fits = Call(state, Peek(5, 1000, 0, 2), kT0 + 100);
  EXPECT_EQ(fits.reply, (AlgoReply{1, 2, 500, 0}));  // 2 left now, full in 500 ms
  Step refused = Call(state, Peek(5, 1000, 0, 4), kT0 + 100);
  EXPECT_EQ(refused.reply, (AlgoReply{0, 2, 500, 300}));  // 2.5 missing, at most 1: 300 ms
  EXPECT_TRUE(Same(state, before));
  // A refused peek is exactly what a refused consume reports.
  State copy = state;
  EXPECT_EQ(Call(copy, Consume(5, 1000, 0, 4), kT0 + 100).reply, refused.reply);
}

TEST(TokenBucketRefund, GivesTokensBackNeverAboveTheCapacity) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 6), kT0).reply.code, 1);
  Step s = Call(state, Refund(10, 1000, 0, 2), kT0 + 50);  // 5.5 missing - 2 = 3.5
  EXPECT_EQ(s.reply, (AlgoReply{1, 6, 350, 0}));
  EXPECT_TRUE(s.decision.allowed);
  EXPECT_EQ(s.expires_at_ms, kT0 + 400);
  EXPECT_EQ(state->tokens, 3);
  EXPECT_EQ(state->fraction, 500);  // half a token, in 1/1000 token
  // More than is missing: the bucket is full, the state gone.
  EXPECT_EQ(Call(state, Refund(10, 1000, 0, 4), kT0 + 60).reply, (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(state);
  // On a full bucket it is a no-op.
  EXPECT_EQ(Call(state, Refund(10, 1000, 0, 4), kT0 + 70).reply, (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(state);
  // A refund larger than the capacity is accepted and fills the bucket.
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 1), kT0 + 80).reply.code, 1);
  EXPECT_EQ(Call(state, Refund(10, 1000, 0, 1000), kT0 + 80).reply, (AlgoReply{1, 10, 0, 0}));
}

TEST(TokenBucketRefund, ExactlyWhatIsMissingFillsTheBucket) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0).reply.code, 1);
  EXPECT_EQ(Call(state, Refund(10, 1000, 0, 3), kT0 + 100).reply, (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(state);
}

TEST(TokenBucketReset, ForgetsTheId) {
  State state;
  ASSERT_EQ(Call(state, Consume(3, 1000, 0, 3), kT0).reply.code, 1);
  EXPECT_EQ(Call(state, Args(Op::kReset, 3, 1000, 0), kT0 + 1).reply, (AlgoReply{1, 3, 0, 0}));
  EXPECT_FALSE(state);
  EXPECT_EQ(Call(state, Consume(3, 1000, 0, 3), kT0 + 2).reply.code, 1);
}

// ---------------------------------------------------------------------------------------
// Limits are arguments

TEST(TokenBucketPlanChange, ARaisedCapacityAddsItsTokensAtOnce) {
  State state;
  ASSERT_EQ(Call(state, Consume(5, 1000, 5, 5), kT0).reply.code, 1);
  // Upgrade to 10 at the same refill: the 5 spent are still missing, 5 more are there.
  Step up = Call(state, Consume(10, 1000, 5), kT0);
  EXPECT_EQ(up.reply, (AlgoReply{1, 4, 1200, 0}));
  EXPECT_EQ(state->tokens, 6);
}

TEST(TokenBucketPlanChange, ALoweredCapacityCutsTheDeficitToAnEmptyBucket) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 5, 6), kT0).reply, (AlgoReply{1, 4, 1200, 0}));
  // Downgrade to 3: 6 are missing, more than the new bucket holds. It is empty (3
  // missing), and that is written back even by this refusal, so the downgrade costs at
  // most one refill of the new bucket (600 ms), not the old deficit (1200 ms).
  Step down = Call(state, Consume(3, 1000, 5), kT0);
  EXPECT_EQ(down.reply, (AlgoReply{0, 0, 600, 200}));
  EXPECT_EQ(down.decision.remaining, 0);
  EXPECT_EQ(state->tokens, 3);
  EXPECT_EQ(down.expires_at_ms, kT0 + 600);
  EXPECT_EQ(Call(state, Consume(3, 1000, 5), kT0 + 199).reply.code, 0);
  EXPECT_EQ(Call(state, Consume(3, 1000, 5), kT0 + 200).reply, (AlgoReply{1, 0, 600, 0}));
}

TEST(TokenBucketPlanChange, AFasterRefillAppliesToWhatIsMissing) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 10, 10), kT0).reply.code, 1);  // full in 1000
  // The new refill counts from the state's own time: 100 ms at 20 per s brought 2 back.
  Step faster = Call(state, Peek(10, 1000, 20), kT0 + 100);
  EXPECT_EQ(faster.reply, (AlgoReply{1, 2, 400, 0}));
}

TEST(TokenBucketPlanChange, ASlowerRefillNeverOutlivesTheStoredFullTime) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 10, 10), kT0).expires_at_ms, kT0 + 1000);
  // At 1 per s the 9 missing would take 9 s, but the key expires at kT0 + 1000: what is
  // still missing is what 1 per s refills by then, 0.9 token.
  Step slower = Call(state, Peek(10, 1000, 1), kT0 + 100);
  EXPECT_EQ(slower.reply, (AlgoReply{1, 9, 900, 0}));
  // A consume writes the state under the new refill.
  Step spend = Call(state, Consume(10, 1000, 1, 9), kT0 + 100);
  EXPECT_EQ(spend.reply, (AlgoReply{1, 0, 9900, 0}));
  EXPECT_EQ(spend.expires_at_ms, kT0 + 10'000);
}

TEST(TokenBucketPlanChange, AFractionWrittenUnderAWiderWindowStaysBelowOneToken) {
  State state = TokenBucketState{.tokens = 1, .fraction = 999, .at_ms = kT0, .full_in_ms = 2};
  // Under a 10 ms window the fraction 999 would be 99.9 tokens; it is kept below one
  // (1 + 9/10 missing), and the bucket is still full at the stored time, 2 ms away: what
  // is missing is what 5 per 10 ms refills in 2 ms, 1 token.
  Step s = Call(state, Peek(5, 10, 5), kT0);
  EXPECT_EQ(s.reply, (AlgoReply{1, 4, 2, 0}));
}

// ---------------------------------------------------------------------------------------
// Clocks and arithmetic

TEST(TokenBucketStep, AClockThatGoesBackRefillsNothing) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 5), kT0).reply.code, 1);
  Step back = Call(state, Peek(10, 1000, 0), kT0 - 300);
  EXPECT_EQ(back.reply, (AlgoReply{1, 5, 500, 0}));
  EXPECT_TRUE(state);
}

TEST(TokenBucketStep, TheLargestLimitsStayExact) {
  // 2^40 tokens, refill coprime with a 366-day window: products near 2^75.
  const int64_t window = kMaxWindow.count();
  const int64_t rate = kMaxLimit - 1;
  State state;
  Step s = Call(state, Consume(kMaxLimit, window, rate, kMaxLimit), kT0);
  ASSERT_EQ(s.reply.code, 1);
  // ceil(2^40 * window / (2^40 - 1)) computed in 128 bits.
  __extension__ const unsigned __int128 units =
      static_cast<unsigned __int128>(kMaxLimit) * static_cast<unsigned __int128>(window);
  const int64_t full = static_cast<int64_t>((units + rate - 1) / rate);
  EXPECT_EQ(s.reply.reset_after_ms, full);
  EXPECT_EQ(s.expires_at_ms, kT0 + full);
  // One token takes window / rate < 1 ms: after 1 ms, 34 tokens are back (rate/window).
  Step later = Call(state, Peek(kMaxLimit, window, rate), kT0 + 1);
  EXPECT_EQ(later.reply.remaining, rate / window);
}

TEST(TokenBucketStep, ABucketHoldsWhatRefillsWithinTheHorizon) {
  // 2^40 tokens at 1 per 366 days would take 2^40 * 366 days to refill; the capacity in
  // force is what refills in 2^52 ms.
  const int64_t window = kMaxWindow.count();
  const int64_t cap = kBucketHorizonMs / window;
  EXPECT_EQ(BucketCapacity(kMaxLimit, window, 1), cap);
  EXPECT_EQ(BucketCapacity(kMaxLimit, window, kMaxLimit), kMaxLimit);
  State state;
  EXPECT_EQ(Call(state, Peek(kMaxLimit, window, 1), kT0).reply, (AlgoReply{1, cap, 0, 0}));
  EXPECT_EQ(Call(state, Consume(kMaxLimit, window, 1, cap + 1), kT0).reply.code, 2);
  Step all = Call(state, Consume(kMaxLimit, window, 1, cap), kT0);
  EXPECT_EQ(all.reply, (AlgoReply{1, 0, cap * window, 0}));
  EXPECT_LE(all.reply.reset_after_ms, kBucketHorizonMs);
}

TEST(BucketArithmetic, MulDivModIsExactAndSaturates) {
  EXPECT_EQ(MulDivMod(7, 3, 2).quot, 10);
  EXPECT_EQ(MulDivMod(7, 3, 2).rem, 1);
  const QuotRem big = MulDivMod(kMaxLimit, kMaxWindow.count(), kMaxLimit - 1);
  EXPECT_EQ(big.quot, 31'622'400'000);  // 2^40 * w / (2^40 - 1) = w + w / (2^40 - 1)
  EXPECT_EQ(big.rem, 31'622'400'000);
  EXPECT_EQ(MulDivMod(kMaxLimit, kMaxLimit, 1).quot, std::numeric_limits<int64_t>::max());
}

// A debit takes its tokens whether they are there or not, the deficit never above twice
// the capacity (a debt of at most one bucket), and the refill pays the debt off first.
TEST(TokenBucketDebit, RefillCoversTheDebtThenATokenPasses) {
  State state;
  // 10 tokens, 10 per second: one every 100 ms.
  EXPECT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0).reply, (AlgoReply{1, 6, 400, 0}));
  // 20 more: 16 taken (20 missing, 10 below zero), 4 dropped. Full in 2 s; one token
  // passes once 11 have come back.
  const Step debit = Call(state, Args(Op::kDebit, 10, 1000, 0, 20), kT0);
  EXPECT_EQ(debit.reply, (AlgoReply{0, -10, 2000, 1100})) << Show(debit.reply);
  EXPECT_EQ(MakeDecision(debit.reply, 10, Op::kDebit).debt, 10);
  EXPECT_EQ(state->tokens, 20);
  EXPECT_LT(state->fraction, 0) << "a deficit past the capacity is stored marked as a debt";
  EXPECT_EQ(Call(state, Consume(10, 1000, 0), kT0 + 1099).reply, (AlgoReply{0, 0, 901, 1}));
  EXPECT_EQ(Call(state, Consume(10, 1000, 0), kT0 + 1100).reply, (AlgoReply{1, 0, 1000, 0}));
  EXPECT_GE(state->fraction, 0) << "within the capacity again: no mark";
}

TEST(TokenBucketDebit, DebtIsBoundedAndALoweredCapacityKeepsAtMostOneBucketOfIt) {
  State state;
  EXPECT_EQ(Call(state, Args(Op::kDebit, 10, 1000, 0, 1'000'000), kT0).reply,
            (AlgoReply{0, -10, 2000, 1100}));
  EXPECT_EQ(Call(state, Args(Op::kDebit, 10, 1000, 0, 5), kT0).reply,
            (AlgoReply{0, -10, 2000, 1100}));
  EXPECT_EQ(state->tokens, 20);
  // The capacity lowered to 5 (the refill kept at 10 per second): 10 missing at most, one
  // bucket below zero; one token passes once 6 are back.
  EXPECT_EQ(Call(state, Peek(5, 1000, 10), kT0).reply, (AlgoReply{0, 0, 1000, 600}));
  EXPECT_EQ(state->tokens, 10);
  EXPECT_EQ(Call(state, Args(Op::kReset, 5, 1000, 10), kT0 + 1).reply, (AlgoReply{1, 5, 0, 0}));
  EXPECT_FALSE(state.has_value());
}

}  // namespace
}  // namespace sluice::internal::token_bucket_test

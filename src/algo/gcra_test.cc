// The GCRA twin (GcraStep) and the Decision both stores build from its reply, on explicit
// times: no clock, no sleeping. Boundaries are checked 1 ms before and at each refill and
// full moment. GCRA and the token bucket are the same bucket: with a fixed refill their
// twins must give identical replies whatever the trace.
#include "algo/gcra.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "algo/algorithm.h"
#include "algo/token_bucket.h"
#include "sluice/decision.h"
#include "sluice/limits.h"

namespace sluice::internal::gcra_test {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kT0 = 1'700'000'000'123;  // an arbitrary, unaligned start time
constexpr int64_t kUnset = -777'777;        // expires_at_ms before a call

using State = std::optional<GcraState>;

std::string Show(const AlgoReply& r) {
  return "{" + std::to_string(r.code) + ", " + std::to_string(r.remaining) + ", " +
         std::to_string(r.reset_after_ms) + ", " + std::to_string(r.retry_after_ms) + "}";
}

struct Step {
  AlgoReply reply;
  Decision decision;
  int64_t expires_at_ms = kUnset;
};

Step Call(State& state, const AlgoArgs& args, int64_t now_ms) {
  Step step;
  step.reply = GcraStep(state, args, now_ms, step.expires_at_ms);
  step.decision = MakeDecision(step.reply, args.limit);
  if (state) {
    // Whatever remains expires exactly when the bucket is full again: the TAT, rounded up.
    EXPECT_EQ(step.expires_at_ms, state->tat_ms + (state->tat_fraction > 0 ? 1 : 0))
        << Show(step.reply);
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
  return !a || (a->tat_ms == b->tat_ms && a->tat_fraction == b->tat_fraction);
}

// ---------------------------------------------------------------------------------------
// Consume

TEST(GcraStep, MissingStateIsAFullBucketAndTheTatIsOneValue) {
  State state;
  Step s = Call(state, Consume(10, 1000, 0), kT0);
  EXPECT_EQ(s.reply, (AlgoReply{1, 9, 100, 0}));  // 10 per 1000 ms: one token per 100 ms
  EXPECT_TRUE(s.decision.allowed);
  EXPECT_EQ(s.expires_at_ms, kT0 + 100);
  ASSERT_TRUE(state);
  EXPECT_EQ(state->tat_ms, kT0 + 100);
  EXPECT_EQ(state->tat_fraction, 0) << "a refill that divides the window needs no fraction";
}

TEST(GcraStep, AdmitsTheBurstAtOnceThenRefusesUntilATokenIsBack) {
  State state;
  for (int64_t i = 1; i <= 10; ++i) {
    EXPECT_EQ(Call(state, Consume(10, 1000, 0), kT0).reply, (AlgoReply{1, 10 - i, 100 * i, 0}));
  }
  Step refused = Call(state, Consume(10, 1000, 0), kT0 + 99);  // 1 ms before a token
  EXPECT_EQ(refused.reply, (AlgoReply{0, 0, 901, 1}));
  EXPECT_EQ(refused.decision.reason, RefusalReason::kOverLimit);
  EXPECT_EQ(Call(state, Consume(10, 1000, 0), kT0 + 100).reply, (AlgoReply{1, 0, 1000, 0}));
  EXPECT_EQ(state->tat_ms, kT0 + 1100);
}

TEST(GcraStep, RefillThatDoesNotDivideTheWindowIsExact) {
  // 5 tokens, 3 per 1000 ms: one token per 333⅓ ms, kept as ms + thirds of a ms.
  State state;
  ASSERT_EQ(Call(state, Consume(5, 1000, 3, 5), kT0).reply, (AlgoReply{1, 0, 1667, 0}));
  EXPECT_EQ(state->tat_ms, kT0 + 1666);
  EXPECT_EQ(state->tat_fraction, 2);  // + 2/3 ms
  EXPECT_EQ(Call(state, Peek(5, 1000, 3), kT0).reply, (AlgoReply{0, 0, 1667, 334}));
  const int64_t back[] = {334, 667, 1000, 1334, 1667};  // rounded up to the ms
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
  }
  EXPECT_FALSE(state) << "a bucket found full is deleted";
}

TEST(GcraStep, FractionsCarryAcrossCalls) {
  State state;
  ASSERT_EQ(Call(state, Consume(1000, 3000, 0, 1000), kT0).reply.code, 1);
  int64_t admitted = 0;
  for (int64_t t = 1; t <= 3000; ++t) {
    if (Call(state, Consume(1000, 3000, 0), kT0 + t).reply.code == 1) ++admitted;
  }
  EXPECT_EQ(admitted, 1000);
  // 7 per 1000 ms does not divide: 7000 requests one per ms from an empty bucket admit
  // exactly the 49 that come back in 7000 ms.
  State seven;
  ASSERT_EQ(Call(seven, Consume(7, 1000, 7, 7), kT0).reply.code, 1);
  admitted = 0;
  for (int64_t t = 1; t <= 7000; ++t) {
    if (Call(seven, Consume(7, 1000, 7), kT0 + t).reply.code == 1) ++admitted;
  }
  EXPECT_EQ(admitted, 49);
}

TEST(GcraStep, CostIsAdmittedOnlyIfAllOfItFits) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 7), kT0).reply, (AlgoReply{1, 3, 700, 0}));
  EXPECT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0).reply, (AlgoReply{0, 3, 700, 100}));
  EXPECT_EQ(state->tat_ms, kT0 + 700) << "the refused 4 took nothing";
  EXPECT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0 + 99).reply.code, 0);
  EXPECT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0 + 100).reply, (AlgoReply{1, 0, 1000, 0}));
}

TEST(GcraStep, CostAboveTheBurstIsRefusedWithReasonAndTouchesNothing) {
  State state;
  Step none = Call(state, Consume(5, 1000, 0, 6), kT0);
  EXPECT_EQ(none.reply, (AlgoReply{2, 5, 0, 0}));
  EXPECT_EQ(none.decision.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_FALSE(state);
  ASSERT_EQ(Call(state, Consume(5, 1000, 0, 2), kT0).reply.code, 1);
  const State before = state;
  Step live = Call(state, Consume(5, 1000, 0, 100), kT0 + 100);
  EXPECT_EQ(live.reply, (AlgoReply{2, 3, 300, 300}));
  EXPECT_TRUE(Same(state, before));
  EXPECT_EQ(Call(state, Peek(5, 1000, 0, 6), kT0 + 100).reply, live.reply);
}

TEST(GcraStep, RefusedRequestsAreNotCounted) {
  State state;
  ASSERT_EQ(Call(state, Consume(3, 3000, 0, 3), kT0).reply.code, 1);
  const State empty = state;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(Call(state, Consume(3, 3000, 0), kT0 + i).reply,
              (AlgoReply{0, 0, 3000 - i, 1000 - i}));
  }
  EXPECT_TRUE(Same(state, empty));
  EXPECT_EQ(Call(state, Consume(3, 3000, 0), kT0 + 999).reply.code, 0);
  EXPECT_EQ(Call(state, Consume(3, 3000, 0), kT0 + 1000).reply, (AlgoReply{1, 0, 3000, 0}));
}

TEST(GcraStep, KeyExpiresExactlyWhenTheBucketIsFull) {
  State state;
  Step s = Call(state, Consume(4, 1000, 2, 3), kT0);
  EXPECT_EQ(s.reply, (AlgoReply{1, 1, 1500, 0}));
  EXPECT_EQ(s.expires_at_ms, kT0 + 1500);
  EXPECT_EQ(Call(state, Peek(4, 1000, 2), kT0 + 1499).reply, (AlgoReply{1, 3, 1, 0}));
  EXPECT_TRUE(state);
  State gone;
  EXPECT_EQ(Call(gone, Peek(4, 1000, 2), kT0 + 1500).reply, (AlgoReply{1, 4, 0, 0}));
  EXPECT_EQ(Call(state, Peek(4, 1000, 2), kT0 + 1500).reply, (AlgoReply{1, 4, 0, 0}));
  EXPECT_FALSE(state);
}

TEST(GcraStep, AFractionalTatExpiresAtTheNextMillisecond) {
  State state;
  ASSERT_EQ(Call(state, Consume(3, 1000, 3), kT0).reply, (AlgoReply{1, 2, 334, 0}));
  EXPECT_EQ(state->tat_ms, kT0 + 333);
  EXPECT_EQ(state->tat_fraction, 1);
  // At kT0 + 333 the bucket still misses 1/3 ms of refill: it is live, not full.
  EXPECT_EQ(Call(state, Peek(3, 1000, 3), kT0 + 333).reply, (AlgoReply{1, 2, 1, 0}));
  EXPECT_TRUE(state);
  EXPECT_EQ(Call(state, Peek(3, 1000, 3), kT0 + 334).reply, (AlgoReply{1, 3, 0, 0}));
  EXPECT_FALSE(state);
}

// ---------------------------------------------------------------------------------------
// Peek, refund, reset

TEST(GcraPeek, OnNoStateReportsAFullBucketAndCreatesNothing) {
  State state;
  EXPECT_EQ(Call(state, Peek(5, 1000, 0, 5), kT0).reply, (AlgoReply{1, 5, 0, 0}));
  EXPECT_EQ(Call(state, Peek(5, 1000, 0, 6), kT0).reply, (AlgoReply{2, 5, 0, 0}));
  EXPECT_FALSE(state);
}

TEST(GcraPeek, ReportsTheBucketNowAndNeverChangesIt) {
  State state;
  ASSERT_EQ(Call(state, Consume(5, 1000, 0, 3), kT0).reply.code, 1);
  const State before = state;
  EXPECT_EQ(Call(state, Peek(5, 1000, 0, 2), kT0 + 100).reply, (AlgoReply{1, 2, 500, 0}));
  Step refused = Call(state, Peek(5, 1000, 0, 4), kT0 + 100);
  EXPECT_EQ(refused.reply, (AlgoReply{0, 2, 500, 300}));
  EXPECT_TRUE(Same(state, before));
  State copy = state;
  EXPECT_EQ(Call(copy, Consume(5, 1000, 0, 4), kT0 + 100).reply, refused.reply);
}

TEST(GcraRefund, GivesTokensBackNeverAboveTheBurst) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 6), kT0).reply.code, 1);
  Step s = Call(state, Refund(10, 1000, 0, 2), kT0 + 50);  // 5.5 missing - 2 = 3.5
  EXPECT_EQ(s.reply, (AlgoReply{1, 6, 350, 0}));
  EXPECT_TRUE(s.decision.allowed);
  EXPECT_EQ(state->tat_ms, kT0 + 400);
  EXPECT_EQ(Call(state, Refund(10, 1000, 0, 4), kT0 + 60).reply, (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(state);
  EXPECT_EQ(Call(state, Refund(10, 1000, 0, 4), kT0 + 70).reply, (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(state);
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 1), kT0 + 80).reply.code, 1);
  EXPECT_EQ(Call(state, Refund(10, 1000, 0, kMaxLimit), kT0 + 80).reply, (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(state);
}

TEST(GcraRefund, KeepsTheFraction) {
  State state;
  ASSERT_EQ(Call(state, Consume(5, 1000, 3, 4), kT0).reply, (AlgoReply{1, 1, 1334, 0}));
  // 4 tokens = 1333⅓ ms; give 1 back (333⅓ ms): 1000 ms left, no fraction.
  EXPECT_EQ(Call(state, Refund(5, 1000, 3, 1), kT0).reply, (AlgoReply{1, 2, 1000, 0}));
  EXPECT_EQ(state->tat_ms, kT0 + 1000);
  EXPECT_EQ(state->tat_fraction, 0);
}

TEST(GcraReset, ForgetsTheId) {
  State state;
  ASSERT_EQ(Call(state, Consume(3, 1000, 0, 3), kT0).reply.code, 1);
  EXPECT_EQ(Call(state, Args(Op::kReset, 3, 1000, 0), kT0 + 1).reply, (AlgoReply{1, 3, 0, 0}));
  EXPECT_FALSE(state);
  EXPECT_EQ(Call(state, Consume(3, 1000, 0, 3), kT0 + 2).reply.code, 1);
}

// ---------------------------------------------------------------------------------------
// Limits are arguments

TEST(GcraPlanChange, ARaisedBurstAddsItsTokensAtOnce) {
  State state;
  ASSERT_EQ(Call(state, Consume(5, 1000, 5, 5), kT0).reply.code, 1);
  EXPECT_EQ(Call(state, Consume(10, 1000, 5), kT0).reply, (AlgoReply{1, 4, 1200, 0}));
}

TEST(GcraPlanChange, ALoweredBurstCutsTheTatToAnEmptyBucket) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 5, 6), kT0).reply, (AlgoReply{1, 4, 1200, 0}));
  // Downgrade to 3: 6 missing is more than the new bucket holds: it is empty (600 ms to
  // full), written back even by this refusal.
  EXPECT_EQ(Call(state, Consume(3, 1000, 5), kT0).reply, (AlgoReply{0, 0, 600, 200}));
  EXPECT_EQ(state->tat_ms, kT0 + 600);
  EXPECT_EQ(Call(state, Consume(3, 1000, 5), kT0 + 199).reply.code, 0);
  EXPECT_EQ(Call(state, Consume(3, 1000, 5), kT0 + 200).reply, (AlgoReply{1, 0, 600, 0}));
}

TEST(GcraPlanChange, UnderAChangedRefillTheMissingTokensStayMissing) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 10, 10), kT0).reply.code, 1);  // TAT kT0 + 1000
  // 900 ms to go at 10 per s: 9 tokens missing. At 20 per s they are back in 450 ms, and
  // 1 is left; the TAT converted to the new refill is written back.
  EXPECT_EQ(Call(state, Peek(10, 1000, 20), kT0 + 100).reply, (AlgoReply{1, 1, 450, 0}));
  EXPECT_EQ(state->tat_ms, kT0 + 550);
  EXPECT_EQ(state->rate, 20);
  // At 1 per s the same 9 tokens take 9 s to come back.
  EXPECT_EQ(Call(state, Peek(10, 1000, 1), kT0 + 100).reply, (AlgoReply{1, 1, 9000, 0}));
  EXPECT_EQ(Call(state, Consume(10, 1000, 1, 1), kT0 + 100).reply, (AlgoReply{1, 0, 10000, 0}));
}

// The upgrade the issue describes: 100 per minute spent, then 500 per minute with refill
// 0 (the rate moves with the limit): the 400 new tokens are there at once.
TEST(GcraPlanChange, AnUpgradeWithRefillZeroAddsItsTokensAtOnce) {
  State state;
  ASSERT_EQ(Call(state, Consume(100, 60'000, 0, 100), kT0).reply.code, 1);
  EXPECT_EQ(Call(state, Consume(100, 60'000, 0), kT0).reply.code, 0);
  EXPECT_EQ(Call(state, Consume(500, 60'000, 0, 400), kT0 + 1).reply, (AlgoReply{1, 0, 60'000, 0}));
  EXPECT_EQ(Call(state, Consume(500, 60'000, 0), kT0 + 1).reply.code, 0);
}

TEST(GcraPlanChange, AFractionWrittenUnderAnotherRefillStaysBelowOneMillisecond) {
  State state = GcraState{.tat_ms = kT0 + 2, .tat_fraction = 999};
  // Under refill 5 the fraction is kept at 4/5 ms: 2.8 ms missing = 1.4 tokens at 5 per
  // 10 ms; the stored TAT still expires at kT0 + 3.
  EXPECT_EQ(Call(state, Peek(5, 10, 5), kT0).reply, (AlgoReply{1, 3, 3, 0}));
}

// ---------------------------------------------------------------------------------------
// Clocks and arithmetic

TEST(GcraStep, AClockThatGoesBackSeesTheTatFurtherAway) {
  State state;
  ASSERT_EQ(Call(state, Consume(10, 1000, 0, 5), kT0).reply.code, 1);  // TAT kT0 + 500
  // 800 ms before the TAT: 8 tokens missing, not 5 (GCRA keeps time, not tokens).
  EXPECT_EQ(Call(state, Peek(10, 1000, 0), kT0 - 300).reply, (AlgoReply{1, 2, 800, 0}));
}

TEST(GcraStep, TheLargestLimitsStayExact) {
  const int64_t window = kMaxWindow.count();
  const int64_t rate = kMaxLimit - 1;
  State state;
  Step s = Call(state, Consume(kMaxLimit, window, rate, kMaxLimit), kT0);
  ASSERT_EQ(s.reply.code, 1);
  EXPECT_EQ(s.reply.reset_after_ms, window + 1);  // 2^40 w / (2^40 - 1) = w + a fraction
  EXPECT_EQ(state->tat_ms, kT0 + window);
  EXPECT_EQ(state->tat_fraction, window);  // w / (2^40 - 1) ms, in 1/(2^40 - 1) ms
  EXPECT_EQ(Call(state, Peek(kMaxLimit, window, rate), kT0 + 1).reply.remaining, rate / window);
}

TEST(GcraStep, ABucketHoldsWhatRefillsWithinTheHorizon) {
  const int64_t window = kMaxWindow.count();
  const int64_t cap = kBucketHorizonMs / window;
  State state;
  EXPECT_EQ(Call(state, Peek(kMaxLimit, window, 1), kT0).reply, (AlgoReply{1, cap, 0, 0}));
  EXPECT_EQ(Call(state, Consume(kMaxLimit, window, 1, cap + 1), kT0).reply.code, 2);
  EXPECT_EQ(Call(state, Consume(kMaxLimit, window, 1, cap), kT0).reply,
            (AlgoReply{1, 0, cap * window, 0}));
}

// ---------------------------------------------------------------------------------------
// The same bucket as token_bucket

TEST(GcraStep, GivesTheTokenBucketsRepliesUnderAnyFixedRefill) {
  struct Plan {
    int64_t window_ms, refill;
  };
  for (Plan plan : {Plan{1000, 3}, Plan{7, 2}, Plan{10'000, 7}, Plan{86'400'000, 999'983},
                    Plan{kMaxWindow.count(), kMaxLimit - 1}}) {
    std::mt19937_64 rng(plan.window_ms + plan.refill);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    std::optional<GcraState> g;
    std::optional<TokenBucketState> t;
    int64_t g_expires = 0, t_expires = 0;
    int64_t now = kT0;
    int64_t limit = 5;
    AlgoReply last;
    int admitted = 0;
    for (int step = 0; step < 20'000; ++step) {
      switch (pick(5)) {
        case 0: break;
        case 1: now += 1 + pick(plan.window_ms); break;
        case 2: now += std::max<int64_t>(0, last.reset_after_ms - pick(2)); break;
        case 3: now += std::max<int64_t>(0, last.retry_after_ms - pick(2)); break;
        default: now += pick(3); break;
      }
      if (pick(50) == 0) limit = 1 + pick(pick(4) == 0 ? kMaxLimit : 12);
      const int64_t r = pick(100);
      const Op op = r < 70 ? Op::kConsume : r < 85 ? Op::kPeek : r < 98 ? Op::kRefund : Op::kReset;
      const int64_t cost = pick(10) == 0 ? limit + 1 : 1 + pick(std::max<int64_t>(1, limit / 2));
      const AlgoArgs args{.op = op,
                          .cost = std::min(cost, kMaxLimit),
                          .limit = limit,
                          .window_ms = plan.window_ms,
                          .refill = plan.refill};
      if (g && g_expires <= now) g.reset();
      if (t && t_expires <= now) t.reset();
      const AlgoReply gr = GcraStep(g, args, now, g_expires);
      const AlgoReply tr = TokenBucketStep(t, args, now, t_expires);
      ASSERT_EQ(gr, tr) << "window " << plan.window_ms << " refill " << plan.refill << " step "
                        << step << " op " << static_cast<int>(op) << " cost " << args.cost
                        << " limit " << limit << ": gcra " << Show(gr) << " token bucket "
                        << Show(tr);
      ASSERT_EQ(g.has_value(), t.has_value()) << step;
      if (g) {
        ASSERT_EQ(g_expires, t_expires) << step;
      }
      last = gr;
      if (op == Op::kConsume && gr.code == 1) ++admitted;
    }
    EXPECT_GT(admitted, 2000) << plan.window_ms;
  }
}

// A debit moves the TAT whether the tokens are there or not, never more than twice the
// capacity ahead (a debt of at most one bucket); the refill pays the debt off first.
TEST(GcraDebit, RefillCoversTheDebtThenATokenPasses) {
  State state;
  // A burst of 10, 10 per second: one every 100 ms.
  EXPECT_EQ(Call(state, Consume(10, 1000, 0, 4), kT0).reply, (AlgoReply{1, 6, 400, 0}));
  const Step debit = Call(state, Args(Op::kDebit, 10, 1000, 0, 20), kT0);
  EXPECT_EQ(debit.reply, (AlgoReply{0, -10, 2000, 1100})) << Show(debit.reply);
  EXPECT_EQ(state->tat_ms, kT0 + 2000);
  EXPECT_LT(state->tat_fraction, 0) << "a TAT past the capacity is stored marked as a debt";
  EXPECT_EQ(Call(state, Consume(10, 1000, 0), kT0 + 1099).reply, (AlgoReply{0, 0, 901, 1}));
  EXPECT_EQ(Call(state, Consume(10, 1000, 0), kT0 + 1100).reply, (AlgoReply{1, 0, 1000, 0}));
  EXPECT_EQ(state->tat_fraction, 0);
}

TEST(GcraDebit, DebtIsBoundedAndALoweredBurstKeepsAtMostOneBucketOfIt) {
  State state;
  EXPECT_EQ(Call(state, Args(Op::kDebit, 10, 1000, 0, 1'000'000), kT0).reply,
            (AlgoReply{0, -10, 2000, 1100}));
  EXPECT_EQ(Call(state, Args(Op::kDebit, 10, 1000, 0, 5), kT0).reply,
            (AlgoReply{0, -10, 2000, 1100}));
  EXPECT_EQ(state->tat_ms, kT0 + 2000);
  // The burst lowered to 5 (the refill kept at 10 per second): 10 missing at most (the
  // reply's remaining is the script's, unclamped: 5 below zero).
  EXPECT_EQ(Call(state, Peek(5, 1000, 10), kT0).reply, (AlgoReply{0, -5, 1000, 600}));
  EXPECT_EQ(state->tat_ms, kT0 + 1000);
  EXPECT_EQ(Call(state, Args(Op::kReset, 5, 1000, 10), kT0 + 1).reply, (AlgoReply{1, 5, 0, 0}));
  EXPECT_FALSE(state.has_value());
}

}  // namespace
}  // namespace sluice::internal::gcra_test

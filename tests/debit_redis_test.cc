// Debits on a real redis-server through the public API, on Redis's own clock (the path
// production takes): a charge that does not fit leaves the id in a debt of at most one
// window's or bucket's worth, with the key's expiry written in the same script; checks
// are refused until the algorithm's own recovery (the fixed window's end; the sliding
// window and log as they slide; the buckets' refill) and pass after it; a reset clears
// the debt. The step-by-step decisions
// (every boundary) are held to the twins by tests/differential*_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "sluice/sluice.h"
#include "testing/redis_fixture.h"
#include "testing/status_matchers.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using testing::IsOk;

class DebitRedis : public testing::RedisAlgorithmTest {
 protected:
  DebitRedis() : RedisAlgorithmTest("debittest", testing::ScriptOptions()) {}

  // A limiter of `algorithm`, 10 per `window` (buckets: 10 tokens, 10 back per window).
  Limiter Make(Algorithm algorithm, milliseconds window) {
    client_ = Connect();
    auto limiter = client_->MakeLimiter(std::string(AlgorithmName(algorithm)),
                                        {.algorithm = algorithm, .limit = 10, .window = window});
    EXPECT_THAT(limiter, IsOk());
    return *std::move(limiter);
  }

  // Charges 4 then a debit of 20: 14 over a limit of 10, so 4 in debt (4 + 20 = 24 is
  // within the bound of twice the limit), refused until `recovers` has passed.
  void ExpectDebtRecovers(Algorithm algorithm) {
    const milliseconds window(400);
    Limiter limiter = Make(algorithm, window);
    ASSERT_THAT(limiter.Check("a", {.cost = 4}), IsOk());
    StatusOr<Decision> debit = limiter.Debit("a", 20);
    const auto debited = std::chrono::steady_clock::now();  // at or after the script ran
    ASSERT_THAT(debit, IsOk());
    EXPECT_FALSE(debit->allowed) << debit->ToString();
    EXPECT_EQ(debit->remaining, 0);
    EXPECT_EQ(debit->debt, 10) << "4 + 20 against 10: the bound stops the count at 20";
    EXPECT_GT(debit->retry_after.count(), 0);
    EXPECT_LE(debit->retry_after, 2 * window);
    // Every key the debit wrote has its expiry (TearDown checks the whole prefix too).
    const std::string key = *limiter.KeyFor("a");
    EXPECT_GT(Pttl(key), 0);
    EXPECT_LE(Pttl(key), 2 * window.count());
    const StatusOr<Decision> refused = limiter.Check("a");
    ASSERT_THAT(refused, IsOk());
    EXPECT_FALSE(refused->allowed) << refused->ToString();
    EXPECT_EQ(refused->reason, RefusalReason::kOverLimit);
    // After the debit's retry_after, one unit passes.
    std::this_thread::sleep_until(debited + debit->retry_after + milliseconds(5));
    const StatusOr<Decision> after = limiter.Check("a");
    ASSERT_THAT(after, IsOk());
    EXPECT_TRUE(after->allowed) << after->ToString();
  }

  std::shared_ptr<Client> client_;
};

TEST_F(DebitRedis, FixedWindowRefusesUntilTheWindowEnds) {
  ExpectDebtRecovers(Algorithm::kFixedWindow);
}

TEST_F(DebitRedis, SlidingWindowRefusesUntilItHasSlid) {
  ExpectDebtRecovers(Algorithm::kSlidingWindow);
}

TEST_F(DebitRedis, SlidingLogRefusesUntilTheEntriesLeave) {
  ExpectDebtRecovers(Algorithm::kSlidingLog);
}

// A debit far larger than the limit counts at most twice the limit (a debt of one
// window's or one bucket's worth), whatever the algorithm, so it cannot lock the id out
// for longer than the algorithm's recovery from that debt; a reset clears it at once.
TEST_F(DebitRedis, AHugeDebitIsBoundedAndAResetClearsIt) {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                              Algorithm::kSlidingLog, Algorithm::kTokenBucket, Algorithm::kGcra}) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    Limiter limiter = Make(algorithm, milliseconds(60'000));
    StatusOr<Decision> debit = limiter.Debit("huge", kMaxLimit);
    ASSERT_THAT(debit, IsOk());
    EXPECT_EQ(debit->debt, 10);
    debit = limiter.Debit("huge", kMaxLimit);
    ASSERT_THAT(debit, IsOk());
    EXPECT_EQ(debit->debt, 10) << "a second debit adds nothing past the bound";
    const StatusOr<Decision> peek = limiter.Peek("huge");
    ASSERT_THAT(peek, IsOk());
    EXPECT_FALSE(peek->allowed);
    // Locked out at most as long as a debt of one window's worth takes to recover: the
    // window's end (fixed), when the doubled count has slid (at most two windows), or
    // when the refill has brought back the debt and one token (buckets: 11 of 10 per
    // minute).
    EXPECT_LE(peek->retry_after, milliseconds(120'000));
    EXPECT_GT(peek->retry_after, milliseconds(0));
    if (algorithm == Algorithm::kFixedWindow) {
      EXPECT_EQ(Get(*limiter.KeyFor("huge")), "20") << "the stored count stops at twice the limit";
    }
    ASSERT_THAT(limiter.Reset("huge"), IsOk());
    const StatusOr<Decision> after = limiter.Check("huge");
    ASSERT_THAT(after, IsOk());
    EXPECT_TRUE(after->allowed) << after->ToString();
    EXPECT_EQ(after->remaining, 9);
  }
}

// A debit that fits is an admission that cannot be refused: it answers with what is left.
TEST_F(DebitRedis, ADebitThatFitsLeavesTheRest) {
  Limiter limiter = Make(Algorithm::kFixedWindow, milliseconds(60'000));
  const StatusOr<Decision> debit = limiter.Debit("small", 3);
  ASSERT_THAT(debit, IsOk());
  EXPECT_TRUE(debit->allowed);
  EXPECT_EQ(debit->remaining, 7);
  EXPECT_EQ(debit->debt, 0);
  EXPECT_EQ(debit->retry_after, milliseconds(0));
  // The fixed window's end is the key's expiry, on Redis's clock.
  EXPECT_GT(Pttl(*limiter.KeyFor("small")), 59'000);
}

TEST_F(DebitRedis, AsyncFormAnswersOnce) {
  Limiter limiter = Make(Algorithm::kSlidingLog, milliseconds(60'000));
  std::promise<StatusOr<Decision>> answered;
  limiter.DebitAsync("async", 25, {}, [&](StatusOr<Decision> d) { answered.set_value(d); });
  const StatusOr<Decision> d = answered.get_future().get();
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->debt, 10);
}

TEST_F(DebitRedis, TokenBucketRefusesUntilTheRefillCoversTheDebt) {
  ExpectDebtRecovers(Algorithm::kTokenBucket);
}

TEST_F(DebitRedis, GcraRefusesUntilTheRefillCoversTheDebt) {
  ExpectDebtRecovers(Algorithm::kGcra);
}

}  // namespace
}  // namespace sluice

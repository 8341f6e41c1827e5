// The sliding log twin (SlidingLogStep) on explicit times: no clock, no sleeping. Each
// entry counts for requests less than `window` after its admission and stops counting
// exactly `window` after it; the tests sit 1 ms before and at those moments.
#include "algo/sliding_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace sluice::internal::sliding_log_test {
namespace {

constexpr int64_t kT0 = 1'700'000'000'123;  // an arbitrary, unaligned start time

// One call through the twin, keeping the stored state and its expiry as a store would.
class Log {
 public:
  Log(int64_t limit, int64_t window_ms) : limit_(limit), window_ms_(window_ms) {}

  AlgoReply Call(Op op, int64_t cost, int64_t now_ms) {
    // A store hands over the state only while it has not expired.
    if (state_ && expires_at_ms_ <= now_ms) state_.reset();
    int64_t expires_at_ms = 0;
    const AlgoReply reply = SlidingLogStep(
        state_, AlgoArgs{.op = op, .cost = cost, .limit = limit_, .window_ms = window_ms_}, now_ms,
        expires_at_ms);
    if (state_) {
      EXPECT_FALSE(state_->entries.empty());
      EXPECT_GT(expires_at_ms, now_ms) << "a stored log must outlive the call that wrote it";
      EXPECT_EQ(expires_at_ms, state_->entries.back().at_ms + window_ms_)
          << "the log expires when its newest entry leaves the window";
      expires_at_ms_ = expires_at_ms;
    }
    return reply;
  }
  AlgoReply Consume(int64_t now_ms, int64_t cost = 1) { return Call(Op::kConsume, cost, now_ms); }
  AlgoReply Peek(int64_t now_ms, int64_t cost = 1) { return Call(Op::kPeek, cost, now_ms); }
  AlgoReply Refund(int64_t now_ms, int64_t amount) { return Call(Op::kRefund, amount, now_ms); }
  AlgoReply Reset(int64_t now_ms) { return Call(Op::kReset, 1, now_ms); }

  void set_limit(int64_t limit) { limit_ = limit; }
  const std::optional<SlidingLogState>& state() const { return state_; }
  int64_t expires_at_ms() const { return expires_at_ms_; }
  // Cost of each stored entry, oldest first.
  std::vector<int64_t> Costs() const {
    std::vector<int64_t> costs;
    if (state_) {
      for (const SlidingLogEntry& e : state_->entries) costs.push_back(e.cost);
    }
    return costs;
  }

 private:
  int64_t limit_;
  int64_t window_ms_;
  std::optional<SlidingLogState> state_;
  int64_t expires_at_ms_ = 0;
};

AlgoReply Admitted(int64_t remaining, int64_t reset_after_ms) {
  return {1, remaining, reset_after_ms, 0};
}
AlgoReply Refused(int64_t remaining, int64_t reset_after_ms, int64_t retry_after_ms) {
  return {0, remaining, reset_after_ms, retry_after_ms};
}

TEST(SlidingLogStep, AdmitsExactlyTheLimitThenRefuses) {
  Log log(3, 1000);
  EXPECT_EQ(log.Consume(kT0), Admitted(2, 1000));
  EXPECT_EQ(log.Consume(kT0 + 100), Admitted(1, 1000));
  EXPECT_EQ(log.Consume(kT0 + 200), Admitted(0, 1000));
  // The oldest entry (kT0) leaves at kT0 + 1000: that is when one more fits.
  EXPECT_EQ(log.Consume(kT0 + 300), Refused(0, 900, 700));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{1, 1, 1}));
}

TEST(SlidingLogStep, EachEntryCountsUntilOneWindowAfterItsAdmission) {
  Log log(3, 1000);
  ASSERT_EQ(log.Consume(kT0).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 3).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 7).code, 1);
  // 1 ms before the first entry leaves: still three in the window.
  EXPECT_EQ(log.Consume(kT0 + 999), Refused(0, 8, 1));
  // At its expiry it is gone: one fits, and the log holds kT0+3, kT0+7, kT0+1000.
  EXPECT_EQ(log.Consume(kT0 + 1000), Admitted(0, 1000));
  EXPECT_EQ(log.state()->entries.size(), 3u) << "the entry that left was pruned";
  // Same for the second entry (kT0 + 3) ...
  EXPECT_EQ(log.Consume(kT0 + 1002), Refused(0, 998, 1));
  EXPECT_EQ(log.Consume(kT0 + 1003), Admitted(0, 1000));
  // ... and the third (kT0 + 7).
  EXPECT_EQ(log.Consume(kT0 + 1006), Refused(0, 997, 1));
  EXPECT_EQ(log.Consume(kT0 + 1007), Admitted(0, 1000));
  EXPECT_EQ(log.state()->entries.front().at_ms, kT0 + 1000);
}

TEST(SlidingLogStep, TheLogIsEmptyExactlyWhenItsNewestEntryLeaves) {
  Log log(2, 500);
  ASSERT_EQ(log.Consume(kT0), Admitted(1, 500));
  ASSERT_EQ(log.Consume(kT0 + 200), Admitted(0, 500));
  EXPECT_EQ(log.expires_at_ms(), kT0 + 700);
  // 1 ms before the newest leaves: one entry is still in the window.
  EXPECT_EQ(log.Peek(kT0 + 699), Admitted(1, 1));
  // At that moment the log is empty: a fresh budget and no stored state.
  EXPECT_EQ(log.Peek(kT0 + 700), Admitted(2, 0));
  EXPECT_FALSE(log.state().has_value());
}

TEST(SlidingLogStep, AStoredLogWhoseNewestEntryLeftIsDeletedByTheCallThatReadsIt) {
  // The state is handed over although it is stale (as Redis does with a key that lost
  // its TTL): the call prunes it and starts afresh.
  std::optional<SlidingLogState> state =
      SlidingLogState{.entries = {{kT0, 0, 1}, {kT0 + 10, 1, 1}}};
  int64_t expires_at_ms = 0;
  const AlgoArgs peek{.op = Op::kPeek, .cost = 1, .limit = 2, .window_ms = 100};
  EXPECT_EQ(SlidingLogStep(state, peek, kT0 + 110, expires_at_ms), Admitted(2, 0));
  EXPECT_FALSE(state.has_value());
}

TEST(SlidingLogStep, CostIsAdmittedOnlyIfAllOfItFits) {
  Log log(10, 1000);
  EXPECT_EQ(log.Consume(kT0, 4), Admitted(6, 1000));
  EXPECT_EQ(log.Consume(kT0 + 100, 4), Admitted(2, 1000));
  // 8 + 3 > 10: refused, nothing consumed. 1 unit must leave: the kT0 entry (4 units).
  EXPECT_EQ(log.Consume(kT0 + 200, 3), Refused(2, 900, 800));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{4, 4}));
  // Exactly the 2 that are left fit.
  EXPECT_EQ(log.Consume(kT0 + 300, 2), Admitted(0, 1000));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{4, 4, 2}));
}

TEST(SlidingLogStep, RetryAfterIsWhenEnoughOldUnitsHaveLeft) {
  Log log(10, 1000);
  // Units: 3 at kT0, 2 at +100, 1 at +200, 4 at +300 (10 in all).
  ASSERT_EQ(log.Consume(kT0, 3).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 100, 2).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 200, 1).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 300, 4).code, 1);
  const int64_t now = kT0 + 400;
  // need 1..3: the kT0 entry; 4..5: up to +100; 6: up to +200; 7..10: up to +300.
  EXPECT_EQ(log.Peek(now, 1), Refused(0, 900, 600));
  EXPECT_EQ(log.Peek(now, 3), Refused(0, 900, 600));
  EXPECT_EQ(log.Peek(now, 4), Refused(0, 900, 700));
  EXPECT_EQ(log.Peek(now, 5), Refused(0, 900, 700));
  EXPECT_EQ(log.Peek(now, 6), Refused(0, 900, 800));
  EXPECT_EQ(log.Peek(now, 7), Refused(0, 900, 900));
  EXPECT_EQ(log.Peek(now, 10), Refused(0, 900, 900));
  // And each retry_after is exact: 1 ms before it the request is still refused.
  EXPECT_EQ(log.Consume(kT0 + 1099, 4), Refused(3, 201, 1));
  EXPECT_EQ(log.Consume(kT0 + 1100, 4), Admitted(1, 1000));
}

TEST(SlidingLogStep, CostAboveTheLimitIsRefusedWithReasonAndTouchesNoState) {
  Log log(5, 1000);
  EXPECT_EQ(log.Consume(kT0, 6), (AlgoReply{2, 5, 0, 0}));
  EXPECT_FALSE(log.state().has_value()) << "a refusal created state";
  ASSERT_EQ(log.Consume(kT0, 2).code, 1);
  // With a live log it reports the log; retry_after is its reset_after (it never passes).
  EXPECT_EQ(log.Consume(kT0 + 10, 100), (AlgoReply{2, 3, 990, 990}));
  EXPECT_EQ(log.Peek(kT0 + 10, 6), (AlgoReply{2, 3, 990, 990}));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{2}));
}

TEST(SlidingLogStep, RefusedRequestsLeaveNoEntry) {
  Log log(2, 1000);
  ASSERT_EQ(log.Consume(kT0).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 1).code, 1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(log.Consume(kT0 + 2 + i).code, 0);
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{1, 1}));
  // The budget comes back when the admitted entries leave, not later.
  EXPECT_EQ(log.Consume(kT0 + 1000), Admitted(0, 1000));
}

TEST(SlidingLogStep, AdmissionsInTheSameMillisecondAreDistinctEntries) {
  Log log(5, 1000);
  EXPECT_EQ(log.Consume(kT0, 1), Admitted(4, 1000));
  EXPECT_EQ(log.Consume(kT0, 2), Admitted(2, 1000));
  EXPECT_EQ(log.Consume(kT0, 1), Admitted(1, 1000));
  EXPECT_EQ(log.Consume(kT0, 2), Refused(1, 1000, 1000));
  ASSERT_EQ(log.state()->entries.size(), 3u);
  std::vector<int64_t> starts;
  for (const SlidingLogEntry& e : log.state()->entries) {
    EXPECT_EQ(e.at_ms, kT0);
    starts.push_back(e.start);
  }
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 1, 3})) << "starts are contiguous and unique";
  // They all leave together.
  EXPECT_EQ(log.Consume(kT0 + 999, 2), Refused(1, 1, 1));
  EXPECT_EQ(log.Consume(kT0 + 1000, 5), Admitted(0, 1000));
}

TEST(SlidingLogStep, PeekReportsWithoutSpending) {
  Log log(3, 1000);
  EXPECT_EQ(log.Peek(kT0), Admitted(3, 0));
  EXPECT_FALSE(log.state().has_value());
  ASSERT_EQ(log.Consume(kT0, 2).code, 1);
  EXPECT_EQ(log.Peek(kT0 + 100), Admitted(1, 900));
  EXPECT_EQ(log.Peek(kT0 + 100, 2), Refused(1, 900, 900));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{2}));
  EXPECT_EQ(log.Consume(kT0 + 100), Admitted(0, 1000));
}

TEST(SlidingLogStep, RefundGivesBackTheMostRecentUnits) {
  Log log(10, 1000);
  ASSERT_EQ(log.Consume(kT0, 3).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 100, 2).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 200, 4).code, 1);
  // Part of the newest entry: it keeps its time, with fewer units.
  EXPECT_EQ(log.Refund(kT0 + 300, 1), Admitted(2, 900));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{3, 2, 3}));
  // Across entries: the newest goes, the one before keeps 1 unit; the log now ends
  // (and expires) with the kT0 + 100 entry.
  EXPECT_EQ(log.Refund(kT0 + 300, 4), Admitted(6, 800));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(log.expires_at_ms(), kT0 + 1100);
  // A whole entry exactly.
  EXPECT_EQ(log.Refund(kT0 + 300, 1), Admitted(7, 700));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{3}));
  // The next admission continues after what is left.
  EXPECT_EQ(log.Consume(kT0 + 400, 2), Admitted(5, 1000));
  EXPECT_EQ(log.state()->entries.back().start, 3);
  // More than is held: the log is empty and deleted; never above the limit.
  EXPECT_EQ(log.Refund(kT0 + 400, 50), Admitted(10, 0));
  EXPECT_FALSE(log.state().has_value());
  // A refund on an empty log is a no-op.
  EXPECT_EQ(log.Refund(kT0 + 500, 1), Admitted(10, 0));
  EXPECT_FALSE(log.state().has_value());
}

TEST(SlidingLogStep, RefundGivesBackOnlyUnitsStillInTheWindow) {
  Log log(2, 1000);
  ASSERT_EQ(log.Consume(kT0).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 500).code, 1);
  // At kT0 + 1000 the first entry has left; a refund of 2 gives back only the other.
  EXPECT_EQ(log.Refund(kT0 + 1000, 2), Admitted(2, 0));
  EXPECT_FALSE(log.state().has_value());
}

TEST(SlidingLogStep, ResetForgetsTheId) {
  Log log(1, 1000);
  ASSERT_EQ(log.Consume(kT0).code, 1);
  ASSERT_EQ(log.Consume(kT0 + 1).code, 0);
  EXPECT_EQ(log.Reset(kT0 + 2), Admitted(1, 0));
  EXPECT_FALSE(log.state().has_value());
  EXPECT_EQ(log.Consume(kT0 + 3), Admitted(0, 1000));
}

TEST(SlidingLogStep, ALimitChangeDecidesWithTheNewLimitOnTheSameLog) {
  Log log(4, 1000);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(log.Consume(kT0 + 100 * i).code, 1);
  // Upgrade: the 4 stored entries stay and count against the new limit.
  log.set_limit(6);
  EXPECT_EQ(log.Consume(kT0 + 400), Admitted(1, 1000));
  // Downgrade below what is in the window: remaining is negative in the reply (the
  // Decision clamps it) and the retry waits until 5 - 2 + 1 = 4 units have left.
  log.set_limit(2);
  EXPECT_EQ(log.Consume(kT0 + 500), Refused(-3, 900, 800));
  EXPECT_EQ(log.Consume(kT0 + 1299), Refused(0, 101, 1));
  EXPECT_EQ(log.Consume(kT0 + 1300), Admitted(0, 1000));
}

TEST(SlidingLogStep, AClockThatStepsBackCannotReorderTheLog) {
  Log log(3, 1000);
  ASSERT_EQ(log.Consume(kT0 + 500).code, 1);
  // The clock steps back 300 ms: the entry is filed at the newest time, not earlier,
  // and counts a little longer rather than too short.
  EXPECT_EQ(log.Consume(kT0 + 200), Admitted(1, 1300));
  EXPECT_EQ(log.state()->entries.back().at_ms, kT0 + 500);
  EXPECT_EQ(log.state()->entries.back().start, 1);
}

TEST(SlidingLogStep, StartsAreRenumberedBeforeTheyGrowPastTheRebaseBound) {
  // A log that is never empty (entries overlap) with the largest costs.
  constexpr int64_t kLimit = int64_t{1} << 40;
  constexpr int64_t kCost = kLimit / 2;
  Log log(kLimit, 2);
  int64_t now = kT0;
  int64_t highest_end = 0;
  bool renumbered = false;
  for (int i = 0; i < 2100; ++i, ++now) {
    ASSERT_EQ(log.Consume(now, kCost), Admitted(kLimit - 2 * kCost + (i == 0 ? kCost : 0), 2))
        << "request " << i;
    const SlidingLogEntry& newest = log.state()->entries.back();
    if (newest.end() < highest_end) renumbered = true;
    highest_end = std::max(highest_end, newest.end());
    ASSERT_LE(newest.end(), kSlidingLogRebaseAbove);
  }
  EXPECT_TRUE(renumbered);
  // Decisions are unchanged by renumbering: the log still holds exactly two entries.
  EXPECT_EQ(log.Peek(now - 1, 1), Refused(0, 2, 1));
}

// A debit is logged as an admission whether it fits or not, `used` never above twice the
// limit; checks pass again once enough of the log has left the window.
TEST(SlidingLogDebit, RecoversAsEntriesLeaveTheWindow) {
  Log log(10, 1000);
  EXPECT_EQ(log.Consume(kT0, 4), (AlgoReply{1, 6, 1000, 0}));
  // 20 more: 16 logged (20 used, 10 below zero), 4 dropped. One unit fits once 11 units
  // have left: the debit's own entry, 1000 ms on.
  EXPECT_EQ(log.Call(Op::kDebit, 20, kT0 + 100), (AlgoReply{0, -10, 1000, 1000}));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{4, 16}));
  // The first entry leaving is not enough: 16 used.
  EXPECT_EQ(log.Consume(kT0 + 1000).code, 0);
  EXPECT_EQ(log.Consume(kT0 + 1099).code, 0);
  EXPECT_EQ(log.Consume(kT0 + 1100), (AlgoReply{1, 9, 1000, 0}));
}

TEST(SlidingLogDebit, DebtIsBoundedAndResetClearsIt) {
  Log log(10, 1000);
  EXPECT_EQ(log.Call(Op::kDebit, 1'000'000, kT0), (AlgoReply{0, -10, 1000, 1000}));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{20}));
  // At the bound a debit logs nothing more.
  EXPECT_EQ(log.Call(Op::kDebit, 5, kT0 + 1), (AlgoReply{0, -10, 999, 999}));
  EXPECT_EQ(log.Costs(), (std::vector<int64_t>{20}));
  EXPECT_EQ(log.Reset(kT0 + 2), (AlgoReply{1, 10, 0, 0}));
  EXPECT_FALSE(log.state().has_value());
  EXPECT_EQ(log.Consume(kT0 + 3), (AlgoReply{1, 9, 1000, 0}));
}

}  // namespace
}  // namespace sluice::internal::sliding_log_test

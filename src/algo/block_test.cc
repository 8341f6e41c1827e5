// The block gate's twin (algo/block.h) alone, and through the embedded store with every
// rate algorithm: one millisecond before and at the block's end, what starts a block and
// what does not, resets, and the denial cache answering a block's checks of any cost.
#include "algo/block.h"

#include <gtest/gtest.h>

#include <memory>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

namespace sluice::internal {
namespace {

using std::chrono::milliseconds;
using testing::IsOk;

AlgoArgs Args(Op op, int64_t block_ms) {
  AlgoArgs a;
  a.op = op;
  a.limit = 2;
  a.window_ms = 1000;
  a.block_ms = block_ms;
  return a;
}

TEST(BlockTwin, HoldsUntilItsEndAndNotAMillisecondLonger) {
  std::optional<BlockState> block;
  int64_t expires = 0;
  const AlgoReply started =
      BlockAfter(block, Args(Op::kConsume, 500), 1000, AlgoReply{0, 0, 200, 200}, expires);
  EXPECT_EQ(started, (AlgoReply{3, 0, 500, 500}));
  ASSERT_TRUE(block.has_value());
  EXPECT_EQ(block->ends_ms, 1500);
  EXPECT_EQ(expires, 1500);
  // One ms before the end: refused for 1 ms, whatever the op that decides.
  for (Op op : {Op::kConsume, Op::kPeek, Op::kTake}) {
    std::optional<BlockState> copy = block;
    EXPECT_EQ(BlockBefore(copy, Args(op, 500), 1499, expires), (AlgoReply{3, 0, 1, 1}));
    EXPECT_EQ(copy->ends_ms, 1500) << "a check during the block does not extend it";
  }
  // At the end: the algorithm decides, and the block is gone.
  EXPECT_EQ(BlockBefore(block, Args(Op::kConsume, 500), 1500, expires).code, kNotBlocked);
  EXPECT_FALSE(block.has_value());
}

TEST(BlockTwin, TheLongerOfTheBlockAndTheAlgorithmsOwnWait) {
  std::optional<BlockState> block;
  int64_t expires = 0;
  EXPECT_EQ(BlockAfter(block, Args(Op::kConsume, 500), 0, AlgoReply{0, 1, 9000, 8000}, expires),
            (AlgoReply{3, 0, 9000, 8000}));
}

TEST(BlockTwin, OnlyARefusedConsumeOrTakeStartsOne) {
  int64_t expires = 0;
  const AlgoReply over{0, 0, 100, 100};
  for (Op op : {Op::kPeek, Op::kRefund, Op::kDebit, Op::kSync, Op::kGiveBack}) {
    std::optional<BlockState> block;
    EXPECT_EQ(BlockAfter(block, Args(op, 500), 0, over, expires), over);
    EXPECT_FALSE(block.has_value());
  }
  std::optional<BlockState> block;
  const AlgoReply too_big{2, 2, 0, 0};  // cost above the limit: never passes
  EXPECT_EQ(BlockAfter(block, Args(Op::kConsume, 500), 0, too_big, expires), too_big);
  const AlgoReply admitted{1, 1, 100, 0};
  EXPECT_EQ(BlockAfter(block, Args(Op::kConsume, 500), 0, admitted, expires), admitted);
  EXPECT_EQ(BlockAfter(block, Args(Op::kConsume, 0), 0, over, expires), over);
  EXPECT_FALSE(block.has_value());
  EXPECT_TRUE(BlockAfter(block, Args(Op::kTake, 500), 0, over, expires).code == 3);
}

TEST(BlockTwin, AResetClearsItAndOtherOpsPassThrough) {
  int64_t expires = 0;
  std::optional<BlockState> block = BlockState{5000};
  for (Op op : {Op::kRefund, Op::kDebit, Op::kSync, Op::kGiveBack}) {
    EXPECT_EQ(BlockBefore(block, Args(op, 500), 0, expires).code, kNotBlocked);
    EXPECT_TRUE(block.has_value());
    EXPECT_EQ(expires, 5000);
  }
  EXPECT_EQ(BlockBefore(block, Args(Op::kReset, 0), 0, expires).code, kNotBlocked);
  EXPECT_FALSE(block.has_value());
}

// Every rate algorithm on the embedded store: refused over the limit, blocked for the
// block although the algorithm itself would admit again sooner, free at the block's end.
TEST(BlockOnMemoryStore, EveryAlgorithmIsHeldForTheBlock) {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                              Algorithm::kSlidingLog, Algorithm::kTokenBucket, Algorithm::kGcra}) {
    SCOPED_TRACE(std::string(AlgorithmName(algorithm)));
    auto clock = std::make_shared<sluice::testing::FakeClock>(1'700'000'000'000);
    auto client = Client::Create({.url = "memory://", .model_clock = clock});
    ASSERT_THAT(client, IsOk());
    auto limiter = (*client)->MakeLimiter(
        "b", {.algorithm = algorithm, .limit = 2, .window = milliseconds(100)},
        {.block_for = milliseconds(5000)});
    ASSERT_THAT(limiter, IsOk());
    ASSERT_TRUE(limiter->Check("u", {.cost = 2})->allowed);
    const StatusOr<Decision> refused = limiter->Check("u");
    ASSERT_THAT(refused, IsOk());
    EXPECT_TRUE(refused->blocked) << refused->ToString();
    EXPECT_EQ(refused->retry_after, milliseconds(5000));
    clock->Advance(milliseconds(1000));  // every algorithm would admit again
    const StatusOr<Decision> held = limiter->Check("u");
    ASSERT_THAT(held, IsOk());
    EXPECT_FALSE(held->allowed);
    EXPECT_TRUE(held->blocked);
    EXPECT_EQ(held->source, DecisionSource::kCachedDenial) << "cost 1, same as the refusal";
    const StatusOr<Decision> bigger = limiter->Check("u", {.cost = 2});
    ASSERT_THAT(bigger, IsOk());
    EXPECT_EQ(bigger->source, DecisionSource::kCachedDenial) << "a block answers any cost";
    EXPECT_EQ(bigger->retry_after, milliseconds(4000));
    clock->Advance(milliseconds(3999));
    EXPECT_FALSE(limiter->Peek("u")->allowed);
    EXPECT_TRUE(limiter->Peek("u")->blocked);
    clock->Advance(milliseconds(1));
    const StatusOr<Decision> free = limiter->Check("u");
    ASSERT_THAT(free, IsOk());
    EXPECT_TRUE(free->allowed) << free->ToString();
  }
}

}  // namespace
}  // namespace sluice::internal

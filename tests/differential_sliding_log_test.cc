// Differential tests: the sliding log script on real Redis vs its in-memory twin, on
// windows long (10 s), short (1 s) and tiny (7 ms, where most steps cross an entry's
// departure).
#include <gtest/gtest.h>

#include "differential.h"

namespace sluice {
namespace {

TEST(SlidingLogDifferential, LongWindows) {
  testing::RedisServer server;
  for (uint32_t seed : {20261129u, 31u, 5150u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kSlidingLog, .seed = seed, .window_ms = 10'000});
  }
}

TEST(SlidingLogDifferential, ShortWindows) {
  testing::RedisServer server;
  for (uint32_t seed : {7u, 8080u, 424242u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kSlidingLog, .seed = seed, .window_ms = 1'000});
  }
}

TEST(SlidingLogDifferential, TinyWindows) {
  testing::RedisServer server;
  for (uint32_t seed : {99u, 1234u, 77777u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kSlidingLog, .seed = seed, .window_ms = 7});
  }
}

TEST(SlidingLogDifferential, ManyIdsLongTrace) {
  testing::RedisServer server;
  testing::RunDifferentialTrace(server, {.algorithm = Algorithm::kSlidingLog,
                                         .seed = 2718,
                                         .window_ms = 3'000,
                                         .steps = 20'000,
                                         .ids = 3});
}

// Every parameter of the Limit but the window changes between calls (see
// TraceConfig::vary_window), foreign values of every Redis type appear at the keys, and
// after every step the key's TTL covers its state.
TEST(SlidingLogDifferential, ParametersChangeBetweenCalls) {
  testing::RedisServer server;
  testing::RunParameterChangeTraces(server, Algorithm::kSlidingLog, /*vary_window=*/false);
}

// Debits mixed into the trace: ids go into debt (up to the bound) and the checks that
// follow are refused until the window's own recovery, identically in script and twin.
TEST(SlidingLogDifferential, DebitsIntoDebt) {
  testing::RedisServer server;
  testing::RunDebitTraces(server, Algorithm::kSlidingLog, /*vary_window=*/false);
}

// Blocks (LimiterOptions::block_for): a refusal over the limit holds the id refused for
// the block, through checks, peeks, refunds, debits and resets, on both sides alike.
TEST(SlidingLogDifferential, BlocksHoldUntilTheyEnd) {
  testing::RedisServer server;
  testing::RunBlockTraces(server, Algorithm::kSlidingLog, /*vary_window=*/false);
}

}  // namespace
}  // namespace sluice

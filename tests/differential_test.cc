// Differential tests: the fixed window script on real Redis vs its in-memory twin.
#include <gtest/gtest.h>

#include "differential.h"

namespace sluice {
namespace {

TEST(FixedWindowDifferential, SlidingStartWindows) {
  testing::RedisServer server;
  testing::RunDifferentialTrace(server, {.seed = 20261129, .window_ms = 10'000});
  testing::RunDifferentialTrace(server, {.seed = 7, .window_ms = 1'000});
}

TEST(FixedWindowDifferential, AlignedWindows) {
  testing::RedisServer server;
  testing::RunDifferentialTrace(server, {.seed = 4242, .window_ms = 10'000, .aligned = true});
  testing::RunDifferentialTrace(server, {.seed = 99, .window_ms = 7, .aligned = true});
}

// Every parameter of the Limit changes between calls, foreign values of every Redis type
// appear at the keys, and after every step the key's TTL covers its state.
TEST(FixedWindowDifferential, ParametersChangeBetweenCalls) {
  testing::RedisServer server;
  testing::RunParameterChangeTraces(server, Algorithm::kFixedWindow);
}

// Debits mixed into the trace: ids go into debt (up to the bound) and the checks that
// follow are refused until the window's own recovery, identically in script and twin.
TEST(FixedWindowDifferential, DebitsIntoDebt) {
  testing::RedisServer server;
  testing::RunDebitTraces(server, Algorithm::kFixedWindow);
}

// Blocks (LimiterOptions::block_for): a refusal over the limit holds the id refused for
// the block, through checks, peeks, refunds, debits and resets, on both sides alike.
TEST(FixedWindowDifferential, BlocksHoldUntilTheyEnd) {
  testing::RedisServer server;
  testing::RunBlockTraces(server, Algorithm::kFixedWindow);
}

}  // namespace
}  // namespace sluice

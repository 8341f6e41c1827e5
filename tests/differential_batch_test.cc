// Differential tests on the batched path: every algorithm's traces run through batches of
// random sizes (one batch script call each, src/algo/batch.lua) against the twins.
#include <gtest/gtest.h>

#include "differential.h"

namespace sluice {
namespace {

TEST(BatchDifferential, FixedWindow) {
  testing::RedisServer server;
  testing::RunBatchedTraces(server, Algorithm::kFixedWindow);
}

TEST(BatchDifferential, SlidingWindow) {
  testing::RedisServer server;
  testing::RunBatchedTraces(server, Algorithm::kSlidingWindow);
}

TEST(BatchDifferential, SlidingLog) {
  testing::RedisServer server;
  testing::RunBatchedTraces(server, Algorithm::kSlidingLog, /*vary_window=*/false);
}

TEST(BatchDifferential, TokenBucket) {
  testing::RedisServer server;
  testing::RunBatchedTraces(server, Algorithm::kTokenBucket);
}

TEST(BatchDifferential, Gcra) {
  testing::RedisServer server;
  testing::RunBatchedTraces(server, Algorithm::kGcra);
}

}  // namespace
}  // namespace sluice

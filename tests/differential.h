// The differential test driver every algorithm shares: one random trace on a model
// clock through the Lua script on a real redis-server and through the in-memory twin,
// requiring identical decisions. Steps land exactly on reset/retry boundaries and 1 ms
// before them; limits change mid-trace (limits are arguments); costs include ones
// larger than the limit; peeks, refunds and resets are mixed in.
#pragma once

#include <cstdint>

#include "sluice/limits.h"
#include "testing/redis_server.h"

namespace sluice::testing {

struct TraceConfig {
  Algorithm algorithm = Algorithm::kFixedWindow;
  uint32_t seed = 1;
  int64_t window_ms = 10'000;
  int64_t refill = 0;
  bool aligned = false;
  int steps = 4000;
  int ids = 6;
};

// Runs the trace; fails the current test at the first differing decision (printing the
// step, both decisions and the seed). Also checks that the trace reached both outcomes
// and the boundaries, and that no key of its prefix is left without an expiry.
void RunDifferentialTrace(const RedisServer& server, const TraceConfig& config);

}  // namespace sluice::testing

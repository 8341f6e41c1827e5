// The same random trace on a model clock through the Lua script on a real redis-server
// and through the in-memory twin: every decision must be identical. Steps land exactly
// on window ends and 1 ms before them, limits change mid-trace (limits are arguments),
// costs include ones larger than the limit.
#include <utility>

#include <iostream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;

struct TraceConfig {
  uint32_t seed;
  bool aligned;
  int64_t window_ms;
  int steps;
};

void RunTrace(const testing::RedisServer& server, const TraceConfig& config) {
  std::cout << "differential trace: seed=" << config.seed << " aligned=" << config.aligned
            << " window_ms=" << config.window_ms << " steps=" << config.steps << "\n";
  auto clock = std::make_shared<testing::FakeClock>(1'700'000'000'000 + config.seed);
  const std::string prefix = "diff" + std::to_string(config.seed);
  auto redis = Client::Create({.url = server.url(), .prefix = prefix,
                               .deadline = milliseconds(1000), .model_clock = clock});
  auto memory = Client::Create({.url = "memory://", .prefix = prefix, .model_clock = clock});
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ASSERT_TRUE(memory.ok());
  const Limit base{.limit = 5, .window = milliseconds(config.window_ms), .aligned = config.aligned};
  auto on_redis = *(*redis)->MakeLimiter("trace", base);
  auto on_memory = *(*memory)->MakeLimiter("trace", base);

  std::mt19937 rng(config.seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  std::map<std::string, int64_t> last_reset;  // per id: reset_after of its last decision
  int64_t limit = base.limit;
  int allowed = 0, refused = 0, boundary_steps = 0;
  for (int step = 0; step < config.steps; ++step) {
    const std::string id = "id" + std::to_string(pick(6));
    // Time: stay, 1 ms, random, exactly to this id's window end or 1 ms before it.
    int64_t advance = 0;
    switch (pick(6)) {
      case 0: advance = 0; break;
      case 1: advance = 1; break;
      case 2: advance = pick(static_cast<int>(config.window_ms / 4)); break;
      case 3:
      case 4:
        if (auto it = last_reset.find(id); it != last_reset.end()) {
          advance = std::max<int64_t>(0, it->second - (pick(2) == 0 ? 1 : 0));
          ++boundary_steps;
        }
        break;
      default: advance = config.window_ms + pick(3) - 1; break;
    }
    clock->Advance(milliseconds(advance));
    if (pick(50) == 0) limit = 1 + pick(12);  // a plan change mid-trace
    CheckOptions options;
    options.cost = pick(10) == 0 ? limit + 1 + pick(3) : 1 + pick(pick(4) == 0 ? 4 : 1);
    options.limit = Limit{.limit = limit, .window = base.window, .aligned = base.aligned};

    auto r = on_redis.Check(id, options);
    auto m = on_memory.Check(id, options);
    ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status().ToString();
    ASSERT_TRUE(m.ok()) << "step " << step << ": " << m.status().ToString();
    ASSERT_EQ(r->allowed, m->allowed) << "step " << step << " id " << id << "\nredis:  "
                                      << r->ToString() << "\nmemory: " << m->ToString();
    ASSERT_EQ(r->remaining, m->remaining) << "step " << step;
    ASSERT_EQ(r->limit, m->limit) << "step " << step;
    ASSERT_EQ(r->reset_after, m->reset_after) << "step " << step;
    ASSERT_EQ(r->retry_after, m->retry_after) << "step " << step;
    ASSERT_EQ(r->reason, m->reason) << "step " << step;
    last_reset[id] = r->reset_after.count();
    (r->allowed ? allowed : refused)++;
  }
  std::cout << "  allowed=" << allowed << " refused=" << refused
            << " boundary_steps=" << boundary_steps << "\n";
  // The trace must have exercised both outcomes and the window edges.
  EXPECT_GT(allowed, config.steps / 10);
  EXPECT_GT(refused, config.steps / 10);
  EXPECT_GT(boundary_steps, config.steps / 10);
  EXPECT_EQ(server.KeysWithoutTtl(prefix + ":*"), std::vector<std::string>{});
}

TEST(FixedWindowDifferential, SlidingStartWindows) {
  testing::RedisServer server;
  RunTrace(server, {.seed = 20261129, .aligned = false, .window_ms = 10'000, .steps = 4000});
  RunTrace(server, {.seed = 7, .aligned = false, .window_ms = 1'000, .steps = 4000});
}

TEST(FixedWindowDifferential, AlignedWindows) {
  testing::RedisServer server;
  RunTrace(server, {.seed = 4242, .aligned = true, .window_ms = 10'000, .steps = 4000});
  RunTrace(server, {.seed = 99, .aligned = true, .window_ms = 7, .steps = 4000});
}

}  // namespace
}  // namespace sluice

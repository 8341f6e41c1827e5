#include "differential.h"

#include <iostream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"

namespace sluice::testing {

using std::chrono::milliseconds;

void RunDifferentialTrace(const RedisServer& server, const TraceConfig& config) {
  const std::string name(AlgorithmName(config.algorithm));
  std::cout << "differential trace " << name << ": seed=" << config.seed
            << " window_ms=" << config.window_ms << " refill=" << config.refill
            << " aligned=" << config.aligned << " steps=" << config.steps << "\n";
  auto clock = std::make_shared<FakeClock>(1'700'000'000'000 + config.seed);
  const std::string prefix = "diff" + std::to_string(config.seed);
  auto redis = Client::Create({.url = server.url(), .prefix = prefix,
                               .deadline = milliseconds(2000), .model_clock = clock});
  auto memory = Client::Create({.url = "memory://", .prefix = prefix, .model_clock = clock});
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ASSERT_TRUE(memory.ok());
  const Limit base{.algorithm = config.algorithm, .limit = 5,
                   .window = milliseconds(config.window_ms), .refill = config.refill,
                   .aligned = config.aligned};
  // Every call must reach the script and the twin: no denial cache in front of them.
  const LimiterOptions uncached{.cache_denials = false};
  auto on_redis = (*redis)->MakeLimiter("trace", base, uncached);
  ASSERT_TRUE(on_redis.ok()) << on_redis.status().ToString();
  auto on_memory = *(*memory)->MakeLimiter("trace", base, uncached);

  std::mt19937 rng(config.seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint32_t>(n)); };
  std::map<std::string, Decision> last;  // per id: its last decision
  int64_t limit = base.limit;
  int allowed = 0, refused = 0, boundary_steps = 0;
  for (int step = 0; step < config.steps; ++step) {
    const std::string id = "id" + std::to_string(pick(config.ids));
    // Time: stay, 1 ms, a little, exactly to (or 1 ms before) this id's reset or retry
    // moment, or a whole window.
    int64_t advance = 0;
    auto it = last.find(id);
    switch (pick(7)) {
      case 0: advance = 0; break;
      case 1: advance = 1; break;
      case 2: advance = pick(std::max<int64_t>(1, config.window_ms / 4)); break;
      case 3:
      case 4:
        if (it != last.end()) {
          advance = std::max<int64_t>(0, it->second.reset_after.count() - pick(2));
          ++boundary_steps;
        }
        break;
      case 5:
        if (it != last.end() && it->second.retry_after.count() > 0) {
          advance = std::max<int64_t>(0, it->second.retry_after.count() - pick(2));
          ++boundary_steps;
        }
        break;
      default: advance = config.window_ms + pick(3) - 1; break;
    }
    clock->Advance(milliseconds(advance));
    if (pick(50) == 0) limit = 1 + pick(12);  // a plan change mid-trace
    CheckOptions options;
    options.cost = pick(10) == 0 ? limit + 1 + pick(3) : 1 + pick(pick(4) == 0 ? 4 : 1);
    options.limit = Limit{.algorithm = base.algorithm, .limit = limit, .window = base.window,
                          .refill = base.refill, .aligned = base.aligned};
    const int64_t op = pick(100);
    const char* op_name = op < 80 ? "check" : op < 90 ? "peek" : op < 97 ? "refund" : "reset";
    StatusOr<Decision> r = InternalError("unset"), m = InternalError("unset");
    if (op < 80) {
      r = on_redis->Check(id, options);
      m = on_memory.Check(id, options);
    } else if (op < 90) {
      r = on_redis->Peek(id, options);
      m = on_memory.Peek(id, options);
    } else if (op < 97) {
      const int64_t amount = 1 + pick(3);
      r = on_redis->Refund(id, amount, options);
      m = on_memory.Refund(id, amount, options);
    } else {
      r = on_redis->Reset(id, options);
      m = on_memory.Reset(id, options);
    }
    ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status().ToString();
    ASSERT_TRUE(m.ok()) << "step " << step << ": " << m.status().ToString();
    const std::string where = "seed " + std::to_string(config.seed) + " step " +
                              std::to_string(step) + " " + op_name + " id " + id + " cost " +
                              std::to_string(options.cost) + " limit " + std::to_string(limit) +
                              "\n  redis:  " + r->ToString() + "\n  memory: " + m->ToString();
    ASSERT_EQ(r->allowed, m->allowed) << where;
    ASSERT_EQ(r->remaining, m->remaining) << where;
    ASSERT_EQ(r->limit, m->limit) << where;
    ASSERT_EQ(r->reset_after, m->reset_after) << where;
    ASSERT_EQ(r->retry_after, m->retry_after) << where;
    ASSERT_EQ(r->reason, m->reason) << where;
    last[id] = *r;
    if (op < 80) (r->allowed ? allowed : refused)++;
  }
  std::cout << "  allowed=" << allowed << " refused=" << refused
            << " boundary_steps=" << boundary_steps << "\n";
  EXPECT_GT(allowed, config.steps / 10);
  EXPECT_GT(refused, config.steps / 20);
  EXPECT_GT(boundary_steps, config.steps / 10);
  EXPECT_EQ(server.KeysWithoutTtl(prefix + ":*"), std::vector<std::string>{});
}

}  // namespace sluice::testing

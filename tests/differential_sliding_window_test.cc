// Differential tests: the sliding window counter script on real Redis vs its in-memory
// twin, on the shared random traces and on a trace of huge limits and windows (products
// far above 2^53, where the script divides digit by digit and the twin in 128 bits).
#include <iostream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "differential.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using std::chrono::milliseconds;

TEST(SlidingWindowDifferential, TenSecondWindows) {
  testing::RedisServer server;
  for (uint32_t seed : {20261129u, 11u, 12u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kSlidingWindow, .seed = seed, .window_ms = 10'000});
  }
}

TEST(SlidingWindowDifferential, OneSecondWindows) {
  testing::RedisServer server;
  for (uint32_t seed : {7u, 21u, 22u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kSlidingWindow, .seed = seed, .window_ms = 1'000});
  }
}

TEST(SlidingWindowDifferential, SevenMillisecondWindows) {
  testing::RedisServer server;
  for (uint32_t seed : {99u, 31u, 32u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kSlidingWindow, .seed = seed, .window_ms = 7});
  }
}

// Limits near kMaxLimit, costs up to the limit, windows up to kMaxWindow; time steps land
// on reset/retry moments and window boundaries, and 1 ms before them.
void RunHugeTrace(const testing::RedisServer& server, uint32_t seed, int64_t window_ms, int steps) {
  std::cout << "huge sliding window trace: seed=" << seed << " window_ms=" << window_ms
            << " steps=" << steps << "\n";
  auto clock = std::make_shared<testing::FakeClock>(1'700'000'000'000 + seed);
  const std::string prefix = "huge" + std::to_string(seed);
  auto redis = Client::Create({.url = server.url(),
                               .prefix = prefix,
                               .deadline = milliseconds(2000),
                               .model_clock = clock});
  auto memory = Client::Create({.url = "memory://", .prefix = prefix, .model_clock = clock});
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ASSERT_THAT(memory, IsOk());
  const Limit base{.algorithm = Algorithm::kSlidingWindow,
                   .limit = kMaxLimit,
                   .window = milliseconds(window_ms)};
  auto on_redis = *(*redis)->MakeLimiter("huge", base);
  auto on_memory = *(*memory)->MakeLimiter("huge", base);
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  std::map<std::string, Decision> last;
  int64_t limit = kMaxLimit;
  int allowed = 0, refused = 0;
  for (int step = 0; step < steps; ++step) {
    const std::string id = "id" + std::to_string(pick(3));
    int64_t advance = 0;
    auto it = last.find(id);
    const int64_t offset = ((clock->NowMs() % window_ms) + window_ms) % window_ms;
    switch (pick(6)) {
      case 0: advance = pick(window_ms / 16 + 1); break;
      // To the next window boundary (e = 0: the previous count weighs w / w) or 1 ms before.
      case 4: advance = std::max<int64_t>(0, window_ms - offset - pick(2)); break;
      case 1: advance = pick(window_ms + 1); break;
      case 2:
        if (it != last.end())
          advance = std::max<int64_t>(0, it->second.reset_after.count() - pick(2));
        break;
      default:
        if (it != last.end() && it->second.retry_after.count() > 0) {
          advance = std::max<int64_t>(0, it->second.retry_after.count() - pick(2));
        }
        break;
    }
    clock->Advance(milliseconds(advance));
    if (pick(20) == 0) limit = kMaxLimit / 2 + pick(kMaxLimit / 2 + 1);
    CheckOptions options;
    options.cost = 1 + (pick(2) == 0 ? pick(limit) : pick(limit / 3));
    options.limit =
        Limit{.algorithm = Algorithm::kSlidingWindow, .limit = limit, .window = base.window};
    const int64_t op = pick(10);
    StatusOr<Decision> r = InternalError("unset"), m = InternalError("unset");
    if (op < 7) {
      r = on_redis.Check(id, options);
      m = on_memory.Check(id, options);
    } else if (op < 9) {
      r = on_redis.Peek(id, options);
      m = on_memory.Peek(id, options);
    } else {
      r = on_redis.Refund(id, options.cost / 2 + 1, options);
      m = on_memory.Refund(id, options.cost / 2 + 1, options);
    }
    ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status().ToString();
    ASSERT_TRUE(m.ok()) << "step " << step << ": " << m.status().ToString();
    const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step) +
                              " op " + std::to_string(op) + " id " + id + " cost " +
                              std::to_string(options.cost) + " limit " + std::to_string(limit) +
                              "\n  redis:  " + r->ToString() + "\n  memory: " + m->ToString();
    ASSERT_EQ(r->allowed, m->allowed) << where;
    ASSERT_EQ(r->remaining, m->remaining) << where;
    ASSERT_EQ(r->reset_after, m->reset_after) << where;
    ASSERT_EQ(r->retry_after, m->retry_after) << where;
    ASSERT_EQ(r->reason, m->reason) << where;
    last[id] = *r;
    if (op < 7) (r->allowed ? allowed : refused)++;
  }
  std::cout << "  allowed=" << allowed << " refused=" << refused << "\n";
  EXPECT_GT(allowed, steps / 10);
  EXPECT_GT(refused, steps / 20);
  EXPECT_EQ(server.KeysWithoutTtl(prefix + ":*"), std::vector<std::string>{});
}

TEST(SlidingWindowDifferential, HugeLimitsAndWindows) {
  testing::RedisServer server;
  RunHugeTrace(server, 1, kMaxWindow.count(), 2000);
  RunHugeTrace(server, 2, 3'600'000, 2000);
  RunHugeTrace(server, 3, 1'000, 2000);
}

// Every parameter of the Limit changes between calls, foreign values of every Redis type
// appear at the keys, and after every step the key's TTL covers its state.
TEST(SlidingWindowDifferential, ParametersChangeBetweenCalls) {
  testing::RedisServer server;
  testing::RunParameterChangeTraces(server, Algorithm::kSlidingWindow);
}

// Debits mixed into the trace: ids go into debt (up to the bound) and the checks that
// follow are refused until the window's own recovery, identically in script and twin.
TEST(SlidingWindowDifferential, DebitsIntoDebt) {
  testing::RedisServer server;
  testing::RunDebitTraces(server, Algorithm::kSlidingWindow);
}

// Blocks (LimiterOptions::block_for): a refusal over the limit holds the id refused for
// the block, through checks, peeks, refunds, debits and resets, on both sides alike.
TEST(SlidingWindowDifferential, BlocksHoldUntilTheyEnd) {
  testing::RedisServer server;
  testing::RunBlockTraces(server, Algorithm::kSlidingWindow);
}

}  // namespace
}  // namespace sluice

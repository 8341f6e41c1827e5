// The sliding window counter on a real redis-server through the public API: semantics,
// boundaries on a model clock, peek/refund/reset, the key and its TTL rules, and
// exactness under contention (processes x threads on one key).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/processes.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice::sliding_window_redis_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::RedisServer;

constexpr char kPrefix[] = "swtest";
// A model-clock time at the start of a 10 s window (and of a 1 s one).
constexpr int64_t kT0 = 1'700'000'000'000;

// The stored state, as sliding_window.lua packs it: struct '<i8i6i6' (start ms, current
// count, previous count; little-endian, 20 bytes).
struct Stored {
  int64_t start = 0, current = 0, previous = 0;
  bool operator==(const Stored&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Stored& s) {
  return os << "{start=" << s.start << " current=" << s.current << " previous=" << s.previous
            << "}";
}

int64_t LittleEndian(const std::string& bytes, size_t at, size_t size) {
  uint64_t v = 0;
  for (size_t i = 0; i < size; ++i) {
    v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  }
  if (size < 8 && (v >> (8 * size - 1)) != 0) v |= ~uint64_t{0} << (8 * size);  // sign
  return static_cast<int64_t>(v);
}

// What the script writes: start, current, previous and the window they were counted in
// (26 bytes; the window is checked by the tests that care through Window()).
std::optional<Stored> Decode(const std::string& value) {
  if (value.size() != 26) return std::nullopt;
  return Stored{LittleEndian(value, 0, 8), LittleEndian(value, 8, 6), LittleEndian(value, 14, 6)};
}
int64_t Window(const std::string& value) {
  return value.size() == 26 ? LittleEndian(value, 20, 6) : -1;
}

// The earlier 20-byte form (no window), which the script still reads as counted in the
// window in force.
std::string Encode(const Stored& s) {
  std::string out;
  auto put = [&out](int64_t v, size_t size) {
    for (size_t i = 0; i < size; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(s.start, 8);
  put(s.current, 6);
  put(s.previous, 6);
  return out;
}

Limit Sliding(int64_t limit, milliseconds window) {
  return {.algorithm = Algorithm::kSlidingWindow, .limit = limit, .window = window};
}

class SlidingWindowRedis : public testing::RedisAlgorithmTest {
 protected:
  // Every call here must reach the script: no denial cache, and a store failure is a
  // refusal that says so, never an admission.
  SlidingWindowRedis() : RedisAlgorithmTest(kPrefix, testing::ScriptOptions()) {}
  // A window of at least `from` whose boundaries on Redis's clock are more than `margin`
  // away (both sides): a test on Redis TIME that must not see a rollover uses it.
  milliseconds WindowAwayFromBoundaries(milliseconds from, milliseconds margin) {
    const int64_t now = RedisNowMs();
    for (int64_t w = from.count(); w < 2 * from.count(); w += from.count() / 100) {
      const int64_t offset = now % w;
      if (offset > margin.count() && w - offset > margin.count()) return milliseconds(w);
    }
    ADD_FAILURE() << "no window away from a boundary";
    return from;
  }
};

TEST_F(SlidingWindowRedis, AdmitsTheLimitAndDoesNotCountRefusals) {
  const milliseconds window = WindowAwayFromBoundaries(seconds(60), seconds(10));
  auto limiter = *Connect()->MakeLimiter("login", Sliding(3, window));
  for (int i = 2; i >= 0; --i) {
    auto d = limiter.Check("account:101");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->remaining, i);
    EXPECT_EQ(d->limit, 3);
    EXPECT_EQ(d->source, DecisionSource::kStore);
    EXPECT_EQ(d->retry_after, milliseconds(0));
    // The count c = 3 - i weighs until ms w - ceil(w / c) + 1 of the next window; the
    // current one has run more than 10 s and has more than 10 s left.
    const int64_t zero = 2 * window.count() + 1 - (window.count() + 2 - i) / (3 - i);
    EXPECT_GT(d->reset_after, milliseconds(zero - window.count() + 10'000));
    EXPECT_LT(d->reset_after, milliseconds(zero - 10'000));
  }
  for (int i = 0; i < 5; ++i) {
    auto d = limiter.Check("account:101");
    ASSERT_THAT(d, IsOk());
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->reason, RefusalReason::kOverLimit);
    EXPECT_EQ(d->remaining, 0);
    EXPECT_GT(d->retry_after, milliseconds(0));
    EXPECT_LE(d->retry_after, d->reset_after);
  }
  const std::string key = *limiter.KeyFor("account:101");
  EXPECT_EQ(key, "swtest:{login:account:101}:sw");
  const std::optional<Stored> stored = Decode(Get(key));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(Window(Get(key)), window.count());
  const int64_t start = stored->start;
  EXPECT_EQ(start % window.count(), 0) << *stored;
  EXPECT_EQ(stored->current, 3) << "refusals were counted";
  EXPECT_EQ(stored->previous, 0);
  const int64_t pttl = Pttl(key);
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, start + 2 * window.count() + 1 - (window.count() + 2) / 3 - (start - 1));
  EXPECT_TRUE(limiter.Check("account:402")->allowed) << "another id has its own budget";
}

TEST_F(SlidingWindowRedis, BoundariesOnAModelClock) {
  auto clock = std::make_shared<testing::FakeClock>(kT0 + 4'000);
  auto limiter = *Connect(clock)->MakeLimiter("edge", Sliding(4, seconds(10)));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(limiter.Check("x")->allowed);
  // 4 in [kT0, kT0 + 10 s); they weigh floor(4 * (10000 - e) / 10000) in the next window:
  // 3 from e = 1, 2 from e = 2501, 1 from e = 5001, 0 from e = 7501.
  auto full = limiter.Check("x");
  EXPECT_FALSE(full->allowed);
  EXPECT_EQ(full->retry_after, milliseconds(6'001));
  EXPECT_EQ(full->reset_after, milliseconds(13'501));
  clock->Set(kT0 + 9'999);  // 1 ms before the window ends
  EXPECT_FALSE(limiter.Check("x")->allowed);
  clock->Set(kT0 + 10'000);  // at the boundary the previous 4 weigh fully
  auto at = limiter.Check("x");
  EXPECT_FALSE(at->allowed);
  EXPECT_EQ(at->retry_after, milliseconds(1));
  clock->Set(kT0 + 10'001);
  auto after = limiter.Check("x");
  EXPECT_TRUE(after->allowed);
  EXPECT_EQ(after->remaining, 0);
  // Now 1 current + previous 4: 2 more fit when the 4 weigh 1, at e = 5001.
  auto two = limiter.Peek("x", {.cost = 2});
  EXPECT_FALSE(two->allowed);
  EXPECT_EQ(two->retry_after, milliseconds(5'000));
  clock->Set(kT0 + 15'000);
  EXPECT_FALSE(limiter.Peek("x", {.cost = 2})->allowed);
  clock->Set(kT0 + 15'001);
  EXPECT_TRUE(limiter.Peek("x", {.cost = 2})->allowed);
  // The current 1 weighs until e = 1 of the window after: reset at kT0 + 20 001.
  auto d = limiter.Peek("x");
  EXPECT_EQ(d->reset_after, milliseconds(5'000));
  clock->Set(kT0 + 20'000);
  EXPECT_EQ(limiter.Peek("x")->remaining, 3);
  clock->Set(kT0 + 20'001);
  auto empty = limiter.Peek("x");
  EXPECT_EQ(empty->remaining, 4);
  EXPECT_EQ(empty->reset_after, milliseconds(0));
  EXPECT_TRUE(server_.Keys("swtest:*").empty()) << "the state that no longer weighs was kept";
}

TEST_F(SlidingWindowRedis, CostIsAllOrNothingAndCostAboveLimitCreatesNoKey) {
  const milliseconds window = WindowAwayFromBoundaries(seconds(60), seconds(10));
  auto limiter = *Connect()->MakeLimiter("upload", Sliding(10, window));
  EXPECT_TRUE(limiter.Check("u", {.cost = 7})->allowed);
  auto d = limiter.Check("u", {.cost = 4});
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->remaining, 3);
  EXPECT_TRUE(limiter.Check("u", {.cost = 3})->allowed);
  auto too_big = limiter.Check("v", {.cost = 11});
  EXPECT_FALSE(too_big->allowed);
  EXPECT_EQ(too_big->reason, RefusalReason::kCostExceedsLimit);
  EXPECT_TRUE(server_.Keys("swtest:{upload:v}:sw").empty()) << "a refusal created a key";
  auto too_big_live = limiter.Check("u", {.cost = 11});
  EXPECT_EQ(too_big_live->reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(too_big_live->retry_after, too_big_live->reset_after);
}

TEST_F(SlidingWindowRedis, PeekRefundAndReset) {
  auto clock = std::make_shared<testing::FakeClock>(kT0 + 500);
  auto limiter = *Connect(clock)->MakeLimiter("ops", Sliding(5, seconds(1)));
  const std::string key = *limiter.KeyFor("p");
  auto peek = limiter.Peek("p", {.cost = 5});
  EXPECT_TRUE(peek->allowed);
  EXPECT_EQ(peek->remaining, 5);
  EXPECT_TRUE(server_.Keys(key).empty()) << "a peek created a key";
  ASSERT_TRUE(limiter.Check("p", {.cost = 4})->allowed);
  EXPECT_FALSE(limiter.Peek("p", {.cost = 2})->allowed);
  EXPECT_EQ(Decode(Get(key)), (Stored{kT0, 4, 0}));
  // Refund from the current count.
  auto refunded = limiter.Refund("p", 3);
  EXPECT_TRUE(refunded->allowed);
  EXPECT_EQ(refunded->remaining, 4);
  EXPECT_EQ(Decode(Get(key)), (Stored{kT0, 1, 0}));
  // After the rollover a refund comes from the previous count.
  ASSERT_TRUE(limiter.Check("p", {.cost = 3})->allowed);  // 4 in [kT0, kT0 + 1 s)
  clock->Set(kT0 + 1'250);                                // 4 weigh 3
  EXPECT_EQ(limiter.Peek("p")->remaining, 2);
  auto back = limiter.Refund("p", 2);
  EXPECT_EQ(back->remaining, 4);  // 2 weigh floor(2 * 750 / 1000) = 1
  EXPECT_EQ(Decode(Get(key)), (Stored{kT0 + 1'000, 0, 2}));
  // Refunding more than is left deletes the key; a refund with no key is a no-op.
  EXPECT_EQ(limiter.Refund("p", 100)->remaining, 5);
  EXPECT_TRUE(server_.Keys(key).empty());
  EXPECT_EQ(limiter.Refund("p", 1)->remaining, 5);
  EXPECT_TRUE(server_.Keys(key).empty());
  // Reset forgets the id.
  ASSERT_TRUE(limiter.Check("p", {.cost = 5})->allowed);
  EXPECT_FALSE(limiter.Check("p")->allowed);
  auto reset = limiter.Reset("p");
  EXPECT_TRUE(reset->allowed);
  EXPECT_EQ(reset->remaining, 5);
  EXPECT_TRUE(server_.Keys(key).empty());
  EXPECT_TRUE(limiter.Check("p", {.cost = 5})->allowed);
}

TEST_F(SlidingWindowRedis, KeyThatLostItsExpiryGetsItBackOnTouch) {
  const milliseconds window = WindowAwayFromBoundaries(seconds(60), seconds(10));
  auto limiter = *Connect()->MakeLimiter("persist", Sliding(2, window));
  const std::string key = *limiter.KeyFor("victim");
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  // Admitted path: the write sets it.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  ASSERT_EQ(Pttl(key), -1);
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  EXPECT_GT(Pttl(key), 0);
  // Refused path.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  auto refused = limiter.Check("victim");
  EXPECT_FALSE(refused->allowed);
  EXPECT_GT(Pttl(key), 0);
  EXPECT_LE(Pttl(key), refused->reset_after.count());
  // Peek path.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  EXPECT_FALSE(limiter.Peek("victim")->allowed);
  EXPECT_GT(Pttl(key), 0);
  // Cost above the limit.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  EXPECT_FALSE(limiter.Check("victim", {.cost = 3})->allowed);
  EXPECT_GT(Pttl(key), 0);
  // A refusal never moves an existing expiry.
  const int64_t before = Pttl(key);
  EXPECT_FALSE(limiter.Check("victim")->allowed);
  EXPECT_LE(Pttl(key), before);
}

TEST_F(SlidingWindowRedis, SeededWithoutTtlTheNextCallGivesItOne) {
  const milliseconds window = WindowAwayFromBoundaries(seconds(60), seconds(10));
  auto limiter = *Connect()->MakeLimiter("seeded", Sliding(5, window));
  const std::string key = *limiter.KeyFor("s");
  const int64_t now = RedisNowMs();
  const int64_t start = now - now % window.count();
  // A full current window stored with no expiry (as after a crash of some other writer).
  server_.Command({"SET", key, Encode({start, 5, 0})});
  ASSERT_EQ(Pttl(key), -1);
  auto d = limiter.Check("s");
  EXPECT_FALSE(d->allowed);
  EXPECT_GT(Pttl(key), 0);
  EXPECT_LE(Pttl(key), d->reset_after.count());
  // A value sluice did not write is pruned, and the call decides as on no state.
  for (const std::string& foreign : {std::string("garbage"), Encode({start, -1, 0}),
                                     Encode({start + 2 * window.count(), 1, 0})}) {
    server_.Command({"SET", key, foreign});
    EXPECT_TRUE(limiter.Check("s")->allowed);
    EXPECT_EQ(Decode(Get(key)), (Stored{start, 1, 0}));
    EXPECT_GT(Pttl(key), 0);
  }
}

TEST_F(SlidingWindowRedis, PlanChangeAppliesOnTheNextCallWithoutReset) {
  const milliseconds window = WindowAwayFromBoundaries(seconds(60), seconds(10));
  auto limiter = *Connect()->MakeLimiter("plan", Sliding(2, window));
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_FALSE(limiter.Check("acct")->allowed);
  auto up = limiter.Check("acct", {.limit = Sliding(4, window)});
  EXPECT_TRUE(up->allowed);
  EXPECT_EQ(up->remaining, 1);
  auto down = limiter.Check("acct", {.limit = Sliding(1, window)});
  EXPECT_FALSE(down->allowed);
  EXPECT_EQ(down->remaining, 0);
  EXPECT_EQ(down->limit, 1);
}

// Exactness under contention: processes x threads on one key. The window is long and
// Redis's clock far from its boundaries, so no rollover happens during the test: exactly
// `limit` is admitted, never one more.
int64_t Hammer(const std::string& url, milliseconds window, int threads, int calls, int64_t limit,
               bool random_cost) {
  // Closed: a store failure is counted as an error below, never as an admission. Cached
  // denials (refusals answered locally) are fine: they admit nothing.
  auto client = Client::Create({.url = url,
                                .prefix = kPrefix,
                                .deadline = milliseconds(2000),
                                .on_failure = FailurePolicy::kClosed});
  if (!client.ok()) return -1;
  auto limiter = *(*client)->MakeLimiter("hot", Sliding(limit, window));
  return testing::HammerOneId(limiter, threads, calls, random_cost,
                              {DecisionSource::kStore, DecisionSource::kCachedDenial});
}

int64_t RunProcesses(const RedisServer& server, milliseconds window, int processes, int threads,
                     int calls, int64_t limit, bool random_cost) {
  return testing::SumOverChildren(
      processes, [&] { return Hammer(server.url(), window, threads, calls, limit, random_cost); });
}

TEST_F(SlidingWindowRedis, ProcessesTimesThreadsAdmitExactlyTheLimit) {
  const milliseconds window = WindowAwayFromBoundaries(kMaxWindow / 2, std::chrono::hours(1));
  // 4 processes x 8 threads x 100 calls = 3200 attempts on a limit of 500.
  EXPECT_EQ(RunProcesses(server_, window, 4, 8, 100, 500, false), 500);
  const std::optional<Stored> stored = Decode(Get("swtest:{hot:the-one-key}:sw"));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->current, 500);
  EXPECT_EQ(stored->previous, 0);
}

TEST_F(SlidingWindowRedis, MixedCostsNeverExceedTheLimit) {
  const milliseconds window = WindowAwayFromBoundaries(kMaxWindow / 2, std::chrono::hours(1));
  // Costs 1-3: the admitted total may stop short of the limit by at most 2 (what was left
  // was smaller than every later request), never go over it.
  const int64_t admitted = RunProcesses(server_, window, 3, 6, 100, 1000, true);
  EXPECT_LE(admitted, 1000);
  EXPECT_GE(admitted, 998);
  const std::optional<Stored> stored = Decode(Get("swtest:{hot:the-one-key}:sw"));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->current, admitted)
      << "the stored count disagrees with what the callers were told";
}

}  // namespace
}  // namespace sluice::sliding_window_redis_test

// Differential tests: the GCRA script on real Redis vs its in-memory twin — on
// the shared random traces (limit 5, limit changes mid-trace, refill 0 / dividing the
// window / not dividing it, windows from 7 ms to 10 s), and on wide traces that call the
// script directly with limits up to 2^40, windows up to 366 days and refills that divide
// nothing, comparing the raw replies and the stored values.
#include <algorithm>
#include <bit>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "algo/gcra.h"
#include "differential.h"
#include "redis/scripts.h"

namespace sluice::differential_gcra_test {
namespace {

using internal::AlgoArgs;
using internal::AlgoReply;
using internal::GcraState;
using internal::Op;

TEST(GcraDifferential, RefillIsTheLimit) {
  testing::RedisServer server;
  for (uint32_t seed : {20261130u, 4u, 5u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kGcra, .seed = seed, .window_ms = 10'000});
  }
  testing::RunDifferentialTrace(server,
                                {.algorithm = Algorithm::kGcra, .seed = 6, .window_ms = 1'000});
}

TEST(GcraDifferential, RefillDoesNotDivideTheWindow) {
  testing::RedisServer server;
  for (uint32_t seed : {17u, 18u, 19u}) {
    testing::RunDifferentialTrace(
        server, {.algorithm = Algorithm::kGcra, .seed = seed, .window_ms = 1'000, .refill = 3});
  }
  testing::RunDifferentialTrace(
      server, {.algorithm = Algorithm::kGcra, .seed = 20, .window_ms = 10'000, .refill = 7});
  testing::RunDifferentialTrace(
      server, {.algorithm = Algorithm::kGcra, .seed = 21, .window_ms = 999, .refill = 13});
}

TEST(GcraDifferential, TinyWindows) {
  testing::RedisServer server;
  testing::RunDifferentialTrace(server,
                                {.algorithm = Algorithm::kGcra, .seed = 89, .window_ms = 7});
  testing::RunDifferentialTrace(
      server, {.algorithm = Algorithm::kGcra, .seed = 88, .window_ms = 7, .refill = 2});
  testing::RunDifferentialTrace(
      server, {.algorithm = Algorithm::kGcra, .seed = 87, .window_ms = 1, .refill = 1});
}

// ---------------------------------------------------------------------------------------
// Wide traces: the script by EVALSHA with explicit arguments, against GcraStep.

// The stored value: big-endian IEEE-754 doubles TAT, fraction, refill, window, as
// struct.pack('>dddd') writes them.
std::string Format(const GcraState& s) {
  std::string out;
  for (int64_t v : {s.tat_ms, s.tat_fraction, s.rate, s.window_ms}) {
    const auto bits = std::bit_cast<uint64_t>(static_cast<double>(v));
    for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(bits >> shift));
  }
  return out;
}

struct Params {
  int64_t limit, window_ms, refill;
};

// A log-uniform integer in [1, max].
int64_t LogUniform(std::mt19937_64& rng, int64_t max) {
  const double bits = std::log2(static_cast<double>(max));
  const double x = std::exp2(std::uniform_real_distribution<double>(0, bits)(rng));
  return std::clamp<int64_t>(static_cast<int64_t>(x), 1, max);
}

void RunWideTrace(const testing::RedisServer& server, uint32_t seed, std::vector<Params> plans,
                  int steps) {
  std::cout << "wide gcra trace: seed=" << seed << " steps=" << steps << "\n";
  const std::string sha = server.Command({"SCRIPT", "LOAD", std::string(internal::kGcraLua)}).str;
  ASSERT_EQ(sha.size(), 40u);
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  struct Twin {
    std::optional<GcraState> state;
    int64_t expires_at_ms = 0;
    AlgoReply last;
  };
  std::map<std::string, Twin> twins;
  int64_t now = 1'700'000'000'000 + seed;
  Params plan = plans[0];
  int admitted = 0, refused = 0, stored = 0;
  for (int step = 0; step < steps; ++step) {
    const std::string id = "id" + std::to_string(pick(3));
    const std::string key = "gwide" + std::to_string(seed) + ":{g:" + id + "}:gcra";
    Twin& twin = twins[id];
    int64_t advance = 0;
    switch (pick(6)) {
      case 0: break;
      case 1: advance = LogUniform(rng, plan.window_ms); break;
      case 2: advance = std::max<int64_t>(0, twin.last.reset_after_ms - pick(2)); break;
      case 3: advance = std::max<int64_t>(0, twin.last.retry_after_ms - pick(2)); break;
      default: advance = pick(3); break;
    }
    // Clocks stay below 2^52 ms (the year 142,000), the scripts' domain; refills that
    // take up to 2^52 ms would otherwise carry the model clock past it.
    if (now + advance < (int64_t{1} << 51)) now += advance;
    if (pick(40) == 0) plan = plans[pick(static_cast<int64_t>(plans.size()))];
    const int64_t r = pick(100);
    const Op op = r < 70 ? Op::kConsume : r < 82 ? Op::kPeek : r < 97 ? Op::kRefund : Op::kReset;
    const int64_t cost = pick(12) == 0 ? plan.limit + 1 + pick(plan.limit)
                                       : LogUniform(rng, std::max<int64_t>(1, plan.limit / 2));
    const AlgoArgs args{.op = op,
                        .cost = std::min(cost, kMaxLimit),
                        .limit = plan.limit,
                        .window_ms = plan.window_ms,
                        .refill = plan.refill};

    if (twin.state && twin.expires_at_ms <= now) twin.state.reset();  // as MemoryStore does
    const AlgoReply want = internal::GcraStep(twin.state, args, now, twin.expires_at_ms);
    testing::RedisValue got =
        server.Command({"EVALSHA", sha, "1", key, std::to_string(static_cast<int>(op)),
                        std::to_string(now), std::to_string(args.cost), std::to_string(plan.limit),
                        std::to_string(plan.window_ms), std::to_string(plan.refill), "0"});
    const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step) +
                              " op " + std::to_string(static_cast<int>(op)) + " cost " +
                              std::to_string(args.cost) + " limit " + std::to_string(plan.limit) +
                              " window " + std::to_string(plan.window_ms) + " refill " +
                              std::to_string(plan.refill) + " now " + std::to_string(now);
    ASSERT_EQ(got.type, testing::RedisValue::Type::kArray) << where << ": " << got.str;
    ASSERT_EQ(got.elements.size(), 4u) << where;
    const AlgoReply lua{static_cast<int>(got.elements[0].integer), got.elements[1].integer,
                        got.elements[2].integer, got.elements[3].integer};
    ASSERT_EQ(lua.code, want.code) << where;
    ASSERT_EQ(lua.remaining, want.remaining) << where;
    ASSERT_EQ(lua.reset_after_ms, want.reset_after_ms) << where;
    ASSERT_EQ(lua.retry_after_ms, want.retry_after_ms) << where;
    if (twin.state) {
      ASSERT_EQ(server.Command({"GET", key}).str, Format(*twin.state)) << where;
      ++stored;
    }
    twin.last = want;
    if (op == Op::kConsume) (want.code == 1 ? admitted : refused)++;
  }
  std::cout << "  admitted=" << admitted << " refused=" << refused << " stored=" << stored << "\n";
  EXPECT_GT(admitted, steps / 10);
  EXPECT_GT(refused, steps / 20);
  EXPECT_EQ(server.KeysWithoutTtl("gwide*"), std::vector<std::string>{});
}

TEST(GcraDifferential, WideNumbersStayExact) {
  testing::RedisServer server;
  const int64_t day = 24 * 3600 * 1000;
  const int64_t year = kMaxWindow.count();
  // Products limit * window and refill * elapsed far above 2^53, refills coprime with
  // the window, refill 1 (a capacity capped by the 2^52 ms horizon), refill 0.
  RunWideTrace(server, 1, {{kMaxLimit, year, kMaxLimit - 1}}, 1500);
  RunWideTrace(server, 2, {{kMaxLimit, year, 999'999'937}}, 1500);
  RunWideTrace(server, 3, {{kMaxLimit, 7 * day + 13, 0}}, 1500);
  RunWideTrace(server, 4, {{kMaxLimit, year, 1}, {kMaxLimit - 5, year - 1, 3}}, 1500);
  RunWideTrace(server, 5, {{1'000'000'007, 3'600'007, 0}, {999'999'999, 3'600'000, 0}}, 1500);
  // Plan changes between wide and narrow parameters: fractions written under one refill
  // read under another, refills much faster and much slower than the stored TAT.
  RunWideTrace(server, 6,
               {{kMaxLimit, year, kMaxLimit - 1},
                {5, 1000, 3},
                {1'000'000, day, 7},
                {kMaxLimit / 3, 86'399'999, 0},
                {12, 7, 0}},
               3000);
}

// Every parameter of the Limit changes between calls, foreign values of every Redis type
// appear at the keys, and after every step the key's TTL covers its state.
TEST(GcraDifferential, ParametersChangeBetweenCalls) {
  testing::RedisServer server;
  testing::RunParameterChangeTraces(server, Algorithm::kGcra);
}

// Debits mixed into the trace: buckets go into debt (up to twice the capacity missing)
// and the checks that follow are refused until the refill covers it, identically in
// script and twin.
TEST(GcraDifferential, DebitsIntoDebt) {
  testing::RedisServer server;
  testing::RunDebitTraces(server, Algorithm::kGcra);
}

// Blocks (LimiterOptions::block_for): a refusal over the limit holds the id refused for
// the block, through checks, peeks, refunds, debits and resets, on both sides alike.
TEST(GcraDifferential, BlocksHoldUntilTheyEnd) {
  testing::RedisServer server;
  testing::RunBlockTraces(server, Algorithm::kGcra);
}

}  // namespace
}  // namespace sluice::differential_gcra_test

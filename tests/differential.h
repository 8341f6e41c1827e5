// The differential test driver every algorithm shares: one random trace on a model
// clock through the Lua script on a real redis-server and through the in-memory twin,
// requiring identical decisions. Steps land exactly on reset/retry boundaries and 1 ms
// before them; limits change mid-trace (limits are arguments); costs include ones
// larger than the limit; peeks, refunds and resets are mixed in (and debits, when the
// trace asks for them). With vary_parameters,
// every parameter of the Limit changes between calls (window longer and shorter, refill
// 0 and explicit, aligned on and off) and values of every other Redis type appear at the
// ids' keys; after every step the key's TTL must cover the time until its state is full
// again (state lost early is over-admission).
#pragma once

#include <cstdint>

#include "sluice/limits.h"
#include "testing/redis_server.h"

namespace sluice::testing {

// Bytes as test failures show them: printable ASCII as is, others as \xNN.
std::string Printable(const std::string& s);
// A Redis reply as test failures show it: nil, integers, "strings", +status, -errors,
// [arrays].
std::string ShowReply(const RedisValue& v);

struct TraceConfig {
  Algorithm algorithm = Algorithm::kFixedWindow;
  uint32_t seed = 1;
  int64_t window_ms = 10'000;
  int64_t refill = 0;
  bool aligned = false;
  int steps = 4000;
  int ids = 6;
  bool vary_parameters = false;
  // With vary_parameters: whether the window changes too. Not for sliding_log: a log
  // cannot count entries whose key expired under a shorter window, and under a model
  // clock Redis keeps keys 60 s (of real time) longer than the model says, so after a
  // lengthening the script would still count entries the twin has dropped — a
  // difference of the test's clock, not of the algorithms (tests/plan_change_redis_test.cc
  // shortens a sliding_log's window on Redis's own clock).
  bool vary_window = true;
  // 0: every step is one call through the Client. N > 0: the Redis side runs the steps in
  // batches of random sizes 1..N (the connection is corked while a batch is queued, so
  // each is one batch script call, or several when N exceeds the connection's
  // max_batch), straight on the Redis store with the model time of each step; decisions
  // are compared after each batch and the state checks run for each id's last step in it.
  int batch_max = 0;
  // Debits (Limiter::Debit) take a tenth of the steps, of costs up to three times the
  // limit and sometimes far beyond it (the debt bound), so checks meet ids in debt.
  bool debits = false;
  // The limiter's block (LimiterOptions::block_for); 0: none. Refusals over the limit then
  // hold their id refused for the block (decisions compared with Decision::blocked), and
  // the block key's expiry is checked as the id's key's is.
  int64_t block_ms = 0;
};

// Runs the trace; fails the current test at the first differing decision (printing the
// step, both decisions and the seed). Also checks that the trace reached both outcomes
// and the boundaries, and that no key of its prefix is left without an expiry.
void RunDifferentialTrace(const RedisServer& server, const TraceConfig& config);

// The traces every algorithm runs with vary_parameters: three on a 10 s base window and
// one on a 1 s window with an explicit refill and aligned windows.
void RunParameterChangeTraces(const RedisServer& server, Algorithm algorithm,
                              bool vary_window = true);

// The same traces run through batches of random sizes (TraceConfig::batch_max), with and
// without parameter changes.
void RunBatchedTraces(const RedisServer& server, Algorithm algorithm, bool vary_window = true);

// Traces with debits (TraceConfig::debits): one plain, one with every parameter
// changing, one batched (a debit in a batch script call is decided as alone).
void RunDebitTraces(const RedisServer& server, Algorithm algorithm, bool vary_window = true);

// Traces with a block (TraceConfig::block_ms): one plain, one with every parameter
// changing (the block longer than the window), one batched with debits mixed in.
void RunBlockTraces(const RedisServer& server, Algorithm algorithm, bool vary_window = true);

}  // namespace sluice::testing

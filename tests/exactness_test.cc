// Exactness under contention: several processes, each with several threads, hammer one
// key of limit L on a real redis-server; exactly L are admitted, never one more.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/processes.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// In a child process: `threads` threads each make `calls` checks; returns admitted cost.
int64_t Hammer(const std::string& url, int threads, int calls, int64_t limit, bool random_cost) {
  // Closed: a store failure is counted as an error below, never as an admission.
  auto client = Client::Create({.url = url,
                                .prefix = "exact",
                                .deadline = milliseconds(2000),
                                .on_failure = FailurePolicy::kClosed});
  if (!client.ok()) return -1;
  auto limiter = *(*client)->MakeLimiter("hot", {.limit = limit, .window = seconds(300)});
  return testing::HammerOneId(limiter, threads, calls, random_cost,
                              {DecisionSource::kStore, DecisionSource::kCachedDenial});
}

int64_t RunProcesses(const testing::RedisServer& server, int processes, int threads, int calls,
                     int64_t limit, bool random_cost) {
  return testing::SumOverChildren(
      processes, [&] { return Hammer(server.url(), threads, calls, limit, random_cost); });
}

TEST(Exactness, ProcessesTimesThreadsAdmitExactlyTheLimit) {
  testing::RedisServer server;
  // 4 processes x 8 threads x 100 calls = 3200 attempts on a limit of 500.
  EXPECT_EQ(RunProcesses(server, 4, 8, 100, 500, false), 500);
  EXPECT_EQ(server.KeysWithoutTtl("exact:*"), std::vector<std::string>{});
}

TEST(Exactness, MixedCostsNeverExceedTheLimit) {
  testing::RedisServer server;
  // Costs 1-3: the admitted total can stop short of the limit by at most 2 (what was
  // left was smaller than every later request), never go over it.
  int64_t admitted = RunProcesses(server, 3, 6, 100, 1000, true);
  EXPECT_LE(admitted, 1000);
  EXPECT_GE(admitted, 998);
  // The count is the value (the window's end is the key's expiry).
  EXPECT_EQ(server.Command({"GET", "exact:{hot:the-one-key}:fw2"}).str, std::to_string(admitted))
      << "the stored count disagrees with what the callers were told";
  EXPECT_EQ(server.KeysWithoutTtl("exact:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluice

// Local budgets for a hot id on a real redis-server: several clients (each its own
// connection and slices, as separate servers would be) x threads hammer one id under an
// aligned window; no window admits more than the limit, slices do most of the work, and
// every key keeps its expiry.
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

namespace sluice::local_budget_redis_test {
namespace {

using std::chrono::milliseconds;

int64_t WallMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(LocalBudgetRedis, ManyClientsOnOneHotIdNeverExceedTheLimit) {
  testing::RedisServer server;
  constexpr int kClients = 4, kThreadsEach = 2;
  constexpr int64_t kLimit = 2000, kWindowMs = 1000;
  const Limit limit{.limit = kLimit, .window = milliseconds(kWindowMs), .aligned = true};
  LimiterOptions options;
  options.local_budget = {.enabled = true, .hot_checks_per_second = 100};
  std::vector<std::shared_ptr<Client>> clients;
  std::vector<Limiter> limiters;
  for (int i = 0; i < kClients; ++i) {
    auto client =
        Client::Create({.url = server.url(), .prefix = "lbtest", .deadline = milliseconds(2000)});
    ASSERT_THAT(client, testing::IsOk());
    clients.push_back(*client);
    limiters.push_back(*(*client)->MakeLimiter("hot", limit, options));
  }
  // Admitted requests by the window they were counted in: the window ends at the moment
  // the decision was received plus its reset_after (a slice's reset_after ends no later
  // than its window), so rounding that to the nearest window boundary names the window.
  std::mutex mu;
  std::map<int64_t, int64_t> admitted;
  std::atomic<int64_t> local{0}, store{0}, errors{0};
  const int64_t until = WallMs() + 3500;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    for (int t = 0; t < kThreadsEach; ++t) {
      threads.emplace_back([&, c] {
        std::map<int64_t, int64_t> mine;
        for (int n = 0; n < 2'000'000 && WallMs() < until; ++n) {
          StatusOr<Decision> d = limiters[static_cast<size_t>(c)].Check("tenant:1");
          if (!d.ok()) {
            ++errors;
            continue;
          }
          if (!d->allowed) continue;
          const int64_t ends = WallMs() + d->reset_after.count();
          ++mine[(ends + kWindowMs / 2) / kWindowMs];
          ++(d->source == DecisionSource::kLocalBudget ? local : store);
        }
        std::lock_guard lock(mu);
        for (const auto& [w, n] : mine) admitted[w] += n;
      });
    }
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  ASSERT_GE(admitted.size(), 3u);
  std::cout << "admitted per window:";
  for (const auto& [w, n] : admitted) std::cout << " " << n;
  std::cout << "; from slices " << local.load() << ", from the store " << store.load() << "\n";
  for (const auto& [w, n] : admitted) EXPECT_LE(n, kLimit) << "window " << w;
  // Demand is far above the limit: the full windows (not the first or the last) admit
  // at least the limit minus what the slices can hold (clients x limit / 10).
  for (auto it = std::next(admitted.begin()); std::next(it) != admitted.end(); ++it) {
    EXPECT_GE(it->second, kLimit - kClients * kLimit / 10) << "window " << it->first;
  }
  EXPECT_GT(local.load(), store.load()) << "slices decided most requests";
  EXPECT_EQ(server.KeysWithoutTtl("lbtest:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluice::local_budget_redis_test

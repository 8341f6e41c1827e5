// Crash safety: client processes are SIGKILLed at random moments while they check, over
// several rounds; afterwards no key under the prefix is without an expiry. A key seeded
// without one (PERSIST) gets one back from the next check.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/processes.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

[[noreturn]] void CheckForever(const std::string& url, uint32_t seed) {
  auto client = Client::Create({.url = url, .prefix = "chaos", .deadline = milliseconds(50)});
  if (!client.ok()) ::_exit(3);
  auto limiter = *(*client)->MakeLimiter("k", {.limit = 5, .window = seconds(2)});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed * 31 + static_cast<uint32_t>(t));
      for (;;) {
        CheckOptions o;
        o.cost = 1 + static_cast<int64_t>(rng() % 3);
        o.limit = Limit{.limit = 1 + static_cast<int64_t>(rng() % 10),
                        .window = milliseconds(200 + rng() % 5000),
                        .aligned = rng() % 2 == 0};
        // Asynchronous calls pile up so that kills land with many in flight.
        limiter.CheckAsync("id" + std::to_string(rng() % 300), o, [](StatusOr<Decision>) {});
        if (rng() % 8 == 0) (void)limiter.Check("id" + std::to_string(rng() % 300), o);
      }
    });
  }
  for (auto& t : threads) t.join();
  ::_exit(0);
}

TEST(Chaos, SigkilledClientsLeaveNoKeyWithoutExpiry) {
  testing::RedisServer server;
  const uint32_t seed = 1129;
  std::cout << "chaos seed=" << seed << "\n";
  std::mt19937 rng(seed);
  int killed = 0;
  for (int round = 0; round < 6; ++round) {
    std::vector<pid_t> children;
    for (int c = 0; c < 4; ++c) {
      pid_t pid = testing::Fork();
      if (pid == 0) CheckForever(server.url(), seed + static_cast<uint32_t>(round * 10 + c));
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      std::this_thread::sleep_for(milliseconds(50 + rng() % 250));
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      EXPECT_TRUE(WIFSIGNALED(status))
          << "a child ended before it was killed (status " << status << "): it never got to check";
      ++killed;
    }
  }
  auto keys = server.Keys("chaos:*");
  std::cout << "killed " << killed << " clients; " << keys.size() << " keys under chaos:*\n";
  EXPECT_GT(keys.size(), 50u) << "the children did not get to write";
  EXPECT_EQ(server.KeysWithoutTtl("chaos:*"), std::vector<std::string>{});
}

TEST(Chaos, PersistedKeyGetsAnExpiryFromTheNextCheck) {
  testing::RedisServer server;
  auto client =
      Client::Create({.url = server.url(), .prefix = "chaos", .deadline = milliseconds(500)});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto limiter = *(*client)->MakeLimiter("seeded", {.limit = 10, .window = seconds(60)});
  // A key left without TTL (an old INCR-style bug, a PERSIST typed in a shell).
  const std::string key = *limiter.KeyFor("leaked");
  ASSERT_EQ(server.Command({"SET", key, "3:1"}).str, "OK");  // window long over
  ASSERT_EQ(server.Command({"PTTL", key}).integer, -1);
  auto d = limiter.Check("leaked");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 9) << "a window that ended long ago must read as empty";
  long long pttl = server.Command({"PTTL", key}).integer;
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 60'000);
  // Garbage in the value (not written by sluice) is read as an empty window, and repaired.
  ASSERT_EQ(server.Command({"SET", key, "garbage"}).str, "OK");
  d = limiter.Check("leaked");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->allowed);
  EXPECT_GT(server.Command({"PTTL", key}).integer, 0);
}

}  // namespace
}  // namespace sluice

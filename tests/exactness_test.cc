// Exactness under contention: several processes, each with several threads, hammer one
// key of limit L on a real redis-server; exactly L are admitted, never one more.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// In a child process: `threads` threads each make `calls` checks; returns admitted cost.
int64_t Hammer(const std::string& url, int threads, int calls, int64_t limit, bool random_cost) {
  // Closed: a store failure is counted as an error below, never as an admission.
  auto client = Client::Create({.url = url, .prefix = "exact", .deadline = milliseconds(2000),
                                .on_failure = FailurePolicy::kClosed});
  if (!client.ok()) return -1;
  auto limiter = *(*client)->MakeLimiter("hot", {.limit = limit, .window = seconds(300)});
  std::atomic<int64_t> admitted{0}, errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        int64_t cost = random_cost ? 1 + (t * 7 + i) % 3 : 1;
        auto d = limiter.Check("the-one-key", {.cost = cost});
        if (!d.ok() || (d->source != DecisionSource::kStore &&
                        d->source != DecisionSource::kCachedDenial)) {
          ++errors;
        } else if (d->allowed) {
          admitted += cost;
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  return errors.load() > 0 ? -1 : admitted.load();
}

int64_t RunProcesses(const testing::RedisServer& server, int processes, int threads, int calls,
                     int64_t limit, bool random_cost) {
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      int64_t admitted = Hammer(server.url(), threads, calls, limit, random_cost);
      ssize_t w = ::write(fds[1], &admitted, sizeof admitted);
      ::_exit(w == sizeof admitted ? 0 : 1);
    }
    ::close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  int64_t total = 0;
  for (auto [pid, fd] : children) {
    int64_t admitted = -1;
    EXPECT_EQ(::read(fd, &admitted, sizeof admitted), static_cast<ssize_t>(sizeof admitted));
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_GE(admitted, 0) << "a child saw errors";
    total += admitted;
  }
  return total;
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
  std::string value = server.Command({"GET", "exact:{hot:the-one-key}:fw"}).str;
  EXPECT_EQ(value.substr(0, value.find(':')), std::to_string(admitted))
      << "the stored count disagrees with what the callers were told";
}

}  // namespace
}  // namespace sluice

// Many client processes against one server, for exactness tests: forks `processes`
// children, each runs `child` (typically: hammer a limit from several threads) and
// reports the number it returns through a pipe; the parent sums them. A child that
// cannot report, exits non-zero or returns a negative number (it saw errors) fails the
// current test. Forks with Fork() below: before the calling process starts threads of
// its own.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/redis_server.h"

namespace sluice::testing {

// Threads of this process (/proc/self/task).
inline int ThreadCount() {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

// fork() for a test whose child runs sluice code. A child inherits every lock that
// another thread of its parent held at that instant, and nobody in the child will ever
// release it: glibc's malloc guards itself around fork, GCC 12's address sanitizer
// allocator does not, so under ASan such a child could hang at its first allocation
// (two forking tests did, stuck in the sanitizer allocator's lock, while the parent's
// Redis fixture connection had an I/O thread and a resolver thread running). So the
// fixtures' own connections are closed first (their threads end; the next Command()
// reconnects), and a parent that still runs other threads fails the test: fork before
// starting threads (a Client, a pool) in the parent.
inline pid_t Fork() {
  RedisServer::CloseAllClients();
  int threads = ThreadCount();
  // A joined thread can linger in /proc for a moment after join() returns.
  for (int i = 0; i < 100 && threads > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    threads = ThreadCount();
  }
  if (threads > 1) {
    ADD_FAILURE() << "fork() while this process runs " << threads
                  << " threads: the child may inherit a lock held by another thread and hang "
                     "(fork before starting threads)";
  }
  return ::fork();
}

inline int64_t SumOverChildren(int processes, const std::function<int64_t()>& child) {
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t pid = Fork();
    if (pid == 0) {
      ::close(fds[0]);
      const int64_t n = child();
      const ssize_t w = ::write(fds[1], &n, sizeof n);
      ::_exit(w == sizeof n ? 0 : 1);
    }
    ::close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  int64_t total = 0;
  for (auto [pid, fd] : children) {
    int64_t n = -1;
    EXPECT_EQ(::read(fd, &n, sizeof n), static_cast<ssize_t>(sizeof n));
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_GE(n, 0) << "a child saw errors";
    total += n;
  }
  return total;
}

// A child's hammering: `threads` threads each make `calls` checks of one id on `limiter`,
// each of cost 1, or of 1 to 3 when `mixed_costs`. Returns the admitted cost, or -1 when
// any call failed or was decided by a source not in `counted` (empty: any source).
inline int64_t HammerOneId(const Limiter& limiter, int threads, int calls, bool mixed_costs,
                           std::initializer_list<DecisionSource> counted) {
  const std::vector<DecisionSource> sources(counted);
  std::atomic<int64_t> admitted{0}, errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        const int64_t cost = mixed_costs ? 1 + (t * 7 + i) % 3 : 1;
        auto d = limiter.Check("the-one-key", {.cost = cost});
        if (!d.ok() || (!sources.empty() &&
                        std::find(sources.begin(), sources.end(), d->source) == sources.end())) {
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

}  // namespace sluice::testing

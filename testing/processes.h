// Many client processes against one server, for exactness tests: forks `processes`
// children, each runs `child` (typically: hammer a limit from several threads) and
// reports the number it returns through a pipe; the parent sums them. A child that
// cannot report, exits non-zero or returns a negative number (it saw errors) fails the
// current test. Fork before the calling process starts threads of its own.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"

namespace sluice::testing {

inline int64_t SumOverChildren(int processes, const std::function<int64_t()>& child) {
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
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

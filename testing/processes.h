// Many client processes against one server, for exactness tests: forks `processes`
// children, each runs `child` (typically: hammer a limit from several threads) and
// reports the number it returns through a pipe; the parent sums them. A child that
// cannot report, exits non-zero or returns a negative number (it saw errors) fails the
// current test. Fork before the calling process starts threads of its own.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace sluice::testing

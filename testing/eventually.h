// Eventually(check, limit): polls `check` until it holds or `limit` has passed; true when
// it held. For tests that wait for something another thread or process does (a lease
// noticed lost, a server back up), bounded so that a broken build fails instead of
// hanging.
#pragma once

#include <chrono>
#include <thread>

namespace sluice::testing {

template <typename F>
bool Eventually(F check, std::chrono::milliseconds limit = std::chrono::milliseconds(5000),
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (check()) return true;
    std::this_thread::sleep_for(poll);
  }
  return check();
}

}  // namespace sluice::testing

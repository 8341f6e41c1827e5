// Calls of one id per second, as the hot-id options (local budgets, periodic sync) count
// them: the current one-second bucket and the one before it.
#pragma once

#include <cstdint>

namespace sluice::internal {

struct CallRate {
  int64_t second_ms = 0;   // start of the current one-second bucket
  int64_t calls = 0;       // calls in that second
  int64_t last_calls = 0;  // calls in the second before

  // One call at `now_ms`. A new second: the one that ended is the last (a gap of more
  // than a second: 0).
  void Count(int64_t now_ms) {
    if (now_ms - second_ms >= 1000) {
      last_calls = now_ms - second_ms < 2000 ? calls : 0;
      calls = 0;
      second_ms = now_ms;
    }
    ++calls;
  }
};

}  // namespace sluice::internal

// BootClock: the clock a lease's believable end is kept on, CLOCK_BOOTTIME, which keeps
// counting while the machine is suspended, as the store's clock does. (steady_clock
// stops during a suspend: after a laptop or VM slept longer than lease_ttl, a lease
// would still believe itself held although Redis has expired it.)
#pragma once

#include <time.h>

#include <chrono>
#include <functional>

namespace sluice::internal {

struct BootClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<BootClock>;
  static constexpr bool is_steady = true;
  static time_point now() {
    timespec ts{};
    ::clock_gettime(CLOCK_BOOTTIME, &ts);
    return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }
};

// Where a client reads BootClock time: BootClock::now, or a test's own clock.
using BootNow = std::function<BootClock::time_point()>;

}  // namespace sluice::internal

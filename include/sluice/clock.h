// sluice/clock.h — the clock interface.
//
// In production there is one clock: the store's (Redis TIME inside every script; the
// embedded store reads the system clock). A Clock given in ClientOptions::model_clock
// replaces it: its time is passed into every script call. That is for tests (a fake
// clock, differential tests), never a default.
//
// Thread-safety: implementations must be safe to call from any thread.
#pragma once

#include <cstdint>

namespace sluice {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t NowMs() const = 0;
};

// Reads std::chrono::system_clock.
class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
};

}  // namespace sluice

// A Clock whose time moves only when a test moves it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "sluice/clock.h"

namespace sluice::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  void Set(int64_t ms) { now_.store(ms); }
  void Advance(std::chrono::milliseconds by) { now_.fetch_add(by.count()); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace sluice::testing

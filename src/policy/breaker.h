// A circuit breaker in front of the store: after `failures_to_open` consecutive store
// failures it opens, and checks go straight to their failure policy (microseconds, no
// connection attempt, no deadline spent) for `cool_down`; then exactly one call is let
// through as a probe (half-open): its success closes the breaker, its failure opens it
// for another cool-down.
//
// Thread-safety: thread-safe. The closed-state fast path is one atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

#include "core/mutex.h"

namespace sluice::internal {

struct BreakerOptions {
  int failures_to_open = 5;
  std::chrono::milliseconds cool_down{1000};
};

class Breaker {
 public:
  enum class State { kClosed, kOpen, kHalfOpen };
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  explicit Breaker(BreakerOptions options, Now now = &std::chrono::steady_clock::now);

  // True when a call may go to the store now. In the open state after the cool-down it
  // is true for exactly one caller (the probe), which moves the breaker to half-open.
  bool Allow();
  // The outcome of a call that Allow() let through.
  void OnSuccess();
  void OnFailure();

  State state() const { return state_.load(std::memory_order_acquire); }
  // How long until the breaker lets a probe through (0 unless open).
  std::chrono::milliseconds RetryIn() const;
  int64_t consecutive_failures() const { return failures_.load(std::memory_order_relaxed); }
  int64_t opens() const { return opens_.load(std::memory_order_relaxed); }
  int64_t short_circuited() const { return short_circuited_.load(std::memory_order_relaxed); }

 private:
  void Open() SLUICE_REQUIRES(mu_);

  const BreakerOptions options_;
  const Now now_;
  std::atomic<State> state_{State::kClosed};
  std::atomic<int64_t> failures_{0};
  std::atomic<int64_t> opens_{0};
  std::atomic<int64_t> short_circuited_{0};
  mutable Mutex mu_;
  // Open: when the probe may go.
  std::chrono::steady_clock::time_point probe_at_ SLUICE_GUARDED_BY(mu_);
};

std::string_view BreakerStateName(Breaker::State state);

}  // namespace sluice::internal

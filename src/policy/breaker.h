// A circuit breaker in front of the store: after `failures_to_open` consecutive store
// failures it opens, and checks go straight to their failure policy (microseconds, no
// connection attempt, no deadline spent) for `cool_down`; then one call at a time is let
// through as a probe (half-open). The probe's outcome settles the state:
//
//   - a success closes the breaker (so does any other call's success: the store answers);
//   - a store failure opens it for another cool-down;
//   - an outcome that says nothing about the store (a refusal on this side of the
//     connection, the caller's own error) ends the probe without a verdict: the next
//     call is the next probe;
//   - a probe that has not reported within one cool-down is given up: the next call is
//     the next probe (a probe that never completes cannot hold the breaker half-open).
//
// Every call that Allow() lets through reports its outcome with Settle() and the Pass it
// was given, so that the outcome of a probe that was given up, or of a call let through
// before the breaker opened, is not taken for the current probe's.
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
  // What a call that went to the store says about the store.
  enum class Outcome {
    kSuccess,  // the store answered
    kFailure,  // the store did not answer (deadline with nothing received, connection)
    kNeither,  // nothing about the store: a backlog in this client, the caller's error
  };
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  // What Allow() gives a call: whether it may go to the store, and which probe it is.
  class Pass {
   public:
    Pass() = default;
    explicit operator bool() const { return allowed_; }
    bool probe() const { return probe_ != 0; }

   private:
    friend class Breaker;
    Pass(bool allowed, uint64_t probe) : allowed_(allowed), probe_(probe) {}
    bool allowed_ = false;
    uint64_t probe_ = 0;  // the probe's number; 0: let through while closed
  };

  explicit Breaker(BreakerOptions options, Now now = &std::chrono::steady_clock::now);

  // Whether a call may go to the store now. Closed: always. Open: after the cool-down,
  // for one caller (the probe), which moves the breaker to half-open. Half-open: for one
  // caller when no probe is out (the last one ended without a verdict) or the one out
  // was sent a cool-down ago or more.
  Pass Allow();
  // The outcome of a call that Allow() let through with `pass`.
  void Settle(const Pass& pass, Outcome outcome);
  // A success of a call the breaker does not gate (a lease heartbeat or release): the
  // store answers, so the breaker closes.
  void OnAnswered();

  State state() const { return state_.load(std::memory_order_acquire); }
  // How long until the breaker lets a probe through (0 unless open).
  std::chrono::milliseconds RetryIn() const;
  int64_t consecutive_failures() const { return failures_.load(std::memory_order_relaxed); }
  int64_t opens() const { return opens_.load(std::memory_order_relaxed); }
  int64_t short_circuited() const { return short_circuited_.load(std::memory_order_relaxed); }
  // Probes sent, and probes given up because they had not reported within a cool-down.
  int64_t probes() const { return probes_.load(std::memory_order_relaxed); }
  int64_t probes_given_up() const { return probes_given_up_.load(std::memory_order_relaxed); }

 private:
  void Open() SLUICE_REQUIRES(mu_);
  void Close() SLUICE_REQUIRES(mu_);
  Pass Probe(std::chrono::steady_clock::time_point now) SLUICE_REQUIRES(mu_);

  const BreakerOptions options_;
  const Now now_;
  std::atomic<State> state_{State::kClosed};
  std::atomic<int64_t> failures_{0};
  std::atomic<int64_t> opens_{0};
  std::atomic<int64_t> short_circuited_{0};
  std::atomic<int64_t> probes_{0};
  std::atomic<int64_t> probes_given_up_{0};
  mutable Mutex mu_;
  // Open: when the probe may go.
  std::chrono::steady_clock::time_point probe_at_ SLUICE_GUARDED_BY(mu_);
  // Half-open: the probe out (0: none), and when it is given up.
  uint64_t probe_out_ SLUICE_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point probe_until_ SLUICE_GUARDED_BY(mu_);
};

std::string_view BreakerStateName(Breaker::State state);

}  // namespace sluice::internal

#include "policy/breaker.h"

namespace sluice::internal {

Breaker::Breaker(BreakerOptions options, Now now) : options_(options), now_(std::move(now)) {}

Breaker::Pass Breaker::Allow() {
  if (state_.load(std::memory_order_acquire) == State::kClosed) return Pass(true, 0);
  MutexLock lock(mu_);
  const State state = state_.load(std::memory_order_relaxed);
  if (state == State::kClosed) return Pass(true, 0);
  const auto now = now_();
  if (state == State::kOpen && now >= probe_at_) {
    state_.store(State::kHalfOpen, std::memory_order_release);
    return Probe(now);
  }
  if (state == State::kHalfOpen) {
    if (probe_out_ == 0) return Probe(now);  // the last probe ended without a verdict
    if (now >= probe_until_) {
      probes_given_up_.fetch_add(1, std::memory_order_relaxed);
      return Probe(now);
    }
  }
  short_circuited_.fetch_add(1, std::memory_order_relaxed);
  return Pass(false, 0);
}

Breaker::Pass Breaker::Probe(std::chrono::steady_clock::time_point now) {
  probe_out_ = static_cast<uint64_t>(probes_.fetch_add(1, std::memory_order_relaxed)) + 1;
  probe_until_ = now + options_.cool_down;
  return Pass(true, probe_out_);
}

void Breaker::Settle(const Pass& pass, Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess: {
      OnAnswered();
      return;
    }
    case Outcome::kFailure: {
      if (!pass.probe()) {
        // A call let through while closed: it counts while the breaker is closed. Open
        // or half-open, the probe decides (this one was sent before the breaker opened).
        const int64_t failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
        if (state_.load(std::memory_order_acquire) != State::kClosed ||
            failures < options_.failures_to_open) {
          return;
        }
        MutexLock lock(mu_);
        if (state_.load(std::memory_order_relaxed) == State::kClosed) Open();
        return;
      }
      failures_.fetch_add(1, std::memory_order_relaxed);
      MutexLock lock(mu_);
      if (state_.load(std::memory_order_relaxed) == State::kHalfOpen && pass.probe_ == probe_out_) {
        Open();
      }
      return;
    }
    case Outcome::kNeither: {
      if (!pass.probe()) return;
      MutexLock lock(mu_);
      if (pass.probe_ == probe_out_) probe_out_ = 0;  // the next call probes
      return;
    }
  }
}

void Breaker::OnAnswered() {
  if (failures_.load(std::memory_order_relaxed) != 0) failures_.store(0, std::memory_order_relaxed);
  if (state_.load(std::memory_order_acquire) == State::kClosed) return;
  MutexLock lock(mu_);
  Close();
}

void Breaker::Open() {
  probe_at_ = now_() + options_.cool_down;
  probe_out_ = 0;
  opens_.fetch_add(1, std::memory_order_relaxed);
  state_.store(State::kOpen, std::memory_order_release);
}

void Breaker::Close() {
  probe_out_ = 0;
  failures_.store(0, std::memory_order_relaxed);
  state_.store(State::kClosed, std::memory_order_release);
}

std::chrono::milliseconds Breaker::RetryIn() const {
  if (state_.load(std::memory_order_acquire) != State::kOpen) return std::chrono::milliseconds(0);
  MutexLock lock(mu_);
  auto left = std::chrono::ceil<std::chrono::milliseconds>(probe_at_ - now_());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

std::string_view BreakerStateName(Breaker::State state) {
  switch (state) {
    case Breaker::State::kClosed: return "closed";
    case Breaker::State::kOpen: return "open";
    case Breaker::State::kHalfOpen: return "half_open";
  }
  return "unknown";
}

}  // namespace sluice::internal

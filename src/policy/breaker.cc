#include "policy/breaker.h"

namespace sluice::internal {

Breaker::Breaker(BreakerOptions options, Now now) : options_(options), now_(std::move(now)) {}

bool Breaker::Allow() {
  if (state_.load(std::memory_order_acquire) == State::kClosed) return true;
  MutexLock lock(mu_);
  const State state = state_.load(std::memory_order_relaxed);
  if (state == State::kClosed) return true;
  if (state == State::kOpen && now_() >= probe_at_) {
    state_.store(State::kHalfOpen, std::memory_order_release);
    return true;  // the probe
  }
  short_circuited_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void Breaker::OnSuccess() {
  if (failures_.load(std::memory_order_relaxed) != 0) failures_.store(0, std::memory_order_relaxed);
  if (state_.load(std::memory_order_acquire) == State::kClosed) return;
  MutexLock lock(mu_);
  state_.store(State::kClosed, std::memory_order_release);
}

void Breaker::OnFailure() {
  const int64_t failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  const State state = state_.load(std::memory_order_acquire);
  if (state == State::kHalfOpen ||
      (state == State::kClosed && failures >= options_.failures_to_open)) {
    MutexLock lock(mu_);
    if (state_.load(std::memory_order_relaxed) != State::kOpen) Open();
  }
}

void Breaker::Open() {
  probe_at_ = now_() + options_.cool_down;
  opens_.fetch_add(1, std::memory_order_relaxed);
  state_.store(State::kOpen, std::memory_order_release);
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

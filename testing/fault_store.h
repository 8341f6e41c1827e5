// A Store wrapper that injects failures in front of a real store: errors, deadline
// expiries and dropped answers, for the next N calls or with a probability. Tests of the
// policies above the store use it to make a real store misbehave on demand.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <random>

#include "core/mutex.h"
#include "store/store.h"

namespace sluice::testing {

class FaultStore final : public internal::Store {
 public:
  explicit FaultStore(std::shared_ptr<internal::Store> inner, uint32_t seed = 1)
      : inner_(std::move(inner)), rng_(seed) {}

  // The next `n` calls fail with `status` without reaching the inner store.
  void FailNext(int n, Status status) {
    internal::MutexLock lock(mu_);
    fail_next_ = n;
    fail_status_ = std::move(status);
  }
  // Each call fails with `status` with probability `p` (0..1), after the forced ones.
  void FailRandomly(double p, Status status) {
    internal::MutexLock lock(mu_);
    fail_probability_ = p;
    random_status_ = std::move(status);
  }
  int64_t calls() const {
    internal::MutexLock lock(mu_);
    return calls_;
  }
  int64_t injected() const {
    internal::MutexLock lock(mu_);
    return injected_;
  }

  void Check(internal::CheckCall call, DecisionCallback done) override {
    Status fault = NextFault();
    if (!fault.ok()) {
      done(std::move(fault));
      return;
    }
    inner_->Check(std::move(call), std::move(done));
  }
  void RunLease(internal::LeaseCall call, internal::LeaseCallback done) override {
    Status fault = NextFault();
    if (!fault.ok()) {
      done(std::move(fault));
      return;
    }
    inner_->RunLease(std::move(call), std::move(done));
  }
  void AssignQuota(internal::QuotaCall call, internal::QuotaCallback done) override {
    Status fault = NextFault();
    if (!fault.ok()) {
      done(std::move(fault));
      return;
    }
    inner_->AssignQuota(std::move(call), std::move(done));
  }
  bool connected() const override { return inner_->connected(); }
  Status connection_error() const override { return inner_->connection_error(); }
  void Shutdown() override { inner_->Shutdown(); }
  ClientStats stats() const override { return inner_->stats(); }
  void Info(std::string_view section, internal::Deadline deadline,
            std::function<void(StatusOr<std::string>)> done) override {
    inner_->Info(section, deadline, std::move(done));
  }

 private:
  // The fault the next call gets (OK: none).
  Status NextFault() {
    Status fault;
    {
      internal::MutexLock lock(mu_);
      ++calls_;
      if (fail_next_ > 0) {
        --fail_next_;
        fault = fail_status_;
      } else if (fail_probability_ > 0 &&
                 std::uniform_real_distribution<double>(0, 1)(rng_) < fail_probability_) {
        fault = random_status_;
      }
      if (!fault.ok()) ++injected_;
    }
    return fault;
  }

  std::shared_ptr<internal::Store> inner_;
  mutable internal::Mutex mu_;
  std::mt19937 rng_ SLUICE_GUARDED_BY(mu_);
  int fail_next_ SLUICE_GUARDED_BY(mu_) = 0;
  Status fail_status_ SLUICE_GUARDED_BY(mu_);
  double fail_probability_ SLUICE_GUARDED_BY(mu_) = 0;
  Status random_status_ SLUICE_GUARDED_BY(mu_);
  int64_t calls_ SLUICE_GUARDED_BY(mu_) = 0;
  int64_t injected_ SLUICE_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::testing

// The policy layer: a Store in front of the real one that never lets a store failure
// through a check. Each consume or peek either gets the store's decision or, when the
// store failed (deadline, connection, script error) or the circuit breaker is open, the
// decision of the call's failure policy: open, closed, or a local limiter on this
// process's embedded store with the limit (and for token_bucket/gcra the refill rate)
// divided among the servers. Refunds and resets are passed through; their errors stay
// errors.
//
// The breaker counts store failures, not the caller's errors (InvalidArgument) nor a
// backlog in this client (core/client_side.h). There is one per fault domain of the store
// (policy/domain_breakers.h: one per primary of a Redis Cluster, one in all otherwise);
// a call is gated, and its outcome counted, by the breaker of its key's domain as the
// store places it when the call is made (a call redirected to another primary on the way
// still reports to the first). A composite's keys share one domain (store/store.h), its
// first key's. The breakers short-circuit checks and acquires
// only; lease heartbeats, releases and lists always go to the store. A call whose
// deadline passed before it could be sent (it waited in this client: behind a periodic
// sync, or for a second step) is not sent: its policy answers it (a refund or reset gets
// DeadlineExceeded), and the breaker hears nothing of it.
//
// After fork(), every call made in the child answers FailedPrecondition at once, inline
// (the child has none of the parent's I/O threads).
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "memory/memory_store.h"
#include "policy/breaker.h"
#include "policy/denial_cache.h"
#include "policy/domain_breakers.h"
#include "store/store.h"

namespace sluice::internal {

class PolicyStore final : public Store {
 public:
  PolicyStore(std::shared_ptr<Store> inner, std::shared_ptr<const Clock> local_clock,
              BreakerOptions breaker, std::size_t denial_cache_size);

  void Check(CheckCall call, DecisionCallback done) override;
  std::optional<uint32_t> CompositeGroup(std::string_view key) const override {
    return inner_->CompositeGroup(key);
  }
  // As Check, for all of the calls at once: a cached denial of any of them refuses at
  // once (no store call, nothing counted); a store failure or an open breaker gives each
  // call its own policy, in order, all-or-nothing (a refusal gives back what the local
  // fallback admitted for the calls before it).
  void CheckComposite(CompositeCall call, CompositeCallback done) override;
  // Acquire: the store's answer or, when it fails or the breaker is open, the policy's
  // (open: a lease that is not in any store; closed: refused; local: a lease in the local
  // store). Other lease operations go to the store whatever the breaker's state and pass
  // its errors through; a local lease's go to the local store.
  void RunLease(LeaseCall call, LeaseCallback done) override;
  std::shared_ptr<void> WatchLeaseSet(const std::string& key, std::function<void()> wake) override {
    return inner_->WatchLeaseSet(key, std::move(wake));
  }
  void AppendToStream(std::string key, std::vector<std::pair<std::string, std::string>> fields,
                      int64_t max_len, int64_t retention_ms, Deadline deadline,
                      std::function<void(Status)> done) override {
    if (Forked()) return done(ForkedError());
    inner_->AppendToStream(std::move(key), std::move(fields), max_len, retention_ms, deadline,
                           std::move(done));
  }
  // Passed through with the call's deadline, whatever the breaker's state: the caller
  // applies its own failure policy (store/store.h).
  void AssignQuota(QuotaCall call, QuotaCallback done) override {
    if (Forked()) return done(ForkedError());
    inner_->AssignQuota(std::move(call), std::move(done));
  }
  bool connected() const override { return inner_->connected(); }
  Status connection_error() const override { return inner_->connection_error(); }
  void Shutdown() override { inner_->Shutdown(); }
  ClientStats stats() const override;
  void CountShadowRefusal() { shadow_refusals_.fetch_add(1, std::memory_order_relaxed); }
  void Info(std::string_view section, Deadline deadline,
            std::function<void(StatusOr<std::string>)> done) override {
    if (Forked()) return done(ForkedError());
    inner_->Info(section, deadline, std::move(done));
  }

  // The breakers of the store's fault domains.
  DomainBreakers& breakers() { return breakers_; }
  // Whether the store's latest memory reading says it can evict sluice's keys: the
  // checks and acquires of limiters that refuse such a store
  // (LimiterOptions::refuse_evicting_store) are then answered by their failure policy.
  void SetEvicting(bool evicting) { evicting_.store(evicting, std::memory_order_relaxed); }
  bool Evicting() const { return evicting_.load(std::memory_order_relaxed); }
  // One step of the periodic reclaim (memory/memory_store.h) on every embedded store
  // behind this one: the local fallback's, and the store itself when it is the embedded
  // store. The client runs it every MemoryStore::kStepPeriod on its I/O thread, so their
  // expired entries are freed whatever calls arrive. Returns the entries it freed.
  std::size_t ReclaimStep();
  // The local fallback's store; for tests.
  MemoryStore& local_store() { return local_; }
  // True in a child process forked after this store was made.
  bool Forked() const;
  // What every call answers then.
  static Status ForkedError();

 private:
  // What the check answers instead of the store.
  // `breaker`: the one that gates the call (a refusal says when it probes again).
  // The policy's decision for `call`, which the store did not decide because of `why`.
  StatusOr<Decision> Fallback(const CheckCall& call, const Breaker& breaker, StoreFailure why);
  LeaseResult LeaseFallback(const LeaseCall& call, const Breaker& breaker);
  StatusOr<CompositeOutcome> FallbackMany(const std::vector<CheckCall>& calls,
                                          const Breaker& breaker, StoreFailure why);
  // The breaker of `key`'s fault domain: domain 0's, with no lookup, for a store
  // without domains.
  DomainBreakers::Gate GateOf(std::string_view key) {
    if (!domains_) return {&breakers_.first(), nullptr};
    return breakers_.For(inner_->FaultDomain(key));
  }
  // `call` as the local fallback runs it: the limit divided among the servers.
  static CheckCall LocalCall(const CheckCall& call);

  template <typename Call>
  int64_t NowMs(const Call& call) const {
    return call.now_ms ? *call.now_ms : clock_->NowMs();
  }
  // The denial cache's time: the model clock's, else a monotonic clock — its entries
  // expire after a duration (retry_after), which a step of the wall clock (NTP) must not
  // stretch or cut.
  template <typename Call>
  static int64_t CacheNowMs(const Call& call) {
    if (call.now_ms) return *call.now_ms;
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // True when the call's deadline passed before it could be sent (it waited in this
  // client): it is then answered by its policy (or its error) without the store, and
  // the breaker hears nothing of it. Never for the embedded store, which decides at
  // once, nor on a model clock (tests, `sluice simulate`: a run must not depend on how
  // busy the machine is).
  template <typename Call>
  bool ExpiredBeforeSending(const Call& call) const {
    return inner_memory_ == nullptr && !call.now_ms &&
           call.deadline <= std::chrono::steady_clock::now();
  }

  std::shared_ptr<Store> inner_;
  std::shared_ptr<const Clock> clock_;
  MemoryStore local_;
  const bool domains_;  // inner_->HasFaultDomains()
  DomainBreakers breakers_;
  std::optional<DenialCache> denials_;
  std::atomic<bool> evicting_{false};
  // inner_, when it is the embedded store (which decides at once, on the caller's thread).
  MemoryStore* const inner_memory_;
  std::atomic<uint64_t> cached_denials_{0}, policy_decisions_{0}, shadow_refusals_{0}, syncs_{0};
  const uint64_t fork_generation_;  // core/process.h, when this store was made
};

}  // namespace sluice::internal

// Engine's leases for remote callers (docs/sluiced.md, Leases). A lease lives in Redis
// only: Acquire takes one with the library, detaches it (nothing in this process
// heartbeats or releases it) and hands its handle over; Heartbeat and Release act on the
// store through the limiter the handle names, on whichever instance they reach. So
// stopping, crashing or restarting a sluiced changes no slot, and a caller that stops
// heartbeating loses its slot lease_ttl after its last heartbeat, as with the library.
#include "service/engine.h"
#include "service/handles.h"

namespace sluiced {
namespace {

using sluice::DecisionSource;
using sluice::RefusalReason;
using sluice::Status;
using sluice::StatusOr;
using std::chrono::milliseconds;

// The answer to a handle that reaches no configured concurrency limit. One text for
// every case (garbage, another version, a limit removed by a reload), so the answer
// tells a prober nothing about which part was wrong.
Status NoSuchLease() {
  return sluice::NotFoundError(
      "no such lease: the handle names no lease of a configured concurrency limit");
}

}  // namespace

void Engine::Acquire(std::string domain, Entries entries, milliseconds wait,
                     std::shared_ptr<const std::atomic<bool>> caller_gone,
                     std::function<void(LeaseGrant)> done) {
  LeaseGrant grant;
  auto gen = current();
  const DomainConfig* d = gen->config->FindDomain(domain);
  if (!d) {
    grant.unknown_domain = true;
    grant.error = "unknown domain '" + domain + "'";
    done(std::move(grant));
    return;
  }
  Match m = MatchDescriptor(*d, entries);
  if (!m.rule || m.rule->kind != RuleKind::kConcurrency) {
    grant.error = "no concurrency limit (algorithm: concurrency) of domain '" + domain +
                  "' matches this descriptor";
    done(std::move(grant));
    return;
  }
  const BuiltRule& built = gen->rules.at(m.rule.get());
  grant.rule = built.rule;
  grant.id = m.id;
  grant.limit = built.rule->requests_per_unit;
  grant.ttl = built.rule->lease_ttl;
  if (grant.limit == 0) {
    grant.reason = RefusalReason::kOverLimit;
    grant.retry_after = grant.ttl;
    done(std::move(grant));
    return;
  }
  // A waiting acquire holds its caller's request open: bounded per instance.
  bool waits = false;
  if (wait.count() > 0) {
    if (waiting_acquires_.fetch_add(1, std::memory_order_relaxed) < kMaxWaitingAcquires) {
      waits = true;
    } else {
      waiting_acquires_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  built.concurrency->AcquireAsync(
      m.id, {.wait = waits ? std::min(wait, kMaxAcquireWait) : milliseconds(0)},
      [this, waits, grant = std::move(grant), done = std::move(done),
       caller_gone = std::move(caller_gone),
       counters = built.counters](StatusOr<sluice::Acquisition> a) mutable {
        if (waits) waiting_acquires_.fetch_sub(1, std::memory_order_relaxed);
        if (!a.ok()) {
          grant.error = a.status().ToString();
          metrics_.StoreError();
          done(std::move(grant));
          return;
        }
        grant.granted = a->acquired;
        grant.live = a->live;
        grant.limit = a->limit;
        grant.runtime_override = a->limit_source == sluice::LimitSource::kRuntimeOverride;
        grant.retry_after = a->retry_after;
        grant.source = a->source;
        grant.reason = a->reason;
        const Outcome outcome = a->acquired                                     ? kAllowed
                                : a->reason == RefusalReason::kStoreUnavailable ? kUnavailable
                                                                                : kOverLimit;
        counters->decisions[outcome][static_cast<int>(a->source)].fetch_add(
            1, std::memory_order_relaxed);
        if (a->source != DecisionSource::kStore) metrics_.StoreError();
        if (a->acquired && caller_gone && caller_gone->load(std::memory_order_relaxed)) {
          // Nobody is there to take the handle: the Lease is released as it goes out of
          // scope with `a`, so the slot goes to the next waiter now, not lease_ttl later.
          grant.granted = false;
          grant.error = "the caller left before the lease was granted";
          metrics_.LeaseAbandoned();
        } else if (a->acquired) {
          const std::string ref = a->lease.Detach();
          if (ref.empty()) {
            // Lost between the grant and now (this process stalled past lease_ttl): a
            // handle would name a lease that is not there.
            grant.granted = false;
            grant.error = "the lease expired before it could be handed over; acquire again";
          } else {
            grant.handle = EncodeLeaseHandle(grant.rule->limiter_name, ref);
          }
        }
        done(std::move(grant));
      });
}

std::optional<sluice::ConcurrencyLimiter> Engine::LeaseLimiter(const std::string& handle,
                                                               std::string& lease_ref) const {
  std::optional<LeaseHandle> decoded = DecodeLeaseHandle(handle);
  if (!decoded) return std::nullopt;
  auto gen = current();
  auto it = gen->concurrency.find(decoded->limiter_name);
  if (it == gen->concurrency.end()) return std::nullopt;
  lease_ref = std::move(decoded->lease_ref);
  return it->second->concurrency;
}

void Engine::Heartbeat(const std::string& handle,
                       std::function<void(StatusOr<milliseconds>)> done) {
  std::string ref;
  std::optional<sluice::ConcurrencyLimiter> limiter = LeaseLimiter(handle, ref);
  if (!limiter) return done(NoSuchLease());
  const bool local = ref.front() == 'l';
  limiter->HeartbeatAsync(ref, [this, local, ttl = limiter->options().lease_ttl,
                                done = std::move(done)](StatusOr<milliseconds> left) {
    if (left.ok()) return done(left);
    switch (left.status().code()) {
      case sluice::StatusCode::kInvalidArgument: return done(NoSuchLease());
      case sluice::StatusCode::kNotFound:
        // A lease the local policy granted lives in the granting instance's memory:
        // elsewhere it is unknown, not lost (docs/sluiced.md, Leases).
        if (local) return done(ttl);
        return done(sluice::FailedPreconditionError(
            "the lease is gone from the store (released, not heartbeaten within its "
            "lease_ttl, or released by an operator): its slot is free, acquire a new "
            "lease"));
      default: metrics_.StoreError(); return done(left.status());
    }
  });
}

void Engine::Release(const std::string& handle, std::function<void(Status)> done) {
  std::string ref;
  std::optional<sluice::ConcurrencyLimiter> limiter = LeaseLimiter(handle, ref);
  if (!limiter) return done(NoSuchLease());
  limiter->ReleaseAsync(ref, [this, done = std::move(done)](Status s) {
    if (s.code() == sluice::StatusCode::kInvalidArgument) return done(NoSuchLease());
    if (!s.ok()) metrics_.StoreError();
    done(std::move(s));
  });
}

StatusOr<sluice::ConcurrencyLimiter> Engine::AdminLimiter(const Match& match) {
  if (match.rule->kind != RuleKind::kConcurrency)
    return sluice::InvalidArgumentError("the matched limit is not a concurrency limit");
  return client_->MakeConcurrencyLimiter(
      match.rule->limiter_name, {.limit = std::max<int64_t>(1, match.rule->requests_per_unit),
                                 .lease_ttl = match.rule->lease_ttl});
}

StatusOr<sluice::ReleaseAllResult> Engine::ReleaseAll(const Match& match,
                                                      const sluice::AdminAction& action) {
  auto cl = AdminLimiter(match);
  if (!cl.ok()) return cl.status();
  return sluice::ReleaseAll(*cl, match.id, action, {.log_path = options_.audit_log});
}

StatusOr<std::vector<sluice::LeaseInfo>> Engine::ListLeases(const Match& match) {
  auto cl = AdminLimiter(match);
  if (!cl.ok()) return cl.status();
  return cl->List(match.id);
}

}  // namespace sluiced

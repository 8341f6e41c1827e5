#include "policy/policy_store.h"

#include <algorithm>

namespace sluice::internal {
namespace {

// Errors that say the store did not decide. InvalidArgument is the caller's fault and
// reaches the caller; everything else is the store's.
bool IsStoreFailure(const Status& status) {
  return !status.ok() && status.code() != StatusCode::kInvalidArgument;
}

}  // namespace

PolicyStore::PolicyStore(std::shared_ptr<Store> inner, std::shared_ptr<const Clock> local_clock,
                         BreakerOptions breaker, std::size_t denial_cache_size)
    : inner_(std::move(inner)), clock_(local_clock), local_(std::move(local_clock)), breaker_(breaker) {
  if (denial_cache_size > 0) denials_.emplace(denial_cache_size);
}

ClientStats PolicyStore::stats() const {
  ClientStats s = inner_->stats();
  s.cached_denials = cached_denials_.load(std::memory_order_relaxed);
  s.policy_decisions = policy_decisions_.load(std::memory_order_relaxed);
  s.shadow_refusals = shadow_refusals_.load(std::memory_order_relaxed);
  return s;
}

StatusOr<Decision> PolicyStore::Fallback(const CheckCall& call) {
  policy_decisions_.fetch_add(1, std::memory_order_relaxed);
  Decision d;
  d.limit = call.limit.limit;
  switch (call.on_failure) {
    case FailurePolicy::kLocal: {
      CheckCall local = call;
      local.limit.limit = std::max<int64_t>(1, call.limit.limit / std::max<int64_t>(1, call.servers));
      StatusOr<Decision> decided = local_.CheckNow(local);
      if (decided.ok()) decided->source = DecisionSource::kLocalFallback;
      return decided;
    }
    case FailurePolicy::kClosed: {
      d.allowed = false;
      d.remaining = 0;
      // Until the breaker probes again (at least a second: nobody knows better).
      d.retry_after = std::max(breaker_.RetryIn(), std::chrono::milliseconds(1000));
      d.reset_after = d.retry_after;
      d.reason = RefusalReason::kStoreUnavailable;
      d.source = DecisionSource::kFailClosed;
      return d;
    }
    case FailurePolicy::kDefault:
    case FailurePolicy::kOpen:
      break;
  }
  d.allowed = true;
  d.remaining = call.limit.limit;
  d.source = DecisionSource::kFailOpen;
  return d;
}

void PolicyStore::Check(CheckCall call, DecisionCallback done) {
  const bool decision = call.op == Op::kConsume || call.op == Op::kPeek;
  const bool cache = denials_ && call.cache_denials && call.op == Op::kConsume;
  if (cache) {
    if (auto cached = denials_->Lookup(call.key, call.limit, call.cost, NowMs(call))) {
      cached_denials_.fetch_add(1, std::memory_order_relaxed);
      done(*std::move(cached));
      return;
    }
  } else if (denials_ && !decision) {
    denials_->Forget(call.key);  // a refund or reset: the remembered refusal may be over
  }
  if (!breaker_.Allow()) {
    if (decision) {
      done(Fallback(call));
    } else {
      done(UnavailableError("the store is unavailable (circuit breaker open); retry in " +
                            std::to_string(breaker_.RetryIn().count()) + " ms"));
    }
    return;
  }
  if (!decision) {
    inner_->Check(std::move(call), [this, done = std::move(done)](StatusOr<Decision> result) {
      if (result.ok()) {
        breaker_.OnSuccess();
      } else if (IsStoreFailure(result.status())) {
        breaker_.OnFailure();
      }
      done(std::move(result));
    });
    return;
  }
  // The fallback needs the call after the store had it: keep a copy of what it reads.
  CheckCall fallback = call;
  inner_->Check(std::move(call), [this, cache, fallback = std::move(fallback),
                                   done = std::move(done)](StatusOr<Decision> result) {
    if (result.ok()) {
      breaker_.OnSuccess();
      if (cache) denials_->Record(fallback.key, fallback.limit, fallback.cost, *result, NowMs(fallback));
      done(std::move(result));
    } else if (IsStoreFailure(result.status())) {
      breaker_.OnFailure();
      done(Fallback(fallback));
    } else {
      done(std::move(result));
    }
  });
}

LeaseResult PolicyStore::LeaseFallback(const LeaseCall& call) {
  policy_decisions_.fetch_add(1, std::memory_order_relaxed);
  switch (call.on_failure) {
    case FailurePolicy::kLocal: {
      LeaseCall local = call;
      local.args.limit = std::max<int64_t>(1, call.args.limit / std::max<int64_t>(1, call.servers));
      LeaseResult result = local_.LeaseNow(local);
      result.source = DecisionSource::kLocalFallback;
      return result;
    }
    case FailurePolicy::kClosed: {
      LeaseResult result;
      result.reply.now_ms = NowMs(call);
      // Until the breaker probes again (at least a second), as for checks.
      result.reply.expires_at_ms =
          result.reply.now_ms + std::max(breaker_.RetryIn(), std::chrono::milliseconds(1000)).count();
      result.source = DecisionSource::kFailClosed;
      return result;
    }
    case FailurePolicy::kDefault:
    case FailurePolicy::kOpen:
      break;
  }
  LeaseResult result;
  result.reply.code = 1;
  result.reply.now_ms = NowMs(call);
  result.reply.expires_at_ms = result.reply.now_ms + call.args.ttl_ms;
  result.source = DecisionSource::kFailOpen;
  return result;
}

void PolicyStore::Lease(LeaseCall call, LeaseCallback done) {
  if (call.local) {
    done(local_.LeaseNow(call));
    return;
  }
  const bool acquire = call.args.op == LeaseOp::kAcquire;
  if (!breaker_.Allow()) {
    if (acquire) {
      done(LeaseFallback(call));
    } else {
      done(UnavailableError("the store is unavailable (circuit breaker open); retry in " +
                            std::to_string(breaker_.RetryIn().count()) + " ms"));
    }
    return;
  }
  std::optional<LeaseCall> fallback;
  if (acquire) fallback = call;
  inner_->Lease(std::move(call), [this, fallback = std::move(fallback),
                                  done = std::move(done)](StatusOr<LeaseResult> result) {
    if (result.ok()) {
      breaker_.OnSuccess();
    } else if (IsStoreFailure(result.status())) {
      breaker_.OnFailure();
      if (fallback) {
        done(LeaseFallback(*fallback));
        return;
      }
    }
    done(std::move(result));
  });
}

}  // namespace sluice::internal

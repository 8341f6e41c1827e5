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
                         BreakerOptions breaker)
    : inner_(std::move(inner)), local_(std::move(local_clock)), breaker_(breaker) {}

StatusOr<Decision> PolicyStore::Fallback(const CheckCall& call) {
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
  inner_->Check(std::move(call), [this, fallback = std::move(fallback),
                                   done = std::move(done)](StatusOr<Decision> result) {
    if (result.ok()) {
      breaker_.OnSuccess();
      done(std::move(result));
    } else if (IsStoreFailure(result.status())) {
      breaker_.OnFailure();
      done(Fallback(fallback));
    } else {
      done(std::move(result));
    }
  });
}

}  // namespace sluice::internal

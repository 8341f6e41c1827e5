#include "sluice/decision.h"

#include <string>

namespace sluice {

std::string_view DecisionSourceName(DecisionSource source) {
  switch (source) {
    case DecisionSource::kStore: return "store";
    case DecisionSource::kLocalFallback: return "local_fallback";
    case DecisionSource::kFailOpen: return "fail_open";
    case DecisionSource::kFailClosed: return "fail_closed";
    case DecisionSource::kCachedDenial: return "cached_denial";
    case DecisionSource::kLocalBudget: return "local_budget";
    case DecisionSource::kLocalSync: return "local_sync";
  }
  return "unknown";
}

std::string_view StoreFailureName(StoreFailure failure) {
  switch (failure) {
    case StoreFailure::kNone: return "none";
    case StoreFailure::kDeadline: return "deadline";
    case StoreFailure::kError: return "store_error";
    case StoreFailure::kBreakerOpen: return "breaker_open";
    case StoreFailure::kEvicting: return "evicting";
  }
  return "unknown";
}

std::string_view RefusalReasonName(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kNone: return "none";
    case RefusalReason::kOverLimit: return "over_limit";
    case RefusalReason::kCostExceedsLimit: return "cost_exceeds_limit";
    case RefusalReason::kStoreUnavailable: return "store_unavailable";
    case RefusalReason::kTooManyWaiters: return "too_many_waiters";
  }
  return "unknown";
}

std::string Decision::ToString() const {
  std::string out = allowed ? "allowed" : "refused";
  if (!allowed) {
    out += " reason=";
    out += RefusalReasonName(reason);
  }
  out += " limit=" + std::to_string(limit);
  out += " remaining=" + std::to_string(remaining);
  if (debt > 0) out += " debt=" + std::to_string(debt);
  if (blocked) out += " blocked";
  out += " reset_after=" + std::to_string(reset_after.count()) + "ms";
  out += " retry_after=" + std::to_string(retry_after.count()) + "ms";
  out += " source=";
  out += DecisionSourceName(source);
  if (shadow_refused) {
    out += " shadow_refused reason=";
    out += RefusalReasonName(reason);
  }
  return out;
}

std::string_view FailurePolicyName(FailurePolicy policy) {
  switch (policy) {
    case FailurePolicy::kDefault: return "default";
    case FailurePolicy::kOpen: return "open";
    case FailurePolicy::kClosed: return "closed";
    case FailurePolicy::kLocal: return "local";
  }
  return "unknown";
}

StatusOr<FailurePolicy> ParseFailurePolicy(std::string_view name) {
  for (FailurePolicy p : {FailurePolicy::kDefault, FailurePolicy::kOpen, FailurePolicy::kClosed,
                          FailurePolicy::kLocal}) {
    if (name == FailurePolicyName(p)) return p;
  }
  return InvalidArgumentError("failure policy must be open, closed, local or default, got \"" +
                              std::string(name) + "\"");
}

}  // namespace sluice

// sluice/decision.h — what a check answers.
//
// A refusal is a Decision with allowed == false, never an error. Durations are exact
// milliseconds; round retry_after up when showing it in seconds (RetryAfterSeconds()).
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

// Where a decision came from.
enum class DecisionSource {
  kStore,          // the shared store (Redis, or the embedded memory store) decided
  kLocalFallback,  // the store could not answer; a local limiter decided
  kFailOpen,       // the store could not answer; the limit's policy admitted
  kFailClosed,     // the store could not answer; the limit's policy refused
  kCachedDenial,   // an earlier refusal of this id was still in force; no store call
  kLocalBudget,    // a slice of the id's budget this process took earlier; no store call
                   // (LimiterOptions::local_budget)
  kLocalSync,      // counted here, pushed to the store at the next sync; approximate
                   // (LimiterOptions::sync)
};

std::string_view DecisionSourceName(DecisionSource source);

// Why a request was refused (kNone when admitted).
enum class RefusalReason {
  kNone,
  kOverLimit,         // the budget of the current window/bucket is spent
  kCostExceedsLimit,  // the request's cost is larger than the limit: it can never pass
  kStoreUnavailable,  // the store could not answer and the limit's policy is `closed`
  kTooManyWaiters,    // a waiting acquire found the id's queue full (max_waiters)
};

std::string_view RefusalReasonName(RefusalReason reason);

// Why the store did not decide, when a failure policy did (source kFailOpen, kFailClosed
// or kLocalFallback): what a service tells its callers and an operator looks for first.
enum class StoreFailure {
  kNone,         // the store decided (or no store was asked: a cache, a local budget)
  kDeadline,     // the call's deadline passed, before it was sent or with no answer yet
  kError,        // the store failed the call: connection down or lost, an error reply
  kBreakerOpen,  // the breaker is open after earlier failures: the store was not called
  kEvicting,     // Redis may evict keys (its maxmemory-policy) and the limit refuses to count
                 // there (LimiterOptions::refuse_evicting): the store was not called
};

// "none", "deadline", "store_error", "breaker_open", "evicting".
std::string_view StoreFailureName(StoreFailure failure);

struct Decision {
  bool allowed = false;
  // The limit in force for this decision.
  int64_t limit = 0;
  // What is left after this decision (never negative).
  int64_t remaining = 0;
  // Until the state is back to full (for a fixed window: until the window ends).
  std::chrono::milliseconds reset_after{0};
  // Until this same request could pass; 0 when allowed. For kCostExceedsLimit it is the
  // reset_after of the state, but the request will never pass: check `reason`.
  std::chrono::milliseconds retry_after{0};
  DecisionSource source = DecisionSource::kStore;
  RefusalReason reason = RefusalReason::kNone;
  // With a failure policy's source: why the store did not decide. kNone otherwise.
  StoreFailure store_failure = StoreFailure::kNone;
  // Limiter::Debit only: how far below zero the id's budget is after the charge (0 when
  // the charge fitted). Bounded: never more than the limit (one window's worth below
  // zero), so a huge debit cannot lock an id out for ever (docs/algorithms.md, "Debt").
  int64_t debt = 0;
  // The id is blocked (LimiterOptions::block_for): refused whatever the cost until
  // retry_after, the block's remaining time; this refusal may be the one that started it
  // (reason kOverLimit either way).
  bool blocked = false;
  // Shadow mode (LimiterOptions::shadow): the limit would have refused this request;
  // `allowed` is true anyway and `reason` says why it would have been refused.
  bool shadow_refused = false;

  // retry_after rounded up to whole seconds, as HTTP's Retry-After wants it.
  int64_t RetryAfterSeconds() const { return (retry_after.count() + 999) / 1000; }
  // "allowed limit=100 remaining=4 reset_after=1200ms source=store"
  std::string ToString() const;
};

// What a check answers when the store cannot: a deadline passed, the connection is
// down, too many calls are in flight, or the circuit breaker is open. Refunds and resets
// are not decisions: they return the store's error instead.
enum class FailurePolicy {
  kDefault,  // ClientOptions::on_failure
  kOpen,     // admit; Decision::source is kFailOpen
  kClosed,   // refuse; source kFailClosed, reason kStoreUnavailable (a service answers
             // 503 with Retry-After, never 429: nobody went over a limit)
  kLocal,    // decide on this process's embedded store with the limit (and the refill
             // rate) divided by the number of servers sharing it; source kLocalFallback
};

std::string_view FailurePolicyName(FailurePolicy policy);
// The policy named "open", "closed", "local" or "default" (FailurePolicyName's names);
// InvalidArgument naming the accepted names otherwise.
StatusOr<FailurePolicy> ParseFailurePolicy(std::string_view name);

// The callback of the asynchronous calls (Limiter::CheckAsync).
using DecisionCallback = std::function<void(StatusOr<Decision>)>;

}  // namespace sluice

#include "algo/fixed_window.h"

#include <algorithm>
#include <chrono>

namespace sluice::internal {

FixedWindowOutcome FixedWindowStep(std::optional<FixedWindowState>& state,
                                   const FixedWindowArgs& args, int64_t now_ms) {
  int64_t count = state ? state->count : 0;
  int64_t ends = state ? state->ends_ms : 0;
  if (!state || now_ms >= ends) {
    count = 0;
    // Lua's % is floored modulo: for negative model times it still lands on a multiple.
    int64_t offset = ((now_ms % args.window_ms) + args.window_ms) % args.window_ms;
    ends = args.aligned ? now_ms - offset + args.window_ms : now_ms + args.window_ms;
  }
  const int64_t ttl = ends - now_ms;
  if (args.cost > args.limit) return {2, count, ttl};
  if (count + args.cost > args.limit) return {0, count, ttl};
  count += args.cost;
  state = FixedWindowState{count, ends};
  return {1, count, ttl};
}

Decision FixedWindowDecision(const FixedWindowOutcome& outcome, int64_t limit) {
  Decision d;
  d.allowed = outcome.code == 1;
  d.limit = limit;
  d.remaining = std::max<int64_t>(0, limit - outcome.count);
  d.reset_after = std::chrono::milliseconds(outcome.ttl_ms);
  d.retry_after = d.allowed ? std::chrono::milliseconds(0) : d.reset_after;
  d.reason = outcome.code == 1   ? RefusalReason::kNone
             : outcome.code == 2 ? RefusalReason::kCostExceedsLimit
                                 : RefusalReason::kOverLimit;
  d.source = DecisionSource::kStore;
  return d;
}

}  // namespace sluice::internal

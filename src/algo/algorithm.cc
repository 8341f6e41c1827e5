#include "algo/algorithm.h"

#include <algorithm>
#include <chrono>

namespace sluice::internal {

Decision MakeDecision(const AlgoReply& reply, int64_t limit, Op op) {
  Decision d;
  d.allowed = reply.code == 1;
  d.limit = limit;
  d.remaining = reply.remaining < 0 ? 0 : reply.remaining;
  // A debit's debt, reported up to its bound (a lowered limit may leave more counted).
  if (op == Op::kDebit && reply.remaining < 0) d.debt = std::min(-reply.remaining, limit);
  d.reset_after = std::chrono::milliseconds(reply.reset_after_ms);
  d.retry_after = d.allowed && op != Op::kSync && op != Op::kTake
                      ? std::chrono::milliseconds(0)
                      : std::chrono::milliseconds(reply.retry_after_ms);
  d.blocked = reply.code == 3;
  d.reason = reply.code == 1   ? RefusalReason::kNone
             : reply.code == 2 ? RefusalReason::kCostExceedsLimit
                               : RefusalReason::kOverLimit;
  d.source = DecisionSource::kStore;
  return d;
}

}  // namespace sluice::internal

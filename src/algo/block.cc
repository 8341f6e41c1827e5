#include "algo/block.h"

#include <algorithm>

namespace sluice::internal {

AlgoReply BlockBefore(std::optional<BlockState>& block, const AlgoArgs& a, int64_t now,
                      int64_t& expires_at_ms) {
  if (block) expires_at_ms = block->ends_ms;
  if (a.op == Op::kReset) {
    block.reset();
    return {kNotBlocked, 0, 0, 0};
  }
  if (a.op != Op::kConsume && a.op != Op::kPeek && a.op != Op::kTake) {
    return {kNotBlocked, 0, 0, 0};
  }
  if (block && block->ends_ms > now) {
    const int64_t left = block->ends_ms - now;
    return {3, 0, left, left};
  }
  block.reset();  // over: deleted by the call that reads it
  return {kNotBlocked, 0, 0, 0};
}

AlgoReply StartBlock(std::optional<BlockState>& block, int64_t block_ms, int64_t now,
                     const AlgoReply& refused, int64_t& expires_at_ms) {
  block = BlockState{now + block_ms};
  expires_at_ms = block->ends_ms;
  return {3, 0, std::max(refused.reset_after_ms, block_ms),
          std::max(refused.retry_after_ms, block_ms)};
}

AlgoReply BlockAfter(std::optional<BlockState>& block, const AlgoArgs& a, int64_t now,
                     const AlgoReply& decided, int64_t& expires_at_ms) {
  if (decided.code != 0 || a.block_ms <= 0 || (a.op != Op::kConsume && a.op != Op::kTake)) {
    if (block) expires_at_ms = block->ends_ms;
    return decided;
  }
  return StartBlock(block, a.block_ms, now, decided, expires_at_ms);
}

}  // namespace sluice::internal

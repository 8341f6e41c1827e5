// Block (LimiterOptions::block_for): the in-memory twin of src/algo/block.lua, the gate
// every rate algorithm runs under when a call names a block or resets. Same inputs and
// replies as the script: a model clock exactly, Redis's clock with the same codes.
#pragma once

#include <cstdint>
#include <optional>

#include "algo/algorithm.h"

namespace sluice::internal {

// The stored block of one id's key (`<key>.blk`): its end on the deciding clock.
struct BlockState {
  int64_t ends_ms = 0;
};

// The reply BlockBefore gives when the algorithm is to decide (no block holds).
inline constexpr int kNotBlocked = -1;

// Whether a call runs under the gate: it names a block, or it is a reset (which clears
// one whatever the call names).
inline bool BlockGated(const AlgoArgs& args) {
  return args.block_ms > 0 || args.op == Op::kReset;
}

// The gate before the algorithm: for consume, peek and take, the refusal while a block
// holds ({3, 0, left, left}); a reset deletes the block. Otherwise code kNotBlocked: the
// algorithm decides. `block` is the stored block (nullopt: none) and is updated in place;
// `expires_at_ms` is set to when it expires.
AlgoReply BlockBefore(std::optional<BlockState>& block, const AlgoArgs& args, int64_t now_ms,
                      int64_t& expires_at_ms);

// The gate after the algorithm's reply `decided` (of a call BlockBefore let through): a
// consume or take refused over the limit (code 0) starts a block of args.block_ms and is
// answered {3, 0, max(reset_after, block), max(retry_after, block)}; any other reply is
// returned as it is.
AlgoReply BlockAfter(std::optional<BlockState>& block, const AlgoArgs& args, int64_t now_ms,
                     const AlgoReply& decided, int64_t& expires_at_ms);

// Starts a block of `block_ms` from `now_ms` over the refusal `refused` (code 0): the
// composite's, for a limit whose peek refused.
AlgoReply StartBlock(std::optional<BlockState>& block, int64_t block_ms, int64_t now_ms,
                     const AlgoReply& refused, int64_t& expires_at_ms);

}  // namespace sluice::internal

// What every algorithm shares: the operation, the arguments every script and twin take,
// the reply every script returns, and the Decision built from it.
//
// Script calling convention (every src/algo/<name>.lua):
//   KEYS[1]  the id's key: `<prefix>:{<limiter>:<id>}`; an algorithm that needs more
//            than one key derives them from KEYS[1] + a suffix (same hash tag, same slot)
//   ARGV[1]  op: "0" consume, "1" peek, "2" refund, "3" reset, "4" sync (fixed_window
//            only), "5" take, "6" give back (sliding_window only), "7" debit
//            (Op below)
//   ARGV[2]  model clock ms, or "" to read Redis TIME (the default; models are tests);
//            the batch driver (src/algo/batch.lua) passes a Lua number there instead:
//            Redis TIME it read once for the batch (no model-clock grace)
//   ARGV[3]  cost (consume, peek) or amount (refund); integer >= 1
//   ARGV[4]  limit    (Limit::limit)
//   ARGV[5]  window   (Limit::window in ms)
//   ARGV[6]  refill   (Limit::refill; 0 means `limit`); sync: the window end its units
//            were counted in (0: none known); give back: the end of the window the
//            units were counted in
//   ARGV[7]  aligned  ("1" or "0")
//   ARGV[8]  block ms ("0": none): the id stays refused that long once refused over the
//            limit; read by the gate src/algo/block.lua puts in front of the algorithm
//            (the algorithm itself never reads it)
//   returns  {code, remaining, reset_after_ms, retry_after_ms}
//            code 1: admitted (consume), would be admitted (peek), done (refund, reset);
//            code 0: refused, over the limit; code 2: refused, cost > limit (never passes);
//            sync, and take when admitted: {1, remaining, reset_after_ms, window end ms}
//            (the Decision carries the end in retry_after);
//            debit: {code, remaining, reset_after_ms, retry_after_ms} of a peek of one
//            unit after the charge, remaining negative when the id is in debt
//            (>= -limit: the debt bound)
//            code 3 (the gate, src/algo/block.lua): refused by a block, whatever the
//            cost, for retry_after_ms: {3, 0, left_ms, left_ms}, or the refusal that
//            starts one, {3, 0, max(reset_after, block), max(retry_after, block)}
// Each twin is a function with the same inputs and outputs on an explicit state, and the
// differential tests hold script and twin to identical replies.
#pragma once

#include <cstdint>

#include "sluice/decision.h"
#include "sluice/limits.h"

namespace sluice::internal {

enum class Op : int {
  kConsume = 0,  // spend `cost` if all of it fits
  kPeek = 1,     // report whether `cost` would fit, spend nothing
  kRefund = 2,   // give back `cost`, never above the limit
  kReset = 3,    // forget the id: its state is full again
  // fixed_window only (LimiterOptions::sync): add `cost` (>= 0) units this process
  // admitted in the window ending at `refill` (0: none known) when that window is live,
  // never refusing, never above the limit; open a window when none is live; report the
  // window (fixed_window.lua's header).
  kSync = 4,
  // sliding_window only (LimiterOptions::local_budget): a consume whose admitted reply
  // carries the current window's end (ms on the store's clock) in retry_after.
  kTake = 5,
  // sliding_window only: take `cost` units back from the count of the window ending at
  // `refill` (ms on the store's clock) alone, the current or the previous one, never
  // below 0; nothing when that window is neither (sliding_window.lua's header).
  kGiveBack = 6,
  // Work already done: charge `cost` whether it fits or not, into a debt of at most
  // `limit` (the budget never goes below -limit, a bucket never misses more than twice
  // its capacity: what would go further is dropped), and
  // reply as a peek of one unit after the charge. The id is then refused until its
  // algorithm's own recovery covers the debt (docs/algorithms.md, "Debt").
  kDebit = 7,
};

struct AlgoArgs {
  Op op = Op::kConsume;
  int64_t cost = 1;
  int64_t limit = 0;
  int64_t window_ms = 0;
  int64_t refill = 0;  // as given; the algorithm treats 0 as `limit`
  bool aligned = false;
  int64_t block_ms = 0;  // the block (LimiterOptions::block_for); 0: none
};

struct AlgoReply {
  int code = 0;
  int64_t remaining = 0;
  int64_t reset_after_ms = 0;
  int64_t retry_after_ms = 0;

  bool operator==(const AlgoReply&) const = default;
};

inline AlgoArgs ArgsFor(Op op, int64_t cost, const Limit& limit, int64_t block_ms = 0) {
  return AlgoArgs{op,           cost,          limit.limit, limit.window.count(),
                  limit.refill, limit.aligned, block_ms};
}

// The Decision both stores return for a reply (of a call of `op`: a sync's carries its
// window end in retry_after).
Decision MakeDecision(const AlgoReply& reply, int64_t limit, Op op = Op::kConsume);

}  // namespace sluice::internal

#include "algo/reservation.h"

#include <algorithm>

namespace sluice::internal {

ReservationReply ReservationStep(std::optional<ReservationState>& held, const AlgoArgs& args,
                                 Algorithm algorithm, int64_t now_ms, const CounterStep& run) {
  const bool sliding_window = algorithm == Algorithm::kSlidingWindow;
  const auto with = [&args](Op op, int64_t cost) {
    AlgoArgs a = args;
    a.op = op;
    a.cost = cost;
    return a;
  };
  if (args.op == Op::kReserve) {
    const AlgoReply r = run(with(sliding_window ? Op::kTake : Op::kConsume, args.cost));
    if (r.code != 1) return {r, SettleCode::kReserve, 0};
    const int64_t ttl = std::max<int64_t>(r.reset_after_ms, 1);
    held = ReservationState{.settled = false,
                            .estimate = args.cost,
                            .window_end = sliding_window ? r.retry_after_ms : 0,
                            .actual = 0,
                            .expires_at_ms = now_ms + ttl};
    return {{1, r.remaining, r.reset_after_ms, 0}, SettleCode::kReserve, 0};
  }
  if (held && held->expires_at_ms <= now_ms) held.reset();
  const auto peek = [&] { return run(with(Op::kPeek, 1)); };
  if (!held) return {peek(), SettleCode::kNotHeld, 0};
  if (held->settled) return {peek(), SettleCode::kAlreadySettled, held->actual};
  const int64_t actual = args.cost;
  AlgoReply r;
  if (actual > held->estimate) {
    r = run(with(Op::kDebit, actual - held->estimate));
  } else {
    if (actual < held->estimate) {
      AlgoArgs back = with(sliding_window ? Op::kGiveBack : Op::kRefund, held->estimate - actual);
      if (sliding_window) back.refill = held->window_end;
      run(back);
    }
    r = peek();
  }
  held->settled = true;
  held->actual = actual;
  return {r, SettleCode::kSettled, actual};
}

Decision MakeReservationDecision(const ReservationReply& reply, int64_t limit, Op op) {
  if (op == Op::kReserve) return MakeDecision(reply.reply, limit, Op::kConsume);
  Decision d = MakeDecision(reply.reply, limit, Op::kDebit);
  switch (reply.code) {
    case SettleCode::kSettled: d.settle = SettleOutcome::kSettled; break;
    case SettleCode::kAlreadySettled: d.settle = SettleOutcome::kAlreadySettled; break;
    case SettleCode::kReserve:
    case SettleCode::kNotHeld: d.settle = SettleOutcome::kNotHeld; break;
  }
  d.settled_cost = reply.actual;
  return d;
}

}  // namespace sluice::internal

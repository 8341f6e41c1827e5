#include "algo/fixed_window.h"

#include <algorithm>

#include "core/numbers.h"

namespace sluice::internal {

AlgoReply FixedWindowStep(std::optional<FixedWindowState>& state, const AlgoArgs& a, int64_t now,
                          int64_t& expires_at_ms) {
  // The end of a window opened now. Lua's % is floored modulo: for negative model times
  // it still lands on a multiple.
  const int64_t offset = ((now % a.window_ms) + a.window_ms) % a.window_ms;
  const int64_t latest = a.aligned ? now - offset + a.window_ms : now + a.window_ms;
  const bool live = state && now < state->ends_ms;
  if (!live) state.reset();  // stale state is deleted by the call that reads it
  if (a.op == Op::kReset) {
    state.reset();
    return {1, a.limit, 0, 0};
  }
  if (a.op == Op::kSync) {
    // Units admitted elsewhere in the window ending at `refill` (0: none known).
    const int64_t expected = a.refill;
    if (!live) {
      const int64_t n = expected == 0 ? std::min(a.cost, a.limit) : 0;
      state = FixedWindowState{n, latest};
      expires_at_ms = latest;
      return {1, a.limit - n, latest - now, latest};
    }
    const int64_t stored = state->ends_ms;
    if (state->ends_ms > latest) state->ends_ms = latest;
    if (a.cost > 0 && state->count < a.limit &&
        (expected == 0 || expected == stored || expected == state->ends_ms)) {
      state->count = std::min(a.limit, state->count + a.cost);
    }
    expires_at_ms = state->ends_ms;
    return {1, std::max<int64_t>(0, a.limit - state->count), state->ends_ms - now, state->ends_ms};
  }
  if (a.op == Op::kDebit) {
    // Charged whether it fits or not, the count never above twice the limit.
    if (!live) state = FixedWindowState{0, latest};
    if (state->ends_ms > latest) state->ends_ms = latest;
    const int64_t add = std::min(a.cost, 2 * a.limit - state->count);
    if (add > 0) state->count += add;
    expires_at_ms = state->ends_ms;
    const int64_t ttl = state->ends_ms - now;
    const int64_t left = std::max(a.limit - state->count, -a.limit);
    if (left > 0) return {1, left, ttl, 0};
    return {0, left, ttl, ttl};
  }
  if (!live) {
    if (a.cost > a.limit && a.op != Op::kRefund) return {2, a.limit, 0, 0};
    if (a.op != Op::kConsume) return {1, a.limit, 0, 0};
    state = FixedWindowState{a.cost, latest};
    expires_at_ms = latest;
    return {1, a.limit - a.cost, latest - now, 0};
  }
  // A window never ends later than one opened now would (a shortened window applies at
  // once); the moved end is written back whatever the call decides.
  if (state->ends_ms > latest) state->ends_ms = latest;
  const int64_t ttl = state->ends_ms - now;
  expires_at_ms = state->ends_ms;
  if (a.op == Op::kRefund) {
    state->count -= a.cost;
    if (state->count <= 0) {
      state.reset();
      return {1, a.limit, 0, 0};
    }
    return {1, a.limit - state->count, ttl, 0};
  }
  int code = 1;
  if (a.cost > a.limit) {
    code = 2;
  } else if (state->count + a.cost > a.limit) {
    code = 0;
  }
  if (code == 1 && a.op == Op::kConsume) {
    state->count += a.cost;
    return {1, a.limit - state->count, ttl, 0};
  }
  if (code == 1) return {1, a.limit - state->count, ttl, 0};
  return {code, a.limit - state->count, ttl, ttl};
}

std::optional<FixedWindowState> DecodeFixedWindowValue(std::string_view value) {
  const auto sep = value.find(':');
  if (sep == std::string_view::npos) return std::nullopt;
  const auto count = ParseDecimal(value.substr(0, sep));
  const auto ends = ParseDecimal(value.substr(sep + 1));
  if (!count || !ends) return std::nullopt;
  return FixedWindowState{*count, *ends};
}

std::optional<int64_t> DecodeFixedWindowCount(std::string_view value) {
  return ParseDecimal(value);
}

}  // namespace sluice::internal

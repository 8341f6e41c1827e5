#include "algo/sliding_window.h"

#include "core/numbers.h"

#include <algorithm>
#include <limits>

namespace sluice::internal {

namespace {

// Exact products of counts (<= 2^40) and windows (<= 2^35 ms); the script gets the same
// results from its digit-by-digit muldiv.
__extension__ using Wide = __int128;

struct QuotientRemainder {
  int64_t q;
  int64_t r;
};

// floor(x * y / z) and the remainder, for x, y >= 0 and z > 0.
QuotientRemainder MulDiv(int64_t x, int64_t y, int64_t z) {
  const Wide prod = static_cast<Wide>(x) * y;
  return {static_cast<int64_t>(prod / z), static_cast<int64_t>(prod % z)};
}

int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The script's zero_at: the first ms at which the estimate of (s, c, p) is 0 for good.
int64_t ZeroAt(int64_t s, int64_t c, int64_t p, int64_t w) {
  if (c > 0) return s + w + w + 1 - CeilDiv(w, c);
  if (p > 0) return s + w + 1 - CeilDiv(w, p);
  return std::numeric_limits<int64_t>::min();
}

// Lua's % is floored: model clocks may stand before the epoch.
int64_t FloorMod(int64_t a, int64_t b) {
  return ((a % b) + b) % b;
}

}  // namespace

int64_t SlidingWindowZeroAt(const SlidingWindowState& state, int64_t window_ms) {
  return ZeroAt(state.start_ms, state.current, state.previous, window_ms);
}

int64_t SlidingWindowUsed(const SlidingWindowState& state, int64_t w, int64_t now) {
  if (state.window_ms != 0) w = state.window_ms;
  if (now >= SlidingWindowZeroAt(state, w) || state.start_ms - now > w) return 0;
  int64_t c = state.current, p = state.previous;
  int64_t e = now - state.start_ms;
  if (e >= w) {
    p = c;
    c = 0;
    e -= w;
  } else if (e < 0) {
    e = 0;
  }
  return c + (p > 0 ? MulDiv(p, w - e, w).q : 0);
}

// long: the in-memory twin of sliding_window.lua; it follows the script's control flow line by
// line so that the two read side by side, and a split would break that.
AlgoReply SlidingWindowStep(std::optional<SlidingWindowState>& state, const AlgoArgs& args,
                            int64_t now, int64_t& expires_at_ms) {
  // A take is decided as a consume; admitted, it reports the window's end.
  const bool take = args.op == Op::kTake;
  AlgoArgs a = args;
  if (take) a.op = Op::kConsume;
  const int64_t w = a.window_ms;
  if (a.op == Op::kReset) {
    state.reset();
    return {1, a.limit, 0, 0};
  }
  int64_t zero = 0;
  if (state) {
    const int64_t sw = state->window_ms != 0 ? state->window_ms : w;
    // Pruned by the call that reads it: 0 for good, or a window that starts more than a
    // window after now (the clock stepped back that far).
    bool ok = state->current >= 0 && state->previous >= 0 && sw >= 1 && sw <= kMaxWindow.count() &&
              state->start_ms - now <= sw;
    if (ok) zero = SlidingWindowZeroAt(*state, sw);
    if (ok && now < zero && sw != w) {
      // Counted in another window: its estimate now becomes the current count.
      const int64_t c = SlidingWindowUsed(*state, sw, now);
      state = SlidingWindowState{now - FloorMod(now, w), c, 0, w};
      zero = SlidingWindowZeroAt(*state, w);  // the converted state is what is kept
    }
    if (!ok || now >= zero) state.reset();
  }
  if (!state && a.op == Op::kDebit) {
    state = SlidingWindowState{now - FloorMod(now, w), 0, 0, w};  // written below
  }
  if (!state) {
    if (a.cost > a.limit && a.op != Op::kRefund && a.op != Op::kGiveBack) {
      return {2, a.limit, 0, 0};
    }
    if (a.op != Op::kConsume) return {1, a.limit, 0, 0};
    state = SlidingWindowState{now - FloorMod(now, w), a.cost, 0, w};
    zero = SlidingWindowZeroAt(*state, w);
    expires_at_ms = zero;
    return {1, a.limit - a.cost, zero - now, take ? state->start_ms + w : 0};
  }

  // Live state; rolled into the next window only in this copy, as the script does.
  int64_t s = state->start_ms, c = state->current, p = state->previous;
  int64_t e = now - s;
  if (e >= w) {
    s += w;
    p = c;
    c = 0;
    e -= w;
  } else if (e < 0) {
    e = 0;
  }
  int64_t used = c;
  if (p > 0) used += MulDiv(p, w - e, w).q;

  if (a.op == Op::kDebit) {
    // Charged whether it fits or not, `used` never above twice the limit; then answered
    // as a peek of one unit.
    const int64_t add = std::min(a.cost, 2 * a.limit - used);
    if (add > 0) {
      c += add;
      used += add;
      zero = ZeroAt(s, c, p, w);
      state = SlidingWindowState{s, c, p, w};
    }
    a.op = Op::kPeek;
    a.cost = 1;
  }
  if (a.op == Op::kRefund || a.op == Op::kGiveBack) {
    if (a.op == Op::kGiveBack) {
      // Only from the named window's own count (`refill`: its end), never below 0.
      if (a.refill == s + w) {
        c = std::max<int64_t>(0, c - a.cost);
      } else if (a.refill == s) {
        p = std::max<int64_t>(0, p - a.cost);
      }
    } else if (a.cost <= c) {
      c -= a.cost;
    } else {
      p -= a.cost - c;
      c = 0;
      if (p < 0) p = 0;
    }
    zero = ZeroAt(s, c, p, w);
    if (now >= zero) {
      state.reset();
      return {1, a.limit, 0, 0};
    }
    state = SlidingWindowState{s, c, p, w};
    expires_at_ms = zero;
    used = c;
    if (p > 0) used += MulDiv(p, w - e, w).q;
    return {1, a.limit - used, zero - now, 0};
  }

  int code = 1;
  if (a.cost > a.limit) {
    code = 2;
  } else if (used + a.cost > a.limit) {
    code = 0;
  }
  if (code == 1 && a.op == Op::kConsume) {
    c += a.cost;
    zero = ZeroAt(s, c, p, w);
    state = SlidingWindowState{s, c, p, w};
    expires_at_ms = zero;
    return {1, a.limit - used - a.cost, zero - now, take ? s + w : 0};
  }
  expires_at_ms = zero;  // the stored state stays as it is (or as converted)
  if (code == 1) return {1, a.limit - used, zero - now, 0};
  if (code == 2) return {2, a.limit - used, zero - now, zero - now};
  QuotientRemainder qr;
  if (c + a.cost <= a.limit) {
    qr = MulDiv(a.limit - c - a.cost + 1, w, p);
  } else {
    qr = MulDiv(a.limit - a.cost + 1, w, c);
    s += w;
  }
  if (qr.r == 0) --qr.q;
  return {0, a.limit - used, zero - now, s + w - qr.q - now};
}

std::optional<SlidingWindowState> DecodeSlidingWindowValue(std::string_view value) {
  if (value.size() != 26 && value.size() != 20) return std::nullopt;
  SlidingWindowState state;
  state.start_ms = LittleEndianSigned(value, 0, 8);
  state.current = LittleEndianSigned(value, 8, 6);
  state.previous = LittleEndianSigned(value, 14, 6);
  state.window_ms = value.size() == 26 ? LittleEndianSigned(value, 20, 6) : 0;
  return state;
}

}  // namespace sluice::internal

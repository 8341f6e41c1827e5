#include "algo/gcra.h"

#include <algorithm>

#include "core/numbers.h"

#include "algo/token_bucket.h"

namespace sluice::internal {

// long: the in-memory twin of gcra.lua; it follows the script's control flow line by
// line so that the two read side by side, and a split would break that.
AlgoReply GcraStep(std::optional<GcraState>& state, const AlgoArgs& a, int64_t now,
                   int64_t& expires_at_ms) {
  const int64_t window = a.window_ms;
  const int64_t rate = BucketRate(a);
  const int64_t cap = BucketCapacity(a.limit, window, rate);
  const int64_t cost = a.cost;
  const int64_t h = kBucketHorizonMs;

  // The deficit: xm ms + xf/vr ms until the bucket is full, as written under refill vr
  // and window vw.
  bool live = false;
  bool debt = false;  // the stored TAT may miss more than the capacity: a debit's debt
  int64_t xm = 0, xf = 0, stored_ttl = 0;
  int64_t vr = rate, vw = window;
  const bool had_state = state.has_value();
  if (state) {
    const int64_t m = state->tat_ms;
    int64_t f = state->tat_fraction;
    if (state->rate != 0 || state->window_ms != 0) {
      vr = state->rate;
      vw = state->window_ms;
      if (f < 0) {  // the mark of a debt (32-byte values only)
        debt = true;
        f = -1 - f;
      }
    }
    if (f >= 0 && vr >= 1 && vr <= kMaxLimit && vw >= 1 && vw <= kMaxWindow.count() &&
        (now < m || (now == m && f > 0)) && m - now <= h) {
      xm = m - now;
      stored_ttl = f > 0 ? xm + 1 : xm;
      xf = f >= vr ? vr - 1 : f;  // a TAT in an earlier form written under another refill
      live = xm > 0 || xf > 0;
    }
  }

  // TAT = now + m ms + f/rate ms; `over`: more than the capacity missing (a debt), stored
  // with the fraction as -1 - f.
  auto write = [&](int64_t m, int64_t f, bool over = false) {
    state = GcraState{now + m, over ? -1 - f : f, rate, window};
    const int64_t ttl = f > 0 ? m + 1 : m;
    expires_at_ms = now + ttl;
    return ttl;
  };
  bool moved = false;  // set below: the stored TAT is converted or cut
  int64_t used = 0;    // whole tokens missing, set below
  auto keep = [&] {
    if (moved) {
      write(xm, xf, used > cap);
    } else {
      expires_at_ms = now + stored_ttl;
    }
  };

  if (a.op == Op::kReset) {
    state.reset();
    return {1, cap, 0, 0};
  }

  if (!live && a.op == Op::kDebit) {
    xm = xf = stored_ttl = 0;  // a full bucket's debit (written below)
    vr = rate;
    vw = window;
    live = true;
  }
  if (!live) {
    if (had_state && (a.op != Op::kConsume || cost > cap)) state.reset();
    if (cost > cap && a.op != Op::kRefund) return {2, cap, 0, 0};
    if (a.op != Op::kConsume) return {1, cap, 0, 0};
    const QuotRem n = MulDivMod(cost, window, rate);
    return {1, cap - cost, write(n.quot, n.rem), 0};
  }

  // Whole tokens missing, ceil(deficit * vr / vw) — or, past 2^52, just a number larger
  // than any limit or cost.
  {
    const QuotRem qr = MulDivMod(xm, vr, vw);
    if (qr.quot > h) {
      used = qr.quot;
    } else {
      const int64_t r = qr.rem + xf;
      const int64_t u = r / vw;
      used = qr.quot + u;
      if (u * vw < r) ++used;
    }
  }
  // Written under other parameters, or missing more than a whole bucket (two with a
  // debit's debt): the deficit becomes `used` whole tokens (at most that) at the refill
  // in force.
  const int64_t most = debt ? 2 * cap : cap;
  moved = vr != rate || vw != window || used > most;
  if (moved) {
    if (used > most) used = most;
    const QuotRem n = MulDivMod(used, window, rate);
    xm = n.quot;
    xf = n.rem;
  }
  int64_t remaining = cap - used;
  int64_t reset = xf > 0 ? xm + 1 : xm;

  if (a.op == Op::kDebit) {
    // Charged whether the tokens are there or not, never more than twice the capacity
    // missing; then answered as a peek of one token.
    const int64_t add = std::min(cost, 2 * cap - used);
    if (add > 0) {
      const QuotRem n = MulDivMod(add, window, rate);
      xm += n.quot;
      xf += n.rem;
      if (xf >= rate) {
        xf -= rate;
        ++xm;
      }
      used += add;
      reset = write(xm, xf, used > cap);
    } else {
      keep();
    }
    if (used < cap) return {1, cap - used, reset, 0};
    // Refused: retry when the deficit has shrunk to what leaves one token.
    const QuotRem t = MulDivMod(cap - 1, window, rate);
    int64_t dm = xm - t.quot, df = xf - t.rem;
    if (df < 0) {
      df += rate;
      --dm;
    }
    if (df > 0) ++dm;
    return {0, cap - used, reset, dm};
  }

  if (a.op == Op::kRefund) {
    if (cost >= used) {
      state.reset();
      return {1, cap, 0, 0};
    }
    const QuotRem n = MulDivMod(cost, window, rate);
    int64_t ym = xm - n.quot, yf = xf - n.rem;
    if (yf < 0) {
      yf += rate;
      --ym;
    }
    const int64_t ttl = write(ym, yf, used - cost > cap);
    if (used - cost < cap) remaining = cap - (used - cost);
    return {1, remaining, ttl, 0};
  }

  if (cost > cap) {
    keep();
    return {2, remaining, reset, reset};
  }
  if (cost <= remaining) {
    if (a.op == Op::kConsume) {
      const QuotRem n = MulDivMod(cost, window, rate);
      int64_t sm = xm + n.quot, sf = xf + n.rem;
      if (sf >= rate) {
        sf -= rate;
        ++sm;
      }
      return {1, remaining - cost, write(sm, sf), 0};
    }
    keep();
    return {1, remaining, reset, 0};
  }
  // Refused: retry when the deficit has shrunk to what leaves `cost` tokens.
  const QuotRem t = MulDivMod(cap - cost, window, rate);
  int64_t dm = xm - t.quot, df = xf - t.rem;
  if (df < 0) {
    df += rate;
    --dm;
  }
  if (df > 0) ++dm;
  keep();
  return {0, remaining, reset, dm};
}

std::optional<GcraState> DecodeGcraValue(std::string_view value) {
  if (auto tat = ParseDecimal(value)) return GcraState{*tat, 0, 0, 0};
  if (value.size() != 16 && value.size() != 32) return std::nullopt;
  const auto tat = ExactInteger(BigEndianDouble(value, 0));
  const auto fraction = ExactInteger(BigEndianDouble(value, 8));
  if (!tat || !fraction) return std::nullopt;
  if (value.size() == 16) return GcraState{*tat, *fraction, 0, 0};
  const auto rate = ExactInteger(BigEndianDouble(value, 16));
  const auto window = ExactInteger(BigEndianDouble(value, 24));
  if (!rate || !window) return std::nullopt;
  return GcraState{*tat, *fraction, *rate, *window};
}

}  // namespace sluice::internal

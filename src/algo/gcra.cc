#include "algo/gcra.h"

#include "algo/token_bucket.h"

namespace sluice::internal {

AlgoReply GcraStep(std::optional<GcraState>& state, const AlgoArgs& a, int64_t now,
                   int64_t& expires_at_ms) {
  const int64_t window = a.window_ms;
  const int64_t rate = BucketRate(a);
  const int64_t cap = BucketCapacity(a.limit, window, rate);
  const int64_t cost = a.cost;
  const int64_t h = kBucketHorizonMs;

  // The deficit: xm ms + xf/rate ms until the bucket is full.
  bool live = false;
  int64_t xm = 0, xf = 0, stored_ttl = 0;
  const bool had_state = state.has_value();
  if (state) {
    const int64_t m = state->tat_ms;
    const int64_t f = state->tat_fraction;
    if (f >= 0 && (now < m || (now == m && f > 0)) && m - now <= h) {
      xm = m - now;
      stored_ttl = f > 0 ? xm + 1 : xm;
      xf = f >= rate ? rate - 1 : f;  // a TAT written under another refill
      live = xm > 0 || xf > 0;
    }
  }

  // TAT = now + m ms + f/rate ms.
  auto write = [&](int64_t m, int64_t f) {
    state = GcraState{now + m, f};
    const int64_t ttl = f > 0 ? m + 1 : m;
    expires_at_ms = now + ttl;
    return ttl;
  };
  auto keep = [&] { expires_at_ms = now + stored_ttl; };

  if (a.op == Op::kReset) {
    state.reset();
    return {1, cap, 0, 0};
  }

  if (!live) {
    if (had_state && (a.op != Op::kConsume || cost > cap)) state.reset();
    if (cost > cap && a.op != Op::kRefund) return {2, cap, 0, 0};
    if (a.op != Op::kConsume) return {1, cap, 0, 0};
    const QuotRem n = MulDivMod(cost, window, rate);
    return {1, cap - cost, write(n.quot, n.rem), 0};
  }

  // Whole tokens missing, ceil(deficit * rate / window) — or, past 2^52, just a number
  // larger than any limit or cost — and what is left.
  int64_t used = xm, remaining = 0;
  {
    const QuotRem qr = MulDivMod(xm, rate, window);
    if (qr.quot > h) {
      used = qr.quot;
    } else {
      const int64_t r = qr.rem + xf;
      const int64_t u = r / window;
      used = qr.quot + u;
      if (u * window < r) ++used;
      if (used < cap) remaining = cap - used;
    }
  }
  const int64_t reset = xf > 0 ? xm + 1 : xm;

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
    const int64_t ttl = write(ym, yf);
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

}  // namespace sluice::internal

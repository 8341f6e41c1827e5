#include "algo/token_bucket.h"

#include "core/numbers.h"

#include <algorithm>
#include <limits>

namespace sluice::internal {

namespace {

__extension__ using Wide = unsigned __int128;

// ms until a deficit of k tokens + c/window token is refilled, rounded up
// (token_bucket.lua: refill_ms).
int64_t RefillMs(int64_t k, int64_t c, int64_t window, int64_t rate) {
  const QuotRem qr = MulDivMod(k, window, rate);
  const int64_t r = qr.rem + c;
  int64_t u = r / rate;
  if (u * rate < r) ++u;
  return qr.quot + u;
}

}  // namespace

QuotRem MulDivMod(int64_t a, int64_t b, int64_t d) {
  const Wide p = static_cast<Wide>(a) * static_cast<Wide>(b);
  const Wide q = p / static_cast<Wide>(d);
  const int64_t rem = static_cast<int64_t>(p % static_cast<Wide>(d));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return {q > static_cast<Wide>(kMax) ? kMax : static_cast<int64_t>(q), rem};
}

int64_t BucketCapacity(int64_t limit, int64_t window_ms, int64_t rate) {
  const QuotRem full = MulDivMod(limit, window_ms, rate);
  if (full.quot > kBucketHorizonMs || (full.quot == kBucketHorizonMs && full.rem > 0)) {
    return MulDivMod(kBucketHorizonMs, rate, window_ms).quot;
  }
  return limit;
}

// long: the in-memory twin of token_bucket.lua; it follows the script's control flow line by
// line so that the two read side by side, and a split would break that.
AlgoReply TokenBucketStep(std::optional<TokenBucketState>& state, const AlgoArgs& a, int64_t now,
                          int64_t& expires_at_ms) {
  const int64_t window = a.window_ms;
  const int64_t rate = BucketRate(a);
  const int64_t cap = BucketCapacity(a.limit, window, rate);
  const int64_t cost = a.cost;

  // The deficit now: xt tokens + xc/window token.
  bool live = false;
  bool debt = false;  // the stored deficit may be more than the capacity: a debit's debt
  int64_t xt = 0, xc = 0, stored_ttl = 0;
  const bool had_state = state.has_value();
  if (state) {
    stored_ttl = state->at_ms + state->full_in_ms - now;
    int64_t fraction = state->fraction;
    if (fraction < 0) {
      debt = true;
      fraction = -1 - fraction;
    }
    if (stored_ttl > 0 && stored_ttl <= kBucketHorizonMs && state->tokens >= 0) {
      xt = state->tokens;
      xc = fraction;
      if (xc >= window) xc = window - 1;  // written under another window
      int64_t e = now - state->at_ms;
      if (e < 0) {
        e = 0;
      } else if (e > kBucketHorizonMs) {
        e = kBucketHorizonMs;
      }
      const QuotRem drained = MulDivMod(e, rate, window);
      if (drained.quot > xt || (drained.quot == xt && drained.rem >= xc)) {
        xt = 0;
        xc = 0;
      } else {
        xt -= drained.quot;
        xc -= drained.rem;
        if (xc < 0) {
          xc += window;
          --xt;
        }
      }
      live = xt > 0 || xc > 0;
    }
  }

  // A deficit of more than the capacity (a debt) is stored with its fraction as -1 - it.
  auto write = [&](int64_t tokens, int64_t fraction, int64_t ttl) {
    const bool over = tokens > cap || (tokens == cap && fraction > 0);
    state = TokenBucketState{tokens, over ? -1 - fraction : fraction, now, ttl};
    expires_at_ms = now + ttl;
  };
  bool cut = false;  // set below: the stored deficit is more than a whole bucket
  int64_t reset = 0;
  auto keep = [&] {
    if (cut) {
      write(xt, xc, reset);
    } else {
      expires_at_ms = now + stored_ttl;
    }
  };

  if (a.op == Op::kReset) {
    state.reset();
    return {1, cap, 0, 0};
  }

  if (!live && a.op == Op::kDebit) {
    xt = xc = stored_ttl = 0;  // a debit of a full bucket (written below)
    live = true;
  }
  if (!live) {
    if (had_state && (a.op != Op::kConsume || cost > cap)) state.reset();
    if (cost > cap && a.op != Op::kRefund) return {2, cap, 0, 0};
    if (a.op != Op::kConsume) return {1, cap, 0, 0};
    const int64_t ttl = RefillMs(cost, 0, window, rate);
    write(cost, 0, ttl);
    return {1, cap - cost, ttl, 0};
  }

  reset = RefillMs(xt, xc, window, rate);
  if (reset > stored_ttl) {
    // Refill got slower since the write: the bucket is still full at the stored time.
    const QuotRem capped = MulDivMod(stored_ttl, rate, window);
    xt = capped.quot;
    xc = capped.rem;
    reset = stored_ttl;
  }
  // A bucket never misses more than its capacity: a deficit left by a larger capacity or
  // a slower refill (a plan change) is cut to an empty bucket under the limit in force,
  // and written back whatever the call decides.
  // A debit's debt may leave up to two.
  const int64_t most = debt ? 2 * cap : cap;
  cut = xt > most || (xt == most && xc > 0);
  if (cut) {
    xt = most;
    xc = 0;
    reset = RefillMs(most, 0, window, rate);
  }
  int64_t used = xc > 0 ? xt + 1 : xt;
  int64_t remaining = used < cap ? cap - used : 0;

  if (a.op == Op::kDebit) {
    // Charged whether the tokens are there or not, the deficit never above twice the
    // capacity; then answered as a peek of one token.
    const int64_t add = std::min(cost, 2 * cap - used);
    if (add > 0) {
      xt += add;
      used += add;
      reset = RefillMs(xt, xc, window, rate);
      write(xt, xc, reset);
    } else {
      keep();
    }
    if (used < cap) return {1, cap - used, reset, 0};
    return {0, cap - used, reset, RefillMs(xt + 1 - cap, xc, window, rate)};
  }

  if (a.op == Op::kRefund) {
    if (cost > xt || (cost == xt && xc == 0)) {
      state.reset();
      return {1, cap, 0, 0};
    }
    xt -= cost;
    used -= cost;
    if (used < cap) remaining = cap - used;
    const int64_t ttl = RefillMs(xt, xc, window, rate);
    write(xt, xc, ttl);
    return {1, remaining, ttl, 0};
  }

  if (cost > cap) {
    keep();
    return {2, remaining, reset, reset};
  }
  if (cost <= remaining) {
    if (a.op == Op::kConsume) {
      xt += cost;
      const int64_t ttl = RefillMs(xt, xc, window, rate);
      write(xt, xc, ttl);
      return {1, remaining - cost, ttl, 0};
    }
    keep();
    return {1, remaining, reset, 0};
  }
  // Refused: retry when the deficit has shrunk to what leaves `cost` tokens.
  keep();
  return {0, remaining, reset, RefillMs(xt + cost - cap, xc, window, rate)};
}

std::optional<TokenBucketState> DecodeTokenBucketValue(std::string_view value) {
  if (value.size() != 32) return std::nullopt;
  const auto tokens = ExactInteger(BigEndianDouble(value, 0));
  const auto fraction = ExactInteger(BigEndianDouble(value, 8));
  const auto at = ExactInteger(BigEndianDouble(value, 16));
  const auto full_in = ExactInteger(BigEndianDouble(value, 24));
  if (!tokens || !fraction || !at || !full_in) return std::nullopt;
  return TokenBucketState{*tokens, *fraction, *at, *full_in};
}

}  // namespace sluice::internal

// Token bucket: the in-memory twin of token_bucket.lua (the semantics, the stored value,
// the TTL rule and the arithmetic are documented there). It must give exactly the
// script's reply for the same state, arguments and clock; the differential tests hold it
// to that. Also the exact bucket arithmetic the gcra twin shares.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "algo/algorithm.h"

namespace sluice::internal {

// What the bucket was missing at `at_ms`: `tokens` whole tokens plus
// `fraction`/window_ms of a token (0 <= fraction < window_ms); it was full again
// `full_in_ms` later, when the state expires.
struct TokenBucketState {
  int64_t tokens = 0;
  int64_t fraction = 0;
  int64_t at_ms = 0;
  int64_t full_in_ms = 0;
};

// One call. `state` is the stored state (nullopt: no key, a full bucket) and is updated
// in place (nullopt afterwards: deleted). `expires_at_ms` is set to when the stored state
// expires: the moment the bucket is full again.
AlgoReply TokenBucketStep(std::optional<TokenBucketState>& state, const AlgoArgs& args,
                          int64_t now_ms, int64_t& expires_at_ms);

// ---------------------------------------------------------------------------------------
// Exact bucket arithmetic (token_bucket and gcra; their scripts do the same in doubles).

// The longest a bucket takes to refill, in ms: 2^52 (~142,000 years). Every time and
// every exact product in the scripts stays at or below it.
inline constexpr int64_t kBucketHorizonMs = int64_t{1} << 52;

struct QuotRem {
  int64_t quot = 0;  // saturates at INT64_MAX (the scripts' quotient is then >= 2^52)
  int64_t rem = 0;
};
// floor(a * b / d) and a * b % d for a, b >= 0 and d >= 1, computed exactly.
QuotRem MulDivMod(int64_t a, int64_t b, int64_t d);

// The refill per window: `refill`, or `limit` when it is 0.
inline int64_t BucketRate(const AlgoArgs& args) {
  return args.refill == 0 ? args.limit : args.refill;
}
// The capacity in force: `limit`, unless refilling it would take longer than
// kBucketHorizonMs; then the whole tokens that refill in that time.
int64_t BucketCapacity(int64_t limit, int64_t window_ms, int64_t rate);

// The state token_bucket.lua stores (32 bytes '>dddd': missing tokens, fraction,
// written at, full in), read back from a value (the admin API's decoder); nullopt when
// the value is not 32 bytes of whole numbers.
std::optional<TokenBucketState> DecodeTokenBucketValue(std::string_view value);

}  // namespace sluice::internal

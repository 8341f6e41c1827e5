// sluice/limits.h — limit definitions.
//
// A Limit is an argument, not state: the limit in force is sent with every call, so a
// changed Limit (a plan upgrade, a config reload) takes effect on the next check with no
// migration and without resetting what was already counted. Every field may change
// between calls, and no window end, TAT or count computed under an older value outlives
// the change:
//  - what was spent stays spent (counts and missing tokens carry over), so a raised
//    limit adds its new units at once (100/min spent, raised to 500/min: 400 more now),
//    with refill 0 too (the buckets keep missing tokens, not time);
//  - a stored window never ends later than a window opened now would (a shortened
//    window applies at once); sliding_window converts counts made in another window to
//    its estimate now; a bucket never misses more than its capacity in force (a
//    downgrade costs at most one refill of the new bucket);
//  - sliding_log counts the entries it still holds: a lengthened window cannot count
//    entries already pruned under the shorter one.
// The call that finds state written under other parameters rewrites it (even when it
// refuses or peeks; nothing is counted or given back by that). See docs/algorithms.md.
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

enum class Algorithm {
  // `limit` per `window`. The window opens at an id's first admitted request (or at
  // multiples of `window` on the clock when `aligned`); its key expires when it ends.
  kFixedWindow,
  // The previous and the current window, the previous one weighted by how much of it
  // still overlaps the trailing `window` (approximate; see docs/algorithms.md).
  kSlidingWindow,
  // Exact: at most `limit` admitted in any trailing `window` (a sorted set per id).
  kSlidingLog,
  // A bucket of `limit` tokens refilled at `refill` tokens per `window`; the key expires
  // when the bucket would be full again, so a missing key is a full bucket.
  kTokenBucket,
  // The generic cell rate algorithm: a token bucket of burst `limit` and rate `refill`
  // per `window`, stored as one value per id (the theoretical arrival time).
  kGcra,
};

// "fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra" — the names
// used in configs, the CLI's --algorithm and metrics.
std::string_view AlgorithmName(Algorithm algorithm);
// Parses a name from AlgorithmName(); InvalidArgument naming the known ones otherwise.
StatusOr<Algorithm> ParseAlgorithm(std::string_view name);

// Largest accepted `limit` and `cost`: far above any sane limit, small enough that every
// count stays exact in the scripts' double-precision arithmetic.
inline constexpr int64_t kMaxLimit = int64_t{1} << 40;
// Longest accepted window: 366 days.
inline constexpr std::chrono::milliseconds kMaxWindow{366LL * 24 * 3600 * 1000};

struct Limit {
  Algorithm algorithm = Algorithm::kFixedWindow;
  // The most one id can spend at once: requests (cost units) per window for the window
  // algorithms, the bucket's capacity for token_bucket, the burst for gcra.
  // 1 <= limit <= kMaxLimit. Default: none.
  int64_t limit = 0;
  // Window algorithms: the window's length. token_bucket and gcra: `refill` tokens come
  // back per `window`. 1 ms <= window <= kMaxWindow. Default: none.
  std::chrono::milliseconds window{0};
  // token_bucket and gcra: tokens added per `window`; 0 means `limit` (an empty bucket
  // is full again after one window). Ignored by the window algorithms.
  // 0 <= refill <= kMaxLimit. Default: 0.
  int64_t refill = 0;
  // fixed_window only: windows start at multiples of `window` on the store's clock
  // instead of at an id's first admitted request. Default: false.
  bool aligned = false;

  // A token bucket of `capacity` tokens refilled at `refill_per_second` tokens/s.
  static Limit TokenBucket(int64_t capacity, int64_t refill_per_second) {
    return {Algorithm::kTokenBucket, capacity, std::chrono::seconds(1), refill_per_second};
  }
  // GCRA admitting `rate_per_second` on average with bursts of up to `burst`.
  static Limit Gcra(int64_t rate_per_second, int64_t burst) {
    return {Algorithm::kGcra, burst, std::chrono::seconds(1), rate_per_second};
  }

  // OK, or InvalidArgument naming the field and the accepted range.
  Status Validate() const;
};

}  // namespace sluice

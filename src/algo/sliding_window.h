// Sliding window counter: the in-memory twin of sliding_window.lua (the semantics, the
// arithmetic, the TTL rule and the error bound are documented there). It must give
// exactly the script's reply for the same state, arguments and clock; the differential
// tests hold it to that.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "algo/algorithm.h"

namespace sluice::internal {

struct SlidingWindowState {
  int64_t start_ms = 0;   // start of the current window (a multiple of the window when set)
  int64_t current = 0;    // units counted in [start, start + window)
  int64_t previous = 0;   // units counted in [start - window, start)
  int64_t window_ms = 0;  // the window they were counted in; 0: the window in force
};

// One call. `state` is the stored state (nullopt: no key) and is updated in place
// (nullopt afterwards: deleted). `expires_at_ms` is set to when the stored state expires:
// the first ms at which its estimate is 0 for good (now + reset_after).
AlgoReply SlidingWindowStep(std::optional<SlidingWindowState>& state, const AlgoArgs& args,
                            int64_t now_ms, int64_t& expires_at_ms);

// The estimate of `state` at `now_ms` (floor(previous * (window - e) / window) + current),
// and the first ms at which it is 0 for good; the arithmetic Step decides with.
int64_t SlidingWindowUsed(const SlidingWindowState& state, int64_t window_ms, int64_t now_ms);
int64_t SlidingWindowZeroAt(const SlidingWindowState& state, int64_t window_ms);

// The state sliding_window.lua stores (26 bytes '<i8i6i6i6': start, current, previous,
// window; or the earlier 20 bytes without the window, window_ms 0), read back from a
// value (the admin API's decoder); nullopt when the value is neither.
std::optional<SlidingWindowState> DecodeSlidingWindowValue(std::string_view value);

}  // namespace sluice::internal

// Sliding log: the in-memory twin of sliding_log.lua. It must give exactly the script's
// reply for the same state, arguments and clock; the differential test holds it to that.
//
// Exact: at most `limit` cost units are admitted in any trailing `window`. An entry
// admitted at t counts for requests at t' with t' - t < window and leaves at t + window.
// The log keeps one entry per admitted request; each entry records `start`, the units
// admitted before it since the log was last empty, so the units in the window are
// newest.end() - oldest.start (O(1)) and a refusal's retry_after and a refund's cut are
// found by binary search on `start`, never by a scan of the log.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>

#include "algo/algorithm.h"

namespace sluice::internal {

struct SlidingLogEntry {
  int64_t at_ms = 0;  // admission time on the deciding clock (the script's score)
  int64_t start = 0;  // units admitted before this entry (contiguous: next.start == end())
  int64_t cost = 0;   // units this entry holds, >= 1
  int64_t end() const { return start + cost; }

  bool operator==(const SlidingLogEntry&) const = default;
};

struct SlidingLogState {
  // Oldest first; sorted by at_ms and by start; never empty while stored.
  std::deque<SlidingLogEntry> entries;
};

// Starts are renumbered from 0 when an admission would end past this (the script keeps
// them exact in doubles, below 2^53).
inline constexpr int64_t kSlidingLogRebaseAbove = int64_t{1} << 50;

// One call. `state` is the stored state (nullopt: no key) and is updated in place
// (nullopt afterwards: deleted). `expires_at_ms` is set to when the stored state expires:
// when its newest entry leaves the window.
AlgoReply SlidingLogStep(std::optional<SlidingLogState>& state, const AlgoArgs& args,
                         int64_t now_ms, int64_t& expires_at_ms);

// One entry of the log sliding_log.lua stores: the member (a letter 'a'..'p' giving the
// number of digits of `start`, the digits, then ":<cost>" when cost > 1) and its score
// (the admission time). nullopt when the member is not of that form.
std::optional<SlidingLogEntry> DecodeSlidingLogMember(std::string_view member, int64_t score_ms);

}  // namespace sluice::internal

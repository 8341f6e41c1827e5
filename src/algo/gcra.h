// GCRA: the in-memory twin of gcra.lua (the semantics, the stored value, the TTL rule
// and the arithmetic are documented there). It must give exactly the script's reply for
// the same state, arguments and clock; the differential tests hold it to that.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "algo/algorithm.h"

namespace sluice::internal {

// The theoretical arrival time, the moment the bucket is full again:
// tat_ms + tat_fraction/rate ms (0 <= tat_fraction < rate), and the rate (refill, or
// limit when refill is 0) and window it was written under; 0 for both is a value of an
// earlier form, read as written under the parameters in force.
struct GcraState {
  int64_t tat_ms = 0;
  int64_t tat_fraction = 0;
  int64_t rate = 0;
  int64_t window_ms = 0;
};

// One call. `state` is the stored state (nullopt: no key, a full bucket) and is updated
// in place (nullopt afterwards: deleted). `expires_at_ms` is set to when the stored state
// expires: the first ms at which the bucket is full (the TAT, rounded up).
AlgoReply GcraStep(std::optional<GcraState>& state, const AlgoArgs& args, int64_t now_ms,
                   int64_t& expires_at_ms);

// The state gcra.lua stores (32 bytes '>dddd': TAT, fraction, refill, window), or one of
// its earlier forms (16 bytes TAT, fraction; a decimal TAT), which read as rate and
// window 0 (the parameters in force), read back from a value (the admin API's decoder);
// nullopt when the value is none of them.
std::optional<GcraState> DecodeGcraValue(std::string_view value);

}  // namespace sluice::internal

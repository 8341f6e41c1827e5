// Fixed window: the in-memory twin of fixed_window.lua. It must give exactly the
// script's reply for the same state, arguments and clock; the differential test holds it
// to that.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "algo/algorithm.h"

namespace sluice::internal {

struct FixedWindowState {
  int64_t count = 0;
  int64_t ends_ms = 0;  // window end on the deciding clock
};

// One call. `state` is the stored state (nullopt: no key) and is updated in place
// (nullopt afterwards: deleted). `expires_at_ms` is set to when the stored state expires.
AlgoReply FixedWindowStep(std::optional<FixedWindowState>& state, const AlgoArgs& args,
                          int64_t now_ms, int64_t& expires_at_ms);

// The state fixed_window.lua stores ("<count>:<window end ms>"), read back from a value
// (the admin API's decoder); nullopt when the value is not of that form.
std::optional<FixedWindowState> DecodeFixedWindowValue(std::string_view value);

}  // namespace sluice::internal

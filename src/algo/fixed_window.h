// Fixed window: the in-memory twin of fixed_window.lua. It must give exactly the
// script's reply for the same state, arguments and clock: on a model clock (the script's
// "count:end" path; tests/differential*.cc) exactly, and on Redis's clock (the count in
// the value, the window's end in the key's expiry) with the same codes and remaining and
// reset_after within the milliseconds between the two clocks' readings
// (tests/fixed_window_real_clock_test.cc).
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

// The state fixed_window.lua stored before v2 (`fw` keys, "<count>:<window end ms>"; the
// model-clock path still writes it), read back from a value (the admin API's decoder);
// nullopt when the value is not of that form.
std::optional<FixedWindowState> DecodeFixedWindowValue(std::string_view value);

// The count fixed_window.lua stores on Redis's clock (`fw2` keys: a decimal integer, the
// window's end being the key's expiry); nullopt when the value is not one.
std::optional<int64_t> DecodeFixedWindowCount(std::string_view value);

}  // namespace sluice::internal

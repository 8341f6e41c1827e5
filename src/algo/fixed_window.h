// Fixed window: the in-memory twin of fixed_window.lua and the decision math both
// stores share. The twin must make exactly the decisions the script makes for the same
// state, arguments and clock; the differential test holds it to that.
#pragma once

#include <cstdint>
#include <optional>

#include "sluice/decision.h"

namespace sluice::internal {

struct FixedWindowState {
  int64_t count = 0;
  int64_t ends_ms = 0;  // window end on the deciding clock
};

struct FixedWindowArgs {
  int64_t limit = 0;
  int64_t window_ms = 0;
  int64_t cost = 1;
  bool aligned = false;
};

// What the script returns: {code, count, ttl_ms}.
struct FixedWindowOutcome {
  int code = 0;  // 1 admitted, 0 over limit, 2 cost exceeds limit
  int64_t count = 0;
  int64_t ttl_ms = 0;
};

// One step of the twin. `state` is the stored state (nullopt: no key); it is updated
// when the request is admitted.
FixedWindowOutcome FixedWindowStep(std::optional<FixedWindowState>& state,
                                   const FixedWindowArgs& args, int64_t now_ms);

// The Decision both stores return for an outcome.
Decision FixedWindowDecision(const FixedWindowOutcome& outcome, int64_t limit);

}  // namespace sluice::internal

// The Store interface: where decisions are made. The Redis store runs each algorithm's
// script; the memory store runs its in-memory twin. Everything above (limiters, policies,
// the service, the CLI) sees only this interface, so the fault-injecting test wrapper
// and every policy work the same on both.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <functional>
#include <string>
#include <string_view>

#include "algo/algorithm.h"
#include "sluice/client.h"
#include "sluice/limits.h"

namespace sluice::internal {

using Deadline = std::chrono::steady_clock::time_point;

struct CheckCall {
  Op op = Op::kConsume;
  std::string key;
  Limit limit;
  int64_t cost = 1;  // consume/peek: cost; refund: amount
  // The model clock's time when ClientOptions::model_clock is set; otherwise the store
  // reads its own clock.
  std::optional<int64_t> now_ms;
  Deadline deadline;
  // What to answer when the store cannot (resolved: never kDefault), and for kLocal the
  // number of servers the limit is divided among.
  FailurePolicy on_failure = FailurePolicy::kOpen;
  int64_t servers = 1;
  bool cache_denials = false;
};

class Store {
 public:
  virtual ~Store() = default;
  // Decides `call`. `done` runs exactly once: inline, or on a store thread. Errors are
  // Status values already translated to sluice's codes.
  virtual void Check(CheckCall call, DecisionCallback done) = 0;
  virtual ClientStats stats() const { return {}; }
  // INFO <section> of the server behind the store; FailedPrecondition when there is none.
  virtual void Info(std::string_view section, Deadline deadline,
                    std::function<void(StatusOr<std::string>)> done) {
    (void)section;
    (void)deadline;
    done(FailedPreconditionError("the embedded store has no server INFO"));
  }
  // Stops I/O; outstanding calls complete with Unavailable. Idempotent.
  virtual void Shutdown() {}
};

}  // namespace sluice::internal

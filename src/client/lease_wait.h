// A waiting acquire (AcquireOptions::wait, sluice/lease.h): takes a ticket in the id's
// queue in the store (src/algo/concurrency.lua, "Waiting acquires") and asks again until
// its turn comes with a free slot, the wait ends, or the store cannot answer.
//
// It asks again when the store says a slot may have freed (Store::WatchLeaseSet: a
// release published on the id's channel), when the earliest live lease expires, at
// least every kRecheck (which refreshes its ticket: a waiter that stops asking, killed or
// stuck, loses its place kTicketTtl later), and one last time a call deadline before the
// wait ends. A wait that ends in the queue leaves it (the ticket is removed, and the
// waiters behind are woken), so its answer comes no later than the end of the wait.
//
// What ends the wait is handed to `finish` once, on an I/O thread, never inside
// StartWaitingAcquire: a grant (code 1), the queue full (code 3), still waiting when the
// wait ended (code 2), a failure policy's answer (source other than kStore), or an error.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "client/client_core.h"
#include "core/boot_clock.h"
#include "store/store.h"

namespace sluice::internal {

// How often a waiter asks again without a wake-up, and how long its ticket stays in the
// queue without being asked for again.
inline constexpr std::chrono::milliseconds kRecheck{500};
inline constexpr std::chrono::milliseconds kTicketTtl{3000};

struct WaitPlan {
  std::shared_ptr<ClientCore> core;
  // op kWait with its key, token, limit, lease ttl, bound, policy; the deadline and the
  // model clock's now are set at each attempt.
  LeaseCall call;
  std::chrono::steady_clock::time_point wait_until;
  std::chrono::milliseconds call_deadline{0};
  // The answer, and when the call that made it was sent (BootClock).
  std::function<void(StatusOr<LeaseResult>, BootClock::time_point sent)> finish;
};

void StartWaitingAcquire(WaitPlan plan);

}  // namespace sluice::internal

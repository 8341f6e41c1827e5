// Reservation: the in-memory twin of reservation.lua's driver (reserve an estimate, settle
// the actual). It runs the algorithm's own twin through `run`, as the script runs the
// algorithm's own function, and keeps the reservation key's state; the differential tests
// hold it to the script's replies (tests/differential.cc, reservations).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "algo/algorithm.h"

namespace sluice::internal {

struct ReservationState {
  bool settled = false;
  int64_t estimate = 0;    // held: what the reserve charged
  int64_t window_end = 0;  // held, sliding window: the window the estimate went into
  int64_t actual = 0;      // settled: what the settle charged in all
  int64_t expires_at_ms = 0;
};

// What became of a settle (reservation.lua's fifth reply item).
enum class SettleCode : int {
  kReserve = 0,         // the call was a reserve
  kSettled = 1,         // settled now: the difference refunded or debited
  kAlreadySettled = 2,  // settled by an earlier call: nothing changed
  kNotHeld = 3,         // no reservation held (expired, or never made): nothing changed
};

struct ReservationReply {
  AlgoReply reply;
  SettleCode code = SettleCode::kReserve;
  int64_t actual = 0;  // settled: this call's actual; already settled: the first's
};

// Runs the algorithm's twin on the id's counter: an AlgoArgs of the call's limit with the
// op and cost given (and refill replaced for a give back).
using CounterStep = std::function<AlgoReply(const AlgoArgs& args)>;

// One reserve (args.op kReserve, args.cost the estimate) or settle (kSettle, args.cost the
// actual, >= 0) at `now_ms`. `held` is the reservation key's state (nullopt: no key) and is
// updated in place; `expires_at_ms` is set to when it expires.
ReservationReply ReservationStep(std::optional<ReservationState>& held, const AlgoArgs& args,
                                 Algorithm algorithm, int64_t now_ms, const CounterStep& run);

// The Decision of a reserve (as a consume's) or a settle (as a debit's: `debt` when the
// id is in debt after it; `settle` and `settled_cost` say what it did).
Decision MakeReservationDecision(const ReservationReply& reply, int64_t limit, Op op);

}  // namespace sluice::internal

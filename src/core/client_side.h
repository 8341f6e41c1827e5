// Errors that happen on this side of the connection: a call refused because too many
// are in flight, a deadline missed behind a backlog of replies that kept arriving, or a
// deadline missed after this process held the call for more than half its time before
// writing it (its own event loop lagged: other work on the I/O thread, a slow callback,
// CPU starvation).
// The caller gets its error (or its failure policy's answer) as for any store error, but
// the circuit breaker does not count it: the breaker is for a store that cannot answer,
// and opening it on a local burst would refuse everyone for the cool-down while Redis is
// healthy.
#pragma once

#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::internal {

// How every client-side error's message ends: what IsClientSide recognises.
inline constexpr std::string_view kClientSideEnd =
    ": a backlog in this client, not a store failure)";

// `code` with `message`, then `cause` and the ending that marks it as client-side.
inline Status ClientSideError(StatusCode code, std::string message,
                              std::string_view cause = "the store is answering") {
  message.append(" (").append(cause).append(kClientSideEnd);
  return Status(code, std::move(message));
}

inline bool IsClientSide(const Status& status) {
  return std::string_view(status.message()).ends_with(kClientSideEnd);
}

}  // namespace sluice::internal

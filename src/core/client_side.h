// Errors that happen on this side of the connection while the store keeps answering: a
// call refused because too many are in flight, or a deadline missed behind a backlog of
// replies that kept arriving. The caller gets its error (or its failure policy's answer)
// as for any store error, but the circuit breaker does not count it: the breaker is for
// a store that cannot answer, and opening it on a local burst would refuse everyone for
// the cool-down while Redis is healthy.
#pragma once

#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::internal {

inline constexpr std::string_view kClientSideNote =
    " (a backlog in this client; the store is answering)";

// `code` with `message` and the note that marks it as client-side.
inline Status ClientSideError(StatusCode code, std::string message) {
  message.append(kClientSideNote);
  return Status(code, std::move(message));
}

inline bool IsClientSide(const Status& status) {
  return std::string_view(status.message()).ends_with(kClientSideNote);
}

}  // namespace sluice::internal

#include "redis/resp.h"

namespace sluice::internal {

Status ErrorReplyToStatus(std::string_view error, std::string_view where) {
  std::string message = "redis " + std::string(where) + " answered: " + std::string(error);
  auto starts = [&](std::string_view prefix) { return error.starts_with(prefix); };
  if (starts("NOAUTH") || starts("WRONGPASS") || starts("NOPERM")) {
    return PermissionDeniedError(std::move(message));
  }
  // Transient states of a server that will answer again: retrying later helps.
  if (starts("LOADING") || starts("BUSY") || starts("MASTERDOWN") || starts("TRYAGAIN") ||
      starts("CLUSTERDOWN") || starts("OOM") || starts("READONLY") || starts("MOVED") ||
      starts("ASK")) {
    return UnavailableError(std::move(message));
  }
  return InternalError(std::move(message));
}

}  // namespace sluice::internal

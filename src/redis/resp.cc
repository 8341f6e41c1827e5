#include "redis/resp.h"

namespace sluice::internal {

Status ErrorReplyToStatus(std::string_view error, std::string_view where) {
  std::string message = "redis " + std::string(where) + " answered: " + std::string(error);
  auto starts = [&](std::string_view prefix) { return error.starts_with(prefix); };
  if (starts("NOAUTH") || starts("WRONGPASS") || starts("NOPERM")) {
    return PermissionDeniedError(std::move(message));
  }
  // Redis 7.0 reports an ACL refusal inside a script as a plain ERR.
  if (error.find("The user executing the script can't run this command") !=
      std::string_view::npos) {
    return PermissionDeniedError(std::move(message) +
                                 " (an ACL refusal, as NOPERM: the script calls a command or key "
                                 "this user is not granted; docs/design.md §8 has the rule sets)");
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

#include "redis/resp.h"

namespace sluice::internal {

Status ErrorReplyToStatus(std::string_view error, std::string_view where) {
  std::string message = "redis " + std::string(where) + " answered: " + std::string(error);
  auto starts = [&](std::string_view prefix) { return error.starts_with(prefix); };
  if (starts("NOAUTH") || starts("WRONGPASS") || starts("NOPERM")) {
    return PermissionDeniedError(std::move(message));
  }
  // Inside a script an ACL refusal is a plain ERR: "The user executing the script can't
  // run this command or subcommand" (Redis 7.0), "ACL failure in script: User '…' has
  // no permissions to run the '…' command" (Redis 7.2 and later, Valkey).
  if (error.find("The user executing the script can't run this command") !=
          std::string_view::npos ||
      error.find("ACL failure in script") != std::string_view::npos) {
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

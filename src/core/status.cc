#include "sluice/status.h"

#include <cstdio>
#include <cstdlib>

namespace sluice {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
Status DeadlineExceededError(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
Status UnavailableError(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
Status NotFoundError(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
Status InternalError(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}

namespace internal {

void DieOnValueOfError(const Status& status) {
  // stdio, not iostream: this may run before or after static initialisation, and it
  // must not allocate more than the message needs.
  const std::string text = status.ToString();
  std::fprintf(stderr, "sluice: StatusOr value accessed on error: %s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal

}  // namespace sluice

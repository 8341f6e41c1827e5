// sluice/status.h — error values: Status and StatusOr<T>.
//
// Errors are values, never exceptions: every fallible public call returns a Status or a
// StatusOr<T>. The code tells the caller what to do (retry, fix the input, give up);
// the message says what happened, in words an operator can act on.
//
// Thread-safety: these are plain values; distinct objects may be used from different
// threads, one object must not be mutated concurrently.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sluice {

// Fixed numbers, the same as gRPC's canonical status codes (a service can pass them on
// unchanged); a code never changes its number.
enum class StatusCode : int {
  kOk = 0,
  // The caller's input is wrong (empty id, limit out of range, bad URL); retrying the
  // same call cannot help.
  kInvalidArgument = 3,
  // The store did not answer before the call's deadline. The call may still have run.
  kDeadlineExceeded = 4,
  // What the call acts on is gone: a lease that expired or that an operator released
  // (Lease::Heartbeat, Lease::Release).
  kNotFound = 5,
  // The store refused the credentials or the command (AUTH, ACL).
  kPermissionDenied = 7,
  // The call cannot run in this state and retrying will not help until it changes
  // (Redis older than 7.0, a client used in a forked child, a blocking call on an I/O
  // thread, an admin call on the embedded store).
  kFailedPrecondition = 9,
  // A bug or a broken invariant; report it.
  kInternal = 13,
  // The store cannot be reached right now (connection down, reconnecting, too many calls
  // in flight, breaker open); retrying later may help.
  kUnavailable = 14,
};

// Returns a stable lower_snake_case name ("deadline_exceeded") for logs and metrics.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "deadline_exceeded: redis 127.0.0.1:6379 did not answer within 5 ms"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status DeadlineExceededError(std::string message);
Status UnavailableError(std::string message);
Status FailedPreconditionError(std::string message);
Status PermissionDeniedError(std::string message);
Status NotFoundError(std::string message);
Status InternalError(std::string message);

namespace internal {
// Writes "sluice: StatusOr value accessed on error: <status.ToString()>" to stderr and
// aborts. Out of line so that the accessors' inlined fast path is one test and one branch.
[[noreturn]] void DieOnValueOfError(const Status& status);
}  // namespace internal

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr needs a value or a non-OK status");
    if (status_.ok()) status_ = InternalError("StatusOr built from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // The value. On an error StatusOr, in every build (release included), each of these
  // writes "sluice: StatusOr value accessed on error: <status>" to stderr and aborts the
  // process: a program that forgot to check ok() stops at the line that forgot, with the
  // reason, instead of running on with undefined behaviour. The check is one branch.
  const T& value() const& { return *Checked(); }
  T& value() & { return *Checked(); }
  T&& value() && { return std::move(*Checked()); }
  const T& operator*() const& { return *Checked(); }
  T& operator*() & { return *Checked(); }
  const T* operator->() const { return Checked(); }
  T* operator->() { return Checked(); }

 private:
  const T* Checked() const {
    if (!value_.has_value()) [[unlikely]]
      internal::DieOnValueOfError(status_);
    return &*value_;
  }
  T* Checked() {
    if (!value_.has_value()) [[unlikely]]
      internal::DieOnValueOfError(status_);
    return &*value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace sluice

// gmock matchers for Status and StatusOr<T>, so a failed assertion says which status it
// got (code and message) instead of "false":
//
//   ASSERT_THAT(client, IsOk());
//   EXPECT_THAT(limiter.Check(""), StatusIs(StatusCode::kInvalidArgument));
//   EXPECT_THAT(limiter.Check(""), StatusIs(StatusCode::kInvalidArgument, HasSubstr("empty")));
//   EXPECT_THAT(admin->DbSize(), IsOkAndHolds(0));
//
// Also PrintTo for StatusCode, Status and StatusOr, so EXPECT_EQ on them prints names.
#pragma once

#include <ostream>
#include <string>
#include <utility>

#include <gmock/gmock.h>

#include "sluice/status.h"

namespace sluice {

inline void PrintTo(StatusCode code, std::ostream* os) {
  *os << StatusCodeName(code) << " (" << static_cast<int>(code) << ")";
}
inline void PrintTo(const Status& status, std::ostream* os) {
  *os << status.ToString();
}
template <typename T>
void PrintTo(const StatusOr<T>& value, std::ostream* os) {
  if (value.ok()) {
    *os << "ok: " << ::testing::PrintToString(*value);
  } else {
    *os << value.status().ToString();
  }
}

namespace testing {

inline const Status& StatusOf(const Status& status) {
  return status;
}
template <typename T>
const Status& StatusOf(const StatusOr<T>& value) {
  static const Status ok;
  return value.ok() ? ok : value.status();
}

// Matches an OK Status, or a StatusOr holding a value.
MATCHER(IsOk, negation ? "is not OK" : "is OK") {
  const Status& status = StatusOf(arg);
  if (!status.ok()) *result_listener << "whose status is " << status.ToString();
  return status.ok();
}

// Matches a Status (or StatusOr) whose code is `code` (and, if given, whose message
// matches `message_matcher`).
MATCHER_P(StatusIs, code, "has status code " + std::string(StatusCodeName(code))) {
  const Status& status = StatusOf(arg);
  *result_listener << "whose status is " << status.ToString();
  return status.code() == code;
}
MATCHER_P2(StatusIs, code, message_matcher,
           "has status code " + std::string(StatusCodeName(code)) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher)) {
  const Status& status = StatusOf(arg);
  *result_listener << "whose status is " << status.ToString();
  return status.code() == code && ::testing::Matches(::testing::SafeMatcherCast<const std::string&>(
                                      message_matcher))(status.message());
}

// Matches a StatusOr holding a value that matches `inner`.
MATCHER_P(IsOkAndHolds, inner,
          negation ? "is not OK holding a matching value" : "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "whose status is " << arg.status().ToString();
    return false;
  }
  return ::testing::ExplainMatchResult(inner, *arg, result_listener);
}

}  // namespace testing
}  // namespace sluice

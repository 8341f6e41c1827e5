// Status and StatusOr: the fixed numbers of the codes (a service passes them on as
// gRPC codes), their names, what a StatusOr holds, and the test matchers built on them.
#include "sluice/status.h"

#include <memory>
#include <string>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::IsOkAndHolds;
using ::testing::Not;
using testing::StatusIs;

TEST(StatusCode, NumbersAreFixedAndMatchGrpc) {
  EXPECT_EQ(static_cast<int>(StatusCode::kOk), 0);
  EXPECT_EQ(static_cast<int>(StatusCode::kInvalidArgument), 3);
  EXPECT_EQ(static_cast<int>(StatusCode::kDeadlineExceeded), 4);
  EXPECT_EQ(static_cast<int>(StatusCode::kNotFound), 5);
  EXPECT_EQ(static_cast<int>(StatusCode::kPermissionDenied), 7);
  EXPECT_EQ(static_cast<int>(StatusCode::kFailedPrecondition), 9);
  EXPECT_EQ(static_cast<int>(StatusCode::kInternal), 13);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 14);
}

TEST(StatusCode, EveryCodeHasAStableName) {
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "ok");
  EXPECT_EQ(StatusCodeName(StatusCode::kInvalidArgument), "invalid_argument");
  EXPECT_EQ(StatusCodeName(StatusCode::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(StatusCodeName(StatusCode::kNotFound), "not_found");
  EXPECT_EQ(StatusCodeName(StatusCode::kPermissionDenied), "permission_denied");
  EXPECT_EQ(StatusCodeName(StatusCode::kFailedPrecondition), "failed_precondition");
  EXPECT_EQ(StatusCodeName(StatusCode::kInternal), "internal");
  EXPECT_EQ(StatusCodeName(StatusCode::kUnavailable), "unavailable");
  EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(42)), "unknown");
}

TEST(Status, OkByDefaultAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status().ok());
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status().ToString(), "ok");
  const Status s = DeadlineExceededError("redis 127.0.0.1:6379 did not answer within 5 ms");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.ToString(), "deadline_exceeded: redis 127.0.0.1:6379 did not answer within 5 ms");
  EXPECT_EQ(InvalidArgumentError("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UnavailableError("x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(FailedPreconditionError("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(PermissionDeniedError("x").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(NotFoundError("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(InternalError("x").code(), StatusCode::kInternal);
}

TEST(StatusOr, HoldsAValueOrAnError) {
  StatusOr<int> value = 7;
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
  EXPECT_EQ(value.value(), 7);
  EXPECT_TRUE(value.status().ok());
  StatusOr<int> error = UnavailableError("down");
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), StatusCode::kUnavailable);
  // A move-only value moves out.
  StatusOr<std::unique_ptr<int>> owned = std::make_unique<int>(3);
  std::unique_ptr<int> taken = std::move(owned).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 3);
  // operator-> reaches the value's members.
  StatusOr<std::string> text = std::string("abc");
  EXPECT_EQ(text->size(), 3u);
}

#ifdef NDEBUG
TEST(StatusOr, BuiltFromAnOkStatusIsAnInternalErrorNotAnEmptyValue) {
  // (A debug build asserts instead.)
  StatusOr<int> broken = Status::Ok();
  EXPECT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kInternal);
}
#endif

// In every build, release included: the value of an error StatusOr is never read.
TEST(StatusOrDeathTest, ValueOfAnErrorAbortsWithTheStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* expected =
      "sluice: StatusOr value accessed on error: unavailable: redis 127.0.0.1:6379 refused";
  StatusOr<std::string> error = UnavailableError("redis 127.0.0.1:6379 refused");
  const StatusOr<std::string>& constant = error;
  EXPECT_DEATH((void)*error, expected);
  EXPECT_DEATH((void)*constant, expected);
  EXPECT_DEATH((void)error->size(), expected);
  EXPECT_DEATH((void)constant->size(), expected);
  EXPECT_DEATH((void)error.value(), expected);
  EXPECT_DEATH((void)constant.value(), expected);
  EXPECT_DEATH((void)std::move(error).value(), expected);
}

TEST(StatusMatchers, MatchWhatTheySayAndExplainWhatTheyGot) {
  const Status down = UnavailableError("redis is down");
  const StatusOr<int> seven = 7;
  const StatusOr<int> refused = PermissionDeniedError("WRONGPASS");
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_TRUE(seven.ok());
  EXPECT_THAT(down, Not(IsOk()));
  EXPECT_THAT(refused, Not(IsOk()));
  EXPECT_THAT(down, StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(down, Not(StatusIs(StatusCode::kInternal)));
  EXPECT_THAT(down, StatusIs(StatusCode::kUnavailable, HasSubstr("down")));
  EXPECT_THAT(down, Not(StatusIs(StatusCode::kUnavailable, HasSubstr("up"))));
  EXPECT_THAT(refused, StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(seven, StatusIs(StatusCode::kOk));
  EXPECT_THAT(seven, IsOkAndHolds(7));
  EXPECT_THAT(seven, Not(IsOkAndHolds(8)));
  EXPECT_THAT(refused, Not(IsOkAndHolds(7)));
  // The explanation names the status a failing match got.
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(::testing::ExplainMatchResult(IsOk(), refused, &listener));
  EXPECT_THAT(listener.str(), HasSubstr("permission_denied: WRONGPASS"));
  EXPECT_EQ(::testing::PrintToString(StatusCode::kUnavailable), "unavailable (14)");
}

}  // namespace
}  // namespace sluice

// ErrorReplyToStatus: which error replies tell the caller what, in the wordings of the
// servers sluice runs on (Redis 7.0, 7.2 and later, Valkey).
#include "redis/resp.h"

#include <gtest/gtest.h>

namespace sluice::internal {
namespace {

TEST(ErrorReplyToStatus, AclRefusalsArePermissionDenied) {
  for (const char* error : {
           "NOPERM User app has no permissions to run the 'flushall' command",
           "NOAUTH Authentication required.",
           "WRONGPASS invalid username-password pair or user is disabled.",
           // Redis 7.0, inside a script.
           "ERR The user executing the script can't run this command or subcommand script: "
           "abc, on @user_script:1.",
           // Redis 7.2 and later, and Valkey, inside a script.
           "ERR ACL failure in script: User 'limiter' has no permissions to run the 'del' "
           "command script: 0123, on @user_script:12.",
           "ERR ACL failure in script: No permissions to access a key script: 0123, on "
           "@user_script:3.",
       }) {
    const Status status = ErrorReplyToStatus(error, "127.0.0.1:6379");
    EXPECT_EQ(status.code(), StatusCode::kPermissionDenied) << error;
    EXPECT_NE(status.message().find("127.0.0.1:6379"), std::string::npos) << status.message();
  }
}

TEST(ErrorReplyToStatus, OtherScriptErrorsAreInternal) {
  for (const char* error : {"ERR user_script:1: Script attempted to access nonexistent global",
                            "ERR Error running script (call to f_0123): wrong number of args",
                            "WRONGTYPE Operation against a key holding the wrong kind of value"}) {
    EXPECT_EQ(ErrorReplyToStatus(error, "h:1").code(), StatusCode::kInternal) << error;
  }
}

TEST(ErrorReplyToStatus, TransientStatesAreUnavailable) {
  for (const char* error : {"LOADING Redis is loading the dataset in memory",
                            "READONLY You can't write against a read only replica.",
                            "OOM command not allowed when used memory > 'maxmemory'.",
                            "BUSY Redis is busy running a script."}) {
    EXPECT_EQ(ErrorReplyToStatus(error, "h:1").code(), StatusCode::kUnavailable) << error;
  }
}

}  // namespace
}  // namespace sluice::internal

// The support console's sessions and sign-in backoff (service/console_sessions.h), and its
// bounded list of refused ids (service/refused_ids.h), on a fake clock.
#include "service/console_sessions.h"

#include <gtest/gtest.h>

#include <set>

#include "service/refused_ids.h"

namespace sluiced {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

struct FakeNow {
  std::chrono::steady_clock::time_point t{std::chrono::hours(1000)};
};

ConsoleSessionOptions On(FakeNow& now) {
  ConsoleSessionOptions o;
  o.now = [&now] { return now.t; };
  return o;
}

TEST(ConsoleSessions, IdsAndCsrfTokensAreLongRandomAndDistinct) {
  FakeNow now;
  ConsoleSessions sessions(On(now));
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    const ConsoleSession s = sessions.Create("dana");
    EXPECT_EQ(s.id.size(), 44u);  // 256 bits, base64url
    EXPECT_EQ(s.csrf.size(), 44u);
    EXPECT_NE(s.id, s.csrf);
    EXPECT_TRUE(seen.insert(s.id).second);
    EXPECT_TRUE(seen.insert(s.csrf).second);
  }
}

TEST(ConsoleSessions, FoundUntilIdleThenGone) {
  FakeNow now;
  ConsoleSessions sessions(On(now));
  const ConsoleSession s = sessions.Create("dana");
  ASSERT_TRUE(sessions.Find(s.id));
  EXPECT_EQ(sessions.Find(s.id)->actor, "dana");
  EXPECT_EQ(sessions.Find(s.id)->csrf, s.csrf);
  now.t += minutes(29);
  ASSERT_TRUE(sessions.Find(s.id)) << "used 29 min ago: still live";
  now.t += minutes(29);
  ASSERT_TRUE(sessions.Find(s.id)) << "each use starts the idle time again";
  now.t += minutes(30);
  EXPECT_FALSE(sessions.Find(s.id)) << "idle for 30 min: over";
  EXPECT_FALSE(sessions.Find("")) << "no cookie names no session";
  EXPECT_FALSE(sessions.Find(s.csrf)) << "the CSRF token is not a session id";
}

TEST(ConsoleSessions, OverAfterTheAbsoluteLifetimeHoweverUsed) {
  FakeNow now;
  ConsoleSessions sessions(On(now));
  const ConsoleSession s = sessions.Create("dana");
  for (int i = 0; i < 12 * 6 - 1; ++i) {
    now.t += minutes(10);
    ASSERT_TRUE(sessions.Find(s.id)) << i;
  }
  now.t += minutes(10);
  EXPECT_FALSE(sessions.Find(s.id)) << "12 h after sign-in";
}

TEST(ConsoleSessions, SignOutEndsIt) {
  FakeNow now;
  ConsoleSessions sessions(On(now));
  const ConsoleSession s = sessions.Create("dana");
  sessions.Remove(s.id);
  EXPECT_FALSE(sessions.Find(s.id));
}

TEST(ConsoleSessions, BoundedTheLeastRecentlyUsedGoesFirst) {
  FakeNow now;
  ConsoleSessionOptions o = On(now);
  o.max_sessions = 3;
  ConsoleSessions sessions(o);
  const ConsoleSession a = sessions.Create("a");
  now.t += seconds(1);
  const ConsoleSession b = sessions.Create("b");
  now.t += seconds(1);
  const ConsoleSession c = sessions.Create("c");
  now.t += seconds(1);
  ASSERT_TRUE(sessions.Find(a.id));  // a is now the most recently used
  now.t += seconds(1);
  const ConsoleSession d = sessions.Create("d");
  EXPECT_EQ(sessions.size(), 3u);
  EXPECT_TRUE(sessions.Find(a.id));
  EXPECT_FALSE(sessions.Find(b.id)) << "the least recently used made room";
  EXPECT_TRUE(sessions.Find(c.id));
  EXPECT_TRUE(sessions.Find(d.id));
}

TEST(ConsoleSessions, WrongTokensCloseSignInForDoublingTimesUpToTheMaximum) {
  FakeNow now;
  ConsoleSessions sessions(On(now));
  EXPECT_EQ(sessions.SignInClosedFor(), milliseconds(0));
  milliseconds expected(1000);
  for (int i = 0; i < 9; ++i) {
    sessions.SignInFailed();
    EXPECT_EQ(sessions.SignInClosedFor(), std::min(expected, milliseconds(60000))) << i;
    now.t += sessions.SignInClosedFor() - milliseconds(1);
    EXPECT_EQ(sessions.SignInClosedFor(), milliseconds(1)) << "1 ms before it opens";
    now.t += milliseconds(1);
    EXPECT_EQ(sessions.SignInClosedFor(), milliseconds(0)) << "open again";
    expected *= 2;
  }
  sessions.SignInSucceeded();
  sessions.SignInFailed();
  EXPECT_EQ(sessions.SignInClosedFor(), milliseconds(1000)) << "a right token starts over";
}

TEST(RefusedIds, CountsTheLastTwoMinutesMostFirst) {
  RefusedIds ids;
  for (int i = 0; i < 3; ++i) ids.Add("shop", "sign_in", "account=7", 100);
  ids.Add("shop", "sign_in", "account=8", 100);
  ids.Add("shop", "sign_in", "account=8", 101);
  auto top = ids.Top(10, 101);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, "account=7");
  EXPECT_EQ(top[0].refused, 3);
  EXPECT_EQ(top[1].id, "account=8");
  EXPECT_EQ(top[1].refused, 2);
  top = ids.Top(10, 102);
  ASSERT_EQ(top.size(), 1u) << "minute 100 is over";
  EXPECT_EQ(top[0].id, "account=8");
  EXPECT_EQ(top[0].refused, 1);
  EXPECT_TRUE(ids.Top(10, 103).empty());
  EXPECT_EQ(ids.Top(1, 101).size(), 1u);
}

TEST(RefusedIds, BoundedNewIdsUntrackedWhileFullThenStaleOnesMakeRoom) {
  RefusedIds ids;
  for (std::size_t i = 0; i < RefusedIds::kMaxIds; ++i)
    ids.Add("shop", "l", "id" + std::to_string(i), 10);
  ids.Add("shop", "l", "newcomer", 10);
  EXPECT_EQ(ids.untracked(), 1u);
  EXPECT_EQ(ids.Top(RefusedIds::kMaxIds + 1, 10).size(), RefusedIds::kMaxIds);
  ids.Add("shop", "l", "later", 12);  // minute 10's ids are swept
  EXPECT_EQ(ids.untracked(), 1u);
  ASSERT_EQ(ids.Top(10, 12).size(), 1u);
  EXPECT_EQ(ids.Top(10, 12)[0].id, "later");
}

}  // namespace
}  // namespace sluiced

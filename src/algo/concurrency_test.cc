// The concurrency lease twin (LeaseStep) on explicit times: no clock, no sleeping.
// Boundaries are checked at each lease's expiry and 1 ms before it (a lease is live while
// now < expiry). The Lua script is held to the same replies by
// tests/differential_concurrency_test.cc.
#include "algo/concurrency.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::internal::concurrency_test {
namespace {

constexpr int64_t kT0 = 1'700'000'000'123;  // an arbitrary, unaligned start time

std::string Show(const LeaseReply& r) {
  std::string s = "{" + std::to_string(r.code) + ", " + std::to_string(r.count) + ", " +
                  std::to_string(r.now_ms) + ", " + std::to_string(r.expires_at_ms);
  for (const LeaseRow& row : r.rows)
    s += ", " + row.member + "@" + std::to_string(row.expires_at_ms);
  return s + "}";
}

std::string Show(const LeaseSetState& state) {
  std::string s = "{";
  for (const auto& [member, expires] : state.members) {
    s += member + "@" + std::to_string(expires) + " ";
  }
  return s + "}";
}

// Replies compared as text, so a failure prints both.
#define EXPECT_REPLY(got, want) EXPECT_EQ(Show(got), Show(LeaseReply(want)))

LeaseArgs Acquire(std::string token, int64_t limit, int64_t ttl_ms) {
  return {.op = LeaseOp::kAcquire, .token = std::move(token), .limit = limit, .ttl_ms = ttl_ms};
}
LeaseArgs Heartbeat(std::string member, int64_t ttl_ms) {
  return {.op = LeaseOp::kHeartbeat, .token = std::move(member), .ttl_ms = ttl_ms};
}
LeaseArgs Release(std::string member) {
  return {.op = LeaseOp::kRelease, .token = std::move(member)};
}
LeaseArgs ReleaseAll() {
  return {.op = LeaseOp::kReleaseAll};
}
LeaseArgs List() {
  return {.op = LeaseOp::kList};
}

LeaseReply Granted(int64_t count, int64_t now, int64_t expires) {
  return {.code = 1, .count = count, .now_ms = now, .expires_at_ms = expires};
}
LeaseReply Refused(int64_t count, int64_t now, int64_t earliest) {
  return {.code = 0, .count = count, .now_ms = now, .expires_at_ms = earliest};
}
LeaseReply Live(int64_t now, int64_t expires) {
  return {.code = 1, .count = 0, .now_ms = now, .expires_at_ms = expires};
}
LeaseReply Gone(int64_t now) {
  return {.code = 0, .count = 0, .now_ms = now, .expires_at_ms = 0};
}
LeaseReply Done(int64_t count, int64_t now) {
  return {.code = 1, .count = count, .now_ms = now, .expires_at_ms = 0};
}
LeaseReply Listed(int64_t now, std::vector<LeaseRow> rows) {
  return {.code = 1, .count = 0, .now_ms = now, .expires_at_ms = 0, .rows = std::move(rows)};
}

// ---------------------------------------------------------------------------------------

TEST(LeaseMember, IsAcquisitionTimeColonToken) {
  EXPECT_EQ(LeaseMember(kT0, "tok"), "1700000000123:tok");
  EXPECT_EQ(LeaseMember(0, "x"), "0:x");
  EXPECT_EQ(LeaseMember(42, ""), "42:");
  EXPECT_EQ(LeaseMember(7, "a:b"), "7:a:b");
}

TEST(LeaseSetState, MaxExpiryIsTheLatestMember) {
  LeaseSetState state;
  EXPECT_EQ(state.MaxExpiry(), 0);
  state.members = {{"1:a", kT0 + 5}, {"1:b", kT0 + 900}, {"1:c", kT0 + 30}};
  EXPECT_EQ(state.MaxExpiry(), kT0 + 900);
}

TEST(LeaseStep, AcquiresUpToTheLimitThenRefusesWithTheEarliestExpiry) {
  LeaseSetState state;
  // The first lease (lowest member) has the longest ttl, the third the shortest: the
  // refusal's expiry must be the earliest expiry, not the first member's.
  EXPECT_REPLY(LeaseStep(state, Acquire("a", 3, 5000), kT0), Granted(1, kT0, kT0 + 5000));
  EXPECT_REPLY(LeaseStep(state, Acquire("b", 3, 3000), kT0 + 10), Granted(2, kT0 + 10, kT0 + 3010));
  EXPECT_REPLY(LeaseStep(state, Acquire("c", 3, 700), kT0 + 20), Granted(3, kT0 + 20, kT0 + 720));
  const std::map<std::string, int64_t> want = {{LeaseMember(kT0, "a"), kT0 + 5000},
                                               {LeaseMember(kT0 + 10, "b"), kT0 + 3010},
                                               {LeaseMember(kT0 + 20, "c"), kT0 + 720}};
  EXPECT_EQ(state.members, want);

  EXPECT_REPLY(LeaseStep(state, Acquire("d", 3, 100), kT0 + 30), Refused(3, kT0 + 30, kT0 + 720));
  EXPECT_EQ(state.members, want) << "a refusal adds nothing";
  // A refusal at the limit again, and a larger limit (an upgrade) on the next call.
  EXPECT_REPLY(LeaseStep(state, Acquire("e", 3, 100), kT0 + 719), Refused(3, kT0 + 719, kT0 + 720));
  EXPECT_REPLY(LeaseStep(state, Acquire("f", 4, 100), kT0 + 719), Granted(4, kT0 + 719, kT0 + 819));
  // A lower limit (a downgrade) refuses with the true live count, above the limit.
  EXPECT_REPLY(LeaseStep(state, Acquire("g", 2, 100), kT0 + 719), Refused(4, kT0 + 719, kT0 + 720));
  EXPECT_EQ(state.members.size(), 4u);
}

LeaseArgs Wait(std::string token, int64_t limit, int64_t ticket_ttl_ms, int64_t max_waiters = 10) {
  return {.op = LeaseOp::kWait,
          .token = std::move(token),
          .limit = limit,
          .ttl_ms = 1000,
          .ticket_ttl_ms = ticket_ttl_ms,
          .max_waiters = max_waiters};
}

LeaseReply Waiting(int64_t ahead, int64_t now, int64_t earliest) {
  return {.code = 2, .count = ahead, .now_ms = now, .expires_at_ms = earliest};
}

TEST(LeaseStep, WaitersAreGrantedInArrivalOrderAndNewcomersDoNotOvertake) {
  LeaseSetState state;
  EXPECT_REPLY(LeaseStep(state, Acquire("a", 1, 500), kT0), Granted(1, kT0, kT0 + 500));
  // Two waiters in one millisecond, the later with the lower token: arrival order holds.
  EXPECT_REPLY(LeaseStep(state, Wait("w2", 1, 3000), kT0 + 1), Waiting(0, kT0 + 1, kT0 + 500));
  EXPECT_REPLY(LeaseStep(state, Wait("w1", 1, 3000), kT0 + 1), Waiting(1, kT0 + 1, kT0 + 500));
  EXPECT_EQ(state.tickets.at("w1").arrival, state.tickets.at("w2").arrival + 1);
  // The slot frees: a newcomer that does not wait is refused below the limit, and the
  // second waiter is still behind the first.
  EXPECT_REPLY(LeaseStep(state, {.op = LeaseOp::kRelease, .token = LeaseMember(kT0, "a")}, kT0 + 2),
               (LeaseReply{.code = 1, .now_ms = kT0 + 2}));
  EXPECT_REPLY(LeaseStep(state, Acquire("n", 1, 500), kT0 + 3), Refused(0, kT0 + 3, 0));
  EXPECT_REPLY(LeaseStep(state, Wait("w1", 1, 3000), kT0 + 3), Waiting(1, kT0 + 3, 0));
  EXPECT_REPLY(LeaseStep(state, Wait("w2", 1, 3000), kT0 + 4), Granted(1, kT0 + 4, kT0 + 1004));
  EXPECT_EQ(state.tickets.count("w2"), 0u) << "a granted waiter's ticket is dropped";
  // A larger limit: the next waiter's turn and a newcomer's slot.
  EXPECT_REPLY(LeaseStep(state, Wait("w1", 3, 3000), kT0 + 5), Granted(2, kT0 + 5, kT0 + 1005));
  EXPECT_TRUE(state.tickets.empty());
  EXPECT_EQ(state.queue_expires_at_ms, 0);
  EXPECT_REPLY(LeaseStep(state, Acquire("n", 3, 500), kT0 + 6), Granted(3, kT0 + 6, kT0 + 506));
}

TEST(LeaseStep, TicketsExpireUnlessRefreshedAndTheQueueIsBounded) {
  LeaseSetState state;
  EXPECT_REPLY(LeaseStep(state, Acquire("a", 1, 60000), kT0), Granted(1, kT0, kT0 + 60000));
  EXPECT_REPLY(LeaseStep(state, Wait("w1", 1, 100, 2), kT0), Waiting(0, kT0, kT0 + 60000));
  EXPECT_REPLY(LeaseStep(state, Wait("w2", 1, 3000, 2), kT0), Waiting(1, kT0, kT0 + 60000));
  EXPECT_REPLY(
      LeaseStep(state, Wait("w3", 1, 3000, 2), kT0 + 99),
      (LeaseReply{.code = 3, .count = 2, .now_ms = kT0 + 99, .expires_at_ms = kT0 + 60000}));
  EXPECT_EQ(state.queue_expires_at_ms, kT0 + 3000);
  // w1's ticket expires at kT0 + 100 (live while now < expiry): its place is free.
  EXPECT_REPLY(LeaseStep(state, Wait("w3", 1, 3000, 2), kT0 + 100),
               Waiting(1, kT0 + 100, kT0 + 60000));
  EXPECT_EQ(state.tickets.count("w1"), 0u);
  // w1 comes back: a new ticket, at the back.
  EXPECT_REPLY(LeaseStep(state, Wait("w1", 1, 3000, 3), kT0 + 101),
               Waiting(2, kT0 + 101, kT0 + 60000));
  // Leaving drops the ticket; the others move up.
  EXPECT_REPLY(LeaseStep(state, {.op = LeaseOp::kLeave, .token = "w2"}, kT0 + 102),
               (LeaseReply{.code = 1, .count = 2, .now_ms = kT0 + 102}));
  EXPECT_REPLY(LeaseStep(state, Wait("w3", 1, 3000, 3), kT0 + 103),
               Waiting(0, kT0 + 103, kT0 + 60000));
}

TEST(LeaseStep, LimitOneTakesOneLease) {
  LeaseSetState state;
  EXPECT_REPLY(LeaseStep(state, Acquire("a", 1, 10), kT0), Granted(1, kT0, kT0 + 10));
  EXPECT_REPLY(LeaseStep(state, Acquire("b", 1, 10), kT0), Refused(1, kT0, kT0 + 10));
  EXPECT_REPLY(LeaseStep(state, Acquire("c", 1, 1), kT0 + 9), Refused(1, kT0 + 9, kT0 + 10));
  EXPECT_REPLY(LeaseStep(state, Acquire("d", 1, 1), kT0 + 10), Granted(1, kT0 + 10, kT0 + 11));
  EXPECT_EQ(state.members,
            (std::map<std::string, int64_t>{{LeaseMember(kT0 + 10, "d"), kT0 + 11}}));
}

TEST(LeaseStep, ALeaseIsLiveUntilOneMsBeforeItsExpiry) {
  const int64_t e = kT0 + 250;
  const std::string a = LeaseMember(kT0, "a");
  {
    LeaseSetState state;
    LeaseStep(state, Acquire("a", 1, 250), kT0);
    // 1 ms before: live everywhere.
    EXPECT_REPLY(LeaseStep(state, List(), e - 1), Listed(e - 1, {{a, e}}));
    EXPECT_REPLY(LeaseStep(state, Acquire("b", 1, 50), e - 1), Refused(1, e - 1, e));
    EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 1), e - 1), Live(e - 1, e));  // e - 1 + 1 == e
    EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 2), e - 1), Live(e - 1, e + 1));
  }
  {
    LeaseSetState state;
    LeaseStep(state, Acquire("a", 1, 250), kT0);
    // At the expiry: gone everywhere.
    EXPECT_REPLY(LeaseStep(state, List(), e), Listed(e, {}));
    EXPECT_REPLY(LeaseStep(state, ReleaseAll(), e), Done(0, e));
  }
  {
    LeaseSetState state;
    LeaseStep(state, Acquire("a", 1, 250), kT0);
    EXPECT_REPLY(LeaseStep(state, Acquire("b", 1, 50), e), Granted(1, e, e + 50));
    EXPECT_EQ(state.members, (std::map<std::string, int64_t>{{LeaseMember(e, "b"), e + 50}}));
  }
  {
    LeaseSetState state;
    LeaseStep(state, Acquire("a", 1, 250), kT0);
    EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 1000), e), Gone(e));
  }
}

TEST(LeaseStep, OnlyAcquirePrunes) {
  LeaseSetState state;
  LeaseStep(state, Acquire("a", 5, 100), kT0);       // expires kT0 + 100
  LeaseStep(state, Acquire("b", 5, 200), kT0);       // expires kT0 + 200
  LeaseStep(state, Acquire("c", 5, 1000), kT0);      // expires kT0 + 1000
  LeaseStep(state, Acquire("d", 5, 2000), kT0 + 1);  // expires kT0 + 2001
  ASSERT_EQ(state.members.size(), 4u);

  // Past a and b: list, release-all's count and a heartbeat of another lease skip them
  // but leave them stored.
  const int64_t t = kT0 + 200;
  EXPECT_REPLY(LeaseStep(state, List(), t), Listed(t, {{LeaseMember(kT0, "c"), kT0 + 1000},
                                                       {LeaseMember(kT0 + 1, "d"), kT0 + 2001}}));
  EXPECT_REPLY(LeaseStep(state, Heartbeat(LeaseMember(kT0, "c"), 10), t), Live(t, kT0 + 1000));
  EXPECT_REPLY(LeaseStep(state, Release("unknown"), t), Done(0, t));
  EXPECT_EQ(state.members.size(), 4u) << Show(state);

  // A refused acquire prunes too: 2 live of limit 2, refused, a and b gone from the set.
  EXPECT_REPLY(LeaseStep(state, Acquire("e", 2, 10), t), Refused(2, t, kT0 + 1000));
  EXPECT_EQ(state.members,
            (std::map<std::string, int64_t>{{LeaseMember(kT0, "c"), kT0 + 1000},
                                            {LeaseMember(kT0 + 1, "d"), kT0 + 2001}}));
  // A granted one prunes c at its expiry and counts only the live.
  EXPECT_REPLY(LeaseStep(state, Acquire("f", 2, 10), kT0 + 1000),
               Granted(2, kT0 + 1000, kT0 + 1010));
  EXPECT_EQ(state.members,
            (std::map<std::string, int64_t>{{LeaseMember(kT0 + 1, "d"), kT0 + 2001},
                                            {LeaseMember(kT0 + 1000, "f"), kT0 + 1010}}));
  // Everything expired: the set empties and the grant counts 1.
  EXPECT_REPLY(LeaseStep(state, Acquire("g", 1, 5), kT0 + 5000),
               Granted(1, kT0 + 5000, kT0 + 5005));
  EXPECT_EQ(state.members.size(), 1u);
}

TEST(LeaseStep, HeartbeatMovesTheExpiryOnlyForward) {
  LeaseSetState state;
  const std::string a = LeaseMember(kT0, "a");
  EXPECT_REPLY(LeaseStep(state, Acquire("a", 2, 1000), kT0), Granted(1, kT0, kT0 + 1000));
  // Shorter ttl: kept, never moved back.
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 500), kT0 + 100), Live(kT0 + 100, kT0 + 1000));
  EXPECT_EQ(state.members.at(a), kT0 + 1000);
  // Reaching exactly the current expiry: kept.
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 900), kT0 + 100), Live(kT0 + 100, kT0 + 1000));
  // 1 ms further: moved.
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 901), kT0 + 100), Live(kT0 + 100, kT0 + 1001));
  // Longer ttl: moved forward.
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 2000), kT0 + 100), Live(kT0 + 100, kT0 + 2100));
  EXPECT_EQ(state.members.at(a), kT0 + 2100);
  // A late heartbeat with a short ttl after that: kept at the later expiry.
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 10), kT0 + 2000), Live(kT0 + 2000, kT0 + 2100));
  EXPECT_EQ(state.members.at(a), kT0 + 2100);
  // The extended lease holds its slot past its first expiry.
  EXPECT_REPLY(LeaseStep(state, Acquire("b", 1, 10), kT0 + 1500),
               Refused(1, kT0 + 1500, kT0 + 2100));
  EXPECT_EQ(state.members.size(), 1u);
}

TEST(LeaseStep, HeartbeatOfAReleasedLeaseIsGoneAndDoesNotReviveIt) {
  LeaseSetState state;
  const std::string a = LeaseMember(kT0, "a");
  LeaseStep(state, Acquire("a", 1, 1000), kT0);
  EXPECT_REPLY(LeaseStep(state, Release(a), kT0 + 10), Done(0, kT0 + 10));
  EXPECT_TRUE(state.members.empty());
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 5000), kT0 + 20), Gone(kT0 + 20));
  EXPECT_TRUE(state.members.empty()) << Show(state);
  EXPECT_REPLY(LeaseStep(state, List(), kT0 + 20), Listed(kT0 + 20, {}));
  EXPECT_REPLY(LeaseStep(state, Acquire("b", 1, 10), kT0 + 20), Granted(1, kT0 + 20, kT0 + 30));
}

TEST(LeaseStep, HeartbeatOfAnExpiredUnprunedLeaseIsGoneForGood) {
  LeaseSetState state;
  const std::string a = LeaseMember(kT0, "a");
  const std::string b = LeaseMember(kT0, "b");
  LeaseStep(state, Acquire("a", 2, 100), kT0);
  LeaseStep(state, Acquire("b", 2, 500), kT0);
  // a expired at kT0 + 100 but no acquire has pruned it yet.
  ASSERT_EQ(state.members.count(a), 1u);
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 10'000), kT0 + 150), Gone(kT0 + 150));
  EXPECT_EQ(state.members, (std::map<std::string, int64_t>{{b, kT0 + 500}}))
      << "removed, not revived";
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 10'000), kT0 + 150), Gone(kT0 + 150));
  EXPECT_REPLY(LeaseStep(state, List(), kT0 + 150), Listed(kT0 + 150, {{b, kT0 + 500}}));
  // Its slot is free for the next acquire (limit 2: b and the new one).
  EXPECT_REPLY(LeaseStep(state, Acquire("c", 2, 10), kT0 + 150), Granted(2, kT0 + 150, kT0 + 160));
  // The other lease is untouched.
  EXPECT_REPLY(LeaseStep(state, Heartbeat(b, 1), kT0 + 150), Live(kT0 + 150, kT0 + 500));
}

TEST(LeaseStep, HeartbeatAtTheExpiryIsGoneAndTheSlotIsFree) {
  LeaseSetState state;
  const std::string a = LeaseMember(kT0, "a");
  LeaseStep(state, Acquire("a", 1, 100), kT0);
  EXPECT_REPLY(LeaseStep(state, Heartbeat(a, 100), kT0 + 100), Gone(kT0 + 100));
  EXPECT_TRUE(state.members.empty());
  EXPECT_REPLY(LeaseStep(state, Acquire("b", 1, 10), kT0 + 100), Granted(1, kT0 + 100, kT0 + 110));
}

TEST(LeaseStep, HeartbeatOfAnUnknownMemberIsGone) {
  LeaseSetState state;
  EXPECT_REPLY(LeaseStep(state, Heartbeat("1:nobody", 100), kT0), Gone(kT0));
  EXPECT_TRUE(state.members.empty());
  LeaseStep(state, Acquire("a", 3, 100), kT0);
  // The token alone is not the member: the acquisition time is part of it.
  EXPECT_REPLY(LeaseStep(state, Heartbeat("a", 100), kT0), Gone(kT0));
  EXPECT_REPLY(LeaseStep(state, Heartbeat(LeaseMember(kT0 + 1, "a"), 100), kT0), Gone(kT0));
  EXPECT_EQ(state.members.size(), 1u);
}

TEST(LeaseStep, ReleaseIsIdempotent) {
  LeaseSetState state;
  const std::string a = LeaseMember(kT0, "a");
  const std::string b = LeaseMember(kT0, "b");
  LeaseStep(state, Acquire("a", 2, 100), kT0);
  LeaseStep(state, Acquire("b", 2, 100), kT0);
  EXPECT_REPLY(LeaseStep(state, Release(a), kT0 + 1), Done(0, kT0 + 1));
  EXPECT_EQ(state.members, (std::map<std::string, int64_t>{{b, kT0 + 100}}));
  EXPECT_REPLY(LeaseStep(state, Release(a), kT0 + 2), Done(0, kT0 + 2));
  EXPECT_REPLY(LeaseStep(state, Release("never"), kT0 + 2), Done(0, kT0 + 2));
  EXPECT_EQ(state.members, (std::map<std::string, int64_t>{{b, kT0 + 100}}));
  // Releasing an expired, unpruned lease removes it too.
  EXPECT_REPLY(LeaseStep(state, Release(b), kT0 + 500), Done(0, kT0 + 500));
  EXPECT_TRUE(state.members.empty());
  EXPECT_REPLY(LeaseStep(state, Release(b), kT0 + 500), Done(0, kT0 + 500));
}

TEST(LeaseStep, ReleaseAllCountsOnlyLiveLeases) {
  LeaseSetState state;
  EXPECT_REPLY(LeaseStep(state, ReleaseAll(), kT0), Done(0, kT0));
  LeaseStep(state, Acquire("a", 5, 100), kT0);   // expired at kT0 + 100
  LeaseStep(state, Acquire("b", 5, 101), kT0);   // live at kT0 + 100 (1 ms left)
  LeaseStep(state, Acquire("c", 5, 5000), kT0);  // live
  LeaseStep(state, Acquire("d", 5, 50), kT0);    // expired
  EXPECT_REPLY(LeaseStep(state, ReleaseAll(), kT0 + 100), Done(2, kT0 + 100));
  EXPECT_TRUE(state.members.empty()) << "expired ones are removed too";
  EXPECT_REPLY(LeaseStep(state, ReleaseAll(), kT0 + 100), Done(0, kT0 + 100));
  EXPECT_REPLY(LeaseStep(state, Acquire("e", 1, 10), kT0 + 100), Granted(1, kT0 + 100, kT0 + 110));
}

TEST(LeaseStep, ListIsTheLiveLeasesByExpiryThenMember) {
  LeaseSetState state;
  EXPECT_REPLY(LeaseStep(state, List(), kT0), Listed(kT0, {}));
  // Same expiry: ties ordered by member bytes ("B" < "a" < "\xff..."), whatever the
  // acquisition order. Members that sort one way by string sort the other by expiry.
  LeaseStep(state, Acquire("z", 9, 300), kT0);        // kT0:z       @ kT0 + 300
  LeaseStep(state, Acquire("a", 9, 200), kT0 + 100);  // kT0+100:a   @ kT0 + 300
  LeaseStep(state,
            Acquire("\xff"
                    "x",
                    9, 200),
            kT0 + 100);                               // kT0+100:\xffx @ kT0 + 300
  LeaseStep(state, Acquire("B", 9, 200), kT0 + 100);  // kT0+100:B   @ kT0 + 300
  LeaseStep(state, Acquire("m", 9, 50), kT0 + 100);   // kT0+100:m   @ kT0 + 150
  LeaseStep(state, Acquire("q", 9, 9000), kT0);       // kT0:q       @ kT0 + 9000
  LeaseStep(state, Acquire("old", 9, 20), kT0);       // kT0:old     @ kT0 + 20 (expired)
  const int64_t t = kT0 + 149;
  const std::vector<LeaseRow> want = {
      {LeaseMember(kT0 + 100, "m"), kT0 + 150},
      {LeaseMember(kT0, "z"), kT0 + 300},  // "1700000000123:z" < "1700000000223:B"
      {LeaseMember(kT0 + 100, "B"), kT0 + 300},
      {LeaseMember(kT0 + 100, "a"), kT0 + 300},
      {LeaseMember(kT0 + 100,
                   "\xff"
                   "x"),
       kT0 + 300},
      {LeaseMember(kT0, "q"), kT0 + 9000},
  };
  EXPECT_REPLY(LeaseStep(state, List(), t), Listed(t, want));
  EXPECT_EQ(state.members.size(), 7u) << "list does not prune";
  // At m's expiry it leaves the list.
  EXPECT_REPLY(LeaseStep(state, List(), kT0 + 150),
               Listed(kT0 + 150, std::vector<LeaseRow>(want.begin() + 1, want.end())));
  EXPECT_REPLY(LeaseStep(state, List(), kT0 + 9000), Listed(kT0 + 9000, {}));
}

TEST(LeaseStep, RepliesCarryTheStepsTime) {
  LeaseSetState state;
  for (int64_t now : {int64_t{0}, int64_t{1}, kT0, int64_t{1} << 50}) {
    EXPECT_EQ(LeaseStep(state, Acquire("t" + std::to_string(now), 1, 1), now).now_ms, now);
    EXPECT_EQ(LeaseStep(state, Heartbeat("x", 1), now).now_ms, now);
    EXPECT_EQ(LeaseStep(state, Release("x"), now).now_ms, now);
    EXPECT_EQ(LeaseStep(state, List(), now).now_ms, now);
    EXPECT_EQ(LeaseStep(state, ReleaseAll(), now).now_ms, now);
  }
}

#undef EXPECT_REPLY

}  // namespace
}  // namespace sluice::internal::concurrency_test

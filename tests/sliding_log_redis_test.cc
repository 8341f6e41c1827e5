// The sliding log on a real redis-server through the public API: exact trailing-window
// semantics, cost n, peek/refund/reset, the sorted set's layout (unique members even in
// one millisecond), its TTL rule (expires when the newest entry leaves the window; a key
// that lost its TTL gets it back), and exactness under processes x threads.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/processes.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"

namespace sluice::sliding_log_redis_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::RedisServer;

constexpr char kPrefix[] = "sltest";

Limit SlidingLog(int64_t limit, milliseconds window) {
  return Limit{.algorithm = Algorithm::kSlidingLog, .limit = limit, .window = window};
}

// Member -> cost, as the script writes them: "<len letter><start>[:<cost>]".
int64_t MemberCost(const std::string& member) {
  const auto sep = member.find(':');
  return sep == std::string::npos ? 1 : std::stoll(member.substr(sep + 1));
}

// Member -> start: the digits after the length letter, up to ':'.
int64_t MemberStart(const std::string& member) {
  return std::stoll(member.substr(1, member.find(':') - 1));
}

class SlidingLogRedis : public testing::RedisAlgorithmTest {
 protected:
  // No denial cache: these tests hold the script's own replies (every retry_after, every
  // TTL repair) to the contract, so every call must reach Redis.
  SlidingLogRedis()
      : RedisAlgorithmTest(kPrefix, {.deadline = milliseconds(2000), .denial_cache_size = 0}) {}
  // The log's members, oldest first.
  std::vector<std::string> Members(const std::string& key) const {
    std::vector<std::string> members;
    for (const auto& e : server_.Command({"ZRANGE", key, "0", "-1"}).elements) {
      members.push_back(e.str);
    }
    return members;
  }
  int64_t UnitsStored(const std::string& key) const {
    int64_t units = 0;
    for (const auto& m : Members(key)) units += MemberCost(m);
    return units;
  }
};

TEST_F(SlidingLogRedis, AdmitsTheLimitAndDoesNotCountRefusals) {
  auto limiter = *Connect()->MakeLimiter("login", SlidingLog(3, seconds(60)));
  for (int i = 2; i >= 0; --i) {
    auto d = limiter.Check("account:101");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->remaining, i);
    EXPECT_EQ(d->limit, 3);
    EXPECT_EQ(d->source, DecisionSource::kStore);
    EXPECT_GT(d->reset_after, milliseconds(59'000));
    EXPECT_LE(d->reset_after, milliseconds(60'000));
  }
  for (int i = 0; i < 5; ++i) {
    auto d = limiter.Check("account:101");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->reason, RefusalReason::kOverLimit);
    EXPECT_GT(d->retry_after, milliseconds(0));
    EXPECT_LE(d->retry_after, d->reset_after);
  }
  const std::string key = *limiter.KeyFor("account:101");
  EXPECT_EQ(key, "sltest:{login:account:101}:sl");
  EXPECT_EQ(server_.Command({"ZCARD", key}).integer, 3) << "a refusal left an entry";
  EXPECT_TRUE(limiter.Check("account:402")->allowed) << "another id has its own log";
}

TEST_F(SlidingLogRedis, EachEntryLeavesExactlyOneWindowAfterItsAdmission) {
  auto clock = std::make_shared<testing::FakeClock>(1'000'000'000);
  auto limiter = *Connect(clock)->MakeLimiter("edge", SlidingLog(2, seconds(10)));
  EXPECT_TRUE(limiter.Check("x")->allowed);  // t0
  clock->Advance(milliseconds(3'000));
  EXPECT_TRUE(limiter.Check("x")->allowed);  // t0 + 3 s
  clock->Advance(milliseconds(6'999));       // 1 ms before the first entry leaves
  auto before = limiter.Check("x");
  EXPECT_FALSE(before->allowed);
  EXPECT_EQ(before->retry_after, milliseconds(1));
  EXPECT_EQ(before->reset_after, milliseconds(3'001));
  clock->Advance(milliseconds(1));  // t0 + 10 s: the first entry has left, the second not
  auto at = limiter.Check("x");
  EXPECT_TRUE(at->allowed);
  EXPECT_EQ(at->remaining, 0);
  EXPECT_EQ(at->reset_after, milliseconds(10'000));
  auto next = limiter.Check("x");
  EXPECT_FALSE(next->allowed);
  EXPECT_EQ(next->retry_after, milliseconds(3'000)) << "the t0 + 3 s entry leaves next";
  const std::string key = *limiter.KeyFor("x");
  EXPECT_EQ(server_.Command({"ZCARD", key}).integer, 2) << "the entry that left was pruned";
  // 1 ms before and at the newest entry's departure the log is non-empty, then empty.
  clock->Advance(milliseconds(9'999));
  auto last = limiter.Peek("x");
  EXPECT_TRUE(last->allowed);
  EXPECT_EQ(last->remaining, 1);
  EXPECT_EQ(last->reset_after, milliseconds(1));
  clock->Advance(milliseconds(1));
  auto empty = limiter.Peek("x");
  EXPECT_EQ(empty->remaining, 2);
  EXPECT_EQ(empty->reset_after, milliseconds(0));
  EXPECT_TRUE(server_.Keys(key).empty()) << "an empty log is deleted by the call that reads it";
}

TEST_F(SlidingLogRedis, CostIsAllOrNothingAndRetryAfterIsExact) {
  auto clock = std::make_shared<testing::FakeClock>(2'000'000'000);
  auto limiter = *Connect(clock)->MakeLimiter("upload", SlidingLog(10, seconds(1)));
  // Units: 3 at t0, 2 at +100, 1 at +200, 4 at +300.
  for (int64_t cost : {3, 2, 1, 4}) {
    ASSERT_TRUE(limiter.Check("u", {.cost = cost})->allowed) << cost;
    clock->Advance(milliseconds(100));
  }
  // At +400, a request of n must wait for the oldest entries holding n units to leave.
  const std::vector<std::pair<int64_t, int64_t>> retry_for_cost = {
      {1, 600}, {3, 600}, {4, 700}, {5, 700}, {6, 800}, {7, 900}, {10, 900}};
  for (auto [cost, retry_ms] : retry_for_cost) {
    auto d = limiter.Check("u", {.cost = cost});
    EXPECT_FALSE(d->allowed) << cost;
    EXPECT_EQ(d->reason, RefusalReason::kOverLimit);
    EXPECT_EQ(d->remaining, 0);
    EXPECT_EQ(d->retry_after, milliseconds(retry_ms)) << "cost " << cost;
    EXPECT_EQ(d->reset_after, milliseconds(900));
  }
  EXPECT_EQ(UnitsStored(*limiter.KeyFor("u")), 10) << "a refusal consumed something";
  // Exactly at the retry moment of cost 4 (after +100's entry leaves: 5 units free).
  clock->Advance(milliseconds(699));
  EXPECT_FALSE(limiter.Check("u", {.cost = 4})->allowed);
  clock->Advance(milliseconds(1));
  auto fits = limiter.Check("u", {.cost = 4});
  EXPECT_TRUE(fits->allowed);
  EXPECT_EQ(fits->remaining, 1);
  // Larger than the limit: refused as such, and no key is created for a new id.
  auto too_big = limiter.Check("v", {.cost = 11});
  EXPECT_FALSE(too_big->allowed);
  EXPECT_EQ(too_big->reason, RefusalReason::kCostExceedsLimit);
  EXPECT_TRUE(server_.Keys(*limiter.KeyFor("v")).empty()) << "a refusal created a key";
}

TEST_F(SlidingLogRedis, AdmissionsInOneMillisecondAreDistinctMembers) {
  auto clock = std::make_shared<testing::FakeClock>(3'000'000'000);  // time stands still
  auto limiter = *Connect(clock)->MakeLimiter("same", SlidingLog(100, seconds(5)));
  const std::vector<int64_t> costs = {1, 1, 3, 1, 12, 1, 1, 7, 1, 1, 1};
  int64_t total = 0;
  for (int64_t cost : costs) {
    ASSERT_TRUE(limiter.Check("s", {.cost = cost})->allowed);
    total += cost;
  }
  const std::string key = *limiter.KeyFor("s");
  auto entries = server_.Command({"ZRANGE", key, "0", "-1", "WITHSCORES"}).elements;
  ASSERT_EQ(entries.size(), 2 * costs.size()) << "one member per admission";
  std::set<std::string> members;
  std::vector<int64_t> stored_costs;
  for (size_t i = 0; i < entries.size(); i += 2) {
    members.insert(entries[i].str);
    stored_costs.push_back(MemberCost(entries[i].str));
    EXPECT_EQ(entries[i + 1].str, "3000000000") << "the score is the admission time";
  }
  EXPECT_EQ(members.size(), costs.size()) << "members are unique";
  EXPECT_EQ(stored_costs, costs) << "members of one millisecond sort in admission order";
  auto d = limiter.Peek("s");
  EXPECT_EQ(d->remaining, 100 - total);
  // Refunds take back the newest units first, also within one millisecond.
  auto r = limiter.Refund("s", 9);  // the newest 1 + 1 + 1, and 6 of the 7 before them
  EXPECT_EQ(r->remaining, 100 - total + 9);
  EXPECT_EQ(UnitsStored(key), total - 9);
  EXPECT_EQ(Members(key).size(), costs.size() - 3);
  EXPECT_EQ(MemberCost(Members(key).back()), 1) << "the 7-unit entry keeps 1 unit";
}

TEST_F(SlidingLogRedis, SameMillisecondMembersAreUniqueUnderConcurrentCallers) {
  // Real Redis clock: many threads admit within the same milliseconds.
  auto limiter = *Connect()->MakeLimiter("burst", SlidingLog(100'000, seconds(60)));
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        auto d = limiter.Check("hot");
        if (d.ok() && d->allowed) ++admitted;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 2000);
  const std::string key = *limiter.KeyFor("hot");
  EXPECT_EQ(server_.Command({"ZCARD", key}).integer, 2000);
  auto scores = server_.Command({"ZRANGE", key, "0", "-1", "WITHSCORES"}).elements;
  std::set<std::string> distinct_scores;
  for (size_t i = 1; i < scores.size(); i += 2) distinct_scores.insert(scores[i].str);
  EXPECT_LT(distinct_scores.size(), 2000u) << "expected several admissions per millisecond";
  EXPECT_EQ(limiter.Peek("hot")->remaining, 100'000 - 2000);
}

TEST_F(SlidingLogRedis, KeyExpiresWhenItsNewestEntryLeavesTheWindow) {
  auto limiter = *Connect()->MakeLimiter("ttl", SlidingLog(5, seconds(30)));
  ASSERT_TRUE(limiter.Check("k")->allowed);
  ASSERT_TRUE(limiter.Check("k")->allowed);
  const std::string key = *limiter.KeyFor("k");
  auto newest = server_.Command({"ZRANGE", key, "-1", "-1", "WITHSCORES"}).elements;
  ASSERT_EQ(newest.size(), 2u);
  // PEXPIRE is relative to Redis's command clock, which may trail the script's TIME by
  // a millisecond.
  const long long leaves = std::stoll(newest[1].str) + 30'000;
  EXPECT_NEAR(server_.Command({"PEXPIRETIME", key}).integer, leaves, 1);
  // A refusal leaves the expiry where it is (it writes nothing).
  ASSERT_TRUE(limiter.Check("k", {.cost = 3})->allowed);
  const long long expiry = server_.Command({"PEXPIRETIME", key}).integer;
  EXPECT_FALSE(limiter.Check("k")->allowed);
  EXPECT_EQ(server_.Command({"PEXPIRETIME", key}).integer, expiry);
  // Another window in force moves the expiry to when the newest entry leaves that one.
  EXPECT_FALSE(limiter.Check("k", {.limit = SlidingLog(5, seconds(90))})->allowed);
  EXPECT_NEAR(server_.Command({"PEXPIRETIME", key}).integer, expiry + 60'000, 2);
}

TEST_F(SlidingLogRedis, KeyThatLostItsExpiryGetsItBackOnTouch) {
  auto limiter = *Connect()->MakeLimiter("persist", SlidingLog(2, seconds(20)));
  const std::string key = *limiter.KeyFor("victim");
  auto expect_expiry_restored = [&](const char* path) {
    long long pttl = server_.Command({"PTTL", key}).integer;
    EXPECT_GT(pttl, 0) << path;
    EXPECT_LE(pttl, 20'000) << path;
  };
  // Admitted path.
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  ASSERT_EQ(server_.Command({"PTTL", key}).integer, -1);
  ASSERT_TRUE(limiter.Check("victim")->allowed);
  expect_expiry_restored("admitted");
  // Refused path.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  EXPECT_FALSE(limiter.Check("victim")->allowed);
  expect_expiry_restored("refused");
  // Peek, and a cost above the limit.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  EXPECT_FALSE(limiter.Peek("victim")->allowed);
  expect_expiry_restored("peek");
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  EXPECT_EQ(limiter.Check("victim", {.cost = 3})->reason, RefusalReason::kCostExceedsLimit);
  expect_expiry_restored("cost above limit");
  // Refund.
  ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
  EXPECT_EQ(limiter.Refund("victim", 1)->remaining, 1);
  expect_expiry_restored("refund");
}

TEST_F(SlidingLogRedis, LogSeededWithoutTtlGetsOneOrIsDeletedWhenStale) {
  auto limiter = *Connect()->MakeLimiter("seeded", SlidingLog(3, seconds(60)));
  const std::string key = *limiter.KeyFor("s");
  // A live log written without a TTL (e.g. restored from an old dump): two recent units.
  const long long now_ms = std::stoll(server_.Command({"TIME"}).elements[0].str) * 1000;
  ASSERT_EQ(server_
                .Command({"ZADD", key, std::to_string(now_ms - 1000), "a0",
                          std::to_string(now_ms - 500), "a1"})
                .integer,
            2);
  ASSERT_EQ(server_.Command({"PTTL", key}).integer, -1);
  auto d = limiter.Check("s");
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 0) << "the seeded entries count";
  EXPECT_GT(server_.Command({"PTTL", key}).integer, 59'000);
  // A log whose entries have all left the window is deleted by the call that reads it.
  const std::string stale = *limiter.KeyFor("stale");
  ASSERT_EQ(server_.Command({"ZADD", stale, std::to_string(now_ms - 120'000), "a0"}).integer, 1);
  auto p = limiter.Peek("stale");
  EXPECT_EQ(p->remaining, 3);
  EXPECT_TRUE(server_.Keys(stale).empty());
  // A value sluice did not write (not a sorted set) is replaced, not an error.
  const std::string foreign = *limiter.KeyFor("foreign");
  ASSERT_EQ(server_.Command({"SET", foreign, "hello"}).str, "OK");
  auto f = limiter.Check("foreign");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->allowed);
  EXPECT_EQ(server_.Command({"TYPE", foreign}).str, "zset");
}

TEST_F(SlidingLogRedis, PeekRefundAndReset) {
  auto clock = std::make_shared<testing::FakeClock>(4'000'000'000);
  auto limiter = *Connect(clock)->MakeLimiter("ops", SlidingLog(5, seconds(10)));
  auto peek = limiter.Peek("p", {.cost = 5});
  EXPECT_TRUE(peek->allowed);
  EXPECT_EQ(peek->remaining, 5);
  EXPECT_TRUE(server_.Keys(*limiter.KeyFor("p")).empty()) << "peek wrote state";
  ASSERT_TRUE(limiter.Check("p", {.cost = 2})->allowed);
  clock->Advance(milliseconds(1'000));
  ASSERT_TRUE(limiter.Check("p", {.cost = 3})->allowed);
  auto full = limiter.Peek("p");
  EXPECT_FALSE(full->allowed);
  EXPECT_EQ(full->retry_after, milliseconds(9'000));
  // Refund 2 of the newest entry's 3: it keeps its time; the log still ends at +1 s.
  auto r = limiter.Refund("p", 2);
  EXPECT_TRUE(r->allowed);
  EXPECT_EQ(r->remaining, 2);
  EXPECT_EQ(r->reset_after, milliseconds(10'000));
  // Refund 2 more: the newest entry goes, the oldest keeps 1 unit; the key's expiry moves
  // back to when that entry leaves.
  r = limiter.Refund("p", 2);
  EXPECT_EQ(r->remaining, 4);
  EXPECT_EQ(r->reset_after, milliseconds(9'000));
  EXPECT_EQ(Members(*limiter.KeyFor("p")), std::vector<std::string>{"a0"});
  // Refunding more than is held empties the log, never above the limit.
  r = limiter.Refund("p", 100);
  EXPECT_EQ(r->remaining, 5);
  EXPECT_TRUE(server_.Keys(*limiter.KeyFor("p")).empty());
  EXPECT_EQ(limiter.Refund("p", 1)->remaining, 5) << "a refund on an empty log is a no-op";
  // Reset.
  ASSERT_TRUE(limiter.Check("p", {.cost = 5})->allowed);
  EXPECT_FALSE(limiter.Check("p")->allowed);
  auto reset = limiter.Reset("p");
  EXPECT_TRUE(reset->allowed);
  EXPECT_EQ(reset->remaining, 5);
  EXPECT_TRUE(server_.Keys(*limiter.KeyFor("p")).empty());
  EXPECT_TRUE(limiter.Check("p", {.cost = 5})->allowed);
}

TEST_F(SlidingLogRedis, PlanChangeAppliesOnTheNextCallWithoutReset) {
  auto limiter = *Connect()->MakeLimiter("plan", SlidingLog(2, seconds(60)));
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_TRUE(limiter.Check("acct")->allowed);
  ASSERT_FALSE(limiter.Check("acct")->allowed);
  auto up = limiter.Check("acct", {.limit = SlidingLog(4, seconds(60))});
  EXPECT_TRUE(up->allowed);
  EXPECT_EQ(up->remaining, 1);
  auto down = limiter.Check("acct", {.limit = SlidingLog(1, seconds(60))});
  EXPECT_FALSE(down->allowed);
  EXPECT_EQ(down->remaining, 0);
  EXPECT_EQ(down->reason, RefusalReason::kOverLimit);
  EXPECT_EQ(server_.Command({"ZCARD", *limiter.KeyFor("acct")}).integer, 3);
}

TEST_F(SlidingLogRedis, AClockThatStepsBackCannotReorderTheLog) {
  auto clock = std::make_shared<testing::FakeClock>(6'000'000'500);
  auto limiter = *Connect(clock)->MakeLimiter("back", SlidingLog(3, seconds(1)));
  ASSERT_TRUE(limiter.Check("b")->allowed);
  clock->Set(6'000'000'200);  // 300 ms back
  auto d = limiter.Check("b", {.cost = 2});
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 0);
  EXPECT_EQ(d->reset_after, milliseconds(1'300)) << "filed at the newest time, not earlier";
  const std::string key = *limiter.KeyFor("b");
  auto entries = server_.Command({"ZRANGE", key, "0", "-1", "WITHSCORES"}).elements;
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[1].str, "6000000500");
  EXPECT_EQ(entries[2].str, "a1:2");
  EXPECT_EQ(entries[3].str, "6000000500");
  EXPECT_GT(server_.Command({"PTTL", key}).integer, 60'000) << "model clock: expiry + grace";
}

TEST_F(SlidingLogRedis, StartsAreRenumberedLongBeforeDoublesLoseThem) {
  // Largest limit and costs, entries overlapping so the log is never empty: starts grow
  // by 2^39 per request and are renumbered after about 2^11 of them.
  auto clock = std::make_shared<testing::FakeClock>(5'000'000'000);
  const int64_t limit = kMaxLimit;
  auto limiter = *Connect(clock)->MakeLimiter("huge", SlidingLog(limit, milliseconds(2)));
  const std::string key = *limiter.KeyFor("h");
  int64_t highest_start = 0;
  bool renumbered = false;
  for (int i = 0; i < 2100; ++i) {
    auto d = limiter.Check("h", {.cost = limit / 2});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ASSERT_TRUE(d->allowed) << "request " << i;
    ASSERT_EQ(d->remaining, i == 0 ? limit / 2 : 0) << "request " << i;
    const int64_t start = MemberStart(Members(key).back());
    ASSERT_LE(start + limit / 2, int64_t{1} << 50) << "request " << i;
    if (start < highest_start) renumbered = true;
    highest_start = std::max(highest_start, start);
    clock->Advance(milliseconds(1));
  }
  EXPECT_TRUE(renumbered);
  // Decisions did not notice: the last two entries fill the window.
  clock->Advance(milliseconds(-1));
  auto d = limiter.Peek("h");
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->retry_after, milliseconds(1));
  EXPECT_EQ(server_.Command({"ZCARD", key}).integer, 2);
}

// In a child process: `threads` threads each make `calls` checks on one id; returns the
// admitted cost, or -1 on any error.
int64_t Hammer(const std::string& url, int threads, int calls, int64_t limit, bool random_cost) {
  auto client = Client::Create({.url = url, .prefix = kPrefix, .deadline = milliseconds(2000)});
  if (!client.ok()) return -1;
  auto limiter = *(*client)->MakeLimiter("hot", SlidingLog(limit, seconds(300)));
  return testing::HammerOneId(limiter, threads, calls, random_cost, {});
}

int64_t RunProcesses(const RedisServer& server, int processes, int threads, int calls,
                     int64_t limit, bool random_cost) {
  return testing::SumOverChildren(
      processes, [&] { return Hammer(server.url(), threads, calls, limit, random_cost); });
}

TEST_F(SlidingLogRedis, ProcessesTimesThreadsAdmitExactlyTheLimit) {
  // 4 processes x 8 threads x 100 calls = 3200 attempts on a limit of 500.
  EXPECT_EQ(RunProcesses(server_, 4, 8, 100, 500, false), 500);
  const std::string key = std::string(kPrefix) + ":{hot:the-one-key}:sl";
  EXPECT_EQ(server_.Command({"ZCARD", key}).integer, 500);
}

TEST_F(SlidingLogRedis, MixedCostsUnderContentionNeverExceedTheLimit) {
  // Costs 1-3: the admitted total can stop short of the limit by at most 2 (what was left
  // was smaller than every later request), never go over it.
  const int64_t admitted = RunProcesses(server_, 3, 6, 100, 1000, true);
  EXPECT_LE(admitted, 1000);
  EXPECT_GE(admitted, 998);
  const std::string key = std::string(kPrefix) + ":{hot:the-one-key}:sl";
  EXPECT_EQ(UnitsStored(key), admitted)
      << "the stored log disagrees with what the callers were told";
}

}  // namespace
}  // namespace sluice::sliding_log_redis_test

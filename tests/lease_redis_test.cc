// Concurrency leases on a real redis-server: exact caps under concurrent acquires,
// heartbeats that keep a lease past its ttl, a release racing a heartbeat never
// resurrects, a paused holder learns its lease is lost, a Redis restart without its data
// takes the leases with it (and the holders learn it), the audited admin release, the
// failure policies, and no key left without an expiry.
#include <utility>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/client_core.h"
#include "redis/scripts.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/processes.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

using testing::Eventually;

std::shared_ptr<Client> Connect(const testing::RedisServer& server, ClientOptions o = {}) {
  o.prefix = "lt";
  if (o.deadline == milliseconds(5)) o.deadline = milliseconds(200);
  return testing::ConnectClient(server, std::move(o));
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sluice-lease-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(LeaseRedis, GrantsUpToTheLimitThenRefusesUntilAReleaseOrAnExpiry) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto streams = *client->MakeConcurrencyLimiter("streams", {.limit = 3, .lease_ttl = seconds(30)});
  std::vector<Lease> held;
  for (int i = 0; i < 3; ++i) {
    auto a = streams.Acquire("user:42");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(a->acquired);
    EXPECT_EQ(a->live, i + 1);
    EXPECT_EQ(a->source, DecisionSource::kStore);
    EXPECT_TRUE(a->lease.held());
    held.push_back(std::move(a->lease));
  }
  auto refused = streams.Acquire("user:42");
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->acquired);
  EXPECT_EQ(refused->reason, RefusalReason::kOverLimit);
  EXPECT_EQ(refused->live, 3);
  EXPECT_GT(refused->retry_after, seconds(29));
  EXPECT_LE(refused->retry_after, seconds(30));
  // Another id has its own slots.
  EXPECT_TRUE(streams.Acquire("user:43")->acquired);

  auto listed = streams.List("user:42");
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 3u);
  const int64_t now = server.NowMs();
  for (const LeaseInfo& info : *listed) {
    EXPECT_NEAR(static_cast<double>(info.acquired_at_ms), static_cast<double>(now), 5000.0);
    EXPECT_EQ(info.expires_at_ms - info.acquired_at_ms, 30000);
  }

  ASSERT_THAT(held[1].Release(), IsOk());
  EXPECT_THAT(held[1].Release(), IsOk());  // idempotent
  EXPECT_FALSE(held[1].held());
  EXPECT_EQ(held[1].loss(), LeaseLoss::kNone);  // released by its owner, not lost
  auto again = streams.Acquire("user:42");
  ASSERT_TRUE(again->acquired);
  EXPECT_EQ(again->live, 3);
  held.clear();  // the destructors release
  EXPECT_TRUE(Eventually([&] { return streams.List("user:42")->size() == 1; }));
  EXPECT_TRUE(server.KeysWithoutTtl("lt:*").empty());
}

TEST(LeaseRedis, ThreadsAcquiringAtOnceGetExactlyTheLimit) {
  testing::RedisServer server;
  auto client = Connect(server, {.io_threads = 2});
  auto cap = *client->MakeConcurrencyLimiter("cap", {.limit = 7});
  constexpr int kThreads = 48;
  for (int round = 0; round < 5; ++round) {
    const std::string id = "round" + std::to_string(round);
    std::barrier start(kThreads);
    std::atomic<int> granted{0}, refused{0}, errors{0};
    std::vector<Lease> leases(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        auto a = cap.Acquire(id);
        if (!a.ok()) {
          ++errors;
        } else if (a->acquired) {
          ++granted;
          leases[static_cast<size_t>(t)] = std::move(a->lease);
        } else {
          ++refused;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(granted.load(), 7) << "round " << round;
    EXPECT_EQ(refused.load(), kThreads - 7);
    EXPECT_EQ(cap.List(id)->size(), 7u);
  }
  EXPECT_TRUE(server.KeysWithoutTtl("lt:*").empty());
}

TEST(LeaseRedis, HeartbeatsKeepALeaseLiveLongPastItsTtl) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter(
      "hb", {.limit = 1, .lease_ttl = milliseconds(600), .heartbeat_interval = milliseconds(50)});
  auto a = cap.Acquire("job");
  ASSERT_TRUE(a->acquired);
  const auto first_expiry = (*cap.List("job"))[0].expires_at_ms;
  std::this_thread::sleep_for(milliseconds(2400));  // four ttls
  EXPECT_TRUE(a->lease.held());
  auto listed = cap.List("job");
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_GT((*listed)[0].expires_at_ms, first_expiry + 1600);
  EXPECT_FALSE(cap.Acquire("job")->acquired);  // the slot is still taken
  // The key's own expiry follows the lease's.
  const auto pttl = server.Command({"PTTL", *cap.KeyFor("job")}).integer;
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 600);
}

// Calls the script directly: the order in which a late heartbeat and a release reach
// Redis is whatever the network makes it.
testing::RedisValue Script(const testing::RedisServer& server, const std::string& key,
                           std::vector<std::string> argv) {
  std::vector<std::string> args = {"EVAL", std::string(internal::kConcurrencyLua), "1", key};
  for (auto& a : argv) args.push_back(std::move(a));
  return server.Command(args);
}

// The per-minute history of live leases (concurrency.lua, History) on a model clock: each
// minute's highest live count, from grants and extending heartbeats, bounded to 64 fields
// with an expiry; read back by Admin::Inspect as the last hour's minutes only.
TEST(LeaseRedis, TheHistoryKeepsEachMinutesHighestLiveCountBoundedAndExpiring) {
  testing::RedisServer server;
  const std::string key = "lt:{hist:job}:cc", history = "lt:{hist:job}:ch";
  const int64_t real_now = std::stoll(server.Command({"TIME"}).elements[0].str) * 1000;
  const int64_t start = (real_now / 60000 - 100) * 60000;  // a minute's start, 100 min ago
  const auto at = [&](int64_t minute, int64_t ms) {
    return std::to_string(start + minute * 60000 + ms);
  };
  // Minute 0: three grants, one released (ZREM), a heartbeat: the highest is 3.
  for (const char* token : {"a", "b", "c"})
    ASSERT_EQ(Script(server, key, {"0", at(0, 100), token, "10", "600000"}).elements[0].integer, 1);
  ASSERT_EQ(server.Command({"ZREM", key, at(0, 100) + ":c"}).integer, 1);
  ASSERT_EQ(
      Script(server, key, {"1", at(0, 500), at(0, 100) + ":a", "", "600000"}).elements[0].integer,
      1);
  const std::string field0 = std::to_string((start / 60000) % 64);
  EXPECT_EQ(server.Command({"HGET", history, field0}).str, std::to_string(start / 60000) + ":3");
  // Minute 1: a heartbeat sees two live leases.
  ASSERT_EQ(
      Script(server, key, {"1", at(1, 0), at(0, 100) + ":b", "", "600000"}).elements[0].integer, 1);
  const std::string field1 = std::to_string((start / 60000 + 1) % 64);
  EXPECT_EQ(server.Command({"HGET", history, field1}).str,
            std::to_string(start / 60000 + 1) + ":2");
  // A heartbeat in the minute of its lease's previous one writes nothing (grants wrote any rise).
  server.Command({"HDEL", history, field1});
  ASSERT_EQ(
      Script(server, key, {"1", at(1, 30000), at(0, 100) + ":b", "", "600000"}).elements[0].integer,
      1);
  EXPECT_EQ(server.Command({"HEXISTS", history, field1}).integer, 0);
  // 99 more minutes of heartbeats of both: never more than 64 fields, each slot reused.
  for (int64_t m = 2; m <= 100; ++m) {
    for (const char* token : {":a", ":b"}) {
      ASSERT_EQ(Script(server, key, {"1", at(m, 0), at(0, 100) + token, "", "600000"})
                    .elements[0]
                    .integer,
                1)
          << m;
    }
  }
  EXPECT_EQ(server.Command({"HLEN", history}).integer, 64);
  EXPECT_EQ(server.Command({"HGET", history, field0}).str,
            std::to_string(start / 60000 + 64) + ":2");
  const int64_t pttl = server.Command({"PTTL", history}).integer;
  EXPECT_GT(pttl, 3800000);
  EXPECT_LE(pttl, 3900000);
  // Inspect keeps the last hour's minutes (the real clock's): minutes 41 to 100 of the run.
  auto admin = Admin::Connect({.url = server.url(), .prefix = "lt"});
  ASSERT_THAT(admin.status(), IsOk());
  auto state = (*admin)->Inspect("hist", "job");
  ASSERT_THAT(state.status(), IsOk());
  const KeyState* kept = nullptr;
  for (const KeyState& k : state->keys)
    if (k.key == history) kept = &k;
  ASSERT_NE(kept, nullptr);
  // (Minute 41 unless the real clock's minute turned since TIME above.)
  const int64_t first = state->now_ms / 60000 - start / 60000 - 59;
  EXPECT_EQ(kept->fields.size(), static_cast<size_t>(101 - first));
  EXPECT_EQ(kept->fields.front().name, "max_live_at_" + std::to_string(start + first * 60000));
  EXPECT_EQ(kept->fields.back().name, "max_live_at_" + std::to_string(start + 100 * 60000));
  EXPECT_EQ(kept->used, 2);
  // A history key of another type is not sluice's: the next write replaces it.
  server.Command({"DEL", history});
  server.Command({"SET", history, "x"});
  ASSERT_EQ(
      Script(server, key, {"1", at(101, 0), at(0, 100) + ":a", "", "600000"}).elements[0].integer,
      1);
  EXPECT_EQ(server.Command({"TYPE", history}).str, "hash");
}

TEST(LeaseRedis, AReleasedLeaseNeverComesBackAndALateHeartbeatNeverMovesTimeBack) {
  testing::RedisServer server;
  auto client = Connect(server, {.io_threads = 2});
  auto cap = *client->MakeConcurrencyLimiter(
      "race", {.limit = 1000000, .lease_ttl = seconds(60), .heartbeat_interval = seconds(50)});
  // Release and heartbeat issued at the same moment from two threads, many times.
  constexpr int kIterations = 1500;
  std::vector<std::string> members;
  members.reserve(kIterations);
  int heartbeat_ok = 0, heartbeat_gone = 0;
  for (int i = 0; i < kIterations; ++i) {
    auto a = cap.Acquire("id");
    ASSERT_TRUE(a.ok() && a->acquired);
    Lease lease = std::move(a->lease);
    members.push_back(lease.id());
    std::barrier go(2);
    Status hb;
    std::thread beat([&] {
      go.arrive_and_wait();
      hb = lease.Heartbeat();
    });
    go.arrive_and_wait();
    // Release through a raw ZREM so the heartbeat is not suppressed by the object.
    server.Command({"ZREM", *cap.KeyFor("id"), members.back()});
    beat.join();
    (hb.ok() ? heartbeat_ok : heartbeat_gone)++;
    (void)lease.Release();
  }
  std::cout << "heartbeat before release: " << heartbeat_ok << ", after: " << heartbeat_gone
            << "\n";
  const std::string key = *cap.KeyFor("id");
  EXPECT_EQ(server.Command({"ZCARD", key}).integer, 0) << "a released lease came back";

  // A reordered late heartbeat with a shorter ttl never moves the expiry back.
  auto a = cap.Acquire("late");
  ASSERT_TRUE(a->acquired);
  const std::string late_key = *cap.KeyFor("late");
  const auto before = std::stoll(server.Command({"ZSCORE", late_key, a->lease.id()}).str);
  auto reply = Script(server, late_key, {"1", "", a->lease.id(), "0", "10"});
  ASSERT_EQ(reply.elements.size(), 4u);
  EXPECT_EQ(reply.elements[0].integer, 1);
  EXPECT_EQ(reply.elements[3].integer, before);
  EXPECT_EQ(std::stoll(server.Command({"ZSCORE", late_key, a->lease.id()}).str), before);

  // A lease that expired but was not pruned yet is not revived by a heartbeat.
  const std::string member = a->lease.id();
  server.Command({"ZADD", late_key, "XX", std::to_string(server.NowMs() - 1), member});
  reply = Script(server, late_key, {"1", "", member, "0", "60000"});
  EXPECT_EQ(reply.elements[0].integer, 0);
  EXPECT_EQ(server.Command({"ZSCORE", late_key, member}).type, testing::RedisValue::Type::kNil);
  EXPECT_FALSE(a->lease.Heartbeat().ok());
  EXPECT_EQ(a->lease.loss(), LeaseLoss::kGone);
  EXPECT_TRUE(server.KeysWithoutTtl("lt:*").empty());
}

// A lease detached by one client is heartbeaten and released by another (two sluiced
// instances, or a process that hands its lease to a worker): the slot stays taken while
// anyone heartbeats it, whoever acquired it, and frees at the release or lease_ttl after
// the last heartbeat.
TEST(LeaseRedis, ADetachedLeaseIsHeldByWhoeverHeartbeatsItAndFreedByWhoeverReleasesIt) {
  testing::RedisServer server;
  auto granting = Connect(server);
  auto other = Connect(server);
  const ConcurrencyOptions options{.limit = 1, .lease_ttl = milliseconds(600)};
  auto cap_a = *granting->MakeConcurrencyLimiter("handed", options);
  auto cap_b = *other->MakeConcurrencyLimiter("handed", options);
  std::string ref;
  {
    auto a = cap_a.Acquire("acct");
    ASSERT_TRUE(a.ok() && a->acquired);
    ref = a->lease.Detach();
    EXPECT_FALSE(a->lease.held());
  }  // the Lease is gone: nothing was released
  ASSERT_FALSE(ref.empty());
  EXPECT_LE(ref.size(), ConcurrencyLimiter::kMaxLeaseRefBytes);
  const std::string key = *cap_a.KeyFor("acct");
  EXPECT_EQ(server.Command({"ZCARD", key}).integer, 1);
  granting.reset();  // the granting process goes away: the slot does not
  // Heartbeats from the other client keep it past four lease_ttls.
  for (int i = 0; i < 12; ++i) {
    std::this_thread::sleep_for(milliseconds(200));
    auto left = cap_b.Heartbeat(ref);
    ASSERT_THAT(left.status(), IsOk()) << "heartbeat " << i;
    EXPECT_GT(left->count(), 400);
    EXPECT_LE(left->count(), 600);
  }
  EXPECT_FALSE(cap_b.Acquire("acct")->acquired) << "the heartbeaten lease's slot was free";
  EXPECT_THAT(cap_b.Release(ref), IsOk());
  EXPECT_EQ(server.Command({"ZCARD", key}).integer, 0);
  // Gone for good: a heartbeat is NotFound and revives nothing; a second release is OK.
  EXPECT_EQ(cap_b.Heartbeat(ref).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(server.Command({"EXISTS", key}).integer, 0);
  EXPECT_THAT(cap_b.Release(ref), IsOk());

  // Not heartbeaten: the slot frees lease_ttl after the grant, and the reference is dead.
  auto b = cap_b.Acquire("acct");
  ASSERT_TRUE(b->acquired);
  const std::string stale = b->lease.Detach();
  std::this_thread::sleep_for(milliseconds(700));
  EXPECT_EQ(cap_b.Heartbeat(stale).status().code(), StatusCode::kNotFound);
  auto c = cap_b.Acquire("acct");
  EXPECT_TRUE(c->acquired);
  EXPECT_TRUE(server.KeysWithoutTtl("lt:*").empty());
}

// A reference reaches its own lease only: another limiter's, a forged member, a garbled
// or over-long reference never touch a slot.
TEST(LeaseRedis, ADetachedLeaseReferenceReachesItsOwnLeaseOnly) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("mine", {.limit = 2, .lease_ttl = seconds(30)});
  auto theirs = *client->MakeConcurrencyLimiter("theirs", {.limit = 2, .lease_ttl = seconds(30)});
  auto a = cap.Acquire("acct");
  ASSERT_TRUE(a->acquired);
  const std::string ref = a->lease.Detach();
  // The same reference on a limiter of another name names a lease that is not there.
  EXPECT_EQ(theirs.Heartbeat(ref).status().code(), StatusCode::kNotFound);
  // A forged token (one character changed) is a lease that is not there.
  std::string forged = ref;
  const std::size_t bar = forged.find('|');
  forged[bar - 1] = forged[bar - 1] == 'A' ? 'B' : 'A';
  EXPECT_EQ(cap.Heartbeat(forged).status().code(), StatusCode::kNotFound);
  EXPECT_THAT(cap.Release(forged), IsOk());  // removes nothing
  for (const std::string& bad :
       {std::string(), std::string("s"), ref.substr(0, bar), ref.substr(0, bar + 1),
        std::string("x") + ref.substr(1), ref + std::string(300, 'a'), std::string(1000, '|'),
        std::string("s1:AAAAAAAAAAAAAAAAAAAAAA|a%zz")}) {
    EXPECT_EQ(cap.Heartbeat(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(cap.Release(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  auto listed = cap.List("acct");
  ASSERT_EQ(listed->size(), 1u) << "a bad reference changed a slot";
  EXPECT_THAT(cap.Heartbeat(ref).status(), IsOk());
  EXPECT_TRUE(server.KeysWithoutTtl("lt:*").empty());
}

TEST(LeaseRedis, APausedHolderLearnsItsLeaseWasLostWhenItResumes) {
  testing::RedisServer server;
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t child = testing::Fork();
  if (child == 0) {
    ::close(report[0]);
    auto client =
        Client::Create({.url = server.url(), .prefix = "lt", .deadline = milliseconds(200)});
    if (!client.ok()) ::_exit(3);
    auto cap = *(*client)->MakeConcurrencyLimiter(
        "paused",
        {.limit = 1, .lease_ttl = milliseconds(400), .heartbeat_interval = milliseconds(50)});
    std::atomic<int> lost_calls{0};
    auto a = cap.Acquire("job", {.on_lost = [&](LeaseLoss) { ++lost_calls; }});
    if (!a.ok() || !a->acquired) ::_exit(4);
    char ready = 'a';
    if (::write(report[1], &ready, 1) != 1) ::_exit(5);
    // The parent stops this process now; afterwards held() must turn false at once.
    for (int i = 0; i < 400 && a->lease.held(); ++i) std::this_thread::sleep_for(milliseconds(10));
    const bool held = a->lease.held();
    std::this_thread::sleep_for(milliseconds(200));  // the timer's tick reports the loss
    char out[3] = {held ? 'H' : 'n', static_cast<char>('0' + static_cast<int>(a->lease.loss())),
                   static_cast<char>('0' + lost_calls.load())};
    if (::write(report[1], out, 3) != 3) ::_exit(6);
    ::_exit(0);
  }
  ::close(report[1]);
  char ready = 0;
  ASSERT_EQ(::read(report[0], &ready, 1), 1);
  ::kill(child, SIGSTOP);
  std::this_thread::sleep_for(milliseconds(1000));
  // Its heartbeats stopped: the slot is free again for someone else.
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("paused", {.limit = 1, .lease_ttl = seconds(5)});
  EXPECT_TRUE(cap.Acquire("job")->acquired);
  ::kill(child, SIGCONT);
  char out[3] = {};
  ASSERT_EQ(::read(report[0], out, 3), 3);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(out[0], 'n') << "the resumed holder still believed its lease";
  EXPECT_NE(out[1], '0' + static_cast<int>(LeaseLoss::kNone));
  EXPECT_EQ(out[2], '1') << "on_lost must be called exactly once";
  ::close(report[0]);
}

TEST(LeaseRedis, ARedisRestartWithoutItsDataTakesTheLeasesAndTheHoldersLearnIt) {
  testing::RedisServer server;
  auto client = Connect(server, {.reconnect_max_backoff = milliseconds(50)});
  auto cap = *client->MakeConcurrencyLimiter(
      "restart", {.limit = 2, .lease_ttl = seconds(20), .heartbeat_interval = milliseconds(50)});
  std::atomic<int> lost{0};
  auto a = cap.Acquire("job", {.on_lost = [&](LeaseLoss why) {
                         if (why == LeaseLoss::kGone) ++lost;
                       }});
  ASSERT_TRUE(a->acquired);
  // A short silence (data kept): the lease survives.
  server.Pause();
  std::this_thread::sleep_for(milliseconds(300));
  server.Resume();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(a->lease.held());
  EXPECT_EQ(lost.load(), 0);
  // A restart without persistence: the store has no lease any more.
  server.Kill();
  server.Start();
  EXPECT_TRUE(Eventually([&] { return a->lease.loss() == LeaseLoss::kGone; }, seconds(15)))
      << "loss=" << LeaseLossName(a->lease.loss());
  EXPECT_FALSE(a->lease.held());
  EXPECT_EQ(lost.load(), 1);
}

TEST(LeaseRedis, AHolderCutOffFromRedisStopsBelievingItsLeaseAfterTheTtl) {
  testing::RedisServer server;
  auto client = Connect(server, {.reconnect_max_backoff = milliseconds(50)});
  // The leases' boot clock is the test's: it stands still until the test moves it, so
  // the lease's believable end is exact and nothing waits for it.
  auto boot = std::make_shared<std::atomic<int64_t>>(1'000'000'000);  // ns
  internal::ClientFactory::UseBootClock(*client, [boot] {
    return internal::BootClock::time_point(std::chrono::nanoseconds(boot->load()));
  });
  auto cap = *client->MakeConcurrencyLimiter(
      "cut", {.limit = 2, .lease_ttl = milliseconds(500), .heartbeat_interval = milliseconds(50)});
  // A lease the store granted: a loaded machine that made the acquire miss a short
  // deadline would get the open policy's lease, which no store holds and none can lose.
  auto a = cap.Acquire("job", {.deadline = seconds(10)});
  ASSERT_TRUE(a->acquired);
  ASSERT_EQ(a->source, DecisionSource::kStore);
  ASSERT_TRUE(a->lease.held());
  server.Kill();
  // Every heartbeat confirmed was sent before the kill, so the lease can be believed
  // until kill + ttl at the latest, however the threads are scheduled.
  boot->fetch_add(499'999'999);
  EXPECT_TRUE(a->lease.held()) << "1 ns before the ttl ran out";
  EXPECT_EQ(a->lease.loss(), LeaseLoss::kNone);
  boot->fetch_add(1);
  EXPECT_FALSE(a->lease.held());
  EXPECT_TRUE(Eventually([&] { return a->lease.loss() == LeaseLoss::kExpired; }));
  server.Start();
}

TEST(LeaseRedis, AdminReleaseAllRemovesEveryLeaseOfOneIdAndWritesOneAuditRecord) {
  testing::RedisServer server;
  TempDir dir;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter(
      "admin", {.limit = 5, .lease_ttl = seconds(30), .heartbeat_interval = milliseconds(50)});
  std::atomic<int> lost{0};
  std::vector<Lease> held;
  for (int i = 0; i < 3; ++i) {
    auto a = cap.Acquire("acct:7", {.on_lost = [&](LeaseLoss) { ++lost; }});
    ASSERT_TRUE(a->acquired);
    held.push_back(std::move(a->lease));
  }
  auto other = cap.Acquire("acct:8");
  ASSERT_TRUE(other->acquired);
  // A stale member (holder died, not pruned yet) is removed but not counted.
  server.Command({"ZADD", *cap.KeyFor("acct:7"), std::to_string(server.NowMs() - 10), "1:stale"});

  const std::string log = dir.File("audit.jsonl");
  EXPECT_EQ(
      ReleaseAll(cap, "acct:7", {.actor = "", .reason = "x"}, {.log_path = log}).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ReleaseAll(cap, "acct:7", {.actor = "ana", .reason = ""}, {.log_path = log}).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(log));

  auto r = ReleaseAll(cap, "acct:7", {.actor = "ana@oncall", .reason = "INC-77 \"stuck\" streams"},
                      {.log_path = log, .stream = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->released, 3);
  EXPECT_TRUE(r->stream_error.empty()) << r->stream_error;
  auto lines = Lines(log);
  ASSERT_EQ(lines.size(), 1u);
  auto record = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(record["action"], "release_all");
  EXPECT_EQ(record["actor"], "ana@oncall");
  EXPECT_EQ(record["reason"], "INC-77 \"stuck\" streams");
  EXPECT_EQ(record["limiter"], "admin");
  EXPECT_EQ(record["id"], "acct:7");
  EXPECT_EQ(record["released"], 3);
  EXPECT_EQ(record["key"], *cap.KeyFor("acct:7"));
  EXPECT_TRUE(record["ts"].is_string());
  EXPECT_EQ(server.Command({"EXISTS", *cap.KeyFor("acct:7")}).integer, 0);
  EXPECT_EQ(cap.List("acct:8")->size(), 1u);  // only that id
  EXPECT_EQ(server.Command({"XLEN", "lt:audit"}).integer, 1);
  EXPECT_GT(server.Command({"PTTL", "lt:audit"}).integer, 0);

  // The holders learn at their next heartbeat.
  EXPECT_TRUE(Eventually([&] { return lost.load() == 3; }));
  for (const Lease& l : held) EXPECT_EQ(l.loss(), LeaseLoss::kGone);

  // A second release finds nothing and says so; a failed one is recorded as such (the
  // record is written before the store is touched, its outcome after).
  auto again = ReleaseAll(cap, "acct:7", {.actor = "ana", .reason = "again"}, {.log_path = log});
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->released, 0);
  EXPECT_EQ(Lines(log).size(), 2u);
  server.Kill();
  auto failed = ReleaseAll(cap, "acct:8", {.actor = "ana", .reason = "down"}, {.log_path = log},
                           milliseconds(300));
  EXPECT_FALSE(failed.ok());
  ASSERT_EQ(Lines(log).size(), 3u);
  auto failed_record = nlohmann::json::parse(Lines(log)[2]);
  EXPECT_NE(failed_record["outcome"], "done");
  EXPECT_FALSE(failed_record.contains("released"));
  server.Start();
  // A log that cannot be opened stops the action before the store.
  auto no_log = ReleaseAll(cap, "acct:8", {.actor = "ana", .reason = "x"},
                           {.log_path = dir.File("missing-dir/audit.jsonl")});
  EXPECT_EQ(no_log.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(server.KeysWithoutTtl("lt:*").empty());
}

TEST(LeaseRedis, FailurePoliciesAnswerAcquiresWhileRedisIsSilent) {
  testing::RedisServer server;
  auto client = Connect(
      server, {.deadline = milliseconds(30), .servers = 2, .breaker_cool_down = milliseconds(200)});
  auto open =
      *client->MakeConcurrencyLimiter("o", {.limit = 4, .on_failure = FailurePolicy::kOpen});
  auto closed =
      *client->MakeConcurrencyLimiter("c", {.limit = 4, .on_failure = FailurePolicy::kClosed});
  auto local =
      *client->MakeConcurrencyLimiter("l", {.limit = 4, .on_failure = FailurePolicy::kLocal});
  server.Pause();
  auto o = open.Acquire("id");
  ASSERT_THAT(o, IsOk());
  EXPECT_TRUE(o->acquired);
  EXPECT_EQ(o->source, DecisionSource::kFailOpen);
  EXPECT_TRUE(o->lease.held());
  auto c = closed.Acquire("id");
  ASSERT_THAT(c, IsOk());
  EXPECT_FALSE(c->acquired);
  EXPECT_EQ(c->reason, RefusalReason::kStoreUnavailable);
  EXPECT_EQ(c->source, DecisionSource::kFailClosed);
  EXPECT_GE(c->retry_after, milliseconds(1000));
  std::vector<Lease> locals;
  for (int i = 0; i < 3; ++i) {
    auto l = local.Acquire("id");
    ASSERT_THAT(l, IsOk());
    if (l->acquired) {
      EXPECT_EQ(l->source, DecisionSource::kLocalFallback);
      locals.push_back(std::move(l->lease));
    }
  }
  EXPECT_EQ(locals.size(), 2u);  // 4 shared by 2 servers
  locals.front() = Lease();      // released locally
  auto l = local.Acquire("id");
  EXPECT_TRUE(l.ok() && l->acquired);
  server.Resume();
  EXPECT_TRUE(Eventually([&] {
    auto a = open.Acquire("id");
    return a.ok() && a->source == DecisionSource::kStore;
  }));
}

// Opens the client's breaker: Redis stalls, checks with a short deadline fail. A deadline
// missed while this process lagged (a loaded machine, a sanitizer) is not a store failure
// and does not count, so the checks go on until five did count, within a bound.
void OpenTheBreaker(const Client& client, testing::RedisServer& server) {
  auto probe = *client.MakeLimiter("probe", {.limit = 100, .window = seconds(60)});
  server.Pause();
  for (int i = 0; i < 100 && client.Health().breaker != "open"; ++i) {
    (void)probe.Check("x", {.deadline = milliseconds(20)});
  }
  server.Resume();
  ASSERT_EQ(client.Health().breaker, "open");
}

TEST(LeaseRedis, AnOpenBreakerStillSendsReleasesAndHeartbeats) {
  // The breaker spares callers the deadline of a dead store; a release or a heartbeat
  // slows no caller, so they go to the network whatever the breaker says.
  testing::RedisServer server;
  auto client = Connect(server, {.breaker_cool_down = seconds(60)});
  auto cap = *client->MakeConcurrencyLimiter("brk", {.limit = 1, .lease_ttl = seconds(60)});
  auto a = cap.Acquire("job");
  ASSERT_TRUE(a.ok() && a->acquired);
  auto b = cap.Acquire("job2");
  ASSERT_TRUE(b.ok() && b->acquired);
  OpenTheBreaker(*client, server);
  Status released = a->lease.Release();
  EXPECT_TRUE(released.ok()) << released.ToString();
  EXPECT_EQ(server.Command({"ZCARD", *cap.KeyFor("job")}).integer, 0)
      << "the release never reached Redis";
  auto other = Connect(server);
  auto other_cap = *other->MakeConcurrencyLimiter("brk", {.limit = 1, .lease_ttl = seconds(60)});
  auto c = other_cap.Acquire("job");
  ASSERT_THAT(c, IsOk());
  EXPECT_TRUE(c->acquired) << "the released slot is still taken";
  // The store answered: the breaker closes without waiting for its cool-down.
  EXPECT_EQ(client->Health().breaker, "closed");
  OpenTheBreaker(*client, server);
  EXPECT_TRUE(b->lease.Heartbeat().ok()) << "a heartbeat was short-circuited by the breaker";
  EXPECT_TRUE(b->lease.held());
}

TEST(LeaseRedis, AReleaseThatFailedIsSentAgainUntilItLands) {
  // Redis refuses the ZREM (an ACL change): the release fails. A second Release() must
  // send it again instead of answering OK, and a Lease dropped meanwhile has its release
  // retried in the background until it lands.
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("again", {.limit = 1, .lease_ttl = seconds(60)});
  auto a = cap.Acquire("job");
  auto b = cap.Acquire("job2");
  ASSERT_TRUE(a.ok() && a->acquired && b.ok() && b->acquired);
  server.Command({"ACL", "SETUSER", "default", "-zrem"});
  Status first = a->lease.Release();
  EXPECT_EQ(first.code(), StatusCode::kPermissionDenied) << first.ToString();
  b->lease = Lease();  // its release fails too; nobody holds the Lease any more
  server.Command({"ACL", "SETUSER", "default", "+zrem"});
  Status second = a->lease.Release();
  EXPECT_TRUE(second.ok()) << second.ToString();
  EXPECT_EQ(server.Command({"ZCARD", *cap.KeyFor("job")}).integer, 0)
      << "the second Release() did not send the release again";
  EXPECT_TRUE(Eventually([&] {
    return server.Command({"ZCARD", *cap.KeyFor("job2")}).integer == 0;
  })) << "the dropped Lease's failed release was never retried";
}

// A release by reference that Redis refused is sent again in the background until it
// lands, as a Lease's own is: the caller that asked needs to ask only once.
TEST(LeaseRedis, AReleaseByReferenceThatFailedIsSentAgainUntilItLands) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("again", {.limit = 1, .lease_ttl = seconds(60)});
  auto a = cap.Acquire("job");
  ASSERT_TRUE(a.ok() && a->acquired);
  const std::string ref = a->lease.Detach();
  server.Command({"ACL", "SETUSER", "default", "-zrem"});
  EXPECT_EQ(cap.Release(ref).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(server.Command({"ZCARD", *cap.KeyFor("job")}).integer, 1);
  server.Command({"ACL", "SETUSER", "default", "+zrem"});
  EXPECT_TRUE(Eventually([&] {
    return server.Command({"ZCARD", *cap.KeyFor("job")}).integer == 0;
  })) << "the failed release by reference was never sent again";
}

TEST(LeaseRedis, ReleasesWhileOneIsOnItsWaySendOneZrem) {
  // ReleaseAsync, then the handle dropped (the usual pattern) or released again, while
  // the first release is on its way: one ZREM reaches Redis, and every caller is told
  // its outcome. (Each used to send its own ZREM: every lease cycle cost Redis two.)
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("once", {.limit = 2, .lease_ttl = seconds(60)});
  auto a = cap.Acquire("job");
  auto b = cap.Acquire("job");
  ASSERT_TRUE(a.ok() && a->acquired && b.ok() && b->acquired);
  server.Command({"CONFIG", "RESETSTAT"});
  std::promise<Status> first, second;
  a->lease.ReleaseAsync([&](Status s) { first.set_value(s); });
  a->lease.ReleaseAsync([&](Status s) { second.set_value(s); });
  a->lease = Lease();  // the destructor's release
  EXPECT_TRUE(first.get_future().get().ok());
  EXPECT_TRUE(second.get_future().get().ok());
  // The blocking form after an answered release sends nothing more either.
  EXPECT_TRUE(a->lease.Release().ok());
  Lease held = std::move(b->lease);
  held.ReleaseAsync();
  EXPECT_TRUE(held.Release().ok()) << "a blocking Release() waits for the one on its way";
  EXPECT_EQ(server.Command({"ZCARD", *cap.KeyFor("job")}).integer, 0);
  std::this_thread::sleep_for(milliseconds(100));  // anything sent late would land by now
  EXPECT_EQ(server.CommandCalls("zrem"), 2) << "two leases, two releases";
}

TEST(LeaseRedis, AGrantThatArrivesAfterTheCallerGaveUpIsReleased) {
  // The acquire's deadline passes while Redis is paused; Redis runs the script when the
  // pause ends and grants a lease nobody holds. It must not keep the slot for lease_ttl.
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter(
      "late", {.limit = 1, .lease_ttl = seconds(60), .on_failure = FailurePolicy::kClosed});
  server.Command({"CLIENT", "PAUSE", "700", "ALL"});
  auto a = cap.Acquire("job", {.deadline = milliseconds(50)});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(a->acquired);
  EXPECT_EQ(a->source, DecisionSource::kFailClosed);
  // The pause ends: the script runs (granting the slot), its answer comes back late.
  EXPECT_TRUE(Eventually([&] {
    return server.Command({"INFO", "commandstats"}).str.find("cmdstat_evalsha") !=
           std::string::npos;
  }));
  EXPECT_TRUE(Eventually(
      [&] {
        return server.Command({"ZCARD", *cap.KeyFor("job")}).integer == 0;
      },
      milliseconds(3000)))
      << "a grant nobody waited for holds the slot";
  auto b = cap.Acquire("job");
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(b->acquired);
}

TEST(LeaseRedis, AForkedChildFailsFastWithAnInheritedClientAndExits) {
  // A pre-fork server: the parent made a Client (threads, a connection) and forks. The
  // child cannot use it (it has none of the parent's threads): every call answers at
  // once with FailedPrecondition, and dropping the client, its limiters and its leases
  // in the child returns (nothing of the parent's is touched).
  testing::RedisServer server;
  auto client = Connect(server);
  auto limiter = *client->MakeLimiter("fork", {.limit = 10, .window = seconds(60)});
  auto cap = *client->MakeConcurrencyLimiter("forkc", {.limit = 2, .lease_ttl = seconds(60)});
  auto a = cap.Acquire("job");
  ASSERT_TRUE(a.ok() && a->acquired);
  ASSERT_THAT(limiter.Check("x"), IsOk());
  const pid_t child = ::fork();
  if (child == 0) {
    const auto t0 = steady_clock::now();
    auto d = limiter.Check("x", {.deadline = milliseconds(5)});
    auto acq = cap.Acquire("job");
    const bool fast = steady_clock::now() - t0 < seconds(2);
    int code = 0;
    if (d.ok() || d.status().code() != StatusCode::kFailedPrecondition) code = 10;
    if (acq.ok() || acq.status().code() != StatusCode::kFailedPrecondition) code = 11;
    if (!fast) code = 12;
    if (d.status().message().find("fork") == std::string::npos) code = 13;
    a->lease = Lease();
    {
      Limiter dropped_limiter = std::move(limiter);
      ConcurrencyLimiter dropped_cap = std::move(cap);
    }
    client.reset();  // the last reference: the client's teardown runs in the child
    ::_exit(code);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1000 && !exited; ++i) {
    exited = ::waitpid(child, &status, WNOHANG) == child;
    if (!exited) std::this_thread::sleep_for(milliseconds(10));
  }
  if (!exited) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  EXPECT_TRUE(exited) << "the child hung (a blocking call or the client's destructor)";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  // The parent's client is untouched.
  EXPECT_TRUE(a->lease.held());
  auto d = limiter.Check("x");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_EQ(server.Command({"ZCARD", *cap.KeyFor("job")}).integer, 1);
}

TEST(LeaseRedis, MetricsShowTheLiveLeasesPerIdAndTheMinutesHighest) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("g", {.limit = 10});
  std::vector<Lease> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::move(cap.Acquire("u1")->lease));
  held.resize(1);  // three released
  held.push_back(std::move(cap.Acquire("u1")->lease));
  auto value = [&](const std::string& name) {
    for (const MetricSample& s : client->Metrics()) {
      if (s.name == name && s.labels.size() == 2 && s.labels[1].second == "u1") return s.value;
    }
    return -1.0;
  };
  EXPECT_EQ(value("sluice_leases_held"), 2);
  EXPECT_EQ(value("sluice_leases_live"), 2);
  // 4 unless the clock minute turned between the acquires.
  EXPECT_GE(value("sluice_leases_live_max_1m"), 2);
  const std::string text = FormatPrometheus(client->Metrics());
  EXPECT_NE(text.find("sluice_leases_held{limiter=\"g\",id=\"u1\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE sluice_breaker_state gauge"), std::string::npos);
}

}  // namespace
}  // namespace sluice

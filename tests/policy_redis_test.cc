// Failure policies against a real redis-server that stops answering (SIGSTOP), dies
// (SIGKILL) and comes back: each policy answers within its deadline, the breaker stops
// sending commands while open, and decisions come from the store again once Redis is
// back, with no restart of the client.
#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client_core.h"
#include "sluice/asio.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

struct Three {
  Limiter open, closed, local;
};

Three MakeThree(const Client& client) {
  const Limit limit{.limit = 8, .window = seconds(60)};
  return {*client.MakeLimiter("open", limit, {.on_failure = FailurePolicy::kOpen}),
          *client.MakeLimiter("closed", limit, {.on_failure = FailurePolicy::kClosed}),
          *client.MakeLimiter("local", limit, {.on_failure = FailurePolicy::kLocal, .servers = 4})};
}

// Checks each policy once while Redis cannot answer; returns the slowest answer's time.
milliseconds ExpectPolicies(Three& three, const std::string& id) {
  milliseconds slowest{0};
  auto timed = [&](const Limiter& limiter) {
    const auto t0 = steady_clock::now();
    auto d = limiter.Check(id);
    slowest = std::max(slowest, std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0));
    return d;
  };
  auto open = timed(three.open);
  EXPECT_TRUE(open.ok() && open->allowed && open->source == DecisionSource::kFailOpen);
  auto closed = timed(three.closed);
  EXPECT_TRUE(closed.ok() && !closed->allowed && closed->source == DecisionSource::kFailClosed);
  auto local = timed(three.local);
  EXPECT_TRUE(local.ok() && local->source == DecisionSource::kLocalFallback);
  EXPECT_EQ(local->limit, 2);  // 8 shared by 4 servers
  return slowest;
}

using testing::Eventually;

TEST(PolicyRedis, AClientConnectingInTheBackgroundStartsWhileRedisIsDownAndServesByPolicy) {
  testing::RedisServer server;
  server.Kill();  // its port stays reserved for Start() below
  auto client = Client::Create({.url = server.url(),
                                .deadline = milliseconds(25),
                                .connect_timeout = milliseconds(200),
                                .connect_in_background = true,
                                .reconnect_max_backoff = milliseconds(100)});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_FALSE((*client)->Health().connected);
  Three three = MakeThree(**client);
  ExpectPolicies(three, "down");
  // The error names what is wrong with the connection.
  auto plain = (*client)->MakeLimiter("plain", {.limit = 8, .window = seconds(60)},
                                      {.on_failure = FailurePolicy::kOpen});
  auto peek = (*client)->ServerInfo("server", milliseconds(100));
  ASSERT_FALSE(peek.ok());
  EXPECT_EQ(peek.status().code(), StatusCode::kUnavailable) << peek.status().ToString();
  EXPECT_NE(peek.status().message().find("not connected"), std::string::npos)
      << peek.status().ToString();

  server.Start();
  ASSERT_TRUE(Eventually([&] { return (*client)->Health().connected; }, seconds(10)));
  // Decisions come from Redis once the breaker lets a probe through.
  ASSERT_TRUE(Eventually(
      [&] {
        auto d = three.closed.Check("up");
        return d.ok() && d->allowed && d->source == DecisionSource::kStore;
      },
      seconds(10)));
  auto d = plain->Check("up");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_EQ(server.Keys("sluice:*").size(), 2u);
}

// A client connecting in the background names why it is not connected in Health(), in
// the words Create would have returned without connect_in_background (what the CLI
// prints), with the server's address and never the password; once connected, nothing.
TEST(PolicyRedis, AClientConnectingInTheBackgroundNamesWhyItIsNotConnected) {
  const std::string secret = "s3cret-pw", wrong = "wrong-pw";
  testing::RedisServer guarded({.requirepass = secret});
  testing::RedisServer plain;
  const std::string at = "127.0.0.1:" + std::to_string(guarded.port());
  const std::string plain_at = "127.0.0.1:" + std::to_string(plain.port());
  struct Case {
    std::string url, expected;
  };
  const Case cases[] = {
      {"redis://:" + wrong + "@" + at, "redis " + at + " answered: WRONGPASS"},
      {"redis://" + at, "redis " + at + " answered: NOAUTH"},
      {"redis+cluster://" + plain_at, "CLUSTER SLOTS failed (is this server in cluster mode?)"},
      {"redis://sluice-test-host.invalid:6379",
       "cannot resolve redis host \"sluice-test-host.invalid\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.url);
    auto direct = Client::Create({.url = c.url, .connect_timeout = seconds(2)});
    ASSERT_FALSE(direct.ok());
    const std::string said(direct.status().message());
    EXPECT_EQ(said.rfind(c.expected, 0), 0u) << said;
    auto client = Client::Create({.url = c.url,
                                  .connect_timeout = seconds(2),
                                  .connect_in_background = true,
                                  .reconnect_max_backoff = milliseconds(100)});
    ASSERT_THAT(client, IsOk());
    ASSERT_TRUE(
        Eventually([&] { return (*client)->Health().connection_error == said; }, seconds(10)))
        << (*client)->Health().connection_error << "\nnot: " << said;
    EXPECT_FALSE((*client)->Health().connected);
    EXPECT_EQ(said.find(secret), std::string::npos);
    EXPECT_EQ(said.find(wrong), std::string::npos);
  }
  auto client = Client::Create(
      {.url = guarded.url(), .connect_timeout = seconds(2), .connect_in_background = true});
  ASSERT_THAT(client, IsOk());
  ASSERT_TRUE(Eventually([&] { return (*client)->Health().connected; }, seconds(10)));
  EXPECT_EQ((*client)->Health().connection_error, "");
}

TEST(PolicyRedis, WithoutBackgroundConnectingAnUnreachableRedisFailsCreate) {
  testing::RedisServer server;
  server.Kill();
  auto client = Client::Create({.url = server.url(), .connect_timeout = milliseconds(200)});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status().ToString();
}

TEST(PolicyRedis, EachPolicyAnswersWithinItsDeadlineWhileRedisIsSilentOrDead) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(),
                                 .deadline = milliseconds(25),
                                 .reconnect_max_backoff = milliseconds(100),
                                 .breaker_cool_down = milliseconds(200)});
  Three three = MakeThree(*client);
  ASSERT_EQ(three.open.Check("warm", {.deadline = seconds(2)})->source, DecisionSource::kStore);

  server.Pause();  // alive but silent: the worst case, every call waits for its deadline
  milliseconds slowest = ExpectPolicies(three, "a");
  EXPECT_LT(slowest, milliseconds(500)) << "a check waited for Redis, not its deadline";
  // Local fallback enforces the divided limit for an id pinned to this server.
  int local_allowed = 0;
  for (int i = 0; i < 10; ++i) local_allowed += three.local.Check("pinned")->allowed;
  EXPECT_EQ(local_allowed, 2);
  EXPECT_NE(client->Health().breaker, "closed");

  server.Kill();  // dead: connection refused, reconnect attempts with backoff
  ExpectPolicies(three, "b");
  server.Start();  // back, empty
  ASSERT_TRUE(Eventually(
      [&] {
        auto d = three.closed.Check("after", {.deadline = seconds(1)});
        return d.ok() && d->source == DecisionSource::kStore;
      },
      milliseconds(8000)))
      << "decisions did not come from Redis again after it returned";
  EXPECT_EQ(client->Health().breaker, "closed");
  EXPECT_EQ(three.open.Check("after")->source, DecisionSource::kStore);
  EXPECT_EQ(three.local.Check("after")->source, DecisionSource::kStore);
}

TEST(PolicyRedis, OpenBreakerSendsNoCommands) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(),
                                 .deadline = milliseconds(20),
                                 .on_failure = FailurePolicy::kClosed,
                                 .breaker_failures = 3,
                                 .breaker_cool_down = seconds(30)});
  auto limiter = *client->MakeLimiter("b", {.limit = 100, .window = seconds(60)});
  ASSERT_EQ(limiter.Check("x", {.deadline = seconds(2)})->source, DecisionSource::kStore);
  server.Pause();
  // Three store failures open it. A deadline missed while this process lagged (a loaded
  // machine, a sanitizer) is not one, so the checks go on until three did count, within a
  // bound; each is answered by the policy either way.
  for (int i = 0; i < 50 && client->Health().breaker != "open"; ++i) {
    EXPECT_EQ(limiter.Check("x")->source, DecisionSource::kFailClosed);
  }
  ASSERT_EQ(client->Health().breaker, "open");
  const uint64_t commands = client->stats().commands;
  const auto t0 = steady_clock::now();
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(limiter.Check("x")->source, DecisionSource::kFailClosed);
  const auto spent = steady_clock::now() - t0;
  EXPECT_EQ(client->stats().commands, commands) << "an open breaker still sent commands";
  EXPECT_LT(spent, milliseconds(500)) << "1000 short-circuited checks took the deadline";
  EXPECT_EQ(client->Health().short_circuited, 1000);
  server.Resume();
}

// What counts as a store failure (client.h): a client-side backlog is not Redis failing.
// A burst far beyond max_in_flight against a healthy Redis refuses the calls that do not
// fit (their failure policy answers them) but must not open the breaker, which would
// refuse everyone for the cool-down.
TEST(PolicyRedis, ABurstAgainstAHealthyRedisNeverOpensTheBreaker) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(),
                                 .deadline = seconds(2),
                                 .max_in_flight = 4,
                                 .on_failure = FailurePolicy::kClosed,
                                 .breaker_failures = 3,
                                 .breaker_cool_down = seconds(30)});
  auto limiter = *client->MakeLimiter("burst", {.limit = 1000, .window = seconds(60)});
  ASSERT_EQ(limiter.Check("warm")->source, DecisionSource::kStore);
  constexpr int kCalls = 3000;
  std::atomic<int> answered{0}, from_store{0}, refused_by_policy{0};
  for (int i = 0; i < kCalls; ++i) {
    limiter.CheckAsync("id" + std::to_string(i % 50), {}, [&](StatusOr<Decision> d) {
      if (d.ok() && d->source == DecisionSource::kStore) ++from_store;
      if (d.ok() && d->source == DecisionSource::kFailClosed) ++refused_by_policy;
      ++answered;
    });
  }
  ASSERT_TRUE(Eventually([&] { return answered.load() == kCalls; }, milliseconds(8000)));
  std::cout << "burst of " << kCalls << " with max_in_flight 4: " << from_store.load()
            << " decided by Redis, " << refused_by_policy.load() << " by the policy (backlog)\n";
  EXPECT_GT(refused_by_policy.load(), 0) << "the burst never exceeded max_in_flight";
  EXPECT_EQ(client->Health().breaker_opens, 0) << "a client-side backlog opened the breaker";
  EXPECT_EQ(limiter.Check("after")->source, DecisionSource::kStore);
}

// Documented in client.h: a call that timed out may still be counted by Redis, once,
// when its command runs after the deadline (here: a paused Redis runs it on resume). The
// error is an over-count, never an under-count.
TEST(PolicyRedis, ATimedOutCheckMayStillBeCountedOnceWhenRedisRunsItLate) {
  testing::RedisServer server;
  auto client = *Client::Create(
      {.url = server.url(), .deadline = milliseconds(50), .on_failure = FailurePolicy::kClosed});
  auto limiter = *client->MakeLimiter("late", {.limit = 10, .window = seconds(60)});
  server.Command({"CLIENT", "PAUSE", "500", "ALL"});
  auto d = limiter.Check("x");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->source, DecisionSource::kFailClosed);
  EXPECT_FALSE(d->allowed);
  StatusOr<Decision> peek = limiter.Peek("x", {.deadline = seconds(2)});
  ASSERT_TRUE(peek.ok()) << peek.status().ToString();
  EXPECT_EQ(peek->source, DecisionSource::kStore);
  EXPECT_EQ(peek->remaining, 9) << "the refused call was counted once by Redis";
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A flood from one refused id: Redis receives one command per denial period.
TEST(PolicyRedis, FloodFromARefusedIdCostsRedisOneCallPerDenialPeriod) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(), .deadline = milliseconds(500)});
  auto limiter = *client->MakeLimiter("login", {.limit = 3, .window = seconds(30)});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(limiter.Check("account:777")->allowed);
  server.Command({"CONFIG", "RESETSTAT"});
  int refused = 0;
  for (int i = 0; i < 5000; ++i) refused += !limiter.Check("account:777")->allowed;
  EXPECT_EQ(refused, 5000);
  std::string stats = server.Command({"INFO", "commandstats"}).str;
  auto at = stats.find("cmdstat_evalsha:calls=");
  ASSERT_NE(at, std::string::npos) << stats;
  EXPECT_EQ(std::stoll(stats.substr(at + 22)), 1) << stats;
  EXPECT_EQ(client->stats().cached_denials, 4999u);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(CompositeRedis, TenantFairnessAndAllOrNothingOnRedis) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(), .prefix = "comp", .deadline = seconds(1)});
  auto tenant = *client->MakeLimiter("tenant", {.limit = 40, .window = seconds(60)});
  auto global = *client->MakeLimiter("global", {.limit = 100, .window = seconds(60)});
  auto send = [&](const std::string& who, int n, int64_t cost) {
    int admitted = 0;
    for (int i = 0; i < n; ++i) {
      const LimitCheck checks[] = {{&tenant, who}, {&global, "all"}};
      auto d = CheckComposite(checks, {.cost = cost});
      EXPECT_TRUE(d.ok()) << d.status().ToString();
      admitted += d->decision.allowed;
    }
    return admitted;
  };
  EXPECT_EQ(send("north", 200, 1), 40);
  EXPECT_EQ(send("south", 30, 1), 30);
  EXPECT_EQ(send("east", 15, 2), 15);             // global: 40 + 30 + 30 = 100, full
  EXPECT_EQ(send("west", 1, 1), 0);               // refused by the global limit...
  EXPECT_EQ(tenant.Peek("west")->remaining, 40);  // ...and refunded at the tenant
  EXPECT_EQ(global.Peek("all")->remaining, 0);
  EXPECT_EQ(server.KeysWithoutTtl("comp:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A Redis paused for longer than the cool-down, under more concurrent checks than
// max_in_flight: while paused, the connection's queue is full of calls Redis has not
// answered, so the probe after the cool-down is refused on this side ("calls already in
// flight"). That refusal must not leave the breaker half-open: once Redis answers again,
// decisions come from it within a cool-down and a deadline or so. One failure opens the
// breaker: of the calls queued when Redis stops answering, only those sent after its
// last reply count as failures (the others waited behind a backlog), and the queue then
// stays full, so their number depends on timing.
TEST(PolicyRedis, TheBreakerClosesAfterAPauseWhoseProbeWasRefusedOnThisSide) {
  testing::RedisServer server;
  constexpr auto kDeadline = milliseconds(50);
  constexpr auto kCoolDown = milliseconds(200);
  auto client = *Client::Create({.url = server.url(),
                                 .deadline = kDeadline,
                                 .max_in_flight = 8,
                                 .on_failure = FailurePolicy::kClosed,
                                 .breaker_failures = 1,
                                 .breaker_cool_down = kCoolDown});
  auto limiter = *client->MakeLimiter("paused", {.limit = 1000000, .window = seconds(60)});
  ASSERT_EQ(limiter.Check("warm", {.deadline = seconds(2)})->source, DecisionSource::kStore);

  std::atomic<bool> stop{false};
  std::atomic<int64_t> checks{0}, late{0};
  std::vector<std::thread> threads;
  auto join = [&] {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  };
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        const auto t0 = steady_clock::now();
        auto d = limiter.Check("id" + std::to_string(t));
        if (steady_clock::now() - t0 > kDeadline + milliseconds(500)) ++late;
        EXPECT_TRUE(d.ok()) << d.status().ToString();
        ++checks;
      }
    });
  }
  server.Command({"CLIENT", "PAUSE", "800", "ALL"});
  const auto paused_until = steady_clock::now() + milliseconds(800);
  const bool opened =
      Eventually([&] { return client->Health().breaker != "closed"; }, seconds(5), milliseconds(2));
  std::this_thread::sleep_until(paused_until);
  // Redis answers again: the breaker closes and the checks are the store's.
  const bool closed =
      Eventually([&] { return client->Health().breaker == "closed"; }, seconds(5), milliseconds(5));
  const auto closed_after = steady_clock::now() - paused_until;
  join();
  ASSERT_TRUE(opened) << "the pause did not open the breaker";
  std::cout << checks.load() << " checks; breaker closed "
            << std::chrono::duration_cast<milliseconds>(closed_after).count()
            << " ms after the pause ended; " << client->Health().breaker_opens << " opens\n";
  ASSERT_TRUE(closed) << "the breaker stayed " << client->Health().breaker
                      << " after Redis answered again";
  EXPECT_EQ(late.load(), 0) << "checks waited far beyond their deadline";
  auto d = limiter.Check("after");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->source, DecisionSource::kStore);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Periodic sync: a check that waits for its id's sync in flight is answered at its own
// deadline (CheckOptions::deadline), by its failure policy, even while the sync itself
// is held up to the client's longer deadline by a paused Redis.
TEST(PolicyRedis, ChecksWaitingForAPeriodicSyncAreAnsweredAtTheirOwnDeadline) {
  testing::RedisServer server;
  constexpr auto kOwnDeadline = milliseconds(5);
  constexpr auto kSlack = milliseconds(100);  // scheduling on a loaded machine
  auto client = *Client::Create({.url = server.url(),
                                 .deadline = milliseconds(300),
                                 .on_failure = FailurePolicy::kOpen,
                                 .breaker_failures = 1000});
  LimiterOptions options;
  options.sync = {.enabled = true,
                  .hot_checks_per_second = 10,
                  .sync_interval = milliseconds(50),
                  .servers = 10};
  auto limiter = *client->MakeLimiter("synced", {.limit = 100000, .window = seconds(60)}, options);
  ASSERT_TRUE(Eventually(
      [&] {
        auto d = limiter.Check("hot", {.deadline = seconds(2)});
        return d.ok() && d->source == DecisionSource::kLocalSync;
      },
      seconds(5), milliseconds(1)))
      << "the id never turned hot";

  server.Command({"CLIENT", "PAUSE", "1000", "ALL"});
  const auto paused_until = steady_clock::now() + milliseconds(1000);
  milliseconds slowest{0};
  int checks = 0, by_policy = 0;
  while (steady_clock::now() < paused_until - milliseconds(300)) {
    const auto t0 = steady_clock::now();
    auto d = limiter.Check("hot", {.deadline = kOwnDeadline});
    slowest = std::max(slowest, std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0));
    ASSERT_THAT(d, IsOk());
    ++checks;
    by_policy += d->source == DecisionSource::kFailOpen;
  }
  std::cout << checks << " checks while Redis was paused, " << by_policy
            << " answered by the policy; slowest " << slowest.count() << " ms\n";
  EXPECT_GT(by_policy, 0) << "no check waited for a sync";
  EXPECT_LE(slowest, kOwnDeadline + kSlack) << "a check was held past its own deadline";
  // Redis answers again (the connection may have been given up as stalled and made
  // anew): decisions come from the store.
  std::this_thread::sleep_until(paused_until);
  EXPECT_TRUE(Eventually(
      [&] {
        auto peek = limiter.Peek("hot", {.deadline = seconds(1)});
        return peek.ok() && peek->source == DecisionSource::kStore;
      },
      seconds(5), milliseconds(10)));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// The denial cache and a refund or reset sent right behind a refused check: the store
// decides the check first, so its refusal arrives after the refund or reset began. It
// must not be cached then: the units given back are there to be spent. A short CLIENT
// PAUSE holds both calls in Redis, so the refusal always arrives after.
TEST(PolicyRedis, ARefusalArrivingAfterARefundOrResetBeganIsNotCached) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(), .deadline = seconds(2)});
  auto limiter = *client->MakeLimiter("otp", {.limit = 3, .window = seconds(60)});
  for (const bool reset : {false, true}) {
    SCOPED_TRACE(reset ? "reset" : "refund");
    const std::string id = reset ? "reset-me" : "refund-me";
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(limiter.Check(id)->allowed);
    server.Command({"CLIENT", "PAUSE", "200", "ALL"});
    std::promise<StatusOr<Decision>> refused;
    limiter.CheckAsync(id, {}, [&](StatusOr<Decision> d) { refused.set_value(std::move(d)); });
    auto given = reset ? limiter.Reset(id) : limiter.Refund(id, 1);
    ASSERT_THAT(given, IsOk());
    auto first = refused.get_future().get();
    ASSERT_THAT(first, IsOk());
    ASSERT_FALSE(first->allowed);
    ASSERT_EQ(first->source, DecisionSource::kStore);
    auto next = limiter.Check(id);
    ASSERT_THAT(next, IsOk());
    EXPECT_NE(next->source, DecisionSource::kCachedDenial);
    EXPECT_TRUE(next->allowed) << "refused although "
                               << (reset ? "the id was reset" : "1 was given back");
    EXPECT_EQ(next->remaining, reset ? 2 : 0);
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A call whose deadline passed before it could be sent (it waited in this client: for a
// periodic sync in flight, or behind a local budget's first step) is not sent: a check
// gets its policy's answer, a refund its error, and the breaker, which opens here on one
// store failure, hears nothing of either (the store did nothing wrong).
TEST(PolicyRedis, ACallWhoseDeadlinePassedBeforeSendingIsNoStoreFailure) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(),
                                 .deadline = seconds(2),
                                 .on_failure = FailurePolicy::kClosed,
                                 .breaker_failures = 1});
  auto limiter = *client->MakeLimiter("late", {.limit = 10, .window = seconds(60)});
  ASSERT_EQ(limiter.Check("x")->source, DecisionSource::kStore);
  // Redis holds its replies for a while: a call sent now would expire on the connection
  // before its reply, as if the store had failed.
  server.Command({"CLIENT", "PAUSE", "200", "ALL"});
  const std::shared_ptr<internal::Store>& store = internal::ClientFactory::StoreOf(*client);
  auto send = [&](internal::Op op) {
    internal::CheckCall call;
    call.op = op;
    call.key = *limiter.KeyFor("x");
    call.limit = {.limit = 10, .window = seconds(60)};
    call.cost = 1;
    call.deadline = steady_clock::now() - milliseconds(20);
    call.on_failure = FailurePolicy::kClosed;
    std::promise<StatusOr<Decision>> answer;
    store->Check(std::move(call), [&](StatusOr<Decision> d) { answer.set_value(std::move(d)); });
    return answer.get_future().get();
  };
  auto check = send(internal::Op::kConsume);
  ASSERT_THAT(check, IsOk());
  EXPECT_EQ(check->source, DecisionSource::kFailClosed);
  auto refund = send(internal::Op::kRefund);
  ASSERT_FALSE(refund.ok());
  EXPECT_EQ(refund.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(refund.status().message().find("within -"), std::string::npos)
      << refund.status().ToString();
  EXPECT_EQ(client->Health().breaker, "closed");
  EXPECT_EQ(client->Health().breaker_opens, 0);
  auto peek = limiter.Peek("x");
  ASSERT_THAT(peek, IsOk());
  EXPECT_EQ(peek->source, DecisionSource::kStore);
}

// What counts as a store failure (docs/design.md §5): a deadline missed because this
// process's own event loop lagged is not. A server that shares the client's I/O thread
// (sluiced's listeners with --http-threads 0) holds it with its own work; the calls made
// meanwhile are written, and their expiry noticed, late. Their policy answers them, and
// the breaker, which opens here on one store failure, must stay closed: Redis answered
// every call at once.
TEST(PolicyRedis, DeadlinesMissedWhileTheClientsEventLoopLaggedNeverOpenTheBreaker) {
  testing::RedisServer server;
  auto client = *Client::Create({.url = server.url(),
                                 .deadline = seconds(2),
                                 .on_failure = FailurePolicy::kOpen,
                                 .breaker_failures = 1,
                                 .breaker_cool_down = seconds(30)});
  auto limiter = *client->MakeLimiter("lagged", {.limit = 1000, .window = seconds(60)});
  ASSERT_EQ(limiter.Check("warm")->source, DecisionSource::kStore);
  std::atomic<int> answered{0}, by_policy{0};
  constexpr int kRounds = 5, kCalls = 20;
  for (int round = 0; round < kRounds; ++round) {
    // The loop busy for 40 ms, from before the calls are made.
    std::promise<void> holding;
    boost::asio::post(IoExecutor(*client), [&holding] {
      holding.set_value();
      std::this_thread::sleep_for(milliseconds(40));
    });
    holding.get_future().wait();
    for (int i = 0; i < kCalls; ++i) {
      limiter.CheckAsync("id" + std::to_string(i), {.deadline = milliseconds(5)},
                         [&](StatusOr<Decision> d) {
                           if (d.ok() && d->source == DecisionSource::kFailOpen) ++by_policy;
                           ++answered;
                         });
    }
    ASSERT_TRUE(Eventually([&] { return answered.load() == (round + 1) * kCalls; }));
  }
  std::cout << kRounds * kCalls
            << " checks of deadline 5 ms behind a 40 ms loop lag: " << by_policy.load()
            << " answered by the policy\n";
  EXPECT_GT(by_policy.load(), 0) << "no call missed its deadline: the lag was not reproduced";
  EXPECT_EQ(client->Health().breaker_opens, 0)
      << "deadlines missed while this process's event loop lagged opened the breaker";
  EXPECT_EQ(limiter.Check("after")->source, DecisionSource::kStore);
}

// ClientOptions::max_batch: the calls that queue while a write is in flight go to Redis
// as one script call of at most that many; 1 sends every call alone.
TEST(PolicyRedis, MaxBatchBoundsHowManyCallsShareOneScriptCall) {
  testing::RedisServer server;
  constexpr int kCalls = 2000;
  auto burst = [&](std::size_t max_batch) {
    auto client =
        *Client::Create({.url = server.url(), .deadline = seconds(5), .max_batch = max_batch});
    auto limiter = *client->MakeLimiter("batched", {.limit = 1'000'000, .window = seconds(60)});
    server.Command({"CONFIG", "RESETSTAT"});
    std::atomic<int> from_store{0}, answered{0};
    // Every call queues before the first write: the I/O thread is held meanwhile.
    std::promise<void> holding, release;
    boost::asio::post(IoExecutor(*client), [&] {
      holding.set_value();
      release.get_future().wait();
    });
    holding.get_future().wait();
    for (int i = 0; i < kCalls; ++i) {
      limiter.CheckAsync("id" + std::to_string(i % 100), {}, [&](StatusOr<Decision> d) {
        if (d.ok() && d->source == DecisionSource::kStore) ++from_store;
        ++answered;
      });
    }
    release.set_value();
    EXPECT_TRUE(Eventually([&] { return answered.load() == kCalls; }, seconds(20)));
    EXPECT_EQ(from_store.load(), kCalls);
    return server.CommandCalls("evalsha") + server.CommandCalls("eval");
  };
  const int64_t alone = burst(1);
  const int64_t batched = burst(64);
  std::cout << kCalls << " checks: " << alone << " script calls with max_batch 1, " << batched
            << " with 64\n";
  EXPECT_EQ(alone, kCalls);
  EXPECT_LE(batched, kCalls / 64 + 1) << "queued calls did not share script calls of 64";
  EXPECT_GE(batched, kCalls / 64);
}

}  // namespace
}  // namespace sluice

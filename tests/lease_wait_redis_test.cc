// Waiting lease acquires (AcquireOptions::wait) on a real redis-server: waiters granted
// in arrival order within a process and across four processes (the fairness figure is
// printed), woken by the releases' SPUBLISH; a newcomer that does not wait never takes a
// slot owed to a waiter; a killed waiter's ticket expires and its turn passes; the bound
// on waiters; a wait that ends in the queue leaves it; a Redis paused while a caller
// waits gets the failure policy's answer within the wait; no key without an expiry.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "redis/scripts.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/processes.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

namespace sluice::lease_wait_redis_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using testing::Eventually;

constexpr char kPrefix[] = "lw";

std::shared_ptr<Client> Connect(const testing::RedisServer& server, ClientOptions o = {}) {
  o.prefix = kPrefix;
  if (o.deadline == milliseconds(5)) o.deadline = milliseconds(500);
  return testing::ConnectClient(server, std::move(o));
}

int64_t Tickets(const testing::RedisServer& server, const std::string& lease_key) {
  return server.Command({"ZCARD", lease_key + "w"}).integer;
}

// Grants recorded by the waiters' callbacks, in the order they came.
struct Grants {
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::string> failures;
  void Add(int who, const StatusOr<Acquisition>& a) {
    std::lock_guard<std::mutex> lock(mu);
    if (!a.ok() || !a->acquired || a->source != DecisionSource::kStore) {
      failures.push_back(std::to_string(who) + ": " +
                         (a.ok() ? std::string(RefusalReasonName(a->reason)) + " source " +
                                       std::string(DecisionSourceName(a->source))
                                 : a.status().ToString()));
      return;
    }
    order.push_back(who);
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return order.size() + failures.size();
  }
};

// Pairs of grants out of arrival order (0 when grants follow arrivals exactly).
int Inversions(const std::vector<int>& order) {
  int n = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (std::size_t j = i + 1; j < order.size(); ++j) n += order[i] > order[j] ? 1 : 0;
  }
  return n;
}

TEST(LeaseWaitRedis, WaitersAreGrantedInArrivalOrderWokenByReleases) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("fifo", {.limit = 1, .lease_ttl = seconds(30)});
  const std::string key = *cap.KeyFor("job");
  auto held = cap.Acquire("job");
  ASSERT_TRUE(held.ok() && held->acquired);
  server.Command({"CONFIG", "RESETSTAT"});
  Grants grants;
  constexpr int kWaiters = 5;
  for (int i = 0; i < kWaiters; ++i) {
    // Each grantee releases at once (its Acquisition, and so its Lease, goes): the next
    // waiter's turn comes with that release.
    cap.AcquireAsync("job", {.wait = seconds(20)},
                     [&grants, i](StatusOr<Acquisition> a) { grants.Add(i, a); });
    ASSERT_TRUE(Eventually([&] { return Tickets(server, key) == i + 1; }))
        << "waiter " << i << " took no ticket";
  }
  ASSERT_THAT(held->lease.Release(), testing::IsOk());
  ASSERT_TRUE(Eventually([&] { return grants.size() == kWaiters; }, seconds(20)));
  EXPECT_EQ(grants.failures, std::vector<std::string>{});
  EXPECT_EQ(grants.order, (std::vector<int>{0, 1, 2, 3, 4}));
  // The mechanism: each release published on the id's channel, to which this client's
  // one subscriber connection subscribed.
  EXPECT_GE(server.CommandCalls("spublish"), kWaiters);
  EXPECT_GE(server.CommandCalls("ssubscribe"), 1);
  EXPECT_TRUE(Eventually([&] { return Tickets(server, key) == 0; }));
  EXPECT_EQ(server.KeysWithoutTtl(std::string(kPrefix) + ":*"), std::vector<std::string>{});
}

// A ticket of a waiter elsewhere, taken by the script itself (op 6, as RedisStore sends
// it): ticket ttl `ticket_ms`.
void TakeTicket(const testing::RedisServer& server, const std::string& key,
                const std::string& token, int64_t limit, int64_t ticket_ms) {
  testing::RedisValue v =
      server.Command({"EVAL", std::string(internal::kConcurrencyLua), "1", key, "6", "", token,
                      std::to_string(limit), "30000", std::to_string(ticket_ms), "100"});
  ASSERT_EQ(v.type, testing::RedisValue::Type::kArray);
  ASSERT_EQ(v.elements.at(0).integer, 2) << "the ticket was not queued";
}

TEST(LeaseWaitRedis, ANewcomerThatDoesNotWaitNeverTakesASlotOwedToAWaiter) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("owed", {.limit = 2, .lease_ttl = seconds(30)});
  const std::string key = *cap.KeyFor("job");
  auto a = cap.Acquire("job");
  auto b = cap.Acquire("job");
  ASSERT_TRUE(a->acquired && b->acquired);
  TakeTicket(server, key, "remote-waiter", 2, 20000);
  ASSERT_THAT(a->lease.Release(), testing::IsOk());
  // One slot free, one waiter: the slot is the waiter's.
  auto newcomer = cap.Acquire("job");
  ASSERT_TRUE(newcomer.ok());
  EXPECT_FALSE(newcomer->acquired);
  EXPECT_EQ(newcomer->reason, RefusalReason::kOverLimit);
  EXPECT_EQ(newcomer->live, 1) << "refused below the limit: the free slot is owed";
  // The waiter leaves: the slot is anyone's again.
  server.Command({"EVAL", std::string(internal::kConcurrencyLua), "1", key, "7", "",
                  "remote-waiter", "2", "30000", "20000", "100"});
  EXPECT_TRUE(cap.Acquire("job")->acquired);
  EXPECT_EQ(server.KeysWithoutTtl(std::string(kPrefix) + ":*"), std::vector<std::string>{});
}

// Reads one byte from `fd` within `limit`; -1 when none came.
int ReadByte(int fd, milliseconds limit) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) != 1) return -1;
  unsigned char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : -1;
}

TEST(LeaseWaitRedis, TwentyWaitersInFourProcessesAreGrantedInArrivalOrder) {
  testing::RedisServer server;
  constexpr int kProcesses = 4, kWaiters = 20;
  int grants_pipe[2];
  ASSERT_EQ(::pipe(grants_pipe), 0);
  std::vector<int> commands(kProcesses);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = testing::Fork();
    if (pid == 0) {
      ::close(fds[1]);
      ::close(grants_pipe[0]);
      auto client =
          Client::Create({.url = server.url(), .prefix = kPrefix, .deadline = milliseconds(1000)});
      if (!client.ok()) ::_exit(3);
      auto cap = *(*client)->MakeConcurrencyLimiter("fair", {.limit = 1, .lease_ttl = seconds(30)});
      std::atomic<int> done{0};
      for (int mine = 0; mine < kWaiters / kProcesses; ++mine) {
        const int k = ReadByte(fds[0], seconds(30));
        if (k < 0) ::_exit(4);
        const int out = grants_pipe[1];
        cap.AcquireAsync("job", {.wait = seconds(30)}, [k, out, &done](StatusOr<Acquisition> a) {
          // One byte per grant on one pipe shared by every process: the grants are
          // serialised by the slot (the grantee writes before its lease is released).
          const unsigned char c = static_cast<unsigned char>(a.ok() && a->acquired ? k : 100 + k);
          if (::write(out, &c, 1) != 1) ::_exit(5);
          ++done;
        });
      }
      const auto until = steady_clock::now() + seconds(60);
      while (done.load() < kWaiters / kProcesses && steady_clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(5));
      }
      ::_exit(done.load() == kWaiters / kProcesses ? 0 : 6);
    }
    ::close(fds[0]);
    commands[static_cast<std::size_t>(p)] = fds[1];
    children.push_back(pid);
  }
  ::close(grants_pipe[1]);
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("fair", {.limit = 1, .lease_ttl = seconds(30)});
  const std::string key = *cap.KeyFor("job");
  auto held = cap.Acquire("job");
  ASSERT_TRUE(held.ok() && held->acquired);
  // Arrivals in a known order: waiter k is started (in process k % 4) once k tickets wait.
  for (int k = 0; k < kWaiters; ++k) {
    const unsigned char c = static_cast<unsigned char>(k);
    ASSERT_EQ(::write(commands[static_cast<std::size_t>(k % kProcesses)], &c, 1), 1);
    ASSERT_TRUE(Eventually([&] { return Tickets(server, key) == k + 1; }, seconds(10)))
        << "waiter " << k << " took no ticket";
  }
  // Slots freed one by one: each grantee's release is the next grant's slot.
  const auto released = steady_clock::now();
  ASSERT_THAT(held->lease.Release(), testing::IsOk());
  std::vector<int> order;
  for (int i = 0; i < kWaiters; ++i) {
    const int k = ReadByte(grants_pipe[0], seconds(30));
    ASSERT_GE(k, 0) << "no grant after " << order.size();
    ASSERT_LT(k, 100) << "waiter " << k - 100 << " was refused";
    order.push_back(k);
  }
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(steady_clock::now() - released).count();
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  for (int fd : commands) ::close(fd);
  ::close(grants_pipe[0]);
  const int inversions = Inversions(order);
  std::string shown;
  for (int k : order) shown += std::to_string(k) + " ";
  std::cout << "fairness: " << kWaiters << " waiters in " << kProcesses
            << " processes, grants in order: " << shown << "; pairs out of arrival order "
            << inversions << " of " << kWaiters * (kWaiters - 1) / 2 << "; 20 hand-overs in "
            << elapsed_ms << " ms\n";
  // Tolerance: one pair out of order (a waiter stalled past its ticket's ttl on a loaded
  // machine would lose its place; nothing else can reorder the queue).
  EXPECT_LE(inversions, 1) << shown;
  EXPECT_TRUE(Eventually([&] { return Tickets(server, key) == 0; }));
  EXPECT_EQ(server.KeysWithoutTtl(std::string(kPrefix) + ":*"), std::vector<std::string>{});
}

TEST(LeaseWaitRedis, AKilledWaitersTicketExpiresAndItsTurnPasses) {
  testing::RedisServer server;
  // The slot is held by a lease written directly (no client yet: the test forks).
  const std::string key = std::string(kPrefix) + ":{dead:job}:cc";
  server.Command({"ZADD", key, std::to_string(server.NowMs() + 60000), "1:holder"});
  server.Command({"PEXPIRE", key, "60000"});
  const pid_t child = testing::Fork();
  if (child == 0) {
    auto client = Client::Create({.url = server.url(), .prefix = kPrefix});
    if (!client.ok()) ::_exit(3);
    auto cap = *(*client)->MakeConcurrencyLimiter("dead", {.limit = 1});
    (void)cap.Acquire("job", {.wait = seconds(60)});  // killed while it waits
    ::_exit(4);
  }
  ASSERT_TRUE(Eventually([&] { return Tickets(server, key) == 1; }, seconds(10)));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  const int64_t ticket_ttl = server.Command({"PTTL", key + "x"}).integer;
  EXPECT_GT(ticket_ttl, 0);
  EXPECT_LE(ticket_ttl, 3000) << "a ticket outlives its waiter's last re-check by 3 s at most";
  server.Command({"ZREM", key, "1:holder"});
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("dead", {.limit = 1});
  ASSERT_EQ(*cap.KeyFor("job"), key);
  // The free slot is the dead waiter's turn until its ticket expires; then anyone's.
  auto owed = cap.Acquire("job");
  ASSERT_TRUE(owed.ok());
  EXPECT_FALSE(owed->acquired) << "a newcomer overtook a waiter whose ticket was live";
  std::optional<Acquisition> granted;
  EXPECT_TRUE(Eventually(
      [&] {
        auto a = cap.Acquire("job");
        if (a.ok() && a->acquired) granted.emplace(std::move(*a));
        return granted.has_value();
      },
      seconds(10), milliseconds(100)));
  EXPECT_EQ(server.Command({"EXISTS", key + "w", key + "x"}).integer, 0);
  EXPECT_EQ(server.KeysWithoutTtl(std::string(kPrefix) + ":*"), std::vector<std::string>{});
}

TEST(LeaseWaitRedis, WaitersPastTheBoundAreRefusedAtOnce) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter(
      "bound", {.limit = 1, .lease_ttl = seconds(30), .max_waiters = 2});
  const std::string key = *cap.KeyFor("job");
  auto held = cap.Acquire("job");
  ASSERT_TRUE(held->acquired);
  Grants grants;
  for (int i = 0; i < 2; ++i) {
    cap.AcquireAsync("job", {.wait = seconds(20)},
                     [&grants, i](StatusOr<Acquisition> a) { grants.Add(i, a); });
    ASSERT_TRUE(Eventually([&] { return Tickets(server, key) == i + 1; }));
  }
  auto third = cap.Acquire("job", {.wait = seconds(20)});
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->acquired);
  EXPECT_EQ(third->reason, RefusalReason::kTooManyWaiters);
  EXPECT_EQ(Tickets(server, key), 2);
  ASSERT_THAT(held->lease.Release(), testing::IsOk());
  ASSERT_TRUE(Eventually([&] { return grants.size() == 2; }, seconds(20)));
  EXPECT_EQ(grants.order, (std::vector<int>{0, 1}));
}

TEST(LeaseWaitRedis, AWaitThatEndsInTheQueueIsRefusedAndLeavesIt) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("ends", {.limit = 1, .lease_ttl = seconds(30)});
  const std::string key = *cap.KeyFor("job");
  auto held = cap.Acquire("job");
  ASSERT_TRUE(held->acquired);
  auto a = cap.Acquire("job", {.wait = milliseconds(700)});
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->acquired);
  EXPECT_EQ(a->reason, RefusalReason::kOverLimit);
  EXPECT_EQ(a->source, DecisionSource::kStore);
  EXPECT_GT(a->retry_after, milliseconds(0));
  EXPECT_TRUE(Eventually([&] { return Tickets(server, key) == 0; })) << "the ticket stayed";
}

// Redis stops answering while a caller waits: the failure policy answers, and before the
// wait would have ended.
void PausedWhileWaiting(FailurePolicy policy) {
  testing::RedisServer server;
  auto holder = Connect(server);
  auto waiter = Connect(server, {.deadline = milliseconds(200), .on_failure = policy});
  auto held_cap = *holder->MakeConcurrencyLimiter("paused", {.limit = 1});
  auto cap = *waiter->MakeConcurrencyLimiter("paused", {.limit = 1});
  const std::string key = *cap.KeyFor("job");
  auto held = held_cap.Acquire("job");
  ASSERT_TRUE(held->acquired);
  std::promise<StatusOr<Acquisition>> answer;
  const auto asked = steady_clock::now();
  constexpr auto kWait = seconds(20);
  cap.AcquireAsync("job", {.wait = kWait},
                   [&answer](StatusOr<Acquisition> a) { answer.set_value(std::move(a)); });
  ASSERT_TRUE(Eventually([&] { return Tickets(server, key) == 1; }));
  server.Pause();
  auto future = answer.get_future();
  const bool answered = future.wait_for(seconds(15)) == std::future_status::ready;
  const auto waited = steady_clock::now() - asked;
  server.Resume();
  ASSERT_TRUE(answered) << "no answer while Redis was paused";
  StatusOr<Acquisition> a = future.get();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_LT(waited, kWait) << "the policy must answer before the wait ends";
  if (policy == FailurePolicy::kClosed) {
    EXPECT_FALSE(a->acquired);
    EXPECT_EQ(a->source, DecisionSource::kFailClosed);
    EXPECT_EQ(a->reason, RefusalReason::kStoreUnavailable);
  } else {
    EXPECT_TRUE(a->acquired);
    EXPECT_EQ(a->source, DecisionSource::kFailOpen);
  }
  // The ticket left (or expires): the queue empties.
  EXPECT_TRUE(Eventually([&] { return Tickets(server, key) == 0; }, seconds(10)));
}

TEST(LeaseWaitRedis, RedisPausedWhileWaitingGetsTheClosedPolicysAnswer) {
  PausedWhileWaiting(FailurePolicy::kClosed);
}

TEST(LeaseWaitRedis, RedisPausedWhileWaitingGetsTheOpenPolicysAnswer) {
  PausedWhileWaiting(FailurePolicy::kOpen);
}

TEST(LeaseWaitRedis, BadWaitsAreInvalidArguments) {
  testing::RedisServer server;
  auto client = Connect(server);
  auto cap = *client->MakeConcurrencyLimiter("bad", {.limit = 1, .max_waiters = 0});
  EXPECT_EQ(cap.Acquire("job", {.wait = milliseconds(-1)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cap.Acquire("job", {.wait = AcquireOptions::kMaxWait + milliseconds(1)}).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(cap.Acquire("job", {.wait = seconds(1)}).status().code(), StatusCode::kInvalidArgument)
      << "max_waiters 0";
}

}  // namespace
}  // namespace sluice::lease_wait_redis_test

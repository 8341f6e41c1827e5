// Waiting acquires through the built sluiced (POST /v1/leases with "wait_ms"): the
// request is held open until a slot frees (201 then), or the wait ends (429, and the
// waiter's ticket is gone from Redis); wait_ms out of bounds is a 400; a slot that frees
// after the waiter's client left goes to the next caller.
#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "service/tests/sluiced_process.h"
#include "testing/eventually.h"
#include "testing/redis_server.h"

namespace sluiced::lease_wait_test {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Call;
using testing::HttpReply;
using testing::Sluiced;
using testing::TempDir;

constexpr char kConfig[] = R"(domain: ai
descriptors:
  - key: streams
    algorithm: concurrency
    rate_limit: {requests_per_unit: 1}
)";

std::string Body(int wait_ms = -1) {
  json j = {{"domain", "ai"}, {"entries", json::array({{{"key", "streams"}, {"value", "a"}}})}};
  if (wait_ms >= 0) j["wait_ms"] = wait_ms;
  return j.dump();
}

// The tickets waiting in the one lease set's queue.
int64_t Tickets(const sluice::testing::RedisServer& redis) {
  const std::vector<std::string> queues = redis.Keys("sluice:*ccw");
  return queues.empty() ? 0 : redis.Command({"ZCARD", queues[0]}).integer;
}

TEST(LeaseWait, AnAcquireWithWaitMsIsHeldUntilASlotFreesOrTheWaitEnds) {
  sluice::testing::RedisServer redis;
  TempDir config;
  config.Write("ai.yaml", kConfig);
  // A read timeout shorter than the waits: a held request is not a slow client.
  Sluiced s(config.path(), redis.url(), {"--deadline-ms", "200", "--read-timeout-ms", "700"});
  HttpReply first = Call(s.http_port(), "POST", "/v1/leases", Body());
  ASSERT_EQ(first.status, 201) << first.body;
  const std::string handle = json::parse(first.body)["lease"];

  for (const std::string& bad :
       {std::string(R"("x")"), std::string("-1"), std::string("60001"), std::string("1.5")}) {
    std::string body = Body(0);
    body.replace(body.find("\"wait_ms\":0"), 11, "\"wait_ms\":" + bad);
    HttpReply r = Call(s.http_port(), "POST", "/v1/leases", body);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
  }

  // A waiter: held open while the slot is taken, granted when it is released.
  auto waiting = std::async(std::launch::async, [&] {
    testing::Connection c(s.http_port(), seconds(30));
    c.Send(testing::Request("POST", "/v1/leases", Body(20000)));
    return c.Read();
  });
  ASSERT_TRUE(sluice::testing::Eventually([&] { return Tickets(redis) == 1; }))
      << "the waiting acquire took no ticket";
  std::this_thread::sleep_for(milliseconds(900));  // past the read timeout, still held
  ASSERT_EQ(waiting.wait_for(milliseconds(0)), std::future_status::timeout)
      << "answered while no slot was free";
  EXPECT_EQ(Call(s.http_port(), "DELETE", "/v1/leases/" + handle).status, 204);
  HttpReply granted = waiting.get();
  ASSERT_EQ(granted.status, 201) << granted.body;
  EXPECT_EQ(json::parse(granted.body)["acquired"], true);

  // A wait that ends in the queue: 429, and its ticket left.
  HttpReply refused = Call(s.http_port(), "POST", "/v1/leases", Body(300));
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["reason"], "over_limit");
  EXPECT_TRUE(sluice::testing::Eventually([&] { return Tickets(redis) == 0; }));
  EXPECT_EQ(redis.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
}

// max_waiters in the config bounds the acquires of one id that wait at once.
TEST(LeaseWait, MaxWaitersFromTheConfigRefusesTheWaiterPastIt) {
  sluice::testing::RedisServer redis;
  TempDir config;
  std::string yaml = kConfig;
  yaml.insert(yaml.find("    rate_limit"), "    max_waiters: 1\n");
  config.Write("ai.yaml", yaml);
  Sluiced s(config.path(), redis.url(), {"--deadline-ms", "200"});
  ASSERT_EQ(Call(s.http_port(), "POST", "/v1/leases", Body()).status, 201);
  testing::Connection first(s.http_port(), seconds(10));
  ASSERT_TRUE(first.Send(testing::Request("POST", "/v1/leases", Body(3000))));
  ASSERT_TRUE(sluice::testing::Eventually([&] { return Tickets(redis) == 1; }));
  HttpReply second = Call(s.http_port(), "POST", "/v1/leases", Body(3000));
  EXPECT_EQ(second.status, 429) << second.body;
  EXPECT_EQ(json::parse(second.body)["reason"], "too_many_waiters");
  EXPECT_EQ(first.Read().status, 429);  // its wait ends in the queue
}

// The lease set's live leases.
int64_t Leases(const sluice::testing::RedisServer& redis) {
  const std::vector<std::string> sets = redis.Keys("sluice:*}:cc");
  return sets.empty() ? 0 : redis.Command({"ZCARD", sets[0]}).integer;
}

// A client whose own timeout is shorter than its wait_ms leaves while it waits: the slot
// that frees afterwards must not go to nobody (a lease no one heartbeats or releases would
// hold it for lease_ttl, two minutes here).
TEST(LeaseWait, ASlotFreedAfterTheWaitersClientLeftGoesToTheNextCaller) {
  sluice::testing::RedisServer redis;
  TempDir config;
  config.Write("ai.yaml", kConfig);
  Sluiced s(config.path(), redis.url(), {"--deadline-ms", "200"});
  HttpReply first = Call(s.http_port(), "POST", "/v1/leases", Body());
  ASSERT_EQ(first.status, 201) << first.body;
  const std::string handle = json::parse(first.body)["lease"];
  {
    testing::Connection leaving(s.http_port());
    ASSERT_TRUE(leaving.Send(testing::Request("POST", "/v1/leases", Body(20000))));
    ASSERT_TRUE(sluice::testing::Eventually([&] { return Tickets(redis) == 1; }))
        << "the waiting acquire took no ticket";
  }  // its client gives up: the connection closes while it waits
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(Call(s.http_port(), "DELETE", "/v1/leases/" + handle).status, 204);
  // The waiter's ticket is first in the queue, so the freed slot goes to it, and is given
  // back at once since nobody holds it.
  ASSERT_TRUE(sluice::testing::Eventually([&] {
    return Tickets(redis) == 0 && Leases(redis) == 0;
  })) << Leases(redis)
      << " lease(s) held, " << Tickets(redis) << " ticket(s): the slot went to a "
      << "client that had left";
  HttpReply next = Call(s.http_port(), "POST", "/v1/leases", Body());
  EXPECT_EQ(next.status, 201) << next.body;
  HttpReply metrics = Call(s.metrics_port(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("sluiced_lease_waits_abandoned_total 1\n"), std::string::npos)
      << metrics.body.substr(0, 2000);
}

// A client that sends its next request while it waits (pipelining) is there: its waiting
// acquire is granted, then the next request answered.
TEST(LeaseWait, AClientThatPipelinesItsNextRequestHasNotLeft) {
  sluice::testing::RedisServer redis;
  TempDir config;
  config.Write("ai.yaml", kConfig);
  Sluiced s(config.path(), redis.url(), {"--deadline-ms", "200"});
  HttpReply first = Call(s.http_port(), "POST", "/v1/leases", Body());
  ASSERT_EQ(first.status, 201) << first.body;
  testing::Connection waiter(s.http_port(), seconds(10));
  ASSERT_TRUE(waiter.Send(testing::Request("POST", "/v1/leases", Body(20000))));
  ASSERT_TRUE(sluice::testing::Eventually([&] { return Tickets(redis) == 1; }));
  ASSERT_TRUE(waiter.Send(testing::Request("GET", "/healthz")));
  std::this_thread::sleep_for(milliseconds(200));
  const std::string handle = json::parse(first.body)["lease"];
  EXPECT_EQ(Call(s.http_port(), "DELETE", "/v1/leases/" + handle).status, 204);
  HttpReply granted = waiter.Read();
  EXPECT_EQ(granted.status, 201) << granted.body;
  EXPECT_EQ(waiter.Read().status, 200);
  EXPECT_EQ(Leases(redis), 1);
  HttpReply metrics = Call(s.metrics_port(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("sluiced_lease_waits_abandoned_total 0\n"), std::string::npos);
}

}  // namespace
}  // namespace sluiced::lease_wait_test

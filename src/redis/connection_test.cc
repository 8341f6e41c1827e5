// The Redis connection layer against a real redis-server: pipelining order, deadlines
// on a silent server, stall detection, reconnect, NOSCRIPT reload, AUTH/ACL, SELECT,
// unix sockets, start-up errors, which deadline misses are a client-side backlog, and
// batches: one reply per call, NOSCRIPT on a batch.
#include "sluice/boost_first.h"  // before any Boost header

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "core/client_side.h"
#include "redis/connection.h"
#include "redis/resp.h"
#include "redis/scripts.h"
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
using testing::RedisServer;

// An io_context running on `threads` threads for the duration of a test.
class IoThreads {
 public:
  explicit IoThreads(int threads) : work_(io_.get_executor()) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  ~IoThreads() {
    work_.reset();
    for (auto& t : threads_) t.join();
  }
  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
};

std::shared_ptr<internal::Connection> StartConnection(boost::asio::io_context& io,
                                                      const std::string& url,
                                                      internal::ConnectionOptions options = {}) {
  auto endpoint = internal::ParseRedisUrl(url);
  EXPECT_THAT(endpoint, IsOk());
  auto conn = internal::Connection::Make(io.get_executor(), *endpoint, std::move(options));
  std::promise<Status> started;
  conn->Start([&](Status s) { started.set_value(std::move(s)); });
  Status s = started.get_future().get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return conn;
}

// Tests that do not time calls get a deadline a loaded CI machine cannot miss (the 5 ms
// default would turn a slow scheduler into a fail_open decision).
std::shared_ptr<Client> MustCreate(ClientOptions options) {
  if (options.deadline == ClientOptions{}.deadline) options.deadline = seconds(2);
  auto client = Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  if (!client.ok()) std::abort();
  return *client;
}

// A decision the store made (not a failure policy's).
bool FromStore(const StatusOr<Decision>& d) {
  return d.ok() && d->source == DecisionSource::kStore;
}

using testing::Eventually;

TEST(Connection, PipelinedRepliesReachTheirCallersInOrder) {
  RedisServer server;
  IoThreads io(2);  // two I/O threads: the strand must still serialize the connection
  auto conn = StartConnection(io.io(), server.url());
  constexpr int kThreads = 8, kPerThread = 2000;
  std::atomic<int> matched{0}, mismatched{0}, failed{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string payload = "t" + std::to_string(t) + ":" + std::to_string(i);
        conn->Send(internal::FormatCommand({"ECHO", payload}), steady_clock::now() + seconds(10),
                   [&, payload](const Status& s, const redisReply* reply) {
                     if (!s.ok()) {
                       ++failed;
                     } else if (std::string(reply->str, reply->len) == payload) {
                       ++matched;
                     } else {
                       ++mismatched;
                     }
                     ++done;
                   });
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(Eventually([&] { return done.load() == kThreads * kPerThread; }, seconds(30)));
  EXPECT_EQ(matched.load(), kThreads * kPerThread);
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  auto stats = conn->stats();
  EXPECT_EQ(stats.commands, uint64_t{kThreads * kPerThread} + 1);  // + the handshake INFO
  EXPECT_LT(stats.writes, stats.commands) << "no command ever joined another's write";
  conn->Shutdown();
}

TEST(Connection, DeadlineHoldsWhenRedisIsSilentAndCompletesOnce) {
  RedisServer server;
  auto client = MustCreate(
      {.url = server.url(), .deadline = milliseconds(30), .on_failure = FailurePolicy::kClosed});
  auto limiter = *client->MakeLimiter("silent", {.limit = 10, .window = seconds(60)});
  const CheckOptions patient{.deadline = seconds(5)};  // for calls that must succeed
  ASSERT_TRUE(FromStore(limiter.Check("a", patient)));

  server.Pause();
  std::atomic<int> calls{0};
  std::promise<StatusOr<Decision>> first;
  const auto t0 = steady_clock::now();
  limiter.CheckAsync("a", {}, [&](StatusOr<Decision> d) {
    if (calls.fetch_add(1) == 0) first.set_value(std::move(d));
  });
  StatusOr<Decision> decision = first.get_future().get();
  const auto waited = steady_clock::now() - t0;
  ASSERT_TRUE(decision.ok()) << decision.status().ToString();
  EXPECT_FALSE(decision->allowed);
  EXPECT_EQ(decision->source, DecisionSource::kFailClosed);
  EXPECT_EQ(decision->reason, RefusalReason::kStoreUnavailable);
  EXPECT_LT(waited, milliseconds(1000)) << "the deadline was not enforced while Redis was silent";

  auto sync = limiter.Check("b");
  ASSERT_THAT(sync, IsOk());
  EXPECT_EQ(sync->source, DecisionSource::kFailClosed);
  // A refund is not a decision: the store's error reaches the caller.
  EXPECT_EQ(limiter.Refund("b", 1).status().code(), StatusCode::kDeadlineExceeded);

  server.Resume();
  // The late replies arrive and are matched to the timed-out calls, which stay completed.
  ASSERT_TRUE(Eventually([&] { return FromStore(limiter.Check("c", patient)); }));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_GE(client->stats().deadline_exceeded, 3u);
}

TEST(Connection, StalledConnectionIsReplacedAndWorksAgain) {
  RedisServer server;
  auto client = MustCreate(
      {.url = server.url(), .deadline = milliseconds(20), .stall_timeout = milliseconds(200)});
  auto limiter = *client->MakeLimiter("stall", {.limit = 100, .window = seconds(60)});
  const CheckOptions patient{.deadline = milliseconds(150)};  // below the stall timeout
  ASSERT_TRUE(FromStore(limiter.Check("a", patient)));
  server.Pause();
  auto paused = limiter.Check("a");
  ASSERT_THAT(paused, IsOk());
  EXPECT_EQ(paused->source, DecisionSource::kFailOpen);  // the client's default policy
  std::this_thread::sleep_for(milliseconds(400));
  server.Resume();
  ASSERT_TRUE(Eventually([&] { return FromStore(limiter.Check("a", patient)); }));
  EXPECT_GE(client->stats().reconnects, 1u);
}

// A stall found while a call with a later deadline still waited (the cluster router's
// slot-map read waits up to connect_timeout) breaks the connection; the calls made on
// the connection that replaces it must still return at their deadline when Redis goes
// silent again, not when it answers.
TEST(Connection, DeadlinesHoldAfterAStallBrokeTheConnectionWhileACallWaited) {
  RedisServer server;
  IoThreads io(1);
  auto endpoint = internal::ParseRedisUrl(server.url());
  ASSERT_THAT(endpoint, IsOk());
  auto conn = internal::Connection::Make(io.io().get_executor(), *endpoint,
                                         {.stall_timeout = milliseconds(100)});
  std::promise<Status> started;
  conn->Start([&](Status s) { started.set_value(std::move(s)); });
  ASSERT_THAT(started.get_future().get(), IsOk());
  const std::string ping = internal::FormatCommand({"PING"});

  server.Pause();
  // Its deadline is still ahead when the stall breaks the connection.
  const auto waited_until = steady_clock::now() + milliseconds(300);
  std::promise<Status> waiting;
  conn->Send(ping, waited_until, [&](const Status& s, const redisReply*) { waiting.set_value(s); });
  const Status broken = waiting.get_future().get();
  EXPECT_EQ(broken.code(), StatusCode::kUnavailable) << broken.ToString();
  server.Resume();
  ASSERT_TRUE(Eventually([&] { return conn->ready(); }));
  std::this_thread::sleep_until(waited_until + milliseconds(50));

  server.Pause();
  const auto t0 = steady_clock::now();
  std::promise<Status> silent;
  conn->Send(ping, t0 + milliseconds(50),
             [&](const Status& s, const redisReply*) { silent.set_value(s); });
  auto result = silent.get_future();
  const bool in_time = result.wait_for(seconds(2)) == std::future_status::ready;
  const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
  server.Resume();
  EXPECT_TRUE(in_time) << "a call with a 50 ms deadline was not answered within " << took.count()
                       << " ms while Redis was silent";
  EXPECT_LT(took, milliseconds(500));
  EXPECT_EQ(result.get().code(), StatusCode::kDeadlineExceeded);
  conn->Shutdown();
}

TEST(Connection, ReconnectsAfterRedisRestarts) {
  RedisServer server;
  auto client = MustCreate({.url = server.url(),
                            .deadline = milliseconds(50),
                            .reconnect_max_backoff = milliseconds(100)});
  auto limiter = *client->MakeLimiter("restart", {.limit = 100, .window = seconds(60)});
  const CheckOptions patient{.deadline = milliseconds(900)};
  ASSERT_TRUE(FromStore(limiter.Check("a", patient)));
  server.Kill();
  EXPECT_EQ(limiter.Refund("a", 1).status().code(), StatusCode::kUnavailable);
  auto down = limiter.Check("a");
  ASSERT_THAT(down, IsOk());
  EXPECT_EQ(down->source, DecisionSource::kFailOpen);
  server.Start();
  ASSERT_TRUE(Eventually([&] { return FromStore(limiter.Check("a", patient)); }))
      << "the client did not come back after Redis restarted";
  // The restarted server is empty: the window starts again, scripts were reloaded.
  auto d = limiter.Check("a", patient);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(client->stats().reconnects, 1u);
}

TEST(Connection, ScriptFlushIsInvisibleToCallers) {
  RedisServer server;
  auto client = MustCreate({.url = server.url(), .deadline = milliseconds(200)});
  auto limiter = *client->MakeLimiter("flush", {.limit = 3, .window = seconds(60)});
  EXPECT_EQ(limiter.Check("a")->remaining, 2);
  ASSERT_EQ(server.Command({"SCRIPT", "FLUSH"}).str, "OK");
  auto d = limiter.Check("a");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->remaining, 1);
  EXPECT_EQ(client->stats().noscript_retries, 1u);
  // Reloaded by the EVAL: the next call is a plain EVALSHA again.
  EXPECT_EQ(limiter.Check("a")->remaining, 0);
  EXPECT_EQ(client->stats().noscript_retries, 1u);
}

// A connection with sluice's scripts and batching, as RedisStore makes it.
std::shared_ptr<internal::Connection> StartBatchingConnection(boost::asio::io_context& io,
                                                              const std::string& url) {
  auto endpoint = internal::ParseRedisUrl(url);
  EXPECT_TRUE(endpoint.ok());
  internal::ConnectionOptions options;
  options.scripts = internal::AllScripts();
  options.batch_script = internal::kBatchScript;
  auto conn = internal::Connection::Make(io.get_executor(), *endpoint, std::move(options));
  std::promise<Status> started;
  conn->Start([&](Status s) { started.set_value(std::move(s)); });
  Status s = started.get_future().get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return conn;
}

// One fixed-window consume of `cost` (a string, to send a bad one) under limit 10 per
// minute; the future gets "<code>:<remaining>" or the error.
std::future<std::string> Consume(internal::Connection& conn, const std::string& key,
                                 std::string_view cost, uint32_t batch_tag = 0) {
  std::string args;
  for (std::string_view a : {std::string_view("0"), std::string_view(""), cost,
                             std::string_view("10"), std::string_view("60000"),
                             std::string_view("0"), std::string_view("0"), std::string_view("0")}) {
    internal::AppendBulk(args, a);
  }
  auto promise = std::make_shared<std::promise<std::string>>();
  conn.Call({.script = 0,
             .function = 0,
             .key = key,
             .args = std::move(args),
             .arg_items = 8,
             .batch_tag = batch_tag},
            steady_clock::now() + seconds(10), [promise](const Status& s, const redisReply* r) {
              if (!s.ok()) {
                promise->set_value("error: " + s.ToString());
              } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
                promise->set_value("unexpected reply");
              } else {
                promise->set_value(std::to_string(r->element[0]->integer) + ":" +
                                   std::to_string(r->element[1]->integer));
              }
            });
  return promise->get_future();
}

TEST(Connection, CallsQueuedTogetherAreOneBatchWithAReplyEach) {
  RedisServer server;
  IoThreads threads(1);
  auto conn = StartBatchingConnection(threads.io(), server.url());
  conn->Cork();
  auto first = Consume(*conn, "b:{x}:fw", "1");
  auto bad = Consume(*conn, "b:{y}:fw", "not a number");
  auto second = Consume(*conn, "b:{x}:fw", "2");
  conn->Uncork();
  EXPECT_EQ(first.get(), "1:9");
  const std::string error = bad.get();
  EXPECT_EQ(error.rfind("error: ", 0), 0u) << error;  // that call alone fails
  EXPECT_EQ(second.get(), "1:7");                     // and decides after the first
  const internal::Connection::Stats stats = conn->stats();
  EXPECT_EQ(stats.batches, 1u);
  EXPECT_EQ(stats.batched_calls, 3u);
  EXPECT_GT(server.Command({"PTTL", "b:{x}:fw"}).integer, 0);
  // A call alone (nothing else queued) is its own EVALSHA.
  EXPECT_EQ(Consume(*conn, "b:{x}:fw", "1").get(), "1:6");
  EXPECT_EQ(conn->stats().batches, 1u);
  conn->Shutdown();
}

// A call with the arguments of the last call of its function before it sends a marker in
// their place ('0/'), or, when one argument differs, the marker naming it and that one
// ('0/3', then the cost); each still decides on its own key, in order, and a bad call
// fails alone, as does a call that reuses its bad argument.
class ConnectionBatchTags : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ConnectionBatchTags, CallsWithTheArgumentsOfTheCallBeforeShareThem) {
  const uint32_t tag = GetParam();
  RedisServer server;
  IoThreads threads(1);
  auto conn = StartBatchingConnection(threads.io(), server.url());
  conn->Cork();
  std::vector<std::future<std::string>> replies;
  replies.push_back(Consume(*conn, "s:{x}:fw", "1", tag));    // sent in full
  replies.push_back(Consume(*conn, "s:{y}:fw", "1", tag));    // shares
  replies.push_back(Consume(*conn, "s:{x}:fw", "1", tag));    // shares: x's second
  replies.push_back(Consume(*conn, "s:{x}:fw", "bad", tag));  // all but its cost; fails alone
  replies.push_back(Consume(*conn, "s:{z}:fw", "bad", tag));  // shares the bad one: fails too
  replies.push_back(Consume(*conn, "s:{x}:fw", "3", tag));    // all but its cost
  replies.push_back(Consume(*conn, "s:{y}:fw", "3", tag));    // shares
  // The slow log at threshold 0 keeps every command with its arguments.
  server.Command({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  server.Command({"SLOWLOG", "RESET"});
  conn->Uncork();
  std::vector<std::string> got;
  for (auto& r : replies) got.push_back(r.get());
  EXPECT_EQ(got[0], "1:9");
  EXPECT_EQ(got[1], "1:9");
  EXPECT_EQ(got[2], "1:8");
  EXPECT_EQ(got[3].rfind("error: ", 0), 0u) << got[3];
  EXPECT_EQ(got[4].rfind("error: ", 0), 0u) << got[4];
  EXPECT_EQ(got[5], "1:5");
  EXPECT_EQ(got[6], "1:6");
  const internal::Connection::Stats stats = conn->stats();
  EXPECT_EQ(stats.batches, 1u);
  EXPECT_EQ(stats.batched_calls, 7u);
  EXPECT_EQ(stats.shared_arguments, 6u);
  EXPECT_EQ(server.Command({"GET", "s:{x}:fw"}).str, "5");  // the count (Redis's clock)
  EXPECT_EQ(server.Command({"GET", "s:{y}:fw"}).str, "4");
  EXPECT_EQ(server.KeysWithoutTtl("s:*"), std::vector<std::string>{});
  // The batch's numkeys: 7 declared keys, or 0 (then the count and the keys follow);
  // then the calls' items.
  std::string numkeys, items;
  for (const auto& entry : server.Command({"SLOWLOG", "GET", "100"}).elements) {
    const auto& argv = entry.elements.at(3).elements;
    if (argv.empty() || argv[0].str != "EVALSHA") continue;
    numkeys = argv.at(2).str + " " + argv.at(3).str;
    for (size_t i = tag == internal::Connection::kAnySlot ? 11 : 10; i < argv.size(); ++i) {
      items += "[" + argv[i].str + "]";
    }
  }
  EXPECT_EQ(numkeys, tag == internal::Connection::kAnySlot ? "0 7" : "7 s:{x}:fw");
  EXPECT_EQ(items, "[0][0][][1][10][60000][0][0][0][0/][0/][0/3][bad][0/][0/3][3][0/]");
  conn->Shutdown();
}

// Tag 0: the keys declared (one node, or one cluster slot); kAnySlot: undeclared, as the
// cluster router sends the calls of one primary (src/algo/batch.lua reads them from ARGV).
INSTANTIATE_TEST_SUITE_P(DeclaredAndUndeclaredKeys, ConnectionBatchTags,
                         ::testing::Values(0u, internal::Connection::kAnySlot));

// Any call of the batch, made into one line: "<type>" then its items, or "error: …".
std::string Describe(const Status& s, const redisReply* r) {
  if (!s.ok()) return "error: " + s.ToString();
  if (r->type == REDIS_REPLY_INTEGER) return "int " + std::to_string(r->integer);
  if (r->type != REDIS_REPLY_ARRAY) return "type " + std::to_string(r->type);
  std::string out = "array";
  for (size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    out += e->type == REDIS_REPLY_INTEGER  ? " " + std::to_string(e->integer)
           : e->type == REDIS_REPLY_STRING ? " '" + std::string(e->str, e->len) + "'"
                                           : " ?";
  }
  return out;
}

// One call of concurrency.lua's (function 5) or a release's (6) by Connection::Call.
std::future<std::string> LeaseCall(internal::Connection& conn, int function, const std::string& key,
                                   std::vector<std::string> argv) {
  std::string args;
  for (const std::string& a : argv) internal::AppendBulk(args, a);
  auto promise = std::make_shared<std::promise<std::string>>();
  conn.Call({.script = function == 6 ? -1 : internal::kConcurrencyScript,
             .command = function == 6 ? "ZREM" : "",
             .function = function,
             .key = key,
             .args = std::move(args),
             .arg_items = static_cast<int>(argv.size())},
            steady_clock::now() + seconds(10), [promise](const Status& s, const redisReply* r) {
              promise->set_value(Describe(s, r));
            });
  return promise->get_future();
}

// An acquire of lease `token` on `key` under `limit` (ttl 60 s, Redis TIME).
std::future<std::string> Acquire(internal::Connection& conn, const std::string& key,
                                 const std::string& token, const std::string& limit) {
  return LeaseCall(conn, 5, key, {"0", "", token, limit, "60000"});
}

// The batch's reply is one flat array (src/algo/batch.lua): tables of 4 items, a list of
// any length, an empty one, a release's bare integer and an error, side by side, each
// reach their own call whole.
TEST(Connection, RepliesOfEveryShapeInOneBatchReachTheirCalls) {
  RedisServer server;
  IoThreads threads(1);
  auto conn = StartBatchingConnection(threads.io(), server.url());
  // Two leases on l, one on m, taken first (each a batch of its own or alone).
  conn->Cork();
  auto a = Acquire(*conn, "f:{l}:c", "ta", "5");
  auto b = Acquire(*conn, "f:{l}:c", "tb", "5");
  auto c = Acquire(*conn, "f:{m}:c", "tc", "5");
  conn->Uncork();
  ASSERT_EQ(a.get().rfind("array 1 1 ", 0), 0u);
  ASSERT_EQ(b.get().rfind("array 1 2 ", 0), 0u);
  ASSERT_EQ(c.get().rfind("array 1 1 ", 0), 0u);
  const auto members = server.Command({"ZRANGE", "f:{l}:c", "0", "-1"});
  ASSERT_EQ(members.elements.size(), 2u);
  const std::string member_a = members.elements[0].str;  // "<ms>:ta"
  ASSERT_NE(member_a.find(":ta"), std::string::npos);

  const uint64_t batches = conn->stats().batches;
  conn->Cork();
  auto list_l = LeaseCall(*conn, 5, "f:{l}:c", {"4", "", "", "", ""});       // 1 + 2 x 2 items
  auto consume = Consume(*conn, "f:{x}:fw", "1");                            // 4 items
  auto release = LeaseCall(*conn, 6, "f:{l}:c", {member_a});                 // a bare 1
  auto again = LeaseCall(*conn, 6, "f:{l}:c", {member_a});                   // a bare 0
  auto bad = Consume(*conn, "f:{x}:fw", "not a number");                     // an error
  auto list_m = LeaseCall(*conn, 5, "f:{m}:c", {"4", "", "", "", ""});       // 3 items
  auto release_all = LeaseCall(*conn, 5, "f:{n}:c", {"3", "", "", "", ""});  // none there: 4 items
  auto list_l2 = LeaseCall(*conn, 5, "f:{l}:c", {"4", "", "", "", ""});      // 3 items: b's only
  auto last = Consume(*conn, "f:{x}:fw", "2");  // 4 items, after the error
  server.Command({"SET", "f:{w}:c", "not a lease set"});
  auto list_foreign = LeaseCall(*conn, 5, "f:{w}:c", {"4", "", "", "", ""});  // {now}: 1 item
  conn->Uncork();
  const std::string l = list_l.get();
  EXPECT_EQ(l.rfind("array ", 0), 0u) << l;
  EXPECT_NE(l.find("'" + member_a + "'"), std::string::npos) << l;
  EXPECT_NE(l.find(":tb'"), std::string::npos) << l;
  EXPECT_EQ(consume.get(), "1:9");
  EXPECT_EQ(release.get(), "int 1");
  EXPECT_EQ(again.get(), "int 0");
  EXPECT_EQ(bad.get().rfind("error: ", 0), 0u);
  const std::string m = list_m.get();
  EXPECT_NE(m.find(":tc'"), std::string::npos) << m;
  EXPECT_EQ(std::count(m.begin(), m.end(), ' '), 3) << m;  // "array now member expires"
  EXPECT_EQ(release_all.get().rfind("array 1 0 ", 0), 0u);
  const std::string l2 = list_l2.get();
  EXPECT_EQ(l2.find(":ta'"), std::string::npos) << l2;
  EXPECT_NE(l2.find(":tb'"), std::string::npos) << l2;
  EXPECT_EQ(last.get(), "1:7");
  const std::string foreign = list_foreign.get();  // the foreign key deleted, no leases
  EXPECT_EQ(std::count(foreign.begin(), foreign.end(), ' '), 1) << foreign;
  EXPECT_EQ(server.Command({"EXISTS", "f:{w}:c"}).integer, 0);
  EXPECT_EQ(conn->stats().batches, batches + 1);  // all ten in one script call
  conn->Shutdown();
}
// A concurrency limiter's acquires differ in their token only: each sends the marker
// '5/3' and its token, reusing the last acquire's arguments even with releases between
// them; every lease is still its own, on its own key.
TEST(Connection, AcquiresSendTheirTokenOnlyHoweverReleasesInterleave) {
  RedisServer server;
  IoThreads threads(1);
  auto conn = StartBatchingConnection(threads.io(), server.url());
  server.Command({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  conn->Cork();
  auto a = Acquire(*conn, "i:{p}:c", "ta", "2");
  auto b = Acquire(*conn, "i:{q}:c", "tb", "2");
  auto c = Acquire(*conn, "i:{p}:c", "tc", "2");
  conn->Uncork();
  EXPECT_EQ(a.get().rfind("array 1 1 ", 0), 0u);
  EXPECT_EQ(b.get().rfind("array 1 1 ", 0), 0u);
  EXPECT_EQ(c.get().rfind("array 1 2 ", 0), 0u);
  const auto p = server.Command({"ZRANGE", "i:{p}:c", "0", "-1"});
  ASSERT_EQ(p.elements.size(), 2u);
  const std::string member_a =
      p.elements[0].str.find(":ta") != std::string::npos ? p.elements[0].str : p.elements[1].str;
  const std::string member_b = server.Command({"ZRANGE", "i:{q}:c", "0", "0"}).elements.at(0).str;
  conn->Cork();
  auto release_a = LeaseCall(*conn, 6, "i:{p}:c", {member_a});
  auto d = Acquire(*conn, "i:{p}:c", "td", "2");  // a's slot
  auto release_b = LeaseCall(*conn, 6, "i:{q}:c", {member_b});
  auto e = Acquire(*conn, "i:{p}:c", "te", "2");  // refused: c, d
  auto f = Acquire(*conn, "i:{q}:c", "tf", "2");  // b's slot
  conn->Uncork();
  EXPECT_EQ(release_a.get(), "int 1");
  EXPECT_EQ(d.get().rfind("array 1 2 ", 0), 0u);
  EXPECT_EQ(release_b.get(), "int 1");
  EXPECT_EQ(e.get().rfind("array 0 2 ", 0), 0u);
  EXPECT_EQ(f.get().rfind("array 1 1 ", 0), 0u);
  EXPECT_EQ(conn->stats().batches, 2u);
  EXPECT_EQ(conn->stats().shared_arguments, 4u);  // b, c; e, f
  EXPECT_EQ(server.KeysWithoutTtl("i:*"), std::vector<std::string>{});
  // What the two batches sent after their keys.
  std::vector<std::string> sent;
  for (const auto& entry : server.Command({"SLOWLOG", "GET", "100"}).elements) {
    const auto& argv = entry.elements.at(3).elements;
    if (argv.size() < 3 || argv[0].str != "EVALSHA") continue;
    std::string items;
    for (size_t i = 3 + std::stoul(argv[2].str); i < argv.size(); ++i) {
      items += "[" + (argv[i].str.find(':') != std::string::npos ? "member" : argv[i].str) + "]";
    }
    sent.insert(sent.begin(), items);  // the slow log lists the newest first
  }
  EXPECT_EQ(sent, (std::vector<std::string>{
                      "[5][0][][ta][2][60000][5/3][tb][5/3][tc]",
                      "[6][member][5][0][][td][2][60000][6][member][5/3][te][5/3][tf]"}));
  conn->Shutdown();
}

// The batch script read malformed items: a call that reuses the arguments of no earlier
// call, or names an argument it may not replace (the clock), fails with every call after
// it (the rest cannot be parsed); the calls before it stand.
TEST(Connection, ABatchWhoseItemsCannotBeParsedFailsFromThereOn) {
  RedisServer server;
  const std::string source(internal::AllScripts()[internal::kBatchScript].source);
  const auto reused_nothing = server.Command({"EVAL", source, "2", "m:{a}:fw", "m:{b}:fw", "0", "0",
                                              "", "1", "10", "60000", "0", "0", "0", "3/"});
  ASSERT_EQ(reused_nothing.type, internal::Reply::Type::kArray);
  ASSERT_EQ(reused_nothing.elements.size(), 5u);  // a's 4 items, then b's error
  EXPECT_EQ(reused_nothing.elements[0].integer, 1);
  EXPECT_EQ(reused_nothing.elements[4].type, internal::Reply::Type::kError);
  EXPECT_NE(reused_nothing.elements[4].str.find("\"3/\" reuses the arguments of no earlier call"),
            std::string::npos)
      << reused_nothing.elements[4].str;
  const auto the_clock =
      server.Command({"EVAL", source, "3", "m:{a}:fw", "m:{b}:fw", "m:{c}:fw", "0", "0", "", "1",
                      "10", "60000", "0", "0", "0", "0/2", "5", "0/"});
  ASSERT_EQ(the_clock.elements.size(), 6u);     // a's 4 items, then b's and c's errors
  EXPECT_EQ(the_clock.elements[1].integer, 8);  // a's second unit of 10
  for (size_t i : {4u, 5u}) {
    EXPECT_EQ(the_clock.elements[i].type, internal::Reply::Type::kError);
    EXPECT_NE(the_clock.elements[i].str.find("unknown function \"0/2\" at call 2"),
              std::string::npos)
        << the_clock.elements[i].str;
  }
  EXPECT_EQ(server.Command({"GET", "m:{b}:fw"}).type, internal::Reply::Type::kNil);
  EXPECT_EQ(server.Command({"GET", "m:{c}:fw"}).type, internal::Reply::Type::kNil);
}

TEST(Connection, ABatchThatMeetsNoscriptIsSentAgainWithTheSource) {
  RedisServer server;
  IoThreads threads(1);
  auto conn = StartBatchingConnection(threads.io(), server.url());
  conn->Cork();
  std::vector<std::future<std::string>> replies;
  for (int i = 0; i < 5; ++i)
    replies.push_back(Consume(*conn, "n:{" + std::to_string(i) + "}:fw", "1"));
  ASSERT_EQ(server.Command({"SCRIPT", "FLUSH"}).str, "OK");
  conn->Uncork();
  for (auto& r : replies) EXPECT_EQ(r.get(), "1:9");
  EXPECT_GE(conn->stats().noscript_retries, 1u);
  // The batch script is cached again: the next batch goes by EVALSHA.
  const uint64_t retries = conn->stats().noscript_retries;
  conn->Cork();
  auto a = Consume(*conn, "n:{0}:fw", "1");
  auto b = Consume(*conn, "n:{1}:fw", "1");
  conn->Uncork();
  EXPECT_EQ(a.get(), "1:8");
  EXPECT_EQ(b.get(), "1:8");
  EXPECT_EQ(conn->stats().noscript_retries, retries);
  EXPECT_EQ(server.KeysWithoutTtl("n:*"), std::vector<std::string>{});
  conn->Shutdown();
}

TEST(Connection, AuthenticatesWithPasswordAndAclUser) {
  RedisServer server({.requirepass = "s3cret"});
  {
    auto client = MustCreate({.url = server.url()});
    auto limiter = *client->MakeLimiter("auth", {.limit = 1, .window = seconds(60)});
    EXPECT_TRUE(limiter.Check("x")->allowed);
  }
  const std::string base = "127.0.0.1:" + std::to_string(server.port());
  auto wrong = Client::Create({.url = "redis://:nope@" + base});
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied) << wrong.status().ToString();
  auto none = Client::Create({.url = "redis://" + base});
  EXPECT_EQ(none.status().code(), StatusCode::kPermissionDenied) << none.status().ToString();

  ASSERT_EQ(
      server.Command({"ACL", "SETUSER", "limiter", "on", ">p%w@rd", "~sluice:*", "+@all"}).str,
      "OK");
  auto acl = MustCreate({.url = "redis://limiter:p%25w%40rd@" + base});
  auto limiter = *acl->MakeLimiter("acl", {.limit = 1, .window = seconds(60)});
  EXPECT_TRUE(limiter.Check("x")->allowed);
  EXPECT_FALSE(limiter.Check("x")->allowed);
}

TEST(Connection, SelectsTheDatabaseOfTheUrl) {
  RedisServer server;
  auto client = MustCreate({.url = server.url() + "/3"});
  auto limiter = *client->MakeLimiter("db", {.limit = 1, .window = seconds(60)});
  ASSERT_THAT(limiter.Check("x"), IsOk());
  std::string keyspace = server.Command({"INFO", "keyspace"}).str;
  EXPECT_NE(keyspace.find("db3:keys=1"), std::string::npos) << keyspace;
  EXPECT_EQ(keyspace.find("db0:"), std::string::npos) << keyspace;
}

TEST(Connection, WorksOverAUnixSocket) {
  RedisServer server;
  auto client = MustCreate({.url = "unix://" + server.unix_path()});
  auto limiter = *client->MakeLimiter("unix", {.limit = 2, .window = seconds(60)});
  EXPECT_EQ(limiter.Check("x")->remaining, 1);
  EXPECT_EQ(server.Keys("sluice:*").size(), 1u);
}

TEST(Connection, UnreachableRedisIsAClearErrorAtStartUp) {
  const uint16_t port = testing::FreeLoopbackPort();  // nothing listens there
  auto client = Client::Create({.url = "redis://127.0.0.1:" + std::to_string(port)});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(client.status().message().find(std::to_string(port)), std::string::npos)
      << client.status().ToString();
  auto unix_client = Client::Create({.url = "unix:///nonexistent/redis.sock"});
  EXPECT_EQ(unix_client.status().code(), StatusCode::kUnavailable);
}

TEST(Connection, FailsFastWhenTooManyCallsAreInFlight) {
  RedisServer server;
  IoThreads io(1);
  auto endpoint = internal::ParseRedisUrl(server.url());
  ASSERT_THAT(endpoint, IsOk());
  auto conn = internal::Connection::Make(io.io().get_executor(), *endpoint, {.max_in_flight = 4});
  std::promise<Status> started;
  conn->Start([&](Status s) { started.set_value(std::move(s)); });
  ASSERT_THAT(started.get_future().get(), IsOk());
  server.Pause();
  std::atomic<int> unavailable{0}, deadline{0}, done{0};
  for (int i = 0; i < 10; ++i) {
    conn->Send(internal::FormatCommand({"PING"}), steady_clock::now() + milliseconds(300),
               [&](const Status& s, const redisReply*) {
                 if (s.code() == StatusCode::kUnavailable) ++unavailable;
                 if (s.code() == StatusCode::kDeadlineExceeded) ++deadline;
                 ++done;
               });
  }
  ASSERT_TRUE(Eventually([&] { return done.load() == 10; }));
  server.Resume();
  EXPECT_EQ(unavailable.load(), 6);
  EXPECT_EQ(deadline.load(), 4);
  conn->Shutdown();
}

// What the breaker counts (core/client_side.h): a deadline missed while replies to the
// calls queued before it kept arriving is a backlog in this client; one missed while
// Redis sent nothing at all is the store's failure. "Too many in flight" is client-side.
TEST(Connection, ADeadlineMissedBehindABacklogIsClientSideAndASilentOneIsNot) {
  RedisServer server;
  IoThreads io(1);
  // A long queue must not count as a stall here.
  auto conn = StartConnection(io.io(), server.url(),
                              {.stall_timeout = seconds(30), .max_in_flight = 300000});
  // A backlog: many calls queued (each a script that keeps Redis busy for a while),
  // Redis answering them batch after batch.
  constexpr int kQueued = 20000;
  std::atomic<int> answered{0};
  const std::string busy = internal::FormatCommand(
      {"EVAL", "local n = 0 for i = 1, 5000 do n = n + i end return 1", "0"});
  for (int i = 0; i < kQueued; ++i) {
    conn->Send(busy, steady_clock::now() + seconds(60),
               [&](const Status&, const redisReply*) { ++answered; });
  }
  ASSERT_TRUE(Eventually([&] { return answered.load() > 0; }));
  std::promise<Status> behind;
  conn->Send(internal::FormatCommand({"PING"}), steady_clock::now() + milliseconds(200),
             [&](const Status& s, const redisReply*) { behind.set_value(s); });
  Status backlog = behind.get_future().get();
  const int answered_then = answered.load();
  std::cout << answered_then << " of " << kQueued << " queued calls answered when the call "
            << "behind them missed its deadline: " << backlog.ToString() << "\n";
  if (answered_then < kQueued) {  // the queue had not drained within the 200 ms
    EXPECT_EQ(backlog.code(), StatusCode::kDeadlineExceeded) << backlog.ToString();
    EXPECT_TRUE(internal::IsClientSide(backlog)) << backlog.ToString();
  }
  ASSERT_TRUE(Eventually([&] { return answered.load() == kQueued; }, seconds(60)));
  // Silent: nothing at all comes back while the call waits.
  server.Pause();
  std::promise<Status> silent;
  conn->Send(internal::FormatCommand({"PING"}), steady_clock::now() + milliseconds(50),
             [&](const Status& s, const redisReply*) { silent.set_value(s); });
  Status stalled = silent.get_future().get();
  server.Resume();
  EXPECT_EQ(stalled.code(), StatusCode::kDeadlineExceeded) << stalled.ToString();
  EXPECT_FALSE(internal::IsClientSide(stalled)) << stalled.ToString();
  conn->Shutdown();
}

// A deadline missed because this process's event loop lagged (its I/O thread busy with
// other work when the calls should have been written) is client-side: Redis answered
// each call at once, and the breaker must not count it.
TEST(Connection, ADeadlineMissedWhileTheEventLoopLaggedIsClientSide) {
  RedisServer server;
  IoThreads io(1);
  auto conn = StartConnection(io.io(), server.url());
  std::promise<void> holding;
  boost::asio::post(io.io(), [&holding] {
    holding.set_value();
    std::this_thread::sleep_for(milliseconds(50));
  });
  holding.get_future().wait();
  constexpr int kCalls = 5;
  std::vector<std::promise<Status>> results(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    conn->Send(internal::FormatCommand({"PING"}), steady_clock::now() + milliseconds(5),
               [&results, i](const Status& s, const redisReply*) { results[i].set_value(s); });
  }
  for (int i = 0; i < kCalls; ++i) {
    const Status s = results[i].get_future().get();
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_TRUE(internal::IsClientSide(s)) << s.ToString();
  }
  conn->Shutdown();
}

TEST(Connection, LastReferenceDroppedInsideACallbackTearsDownCleanly) {
  RedisServer server;
  std::promise<void> caller_gone;
  std::shared_future<void> caller_gone_future = caller_gone.get_future().share();
  std::promise<bool> finished;
  {
    auto client = MustCreate({.url = server.url(), .deadline = seconds(2)});
    auto held = std::make_shared<std::optional<Limiter>>(
        *client->MakeLimiter("drop", {.limit = 5, .window = seconds(60)}));
    client.reset();
    (*held)->CheckAsync(
        "x", {}, [held, caller_gone_future, &finished](StatusOr<Decision> d) mutable {
          caller_gone_future.wait();  // the caller's references are gone: this one is the last
          held->reset();              // so the client is torn down from its own I/O thread
          held.reset();
          finished.set_value(d.ok());
        });
  }
  caller_gone.set_value();
  auto result = finished.get_future();
  ASSERT_EQ(result.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(result.get());
}

// A loopback server that speaks just enough RESP to play an old or a mute Redis: it
// answers INFO server with `info` and anything else with +OK, or nothing when `mute`.
class FakeRedis {
 public:
  FakeRedis(std::string info, bool mute)
      : acceptor_(io_, {boost::asio::ip::address_v4::loopback(), 0}),
        info_(std::move(info)),
        mute_(mute),
        thread_([this] { Serve(); }) {}
  ~FakeRedis() {
    stop_ = true;
    boost::system::error_code ignored;
    // Unblock accept() with a connection of our own, then close.
    boost::asio::ip::tcp::socket poke(io_);
    poke.connect({boost::asio::ip::address_v4::loopback(), port()}, ignored);
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  void Serve() {
    while (!stop_) {
      boost::asio::ip::tcp::socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stop_) return;
      redisReader* reader = redisReaderCreate();
      char buf[4096];
      for (;;) {
        size_t n = socket.read_some(boost::asio::buffer(buf), ec);
        if (ec) break;
        redisReaderFeed(reader, buf, n);
        void* reply = nullptr;
        while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
          auto* r = static_cast<redisReply*>(reply);
          bool info = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                      std::string_view(r->element[0]->str, r->element[0]->len) == "INFO";
          freeReplyObject(r);
          if (mute_) continue;
          std::string out =
              info ? "$" + std::to_string(info_.size()) + "\r\n" + info_ + "\r\n" : "+OK\r\n";
          boost::asio::write(socket, boost::asio::buffer(out), ec);
        }
      }
      redisReaderFree(reader);
    }
  }

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::string info_;
  bool mute_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(Connection, RedisOlderThanSevenIsRefusedWithAClearError) {
  FakeRedis old("# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n", false);
  auto client = Client::Create({.url = "redis://127.0.0.1:" + std::to_string(old.port())});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(client.status().message().find("6.x"), std::string::npos) << client.status().ToString();
  EXPECT_NE(client.status().message().find("7.0"), std::string::npos) << client.status().ToString();
}

TEST(Connection, ServerThatNeverAnswersFailsStartUpAtTheConnectTimeout) {
  FakeRedis mute("", true);
  const auto t0 = steady_clock::now();
  auto client = Client::Create({.url = "redis://127.0.0.1:" + std::to_string(mute.port()),
                                .connect_timeout = milliseconds(300)});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kDeadlineExceeded) << client.status().ToString();
  EXPECT_LT(steady_clock::now() - t0, seconds(3));
}

}  // namespace
}  // namespace sluice

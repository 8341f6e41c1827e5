// Sentinel (redis+sentinel://) against a private set: a primary, a replica and three
// sentinels (testing/redis_sentinel.h). Decisions and the operator API through the
// sentinel URL; a sentinel that is down is skipped; an unknown master name is named;
// and failovers under load — the primary killed by its pid, and SENTINEL FAILOVER —
// after which decisions resume on the promoted replica without restarting the client,
// with the failed decisions and the time to recover printed, and no key left without
// an expiry; and all of it over TLS (rediss+sentinel://).
#include "sluice/boost_first.h"  // before any Boost header

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/reply.h"
#include "redis/resp.h"
#include "redis/scripts.h"

#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/redis_sentinel.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"
#include "testing/tls_certificates.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using ::testing::HasSubstr;
using testing::IsOk;

ClientOptions Options(std::string url) {
  return {.url = std::move(url),
          .prefix = "sen",
          .deadline = milliseconds(500),
          .connect_timeout = milliseconds(2000),
          .on_failure = FailurePolicy::kClosed,
          .denial_cache_size = 0};
}

class SentinelTest : public ::testing::Test {
 protected:
  // No key of the test's prefix without an expiry on the node that is primary now.
  void ExpectNoKeyWithoutTtl() {
    const uint16_t port = set_.PrimaryPort();
    ASSERT_NE(port, 0);
    EXPECT_EQ(set_.DataNodeOnPort(port).KeysWithoutTtl("sen:*"), std::vector<std::string>{});
  }
  testing::RedisSentinelSet set_;
};

TEST_F(SentinelTest, DecidesThroughTheSentinels) {
  auto client = Client::Create(Options(set_.url()));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("via", {.limit = 3, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter->Check("a")->allowed);
  EXPECT_FALSE(limiter->Check("a")->allowed);
  // The count lives on the primary the sentinels name.
  EXPECT_EQ(set_.data_node(0).Command({"GET", "sen:{via:a}:fw2"}).type,
            testing::RedisValue::Type::kString);
  auto streams =
      (*client)->MakeConcurrencyLimiter("streams", {.limit = 1, .lease_ttl = seconds(10)});
  ASSERT_THAT(streams, IsOk());
  auto lease = streams->Acquire("a");
  ASSERT_THAT(lease, IsOk());
  EXPECT_TRUE(lease->acquired);
  EXPECT_THAT(lease->lease.Release(), IsOk());
  // The operator API takes the same URL.
  auto admin = Admin::Connect({.url = set_.url(), .prefix = "sen"});
  ASSERT_THAT(admin, IsOk());
  auto state = (*admin)->Inspect("via", "a");
  ASSERT_THAT(state, IsOk());
  ExpectNoKeyWithoutTtl();
}

TEST_F(SentinelTest, ASentinelThatIsDownIsSkipped) {
  // The first sentinel of the URL listens nowhere.
  const uint16_t nowhere = testing::FreeLoopbackPort();
  std::string url = set_.url();
  url.replace(url.find("//") + 2, 0, "127.0.0.1:" + std::to_string(nowhere) + ",");
  auto client = Client::Create(Options(url));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("skip", {.limit = 3, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  EXPECT_TRUE(limiter->Check("a")->allowed);
  ExpectNoKeyWithoutTtl();
}

TEST_F(SentinelTest, AnUnknownMasterIsNamed) {
  std::string url = set_.url();
  url.replace(url.rfind('/') + 1, std::string::npos, "no-such-master");
  auto client = Client::Create(Options(url));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("no-such-master"));
  EXPECT_THAT(client.status().message(), HasSubstr("does not know"));
}

// A sentinel that monitors nothing: a real one, its configuration naming no master.
testing::RedisServer UnknowingSentinel() {
  return testing::RedisServer({.sentinel_config = "sentinel resolve-hostnames no\n"});
}

// "redis+sentinel://127.0.0.1:<port>," put before the sentinels of `url`.
std::string WithSentinelFirst(std::string url, uint16_t port) {
  url.replace(url.find("//") + 2, 0, "127.0.0.1:" + std::to_string(port) + ",");
  return url;
}

// Sentinels S1 (monitors nothing) then the set's: S1 answers nil, the next one names
// the primary within the same connect.
TEST_F(SentinelTest, ASentinelThatDoesNotKnowTheMasterIsLeftForTheNext) {
  testing::RedisServer unknowing = UnknowingSentinel();
  const std::string url = WithSentinelFirst(set_.url(), unknowing.port());
  auto client = Client::Create(Options(url));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("next", {.limit = 3, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  auto decision = limiter->Check("a");
  ASSERT_THAT(decision, IsOk());
  EXPECT_EQ(decision->source, DecisionSource::kStore);
  ExpectNoKeyWithoutTtl();

  // Connecting in the background, the client gets there too (and stays there).
  ClientOptions background = Options(url);
  background.connect_in_background = true;
  background.on_failure = FailurePolicy::kOpen;
  auto later = Client::Create(background);
  ASSERT_THAT(later, IsOk());
  auto open = (*later)->MakeLimiter("next", {.limit = 1000, .window = seconds(60)});
  ASSERT_THAT(open, IsOk());
  EXPECT_TRUE(testing::Eventually(
      [&] {
        auto d = open->Check("b");
        return d.ok() && d->source == DecisionSource::kStore;
      },
      seconds(10), milliseconds(20)))
      << "the client connecting in the background never reached the primary";
  for (int i = 0; i < 20; ++i) EXPECT_EQ(open->Check("b")->source, DecisionSource::kStore);
}

// Only sentinels that do not know the master: the error says so, per sentinel.
TEST_F(SentinelTest, NoSentinelKnowingTheMasterIsNamedPerSentinel) {
  testing::RedisServer first = UnknowingSentinel();
  testing::RedisServer second = UnknowingSentinel();
  const std::string url = "redis+sentinel://127.0.0.1:" + std::to_string(first.port()) +
                          ",127.0.0.1:" + std::to_string(second.port()) + "/" + set_.master_name();
  auto client = Client::Create(Options(url));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("does not know a master named"));
  EXPECT_THAT(client.status().message(), HasSubstr(std::to_string(first.port())));
  EXPECT_THAT(client.status().message(), HasSubstr(std::to_string(second.port())));
}

// The sentinel links' own errors (here: a password the sentinels do not take) are in
// the error instead of a bare "no sentinel answers".
TEST_F(SentinelTest, ALinksErrorIsInTheLocateError) {
  auto client = Client::Create(Options(set_.url() + "?sentinel_password=not-the-password"));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("AUTH")) << client.status().message();
  EXPECT_THAT(client.status().message(), HasSubstr(std::to_string(set_.sentinel(0).port())));
}

// A loopback responder that speaks as a sentinel of another version would: INFO server
// says `version`, SENTINEL GET-MASTER-ADDR-BY-NAME answers `address` (nil when empty),
// SUBSCRIBE and PING are acknowledged. It counts the address queries.
class ScriptedSentinel {
 public:
  ScriptedSentinel(std::string version, std::string host, uint16_t port)
      : version_(std::move(version)), host_(std::move(host)), master_port_(port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listener_, 16) != 0) {
      std::abort();
    }
    socklen_t len = sizeof addr;
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~ScriptedSentinel() {
    stop_ = true;
    thread_.join();
    for (auto& [fd, buffer] : clients_) close(fd);
    close(listener_);
  }
  uint16_t port() const { return port_; }
  int address_queries() const { return queries_.load(); }

 private:
  static std::string Bulk(const std::string& s) {
    return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
  }
  // One command of `buffer` (a RESP array of bulks), removed from it; nullopt when
  // incomplete.
  static std::optional<std::vector<std::string>> Take(std::string& buffer) {
    size_t at = 0;
    auto line = [&]() -> std::optional<std::string> {
      const size_t end = buffer.find("\r\n", at);
      if (end == std::string::npos) return std::nullopt;
      std::string out = buffer.substr(at, end - at);
      at = end + 2;
      return out;
    };
    auto head = line();
    if (!head || head->empty() || (*head)[0] != '*') return std::nullopt;
    std::vector<std::string> args;
    for (int n = std::stoi(head->substr(1)); n > 0; --n) {
      auto size = line();
      if (!size) return std::nullopt;
      const size_t len = std::stoul(size->substr(1));
      if (buffer.size() < at + len + 2) return std::nullopt;
      args.push_back(buffer.substr(at, len));
      at += len + 2;
    }
    buffer.erase(0, at);
    return args;
  }
  std::string Answer(std::vector<std::string> args) {
    for (auto& a : args) {
      for (char& c : a) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    if (args[0] == "INFO") {
      return Bulk("# Server\r\nredis_version:" + version_ + "\r\nredis_mode:sentinel\r\n");
    }
    if (args[0] == "PING") return "+PONG\r\n";
    if (args[0] == "SUBSCRIBE" && args.size() == 2) {
      return "*3\r\n" + Bulk("subscribe") + Bulk(args[1]) + ":1\r\n";
    }
    if (args[0] == "SENTINEL" && args.size() == 3 && args[1] == "GET-MASTER-ADDR-BY-NAME") {
      ++queries_;
      if (host_.empty()) return "*-1\r\n";
      return "*2\r\n" + Bulk(host_) + Bulk(std::to_string(master_port_));
    }
    return "-ERR unknown command\r\n";
  }
  void Run() {
    while (!stop_) {
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (auto& [fd, buffer] : clients_) fds.push_back({fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int fd = accept(listener_, nullptr, nullptr);
        if (fd >= 0) clients_[fd];
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char chunk[4096];
        const ssize_t n = read(fds[i].fd, chunk, sizeof chunk);
        if (n <= 0) {
          close(fds[i].fd);
          clients_.erase(fds[i].fd);
          continue;
        }
        std::string& buffer = clients_[fds[i].fd];
        buffer.append(chunk, static_cast<size_t>(n));
        std::string out;
        while (auto args = Take(buffer)) out += Answer(*std::move(args));
        if (!out.empty() && write(fds[i].fd, out.data(), out.size()) < 0) {
          close(fds[i].fd);
          clients_.erase(fds[i].fd);
        }
      }
    }
  }
  const std::string version_, host_;
  const uint16_t master_port_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::map<int, std::string> clients_;  // the thread's own
  std::atomic<int> queries_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A sentinel older than Redis 7.0 (its INFO says 6.2.14) naming a Redis 7 primary: the
// links do not apply the data connection's version check, the data connection does.
TEST_F(SentinelTest, ASentinelOlderThanRedis7IsAsked) {
  ScriptedSentinel old("6.2.14", "127.0.0.1", set_.data_node(0).port());
  auto client = Client::Create(
      Options("redis+sentinel://127.0.0.1:" + std::to_string(old.port()) + "/whatever"));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("old", {.limit = 3, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  auto decision = limiter->Check("a");
  ASSERT_THAT(decision, IsOk());
  EXPECT_EQ(decision->source, DecisionSource::kStore);
  EXPECT_EQ(set_.data_node(0).Command({"GET", "sen:{old:a}:fw2"}).type,
            testing::RedisValue::Type::kString);
  EXPECT_GE(old.address_queries(), 1);

  // The data node itself is still held to Redis >= 7.0: a 6.2 "primary" is refused.
  ScriptedSentinel old_primary("6.2.14", "", 0);
  ScriptedSentinel pointing("7.0.15", "127.0.0.1", old_primary.port());
  auto refused = Client::Create(
      Options("redis+sentinel://127.0.0.1:" + std::to_string(pointing.port()) + "/m"));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("Redis >= 7.0"));
}

// The sentinel that named the primary is asked first from then on: a sentinel that
// does not know the master, first in the URL, is asked once, not at every reconnect.
TEST_F(SentinelTest, TheSentinelThatAnsweredIsAskedFirst) {
  ScriptedSentinel unknowing("7.0.15", "", 0);
  auto client = Client::Create(Options(WithSentinelFirst(set_.url(), unknowing.port())));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("front", {.limit = 1000, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  EXPECT_EQ(limiter->Check("a")->source, DecisionSource::kStore);
  EXPECT_EQ(unknowing.address_queries(), 1);
  const uint16_t primary = set_.PrimaryPort();
  for (int round = 0; round < 3; ++round) {
    // Every client of the primary is dropped: the data connection reconnects and asks
    // the sentinels again.
    set_.DataNodeOnPort(primary).Command({"CLIENT", "KILL", "TYPE", "normal"});
    EXPECT_TRUE(testing::Eventually(
        [&] {
          auto d = limiter->Check("a");
          return d.ok() && d->source == DecisionSource::kStore;
        },
        seconds(10), milliseconds(10)));
  }
  EXPECT_EQ(unknowing.address_queries(), 1) << "the sentinel that knows nothing was asked again";
}

// An io_context on one thread for the duration of a test.
class IoThread {
 public:
  IoThread() : work_(io_.get_executor()), thread_([this] { io_.run(); }) {}
  ~IoThread() {
    work_.reset();
    thread_.join();
  }
  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

// `n` fixed-window consumes of 1 (limit 1000 per minute) queued while the connection is
// corked, so that they leave as one batch; how many the store answered with a decision.
int BatchOfConsumes(internal::Connection& conn, int n) {
  std::vector<std::future<bool>> decided;
  conn.Cork();
  for (int i = 0; i < n; ++i) {
    std::string args;
    for (std::string_view a : {"0", "", "1", "1000", "60000", "0", "0", "0"}) {
      internal::AppendBulk(args, a);
    }
    auto promise = std::make_shared<std::promise<bool>>();
    decided.push_back(promise->get_future());
    conn.Call({.script = 0,
               .function = 0,
               .key = "sen:{batch:" + std::to_string(i) + "}:fw",
               .args = std::move(args),
               .arg_items = 8},
              steady_clock::now() + seconds(2), [promise](const Status& s, const redisReply* r) {
                promise->set_value(s.ok() && internal::CopyReply(*r).elements.size() == 4);
              });
  }
  conn.Uncork();
  int ok = 0;
  for (auto& f : decided) ok += f.get() ? 1 : 0;
  return ok;
}

// A READONLY answer inside a batch (each call of it refused by the demoted primary)
// makes the connection ask the sentinels again, as a READONLY reply alone does: with
// every call batched, the calls reach the new primary.
TEST_F(SentinelTest, AReadonlyCallInABatchAsksTheSentinelsAgain) {
  IoThread io;
  auto endpoint = internal::ParseRedisUrl(set_.url());
  ASSERT_THAT(endpoint, IsOk());
  internal::ConnectionOptions options;
  options.scripts = internal::AllScripts();
  options.batch_script = internal::kBatchScript;
  auto conn = internal::Connection::Make(io.io().get_executor(), *endpoint, std::move(options));
  std::promise<Status> started;
  conn->Start([&](Status s) { started.set_value(std::move(s)); });
  ASSERT_THAT(started.get_future().get(), IsOk());
  EXPECT_EQ(BatchOfConsumes(*conn, 8), 8);
  const uint64_t batches = conn->stats().batches;
  EXPECT_GE(batches, 1u);

  ASSERT_EQ(set_.MovePrimarySilently(), "");
  EXPECT_TRUE(testing::Eventually([&] { return BatchOfConsumes(*conn, 8) == 8; }, seconds(10),
                                  milliseconds(50)))
      << "batched calls kept failing on the demoted primary";
  EXPECT_GT(conn->stats().batches, batches) << "the calls did not go as batches";
  EXPECT_GT(set_.data_node(1).Command({"GET", "sen:{batch:0}:fw"}).type,
            testing::RedisValue::Type::kNil)
      << "nothing was counted on the new primary";
  conn->Shutdown();
}

// The same through the public API under batched load: decisions come from the store
// again within a bound after the primary was moved without a +switch-master.
TEST_F(SentinelTest, BatchedTrafficRecoversFromADemotedPrimary) {
  ClientOptions options = Options(set_.url());
  options.deadline = seconds(1);
  auto client = Client::Create(options);
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("ro", {.limit = 1'000'000'000, .window = seconds(600)});
  ASSERT_THAT(limiter, IsOk());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> decided{0};
  std::atomic<int64_t> last_failure_ns{0};
  const auto epoch = steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        // A burst of asynchronous checks queues up together: they leave in batches.
        std::vector<std::future<bool>> burst;
        for (int i = 0; i < 16; ++i) {
          auto promise = std::make_shared<std::promise<bool>>();
          burst.push_back(promise->get_future());
          limiter->CheckAsync("id-" + std::to_string(t * 16 + i), {},
                              [promise](StatusOr<Decision> d) {
                                promise->set_value(d.ok() && d->source == DecisionSource::kStore);
                              });
        }
        for (auto& f : burst) {
          if (f.get()) {
            ++decided;
          } else {
            last_failure_ns = (steady_clock::now() - epoch).count();
          }
        }
      }
    });
  }
  EXPECT_TRUE(testing::Eventually([&] { return decided.load() > 100; }, seconds(10)));
  const auto moved = steady_clock::now();
  EXPECT_EQ(set_.MovePrimarySilently(), "");  // the threads run: no early return
  const int64_t before = decided.load();
  const bool recovered = testing::Eventually(
      [&] {
        const auto now_ns = (steady_clock::now() - epoch).count();
        return decided.load() > before && now_ns - last_failure_ns.load() > 1'000'000'000;
      },
      seconds(15), milliseconds(20));
  stop = true;
  for (auto& t : threads) t.join();
  ASSERT_TRUE(recovered) << "batched checks did not come back from the demoted primary";
  std::printf("primary moved without +switch-master: last failed check %.2f s after the move\n",
              std::chrono::duration<double>(
                  epoch + std::chrono::nanoseconds(last_failure_ns.load()) - moved)
                  .count());
}

// Hammers one limiter from a few threads while `failover` runs; returns when decisions
// came from the store again for a while after it, and checks that they did without a
// new client.
void FailoverUnderLoad(testing::RedisSentinelSet& set, const std::function<void()>& failover,
                       const char* what) {
  auto client = Client::Create(Options(set.url()));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("load", {.limit = 1'000'000'000, .window = seconds(600)});
  ASSERT_THAT(limiter, IsOk());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> decided{0}, failed{0};
  std::atomic<int64_t> last_failure_ns{0};
  const auto epoch = steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        auto d = limiter->Check("id-" + std::to_string(t));
        if (d.ok() && d->source == DecisionSource::kStore) {
          ++decided;
        } else {
          ++failed;
          last_failure_ns = (steady_clock::now() - epoch).count();
          std::this_thread::sleep_for(milliseconds(5));
        }
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(300));
  const int64_t before = decided.load();
  EXPECT_GT(before, 0);
  const uint16_t old_port = set.PrimaryPort();
  const auto started = steady_clock::now();
  failover();
  const uint16_t new_port = set.WaitForNewPrimary(old_port, 60000);
  ASSERT_NE(new_port, 0) << "the sentinels promoted no replica";
  // Recovered: store decisions keep coming and no failure for a full second.
  const bool recovered = testing::Eventually(
      [&] {
        const auto now_ns = (steady_clock::now() - epoch).count();
        return decided.load() > before && now_ns - last_failure_ns.load() > 1'000'000'000;
      },
      seconds(60), milliseconds(20));
  // And they land on the new primary: its count of one id keeps growing.
  auto count = [&] {
    testing::RedisValue v = set.DataNodeOnPort(new_port).Command({"GET", "sen:{load:id-0}:fw2"});
    return v.type == testing::RedisValue::Type::kString ? std::stoll(v.str) : 0;  // the count
  };
  const int64_t at_promotion = count();
  EXPECT_TRUE(testing::Eventually([&] { return count() > at_promotion + 50; }, seconds(10)))
      << "the new primary counted nothing more";
  stop = true;
  for (auto& t : threads) t.join();
  ASSERT_TRUE(recovered) << "decisions did not resume on the new primary";
  const double recover_s = std::chrono::duration<double>(
                               epoch + std::chrono::nanoseconds(last_failure_ns.load()) - started)
                               .count();
  std::printf(
      "sentinel failover (%s): %lld decisions failed; recovered %.2f s after the "
      "failover started; %lld decided in all\n",
      what, static_cast<long long>(failed.load()), recover_s < 0 ? 0.0 : recover_s,
      static_cast<long long>(decided.load()));
  EXPECT_EQ(set.PrimaryPort(), new_port);
  EXPECT_EQ(set.DataNodeOnPort(new_port).KeysWithoutTtl("sen:*"), std::vector<std::string>{});
}

TEST_F(SentinelTest, FailoverAfterThePrimaryIsKilled) {
  FailoverUnderLoad(
      set_, [&] { set_.data_node(0).Kill(); }, "primary killed");
}

TEST_F(SentinelTest, FailoverOrderedBySentinelFailover) {
  FailoverUnderLoad(
      set_,
      [&] {
        auto ok = set_.sentinel(0).Command({"SENTINEL", "FAILOVER", set_.master_name()});
        ASSERT_EQ(ok.type, testing::RedisValue::Type::kStatus) << ok.str;
      },
      "SENTINEL FAILOVER");
  // The old primary is a replica now; nothing was written there after it was demoted
  // that lacks an expiry.
  EXPECT_EQ(set_.data_node(0).KeysWithoutTtl("sen:*"), std::vector<std::string>{});
}

// rediss+sentinel://: sentinels and data nodes TLS only (replication too); the links to
// the sentinels and the data connection all run TLS with the URL's options, and a
// failover is followed over TLS as in the clear.
TEST(SentinelTls, DecidesAndFollowsAFailoverOverTls) {
  testing::TlsCertificates certs;
  testing::RedisSentinelSet set({.tls = testing::RedisTlsFiles{.ca_file = certs.ca_file(),
                                                               .cert_file = certs.server_cert(),
                                                               .key_file = certs.server_key()}});
  ASSERT_TRUE(set.url().starts_with("rediss+sentinel://"));
  auto client = Client::Create(Options(set.url()));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("tls", {.limit = 2, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  EXPECT_TRUE(limiter->Check("a")->allowed);
  EXPECT_TRUE(limiter->Check("a")->allowed);
  EXPECT_FALSE(limiter->Check("a")->allowed);
  EXPECT_EQ(set.data_node(0).Command({"GET", "sen:{tls:a}:fw2"}).type,
            testing::RedisValue::Type::kString);
  FailoverUnderLoad(
      set,
      [&] {
        auto ok = set.sentinel(0).Command({"SENTINEL", "FAILOVER", set.master_name()});
        ASSERT_EQ(ok.type, testing::RedisValue::Type::kStatus) << ok.str;
      },
      "TLS, SENTINEL FAILOVER");
}

}  // namespace
}  // namespace sluice

// Sentinel (redis+sentinel://) against a private set: a primary, a replica and three
// sentinels (testing/redis_sentinel.h). Decisions and the operator API through the
// sentinel URL; a sentinel that is down is skipped; an unknown master name is named;
// and failovers under load — the primary killed by its pid, and SENTINEL FAILOVER —
// after which decisions resume on the promoted replica without restarting the client,
// with the failed decisions and the time to recover printed, and no key left without
// an expiry; and all of it over TLS (rediss+sentinel://).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

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

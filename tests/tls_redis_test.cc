// TLS (rediss://) against private TLS-only redis-servers (testing/tls_certificates.h for
// throwaway certificates): decisions and a lease over TLS, a client certificate the
// server requires, each handshake failure named by its cause (a CA that did not sign the
// server's certificate, a name the certificate does not hold, a plaintext port, files
// that cannot be read), and a reconnect after the TLS server restarts.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/redis_cluster.h"
#include "testing/redis_fixture.h"
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
using testing::StatusIs;

testing::RedisServerOptions TlsServer(const testing::TlsCertificates& certs,
                                      bool require_client_cert = false) {
  return {.tls = testing::RedisTlsFiles{.ca_file = certs.ca_file(),
                                        .cert_file = certs.server_cert(),
                                        .key_file = certs.server_key(),
                                        .require_client_cert = require_client_cert,
                                        .client_cert_file = certs.client_cert(),
                                        .client_key_file = certs.client_key()}};
}

ClientOptions Options(std::string url) {
  return {.url = std::move(url),
          .prefix = "tls",
          .deadline = milliseconds(2000),
          .connect_timeout = milliseconds(1000),
          .on_failure = FailurePolicy::kClosed};
}

std::string Port(const testing::RedisServer& server) {
  return std::to_string(server.port());
}

class TlsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(server_.KeysWithoutTtl("tls:*"), std::vector<std::string>{});
  }
  testing::TlsCertificates certs_;
  testing::RedisServer server_{TlsServer(certs_)};
};

TEST_F(TlsTest, DecidesAndLeasesOverTls) {
  // The server has no plaintext TCP port (--port 0): every decision here went over TLS.
  auto client = Client::Create(Options(server_.url()));
  ASSERT_THAT(client, IsOk());
  for (auto algorithm : {Algorithm::kFixedWindow, Algorithm::kGcra, Algorithm::kSlidingLog}) {
    auto limiter =
        (*client)->MakeLimiter(std::string(AlgorithmName(algorithm)),
                               {.algorithm = algorithm, .limit = 3, .window = seconds(60)});
    ASSERT_THAT(limiter, IsOk());
    for (int i = 0; i < 3; ++i) {
      auto d = limiter->Check("user-1");
      ASSERT_THAT(d, IsOk());
      EXPECT_TRUE(d->allowed) << AlgorithmName(algorithm) << " check " << i;
      EXPECT_EQ(d->source, DecisionSource::kStore);
    }
    auto refused = limiter->Check("user-1");
    ASSERT_THAT(refused, IsOk());
    EXPECT_FALSE(refused->allowed) << AlgorithmName(algorithm);
  }
  auto streams =
      (*client)->MakeConcurrencyLimiter("streams", {.limit = 1, .lease_ttl = seconds(10)});
  ASSERT_THAT(streams, IsOk());
  auto first = streams->Acquire("user-1");
  ASSERT_THAT(first, IsOk());
  EXPECT_TRUE(first->acquired);
  auto second = streams->Acquire("user-1");
  ASSERT_THAT(second, IsOk());
  EXPECT_FALSE(second->acquired);
  EXPECT_THAT(first->lease.Release(), IsOk());
  auto third = streams->Acquire("user-1");
  ASSERT_THAT(third, IsOk());
  EXPECT_TRUE(third->acquired);
}

TEST_F(TlsTest, VerifiesAHostNameToo) {
  // The certificate holds DNS:localhost and IP:127.0.0.1; both verify.
  auto client =
      Client::Create(Options("rediss://localhost:" + Port(server_) + "?ca=" + certs_.ca_file()));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("by-name", {.limit = 1, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  EXPECT_TRUE(limiter->Check("a")->allowed);
}

TEST_F(TlsTest, ACaThatDidNotSignTheServerIsNamed) {
  auto client = Client::Create(
      Options("rediss://127.0.0.1:" + Port(server_) + "?ca=" + certs_.other_ca_file()));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("not signed by a trusted CA"));
  EXPECT_THAT(client.status().message(), HasSubstr(certs_.other_ca_file()));
  EXPECT_THAT(client.status().message(), HasSubstr("ca=<file>"));
}

TEST_F(TlsTest, ANameTheCertificateDoesNotHoldIsNamed) {
  auto client = Client::Create(Options("rediss://127.0.0.1:" + Port(server_) +
                                       "?ca=" + certs_.ca_file() + "&sni=redis.wrong.example"));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(),
              HasSubstr("does not hold the name \"redis.wrong.example\""));
}

TEST_F(TlsTest, APlaintextClientOnTheTlsPortIsToldToUseRediss) {
  auto client = Client::Create(Options("redis://127.0.0.1:" + Port(server_)));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("use rediss://"));
}

TEST_F(TlsTest, FilesThatCannotBeReadAreNamed) {
  auto client = Client::Create(
      Options("rediss://127.0.0.1:" + Port(server_) + "?ca=/nonexistent/sluice-ca.pem"));
  EXPECT_THAT(client,
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("/nonexistent/sluice-ca.pem")));
  auto wrong_key =
      Client::Create(Options("rediss://127.0.0.1:" + Port(server_) + "?ca=" + certs_.ca_file() +
                             "&cert=" + certs_.client_cert() + "&key=" + certs_.server_key()));
  EXPECT_THAT(wrong_key, StatusIs(StatusCode::kInvalidArgument, HasSubstr("does not belong")));
}

TEST_F(TlsTest, ReconnectsAfterTheTlsServerRestarts) {
  auto client = Client::Create(Options(server_.url()));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("restart", {.limit = 1000, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  ASSERT_TRUE(limiter->Check("a")->allowed);
  server_.Kill();
  server_.Start();
  // The first calls after the kill may fail (closed policy); the client reconnects, runs
  // the TLS handshake again, reloads the scripts and decides again.
  EXPECT_TRUE(testing::Eventually(
      [&] {
        auto d = limiter->Check("a");
        return d.ok() && d->source == DecisionSource::kStore && d->allowed;
      },
      seconds(10)));
  EXPECT_EQ(server_.Command({"GET", "tls:{restart:a}:fw2"}).type,
            testing::RedisValue::Type::kString);
}

TEST_F(TlsTest, TheOperatorApiSpeaksTlsToo) {
  auto admin = Admin::Connect({.url = server_.url(), .prefix = "tls"});
  ASSERT_THAT(admin, IsOk());
  EXPECT_THAT((*admin)->DbSize(), IsOk());
}

TEST(TlsClientCertificate, RequiredByTheServer) {
  testing::TlsCertificates certs;
  testing::RedisServer server(TlsServer(certs, /*require_client_cert=*/true));
  // url() presents the client certificate.
  auto with_cert = Client::Create(Options(server.url()));
  ASSERT_THAT(with_cert, IsOk());
  auto limiter = (*with_cert)->MakeLimiter("cert", {.limit = 1, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  EXPECT_TRUE(limiter->Check("a")->allowed);
  auto without =
      Client::Create(Options("rediss://127.0.0.1:" + Port(server) + "?ca=" + certs.ca_file()));
  ASSERT_FALSE(without.ok());
  EXPECT_THAT(without.status().message(), HasSubstr("certificate"));
  EXPECT_THAT(without.status().message(), HasSubstr("give cert= and key="));
  EXPECT_EQ(server.KeysWithoutTtl("tls:*"), std::vector<std::string>{});
}

// A TLS client against a port that speaks plaintext RESP fails within its connect
// timeout, saying the port may not be a TLS port, and never hangs.
TEST(TlsPlaintextPort, FailsFastAndSaysSo) {
  testing::TlsCertificates certs;
  testing::RedisServer plain;
  ClientOptions options = Options("rediss://127.0.0.1:" + Port(plain) + "?ca=" + certs.ca_file());
  options.connect_timeout = milliseconds(1000);
  const auto start = steady_clock::now();
  auto client = Client::Create(options);
  const auto took = steady_clock::now() - start;
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("TLS"));
  EXPECT_THAT(client.status().message(), HasSubstr("tls-port"));
  // Create waits connect_timeout + 1 s at most; failing by itself means within the timeout.
  EXPECT_LT(took, options.connect_timeout + milliseconds(500))
      << std::chrono::duration_cast<milliseconds>(took).count() << " ms";

  // Started in the background, checks get their failure policy's answer within their
  // own deadline while the handshake keeps failing.
  options.connect_in_background = true;
  options.deadline = milliseconds(50);
  auto background = Client::Create(options);
  ASSERT_THAT(background, IsOk());
  auto limiter = (*background)->MakeLimiter("plain", {.limit = 1, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  for (int i = 0; i < 5; ++i) {
    const auto call = steady_clock::now();
    auto d = limiter->Check("a");
    const auto waited = steady_clock::now() - call;
    ASSERT_THAT(d, IsOk());
    EXPECT_EQ(d->source, DecisionSource::kFailClosed);
    EXPECT_LT(waited, seconds(2)) << "a check must not wait on a handshake that never ends";
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_FALSE((*background)->Health().connected);
}

// rediss+cluster://: every node TLS only (the bus and replication too); the router
// reaches the primaries the slot map names over TLS with the seeds' options.
TEST(TlsCluster, DecidesOverTlsOnEveryPrimary) {
  testing::TlsCertificates certs;
  testing::RedisCluster cluster({.primaries = 3, .tls = TlsServer(certs).tls});
  auto client = Client::Create(Options(cluster.url()));
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("spread", {.limit = 2, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  for (int id = 0; id < 30; ++id) {
    for (int i = 0; i < 2; ++i) {
      auto d = limiter->Check("id-" + std::to_string(id));
      ASSERT_THAT(d, IsOk());
      EXPECT_EQ(d->source, DecisionSource::kStore);
      EXPECT_TRUE(d->allowed);
    }
    EXPECT_FALSE(limiter->Check("id-" + std::to_string(id))->allowed);
  }
  // 30 ids spread over the three primaries: each holds some.
  for (uint16_t port : cluster.PrimaryPorts()) {
    EXPECT_FALSE(cluster.NodeOnPort(port).Keys("tls:*").empty()) << "primary on " << port;
  }
  EXPECT_EQ(cluster.Keys("tls:*").size(), 30u);
  EXPECT_EQ(cluster.KeysWithoutTtl("tls:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluice

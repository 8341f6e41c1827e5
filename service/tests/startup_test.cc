// sluiced's start-up, end to end: every way it can fail is logged with why and exits 1
// (a listen address in use or not on this host, on each listener); a stop signal while it
// starts exits 0 without serving, a SIGHUP reloads once it serves; a store that refuses
// the connection is named (WRONGPASS, NOAUTH, NOPERM, a host that does not resolve, a
// cluster URL on a plain server) in the log, /readyz and /admin/breaker, never with its
// password; listen addresses given by name are resolved.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced {
namespace {

using namespace std::chrono_literals;
using testing::Call;
using testing::HttpReply;
using testing::Sluiced;
using testing::TempDir;

std::string ShopConfig() {
  return testing::ReadAll(std::string(SLUICED_SOURCE_DIR) + "/examples/config/shop.yaml");
}

// A TCP socket of this test's own, bound to 127.0.0.1 on a free port and listening: the
// port is in use for as long as it lives.
class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      ADD_FAILURE() << "cannot hold a loopback port";
    port_ = ntohs(addr.sin_port);
  }
  ~HeldPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class StartupListener : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { config_.Write("shop.yaml", ShopConfig()); }
  TempDir config_;
};

// A listen address another socket holds: one line says which and why, exit 1 (it was a
// SIGSEGV, exit 139, with no message: the failed listener's server was stopped without
// ever having started).
TEST_P(StartupListener, AnAddressInUseIsNamedAndExitsOne) {
  const std::string flag = GetParam();
  HeldPort held;
  const std::string address = "127.0.0.1:" + std::to_string(held.port());
  Sluiced s(config_.path(), "memory://", {flag, address}, /*expect_start=*/false);
  EXPECT_EQ(s.WaitExit(10s), 1) << s.log();
  EXPECT_NE(s.log().find(flag + ": cannot listen on " + address + ": Address already in use"),
            std::string::npos)
      << s.log();
  EXPECT_EQ(s.log().find("serving"), std::string::npos) << s.log();
}

// An address that is not this host's (TEST-NET-1, RFC 5737): the same, with the kernel's
// reason.
TEST_P(StartupListener, AnAddressNotOnThisHostIsNamedAndExitsOne) {
  const std::string flag = GetParam();
  const std::string address = "192.0.2.1:0";
  Sluiced s(config_.path(), "memory://", {flag, address}, /*expect_start=*/false);
  EXPECT_EQ(s.WaitExit(10s), 1) << s.log();
  EXPECT_NE(
      s.log().find(flag + ": cannot listen on " + address + ": Cannot assign requested address"),
      std::string::npos)
      << s.log();
}

// A name that does not resolve is refused as a command-line mistake (exit 2), saying so.
TEST_P(StartupListener, AHostNameThatDoesNotResolveExitsTwo) {
  const std::string flag = GetParam();
  Sluiced s(config_.path(), "memory://", {flag, "sluiced-test-host.invalid:0"},
            /*expect_start=*/false);
  EXPECT_EQ(s.WaitExit(10s), 2) << s.log();
  EXPECT_NE(s.log().find(flag + " sluiced-test-host.invalid:0: cannot resolve "
                                "'sluiced-test-host.invalid'"),
            std::string::npos)
      << s.log();
}

INSTANTIATE_TEST_SUITE_P(EachListener, StartupListener,
                         ::testing::Values("--http-listen", "--grpc-listen", "--admin-listen",
                                           "--metrics-listen"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           const std::string flag = p.param;  // "--http-listen" -> "http"
                           return flag.substr(2, flag.find("-listen") - 2);
                         });

// Every listen flag given as localhost: resolved (to 127.0.0.1, IPv4 first), served there.
TEST(Startup, ListenAddressesGivenByNameAreResolved) {
  TempDir config;
  config.Write("shop.yaml", ShopConfig());
  Sluiced s(config.path(), "memory://",
            {"--http-listen", "localhost:0", "--grpc-listen", "localhost:0", "--admin-listen",
             "localhost:0", "--metrics-listen", "localhost:0", "--admin-token", "t"});
  ASSERT_TRUE(s.running()) << s.log();
  EXPECT_NE(s.log().find("serving http=127.0.0.1:"), std::string::npos) << s.log();
  EXPECT_EQ(Call(s.http_port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(Call(s.metrics_port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(Call(s.admin_port(), "GET", "/admin/breaker", "", "Authorization: Bearer t\r\n").status,
            200);
  EXPECT_TRUE(testing::Connection(s.grpc_port()).connected());
}

// Admin calls on a server started without an admin token are all refused (401), and the
// answer says that no token is configured, not only that a token is missing.
TEST(Startup, AdminCallsWithoutAConfiguredTokenSaySo) {
  TempDir config;
  config.Write("shop.yaml", ShopConfig());
  Sluiced s(config.path(), "memory://", {});
  ASSERT_TRUE(s.running()) << s.log();
  for (const char* auth : {"", "Authorization: Bearer anything\r\n"}) {
    HttpReply refused = Call(s.admin_port(), "GET", "/admin/config", "", auth);
    EXPECT_EQ(refused.status, 401);
    EXPECT_NE(refused.body.find("this server has no admin token configured (start it with "
                                "--admin-token or SLUICED_ADMIN_TOKEN)"),
              std::string::npos)
        << refused.body;
  }
}

// A store that never answers (nothing listens on its port): start-up waits for it, up to
// --connect-wait-ms, and signals come in that wait.
class StartupSignals : public ::testing::Test {
 protected:
  void SetUp() override { config_.Write("shop.yaml", ShopConfig()); }
  const std::string silent_store_ =
      "redis://127.0.0.1:" + std::to_string(sluice::testing::FreeLoopbackPort());
  TempDir config_;
};

// SIGTERM while waiting for the store: exit 0 at once, never serving (SIGTERM's default
// action killed it before).
TEST_F(StartupSignals, SigtermWhileStartingExitsZeroWithoutServing) {
  Sluiced s(config_.path(), silent_store_, {"--connect-wait-ms", "30000"},
            /*expect_start=*/false);
  ASSERT_TRUE(s.WaitForLog("config loaded")) << s.log();
  s.Signal(SIGTERM);
  // Within 5 s of a 30 s wait: the signal ended it, not the wait.
  EXPECT_EQ(s.WaitExit(5s), 0) << s.log();
  EXPECT_NE(s.log().find("stopping on signal 15 during start-up: not serving"), std::string::npos)
      << s.log();
  EXPECT_EQ(s.log().find("serving http="), std::string::npos) << s.log();
}

// SIGHUP after the config was read, while waiting for the store: sluiced serves, then
// reloads (the files may have changed since it read them); it is not killed (exit 129,
// which systemd's Restart=on-failure takes for a clean stop).
TEST_F(StartupSignals, SighupWhileStartingReloadsOnceServing) {
  Sluiced s(config_.path(), silent_store_, {"--connect-wait-ms", "1500", "--watch-ms", "0"},
            /*expect_start=*/false);
  ASSERT_TRUE(s.WaitForLog("config loaded: 1 file(s)")) << s.log();
  config_.Write("more.yaml",
                "domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                "requests_per_unit: 1}\n");
  s.Signal(SIGHUP);
  ASSERT_TRUE(s.WaitForLog("config reloaded (SIGHUP): 2 file(s)")) << s.log();
  // Served first, reloaded after.
  const std::string log = s.log();
  EXPECT_LT(log.find("serving http="), log.find("config reloaded (SIGHUP)")) << log;
  EXPECT_EQ(s.Stop(), 0) << s.log();
}

// The three places an operator looks name the store's refusal; no password in any.
void ExpectNamed(const Sluiced& s, const std::string& store_said, const std::string& readyz_said,
                 const std::vector<std::string>& secrets) {
  const std::string log = s.log();
  EXPECT_NE(log.find("not reachable yet (" + store_said), std::string::npos) << log;
  HttpReply ready;
  // The probe may first meet the breaker rather than the connection: asked again.
  for (int i = 0; i < 50 && ready.body.find("\"error\"") == std::string::npos; ++i) {
    if (i > 0) std::this_thread::sleep_for(50ms);
    ready = Call(s.http_port(), "GET", "/readyz");
  }
  EXPECT_EQ(ready.status, 200);
  EXPECT_NE(ready.body.find("\"store\":\"unreachable\",\"error\":\"" + readyz_said),
            std::string::npos)
      << ready.body;
  const HttpReply breaker =
      Call(s.admin_port(), "GET", "/admin/breaker", "", "Authorization: Bearer admin-t\r\n");
  EXPECT_NE(breaker.body.find("\"connected\":false,\"error\":\""), std::string::npos)
      << breaker.body;
  std::string store_said_in_json;  // quotes escaped
  for (char c : store_said)
    store_said_in_json += c == '"' ? std::string("\\\"") : std::string(1, c);
  EXPECT_NE(breaker.body.find(store_said_in_json), std::string::npos) << breaker.body;
  for (const std::string& secret : secrets) {
    EXPECT_EQ(log.find(secret), std::string::npos) << log;
    EXPECT_EQ(ready.body.find(secret), std::string::npos) << ready.body;
    EXPECT_EQ(breaker.body.find(secret), std::string::npos) << breaker.body;
  }
}

std::vector<std::string> StoreFlags() {
  return {"--connect-wait-ms", "300", "--admin-token", "admin-t"};
}

TEST(StartupStore, AWrongPasswordIsNamed) {
  TempDir config;
  config.Write("shop.yaml", ShopConfig());
  sluice::testing::RedisServer redis({.requirepass = "right-Pw-7"});
  const std::string at = "127.0.0.1:" + std::to_string(redis.port());
  Sluiced s(config.path(), "redis://:wrong-Pw-9@" + at, StoreFlags());
  ASSERT_TRUE(s.running());
  ExpectNamed(s, "redis " + at + " answered: WRONGPASS invalid username-password pair",
              "the store answered: WRONGPASS invalid username-password pair",
              {"right-Pw-7", "wrong-Pw-9"});
}

TEST(StartupStore, NoPasswordIsNamed) {
  TempDir config;
  config.Write("shop.yaml", ShopConfig());
  sluice::testing::RedisServer redis({.requirepass = "right-Pw-7"});
  const std::string at = "127.0.0.1:" + std::to_string(redis.port());
  Sluiced s(config.path(), "redis://" + at, StoreFlags());
  ASSERT_TRUE(s.running());
  ExpectNamed(s, "redis " + at + " answered: NOAUTH Authentication required",
              "the store answered: NOAUTH Authentication required", {"right-Pw-7"});
}

// An ACL user that may log in but run nothing sluice needs (INFO first).
TEST(StartupStore, AnAclUserWithoutTheRightsIsNamed) {
  TempDir config;
  config.Write("shop.yaml", ShopConfig());
  sluice::testing::RedisServer redis;
  redis.Command({"ACL", "SETUSER", "pinger", "on", ">pinger-Pw-5", "+ping", "~*"});
  const std::string at = "127.0.0.1:" + std::to_string(redis.port());
  Sluiced s(config.path(), "redis://pinger:pinger-Pw-5@" + at, StoreFlags());
  ASSERT_TRUE(s.running());
  ExpectNamed(s, "redis " + at + " answered: NOPERM", "the store answered: NOPERM",
              {"pinger-Pw-5"});
}

TEST(StartupStore, AHostThatDoesNotResolveIsNamed) {
  TempDir config;
  config.Write("shop.yaml", ShopConfig());
  Sluiced s(config.path(), "redis://:host-Pw-3@sluiced-store.invalid:6379", StoreFlags());
  ASSERT_TRUE(s.running());
  ExpectNamed(s, "cannot resolve redis host \"sluiced-store.invalid\"",
              "cannot resolve the store's host", {"host-Pw-3"});
}

TEST(StartupStore, AClusterUrlOnAServerNotInClusterModeIsNamed) {
  TempDir config;
  config.Write("shop.yaml", ShopConfig());
  sluice::testing::RedisServer redis({.requirepass = "plain-Pw-1"});
  Sluiced s(config.path(), "redis+cluster://:plain-Pw-1@127.0.0.1:" + std::to_string(redis.port()),
            StoreFlags());
  ASSERT_TRUE(s.running());
  ExpectNamed(s,
              "CLUSTER SLOTS failed (is this server in cluster mode?): ERR This instance has "
              "cluster support disabled",
              "CLUSTER SLOTS failed (is this server in cluster mode?)", {"plain-Pw-1"});
}

}  // namespace
}  // namespace sluiced

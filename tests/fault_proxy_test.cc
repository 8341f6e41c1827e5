// testing/fault_proxy.h against a real redis-server: bytes pass unchanged, and each
// fault is seen by a client as it would see the network fault it stands for (a late
// reply, no reply while the socket stays open, a reset, a reply cut short, a slow
// reply, a refused connect), on one connection only when asked, until Heal(); and the
// proxy stops with no thread or socket left behind.
#include "testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "testing/eventually.h"
#include "testing/processes.h"
#include "testing/redis_server.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

int OpenFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// A plain TCP client speaking inline Redis commands ("PING\r\n").
class Raw {
 public:
  explicit Raw(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    connect_errno_ =
        ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : errno;
  }
  ~Raw() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connect_errno_ == 0; }
  int connect_errno() const { return connect_errno_; }
  void Send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // Reads until `want` bytes came, the peer closed, or `limit` passed.
  struct Read {
    std::string bytes;
    bool eof = false;
    int error = 0;  // errno of a failed read (ECONNRESET)
    milliseconds took{0};
  };
  Read ReadBytes(std::size_t want, milliseconds limit = milliseconds(2000)) {
    Read r;
    const auto t0 = steady_clock::now();
    while (r.bytes.size() < want) {
      const auto left = limit - std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
      if (left.count() <= 0) break;
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) != 1) break;
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, std::min(sizeof buf, want - r.bytes.size()));
      if (n == 0) {
        r.eof = true;
        break;
      }
      if (n < 0) {
        r.error = errno;
        break;
      }
      r.bytes.append(buf, static_cast<std::size_t>(n));
    }
    r.took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
    return r;
  }
  // PING, and how long the PONG took (nullopt: no PONG within `limit`).
  std::optional<milliseconds> Ping(milliseconds limit = milliseconds(2000)) {
    Send("PING\r\n");
    Read r = ReadBytes(7, limit);
    if (r.bytes != "+PONG\r\n") return std::nullopt;
    return r.took;
  }

 private:
  int fd_ = -1;
  int connect_errno_ = 0;
};

class FaultProxyTest : public ::testing::Test {
 protected:
  RedisServer server_;
  FaultProxy proxy_{server_.port()};
};

TEST_F(FaultProxyTest, ForwardsBytesBothWays) {
  Raw c(proxy_.port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Ping());
  const std::string commands = "SET fp:k hello\r\nGET fp:k\r\n";
  const std::string replies = "+OK\r\n$5\r\nhello\r\n";
  c.Send(commands);
  EXPECT_EQ(c.ReadBytes(replies.size()).bytes, replies);
  EXPECT_EQ(server_.Command({"GET", "fp:k"}).str, "hello");
  EXPECT_EQ(proxy_.Connections().size(), 1u);
  const FaultProxyStats s = proxy_.stats();
  EXPECT_EQ(s.accepted, 1);
  EXPECT_EQ(s.bytes_to_server, static_cast<int64_t>(6 + commands.size()));
  EXPECT_EQ(s.bytes_to_client, static_cast<int64_t>(7 + replies.size()));
}

TEST_F(FaultProxyTest, LatencyDelaysEachReplyAndJitterKeepsTheOrder) {
  Raw c(proxy_.port());
  ASSERT_TRUE(c.Ping());
  proxy_.AddLatency(Direction::kToClient, milliseconds(150));
  auto took = c.Ping();
  ASSERT_TRUE(took);
  EXPECT_GE(*took, milliseconds(145));
  EXPECT_LT(*took, milliseconds(1000));
  // Jitter: replies sent one by one arrive in the order they were sent.
  proxy_.AddLatency(Direction::kBoth, milliseconds(5), milliseconds(40));
  std::string expected;
  for (int i = 0; i < 20; ++i) {
    c.Send("ECHO " + std::to_string(i % 10) + "\r\n");
    expected += "$1\r\n" + std::to_string(i % 10) + "\r\n";
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_EQ(c.ReadBytes(expected.size()).bytes, expected);
  proxy_.Heal();
  took = c.Ping();
  ASSERT_TRUE(took);
  EXPECT_LT(*took, milliseconds(100));
}

TEST_F(FaultProxyTest, AStallHoldsTheCommandUntilItEndsAndKeepsTheSocket) {
  Raw c(proxy_.port());
  ASSERT_TRUE(c.Ping());
  proxy_.Stall(Direction::kToServer, milliseconds(400));
  c.Send("SET fp:stalled 1\r\n");
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_EQ(server_.Command({"EXISTS", "fp:stalled"}).integer, 0) << "the stall let a command by";
  Raw::Read r = c.ReadBytes(5, milliseconds(2000));
  EXPECT_EQ(r.bytes, "+OK\r\n");
  EXPECT_GE(r.took, milliseconds(150));
  EXPECT_EQ(server_.Command({"EXISTS", "fp:stalled"}).integer, 1);
  // Until Heal: the reply is read by the proxy from Redis but held.
  proxy_.Stall(Direction::kToClient, milliseconds(0));
  EXPECT_FALSE(c.Ping(milliseconds(300)));
  EXPECT_EQ(proxy_.Connections().size(), 1u);
  proxy_.Heal();
  EXPECT_EQ(c.ReadBytes(7).bytes, "+PONG\r\n");
}

TEST_F(FaultProxyTest, ABlackholeAcceptsButNeverAnswersAndHealResetsIt) {
  proxy_.Blackhole();
  Raw c(proxy_.port());
  ASSERT_TRUE(c.connected()) << "a blackhole accepts connections";
  EXPECT_FALSE(c.Ping(milliseconds(300)));
  // Nothing reached Redis: the fixture's own connection is its only client.
  EXPECT_EQ(server_.Command({"CLIENT", "LIST"}).str.find("cmd=ping"), std::string::npos);
  EXPECT_GT(proxy_.stats().bytes_dropped, 0);
  proxy_.Heal();
  Raw::Read r = c.ReadBytes(1, milliseconds(1000));
  EXPECT_TRUE(r.eof || r.error == ECONNRESET) << "a healed blackhole must not resume";
  Raw fresh(proxy_.port());
  EXPECT_TRUE(fresh.Ping());
}

TEST_F(FaultProxyTest, ResetSendsARstToTheClient) {
  Raw c(proxy_.port());
  ASSERT_TRUE(c.Ping());
  proxy_.Reset();
  Raw::Read r = c.ReadBytes(1, milliseconds(1000));
  EXPECT_EQ(r.error, ECONNRESET);
  EXPECT_EQ(proxy_.stats().resets, 1);
  EXPECT_TRUE(proxy_.Connections().empty());
}

TEST_F(FaultProxyTest, CloseAfterCutsAReplyShort) {
  Raw c(proxy_.port());
  ASSERT_TRUE(c.Ping());
  proxy_.CloseAfter(Direction::kToClient, 3);
  c.Send("PING\r\n");
  Raw::Read r = c.ReadBytes(7, milliseconds(1000));
  EXPECT_EQ(r.bytes, "+PO");
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(proxy_.stats().closed_after, 1);
  // New connections get the same budget until Heal.
  Raw again(proxy_.port());
  again.Send("PING\r\n");
  EXPECT_EQ(again.ReadBytes(7, milliseconds(1000)).bytes, "+PO");
  proxy_.Heal();
  Raw healed(proxy_.port());
  EXPECT_TRUE(healed.Ping());
}

TEST_F(FaultProxyTest, ABandwidthCapSlowsALargeReply) {
  server_.Command({"SET", "fp:big", std::string(3000, 'x')});
  Raw c(proxy_.port());
  ASSERT_TRUE(c.Ping());
  proxy_.LimitBandwidth(Direction::kToClient, 5000);
  c.Send("GET fp:big\r\n");
  Raw::Read r = c.ReadBytes(3000 + 9, milliseconds(5000));
  EXPECT_EQ(r.bytes.size(), 3009u);
  // 3009 bytes at 5000 B/s, with at most a tenth of a second's burst: >= 0.5 s.
  EXPECT_GE(r.took, milliseconds(450));
  EXPECT_LT(r.took, milliseconds(3000));
  proxy_.Heal();
  c.Send("GET fp:big\r\n");
  EXPECT_LT(c.ReadBytes(3009).took, milliseconds(200));
}

TEST_F(FaultProxyTest, RefusingNewConnectionsKeepsTheOpenOnes) {
  Raw open(proxy_.port());
  ASSERT_TRUE(open.Ping());
  proxy_.RefuseNewConnections(true);
  Raw refused(proxy_.port());
  EXPECT_EQ(refused.connect_errno(), ECONNREFUSED);
  EXPECT_TRUE(open.Ping());
  proxy_.RefuseNewConnections(false);
  Raw again(proxy_.port());
  EXPECT_TRUE(again.Ping());
}

TEST_F(FaultProxyTest, AFaultOfOneConnectionLeavesTheOthers) {
  Raw a(proxy_.port()), b(proxy_.port());
  ASSERT_TRUE(a.Ping());
  ASSERT_TRUE(b.Ping());
  const std::vector<int> ids = proxy_.Connections();
  ASSERT_EQ(ids.size(), 2u);
  proxy_.Stall(Direction::kBoth, milliseconds(0), ids[0]);
  EXPECT_FALSE(a.Ping(milliseconds(250)));
  auto took = b.Ping();
  ASSERT_TRUE(took);
  EXPECT_LT(*took, milliseconds(200));
  proxy_.Reset(ids[1]);
  EXPECT_EQ(b.ReadBytes(1, milliseconds(1000)).error, ECONNRESET);
  proxy_.Heal();
  EXPECT_EQ(a.ReadBytes(7).bytes, "+PONG\r\n");
}

TEST_F(FaultProxyTest, HealEndsEveryFaultAtOnce) {
  Raw c(proxy_.port());
  ASSERT_TRUE(c.Ping());
  proxy_.AddLatency(Direction::kBoth, milliseconds(300));
  proxy_.LimitBandwidth(Direction::kToServer, 10);
  proxy_.Stall(Direction::kToClient, milliseconds(0));
  proxy_.RefuseNewConnections(true);
  c.Send("PING\r\n");
  std::this_thread::sleep_for(milliseconds(50));
  proxy_.Heal();
  // The held PING goes out now, with no latency or cap left.
  Raw::Read r = c.ReadBytes(7, milliseconds(1000));
  EXPECT_EQ(r.bytes, "+PONG\r\n");
  EXPECT_LT(r.took, milliseconds(200));
  Raw fresh(proxy_.port());
  ASSERT_TRUE(fresh.connected());
  auto took = fresh.Ping();
  ASSERT_TRUE(took);
  EXPECT_LT(*took, milliseconds(100));
}

TEST_F(FaultProxyTest, AnUpstreamThatIsDownResetsTheClient) {
  server_.Kill();
  Raw c(proxy_.port());
  ASSERT_TRUE(c.connected());
  Raw::Read r = c.ReadBytes(1, milliseconds(1000));
  EXPECT_TRUE(r.error == ECONNRESET || r.eof);
  EXPECT_EQ(proxy_.stats().upstream_fails, 1);
  server_.Start();
  Raw again(proxy_.port());
  EXPECT_TRUE(again.Ping());
}

TEST(FaultProxyBounds, ConnectionsPastTheCapAreResetAndStopLeavesNothing) {
  RedisServer server;
  const int threads = ThreadCount();
  const int fds = OpenFds();
  {
    FaultProxy proxy(server.port(), {.max_connections = 2});
    std::vector<std::unique_ptr<Raw>> clients;
    for (int i = 0; i < 3; ++i) clients.push_back(std::make_unique<Raw>(proxy.port()));
    EXPECT_TRUE(clients[0]->Ping());
    EXPECT_TRUE(clients[1]->Ping());
    Raw::Read r = clients[2]->ReadBytes(1, milliseconds(1000));
    EXPECT_TRUE(r.error == ECONNRESET || r.eof) << "a third connection past the cap of 2";
    EXPECT_EQ(proxy.stats().live, 2);
    proxy.Stall(Direction::kBoth, milliseconds(0));
    clients[0]->Send("PING\r\n");
  }  // stops with a stall in force and bytes held
  EXPECT_TRUE(Eventually([&] { return ThreadCount() == threads; }, milliseconds(2000)));
  EXPECT_EQ(OpenFds(), fds) << "a socket of the proxy (or of its clients) was left open";
}

}  // namespace
}  // namespace sluice::testing

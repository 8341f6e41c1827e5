// sluiced's signals and its stop, end to end: the built binary against a private
// redis-server.
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "service/bench/h2_client.h"
#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced {
namespace {

using namespace std::chrono_literals;
using testing::Sluiced;
using testing::TempDir;
namespace rls = envoy::service::ratelimit::v3;

constexpr const char* kShouldRateLimit =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

// A framed RateLimitRequest for shop's checkout limit (10 per minute per account).
std::string CheckoutCall(const std::string& account) {
  rls::RateLimitRequest r;
  r.set_domain("shop");
  r.set_hits_addend(1);
  auto* d = r.add_descriptors();
  auto* e = d->add_entries();
  e->set_key("route");
  e->set_value("checkout");
  e = d->add_entries();
  e->set_key("account");
  e->set_value(account);
  const std::string m = r.SerializeAsString();
  const auto n = static_cast<uint32_t>(m.size());
  return std::string{0, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)} +
         m;
}

std::string CheckoutJson(const std::string& account) {
  return R"({"domain":"shop","descriptors":[{"entries":[{"key":"route","value":"checkout"},)"
         R"({"key":"account","value":")" +
         account + R"("}]}]})";
}

// Waits (up to 10 s) until sluiced's log contains `text`.
bool WaitForLog(const Sluiced& s, const std::string& text) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (s.log().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

class Shutdown : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.Write("shop.yaml",
                  testing::ReadAll(std::string(SLUICED_SOURCE_DIR) + "/examples/config/shop.yaml"));
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

// A SIGHUP right after a SIGTERM (both before the main loop looks) still stops sluiced.
TEST_F(Shutdown, SigtermFollowedBySighupStops) {
  Sluiced s(config_.path(), redis_.url());
  ASSERT_TRUE(s.running());
  s.Signal(SIGTERM);
  std::this_thread::sleep_for(10ms);
  s.Signal(SIGHUP);
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(5)), 0) << s.log();
}

// Calls held in flight (Redis paused, so no check can be decided) when SIGTERM comes:
// sluiced stops accepting, says GOAWAY and /readyz 503, answers every held call once
// Redis answers, and exits 0 by itself.
TEST_F(Shutdown, SigtermDrainsCallsInFlight) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "5000", "--drain-timeout-ms", "8000"});
  ASSERT_TRUE(s.running());
  std::string error;
  auto grpc = bench::H2Client::Connect("127.0.0.1", s.grpc_port(), error);
  ASSERT_TRUE(grpc) << error;
  // One call first: the store connection is up and its scripts are loaded.
  const int32_t warm = grpc->Submit(kShouldRateLimit, CheckoutCall("warm"));
  ASSERT_TRUE(grpc->PumpUntil([&] { return grpc->call(warm)->closed; }, 10s));
  ASSERT_EQ(grpc->call(warm)->GrpcStatus(), 0) << grpc->call(warm)->GrpcMessage();
  // A kept-alive HTTP connection with half a /readyz request sent at the signal.
  testing::Connection probe(s.http_port());
  ASSERT_TRUE(probe.Send(testing::Request("GET", "/healthz")));
  ASSERT_EQ(probe.Read().status, 200);
  ASSERT_TRUE(probe.Send("GET /readyz HTTP/1.1\r\n"));

  redis_.Pause();
  std::vector<int32_t> held;
  for (int i = 0; i < 20; ++i)
    held.push_back(grpc->Submit(kShouldRateLimit, CheckoutCall("held" + std::to_string(i))));
  testing::Connection http(s.http_port());
  ASSERT_TRUE(http.Send(testing::Request("POST", "/v1/check", CheckoutJson("held-http"))));
  grpc->Pump(200ms);
  for (const int32_t id : held) ASSERT_FALSE(grpc->call(id)->closed);

  s.Signal(SIGTERM);
  ASSERT_TRUE(WaitForLog(s, "draining")) << s.log();
  // Not ready, on a connection that was open before; new connections are refused.
  ASSERT_TRUE(probe.Send("Host: 127.0.0.1\r\n\r\n"));
  const testing::HttpReply ready = probe.Read();
  EXPECT_EQ(ready.status, 503) << ready.body;
  EXPECT_NE(ready.body.find("draining"), std::string::npos) << ready.body;
  EXPECT_EQ(ready.header("connection"), "close");
  EXPECT_TRUE(probe.ClosedByPeer());
  EXPECT_FALSE(testing::Connection(s.grpc_port()).connected());
  EXPECT_FALSE(testing::Connection(s.http_port()).connected());
  // The shutdown notice (GOAWAY) is out; the held calls are still open.
  EXPECT_TRUE(grpc->PumpUntil([&] { return grpc->goaway_received(); }, 5s));
  for (const int32_t id : held) EXPECT_FALSE(grpc->call(id)->closed);

  redis_.Resume();
  EXPECT_TRUE(grpc->PumpUntil(
      [&] {
        for (const int32_t id : held)
          if (!grpc->call(id)->closed) return false;
        return true;
      },
      10s));
  for (const int32_t id : held) {
    const bench::H2Call* call = grpc->call(id);
    ASSERT_EQ(call->GrpcStatus(), 0)
        << "stream " << id << ": " << call->GrpcMessage() << " reset " << call->reset_code;
    rls::RateLimitResponse response;
    ASSERT_TRUE(response.ParseFromString(call->Message()));
    EXPECT_EQ(response.overall_code(), rls::RateLimitResponse::OK);
  }
  const testing::HttpReply checked = http.Read();
  EXPECT_EQ(checked.status, 200) << checked.body;
  EXPECT_EQ(checked.header("connection"), "close");
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(8)), 0) << s.log();
  EXPECT_NE(s.log().find("drained in"), std::string::npos) << s.log();
}

// A second signal during the drain stops sluiced at once.
TEST_F(Shutdown, SecondSignalStopsTheDrain) {
  Sluiced s(config_.path(), redis_.url(),
            {"--deadline-ms", "30000", "--drain-timeout-ms", "60000"});
  ASSERT_TRUE(s.running());
  std::string error;
  auto grpc = bench::H2Client::Connect("127.0.0.1", s.grpc_port(), error);
  ASSERT_TRUE(grpc) << error;
  const int32_t warm = grpc->Submit(kShouldRateLimit, CheckoutCall("warm"));
  ASSERT_TRUE(grpc->PumpUntil([&] { return grpc->call(warm)->closed; }, 10s));
  redis_.Pause();
  const int32_t id = grpc->Submit(kShouldRateLimit, CheckoutCall("held"));
  grpc->Pump(200ms);
  s.Signal(SIGTERM);
  ASSERT_TRUE(WaitForLog(s, "draining")) << s.log();
  grpc->Pump(100ms);
  EXPECT_FALSE(grpc->call(id)->closed);
  s.Signal(SIGINT);
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(5)), 0) << s.log();
  EXPECT_NE(s.log().find("on a second signal"), std::string::npos) << s.log();
  redis_.Resume();
}

// A call that cannot finish does not hold sluiced past --drain-timeout-ms.
TEST_F(Shutdown, DrainTimeoutBoundsTheStop) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "30000", "--drain-timeout-ms", "300"});
  ASSERT_TRUE(s.running());
  std::string error;
  auto grpc = bench::H2Client::Connect("127.0.0.1", s.grpc_port(), error);
  ASSERT_TRUE(grpc) << error;
  const int32_t warm = grpc->Submit(kShouldRateLimit, CheckoutCall("warm"));
  ASSERT_TRUE(grpc->PumpUntil([&] { return grpc->call(warm)->closed; }, 10s));
  redis_.Pause();
  grpc->Submit(kShouldRateLimit, CheckoutCall("held"));
  grpc->Pump(200ms);
  s.Signal(SIGTERM);
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(5)), 0) << s.log();
  EXPECT_NE(s.log().find("at the drain timeout"), std::string::npos) << s.log();
  redis_.Resume();
}

}  // namespace
}  // namespace sluiced

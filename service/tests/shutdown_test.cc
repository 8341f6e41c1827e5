// sluiced's signals and its stop, end to end: the built binary against a private
// redis-server.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
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
  return bench::GrpcFramed(r.SerializeAsString());
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

// HTTP load for a stop under load: `connections` threads, each sending checks back to back
// on a kept-alive connection (a new one when the server closes it) until the server
// refuses new connections after the signal. Every request sent must get a full response.
class HttpLoad {
 public:
  HttpLoad(int port, int connections) {
    for (int t = 0; t < connections; ++t) threads_.emplace_back([this, port, t] { Run(port, t); });
  }
  ~HttpLoad() { Join(); }
  void Join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  // From now on a refused connection ends a thread (before, it is an error).
  void Signalled() { signalled_.store(true); }

  std::atomic<int> answered{0};    // full responses
  std::atomic<int> closing{0};     // of those, with `Connection: close` (after the signal)
  std::atomic<int> unanswered{0};  // requests sent (or being sent) without a full response
  std::atomic<int> refused_before_signal{0};

 private:
  void Run(int port, int thread) {
    int n = 0;
    while (true) {
      testing::Connection c(port);
      if (!c.connected()) {
        if (signalled_.load()) return;
        ++refused_before_signal;
        return;
      }
      while (true) {
        const std::string body =
            R"({"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"h)" +
            std::to_string(thread) + "-" + std::to_string(n++ % 100) + R"("}]}]})";
        const testing::HttpReply r =
            c.Send(testing::Request("POST", "/v1/check", body)) ? c.Read() : testing::HttpReply{};
        if (r.status == 0) {
          ++unanswered;
          break;
        }
        ++answered;
        if (r.header("connection") == "close") {
          ++closing;
          break;
        }
      }
    }
  }

  std::atomic<bool> signalled_{false};
  std::vector<std::thread> threads_;
};

// The result line of the repository's gRPC load generator (bench/service.sh's):
// "grpc checks=N ok=N over_limit=N errors=N ... refused=N lost=N".
int64_t Field(const std::string& line, const std::string& name) {
  const auto at = line.find(" " + name + "=");
  return at == std::string::npos ? -1 : std::stoll(line.substr(at + name.size() + 2));
}

// SIGTERM under sustained load of both kinds (bench/service.sh's, bounded and small):
// 16 kept-alive HTTP connections sending checks back to back, and the gRPC load generator
// keeping 64 calls in flight on 4 connections. Every call sent is answered in full (HTTP:
// a response; gRPC: a status), except gRPC calls the server refused unprocessed after its
// GOAWAY (REFUSED_STREAM, safe to retry elsewhere), which are counted apart; sluiced exits
// 0 within its drain timeout. Run with the listeners on the store client's I/O thread
// (the default) and on threads of their own.
class ShutdownUnderLoad : public ::testing::TestWithParam<std::vector<std::string>> {
 protected:
  ShutdownUnderLoad() {
    config_.Write("bench.yaml",
                  testing::ReadAll(std::string(SLUICED_SOURCE_DIR) + "/examples/bench/bench.yaml"));
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

TEST_P(ShutdownUnderLoad, SigtermAnswersEveryCallInFlight) {
  constexpr int kDrainMs = 5000;
  std::vector<std::string> flags = {"--deadline-ms", "200", "--drain-timeout-ms",
                                    std::to_string(kDrainMs)};
  flags.insert(flags.end(), GetParam().begin(), GetParam().end());
  Sluiced s(config_.path(), redis_.url(), flags);
  ASSERT_TRUE(s.running());
  const std::string grpc_load = std::string(SLUICED_H2_LOAD_PATH) +
                                " --target 127.0.0.1:" + std::to_string(s.grpc_port()) +
                                " --seconds 20 --concurrency 64 --connections 4 --ids 1000";
  FILE* grpc = ::popen(grpc_load.c_str(), "r");
  ASSERT_NE(grpc, nullptr);
  HttpLoad http(s.http_port(), 16);
  std::this_thread::sleep_for(1500ms);
  const int answered_before = http.answered.load();

  http.Signalled();
  const auto signalled = std::chrono::steady_clock::now();
  s.Signal(SIGTERM);
  const int code = s.WaitExit(std::chrono::seconds(kDrainMs / 1000 + 5));
  const auto stopped_in = std::chrono::steady_clock::now() - signalled;
  http.Join();
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, grpc) != nullptr) out += buf;
  const int grpc_exit = ::pclose(grpc);

  EXPECT_EQ(code, 0) << s.log();
  EXPECT_LT(stopped_in, std::chrono::milliseconds(kDrainMs)) << s.log();
  EXPECT_NE(s.log().find("drained in"), std::string::npos) << s.log();
  // HTTP: load before the signal, responses after it, none missing.
  EXPECT_GT(answered_before, 100);
  EXPECT_GT(http.closing.load(), 0) << "no response after the signal";
  EXPECT_EQ(http.unanswered.load(), 0) << "HTTP requests without a full response";
  EXPECT_EQ(http.refused_before_signal.load(), 0);
  // gRPC: every call a status, but those refused unprocessed after the GOAWAY.
  const auto line_at = out.find("grpc checks=");
  ASSERT_NE(line_at, std::string::npos) << out;
  const std::string line = out.substr(line_at, out.find('\n', line_at) - line_at);
  EXPECT_GT(Field(line, "checks"), 100) << line;
  EXPECT_EQ(Field(line, "errors"), 0) << out;
  EXPECT_EQ(Field(line, "lost"), 0) << out;
  EXPECT_GE(Field(line, "refused"), 0) << line;
  EXPECT_EQ(grpc_exit, 0) << out;
  std::printf("http answered=%d (after the signal, Connection: close: %d) unanswered=%d; %s\n",
              http.answered.load(), http.closing.load(), http.unanswered.load(), line.c_str());
}

INSTANTIATE_TEST_SUITE_P(Listeners, ShutdownUnderLoad,
                         ::testing::Values(std::vector<std::string>{},
                                           std::vector<std::string>{"--http-threads", "2",
                                                                    "--grpc-threads", "2"}),
                         [](const auto& param_info) {
                           return param_info.param.empty() ? std::string("OnTheStoreIoThread")
                                                           : std::string("OnThreadsOfTheirOwn");
                         });

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

// sluiced end to end: this process's own lag is no store failure. With --http-threads 0
// and --grpc-threads 0 (the defaults) the public listeners run on the store client's I/O
// thread, so a burst of cheap requests delays when that thread reads Redis's replies. A
// check that misses its deadline that way gets its failure policy's answer, but the
// store answered: the breaker must not open (it would send every check to its policy for
// a cool-down while Redis is idle). Redis runs on a CPU of its own and sluiced shares
// another with the test's clients, so the lag is sluiced's, every time.
#include <sched.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced {
namespace {

using nlohmann::json;
using testing::Call;
using testing::Connection;
using testing::HttpReply;
using testing::Request;
using testing::Sluiced;
using testing::TempDir;

// One sample of the metrics page ("name value" lines), -1 when absent.
double Sample(const std::string& page, const std::string& name) {
  const auto at = page.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(page.substr(at + name.size() + 2));
}

// Pins this thread (and so the processes it forks and the threads it starts) to one of
// the CPUs it may run on; to all of them again when it goes.
class CpuPin {
 public:
  CpuPin() {
    ::sched_getaffinity(0, sizeof initial_, &initial_);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &initial_)) allowed_.push_back(cpu);
  }
  ~CpuPin() { ::sched_setaffinity(0, sizeof initial_, &initial_); }
  std::size_t cpus() const { return allowed_.size(); }
  // To the i-th CPU this thread may run on.
  void To(std::size_t i) const {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(allowed_[i], &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0) << "cpu " << allowed_[i];
  }

 private:
  cpu_set_t initial_;
  std::vector<int> allowed_;
};

TEST(E2eLoopLag, CheapRequestsOnTheIoThreadNeverOpenTheBreakerOfAnIdleRedis) {
  constexpr int kCheckers = 4, kPipelined = 16;
  // Redis on a CPU of its own, sluiced and this test's clients on another: a check that
  // misses its deadline then waited for sluiced's I/O thread, never for Redis.
  const CpuPin pin;
  if (pin.cpus() < 2) GTEST_SKIP() << "needs two CPUs: one for Redis, one for sluiced";
  pin.To(1);
  sluice::testing::RedisServer redis;
  pin.To(0);
  TempDir config;
  config.Write("lag.yaml", R"(domain: lag
descriptors:
  - key: user
    failure_mode: open
    rate_limit: {unit: second, requests_per_unit: 1000000000}
)");
  // The default deadline (5 ms) and listeners (on the store client's I/O thread).
  Sluiced s(config.path(), redis.url(),
            {"--deadline-ms", "5", "--http-threads", "0", "--grpc-threads", "0", "--io-threads",
             "1", "--admin-token", "s3cret"});
  ASSERT_TRUE(s.running());
  const auto check = [](int i) {
    return R"({"domain":"lag","descriptors":[{"entries":[{"key":"user","value":"u)" +
           std::to_string(i % 50) + R"("}]}]})";
  };
  // The store is up and deciding before the load starts.
  std::string source;
  for (int i = 0; i < 100 && source != "store"; ++i) {
    HttpReply r = Call(s.http_port(), "POST", "/v1/check", check(i));
    if (r.status == 200) source = json::parse(r.body)["descriptors"][0]["source"];
  }
  ASSERT_EQ(source, "store");

  std::atomic<bool> stop{false};
  std::atomic<int> cheap{0};
  std::vector<std::thread> hammers;
  for (int t = 0; t < 3; ++t) {
    hammers.emplace_back([&, t] {
      Connection c(s.http_port());
      // /healthz, and now and then the public /metrics (404 naming the metrics listener),
      // kPipelined at a time: the I/O thread finds a batch of them to answer each time it
      // reads.
      std::string batch;
      for (int n = 0; n < kPipelined; ++n)
        batch += Request("GET", (n + t) % 8 == 0 ? "/metrics" : "/healthz");
      while (!stop.load() && c.connected() && c.Send(batch)) {
        int n = 0;
        while (n < kPipelined && c.Read().status != 0) ++n;
        cheap += n;
        if (n < kPipelined) return;
      }
    });
  }
  // Checks from a few connections at once (as from a few Envoys): a lag of the I/O
  // thread past the deadline then expires several checks together.
  std::atomic<int> checks{0}, by_policy{0};
  std::vector<std::thread> checkers;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int t = 0; t < kCheckers; ++t) {
    checkers.emplace_back([&] {
      Connection c(s.http_port());
      while (std::chrono::steady_clock::now() < until && c.connected()) {
        if (!c.Send(Request("POST", "/v1/check", check(checks.load())))) break;
        HttpReply r = c.Read();
        if (r.status == 0) break;
        ++checks;
        if (json::parse(r.body)["descriptors"][0]["source"] != "store") ++by_policy;
      }
    });
  }
  for (auto& c : checkers) c.join();
  stop.store(true);
  for (auto& h : hammers) h.join();
  // Redis was idle and answering all along.
  EXPECT_EQ(redis.Command({"PING"}).str, "PONG");

  const std::string page = Call(s.metrics_port(), "GET", "/metrics").body;
  const HttpReply breaker =
      Call(s.admin_port(), "GET", "/admin/breaker", "", "Authorization: Bearer s3cret\r\n");
  ASSERT_EQ(breaker.status, 200);
  EXPECT_GT(cheap.load(), 1000);
  EXPECT_GT(checks.load(), 100);
  EXPECT_EQ(Sample(page, "sluice_breaker_opens_total"), 0)
      << checks.load() << " checks, " << by_policy.load() << " answered by their policy, "
      << cheap.load() << " cheap requests; /admin/breaker: " << breaker.body << "\nsluiced's log:\n"
      << s.log();
  EXPECT_EQ(json::parse(breaker.body)["breaker_opens"], 0) << breaker.body;
}

}  // namespace
}  // namespace sluiced

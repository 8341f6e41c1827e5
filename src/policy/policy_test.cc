// The circuit breaker on a fake clock, and the failure policies through the public API
// with a fault-injecting store in front of the embedded store.
#include <gtest/gtest.h>

#include "core/client_core.h"
#include "memory/memory_store.h"
#include "policy/breaker.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/fault_store.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using internal::Breaker;

TEST(Breaker, OpensAfterConsecutiveFailuresAndProbesOnceAfterTheCoolDown) {
  steady_clock::time_point now{};
  Breaker breaker({.failures_to_open = 3, .cool_down = milliseconds(500)}, [&] { return now; });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(breaker.Allow());
    breaker.OnFailure();
  }
  ASSERT_TRUE(breaker.Allow());
  breaker.OnSuccess();  // a success in between resets the count
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(breaker.Allow());
    breaker.OnFailure();
  }
  EXPECT_EQ(breaker.state(), Breaker::State::kOpen);
  EXPECT_FALSE(breaker.Allow());
  EXPECT_EQ(breaker.RetryIn(), milliseconds(500));
  now += milliseconds(499);
  EXPECT_FALSE(breaker.Allow());
  now += milliseconds(1);
  EXPECT_TRUE(breaker.Allow());   // the probe
  EXPECT_FALSE(breaker.Allow());  // only one
  EXPECT_EQ(breaker.state(), Breaker::State::kHalfOpen);
  breaker.OnFailure();  // the probe failed: open again for a whole cool-down
  EXPECT_EQ(breaker.state(), Breaker::State::kOpen);
  EXPECT_EQ(breaker.opens(), 2);
  now += milliseconds(500);
  ASSERT_TRUE(breaker.Allow());
  breaker.OnSuccess();
  EXPECT_EQ(breaker.state(), Breaker::State::kClosed);
  EXPECT_TRUE(breaker.Allow());
  EXPECT_EQ(breaker.short_circuited(), 3);
}

class Policies : public ::testing::Test {
 protected:
  void SetUp() override {
    faults_ = std::make_shared<testing::FaultStore>(
        std::make_shared<internal::MemoryStore>(clock_), /*seed=*/5);
    auto client = internal::ClientFactory::WithStore(
        {.url = "memory://", .breaker_failures = 1000, .model_clock = clock_}, faults_);
    ASSERT_TRUE(client.ok());
    client_ = *client;
  }
  Limiter Make(const std::string& name, FailurePolicy policy, int64_t limit = 10,
               int64_t servers = 0) {
    return *client_->MakeLimiter(name, {.limit = limit, .window = seconds(60)},
                                 {.on_failure = policy, .servers = servers});
  }

  std::shared_ptr<testing::FakeClock> clock_ = std::make_shared<testing::FakeClock>();
  std::shared_ptr<testing::FaultStore> faults_;
  std::shared_ptr<Client> client_;
};

TEST_F(Policies, OpenAdmitsAndSpendsNothing) {
  auto limiter = Make("open", FailurePolicy::kOpen, 2);
  faults_->FailNext(2, UnavailableError("injected: connection reset"));
  for (int i = 0; i < 2; ++i) {
    auto d = limiter.Check("x");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->source, DecisionSource::kFailOpen);
  }
  auto d = limiter.Check("x");
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_EQ(d->remaining, 1) << "a failed call spent budget";
}

TEST_F(Policies, ClosedRefusesWithItsOwnReason) {
  auto limiter = Make("closed", FailurePolicy::kClosed);
  faults_->FailNext(1, DeadlineExceededError("injected: slow store"));
  auto d = limiter.Check("x");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->source, DecisionSource::kFailClosed);
  EXPECT_EQ(d->reason, RefusalReason::kStoreUnavailable);
  EXPECT_GE(d->retry_after, milliseconds(1000));
}

TEST_F(Policies, LocalEnforcesTheLimitDividedAmongServers) {
  auto limiter = Make("local", FailurePolicy::kLocal, 100, 4);
  faults_->FailRandomly(1.0, UnavailableError("injected: down"));
  int allowed = 0;
  for (int i = 0; i < 40; ++i) {
    auto d = limiter.Check("pinned");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->source, DecisionSource::kLocalFallback);
    EXPECT_EQ(d->limit, 25);
    allowed += d->allowed;
  }
  EXPECT_EQ(allowed, 25);
}

TEST_F(Policies, DefaultPolicyComesFromTheClient) {
  auto limiter = Make("default", FailurePolicy::kDefault);
  faults_->FailNext(1, UnavailableError("injected"));
  EXPECT_EQ(limiter.Check("x")->source, DecisionSource::kFailOpen);
}

TEST_F(Policies, CallerErrorsAndRefundsAreNotDecisions) {
  auto limiter = Make("errors", FailurePolicy::kOpen);
  faults_->FailNext(1, InvalidArgumentError("injected: bad input"));
  EXPECT_EQ(limiter.Check("x").status().code(), StatusCode::kInvalidArgument);
  faults_->FailNext(1, UnavailableError("injected"));
  EXPECT_EQ(limiter.Refund("x", 1).status().code(), StatusCode::kUnavailable);
}

TEST(PoliciesBreaker, OpenBreakerAnswersWithoutCallingTheStore) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto faults = std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock));
  auto client = *internal::ClientFactory::WithStore(
      {.url = "memory://", .on_failure = FailurePolicy::kClosed, .breaker_failures = 3,
       .breaker_cool_down = seconds(60), .model_clock = clock},
      faults);
  auto limiter = *client->MakeLimiter("b", {.limit = 10, .window = seconds(60)});
  faults->FailRandomly(1.0, UnavailableError("injected: down"));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Check("x")->source, DecisionSource::kFailClosed);
  EXPECT_EQ(client->Health().breaker, "open");
  const int64_t calls = faults->calls();
  for (int i = 0; i < 100; ++i) {
    auto d = limiter.Check("x");
    EXPECT_EQ(d->source, DecisionSource::kFailClosed);
    EXPECT_GT(d->retry_after, milliseconds(59'000));  // until the breaker probes again
  }
  EXPECT_EQ(faults->calls(), calls) << "an open breaker still called the store";
  StoreHealth health = client->Health();
  EXPECT_EQ(health.short_circuited, 100);
  EXPECT_EQ(health.breaker_opens, 1);
  EXPECT_GT(health.probe_in, milliseconds(59'000));
}

}  // namespace
}  // namespace sluice

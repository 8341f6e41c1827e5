// CheckComposite's refunds go where each limit counted the request, and a composite that lists
// one key twice never leaves its refusal in the denial cache. The shared store here is
// the embedded store behind a fault injector (a Redis that fails one call, then answers
// again), so a refund that reaches it for units it never counted shows as lost units.
#include <gtest/gtest.h>

#include "client/client_core.h"
#include "memory/memory_store.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/fault_store.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using std::chrono::seconds;

class CompositeRefunds : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = std::make_shared<internal::MemoryStore>(clock_);
    faults_ = std::make_shared<testing::FaultStore>(shared_);
    // Two clients on one shared store: the staged path (limiters on different clients).
    flaky_ = *internal::ClientFactory::WithStore(
        {.url = "memory://", .breaker_failures = 1000, .model_clock = clock_}, faults_);
    healthy_ =
        *internal::ClientFactory::WithStore({.url = "memory://", .model_clock = clock_}, shared_);
  }
  std::shared_ptr<testing::FakeClock> clock_ = std::make_shared<testing::FakeClock>();
  std::shared_ptr<internal::MemoryStore> shared_;
  std::shared_ptr<testing::FaultStore> faults_;
  std::shared_ptr<Client> flaky_, healthy_;
};

// The first limit is admitted by its failure policy (the store failed that one call),
// the second refuses: the shared store, which never counted the first, loses nothing,
// and a local fallback admission is given back locally.
TEST_F(CompositeRefunds, APolicyAdmissionIsNotRefundedToTheSharedStore) {
  for (FailurePolicy policy : {FailurePolicy::kOpen, FailurePolicy::kLocal}) {
    SCOPED_TRACE(policy == FailurePolicy::kOpen ? "open" : "local");
    const std::string name = policy == FailurePolicy::kOpen ? "user-open" : "user-local";
    auto user = *flaky_->MakeLimiter(name, {.limit = 2, .window = seconds(60)},
                                     {.on_failure = policy, .servers = 1});
    auto full = *healthy_->MakeLimiter("full" + name, {.limit = 1, .window = seconds(60)});
    ASSERT_TRUE(user.Check("u")->allowed);  // the shared store counts 1 of 2
    ASSERT_TRUE(full.Check("u")->allowed);  // the second limit is spent
    faults_->FailNext(1, UnavailableError("injected"));
    const LimitCheck checks[] = {{&user, "u"}, {&full, "u"}};
    auto d = CheckComposite(checks);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->decision.allowed);
    EXPECT_EQ(d->decided_by, 1u);
    // The shared store still counts the one unit it admitted.
    EXPECT_EQ(user.Peek("u")->remaining, 1) << "a refund took a unit the store never counted";
    if (policy == FailurePolicy::kLocal) {
      // The local fallback got its unit back: a request decided locally now finds the
      // whole local limit (2 of 2 with one server).
      faults_->FailNext(2, UnavailableError("injected"));
      auto first = user.Check("u");
      auto second = user.Check("u");
      EXPECT_EQ(first->source, DecisionSource::kLocalFallback);
      EXPECT_TRUE(first->allowed);
      EXPECT_TRUE(second->allowed) << "the local fallback's unit was never given back";
    }
  }
}

// A shadow limit that would have refused counted nothing: it is not refunded.
TEST_F(CompositeRefunds, AShadowRefusalIsNotRefunded) {
  auto dark = *healthy_->MakeLimiter("dark", {.limit = 1, .window = seconds(60)}, {.shadow = true});
  auto full = *healthy_->MakeLimiter("full", {.limit = 1, .window = seconds(60)});
  ASSERT_TRUE(dark.Check("u")->allowed);  // counted: 1 of 1
  ASSERT_TRUE(full.Check("u")->allowed);
  const LimitCheck checks[] = {{&dark, "u"}, {&full, "u"}};
  auto d = CheckComposite(checks);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->decision.allowed);
  EXPECT_EQ(dark.Peek("u")->remaining, 0) << "the shadow limit's real count was refunded";
}

// The same limiter and id twice (cost 2 of 3, so the pair refuses): a plain check of
// cost 2 right after must reach the store and pass, not meet a cached refusal.
TEST_F(CompositeRefunds, ARefusalOfARepeatedKeyIsNotCached) {
  for (bool one_step : {true, false}) {
    SCOPED_TRACE(one_step ? "one step" : "staged");
    auto l =
        *healthy_->MakeLimiter(one_step ? "dup1" : "dup2", {.limit = 3, .window = seconds(60)});
    auto shadow =
        *healthy_->MakeLimiter("wide", {.limit = 100, .window = seconds(60)}, {.shadow = true});
    std::vector<LimitCheck> checks = {{&l, "x"}, {&l, "x"}};
    if (!one_step) checks.push_back({&shadow, "x"});  // a shadow limiter: staged path
    auto d = CheckComposite(checks, {.cost = 2});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->decision.allowed);
    auto single = l.Check("x", {.cost = 2});
    ASSERT_THAT(single, IsOk());
    EXPECT_EQ(single->source, DecisionSource::kStore) << single->ToString();
    EXPECT_TRUE(single->allowed) << single->ToString();
  }
}

}  // namespace
}  // namespace sluice

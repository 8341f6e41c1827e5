// The circuit breaker on a fake clock, and the failure policies through the public API
// with a fault-injecting store in front of the embedded store.
#include <deque>
#include <iostream>
#include <string>

#include <gtest/gtest.h>

#include "client/client_core.h"
#include "memory/memory_store.h"
#include "policy/breaker.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/fake_clock.h"
#include "testing/fault_store.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using internal::Breaker;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

using Outcome = Breaker::Outcome;

TEST(Breaker, OpensAfterConsecutiveFailuresAndProbesOnceAfterTheCoolDown) {
  steady_clock::time_point now{};
  Breaker breaker({.failures_to_open = 3, .cool_down = milliseconds(500)}, [&] { return now; });
  for (int i = 0; i < 2; ++i) {
    auto pass = breaker.Allow();
    ASSERT_TRUE(pass);
    breaker.Settle(pass, Outcome::kFailure);
  }
  auto pass = breaker.Allow();
  ASSERT_TRUE(pass);
  breaker.Settle(pass, Outcome::kSuccess);  // a success in between resets the count
  for (int i = 0; i < 3; ++i) {
    pass = breaker.Allow();
    ASSERT_TRUE(pass);
    breaker.Settle(pass, Outcome::kFailure);
  }
  EXPECT_EQ(breaker.state(), Breaker::State::kOpen);
  EXPECT_FALSE(breaker.Allow());
  EXPECT_EQ(breaker.RetryIn(), milliseconds(500));
  now += milliseconds(499);
  EXPECT_FALSE(breaker.Allow());
  now += milliseconds(1);
  auto probe = breaker.Allow();
  EXPECT_TRUE(probe);  // the probe
  EXPECT_TRUE(probe.probe());
  EXPECT_FALSE(breaker.Allow());  // only one
  EXPECT_EQ(breaker.state(), Breaker::State::kHalfOpen);
  breaker.Settle(probe, Outcome::kFailure);  // the probe failed: open again for a cool-down
  EXPECT_EQ(breaker.state(), Breaker::State::kOpen);
  EXPECT_EQ(breaker.opens(), 2);
  now += milliseconds(500);
  probe = breaker.Allow();
  ASSERT_TRUE(probe);
  breaker.Settle(probe, Outcome::kSuccess);
  EXPECT_EQ(breaker.state(), Breaker::State::kClosed);
  EXPECT_TRUE(breaker.Allow());
  EXPECT_EQ(breaker.short_circuited(), 3);
}

// A breaker opened by `failures` store failures, on the clock `now`.
void OpenIt(Breaker& breaker, int failures) {
  for (int i = 0; i < failures; ++i) breaker.Settle(breaker.Allow(), Outcome::kFailure);
  ASSERT_EQ(breaker.state(), Breaker::State::kOpen);
}

// The probe is refused on this side of the connection (too many calls in flight): that
// says nothing about the store, so the next call is the next probe, and its success
// closes the breaker. (Before, such a probe left the breaker half-open for good.)
TEST(Breaker, AProbeRefusedOnThisSideEndsWithoutAVerdictAndTheNextCallProbes) {
  steady_clock::time_point now{};
  Breaker breaker({.failures_to_open = 2, .cool_down = milliseconds(200)}, [&] { return now; });
  OpenIt(breaker, 2);
  now += milliseconds(200);
  auto probe = breaker.Allow();
  ASSERT_TRUE(probe.probe());
  EXPECT_FALSE(breaker.Allow());
  breaker.Settle(probe, Outcome::kNeither);
  EXPECT_EQ(breaker.state(), Breaker::State::kHalfOpen);
  auto next = breaker.Allow();
  ASSERT_TRUE(next);
  EXPECT_TRUE(next.probe());
  EXPECT_FALSE(breaker.Allow()) << "two probes out at once";
  breaker.Settle(next, Outcome::kSuccess);
  EXPECT_EQ(breaker.state(), Breaker::State::kClosed);
  EXPECT_EQ(breaker.opens(), 1);
}

// A probe that never reports (its callback lost, a store that never answers nor times
// out) is given up one cool-down after it went: the next call probes.
TEST(Breaker, AProbeThatNeverReportsIsGivenUpAfterOneCoolDown) {
  steady_clock::time_point now{};
  Breaker breaker({.failures_to_open = 1, .cool_down = milliseconds(300)}, [&] { return now; });
  OpenIt(breaker, 1);
  now += milliseconds(300);
  auto lost = breaker.Allow();
  ASSERT_TRUE(lost.probe());
  now += milliseconds(299);
  EXPECT_FALSE(breaker.Allow());
  now += milliseconds(1);
  auto second = breaker.Allow();
  ASSERT_TRUE(second.probe());
  EXPECT_EQ(breaker.probes_given_up(), 1);
  EXPECT_FALSE(breaker.Allow());
  // The given-up probe reports late: its failure is not the current probe's verdict.
  breaker.Settle(lost, Outcome::kFailure);
  EXPECT_EQ(breaker.state(), Breaker::State::kHalfOpen);
  breaker.Settle(second, Outcome::kSuccess);
  EXPECT_EQ(breaker.state(), Breaker::State::kClosed);
}

// Calls let through before the breaker opened report while it is open or half-open: a
// failure is old news (the probe decides), a success says the store answers (it closes).
TEST(Breaker, OutcomesOfCallsSentBeforeItOpenedDoNotStandInForTheProbe) {
  steady_clock::time_point now{};
  Breaker breaker({.failures_to_open = 2, .cool_down = milliseconds(100)}, [&] { return now; });
  auto early = breaker.Allow();
  auto early_ok = breaker.Allow();
  OpenIt(breaker, 2);
  breaker.Settle(early, Outcome::kFailure);
  EXPECT_EQ(breaker.RetryIn(), milliseconds(100)) << "an old failure restarted the cool-down";
  now += milliseconds(100);
  auto probe = breaker.Allow();
  ASSERT_TRUE(probe.probe());
  breaker.Settle(early, Outcome::kFailure);
  EXPECT_EQ(breaker.state(), Breaker::State::kHalfOpen) << "an old failure failed the probe";
  breaker.Settle(early_ok, Outcome::kSuccess);
  EXPECT_EQ(breaker.state(), Breaker::State::kClosed);
  // The probe's failure arrives after the breaker closed: a failure like any other.
  breaker.Settle(probe, Outcome::kFailure);
  EXPECT_EQ(breaker.state(), Breaker::State::kClosed);
  EXPECT_EQ(breaker.consecutive_failures(), 1);
}

// Every sequence of events up to a length: calls allowed, the outcomes of the passes
// out (oldest or newest, each of the three outcomes, or never), time passing. After each
// sequence the store is healthy and the passes still out never report: the breaker must
// close within two cool-downs (no sequence leaves it stuck), and while it is not closed
// it never has two probes out at once.
TEST(Breaker, NoSequenceOfEventsLeavesItStuck) {
  constexpr milliseconds kCoolDown{100};
  constexpr int kDepth = 7;
  int64_t sequences = 0;
  // Each position: allow, tick, or settle the oldest or newest pass out with one of the
  // three outcomes.
  constexpr int choices = 2 + 2 * 3;
  int64_t total = 1;
  for (int i = 0; i < kDepth; ++i) total *= choices;
  for (int64_t code = 0; code < total; ++code) {
    steady_clock::time_point now{};
    Breaker breaker({.failures_to_open = 2, .cool_down = kCoolDown}, [&] { return now; });
    std::deque<Breaker::Pass> out;
    std::string trace;
    int64_t c = code;
    for (int i = 0; i < kDepth; ++i, c /= choices) {
      const int choice = static_cast<int>(c % choices);
      if (choice == 0) {
        trace += "A";
        auto pass = breaker.Allow();
        if (pass) out.push_back(pass);
        if (pass.probe()) {
          // A second probe while this one is out, within its cool-down, is refused.
          EXPECT_FALSE(breaker.Allow().probe()) << trace;
        }
      } else if (choice == 1) {
        trace += "T";
        now += kCoolDown / 2;
      } else {
        const bool old = (choice - 2) < 3;
        const auto outcome = static_cast<Outcome>((choice - 2) % 3);
        trace += (old ? "o" : "n") + std::to_string(static_cast<int>(outcome));
        if (out.empty()) continue;
        if (old) {
          breaker.Settle(out.front(), outcome);
          out.pop_front();
        } else {
          breaker.Settle(out.back(), outcome);
          out.pop_back();
        }
      }
    }
    ++sequences;
    // Recovery: the store answers every call from now on.
    for (int step = 0; step < 4 && breaker.state() != Breaker::State::kClosed; ++step) {
      auto pass = breaker.Allow();
      if (pass) {
        breaker.Settle(pass, Outcome::kSuccess);
      } else {
        now += kCoolDown;
      }
    }
    ASSERT_EQ(breaker.state(), Breaker::State::kClosed) << "stuck after " << trace;
  }
  std::cout << sequences << " sequences of " << kDepth << " events\n";
}

class Policies : public ::testing::Test {
 protected:
  void SetUp() override {
    faults_ = std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock_),
                                                    /*seed=*/5);
    auto client = internal::ClientFactory::WithStore(
        {.url = "memory://", .breaker_failures = 1000, .model_clock = clock_}, faults_);
    ASSERT_THAT(client, IsOk());
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
    EXPECT_EQ(d->store_failure, StoreFailure::kError);
  }
  auto d = limiter.Check("x");
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_EQ(d->store_failure, StoreFailure::kNone);
  EXPECT_EQ(d->remaining, 1) << "a failed call spent budget";
}

// A policy's decision says why the store did not decide: its deadline passed, or it
// failed the call (and, below, an open breaker or an evicting Redis kept it from being
// called), whatever the policy.
TEST_F(Policies, APolicysDecisionSaysWhetherTheDeadlinePassedOrTheStoreFailed) {
  for (FailurePolicy policy :
       {FailurePolicy::kOpen, FailurePolicy::kClosed, FailurePolicy::kLocal}) {
    auto limiter = Make(std::string(FailurePolicyName(policy)), policy, 10, 1);
    faults_->FailNext(1, DeadlineExceededError("injected: no answer within 5 ms"));
    auto late = limiter.Check("x");
    ASSERT_THAT(late, IsOk());
    EXPECT_NE(late->source, DecisionSource::kStore);
    EXPECT_EQ(late->store_failure, StoreFailure::kDeadline) << FailurePolicyName(policy);
    faults_->FailNext(1, UnavailableError("injected: connection reset"));
    auto failed = limiter.Check("x");
    ASSERT_THAT(failed, IsOk());
    EXPECT_EQ(failed->store_failure, StoreFailure::kError) << FailurePolicyName(policy);
    // The composite path says the same.
    faults_->FailNext(1, DeadlineExceededError("injected: no answer within 5 ms"));
    const LimitCheck checks[] = {{&limiter, "y"}};
    auto composite = CheckComposite(checks);
    ASSERT_THAT(composite, IsOk());
    EXPECT_EQ(composite->decision.store_failure, StoreFailure::kDeadline)
        << FailurePolicyName(policy);
  }
  EXPECT_EQ(StoreFailureName(StoreFailure::kDeadline), "deadline");
  EXPECT_EQ(StoreFailureName(StoreFailure::kError), "store_error");
  EXPECT_EQ(StoreFailureName(StoreFailure::kBreakerOpen), "breaker_open");
  EXPECT_EQ(StoreFailureName(StoreFailure::kEvicting), "evicting");
  EXPECT_EQ(StoreFailureName(StoreFailure::kNone), "none");
}

TEST_F(Policies, ClosedRefusesWithItsOwnReason) {
  auto limiter = Make("closed", FailurePolicy::kClosed);
  faults_->FailNext(1, DeadlineExceededError("injected: slow store"));
  auto d = limiter.Check("x");
  ASSERT_THAT(d, IsOk());
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
    ASSERT_THAT(d, IsOk());
    EXPECT_EQ(d->source, DecisionSource::kLocalFallback);
    EXPECT_EQ(d->limit, 25);
    allowed += d->allowed;
  }
  EXPECT_EQ(allowed, 25);
}

// Four servers lose Redis together: a client pinned to one server gets the divided
// limit; a client whose requests are spread over all four gets up to four times that,
// i.e. the whole limit (documented: local fallback is approximate by design).
TEST(PoliciesLocal, FourServersSpreadGetTheWholeLimitPinnedGetAQuarter) {
  auto clock = std::make_shared<testing::FakeClock>();
  std::vector<Limiter> servers;
  std::vector<std::shared_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) {
    auto down =
        std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock));
    down->FailRandomly(1.0, UnavailableError("injected: redis down"));
    clients.push_back(*internal::ClientFactory::WithStore({.url = "memory://",
                                                           .on_failure = FailurePolicy::kLocal,
                                                           .servers = 4,
                                                           .model_clock = clock},
                                                          down));
    servers.push_back(*clients.back()->MakeLimiter("api", {.limit = 100, .window = seconds(60)}));
  }
  int pinned = 0, spread = 0;
  for (int i = 0; i < 200; ++i) pinned += servers[0].Check("pinned")->allowed;
  for (int i = 0; i < 200; ++i) spread += servers[i % 4].Check("spread")->allowed;
  EXPECT_EQ(pinned, 25);
  EXPECT_EQ(spread, 100);
}

// The local fallback divides the rate as well as the burst: four servers in fallback
// together admit about the configured rate, not four times it (docs/design.md §5).
TEST(PoliciesLocal, AFleetInFallbackAdmitsTheConfiguredRateNotServersTimesIt) {
  struct Case {
    Limit limit;
    int64_t want;  // burst + rate × 5 s, the whole fleet's budget over the run
  };
  const Case cases[] = {
      {Limit::TokenBucket(20, 100), 20 + 500},
      {Limit::Gcra(100, 20), 20 + 500},
      {{.algorithm = Algorithm::kTokenBucket, .limit = 100, .window = seconds(1)}, 100 + 500},
      {{.algorithm = Algorithm::kGcra, .limit = 100, .window = seconds(1)}, 100 + 500},
  };
  for (const Case& c : cases) {
    auto clock = std::make_shared<testing::FakeClock>();
    std::vector<std::shared_ptr<Client>> clients;
    std::vector<Limiter> servers;
    for (int i = 0; i < 4; ++i) {
      auto down =
          std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock));
      down->FailRandomly(1.0, UnavailableError("injected: redis down"));
      clients.push_back(*internal::ClientFactory::WithStore({.url = "memory://",
                                                             .on_failure = FailurePolicy::kLocal,
                                                             .servers = 4,
                                                             .model_clock = clock},
                                                            down));
      servers.push_back(*clients.back()->MakeLimiter("api", c.limit));
    }
    // Every server gets one request per millisecond for five seconds: 4,000 requests/s
    // against a configured 100/s.
    int64_t admitted = 0;
    for (int ms = 0; ms < 5000; ++ms) {
      for (const Limiter& server : servers) {
        auto d = server.Check("hot");
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        ASSERT_EQ(d->source, DecisionSource::kLocalFallback);
        admitted += d->allowed;
      }
      clock->Advance(milliseconds(1));
    }
    std::cout << AlgorithmName(c.limit.algorithm) << " limit " << c.limit.limit << " refill "
              << c.limit.refill << ": the fleet admitted " << admitted << " in 5 s (configured "
              << c.want << ")\n";
    EXPECT_LE(admitted, c.want + 4) << AlgorithmName(c.limit.algorithm);
    EXPECT_GE(admitted, c.want * 9 / 10) << AlgorithmName(c.limit.algorithm);
  }
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
  auto faults =
      std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock));
  auto client = *internal::ClientFactory::WithStore({.url = "memory://",
                                                     .on_failure = FailurePolicy::kClosed,
                                                     .breaker_failures = 3,
                                                     .breaker_cool_down = seconds(60),
                                                     .model_clock = clock},
                                                    faults);
  auto limiter = *client->MakeLimiter("b", {.limit = 10, .window = seconds(60)});
  faults->FailRandomly(1.0, UnavailableError("injected: down"));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Check("x")->source, DecisionSource::kFailClosed);
  EXPECT_EQ(client->Health().breaker, "open");
  const int64_t calls = faults->calls();
  for (int i = 0; i < 100; ++i) {
    auto d = limiter.Check("x");
    EXPECT_EQ(d->source, DecisionSource::kFailClosed);
    EXPECT_EQ(d->store_failure, StoreFailure::kBreakerOpen);
    EXPECT_GT(d->retry_after, milliseconds(59'000));  // until the breaker probes again
  }
  EXPECT_EQ(faults->calls(), calls) << "an open breaker still called the store";
  StoreHealth health = client->Health();
  EXPECT_EQ(health.short_circuited, 100);
  EXPECT_EQ(health.breaker_opens, 1);
  EXPECT_GT(health.probe_in, milliseconds(59'000));
}

TEST_F(Policies, RefusedIdIsAnsweredFromTheDenialCacheUntilItsRetryAfter) {
  auto limiter = Make("flood", FailurePolicy::kClosed, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(limiter.Check("abuser")->allowed);
  auto refused = limiter.Check("abuser");  // the store refuses; the refusal is remembered
  ASSERT_EQ(refused->source, DecisionSource::kStore);
  ASSERT_EQ(refused->retry_after, milliseconds(60'000));
  const int64_t calls = faults_->calls();
  for (int i = 0; i < 1000; ++i) {
    auto d = limiter.Check("abuser");
    ASSERT_FALSE(d->allowed);
    ASSERT_EQ(d->source, DecisionSource::kCachedDenial);
  }
  EXPECT_EQ(faults_->calls(), calls) << "a cached denial reached the store";
  EXPECT_EQ(client_->stats().cached_denials, 1000u);
  clock_->Advance(milliseconds(59'999));
  auto last = limiter.Check("abuser");
  EXPECT_EQ(last->source, DecisionSource::kCachedDenial);
  EXPECT_EQ(last->retry_after, milliseconds(1));
  clock_->Advance(milliseconds(1));  // at T the store decides again (a new window)
  auto fresh = limiter.Check("abuser");
  EXPECT_EQ(fresh->source, DecisionSource::kStore);
  EXPECT_TRUE(fresh->allowed);
  // Other ids were never affected.
  EXPECT_EQ(limiter.Check("someone-else")->source, DecisionSource::kStore);
}

TEST_F(Policies, DenialCacheStepsAsideForRefundsPlanChangesAndSmallerCosts) {
  auto limiter = Make("aside", FailurePolicy::kClosed, 4);
  ASSERT_TRUE(limiter.Check("x", {.cost = 3})->allowed);
  ASSERT_EQ(limiter.Check("x", {.cost = 2})->source, DecisionSource::kStore);  // refused, cached
  EXPECT_EQ(limiter.Check("x", {.cost = 2})->source, DecisionSource::kCachedDenial);
  EXPECT_EQ(limiter.Check("x", {.cost = 3})->source, DecisionSource::kStore);  // waits longer
  auto smaller = limiter.Check("x", {.cost = 1});  // may fit: ask the store
  EXPECT_EQ(smaller->source, DecisionSource::kStore);
  EXPECT_TRUE(smaller->allowed);
  ASSERT_EQ(limiter.Check("x", {.cost = 2})->source, DecisionSource::kStore);  // refused again
  const Limit upgraded{.limit = 10, .window = seconds(60)};
  auto upgrade = limiter.Check("x", {.cost = 2, .limit = upgraded});
  EXPECT_EQ(upgrade->source, DecisionSource::kStore);
  EXPECT_TRUE(upgrade->allowed);
  ASSERT_FALSE(limiter.Check("x", {.cost = 8, .limit = upgraded})->allowed);
  EXPECT_EQ(limiter.Check("x", {.cost = 8, .limit = upgraded})->source,
            DecisionSource::kCachedDenial);
  ASSERT_THAT(limiter.Refund("x", 6), IsOk());  // a refund forgets the cached refusal
  auto after_refund = limiter.Check("x", {.cost = 8, .limit = upgraded});
  EXPECT_EQ(after_refund->source, DecisionSource::kStore);
  EXPECT_TRUE(after_refund->allowed);
}

TEST_F(Policies, DenialCacheIsBounded) {
  auto client = *internal::ClientFactory::WithStore(
      {.url = "memory://", .denial_cache_size = 32, .model_clock = clock_}, faults_);
  auto limiter = *client->MakeLimiter("bounded", {.limit = 1, .window = seconds(60)});
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "id" + std::to_string(i);
    ASSERT_TRUE(limiter.Check(id)->allowed);
    ASSERT_EQ(limiter.Check(id)->source, DecisionSource::kStore);
  }
  // Only the most recent refusals are remembered: an old id goes to the store again.
  EXPECT_EQ(limiter.Check("id0")->source, DecisionSource::kStore);
  EXPECT_EQ(limiter.Check("id999")->source, DecisionSource::kCachedDenial);
}

TEST_F(Policies, ShadowModeCountsButNeverRefuses) {
  auto client =
      *internal::ClientFactory::WithStore({.url = "memory://", .model_clock = clock_}, faults_);
  auto limiter =
      *client->MakeLimiter("dark", {.limit = 2, .window = seconds(60)}, {.shadow = true});
  int shadow_refused = 0;
  for (int i = 0; i < 5; ++i) {
    auto d = limiter.Check("x");
    ASSERT_THAT(d, IsOk());
    EXPECT_TRUE(d->allowed);
    shadow_refused += d->shadow_refused;
    if (d->shadow_refused) {
      EXPECT_EQ(d->reason, RefusalReason::kOverLimit);
    }
  }
  EXPECT_EQ(shadow_refused, 3);
  EXPECT_EQ(client->stats().shadow_refusals, 3u);
  // The limit really counted what it admitted: a peek sees the window spent.
  EXPECT_EQ(limiter.Peek("x")->remaining, 0);
}

// The periodic reclaim (memory/memory_store.h) frees expired entries whatever calls
// arrive. kReclaimIds expired ids spread over the store's 256 shards take about
// ceil(largest shard / 64) rotations of 160 ms each (about 0.6 s here); the tests allow
// kReclaimWithin, room for a loaded machine and sanitizer builds.
constexpr int kReclaimIds = 40'000;
constexpr milliseconds kReclaimWithin{5000};

// A client whose only traffic is refusals its denial cache answers never calls its
// embedded store, yet the store's expired entries are freed.
TEST(EmbeddedStoreReclaim, ExpiredEntriesAreFreedWhileOnlyCachedDenialsArrive) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto store = std::make_shared<internal::MemoryStore>(clock);
  auto client =
      *internal::ClientFactory::WithStore({.url = "memory://", .model_clock = clock}, store);
  auto once = *client->MakeLimiter("once", {.limit = 1, .window = seconds(1)});
  auto flood = *client->MakeLimiter("flood", {.limit = 1, .window = std::chrono::hours(1)});
  constexpr int kRefused = 50;
  for (int i = 0; i < kReclaimIds; ++i) ASSERT_TRUE(once.Check("id" + std::to_string(i))->allowed);
  for (int i = 0; i < kRefused; ++i) {
    const std::string id = "abuser" + std::to_string(i);
    ASSERT_TRUE(flood.Check(id)->allowed);
    ASSERT_EQ(flood.Check(id)->source, DecisionSource::kStore);  // refused: now cached
  }
  ASSERT_EQ(store->EntryCount(), static_cast<std::size_t>(kReclaimIds + kRefused));

  clock->Advance(seconds(1) + milliseconds(internal::MemoryStore::kSlotMs));
  const auto start = steady_clock::now();
  const bool freed = testing::Eventually(
      [&] {
        for (int i = 0; i < kRefused; ++i) {
          auto d = flood.Check("abuser" + std::to_string(i));
          if (!d.ok() || d->source != DecisionSource::kCachedDenial) {
            ADD_FAILURE() << "not a cached denial: " << d.status().ToString();
            return true;
          }
        }
        return store->EntryCount() == static_cast<std::size_t>(kRefused);
      },
      kReclaimWithin);
  std::cout << kReclaimIds << " expired entries freed in "
            << std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count()
            << " ms while only cached denials arrived\n";
  EXPECT_TRUE(freed) << store->EntryCount() << " entries still held, " << kRefused << " live";
  EXPECT_GE(client->stats().cached_denials, static_cast<uint64_t>(kRefused));
}

// The local fallback's store, filled while the store was down, is freed once its entries
// expire, with no call at all.
TEST(EmbeddedStoreReclaim, TheLocalFallbackFreesItsExpiredEntriesWithNoCalls) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto faults =
      std::make_shared<testing::FaultStore>(std::make_shared<internal::MemoryStore>(clock));
  auto client = *internal::ClientFactory::WithStore(
      {.url = "memory://", .on_failure = FailurePolicy::kLocal, .model_clock = clock}, faults);
  auto limiter = *client->MakeLimiter("api", {.limit = 10, .window = seconds(1)});
  faults->FailRandomly(1.0, UnavailableError("injected: redis down"));
  for (int i = 0; i < kReclaimIds; ++i) {
    ASSERT_EQ(limiter.Check("id" + std::to_string(i))->source, DecisionSource::kLocalFallback);
  }
  internal::MemoryStore& local = internal::ClientFactory::CoreOf(*client).policy->local_store();
  ASSERT_EQ(local.EntryCount(), static_cast<std::size_t>(kReclaimIds));
  faults->FailRandomly(0, Status::Ok());  // the store is back; nothing calls the fallback

  clock->Advance(seconds(1) + milliseconds(internal::MemoryStore::kSlotMs));
  EXPECT_TRUE(testing::Eventually([&] { return local.EntryCount() == 0; }, kReclaimWithin))
      << local.EntryCount() << " expired entries still held";
}

}  // namespace
}  // namespace sluice

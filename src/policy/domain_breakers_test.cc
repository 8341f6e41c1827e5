// One circuit breaker per fault domain (policy/domain_breakers.h): a store whose keys lie
// in several domains (a Redis Cluster's primaries) is played by the embedded store behind
// a wrapper that places each key in a domain by its id and fails the calls of chosen
// domains; the failure policies answer through the public API.
#include <map>
#include <optional>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "client/client_core.h"
#include "core/mutex.h"
#include "memory/memory_store.h"
#include "policy/domain_breakers.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"

namespace sluice {
namespace {

using internal::Breaker;
using internal::DomainBreakers;
using internal::FaultDomainInfo;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The embedded store as a cluster of domains: a key whose id starts with "east" is in
// domain `east`, "west" in `west`, any other in domain 0. The calls of a failing domain
// answer Unavailable without reaching the store.
class DomainStore final : public internal::Store {
 public:
  explicit DomainStore(std::shared_ptr<const Clock> clock)
      : inner_(std::make_shared<internal::MemoryStore>(std::move(clock))) {}

  void Place(uint64_t east, uint64_t west) {
    internal::MutexLock lock(mu_);
    east_ = east;
    west_ = west;
  }
  void Fail(uint64_t domain, bool failing) {
    internal::MutexLock lock(mu_);
    if (failing) {
      failing_.insert(domain);
    } else {
      failing_.erase(domain);
    }
  }
  int64_t calls(uint64_t domain) const {
    internal::MutexLock lock(mu_);
    const auto it = calls_.find(domain);
    return it == calls_.end() ? 0 : it->second;
  }

  bool HasFaultDomains() const override { return true; }
  uint64_t FaultDomain(std::string_view key) const override {
    internal::MutexLock lock(mu_);
    return DomainLocked(key);
  }
  std::vector<FaultDomainInfo> FaultDomains() const override {
    internal::MutexLock lock(mu_);
    return {{east_, "east:" + std::to_string(east_)},
            {west_, "west:" + std::to_string(west_)},
            FaultDomainInfo{}};
  }
  // Keys of one domain can be decided together; others are staged.
  std::optional<uint32_t> CompositeGroup(std::string_view key) const override {
    return static_cast<uint32_t>(FaultDomain(key));
  }
  void CheckComposite(internal::CompositeCall call, internal::CompositeCallback done) override {
    if (Failing(call.calls.front().key)) return done(UnavailableError("injected: domain down"));
    inner_->CheckComposite(std::move(call), std::move(done));
  }
  void Check(internal::CheckCall call, DecisionCallback done) override {
    if (Failing(call.key)) return done(UnavailableError("injected: domain down"));
    inner_->Check(std::move(call), std::move(done));
  }
  void RunLease(internal::LeaseCall call, internal::LeaseCallback done) override {
    if (Failing(call.key)) return done(UnavailableError("injected: domain down"));
    inner_->RunLease(std::move(call), std::move(done));
  }

 private:
  uint64_t DomainLocked(std::string_view key) const SLUICE_REQUIRES(mu_) {
    // <prefix>:{<limiter>:<id>}...: the id follows the limiter's name.
    const auto colon = key.find(':', key.find('{'));
    const std::string_view id = colon == std::string_view::npos ? key : key.substr(colon + 1);
    if (id.starts_with("east")) return east_;
    if (id.starts_with("west")) return west_;
    return 0;
  }
  bool Failing(std::string_view key) {
    internal::MutexLock lock(mu_);
    const uint64_t domain = DomainLocked(key);
    ++calls_[domain];
    return failing_.count(domain) > 0;
  }

  std::shared_ptr<internal::MemoryStore> inner_;
  mutable internal::Mutex mu_;
  uint64_t east_ SLUICE_GUARDED_BY(mu_) = 1;
  uint64_t west_ SLUICE_GUARDED_BY(mu_) = 2;
  std::set<uint64_t> failing_ SLUICE_GUARDED_BY(mu_);
  std::map<uint64_t, int64_t> calls_ SLUICE_GUARDED_BY(mu_);
};

class DomainBreakersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_shared<DomainStore>(clock_);
    client_ = *internal::ClientFactory::WithStore({.url = "memory://",
                                                   .on_failure = FailurePolicy::kClosed,
                                                   .breaker_failures = 3,
                                                   .breaker_cool_down = seconds(60),
                                                   .model_clock = clock_},
                                                  store_);
    limiter_.emplace(*client_->MakeLimiter("api", {.limit = 1000, .window = seconds(60)}));
  }
  // Opens the west domain's breaker: three store failures in a row.
  void OpenWest() {
    store_->Fail(2, true);
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(limiter_->Check("west1")->source, DecisionSource::kFailClosed);
    ASSERT_EQ(client_->Health().breaker, "open");
  }

  std::shared_ptr<testing::FakeClock> clock_ = std::make_shared<testing::FakeClock>();
  std::shared_ptr<DomainStore> store_;
  std::shared_ptr<Client> client_;
  std::optional<Limiter> limiter_;
};

TEST_F(DomainBreakersTest, AFailingDomainShortCircuitsOnlyItsOwnCalls) {
  OpenWest();
  const int64_t west_calls = store_->calls(2);
  for (int i = 0; i < 50; ++i) {
    auto west = limiter_->Check("west" + std::to_string(i));
    ASSERT_TRUE(west.ok());
    EXPECT_EQ(west->source, DecisionSource::kFailClosed);
    EXPECT_GT(west->retry_after, milliseconds(59'000));  // until west's breaker probes
    auto east = limiter_->Check("east" + std::to_string(i));
    ASSERT_TRUE(east.ok());
    EXPECT_EQ(east->source, DecisionSource::kStore) << "a healthy domain was short-circuited";
    auto other = limiter_->Check("north" + std::to_string(i));  // domain 0
    EXPECT_EQ(other->source, DecisionSource::kStore);
  }
  EXPECT_EQ(store_->calls(2), west_calls) << "an open breaker still called its domain";
  const StoreHealth health = client_->Health();
  EXPECT_EQ(health.breaker, "open");  // the worst domain's
  EXPECT_EQ(health.breaker_domains, 3);
  EXPECT_EQ(health.open_domains, 1);
  EXPECT_EQ(health.open_domain_names, std::vector<std::string>{"west:2"});
  EXPECT_EQ(health.short_circuited, 50);
  EXPECT_EQ(health.breaker_opens, 1);
  EXPECT_EQ(health.consecutive_failures, 3);
  EXPECT_GT(health.probe_in, milliseconds(59'000));
}

// A failover: the west keys' slots are served by a promoted replica (another address,
// another domain). Its breaker starts closed: the calls go to it at once, without
// waiting out the old primary's cool-down, and the old breaker is dropped.
TEST_F(DomainBreakersTest, APromotedReplicaIsANewDomainWhoseBreakerStartsClosed) {
  OpenWest();
  store_->Place(1, 3);
  auto d = limiter_->Check("west1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_EQ(d->remaining, 999);  // the failed calls counted nothing
  const StoreHealth health = client_->Health();
  EXPECT_EQ(health.breaker, "closed");
  EXPECT_EQ(health.open_domains, 0);
  EXPECT_EQ(health.breaker_opens, 1) << "a dropped breaker's count was lost";
  // West's new domain only: the old one's breaker is gone (east had no call yet).
  EXPECT_EQ(internal::ClientFactory::CoreOf(*client_).policy->breakers().size(), 1u);
}

// A one-step composite is gated by its domain (its keys share one); a staged one takes
// each stage to its own domain's breaker: the healthy stage is the store's decision.
TEST_F(DomainBreakersTest, CompositesAreGatedByTheDomainOfEachStep) {
  auto open_client = *internal::ClientFactory::WithStore({.url = "memory://",
                                                          .on_failure = FailurePolicy::kOpen,
                                                          .breaker_failures = 3,
                                                          .breaker_cool_down = seconds(60),
                                                          .model_clock = clock_},
                                                         store_);
  auto user = *open_client->MakeLimiter("user", {.limit = 10, .window = seconds(60)});
  auto tenant = *open_client->MakeLimiter("tenant", {.limit = 10, .window = seconds(60)});
  store_->Fail(2, true);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(user.Check("west1")->source, DecisionSource::kFailOpen);
  ASSERT_EQ(open_client->Health().open_domains, 1);
  const int64_t west_calls = store_->calls(2);
  // Staged: east (healthy) then west (open).
  const LimitCheck staged[] = {{&user, "east1"}, {&tenant, "west1"}};
  auto s = CheckComposite(staged, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->decision.allowed);
  ASSERT_EQ(s->decisions.size(), 2u);
  EXPECT_EQ(s->decisions[0].source, DecisionSource::kStore);
  EXPECT_EQ(s->decisions[1].source, DecisionSource::kFailOpen);
  // One step on the healthy domain: the store's; on the open one: the policy's, at once.
  const LimitCheck east[] = {{&user, "east2"}, {&tenant, "east2"}};
  auto e = CheckComposite(east, {});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->decisions[0].source, DecisionSource::kStore);
  const LimitCheck west[] = {{&user, "west2"}, {&tenant, "west2"}};
  auto w = CheckComposite(west, {});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->decisions[0].source, DecisionSource::kFailOpen);
  EXPECT_EQ(store_->calls(2), west_calls) << "an open domain was called";
}

TEST(DomainBreakers, WithoutDomainsOneBreakerGatesEveryCall) {
  DomainBreakers breakers({.failures_to_open = 1, .cool_down = seconds(60)},
                          [] { return std::vector<FaultDomainInfo>{FaultDomainInfo{}}; });
  EXPECT_EQ(breakers.For(0).breaker, &breakers.first());
  EXPECT_EQ(breakers.For(0).hold, nullptr);
  breakers.first().Settle(breakers.first().Allow(), Breaker::Outcome::kFailure);
  const DomainBreakers::Summary s = breakers.Summarize();
  EXPECT_EQ(s.worst, Breaker::State::kOpen);
  EXPECT_EQ(s.domains, 1);
  EXPECT_EQ(s.open_domains, 1);
  EXPECT_EQ(breakers.size(), 0u);
}

// Past kMaxDomains breakers, the domains met later share the overflow's; the bound holds.
TEST(DomainBreakers, PastTheBoundNewDomainsShareOneBreaker) {
  const uint64_t n = DomainBreakers::kMaxDomains + 100;
  DomainBreakers breakers({.failures_to_open = 1, .cool_down = seconds(60)}, [n] {
    std::vector<FaultDomainInfo> live;
    for (uint64_t i = 1; i <= n; ++i) live.push_back({i, "n" + std::to_string(i)});
    return live;
  });
  std::set<Breaker*> distinct;
  for (uint64_t i = 1; i <= n; ++i) distinct.insert(breakers.For(i).breaker);
  EXPECT_EQ(breakers.size(), DomainBreakers::kMaxDomains);
  EXPECT_EQ(distinct.size(), DomainBreakers::kMaxDomains + 1);  // and the overflow's
  EXPECT_EQ(breakers.For(n).breaker, breakers.For(n - 1).breaker);
  EXPECT_NE(breakers.For(1).breaker, breakers.For(2).breaker);
  // A known domain keeps its own.
  EXPECT_EQ(breakers.For(1).breaker, breakers.For(1).breaker);
  EXPECT_EQ(breakers.Summarize().domains, static_cast<int64_t>(n) + 1);
}

// Domains the store no longer names lose their breakers (and keep their counts).
TEST(DomainBreakers, DomainsTheStoreNoLongerNamesAreDropped) {
  std::vector<FaultDomainInfo> live = {{1, "a"}, {2, "b"}};
  DomainBreakers breakers({.failures_to_open = 1, .cool_down = seconds(60)}, [&] { return live; });
  Breaker* b = breakers.For(2).breaker;
  b->Settle(b->Allow(), Breaker::Outcome::kFailure);
  (void)breakers.For(1);
  EXPECT_EQ(breakers.size(), 2u);
  EXPECT_EQ(breakers.Summarize().worst, Breaker::State::kOpen);
  live = {{1, "a"}, {3, "c"}};  // b failed over to c
  const DomainBreakers::Summary s = breakers.Summarize();
  EXPECT_EQ(s.worst, Breaker::State::kClosed);
  EXPECT_EQ(s.opens, 1);
  EXPECT_EQ(s.domains, 2);
  EXPECT_EQ(breakers.size(), 1u);
  EXPECT_EQ(breakers.For(3).breaker->state(), Breaker::State::kClosed);
}

}  // namespace
}  // namespace sluice

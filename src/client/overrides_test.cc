// Runtime overrides on the embedded store: the twin of src/algo/overrides.lua (bounds,
// expiry, the change counter), the codec of its values, and a client's copy applied to
// checks, peeks, composites, local budgets, the denial cache and acquires, on a model
// clock.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "algo/overrides.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

namespace sluice::overrides_test {
namespace {

using internal::OverrideEntry;
using internal::OverrideHashState;
using internal::OverrideOp;
using internal::OverrideStep;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(OverrideValue, RoundTripsWithAnyActorAndReason) {
  const OverrideEntry e{
      "acme", 500, 60000, 1'800'000'000'000, 1'700'000'000'000, "ana 1 2", "ticket 42: 3 4 5"};
  const std::string value = internal::EncodeOverrideValue(e);
  EXPECT_EQ(value, "500 60000 1800000000000 1700000000000 7 ana 1 2ticket 42: 3 4 5");
  const auto back = internal::DecodeOverrideValue("acme", value);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->limit, 500);
  EXPECT_EQ(back->window_ms, 60000);
  EXPECT_EQ(back->expires_at_ms, 1'800'000'000'000);
  EXPECT_EQ(back->set_at_ms, 1'700'000'000'000);
  EXPECT_EQ(back->actor, "ana 1 2");
  EXPECT_EQ(back->reason, "ticket 42: 3 4 5");
  EXPECT_FALSE(internal::DecodeOverrideValue("x", "500 60000 1 2 9 short").has_value());
  EXPECT_FALSE(internal::DecodeOverrideValue("x", "-1 0 1 2 0 ").has_value());
  EXPECT_FALSE(internal::DecodeOverrideValue("x", "garbage").has_value());
}

TEST(OverrideKey, IsSluicesForAuditAndRepair) {
  const auto name = ParseKeyName("pre.fix", "pre.fix:{overrides}:login");
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->limiter, "login");
  EXPECT_EQ(name->suffix, "ovr");
  EXPECT_EQ(ExpectedKeyType(name->suffix), KeyType::kHash);
  EXPECT_EQ(SuffixAlgorithm(name->suffix), "runtime_overrides");
  EXPECT_FALSE(ParseKeyName("pre.fix", "pre.fix:{overrides}:").has_value());
  EXPECT_FALSE(ParseKeyName("pre.fix", "pre.fix:{overrides}:a:b").has_value());
  EXPECT_FALSE(ParseKeyName("other", "pre.fix:{overrides}:login").has_value());
}

OverrideEntry Entry(std::string id, int64_t limit) {
  return {std::move(id), limit, 0, 0, 0, "ana", "why"};
}

TEST(OverrideTwin, BoundsExpiryAndCounter) {
  OverrideHashState state;
  constexpr int64_t kDay = 24 * 3600 * 1000;
  int64_t now = 1000;
  for (int i = 0; i < internal::kMaxOverridesPerLimiter; ++i) {
    auto c = OverrideStep(state, OverrideOp::kSet, Entry("id" + std::to_string(i), 5),
                          i < 10 ? 500 : kDay, internal::kMaxOverridesPerLimiter, now, 0);
    ASSERT_TRUE(c.ok() && c->done) << i;
  }
  const int64_t counter = state.counter;
  // The 1,001st id is refused, nothing changes; an id already there may be replaced.
  auto full = OverrideStep(state, OverrideOp::kSet, Entry("new", 5), kDay, 1000, now, 0);
  ASSERT_THAT(full.status(), testing::IsOk());
  EXPECT_FALSE(full->done);
  EXPECT_EQ(full->live, 1000);
  EXPECT_EQ(state.counter, counter);
  auto again = OverrideStep(state, OverrideOp::kSet, Entry("id500", 7), kDay, 1000, now, 0);
  ASSERT_TRUE(again.ok() && again->done);
  ASSERT_TRUE(again->before.has_value());
  EXPECT_EQ(again->before->limit, 5);
  EXPECT_GT(state.counter, counter);  // same ms: raised by one, never repeated
  // Lifetimes: 1 ms to 30 days.
  EXPECT_FALSE(
      OverrideStep(state, OverrideOp::kSet, Entry("id1", 5), 30 * kDay + 1, 1000, now, 0).ok());
  EXPECT_FALSE(OverrideStep(state, OverrideOp::kSet, Entry("id1", 5), 0, 1000, now, 0).ok());
  // Ten of them end at 1500: the 1,001st fits after that.
  now = 1500;
  auto fits = OverrideStep(state, OverrideOp::kSet, Entry("new", 5), kDay, 1000, now, 0);
  ASSERT_TRUE(fits.ok() && fits->done);
  EXPECT_EQ(state.entries.size(), 991u);
  // A clear of an ended override changes nothing; of a live one, it goes.
  auto ended = OverrideStep(state, OverrideOp::kClear, Entry("id0", 0), 0, 1000, now, 0);
  ASSERT_TRUE(ended.ok());
  EXPECT_FALSE(ended->done);
  auto cleared = OverrideStep(state, OverrideOp::kClear, Entry("id500", 0), 0, 1000, now, 0);
  ASSERT_TRUE(cleared.ok() && cleared->done);
  EXPECT_EQ(state.entries.count("id500"), 0u);
  // The hash outlives its longest entry; a read with the counter held reads nothing more.
  EXPECT_EQ(state.expires_at_ms, 1500 + kDay);  // "new", set at 1500
  EXPECT_FALSE(internal::OverrideReadOne(state, state.counter).changed);
  EXPECT_EQ(internal::OverrideReadOne(state, -1).entries.size(), 990u);
}

class OverrideClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_ = std::make_shared<testing::FakeClock>(1'000'000);
    client_ = *Client::Create({.url = "memory://", .model_clock = clock_});
    log_ = ::testing::TempDir() + "overrides-audit-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl";
    std::remove(log_.c_str());
  }
  AuditOptions Audit() const { return {.log_path = log_}; }
  // Waits (bounded) until `limiter`'s check of `id` is decided with the runtime override.
  static bool Applied(const Limiter& limiter, const std::string& id, LimitSource want) {
    return testing::Eventually([&] {
      auto d = limiter.Peek(id);
      return d.ok() && d->limit_source == want;
    });
  }

  std::shared_ptr<testing::FakeClock> clock_;
  std::shared_ptr<Client> client_;
  std::string log_;
};

TEST_F(OverrideClientTest, ARaisedLimitAppliesUntilItEnds) {
  auto login = *client_->MakeLimiter("login", {.limit = 2, .window = seconds(60)});
  ASSERT_TRUE(login.Check("acme")->allowed);
  ASSERT_TRUE(login.Check("acme")->allowed);
  auto refused = login.Check("acme");
  ASSERT_FALSE(refused->allowed);  // now in the denial cache too
  auto set = SetOverride(login, "acme", {.limit = 5, .ttl = seconds(90)},
                         {.actor = "ana", .reason = "plan upgrade"}, Audit());
  ASSERT_THAT(set.status(), testing::IsOk());
  EXPECT_TRUE(set->changed);
  EXPECT_FALSE(set->before.has_value());
  ASSERT_TRUE(set->after.has_value());
  EXPECT_EQ(set->after->limit, 5);
  EXPECT_EQ(set->after->expires_at_ms, 1'000'000 + 90'000);
  EXPECT_NE(set->record.find("\"action\":\"override_set\""), std::string::npos);
  EXPECT_NE(set->record.find("\"limit\":5,\"window_ms\":0,\"ttl_s\":90,"), std::string::npos);
  EXPECT_NE(set->record.find("\"old\":\"limiter\",\"old_limit\":2"), std::string::npos);
  ASSERT_TRUE(Applied(login, "acme", LimitSource::kRuntimeOverride));
  // The cached refusal was made under the old limit: the new one reaches the store.
  auto d = login.Check("acme");
  ASSERT_THAT(d.status(), testing::IsOk());
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->limit, 5);
  EXPECT_EQ(d->remaining, 2);
  EXPECT_EQ(d->limit_source, LimitSource::kRuntimeOverride);
  // Another id keeps the limiter's own limit.
  EXPECT_EQ(login.Check("other")->limit_source, LimitSource::kLimiter);
  // It wins over a call's own limit too.
  auto with_call = login.Check("acme", {.limit = Limit{.limit = 1, .window = seconds(60)}});
  EXPECT_EQ(with_call->limit, 5);
  // At its end the limiter's own limit is back, with no refresh needed.
  clock_->Advance(seconds(90));
  auto after = login.Peek("acme");
  EXPECT_EQ(after->limit_source, LimitSource::kLimiter);
  EXPECT_EQ(after->limit, 2);
}

TEST_F(OverrideClientTest, LimitZeroRefusesAndClearEndsIt) {
  auto api = *client_->MakeLimiter("api", {.limit = 100, .window = seconds(1)});
  auto cap = *client_->MakeConcurrencyLimiter("streams", {.limit = 3, .lease_ttl = seconds(30)});
  ASSERT_THAT(
      SetOverride(api, "abuser", {.limit = 0, .ttl = hours(1)}, {"ana", "abuse"}, Audit()).status(),
      testing::IsOk());
  ASSERT_THAT(
      SetOverride(cap, "abuser", {.limit = 0, .ttl = hours(1)}, {"ana", "abuse"}, Audit()).status(),
      testing::IsOk());
  ASSERT_TRUE(Applied(api, "abuser", LimitSource::kRuntimeOverride));
  auto d = api.Check("abuser");
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->limit, 0);
  EXPECT_EQ(d->retry_after, hours(1));
  // A composite with it is refused by it, and counts nothing on the other limit.
  auto global = *client_->MakeLimiter("global", {.limit = 10, .window = seconds(1)});
  const LimitCheck checks[] = {{&api, "abuser"}, {&global, "all"}};
  auto c = CheckComposite(checks);
  ASSERT_THAT(c.status(), testing::IsOk());
  EXPECT_FALSE(c->decision.allowed);
  EXPECT_EQ(c->decided_by, 0u);
  EXPECT_EQ(c->decision.limit_source, LimitSource::kRuntimeOverride);
  EXPECT_EQ(global.Peek("all")->remaining, 10);
  auto a = cap.Acquire("abuser");
  ASSERT_THAT(a.status(), testing::IsOk());
  EXPECT_FALSE(a->acquired);
  EXPECT_EQ(a->limit_source, LimitSource::kRuntimeOverride);
  auto cleared = ClearOverride(api, "abuser", {"ana", "resolved"}, Audit());
  ASSERT_THAT(cleared.status(), testing::IsOk());
  EXPECT_TRUE(cleared->changed);
  EXPECT_NE(cleared->record.find("\"cleared\":true,\"old\":\"runtime\",\"old_limit\":0"),
            std::string::npos);
  ASSERT_TRUE(Applied(api, "abuser", LimitSource::kLimiter));
  EXPECT_TRUE(api.Check("abuser")->allowed);
  auto none = ClearOverride(api, "abuser", {"ana", "again"}, Audit());
  ASSERT_THAT(none.status(), testing::IsOk());
  EXPECT_FALSE(none->changed);
  // Every action is one line of the log.
  std::ifstream in(log_);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 4);
  // Listed: the concurrency limit's override is still there.
  const std::vector<std::string> names = {"api", "streams"};
  auto listed = ListOverrides(*client_, names);
  ASSERT_THAT(listed.status(), testing::IsOk());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].limiter, "streams");
  EXPECT_EQ((*listed)[0].actor, "ana");
  EXPECT_EQ((*listed)[0].reason, "abuse");
}

TEST_F(OverrideClientTest, BadSpecsAreRefusedBeforeAnythingIsWritten) {
  auto api = *client_->MakeLimiter("api", {.limit = 100, .window = seconds(1)});
  EXPECT_THAT(
      SetOverride(api, "a", {.limit = 5, .ttl = seconds(31 * 24 * 3600)}, {"a", "b"}, Audit())
          .status(),
      testing::StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(SetOverride(api, "a", {.limit = -1, .ttl = seconds(1)}, {"a", "b"}, Audit()).status(),
              testing::StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(SetOverride(api, "a", {.limit = 1, .ttl = seconds(1)}, {"", "b"}, Audit()).status(),
              testing::StatusIs(StatusCode::kInvalidArgument));
  std::ifstream in(log_);
  EXPECT_FALSE(in.good());  // no log was even opened
}

TEST_F(OverrideClientTest, LocalBudgetsStepAsideForAnOverriddenId) {
  auto hot = *client_->MakeLimiter(
      "hot", {.limit = 1000, .window = seconds(1)},
      {.local_budget = {.enabled = true, .hot_checks_per_second = 1, .max_slice = 100}});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(hot.Check("t")->allowed);
  ASSERT_THAT(SetOverride(hot, "t", {.limit = 3, .ttl = seconds(60)}, {"a", "b"}, Audit()).status(),
              testing::IsOk());
  ASSERT_TRUE(Applied(hot, "t", LimitSource::kRuntimeOverride));
  // The store counted the slices taken (more than 3): refused under the override, never
  // answered from a slice of the old limit.
  auto d = hot.Check("t");
  EXPECT_FALSE(d->allowed);
  EXPECT_NE(d->source, DecisionSource::kLocalBudget);
  EXPECT_EQ(d->limit, 3);
}

}  // namespace
}  // namespace sluice::overrides_test

// Several limits on one request (CheckComposite) on the embedded store: all-or-nothing
// counting and tenant fairness of a shared limit, in one step (every limiter on one
// client: the store's CheckComposite under its shard locks) and staged (limiters on
// different clients, or a limiter in shadow mode).
#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using std::chrono::seconds;

struct Fleet {
  std::shared_ptr<Client> client;
  Limiter tenant, global;
};

Fleet MakeFleet() {
  auto clock = std::make_shared<testing::FakeClock>();
  auto client = *Client::Create({.url = "memory://", .model_clock = clock});
  return {client, *client->MakeLimiter("tenant", {.limit = 40, .window = seconds(1)}),
          *client->MakeLimiter("global", {.limit = 100, .window = seconds(1)})};
}

int Send(Fleet& f, const std::string& tenant, int n) {
  int admitted = 0;
  for (int i = 0; i < n; ++i) {
    const LimitCheck checks[] = {{&f.tenant, tenant}, {&f.global, "all"}};
    auto d = CheckComposite(checks);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    admitted += d->decision.allowed;
  }
  return admitted;
}

TEST(CheckComposite, OneTenantsFloodDoesNotSpendTheOthersShare) {
  Fleet f = MakeFleet();
  EXPECT_EQ(Send(f, "north", 200), 40);  // North's own limit stops it
  EXPECT_EQ(Send(f, "south", 30), 30);   // South still gets all 30 of the shared 100
  EXPECT_EQ(f.global.Peek("all")->remaining, 30);
}

TEST(CheckComposite, ARefusalLaterInTheListRefundsTheEarlierLimits) {
  Fleet f = MakeFleet();
  // Spend the global limit through other tenants: t0..t4 x 20.
  for (int t = 0; t < 5; ++t) ASSERT_EQ(Send(f, "t" + std::to_string(t), 20), 20);
  const LimitCheck checks[] = {{&f.tenant, "late"}, {&f.global, "all"}};
  auto d = CheckComposite(checks, {.cost = 3});
  ASSERT_THAT(d, IsOk());
  EXPECT_FALSE(d->decision.allowed);
  EXPECT_EQ(d->decided_by, 1u);  // the global limit refused
  EXPECT_EQ(f.tenant.Peek("late")->remaining, 40) << "the tenant kept the refused request";
}

TEST(CheckComposite, AllowedReportsTheTightestLimit) {
  Fleet f = MakeFleet();
  const LimitCheck checks[] = {{&f.tenant, "a"}, {&f.global, "all"}};
  auto d = CheckComposite(checks, {.cost = 10});
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->decision.allowed);
  EXPECT_EQ(d->decided_by, 0u);
  EXPECT_EQ(d->decision.remaining, 30);
  EXPECT_EQ(CheckComposite({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(CheckComposite, TheSameKeyTwiceIsRefusedWholeInOneStep) {
  Fleet f = MakeFleet();
  // The first's peek sees room for 30 of the 40; the last is consumed and takes it, the
  // first's consume finds no room, and the last is given back.
  const LimitCheck checks[] = {{&f.tenant, "dup"}, {&f.tenant, "dup"}};
  auto d = CheckComposite(checks, {.cost = 30});
  ASSERT_THAT(d, IsOk());
  EXPECT_FALSE(d->decision.allowed);
  EXPECT_EQ(d->decided_by, 0u);  // the last is consumed first: the first finds no room
  EXPECT_EQ(f.tenant.Peek("dup")->remaining, 40);
}

// Limiters on two clients (two embedded stores) take the staged path: the tenant admits,
// the global limit refuses, the tenant is refunded.
TEST(CheckComposite, StagedAcrossClientsRefundsTheEarlierLimits) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto near = *Client::Create({.url = "memory://", .model_clock = clock});
  auto far = *Client::Create({.url = "memory://", .model_clock = clock});
  auto tenant = *near->MakeLimiter("tenant", {.limit = 40, .window = seconds(1)});
  auto global = *far->MakeLimiter("global", {.limit = 100, .window = seconds(1)});
  int admitted = 0;
  for (int i = 0; i < 200; ++i) {
    const LimitCheck checks[] = {{&tenant, "north"}, {&global, "all"}};
    admitted += CheckComposite(checks)->decision.allowed;
  }
  EXPECT_EQ(admitted, 40);
  ASSERT_TRUE(global.Check("all", {.cost = 60})->allowed);  // the global limit is full
  const LimitCheck checks[] = {{&tenant, "south"}, {&global, "all"}};
  auto d = CheckComposite(checks);
  ASSERT_THAT(d, IsOk());
  EXPECT_FALSE(d->decision.allowed);
  EXPECT_EQ(d->decided_by, 1u);
  EXPECT_EQ(tenant.Peek("south")->remaining, 40);
}

TEST(CheckComposite, AShadowLimitNeverRefuses) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto client = *Client::Create({.url = "memory://", .model_clock = clock});
  auto tenant = *client->MakeLimiter("tenant", {.limit = 40, .window = seconds(1)});
  auto global =
      *client->MakeLimiter("global", {.limit = 1, .window = seconds(1)}, {.shadow = true});
  const LimitCheck checks[] = {{&tenant, "t"}, {&global, "all"}};
  EXPECT_TRUE(CheckComposite(checks)->decision.allowed);
  auto d = CheckComposite(checks);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->decision.allowed);
  EXPECT_TRUE(d->decision.shadow_refused);
  EXPECT_EQ(tenant.Peek("t")->remaining, 38);
}

}  // namespace
}  // namespace sluice

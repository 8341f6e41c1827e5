// The fault-injecting store in front of the embedded store, through the public API:
// injected failures reach the caller as their status and spend nothing.
#include <gtest/gtest.h>

#include "core/client_core.h"
#include "memory/memory_store.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/fault_store.h"

namespace sluice {
namespace {

using std::chrono::seconds;

TEST(FaultStore, InjectedFailuresReachTheCallerAndSpendNothing) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto faults = std::make_shared<testing::FaultStore>(
      std::make_shared<internal::MemoryStore>(clock), /*seed=*/5);
  auto client = internal::ClientFactory::WithStore({.url = "memory://"}, faults);
  ASSERT_TRUE(client.ok());
  auto limiter = *(*client)->MakeLimiter("f", {.limit = 2, .window = seconds(10)});

  faults->FailNext(2, UnavailableError("injected: connection reset"));
  EXPECT_EQ(limiter.Check("x").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(limiter.Check("x").status().code(), StatusCode::kUnavailable);
  auto d = limiter.Check("x");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->remaining, 1) << "a failed call spent budget";

  faults->FailRandomly(0.5, DeadlineExceededError("injected: slow store"));
  int failed = 0;
  for (int i = 0; i < 200; ++i) {
    auto r = limiter.Check("y" + std::to_string(i));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
      ++failed;
    }
  }
  EXPECT_EQ(failed, faults->injected() - 2);
  EXPECT_GT(failed, 50);
  EXPECT_LT(failed, 150);
  EXPECT_EQ(faults->calls(), 203);
}

}  // namespace
}  // namespace sluice

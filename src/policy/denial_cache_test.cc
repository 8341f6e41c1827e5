// The denial cache keeps time with a monotonic clock: a cached refusal lasts its
// retry_after whatever the wall clock does (an NTP step back must not stretch it).
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "memory/memory_store.h"
#include "policy/policy_store.h"
#include "testing/fake_clock.h"

namespace sluice::denial_cache_test {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

StatusOr<Decision> CheckNow(internal::PolicyStore& store, const internal::CheckCall& call) {
  std::promise<StatusOr<Decision>> answer;
  store.Check(call, [&](StatusOr<Decision> d) { answer.set_value(std::move(d)); });
  return answer.get_future().get();
}

TEST(DenialCacheClock, AWallClockStepBackDoesNotStretchACachedDenial) {
  // The wall clock both stores read, stepped by hand (no model clock: calls carry no time).
  auto wall = std::make_shared<testing::FakeClock>(1'700'000'000'000);
  internal::PolicyStore store(std::make_shared<internal::MemoryStore>(wall), wall,
                              internal::BreakerOptions{}, /*denial_cache_size=*/100);
  internal::CheckCall call{.key = "sluice:{flood:abuser}:fw",
                           .limit = {.limit = 1, .window = milliseconds(200)},
                           .on_failure = FailurePolicy::kClosed,
                           .cache_denials = true};
  ASSERT_TRUE(CheckNow(store, call)->allowed);
  auto refused = CheckNow(store, call);
  ASSERT_FALSE(refused->allowed);
  ASSERT_EQ(refused->source, DecisionSource::kStore);
  ASSERT_EQ(refused->retry_after, milliseconds(200));

  wall->Advance(-hours(1));  // NTP steps the wall clock back an hour
  auto cached = CheckNow(store, call);
  ASSERT_FALSE(cached->allowed);
  ASSERT_EQ(cached->source, DecisionSource::kCachedDenial);
  EXPECT_LE(cached->retry_after, milliseconds(200)) << cached->ToString();

  // Once 200 ms of real time passed, the store decides again (its window, on the stepped
  // wall clock, is its own business: the cache does not answer any more).
  std::this_thread::sleep_for(milliseconds(250));
  auto after = CheckNow(store, call);
  EXPECT_NE(after->source, DecisionSource::kCachedDenial) << after->ToString();
}

}  // namespace
}  // namespace sluice::denial_cache_test

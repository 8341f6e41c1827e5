// What a check costs when the store cannot answer and the circuit breaker is open
// (issue target: <= 2 us under `open` or `local`), next to a check on the embedded store
// as the reference measured in the same run. The store is a fault-injecting wrapper that
// fails every call; after breaker_failures failures no call reaches it.
#include <benchmark/benchmark.h>

#include "client/client_core.h"
#include "memory/memory_store.h"
#include "sluice/sluice.h"
#include "testing/fault_store.h"

namespace {

using namespace sluice;

std::shared_ptr<Client> BrokenClient(FailurePolicy policy) {
  auto faults = std::make_shared<testing::FaultStore>(
      std::make_shared<internal::MemoryStore>(std::make_shared<SystemClock>()));
  faults->FailRandomly(1.0, UnavailableError("injected: redis is down"));
  return *internal::ClientFactory::WithStore({.url = "memory://",
                                              .on_failure = policy,
                                              .servers = 4,
                                              .breaker_cool_down = std::chrono::hours(1)},
                                             faults);
}

void Run(benchmark::State& state, const std::shared_ptr<Client>& client, const char* expect) {
  auto limiter =
      *client->MakeLimiter("bench", {.limit = 1'000'000'000, .window = std::chrono::hours(1)});
  for (int i = 0; i < 10; ++i) (void)limiter.Check("warm");  // opens the breaker
  int64_t i = 0;
  for (auto _ : state) {
    auto d = limiter.Check(i++ % 2 ? "user:1" : "user:2");
    benchmark::DoNotOptimize(d);
  }
  state.SetLabel(std::string(expect) + ", breaker " + client->Health().breaker);
}

void BM_BreakerOpen_FailOpen(benchmark::State& state) {
  Run(state, BrokenClient(FailurePolicy::kOpen), "fail_open");
}
void BM_BreakerOpen_FailClosed(benchmark::State& state) {
  Run(state, BrokenClient(FailurePolicy::kClosed), "fail_closed");
}
void BM_BreakerOpen_LocalFallback(benchmark::State& state) {
  Run(state, BrokenClient(FailurePolicy::kLocal), "local_fallback");
}
void BM_Reference_EmbeddedStore(benchmark::State& state) {
  Run(state, *Client::Create({.url = "memory://"}), "store (memory://)");
}

BENCHMARK(BM_BreakerOpen_FailOpen);
BENCHMARK(BM_BreakerOpen_FailClosed);
BENCHMARK(BM_BreakerOpen_LocalFallback);
BENCHMARK(BM_Reference_EmbeddedStore);

}  // namespace

BENCHMARK_MAIN();

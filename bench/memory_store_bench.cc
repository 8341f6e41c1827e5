// The embedded store after a mass expiry: memory and the slowest
// single call. One process, one MemoryStore on a model clock (time moves only when the
// program moves it, so the figures do not depend on how fast the machine inserts):
//   1. N ids (fixed_window, 1 s window) each get one check: the worst call of the fill;
//   2. the clock moves past every window (all N states are expired, 0 live keys);
//   3. light traffic: checks on 1,000 live ids, 1 ms of model time apart, until the
//      store holds no more than those (or a cap of calls is reached);
//   4. prints RSS (/proc/self/statm, not the peak) and the heap in use (mallinfo2) after
//      each step, the worst and p99.9 call of each phase, and the calls it took for the
//      memory to follow the live keys; then RSS after malloc_trim(0), to tell memory the
//      store kept from memory the allocator keeps for reuse;
//   B. on a second store, the same expiry followed by as many NEW ids: the slowest calls.
// Each call is timed in wall time and in this thread's CPU time (a call on a shared
// machine or VM may wait for a core for milliseconds: compare "calls over 1 ms").
// Usage: build/bin/memory_store_bench [ids, default 2000000]
#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "memory/memory_store.h"
#include "testing/fake_clock.h"

namespace {

using sluice::internal::CheckCall;
using sluice::internal::MemoryStore;
using Clock = std::chrono::steady_clock;

double RssMiB() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
         (1024.0 * 1024.0);
}

double HeapMiB() {
  return static_cast<double>(mallinfo2().uordblks) / (1024.0 * 1024.0);
}

double ThreadCpuUs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// Wall time per call, and this thread's CPU time per call: on a shared machine a call
// can wait for a core for milliseconds (wall), while its CPU time is the work it did.
struct Latencies {
  std::vector<float> wall_us, cpu_us;
  Clock::time_point start;
  double cpu_start = 0;
  void Start() {
    cpu_start = ThreadCpuUs();
    start = Clock::now();
  }
  void Stop() {
    const auto end = Clock::now();
    cpu_us.push_back(static_cast<float>(ThreadCpuUs() - cpu_start));
    wall_us.push_back(
        static_cast<float>(std::chrono::duration<double, std::micro>(end - start).count()));
  }
  static void Line(const char* what, std::vector<float>& us) {
    std::sort(us.begin(), us.end());
    const auto at = [&](double q) {
      return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))];
    };
    std::printf("    %-6s p50 %7.2f us  p99.9 %8.2f us  worst %9.1f us\n", what, at(0.5), at(0.999),
                us.back());
  }
  void Print(const char* phase) {
    if (wall_us.empty()) return;
    std::printf("  %s: %zu calls\n", phase, wall_us.size());
    std::vector<size_t> order(cpu_us.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const size_t shown = std::min<size_t>(3, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown),
                      order.end(), [&](size_t a, size_t b) { return cpu_us[a] > cpu_us[b]; });
    std::printf("    most cpu:");
    for (size_t i = 0; i < shown; ++i)
      std::printf(" call %zu %.0f us;", order[i], cpu_us[order[i]]);
    std::printf("\n");
    const auto over = [](const std::vector<float>& us, float limit) {
      return std::count_if(us.begin(), us.end(), [&](float u) { return u > limit; });
    };
    std::printf("    calls over 1 ms: wall %zd, cpu %zd\n", over(wall_us, 1000),
                over(cpu_us, 1000));
    Line("wall", wall_us);
    Line("cpu", cpu_us);
  }
};

void Memory(const char* when, MemoryStore& store) {
  std::printf("  %-28s RSS %7.1f MiB  heap in use %7.1f MiB  entries held %zu\n", when, RssMiB(),
              HeapMiB(), store.EntryCount());
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t ids = argc > 1 ? std::atoll(argv[1]) : 2'000'000;
  if (ids < 1) {
    std::fprintf(stderr, "usage: %s [ids >= 1]\n", argv[0]);
    return 2;
  }
  constexpr int64_t kLive = 1000;
  auto clock = std::make_shared<sluice::testing::FakeClock>();
  MemoryStore store(clock);
  const sluice::Limit limit{.limit = 10, .window = std::chrono::seconds(1)};
  std::printf("A: %lld ids, fixed_window 1 s, model clock; expire all, then light traffic\n",
              static_cast<long long>(ids));
  Memory("start", store);

  Latencies fill;
  fill.wall_us.reserve(static_cast<size_t>(ids));
  fill.cpu_us.reserve(static_cast<size_t>(ids));
  std::string key;
  for (int64_t i = 0; i < ids; ++i) {
    key = "sluice:{api:user:" + std::to_string(i) + "}:fw";
    fill.Start();
    auto d = store.CheckNow(CheckCall{.key = key, .limit = limit});
    fill.Stop();
    if (!d.ok() || !d->allowed) {
      std::fprintf(stderr, "unexpected refusal at %lld\n", static_cast<long long>(i));
      return 1;
    }
  }
  fill.Print("fill");
  Memory("after the fill", store);

  clock->Advance(std::chrono::seconds(2));  // every window is over: 0 live keys
  Memory("all expired, before traffic", store);

  // Light traffic: one call per model ms on 1,000 live ids.
  Latencies light;
  const int64_t max_calls = std::max<int64_t>(100'000, 2 * ids);
  light.wall_us.reserve(static_cast<size_t>(max_calls));
  light.cpu_us.reserve(static_cast<size_t>(max_calls));
  int64_t calls = 0, reclaimed_after = -1;
  while (calls < max_calls) {
    key = "sluice:{api:live:" + std::to_string(calls % kLive) + "}:fw";
    light.Start();
    (void)store.CheckNow(CheckCall{.key = key, .limit = limit});
    light.Stop();
    clock->Advance(std::chrono::milliseconds(1));
    ++calls;
    if (calls % 1000 == 0 && store.EntryCount() <= static_cast<size_t>(kLive)) {
      reclaimed_after = calls;
      break;
    }
  }
  light.Print("light traffic");
  if (reclaimed_after >= 0) {
    std::printf("  memory followed the live keys after %lld calls (%.1f s of traffic at 1000/s)\n",
                static_cast<long long>(reclaimed_after),
                static_cast<double>(reclaimed_after) / 1000);
  } else {
    std::printf("  memory did NOT follow the live keys within %lld calls\n",
                static_cast<long long>(calls));
  }
  Memory("after light traffic", store);
  std::printf("  live keys (KeyCount)         %zu\n", store.KeyCount());
  const auto trim_start = Clock::now();
  malloc_trim(0);
  std::printf("  malloc_trim(0) took %.1f ms\n",
              std::chrono::duration<double, std::milli>(Clock::now() - trim_start).count());
  Memory("after malloc_trim(0)", store);

  // B: the same mass expiry, then a second generation of as many new ids (what makes a
  // store that sweeps a whole shard at once pay for it in one call).
  {
    MemoryStore second(clock);
    for (int64_t i = 0; i < ids; ++i) {
      key = "sluice:{api:user:" + std::to_string(i) + "}:fw";
      (void)second.CheckNow(CheckCall{.key = key, .limit = limit});
    }
    clock->Advance(std::chrono::seconds(2));
    Latencies next;
    next.wall_us.reserve(static_cast<size_t>(ids));
    next.cpu_us.reserve(static_cast<size_t>(ids));
    for (int64_t i = 0; i < ids; ++i) {
      key = "sluice:{api:next:" + std::to_string(i) + "}:fw";
      next.Start();
      (void)second.CheckNow(CheckCall{.key = key, .limit = limit});
      next.Stop();
    }
    std::printf("B: %lld ids expired, then %lld new ids\n", static_cast<long long>(ids),
                static_cast<long long>(ids));
    next.Print("second generation");
    std::printf("  entries held %zu (live %zu)\n", second.EntryCount(), second.KeyCount());
  }
  return 0;
}

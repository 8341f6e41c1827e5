// Waiting acquires against polling, same run: W workers share a cap of S slots on one id,
// each looping acquire → hold H ms → release → think 2H ms (its next job comes) for T
// seconds, each with its own Client (its own connections, as separate processes have).
// W/3 > S keeps the cap saturated.
//   wait   Acquire(id, {.wait = 30s}): in the id's queue, woken by the releases.
//   poll   Acquire(id) and, when refused, sleep 50 ms and try again (what users write
//          without a waiting acquire).
// Printed per mode, one JSON line: hand-overs per second (grants after the first S), and
// the time from a release to the grant that took its slot (releases and grants paired in
// order: the n-th grant after the first S took the n-th release's slot), p50 and p99 in
// ms, and the acquires the caller made per grant (bench/lease_wait.sh adds Redis's own
// count of script calls per grant, the waiters' re-checks included).
//
// Usage: lease_wait <redis url> <wait|poll> [seconds=5] [workers=16] [slots=4] [hold_ms=10]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/sluice.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Run {
  std::mutex mu;
  std::deque<Clock::time_point> releases;  // not yet paired with a grant
  std::vector<double> latencies_ms;
  int64_t grants = 0;
  int64_t calls = 0;
  int64_t errors = 0;
};

void Worker(const std::string& url, bool wait, int slots, milliseconds hold,
            Clock::time_point until, Run& run) {
  auto client =
      sluice::Client::Create({.url = url, .prefix = "benchwait", .deadline = milliseconds(500)});
  if (!client.ok()) {
    std::lock_guard<std::mutex> lock(run.mu);
    ++run.errors;
    return;
  }
  auto cap = *(*client)->MakeConcurrencyLimiter(
      wait ? "wait" : "poll", {.limit = slots, .lease_ttl = std::chrono::seconds(30)});
  while (Clock::now() < until) {
    sluice::StatusOr<sluice::Acquisition> a =
        cap.Acquire("job", {.wait = wait ? milliseconds(30000) : milliseconds(0)});
    int64_t calls = 1;
    while (!wait && a.ok() && !a->acquired && Clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(50));
      a = cap.Acquire("job");
      ++calls;
    }
    const auto granted_at = Clock::now();
    {
      std::lock_guard<std::mutex> lock(run.mu);
      run.calls += calls;
      if (!a.ok() || a->source != sluice::DecisionSource::kStore) ++run.errors;
      if (!a.ok() || !a->acquired) continue;
      if (++run.grants > slots && !run.releases.empty()) {
        run.latencies_ms.push_back(
            std::chrono::duration<double, std::milli>(granted_at - run.releases.front()).count());
        run.releases.pop_front();
      }
    }
    std::this_thread::sleep_for(hold);
    {
      std::lock_guard<std::mutex> lock(run.mu);
      run.releases.push_back(Clock::now());
    }
    (void)a->lease.Release();
    std::this_thread::sleep_for(2 * hold);
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

void RunMode(const std::string& url, bool wait, int seconds, int workers, int slots,
             milliseconds hold) {
  Run run;
  const auto start = Clock::now();
  const auto until = start + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&] { Worker(url, wait, slots, hold, until, run); });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "{\"mode\":\"%s\",\"workers\":%d,\"slots\":%d,\"hold_ms\":%lld,\"seconds\":%.1f,"
      "\"handovers_per_s\":%.1f,\"release_to_grant_p50_ms\":%.2f,"
      "\"release_to_grant_p99_ms\":%.2f,\"calls_per_grant\":%.2f,\"errors\":%lld}\n",
      wait ? "wait" : "poll_50ms", workers, slots, static_cast<long long>(hold.count()), elapsed,
      static_cast<double>(std::max<int64_t>(0, run.grants - slots)) / elapsed,
      Percentile(run.latencies_ms, 0.5), Percentile(run.latencies_ms, 0.99),
      run.grants ? static_cast<double>(run.calls) / static_cast<double>(run.grants) : 0.0,
      static_cast<long long>(run.errors));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: lease_wait <redis url> <wait|poll> [seconds] [workers] [slots] "
                 "[hold_ms]\n");
    return 2;
  }
  const std::string url = argv[1];
  const bool wait = std::string(argv[2]) == "wait";
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 5;
  const int workers = argc > 4 ? std::atoi(argv[4]) : 16;
  const int slots = argc > 5 ? std::atoi(argv[5]) : 4;
  const milliseconds hold(argc > 6 ? std::atoi(argv[6]) : 10);
  RunMode(url, wait, seconds, workers, slots, hold);
  return 0;
}

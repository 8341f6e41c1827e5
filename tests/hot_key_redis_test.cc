// Hot ids on a real redis-server, from several client processes (each its own Client,
// as separate servers would be) x threads on one id under an aligned window:
//  - periodic sync stays within its stated bound (docs/design.md §7), also when a
//    process is SIGKILLed holding counts it never pushed;
//  - local budgets never admit more than the limit when a process is SIGKILLed holding
//    a slice (that budget is lost until its window ends);
//  - local budgets of sliding_window, token_bucket and gcra never go over the
//    algorithm's own bound (the estimate of what was admitted, at every ms; what was
//    admitted in every interval), and fill to within what the slices hold;
//  - afterwards no key is without an expiry.
// Admissions are counted in shared memory as they happen, so a killed process's count
// up to its death is kept. Each admission is also counted at the ms its call began and
// the ms after it returned, on the wall clock, which is Redis's (same host): from those,
// a lower and an upper bound of what was admitted in any span of ms on Redis's clock,
// so the checks hold whatever the calls' latency (a slow call only loosens them).
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <iostream>
#include <new>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client_core.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/processes.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

namespace sluice::hot_key_redis_test {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kWindowMs = 1000;
constexpr int kSlots = 64;
constexpr int kMsSlots = 16384;

int64_t WallMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t WallUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Shared by the parent and its forked children (MAP_SHARED | MAP_ANONYMOUS).
struct Counts {
  int64_t base = 0;  // window index of slot 0
  // Per window: admissions whose call began and returned inside it (the decision lies
  // between the two, so it surely counted there), those decided locally, and, by the
  // window in which the call began, every check made (the demand) and the admissions
  // whose call straddled a window's end (their window is not known; left out of
  // `admitted`).
  std::atomic<int64_t> admitted[kSlots];
  std::atomic<int64_t> local[kSlots];
  std::atomic<int64_t> attempts[kSlots];
  std::atomic<int64_t> straddling[kSlots];
  std::atomic<int64_t> errors{0};
  // 1: threads follow the phases of PhasedPause instead of flooding.
  int phased = 0;
  // Admissions by the wall-clock ms (since base_ms) at which their call began, and by
  // the ms after the one in which it returned (floor + 1: strictly after the return).
  int64_t base_ms = 0;
  std::atomic<int64_t> began[kMsSlots];
  std::atomic<int64_t> ended[kMsSlots];
};

Counts* MapCounts() {
  void* p =
      ::mmap(nullptr, sizeof(Counts), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  auto* c = new (p) Counts;
  c->base = WallMs() / kWindowMs - 2;
  for (int i = 0; i < kSlots; ++i) {
    c->admitted[i] = 0;
    c->local[i] = 0;
    c->attempts[i] = 0;
    c->straddling[i] = 0;
  }
  c->base_ms = WallMs() - 100;
  for (int i = 0; i < kMsSlots; ++i) {
    c->began[i] = 0;
    c->ended[i] = 0;
  }
  return c;
}

// Bounds of what was admitted in the ms [a, b] of Redis's clock (ms since base_ms),
// from the began/ended counts: an admission happened between its call's start and its
// return, so it surely lies in [a, b] when its call began at or after a and returned
// before b + 1, and possibly when its call began at or before b and returned after a.
class Spans {
 public:
  explicit Spans(const Counts& c) {
    began_.assign(kMsSlots + 1, 0);
    ended_.assign(kMsSlots + 1, 0);
    for (int i = 0; i < kMsSlots; ++i) {
      began_[i + 1] = began_[i] + c.began[i];
      ended_[i + 1] = ended_[i] + c.ended[i];
    }
  }
  // #(began >= a) - #(ended > b + 1): no more than were admitted in [a, b].
  int64_t AtLeast(int64_t a, int64_t b) const {
    return (began_[kMsSlots] - began_[Clamp(a)]) - (ended_[kMsSlots] - ended_[Clamp(b + 2)]);
  }
  // #(began <= b) - #(ended <= a): no fewer than were admitted in [a, b].
  int64_t AtMost(int64_t a, int64_t b) const { return began_[Clamp(b + 1)] - ended_[Clamp(a + 1)]; }

 private:
  static size_t Clamp(int64_t i) {
    return static_cast<size_t>(std::clamp<int64_t>(i, 0, kMsSlots));
  }
  std::vector<int64_t> began_, ended_;  // prefix sums
};

// A child: `threads` threads check one id until `until_ms`, counting each admission in
// the aligned window in which it was decided when its call began and returned inside
// one window (the store decided between the two instants, on this machine's clock; a
// slice is spent only before its window ends, after the store counted it there).
// Phases of 250 ms on the wall clock, the same in every process: 0 nobody calls (a
// bucket refills), 1 every thread checks every 2 ms (below the limits used with it:
// slices form), 2 process 0 floods while the others keep that pace (slices held while
// the budget drains), 3 everyone floods. Returns how long to wait before a check; `skip`:
// no check at all.
milliseconds PhasedPause(int process, bool& skip) {
  const int64_t phase = WallMs() / 250 % 4;
  skip = phase == 0;
  if (phase == 3 || (phase == 2 && process == 0)) return milliseconds(0);
  return milliseconds(2);  // quiet: wait; paced: one check every ~2 ms
}

[[noreturn]] void Hammer(const std::string& url, const LimiterOptions& options, const Limit& limit,
                         int process, int threads, int64_t until_ms, Counts* counts) {
  auto client = Client::Create({.url = url, .prefix = "hot", .deadline = milliseconds(2000)});
  if (!client.ok()) ::_exit(3);
  auto limiter = (*client)->MakeLimiter("hot", limit, options);
  if (!limiter.ok()) ::_exit(4);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (WallMs() < until_ms) {
        if (counts->phased) {
          bool skip = false;
          const milliseconds pause = PhasedPause(process, skip);
          if (pause.count() > 0) std::this_thread::sleep_for(pause);
          if (skip) continue;
        }
        const int64_t began_us = WallUs();
        StatusOr<Decision> d = limiter->Check("tenant:1");
        const int64_t ended_us = WallUs();
        const int64_t began = began_us / 1000 - counts->base_ms;
        const int64_t ended = ended_us / 1000 + 1 - counts->base_ms;
        const int64_t slot = began_us / 1000 / kWindowMs - counts->base;
        if (slot < 0 || slot >= kSlots) {
          ++counts->errors;
          continue;
        }
        ++counts->attempts[slot];
        if (!d.ok()) {
          ++counts->errors;
          continue;
        }
        if (!d->allowed) continue;
        if (began < 0 || ended >= kMsSlots) {
          ++counts->errors;
          continue;
        }
        ++counts->began[began];
        ++counts->ended[ended];
        if (ended_us / 1000 / kWindowMs != began_us / 1000 / kWindowMs) {
          ++counts->straddling[slot];
          continue;
        }
        ++counts->admitted[slot];
        if (d->source != DecisionSource::kStore) ++counts->local[slot];
      }
    });
  }
  for (auto& t : pool) t.join();
  ::_exit(0);
}

struct ProcessesRun {
  std::vector<int64_t> admitted;  // per window that lies wholly inside the run
  // Per such window: the checks made in it, and the most it can have admitted (its
  // admissions plus those of calls that straddled its start or its end).
  std::vector<int64_t> attempts, at_most;
  int64_t local = 0, total = 0;
  std::optional<Spans> spans;
  int64_t from_ms = 0, until_ms = 0;  // the run's measured part, ms since base_ms
  int64_t base_ms = 0;
};

// `processes` children for `run_ms`; the one at index `kill` (if >= 0) is SIGKILLed
// `kill_after_ms` in. Returns the admissions of the windows wholly inside the run.
ProcessesRun RunProcesses(const testing::RedisServer& server, const LimiterOptions& options,
                          const Limit& limit, int processes, int64_t run_ms, int kill,
                          int64_t kill_after_ms, bool phased = false) {
  Counts* counts = MapCounts();
  counts->phased = phased ? 1 : 0;
  const int64_t start = WallMs();
  const int64_t until = start + run_ms;
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = testing::Fork();
    if (pid == 0) Hammer(server.url(), options, limit, p, 2, until, counts);
    children.push_back(pid);
  }
  if (kill >= 0) {
    std::this_thread::sleep_for(milliseconds(kill_after_ms));
    ::kill(children[static_cast<size_t>(kill)], SIGKILL);
  }
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    ::waitpid(children[i], &status, 0);
    if (static_cast<int>(i) == kill) {
      EXPECT_TRUE(WIFSIGNALED(status)) << "the child to kill ended first";
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << i;
    }
  }
  EXPECT_EQ(counts->errors.load(), 0);
  ProcessesRun run;
  // Windows wholly inside [start + 1 s (clients connect, ids turn hot), until).
  for (int i = 0; i < kSlots; ++i) {
    const int64_t begins = (counts->base + i) * kWindowMs;
    run.total += counts->admitted[i] + counts->straddling[i];
    run.local += counts->local[i];
    if (begins >= start + 1000 && begins + kWindowMs <= until) {
      run.admitted.push_back(counts->admitted[i]);
      run.attempts.push_back(counts->attempts[i]);
      run.at_most.push_back(counts->admitted[i] + counts->straddling[i] +
                            (i > 0 ? counts->straddling[i - 1].load() : 0));
    }
  }
  run.spans.emplace(*counts);
  run.base_ms = counts->base_ms;
  run.from_ms = start + 1000 - counts->base_ms;
  run.until_ms = until - counts->base_ms;
  ::munmap(counts, sizeof(Counts));
  return run;
}

void Print(const char* what, const ProcessesRun& run) {
  std::cout << what << ": admitted per window:";
  for (int64_t n : run.admitted) std::cout << " " << n;
  std::cout << " (checks made:";
  for (int64_t n : run.attempts) std::cout << " " << n;
  std::cout << ")";
  std::cout << "; " << run.local << " of " << run.total << " decided locally\n";
}

constexpr int kProcesses = 4;
constexpr int64_t kLimit = 2000;
const Limit kFixed{.limit = kLimit, .window = milliseconds(kWindowMs), .aligned = true};
// design.md §7: the fleet admits less than limit + (servers - 1) / servers x limit in a
// window, whatever the timing; a process killed with unpushed counts does not change it.
constexpr int64_t kSyncBound = kLimit + (kProcesses - 1) * kLimit / kProcesses;

LimiterOptions SyncOptions() {
  LimiterOptions o;
  o.sync = {.enabled = true,
            .hot_checks_per_second = 100,
            .sync_interval = milliseconds(100),
            .servers = kProcesses};
  return o;
}

LimiterOptions PrefetchOptions() {
  LimiterOptions o;
  o.local_budget = {.enabled = true, .hot_checks_per_second = 100};
  return o;
}

TEST(HotKeyRedis, SyncFromProcessesStaysWithinTheBound) {
  testing::RedisServer server;
  const ProcessesRun run = RunProcesses(server, SyncOptions(), kFixed, kProcesses, 5000, -1, 0);
  Print("sync", run);
  ASSERT_GE(run.admitted.size(), 2u);
  int64_t worst = 0;
  for (size_t i = 0; i < run.admitted.size(); ++i) {
    const int64_t n = run.admitted[i];
    EXPECT_LE(n, kSyncBound);
    // Where demand was far above the limit (not in a window whose processes were
    // starved of CPU, as under a sanitizer on a loaded machine).
    if (run.attempts[i] >= 2 * kLimit) {
      EXPECT_GE(run.at_most[i], kLimit * 8 / 10);
    }
    worst = std::max(worst, n - kLimit);
  }
  std::cout << "largest overshoot in a window: " << worst << " (bound " << kSyncBound - kLimit
            << ")\n";
  EXPECT_GT(run.local, run.total / 2) << "counted locally for the most part";
  EXPECT_EQ(server.KeysWithoutTtl("hot:*"), std::vector<std::string>{});
}

// A process SIGKILLed while it holds counts it has not pushed: they are lost (the store
// never counts them; at most that process's share, < limit / servers), and the bound
// still holds: its share is one of the shares the bound adds up.
TEST(HotKeyRedis, SyncWithAProcessKilledHoldingUnpushedCounts) {
  testing::RedisServer server;
  const ProcessesRun run = RunProcesses(server, SyncOptions(), kFixed, kProcesses, 5000, 1, 2550);
  Print("sync, one process killed 2.55 s in", run);
  ASSERT_GE(run.admitted.size(), 2u);
  for (int64_t n : run.admitted) EXPECT_LE(n, kSyncBound);
  EXPECT_EQ(server.KeysWithoutTtl("hot:*"), std::vector<std::string>{});
}

// A process SIGKILLed while it holds a slice: the store counted it, nobody spends it
// until its window ends. Never over the limit; the window of the kill is short by at
// most that slice, on top of the usual under-admission (servers x max slice).
TEST(HotKeyRedis, PrefetchWithAProcessKilledHoldingASlice) {
  testing::RedisServer server;
  const ProcessesRun run =
      RunProcesses(server, PrefetchOptions(), kFixed, kProcesses, 5000, 1, 2550);
  Print("prefetch, one process killed 2.55 s in", run);
  ASSERT_GE(run.admitted.size(), 2u);
  for (size_t i = 0; i < run.admitted.size(); ++i) {
    EXPECT_LE(run.admitted[i], kLimit);
    // Where demand was far above the limit (see above).
    if (run.attempts[i] >= 2 * kLimit) {
      EXPECT_GE(run.at_most[i], kLimit - (kProcesses + 1) * kLimit / 10);
    }
  }
  EXPECT_GT(run.local, run.total / 2) << "slices decided most requests";
  EXPECT_EQ(server.KeysWithoutTtl("hot:*"), std::vector<std::string>{});
}

// Local budgets of the other algorithms, four processes on one id. Checked from the
// admissions' call starts and returns on Redis's clock: a sliding window's estimate of
// what surely was admitted never goes over the limit at any ms; a bucket admits in no
// span [a, b] more than capacity + refill × (b − a). Under a flood every window (every
// window-long span, for the buckets) admits at least the limit less what the slices
// hold (counting what possibly was admitted).
class HotKeyPrefetch : public ::testing::TestWithParam<Algorithm> {
 protected:
  struct Outcome {
    int64_t worst = INT64_MIN;  // largest excess over the bound (> 0: an overshoot)
    int64_t least = INT64_MAX;  // least admitted in a window-long span
  };
  Outcome Check(const ProcessesRun& run, const Limit& limit) const {
    const Spans& spans = *run.spans;
    const int64_t w = limit.window.count();
    Outcome out;
    if (GetParam() == Algorithm::kSlidingWindow) {
      // Windows aligned on Redis's clock: [k × w, (k + 1) × w).
      for (int64_t t = run.from_ms; t < run.until_ms; ++t) {
        const int64_t at = run.base_ms + t;  // Redis's ms
        const int64_t start = at - at % w - run.base_ms;
        const int64_t e = at % w;
        const int64_t previous = std::max<int64_t>(0, spans.AtLeast(start - w, start - 1));
        const int64_t current = spans.AtLeast(start, t);
        out.worst = std::max(out.worst, previous * (w - e) / w + current - limit.limit);
        if (e == w - 1 && start >= run.from_ms) {
          out.least = std::min(out.least, spans.AtMost(start, t));
        }
      }
      return out;
    }
    // Every span of up to 2 s; the rate is limit per window (refill 0).
    for (int64_t a = run.from_ms; a < run.until_ms; ++a) {
      for (int64_t b = a; b < run.until_ms && b - a <= 2000; ++b) {
        out.worst =
            std::max(out.worst, spans.AtLeast(a, b) - (limit.limit + limit.limit * (b - a) / w));
      }
      if (a + w <= run.until_ms) out.least = std::min(out.least, spans.AtMost(a, a + w - 1));
    }
    return out;
  }
};

std::string NameOf(const ::testing::TestParamInfo<Algorithm>& param) {
  return std::string(AlgorithmName(param.param));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, HotKeyPrefetch,
                         ::testing::Values(Algorithm::kSlidingWindow, Algorithm::kTokenBucket,
                                           Algorithm::kGcra),
                         NameOf);

// A flood (demand far above the limit): a bucket or a sliding window frees units a few
// at a time, so cost + slice rarely fits and most checks take the plain path; what
// matters here is that the slices taken never break the bound and the fleet fills.
TEST_P(HotKeyPrefetch, AFloodStaysWithinTheBoundAndFills) {
  testing::RedisServer server;
  const Limit limit{.algorithm = GetParam(), .limit = kLimit, .window = milliseconds(kWindowMs)};
  const ProcessesRun run = RunProcesses(server, PrefetchOptions(), limit, kProcesses, 5000, -1, 0);
  ASSERT_TRUE(run.spans);
  const Outcome out = Check(run, limit);
  // What the slices hold (max_slice: limit / 10), and one slice more of slack for a
  // process the loaded machine stalls (as for fixed_window above).
  const int64_t slices = (kProcesses + 1) * (kLimit / 10);
  std::cout << AlgorithmName(GetParam()) << ", flood: largest excess over the bound " << out.worst
            << " (at most 0); least admitted in a window " << out.least << " (at least "
            << kLimit - slices << "); " << run.local << " of " << run.total << " decided locally\n";
  EXPECT_LE(out.worst, 0);
  EXPECT_GE(out.least, kLimit - slices);
  EXPECT_LT(out.least, INT64_MAX);
  EXPECT_EQ(server.KeysWithoutTtl("hot:*"), std::vector<std::string>{});
}

// Phases (PhasedPause): quiet (a bucket fills up), paced below the limit (slices
// form), one process flooding while the others hold slices, everyone flooding; 2,000
// per 250 ms. Never over the bound, and the slices decide a good part of the checks.
TEST_P(HotKeyPrefetch, PhasedDemandStaysWithinTheBound) {
  testing::RedisServer server;
  const Limit limit{.algorithm = GetParam(), .limit = kLimit, .window = milliseconds(250)};
  const ProcessesRun run =
      RunProcesses(server, PrefetchOptions(), limit, kProcesses, 6000, -1, 0, /*phased=*/true);
  ASSERT_TRUE(run.spans);
  const Outcome out = Check(run, limit);
  std::cout << AlgorithmName(GetParam()) << ", phases: largest excess over the bound " << out.worst
            << " (at most 0); " << run.local << " of " << run.total << " decided locally\n";
  EXPECT_LE(out.worst, 0);
  EXPECT_GT(run.local * 5, run.total) << "slices decided a good part of the checks";
  EXPECT_EQ(server.KeysWithoutTtl("hot:*"), std::vector<std::string>{});
}

// A Redis client and an embedded one on one model clock; Decide sends a call to a
// client's store directly (op and arguments as given): a script and its twin, side by
// side.
struct Twins {
  Twins() {
    auto r = Client::Create({.url = server.url(), .prefix = "hot", .model_clock = clock});
    auto m = Client::Create({.url = "memory://", .prefix = "hot", .model_clock = clock});
    EXPECT_THAT(r, testing::IsOk());
    EXPECT_THAT(m, testing::IsOk());
    if (r.ok()) redis = *r;
    if (m.ok()) memory = *m;
  }
  static StatusOr<Decision> Decide(const std::shared_ptr<Client>& client,
                                   internal::CheckCall call) {
    std::promise<StatusOr<Decision>> promise;
    internal::ClientFactory::StoreOf(*client)->Check(
        std::move(call), [&promise](StatusOr<Decision> d) { promise.set_value(std::move(d)); });
    return promise.get_future().get();
  }
  // A call of `key` under `limit`, now on the model clock.
  internal::CheckCall Call(std::string key, const Limit& limit) const {
    internal::CheckCall call;
    call.key = std::move(key);
    call.limit = limit;
    call.now_ms = clock->NowMs();
    call.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    return call;
  }
  // `call` on both stores: Redis's reply when both gave the same one (a test failure
  // otherwise, and nullopt).
  std::optional<Decision> Both(const internal::CheckCall& call, int step) const {
    StatusOr<Decision> a = Decide(redis, call);
    StatusOr<Decision> b = Decide(memory, call);
    EXPECT_THAT(a, testing::IsOk());
    EXPECT_THAT(b, testing::IsOk());
    if (!a.ok() || !b.ok()) return std::nullopt;
    EXPECT_EQ(a->ToString(), b->ToString()) << "step " << step;
    EXPECT_EQ(a->retry_after, b->retry_after) << "step " << step;
    if (a->ToString() != b->ToString() || a->retry_after != b->retry_after) return std::nullopt;
    return *a;
  }
  testing::RedisServer server;
  std::shared_ptr<testing::FakeClock> clock =
      std::make_shared<testing::FakeClock>(1'700'000'000'000);
  std::shared_ptr<Client> redis, memory;
};

// fixed_window.lua's sync op (4) and its twin give the same replies on random traces of
// syncs (of the live window, of an old one, of none known; with units or without) and
// consumes, aligned and not, across window ends.
TEST(HotKeyRedis, TheSyncOpMatchesItsTwin) {
  Twins twins;
  ASSERT_TRUE(twins.redis && twins.memory);
  std::mt19937 rng(16);
  int syncs = 0, dropped = 0;
  for (bool aligned : {true, false}) {
    int64_t known_end = 0;
    for (int step = 0; step < 1500; ++step) {
      twins.clock->Advance(milliseconds(rng() % 120));
      internal::CheckCall call =
          twins.Call("hot:{t:" + std::to_string(aligned) + "}:fw2",
                     Limit{.limit = 20, .window = milliseconds(1000), .aligned = aligned});
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0) {
        call.cost = 1 + static_cast<int64_t>(rng() % 3);
      } else {
        call.op = internal::Op::kSync;
        call.cost = static_cast<int64_t>(rng() % 6);
        const int which = static_cast<int>(rng() % 4);
        call.limit.refill = which == 0 ? 0 : which == 1 ? known_end - 1000 : known_end;
        if (call.limit.refill != 0 && call.limit.refill != known_end) ++dropped;
        ++syncs;
      }
      const std::optional<Decision> a = twins.Both(call, step);
      ASSERT_TRUE(a) << "step " << step;
      if (call.op == internal::Op::kSync) known_end = a->retry_after.count();
    }
  }
  std::cout << syncs << " syncs, " << dropped << " of them for an older window\n";
  EXPECT_EQ(twins.server.KeysWithoutTtl("hot:*"), std::vector<std::string>{});
}

// sliding_window.lua's take (5) and give-back (6) ops and their twin give the same
// replies on random traces of consumes, takes and give-backs naming the current window,
// the one before, older and later ones, across window ends.
TEST(HotKeyRedis, TheTakeAndGiveBackOpsMatchTheirTwin) {
  Twins twins;
  ASSERT_TRUE(twins.redis && twins.memory);
  std::mt19937 rng(1616);
  int takes = 0, given = 0;
  for (int64_t w : {1000, 7}) {
    int64_t known_end = 0;
    for (int step = 0; step < 1500; ++step) {
      twins.clock->Advance(
          milliseconds(static_cast<int64_t>(rng() % static_cast<uint32_t>(w * 2 / 5 + 1))));
      internal::CheckCall call = twins.Call(
          "hot:{sw:" + std::to_string(w) + "}:sw",
          Limit{.algorithm = Algorithm::kSlidingWindow, .limit = 30, .window = milliseconds(w)});
      const int kind = static_cast<int>(rng() % 3);
      call.cost = 1 + static_cast<int64_t>(rng() % 8);
      if (kind == 1) {
        call.op = internal::Op::kTake;
        ++takes;
      } else if (kind == 2) {
        call.op = internal::Op::kGiveBack;
        const int64_t shift[] = {0, 0, -1, -2, 1};
        call.limit.refill = known_end + shift[rng() % 5] * w + (rng() % 8 == 0 ? 1 : 0);
        ++given;
      }
      const std::optional<Decision> a = twins.Both(call, step);
      ASSERT_TRUE(a) << "step " << step;
      if (call.op == internal::Op::kTake && a->allowed) known_end = a->retry_after.count();
    }
  }
  std::cout << takes << " takes, " << given << " give-backs\n";
  EXPECT_EQ(twins.server.KeysWithoutTtl("hot:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluice::hot_key_redis_test

// The fault matrix: every kind of call × every fault × every failure policy, against
// private redis-servers, each cell a test of its own (FaultMatrix/Cell.<call>_<fault>_<policy>).
//
// A cell runs the call from a few threads without pause while the fault is injected and
// ended `reps` times (network faults through testing/fault_proxy.h between the client and
// Redis; server faults on the redis-server itself), and checks after it:
//  (1) every call returned within its own deadline plus kCallSlack (a staged composite
//      within one deadline per stage);
//  (2) once the fault ended, a call of the cell's kind was answered by the store again,
//      with every breaker closed, within the breaker's cool-down plus one deadline plus
//      kRecoverySlack (plus the reconnect backoff when the server restarted);
//  (3) no key of the test's prefix without an expiry (SCAN + PTTL);
//  (4) admissions within the documented bound: per id, what the store admitted (local
//      budgets and synced counts included) at most the limit per life of the store's
//      data (a restart without persistence forgets); what the local fallback admitted
//      at most limit / servers, and exactly that once it refused an id over the limit
//      (the fallback decides the request's own cost, no more); a policy's answers only
//      from that policy (no fail_open under `closed`);
//  (5) no more store leases of an id believed held at once than its limit;
//  (6) no growth of threads, open descriptors, Redis connections or memory from the
//      first fault to the last;
// and that a call whose policy must answer (checks, peeks, composites, acquires) never
// returns an error. Besides the bounds, the mechanism: over the repetitions, whenever
// the store failed the cell's calls, the breaker opened during a fault and short-circuited
// calls until it closed, and the policy answered (counted by source); lease heartbeats
// keep a live holder's lease across faults of half the lease_ttl only by bypassing the
// breaker (HeartbeatWorkload). testing/mutations.sh checks that cells fail when failure
// handling is broken on purpose.
//
// Calls that no policy answers (Refund, Reset, lease heartbeats, releases, ReleaseAll:
// they return the store's error) run once per fault, under the `closed` policy.
//
// SLUICE_FAULT_MATRIX_LONG=1: longer faults (longer than stall_timeout, so stalled
// connections are also given up and reconnected) and more repetitions.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/fault_proxy.h"
#include "testing/processes.h"
#include "testing/redis_cluster.h"
#include "testing/redis_sentinel.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using testing::Direction;
using testing::Eventually;
using testing::FaultProxy;
using testing::RedisServer;

// ---------------------------------------------------------------------------------------
// The settings of every cell.

bool LongMode() {
  const char* v = std::getenv("SLUICE_FAULT_MATRIX_LONG");
  return v != nullptr && std::string(v) == "1";
}
milliseconds FaultLength() {
  return LongMode() ? milliseconds(1500) : milliseconds(300);
}
int Repetitions() {
  return LongMode() ? 4 : 2;
}

constexpr milliseconds kCallDeadline{40};  // CheckOptions / AcquireOptions::deadline
// ClientOptions::deadline (heartbeats, releases): well above a call's own deadline, so a
// call held to the client's deadline instead of its own shows.
constexpr milliseconds kClientDeadline{300};
constexpr milliseconds kCoolDown{200};    // ClientOptions::breaker_cool_down
constexpr milliseconds kMaxBackoff{100};  // ClientOptions::reconnect_max_backoff
// What a call may take past its deadline: scheduling on a loaded 2-core machine.
constexpr milliseconds kCallSlack{100};
// What recovery may take past cool-down + deadline (+ backoff after a restart).
constexpr milliseconds kRecoverySlack{300};
constexpr int64_t kLimit = 200;  // per id and window (60 s: longer than any cell)
constexpr int64_t kServers = 4;  // the local fallback enforces kLimit / kServers
constexpr int kThreads = 3;
constexpr char kPrefix[] = "fm";

ClientOptions MatrixOptions(const std::string& url, FailurePolicy policy) {
  return {.url = url,
          .prefix = kPrefix,
          .deadline = kClientDeadline,
          .connect_timeout = milliseconds(2000),
          .reconnect_min_backoff = milliseconds(10),
          .reconnect_max_backoff = kMaxBackoff,
          .max_in_flight = 8,
          .on_failure = policy,
          .servers = kServers,
          .breaker_failures = 3,
          .breaker_cool_down = kCoolDown};
}

const Limit kWindow{.limit = kLimit, .window = std::chrono::seconds(60)};

// ---------------------------------------------------------------------------------------
// The dimensions.

enum class Call {
  kCheck,
  kCheckAsync,
  kCompositeOneScript,
  kCompositeStaged,
  kPeek,
  kRefund,
  kReset,
  kAcquire,
  kHeartbeat,
  kRelease,
  kReleaseAll,
  kLocalBudget,
  kPeriodicSync,
};

enum class Fault {
  kLatency,          // every reply 60-100 ms late (past the call deadline)
  kStall,            // nothing forwarded either way, sockets kept; held bytes go at the end
  kBlackhole,        // connections accepted, nothing answered; reset at the end
  kReset,            // every connection reset, again every 50 ms
  kCloseAfter,       // every connection closed after 30 bytes of replies
  kSlowLink,         // 300 bytes/s both ways
  kRefuse,           // connections reset and new ones refused
  kSigstop,          // redis-server SIGSTOPped, then SIGCONTinued
  kClientPause,      // CLIENT PAUSE <fault> ALL
  kRestartEmpty,     // redis-server killed and started again, without its data
  kRestartWithData,  // SAVE, killed, started again from the snapshot
};

const char* CallName(Call c) {
  switch (c) {
    case Call::kCheck: return "Check";
    case Call::kCheckAsync: return "CheckAsync";
    case Call::kCompositeOneScript: return "CompositeOneScript";
    case Call::kCompositeStaged: return "CompositeStaged";
    case Call::kPeek: return "Peek";
    case Call::kRefund: return "Refund";
    case Call::kReset: return "Reset";
    case Call::kAcquire: return "LeaseAcquire";
    case Call::kHeartbeat: return "LeaseHeartbeat";
    case Call::kRelease: return "LeaseRelease";
    case Call::kReleaseAll: return "ReleaseAll";
    case Call::kLocalBudget: return "LocalBudget";
    case Call::kPeriodicSync: return "PeriodicSync";
  }
  return "?";
}

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kLatency: return "Latency";
    case Fault::kStall: return "Stall";
    case Fault::kBlackhole: return "Blackhole";
    case Fault::kReset: return "Reset";
    case Fault::kCloseAfter: return "CloseAfterBytes";
    case Fault::kSlowLink: return "SlowLink";
    case Fault::kRefuse: return "RefuseConnections";
    case Fault::kSigstop: return "Sigstop";
    case Fault::kClientPause: return "ClientPause";
    case Fault::kRestartEmpty: return "RestartEmpty";
    case Fault::kRestartWithData: return "RestartWithData";
  }
  return "?";
}

// Calls a failure policy answers (the others return the store's error).
bool PolicyAnswers(Call c) {
  switch (c) {
    case Call::kRefund:
    case Call::kReset:
    case Call::kHeartbeat:
    case Call::kRelease:
    case Call::kReleaseAll: return false;
    default: return true;
  }
}

struct Cell {
  Call call;
  Fault fault;
  FailurePolicy policy;
};

void PrintTo(const Cell& cell, std::ostream* os) {
  *os << CallName(cell.call) << " x " << FaultName(cell.fault) << " x "
      << FailurePolicyName(cell.policy);
}

std::string CellName(const ::testing::TestParamInfo<Cell>& info) {
  return std::string(CallName(info.param.call)) + "_" + FaultName(info.param.fault) + "_" +
         std::string(FailurePolicyName(info.param.policy));
}

std::vector<Cell> SingleRedisCells() {
  const Call calls[] = {Call::kCheck,           Call::kCheckAsync, Call::kCompositeOneScript,
                        Call::kCompositeStaged, Call::kPeek,       Call::kRefund,
                        Call::kReset,           Call::kAcquire,    Call::kHeartbeat,
                        Call::kRelease,         Call::kReleaseAll, Call::kLocalBudget,
                        Call::kPeriodicSync};
  const Fault faults[] = {Fault::kLatency,      Fault::kStall,          Fault::kBlackhole,
                          Fault::kReset,        Fault::kCloseAfter,     Fault::kSlowLink,
                          Fault::kRefuse,       Fault::kSigstop,        Fault::kClientPause,
                          Fault::kRestartEmpty, Fault::kRestartWithData};
  std::vector<Cell> cells;
  for (Call c : calls) {
    for (Fault f : faults) {
      if (!PolicyAnswers(c)) {
        cells.push_back({c, f, FailurePolicy::kClosed});
        continue;
      }
      for (FailurePolicy p : {FailurePolicy::kOpen, FailurePolicy::kClosed, FailurePolicy::kLocal})
        cells.push_back({c, f, p});
    }
  }
  return cells;
}

// ---------------------------------------------------------------------------------------
// What the calls did, for the invariants.

milliseconds Since(steady_clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
}

bool SourceFitsPolicy(DecisionSource s, FailurePolicy p) {
  switch (s) {
    case DecisionSource::kFailOpen: return p == FailurePolicy::kOpen;
    case DecisionSource::kFailClosed: return p == FailurePolicy::kClosed;
    case DecisionSource::kLocalFallback: return p == FailurePolicy::kLocal;
    default: return true;
  }
}

// How long this process could not run when it wanted to, measured: a thread wakes every
// millisecond and records each wake-up that came more than 5 ms late, when and by how
// much. On a loaded machine the client's I/O threads and the workers wait for a CPU as
// it does; a call's lateness is the library's only beyond what the process was kept
// from running meanwhile (a call that a deadline timer never ended stays late, however
// loaded the machine). The last kKept delays are kept.
class SchedulingDelays {
 public:
  SchedulingDelays() : thread_([this] { Run(); }) {}
  ~SchedulingDelays() {
    stop_ = true;
    thread_.join();
  }
  // The delays that overlap [from, to], summed.
  milliseconds Between(steady_clock::time_point from, steady_clock::time_point to) const {
    std::lock_guard<std::mutex> lock(mu_);
    steady_clock::duration sum{0};
    for (const Delay& d : delays_) {
      const auto start = std::max(from, d.end - d.length);
      const auto end = std::min(to, d.end);
      if (end > start) sum += end - start;
    }
    return std::chrono::duration_cast<milliseconds>(sum);
  }

 private:
  static constexpr std::size_t kKept = 4096;
  struct Delay {
    steady_clock::time_point end;
    steady_clock::duration length;
  };
  void Run() {
    auto last = steady_clock::now();
    while (!stop_.load()) {
      std::this_thread::sleep_for(milliseconds(1));
      const auto now = steady_clock::now();
      const auto late = now - last - milliseconds(1);
      if (late > milliseconds(5)) {
        std::lock_guard<std::mutex> lock(mu_);
        if (delays_.size() == kKept) delays_.erase(delays_.begin());
        delays_.push_back({now, late});
      }
      last = now;
    }
  }
  mutable std::mutex mu_;
  std::vector<Delay> delays_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

SchedulingDelays& Delays() {
  static SchedulingDelays* delays = new SchedulingDelays();  // runs until the process ends
  return *delays;
}

// `took` (ending now) less what the process was kept from running meanwhile.
milliseconds OwnTime(milliseconds took) {
  const auto now = steady_clock::now();
  return took - Delays().Between(now - took, now);
}

class Ledger {
 public:
  // Starts measuring the scheduling delays before the first call.
  explicit Ledger(FailurePolicy policy) : policy_(policy) { Delays(); }

  // A call of `took` whose own deadline was `bound`.
  // Late only by more than the scheduling delays measured during the call.
  void Timed(const char* what, milliseconds took, milliseconds bound) {
    const milliseconds own = took > bound + kCallSlack ? OwnTime(took) : took;
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    if (took > bound + kCallSlack && own <= bound + kCallSlack) ++excused_;
    if (own > bound + kCallSlack) {
      ++late_;
      if (took - bound > worst_over_) {
        worst_over_ = took - bound;
        worst_ = std::string(what) + " took " + std::to_string(took.count()) + " ms (" +
                 std::to_string((took - own).count()) +
                 " ms of them this process could not run), deadline " +
                 std::to_string(bound.count()) + " ms";
      }
    }
  }
  // A result the contract does not allow.
  void Unexpected(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (unexpected_.size() < 5) unexpected_.push_back(what);
    ++unexpected_count_;
  }
  // A decision on `id` under `limit`; `exact_local`: the id is checked by one limit only,
  // at cost 1, so its local fallback must admit exactly limit / servers before refusing.
  void Decided(const std::string& id, int64_t limit, const Decision& d, int64_t cost,
               bool exact_local) {
    if (!SourceFitsPolicy(d.source, policy_)) {
      Unexpected("source " + std::string(DecisionSourceName(d.source)) + " under policy " +
                 std::string(FailurePolicyName(policy_)));
    }
    if (d.source == DecisionSource::kFailClosed && d.allowed) Unexpected("an allowed fail_closed");
    std::lock_guard<std::mutex> lock(mu_);
    Counts& c = ids_[id];
    c.limit = limit;
    c.exact_local = c.exact_local && exact_local;
    if (d.reason == RefusalReason::kCostExceedsLimit) ++c.cost_exceeds;
    switch (d.source) {
      case DecisionSource::kStore:
      case DecisionSource::kLocalBudget:
      case DecisionSource::kLocalSync:
        if (d.allowed) c.store += cost;
        ++c.store_answers;
        break;
      case DecisionSource::kLocalFallback:
        if (d.allowed) {
          c.local += cost;
        } else if (d.reason == RefusalReason::kOverLimit) {
          ++c.local_refused;
        }
        break;
      default: break;
    }
    if (d.source == DecisionSource::kLocalFallback) ++local_answers_;
  }
  // Units given back to `id` (or possibly given back: a refund that timed out may still
  // run), from the store or from the local fallback.
  void Refunded(const std::string& id, int64_t units, bool local) {
    std::lock_guard<std::mutex> lock(mu_);
    (local ? ids_[id].local_refunded : ids_[id].store_refunded) += units;
  }

  // Invariant (1) and the errors.
  void ExpectTimely() const {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(late_, 0) << "invariant 1 (deadline): " << late_ << " of " << calls_
                        << " calls returned later than their deadline + " << kCallSlack.count()
                        << " ms, not counting the time this process could not run; worst: "
                        << worst_;
    std::ostringstream seen;
    for (const auto& u : unexpected_) seen << "\n  " << u;
    EXPECT_EQ(unexpected_count_, 0)
        << unexpected_count_ << " results the contract does not allow:" << seen.str();
  }
  // Invariant (4): `lives`: how many lives the store's data had (restarts without
  // persistence + 1).
  void ExpectAdmissionsWithinBounds(int lives) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, c] : ids_) {
      const int64_t local_limit = std::max<int64_t>(1, c.limit / kServers);
      EXPECT_LE(c.store - c.store_refunded, c.limit * lives)
          << "invariant 4 (admissions): id " << id << ": the store admitted " << c.store
          << " (refunded " << c.store_refunded << ") with a limit of " << c.limit << " over "
          << lives << " lives of its data";
      EXPECT_LE(c.local - c.local_refunded, local_limit)
          << "invariant 4 (admissions): id " << id << ": the local fallback admitted " << c.local
          << " (refunded " << c.local_refunded << "), more than limit / servers = " << local_limit;
      EXPECT_EQ(c.cost_exceeds, 0)
          << "invariant 4 (admissions): id " << id << ": " << c.cost_exceeds
          << " refusals as cost_exceeds_limit for a cost within the limit";
      if (c.exact_local && c.local_refused > 0) {
        EXPECT_EQ(c.local - c.local_refunded, local_limit)
            << "invariant 4 (admissions): id " << id << ": the local fallback refused "
            << c.local_refused << " requests of cost 1 over the limit after admitting only "
            << c.local << " of limit / servers = " << local_limit;
      }
    }
  }
  // Who answered one call of the workload (the store, a policy, a local budget ...);
  // every call that gets a decision or an acquisition reports it once.
  void Answered(DecisionSource source) {
    std::lock_guard<std::mutex> lock(mu_);
    ++answers_[source];
  }
  int64_t answers(DecisionSource source) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = answers_.find(source);
    return it == answers_.end() ? 0 : it->second;
  }
  int64_t local_answers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return local_answers_;
  }
  int64_t calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  int64_t excused() const {
    std::lock_guard<std::mutex> lock(mu_);
    return excused_;
  }

 private:
  struct Counts {
    int64_t limit = 0;
    bool exact_local = true;
    int64_t store = 0, store_refunded = 0, store_answers = 0;
    int64_t local = 0, local_refunded = 0, local_refused = 0;
    int64_t cost_exceeds = 0;
  };
  const FailurePolicy policy_;
  mutable std::mutex mu_;
  int64_t calls_ = 0, late_ = 0;
  int64_t excused_ = 0;  // late only by the scheduling delays measured meanwhile
  milliseconds worst_over_{-1};
  std::string worst_;
  std::vector<std::string> unexpected_;
  int64_t unexpected_count_ = 0;
  int64_t local_answers_ = 0;
  std::map<DecisionSource, int64_t> answers_;
  std::map<std::string, Counts> ids_;
};

// A Decision's errors under a policy: none (the policy answers). Counts who answered.
void ExpectDecision(Ledger& ledger, const char* what, const StatusOr<Decision>& d) {
  if (!d.ok()) return ledger.Unexpected(std::string(what) + " returned " + d.status().ToString());
  ledger.Answered(d->source);
}

// The store's errors a call without a policy may return while the store is faulty.
bool StoreError(const Status& s) {
  return s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable;
}

// ---------------------------------------------------------------------------------------
// The calls.

class Workload {
 public:
  virtual ~Workload() = default;
  // Once, with the store healthy.
  virtual void Prepare() {}
  // One call (or one unit of the call's traffic) from worker `thread` in repetition `rep`.
  virtual void Step(int thread, int rep, Ledger& ledger) = 0;
  // One call of this kind on a fresh id: true when the store answered it.
  virtual bool Probe(int n) = 0;
  // Pause between a worker's calls.
  virtual milliseconds Pace() const { return milliseconds(2); }
  // The deadline of a Probe.
  virtual milliseconds ProbeDeadline() const { return kCallDeadline; }
  // Waits for calls still in flight (asynchronous ones) after the workers stopped.
  virtual void Drain() {}
  // How long this workload's faults last (the matrix's `base`, unless it needs another).
  virtual milliseconds Length(milliseconds base) const { return base; }
  // Whether `fault` must open the breaker: the workload's calls go through it (all but
  // releases), and the store answers none of them while the fault lasts. Latency (60-100
  // ms) fails only calls of kCallDeadline: a workload whose store calls wait the client's
  // deadline (heartbeats, periodic syncs) gets its answers, and they rightly keep the
  // breaker closed.
  virtual bool BreakerOpens(Fault /*fault*/) const { return true; }
  // Whether it answers hot ids without the store (local budgets, periodic sync).
  virtual bool AnswersLocally() const { return false; }
  // After repetition `rep` recovered; `outage`: how long the fault really lasted, from
  // its injection to its end (a loaded machine stretches it).
  virtual void AfterRepetition(int /*rep*/, Fault /*fault*/, milliseconds /*outage*/) {}
  // At the end of the cell.
  virtual void AtEnd() {}
  // The clients whose breakers must be closed after recovery.
  const std::vector<std::shared_ptr<Client>>& clients() const { return clients_; }

 protected:
  std::shared_ptr<Client> Connect(const std::string& url, FailurePolicy policy) {
    return Connect(MatrixOptions(url, policy));
  }
  std::shared_ptr<Client> Connect(const ClientOptions& options) {
    auto client = Client::Create(options);
    if (!client.ok()) {
      ADD_FAILURE() << "cannot connect: " << client.status().ToString();
      return nullptr;
    }
    clients_.push_back(*client);
    return *client;
  }
  std::vector<std::shared_ptr<Client>> clients_;
};

std::string IdOf(const char* head, int thread, int rep) {
  return std::string(head) + std::to_string(thread) + "-r" + std::to_string(rep);
}

// Check, LocalBudget, PeriodicSync: Check on one hot id per worker and repetition.
class CheckWorkload : public Workload {
 public:
  CheckWorkload(const std::string& url, FailurePolicy policy, LimiterOptions options,
                const char* name)
      : synced_(options.sync.enabled), local_(synced_ || options.local_budget.enabled) {
    auto client = Connect(url, policy);
    limiter_ = std::make_unique<Limiter>(*client->MakeLimiter(name, kWindow, options));
    what_ = std::string("Check (limiter ") + name + ")";
  }
  void Step(int thread, int rep, Ledger& ledger) override {
    const std::string id = IdOf("c", thread, rep);
    const auto t0 = steady_clock::now();
    auto d = limiter_->Check(id, {.deadline = kCallDeadline});
    ledger.Timed(what_.c_str(), Since(t0), kCallDeadline);
    ExpectDecision(ledger, what_.c_str(), d);
    if (d.ok()) ledger.Decided(id, kLimit, *d, 1, /*exact_local=*/true);
  }
  bool Probe(int n) override {
    auto d = limiter_->Check("probe" + std::to_string(n), {.deadline = kCallDeadline});
    return d.ok() && d->source == DecisionSource::kStore;
  }
  // Periodic sync: only the syncs go to the store, each waiting the client's deadline,
  // one at a time per id, so the breaker opens after three failed syncs: only faults
  // that outlast them (SLUICE_FAULT_MATRIX_LONG=1) must open it.
  bool BreakerOpens(Fault fault) const override {
    return !synced_ || (fault != Fault::kLatency && FaultLength() >= 3 * kClientDeadline);
  }
  bool AnswersLocally() const override { return local_; }

 protected:
  const bool synced_, local_;
  std::unique_ptr<Limiter> limiter_;
  std::string what_;
};

class CheckAsyncWorkload : public Workload {
 public:
  CheckAsyncWorkload(const std::string& url, FailurePolicy policy) {
    auto client = Connect(url, policy);
    limiter_ = std::make_unique<Limiter>(*client->MakeLimiter("async", kWindow));
  }
  void Step(int thread, int rep, Ledger& ledger) override {
    // Up to 4 of each worker's calls in flight at once: batches on the connection.
    while (outstanding_[thread].load() >= 4) std::this_thread::sleep_for(milliseconds(1));
    ++outstanding_[thread];
    const std::string id = IdOf("a", thread, rep);
    const auto t0 = steady_clock::now();
    limiter_->CheckAsync(id, {.deadline = kCallDeadline},
                         [this, thread, id, t0, &ledger](StatusOr<Decision> d) {
                           ledger.Timed("CheckAsync", Since(t0), kCallDeadline);
                           ExpectDecision(ledger, "CheckAsync", d);
                           if (d.ok()) ledger.Decided(id, kLimit, *d, 1, true);
                           --outstanding_[thread];
                         });
  }
  bool Probe(int n) override {
    std::atomic<int> state{0};  // 1: store, 2: other
    limiter_->CheckAsync("probe" + std::to_string(n), {.deadline = kCallDeadline},
                         [&state](StatusOr<Decision> d) {
                           state = d.ok() && d->source == DecisionSource::kStore ? 1 : 2;
                         });
    Eventually([&] { return state.load() != 0; }, milliseconds(2000), milliseconds(1));
    return state.load() == 1;
  }
  void Drain() override {
    Eventually(
        [&] {
          for (auto& o : outstanding_)
            if (o.load() != 0) return false;
          return true;
        },
        milliseconds(3000), milliseconds(1));
  }

 private:
  std::unique_ptr<Limiter> limiter_;
  std::atomic<int> outstanding_[kThreads] = {};
};

class PeekWorkload : public CheckWorkload {
 public:
  PeekWorkload(const std::string& url, FailurePolicy policy)
      : CheckWorkload(url, policy, {}, "peek") {}
  void Step(int thread, int rep, Ledger& ledger) override {
    const std::string id = IdOf("p", thread, rep);
    const auto t0 = steady_clock::now();
    auto d = limiter_->Peek(id, {.deadline = kCallDeadline});
    ledger.Timed("Peek", Since(t0), kCallDeadline);
    ExpectDecision(ledger, "Peek", d);
    // A peek spends nothing: only its source is held to the policy (the client's: the
    // limiter names none).
    if (d.ok() && !SourceFitsPolicy(d->source, clients_[0]->options().on_failure))
      ledger.Unexpected("Peek source " + std::string(DecisionSourceName(d->source)));
  }
  bool Probe(int n) override {
    auto d = limiter_->Peek("probe" + std::to_string(n), {.deadline = kCallDeadline});
    return d.ok() && d->source == DecisionSource::kStore;
  }
};

// Refund: a check, then the refund of what it admitted, where it was counted.
class RefundWorkload : public CheckWorkload {
 public:
  RefundWorkload(const std::string& url, FailurePolicy policy)
      : CheckWorkload(url, policy, {}, "refund") {}
  void Step(int thread, int rep, Ledger& ledger) override {
    const std::string id = IdOf("f", thread, rep);
    auto d = limiter_->Check(id, {.deadline = kCallDeadline});
    ExpectDecision(ledger, "Check", d);
    if (!d.ok()) return;
    ledger.Decided(id, kLimit, *d, 1, /*exact_local=*/false);
    if (!d->allowed || d->source == DecisionSource::kFailOpen) return;
    const auto t0 = steady_clock::now();
    auto r = limiter_->Refund(id, 1, {.deadline = kCallDeadline, .counted_by = d->source});
    ledger.Timed("Refund", Since(t0), kCallDeadline);
    if (!r.ok() && !StoreError(r.status())) {
      ledger.Unexpected("Refund returned " + r.status().ToString());
    }
    // A refund that timed out may still run: counted as given back either way (the
    // stricter reading of the bound).
    if (r.ok() || StoreError(r.status()))
      ledger.Refunded(id, 1, d->source == DecisionSource::kLocalFallback);
  }
  bool Probe(int n) override {
    auto r = limiter_->Refund("probe" + std::to_string(n), 1, {.deadline = kCallDeadline});
    return r.ok() && r->source == DecisionSource::kStore;
  }
};

// Reset: checks, and a reset of the id every tenth call (no admissions bound: a reset
// forgets what was counted).
class ResetWorkload : public CheckWorkload {
 public:
  ResetWorkload(const std::string& url, FailurePolicy policy)
      : CheckWorkload(url, policy, {}, "reset") {}
  void Step(int thread, int rep, Ledger& ledger) override {
    const std::string id = IdOf("z", thread, rep);
    if (++count_[thread] % 10 != 0) {
      ExpectDecision(ledger, "Check", limiter_->Check(id, {.deadline = kCallDeadline}));
      return;
    }
    const auto t0 = steady_clock::now();
    auto r = limiter_->Reset(id, {.deadline = kCallDeadline});
    ledger.Timed("Reset", Since(t0), kCallDeadline);
    if (!r.ok() && !StoreError(r.status()))
      ledger.Unexpected("Reset returned " + r.status().ToString());
  }
  bool Probe(int n) override {
    auto r = limiter_->Reset("probe" + std::to_string(n), {.deadline = kCallDeadline});
    return r.ok() && r->source == DecisionSource::kStore;
  }

 private:
  int64_t count_[kThreads] = {};
};

// CheckComposite over a user's and a tenant's limit: one script (both limiters on one
// client), or staged (the tenant's limiter on a second client: two stages).
class CompositeWorkload : public Workload {
 public:
  CompositeWorkload(const std::string& url, FailurePolicy policy, bool staged) : staged_(staged) {
    auto a = Connect(url, policy);
    auto b = staged ? Connect(url, policy) : a;
    user_ = std::make_unique<Limiter>(*a->MakeLimiter("cuser", kWindow));
    tenant_ = std::make_unique<Limiter>(
        *b->MakeLimiter("ctenant", {.limit = 2 * kLimit, .window = std::chrono::seconds(60)}));
  }
  void Step(int thread, int rep, Ledger& ledger) override {
    const std::string user = IdOf("u", thread, rep);
    const std::string tenant = "t-r" + std::to_string(rep);
    const LimitCheck checks[] = {{user_.get(), user}, {tenant_.get(), tenant}};
    const auto t0 = steady_clock::now();
    auto d = CheckComposite(checks, {.deadline = kCallDeadline});
    ledger.Timed(staged_ ? "CheckComposite (staged)" : "CheckComposite", Since(t0),
                 staged_ ? 2 * kCallDeadline : kCallDeadline);
    if (!d.ok()) return ledger.Unexpected("CheckComposite returned " + d.status().ToString());
    ledger.Answered(d->decision.source);
    if (!SourceFitsPolicy(d->decision.source, clients_[0]->options().on_failure))
      ledger.Unexpected("composite source " + std::string(DecisionSourceName(d->decision.source)));
    if (!staged_) {
      // One script: the same source decided both limits.
      ledger.Decided(user, kLimit, d->decision, 1, false);
      ledger.Decided(tenant, 2 * kLimit, d->decision, 1, false);
    }
  }
  bool Probe(int n) override {
    const std::string id = "probe" + std::to_string(n);
    const LimitCheck checks[] = {{user_.get(), id}, {tenant_.get(), id}};
    auto d = CheckComposite(checks, {.deadline = kCallDeadline});
    return d.ok() && d->decision.source == DecisionSource::kStore;
  }

 private:
  const bool staged_;
  std::unique_ptr<Limiter> user_, tenant_;
};

// Longer than any fault, so a lease heartbeating through one survives it.
milliseconds LeaseTtl() {
  return std::max(milliseconds(2000), FaultLength() * 3);
}
constexpr milliseconds kHeartbeatInterval{100};

ConcurrencyOptions LeaseOptions(int64_t limit, FailurePolicy policy) {
  return {.limit = limit,
          .lease_ttl = LeaseTtl(),
          .heartbeat_interval = kHeartbeatInterval,
          .on_failure = policy};
}

// Acquire: every worker takes a lease of one shared id (limit 2), holds it briefly and
// releases it; invariant (5): never more store leases believed held at once than 2.
class AcquireWorkload : public Workload {
 public:
  AcquireWorkload(const std::string& url, FailurePolicy policy) {
    auto client = Connect(url, policy);
    limiter_ = std::make_unique<ConcurrencyLimiter>(
        *client->MakeConcurrencyLimiter("streams", LeaseOptions(2, policy)));
  }
  void Step(int /*thread*/, int rep, Ledger& ledger) override {
    const std::string id = "lease-r" + std::to_string(rep);
    const auto t0 = steady_clock::now();
    auto a = limiter_->Acquire(id, {.deadline = kCallDeadline});
    ledger.Timed("Acquire", Since(t0), kCallDeadline);
    if (!a.ok()) return ledger.Unexpected("Acquire returned " + a.status().ToString());
    ledger.Answered(a->source);
    if (!SourceFitsPolicy(a->source, clients_[0]->options().on_failure))
      ledger.Unexpected("acquire source " + std::string(DecisionSourceName(a->source)));
    if (!a->acquired) return;
    const bool counted =
        a->source == DecisionSource::kStore || a->source == DecisionSource::kLocalFallback;
    const int64_t cap = a->source == DecisionSource::kStore ? 2 : 1;  // local: 2 / 4, at least 1
    if (counted) {
      std::lock_guard<std::mutex> lock(mu_);
      auto& held = held_[id + "/" + std::string(DecisionSourceName(a->source))];
      int64_t live = 1;
      for (const Lease* l : held) live += l->held() ? 1 : 0;
      if (live > cap) {
        ++double_holders_;
        worst_ = std::max(worst_, live);
      }
      held.push_back(&a->lease);
    }
    std::this_thread::sleep_for(milliseconds(3));
    if (counted) {
      std::lock_guard<std::mutex> lock(mu_);
      auto& held = held_[id + "/" + std::string(DecisionSourceName(a->source))];
      held.erase(std::find(held.begin(), held.end(), &a->lease));
    }
  }
  bool Probe(int n) override {
    auto a = limiter_->Acquire("probe" + std::to_string(n), {.deadline = kCallDeadline});
    return a.ok() && a->source == DecisionSource::kStore;
  }
  void AtEnd() override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(double_holders_, 0) << "invariant 5 (leases): " << double_holders_
                                  << " grants found more leases of the id held than its limit "
                                     "(up to "
                                  << worst_ << ")";
  }

 private:
  std::unique_ptr<ConcurrencyLimiter> limiter_;
  std::mutex mu_;
  std::map<std::string, std::vector<const Lease*>> held_;
  int64_t double_holders_ = 0, worst_ = 0;
};

// Heartbeat: leases taken before the faults, heartbeated by hand (and by themselves),
// beside checks on the same client whose failures open its breaker. The faults last half
// the lease_ttl, and the client's breaker cool-down is longer than lease_ttl (the
// operator's choice, which must not decide whether leases survive): a heartbeat that
// waited on the breaker would be refused from the moment the breaker opened until past
// the lease's believable end, so a live holder keeps its lease across the fault only if
// heartbeats bypass the breaker. A restart without data loses every lease (kGone).
// max_in_flight holds the heartbeats a fault keeps waiting, so that the checks reach the
// store and fail by their deadline (with the window full of heartbeats, a check would be
// refused on this side, a backlog that rightly does not open the breaker).
class HeartbeatWorkload : public Workload {
 public:
  HeartbeatWorkload(const std::string& url, FailurePolicy policy) {
    ClientOptions options = MatrixOptions(url, policy);
    options.breaker_cool_down = LeaseTtl() + milliseconds(500);
    options.max_in_flight = 32;
    auto client = Connect(options);
    limiter_ = std::make_unique<ConcurrencyLimiter>(
        *client->MakeConcurrencyLimiter("beats", LeaseOptions(10, policy)));
    checks_ = std::make_unique<Limiter>(*client->MakeLimiter("beside", kWindow));
  }
  milliseconds Length(milliseconds /*base*/) const override { return LeaseTtl() / 2; }
  bool BreakerOpens(Fault fault) const override { return fault != Fault::kLatency; }
  void Prepare() override { Take(); }
  void Step(int thread, int rep, Ledger& ledger) override {
    Lease* lease = &leases_[thread];
    const auto t0 = steady_clock::now();
    Status s;
    {
      std::lock_guard<std::mutex> lock(lease_mu_[thread]);
      s = lease->Heartbeat();
    }
    ledger.Timed("Heartbeat", Since(t0), kClientDeadline);
    if (!s.ok() && !StoreError(s) && s.code() != StatusCode::kNotFound)
      ledger.Unexpected("Heartbeat returned " + s.ToString());
    // The service's checks, which the breaker protects.
    const std::string id = IdOf("b", thread, rep);
    const auto t1 = steady_clock::now();
    auto d = checks_->Check(id, {.deadline = kCallDeadline});
    ledger.Timed("Check", Since(t1), kCallDeadline);
    ExpectDecision(ledger, "Check", d);
    if (d.ok()) ledger.Decided(id, kLimit, *d, 1, /*exact_local=*/true);
  }
  milliseconds ProbeDeadline() const override { return kClientDeadline; }
  milliseconds Pace() const override { return milliseconds(10); }
  bool Probe(int /*n*/) override {
    // OK, or NotFound (the store answered that the lease is gone: after a restart
    // without data).
    std::lock_guard<std::mutex> lock(lease_mu_[0]);
    const Status s = leases_[0].Heartbeat();
    return s.ok() || s.code() == StatusCode::kNotFound;
  }
  void AfterRepetition(int rep, Fault fault, milliseconds outage) override {
    // What a live holder may go without a heartbeat: the outage, the heartbeat held in it
    // (its deadline) and the next one's interval. Past lease_ttl (a machine so loaded
    // that the fault lasted far longer than asked), losing the lease is right.
    const milliseconds unanswered = outage + kClientDeadline + kHeartbeatInterval;
    const bool judged = unanswered < LeaseTtl();
    if (!judged) {
      std::cout << "repetition " << rep << ": the fault lasted " << outage.count()
                << " ms: leases not judged (lease_ttl " << LeaseTtl().count() << " ms)\n";
    }
    for (int t = 0; t < kThreads; ++t) {
      std::lock_guard<std::mutex> lock(lease_mu_[t]);
      Lease& l = leases_[t];
      if (fault == Fault::kRestartEmpty) {
        EXPECT_TRUE(Eventually([&] { return !l.held(); }, milliseconds(2000)))
            << "repetition " << rep << ": a lease the restarted store forgot is still held";
        EXPECT_EQ(l.loss(), LeaseLoss::kGone) << "repetition " << rep;
      } else if (judged) {
        EXPECT_TRUE(l.held()) << "repetition " << rep << ": lease " << t << " was lost across a "
                              << outage.count() << " ms fault, lease_ttl " << LeaseTtl().count()
                              << " ms (loss " << LeaseLossName(l.loss()) << ")";
      }
    }
    if (fault == Fault::kRestartEmpty || !judged) Take();
  }

 private:
  // Retried until the store grants: after a restart, calls sent before it may fail after
  // the store answered again and open the breaker for another (long) cool-down.
  void Take() {
    std::vector<Lease> taken;
    for (int t = 0; t < kThreads; ++t) {
      StatusOr<Acquisition> a = UnavailableError("not tried");
      Eventually(
          [&] {
            a = limiter_->Acquire("beat" + std::to_string(t), {.deadline = milliseconds(2000)});
            return a.ok() && a->acquired && a->source == DecisionSource::kStore;
          },
          LeaseTtl() + milliseconds(1500), milliseconds(20));
      ASSERT_TRUE(a.ok() && a->acquired && a->source == DecisionSource::kStore)
          << (a.ok() ? "not acquired from the store" : a.status().ToString());
      taken.push_back(std::move(a->lease));
    }
    for (int t = 0; t < kThreads; ++t) {
      std::lock_guard<std::mutex> lock(lease_mu_[t]);
      leases_[t] = std::move(taken[static_cast<std::size_t>(t)]);
    }
  }
  std::unique_ptr<ConcurrencyLimiter> limiter_;
  std::unique_ptr<Limiter> checks_;
  std::mutex lease_mu_[kThreads];
  Lease leases_[kThreads];
};

// 180 leases heartbeating less often than the others: their heartbeats must not fill
// max_in_flight. Their lease_ttl is longer than the cell: a released lease still in the
// store at the end is there because its release never landed, not waiting to expire.
constexpr milliseconds kPoolTtl{60'000};
ConcurrencyOptions PoolOptions(FailurePolicy policy) {
  ConcurrencyOptions o = LeaseOptions(100000, policy);
  o.lease_ttl = kPoolTtl;
  o.heartbeat_interval = o.lease_ttl / 3;
  return o;
}

// Release: leases taken before the faults, released one by one by the workers; every
// release that returned an error is sent again in the background until it lands (at
// most a second apart), so at the end none of the released leases is still in the store.
class ReleaseWorkload : public Workload {
 public:
  ReleaseWorkload(const std::string& url, FailurePolicy policy) {
    auto client = Connect(url, policy);
    limiter_ = std::make_unique<ConcurrencyLimiter>(
        *client->MakeConcurrencyLimiter("held", PoolOptions(policy)));
  }
  void Prepare() override {
    for (int t = 0; t < kThreads; ++t) {
      for (int i = 0; i < 60; ++i) {
        // Retried: the pool's own heartbeats may fill max_in_flight for a moment (a
        // backlog: the policy answers).
        StatusOr<Acquisition> a = UnavailableError("not tried");
        for (int attempt = 0; attempt < 50; ++attempt) {
          a = limiter_->Acquire("rel" + std::to_string(t), {.deadline = milliseconds(2000)});
          if (a.ok() && a->acquired && a->source == DecisionSource::kStore) break;
          std::this_thread::sleep_for(milliseconds(5));
        }
        ASSERT_TRUE(a.ok() && a->acquired && a->source == DecisionSource::kStore)
            << "lease " << i << ": "
            << (a.ok() ? std::string(DecisionSourceName(a->source)) + " live " +
                             std::to_string(a->live)
                       : a.status().ToString());
        pool_[t].push_back(std::move(a->lease));
      }
    }
  }
  void Step(int thread, int /*rep*/, Ledger& ledger) override {
    if (pool_[thread].empty()) return;
    Lease lease = std::move(pool_[thread].back());
    pool_[thread].pop_back();
    const std::string id = lease.id();
    const auto t0 = steady_clock::now();
    const Status s = lease.Release();
    ledger.Timed("Release", Since(t0), kClientDeadline);
    if (!s.ok() && !StoreError(s)) ledger.Unexpected("Release returned " + s.ToString());
    std::lock_guard<std::mutex> lock(mu_);
    released_.push_back(id);
    if (!s.ok()) ++failed_;
  }
  bool BreakerOpens(Fault /*fault*/) const override { return false; }
  milliseconds ProbeDeadline() const override { return kClientDeadline; }
  milliseconds Pace() const override { return milliseconds(40); }
  bool Probe(int n) override {
    auto a = limiter_->Acquire("probe" + std::to_string(n), {.deadline = kCallDeadline});
    if (!a.ok() || !a->acquired || a->source != DecisionSource::kStore) return false;
    return a->lease.Release().ok();
  }
  void AtEnd() override {
    std::vector<std::string> left;
    const bool gone = Eventually(
        [&] {
          left.clear();
          for (int t = 0; t < kThreads; ++t) {
            auto listed = limiter_->List("rel" + std::to_string(t), milliseconds(1000));
            if (!listed.ok()) return false;
            for (const LeaseInfo& l : *listed)
              if (std::find(released_.begin(), released_.end(), l.id) != released_.end())
                left.push_back(l.id);
          }
          return left.empty();
        },
        milliseconds(3000), milliseconds(50));
    EXPECT_TRUE(gone) << left.size() << " released leases still in the store, e.g. "
                      << (left.empty() ? "" : left[0]) << " (" << failed_
                      << " releases returned an error)";
    EXPECT_GT(released_.size(), 0u);
    std::cout << released_.size() << " releases, " << failed_ << " returned an error\n";
  }

 private:
  std::unique_ptr<ConcurrencyLimiter> limiter_;
  std::vector<Lease> pool_[kThreads];
  std::mutex mu_;
  std::vector<std::string> released_;
  int64_t failed_ = 0;
};

// ReleaseAll (the operators' call): a lease taken, then every lease of the id released.
class ReleaseAllWorkload : public Workload {
 public:
  ReleaseAllWorkload(const std::string& url, FailurePolicy policy) {
    auto client = Connect(url, policy);
    limiter_ = std::make_unique<ConcurrencyLimiter>(
        *client->MakeConcurrencyLimiter("ops", LeaseOptions(1000, policy)));
    // ReleaseAll fsyncs its audit line before and after the store call, outside its
    // deadline. The cell times the whole call against the store's faults, so the log lives
    // in memory (/dev/shm, where fsync returns at once): a disk stalled by other tests'
    // writes once made two cells' calls take 818 ms against a 40 ms deadline.
    const std::filesystem::path shm("/dev/shm");
    std::error_code no_shm;
    const std::filesystem::path dir =
        std::filesystem::is_directory(shm, no_shm) ? shm : std::filesystem::temp_directory_path();
    audit_.log_path = dir / ("sluice-fault-matrix-audit-" + std::to_string(::getpid()) + ".log");
  }
  ~ReleaseAllWorkload() override {
    std::error_code ignored;
    std::filesystem::remove(audit_.log_path, ignored);
  }
  void Step(int thread, int rep, Ledger& ledger) override {
    const std::string id = IdOf("o", thread, rep);
    auto a = limiter_->Acquire(id, {.deadline = kCallDeadline});
    const auto t0 = steady_clock::now();
    auto r = ReleaseAll(*limiter_, id, {.actor = "fault-matrix", .reason = "test"}, audit_,
                        kCallDeadline);
    ledger.Timed("ReleaseAll", Since(t0), kCallDeadline);
    if (!r.ok() && !StoreError(r.status()))
      ledger.Unexpected("ReleaseAll returned " + r.status().ToString());
    if (r.ok() && a.ok() && a->acquired && a->source == DecisionSource::kStore && r->released < 1) {
      ledger.Unexpected("ReleaseAll released nothing after a store acquire of the id");
    }
  }
  milliseconds Pace() const override { return milliseconds(15); }
  bool BreakerOpens(Fault /*fault*/) const override { return false; }
  bool Probe(int n) override {
    auto r = ReleaseAll(*limiter_, "probe" + std::to_string(n),
                        {.actor = "fault-matrix", .reason = "probe"}, audit_, kCallDeadline);
    return r.ok();
  }

 private:
  std::unique_ptr<ConcurrencyLimiter> limiter_;
  AuditOptions audit_;
};

std::unique_ptr<Workload> MakeWorkload(Call call, const std::string& url, FailurePolicy policy) {
  switch (call) {
    case Call::kCheck:
      return std::make_unique<CheckWorkload>(url, policy, LimiterOptions{}, "check");
    case Call::kCheckAsync: return std::make_unique<CheckAsyncWorkload>(url, policy);
    case Call::kCompositeOneScript: return std::make_unique<CompositeWorkload>(url, policy, false);
    case Call::kCompositeStaged: return std::make_unique<CompositeWorkload>(url, policy, true);
    case Call::kPeek: return std::make_unique<PeekWorkload>(url, policy);
    case Call::kRefund: return std::make_unique<RefundWorkload>(url, policy);
    case Call::kReset: return std::make_unique<ResetWorkload>(url, policy);
    case Call::kAcquire: return std::make_unique<AcquireWorkload>(url, policy);
    case Call::kHeartbeat: return std::make_unique<HeartbeatWorkload>(url, policy);
    case Call::kRelease: return std::make_unique<ReleaseWorkload>(url, policy);
    case Call::kReleaseAll: return std::make_unique<ReleaseAllWorkload>(url, policy);
    case Call::kLocalBudget: {
      LimiterOptions o;
      o.local_budget = {.enabled = true, .hot_checks_per_second = 50};
      return std::make_unique<CheckWorkload>(url, policy, o, "budget");
    }
    case Call::kPeriodicSync: {
      LimiterOptions o;
      o.sync = {.enabled = true, .hot_checks_per_second = 50};
      return std::make_unique<CheckWorkload>(url, policy, o, "synced");
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// Resources, for invariant (6).

int OpenFds() {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

int64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

int RedisClients(const RedisServer& server) {
  const std::string list = server.Command({"CLIENT", "LIST"}).str;
  return static_cast<int>(std::count(list.begin(), list.end(), '\n'));
}

struct Resources {
  int threads = 0, fds = 0, redis_clients = 0;
  int64_t rss = 0;
  std::string ToString() const {
    return std::to_string(threads) + " threads, " + std::to_string(fds) + " descriptors, " +
           std::to_string(redis_clients) + " Redis connections, " +
           std::to_string(rss / (1024 * 1024)) + " MiB resident";
  }
};

Resources Measure(const RedisServer& server) {
  return {testing::ThreadCount(), OpenFds(), RedisClients(server), RssBytes()};
}

// Within what a later repetition may differ from the first: a connection being replaced
// (its old descriptor not closed yet), allocator noise.
bool NoGrowth(const Resources& first, const Resources& now) {
  return now.threads <= first.threads && now.fds <= first.fds + 2 &&
         now.redis_clients <= first.redis_clients + 1 && now.rss <= first.rss + (16 << 20);
}

// ---------------------------------------------------------------------------------------
// The faults.

// Injects `fault`, keeps it `length`, ends it; returns when it ended.
// `quiet`: runs `f` with no call of the workload in flight (and none made meanwhile).
steady_clock::time_point InjectAndEnd(
    Fault fault, milliseconds length, RedisServer& server, FaultProxy& proxy,
    const std::function<void(const std::function<void()>&)>& quiet) {
  const auto t0 = steady_clock::now();
  auto hold = [&] { std::this_thread::sleep_until(t0 + length); };
  switch (fault) {
    case Fault::kLatency:
      proxy.AddLatency(Direction::kToClient, milliseconds(60), milliseconds(40));
      hold();
      proxy.Heal();
      break;
    case Fault::kStall:
      proxy.Stall(Direction::kBoth, milliseconds(0));
      hold();
      proxy.Heal();
      break;
    case Fault::kBlackhole:
      proxy.Blackhole();
      hold();
      proxy.Heal();
      break;
    case Fault::kReset:
      while (steady_clock::now() < t0 + length) {
        proxy.Reset();
        std::this_thread::sleep_for(milliseconds(50));
      }
      proxy.Heal();
      break;
    case Fault::kCloseAfter:
      proxy.CloseAfter(Direction::kToClient, 30);
      hold();
      proxy.Heal();
      break;
    case Fault::kSlowLink:
      proxy.LimitBandwidth(Direction::kBoth, 300);
      hold();
      proxy.Heal();
      break;
    case Fault::kRefuse:
      proxy.RefuseNewConnections(true);
      proxy.Reset();
      hold();
      proxy.Heal();
      break;
    case Fault::kSigstop:
      server.Pause();
      hold();
      server.Resume();
      break;
    case Fault::kClientPause:
      server.Command({"CLIENT", "PAUSE", std::to_string(length.count()), "ALL"});
      hold();
      break;
    case Fault::kRestartWithData:
      // What was counted after the snapshot is lost with the process, as with any RDB
      // persistence: the snapshot is taken, and the server killed, with nothing in flight.
      quiet([&] {
        server.Command({"SAVE"});
        server.Kill();
      });
      hold();
      server.Start();
      break;
    case Fault::kRestartEmpty:
      server.Kill();
      hold();
      server.Start();
      break;
  }
  return steady_clock::now();
}

bool Restarts(Fault f) {
  return f == Fault::kRestartEmpty || f == Fault::kRestartWithData;
}

// The source of the answers a policy gives.
DecisionSource PolicySource(FailurePolicy policy) {
  switch (policy) {
    case FailurePolicy::kClosed: return DecisionSource::kFailClosed;
    case FailurePolicy::kLocal: return DecisionSource::kLocalFallback;
    default: return DecisionSource::kFailOpen;
  }
}

// The breakers of a workload's clients, summed.
struct BreakerCounts {
  int64_t opens = 0, short_circuited = 0;
};

BreakerCounts CountBreakers(const Workload& work) {
  BreakerCounts n;
  for (const auto& c : work.clients()) {
    const StoreHealth h = c->Health();
    n.opens += h.breaker_opens;
    n.short_circuited += h.short_circuited;
  }
  return n;
}

// ---------------------------------------------------------------------------------------
// The matrix.

class FaultMatrix : public ::testing::TestWithParam<Cell> {};

TEST_P(FaultMatrix, Cell) {
  const Cell cell = GetParam();
  const milliseconds length = FaultLength();
  const int reps = Repetitions();
  RedisServer server;
  FaultProxy proxy(server.port());
  std::unique_ptr<Workload> work = MakeWorkload(cell.call, proxy.url(), cell.policy);
  ASSERT_NE(work, nullptr);
  for (const auto& c : work->clients()) ASSERT_NE(c, nullptr);
  work->Prepare();
  if (::testing::Test::HasFatalFailure()) return;

  // A count spent before the faults, on a client of its own that goes to Redis
  // directly: a restart with data keeps it, one without forgets it.
  auto witness_client =
      Client::Create({.url = server.url(), .prefix = kPrefix, .deadline = milliseconds(2000)});
  ASSERT_TRUE(witness_client.ok()) << witness_client.status().ToString();
  auto witness = *(*witness_client)->MakeLimiter("witness", kWindow);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(witness.Check("w")->allowed);

  Ledger ledger(cell.policy);
  std::atomic<int> rep{0};
  std::atomic<bool> stop{false}, gate_closed{false};
  std::atomic<int> busy{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      while (!stop.load()) {
        ++busy;
        if (!gate_closed.load()) work->Step(t, rep.load(), ledger);
        --busy;
        std::this_thread::sleep_for(work->Pace());
      }
    });
  }
  auto quiet = [&](const std::function<void()>& f) {
    gate_closed = true;
    Eventually([&] { return busy.load() == 0; }, milliseconds(3000), milliseconds(1));
    work->Drain();
    // Periodic sync pushes what it counted every 100 ms: let the last push land.
    std::this_thread::sleep_for(milliseconds(200));
    f();
    gate_closed = false;
  };

  int lives = 1;
  int probes = 0;
  Resources first;
  struct {
    int64_t by_policy = 0;        // the workload's calls the policy answered, in all repetitions
    int opened_and_answered = 0;  // repetitions in which the breaker opened and short-circuited
  } mechanism;
  for (int r = 0; r < reps; ++r) {
    rep = r;
    std::this_thread::sleep_for(milliseconds(150));  // traffic on a healthy store first
    const BreakerCounts before = CountBreakers(*work);
    const int64_t policy_before = ledger.answers(PolicySource(cell.policy));
    const auto injected = steady_clock::now();
    const auto ended = InjectAndEnd(cell.fault, work->Length(length), server, proxy, quiet);
    const milliseconds outage = std::chrono::duration_cast<milliseconds>(ended - injected);
    if (cell.fault == Fault::kRestartEmpty) ++lives;

    const int64_t opens = CountBreakers(*work).opens - before.opens;

    // Invariant (2): the store answers again, every breaker closed.
    const milliseconds bound = kCoolDown + kClientDeadline + kRecoverySlack +
                               (Restarts(cell.fault) ? kMaxBackoff : milliseconds(0));
    bool recovered = false;
    std::string breakers;
    while (Since(ended) < bound + milliseconds(3000)) {
      if (work->Probe(probes++)) {
        breakers.clear();
        bool closed = true;
        for (const auto& c : work->clients()) {
          const StoreHealth h = c->Health();
          breakers += h.breaker + " ";
          closed = closed && h.breaker == "closed";
        }
        if (closed) {
          recovered = true;
          break;
        }
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    const milliseconds took = Since(ended);
    const milliseconds own = OwnTime(took);  // less the scheduling delays measured meanwhile
    if (!recovered) {
      breakers.clear();
      for (const auto& c : work->clients()) breakers += c->Health().breaker + " ";
    }
    // The mechanism, judged after the last repetition: during the fault (longer than the
    // breaker's threshold of failures) the breaker opened; until it closed again it
    // short-circuited calls (the recovery's probes included); the policy answered.
    const int64_t short_circuited = CountBreakers(*work).short_circuited - before.short_circuited;
    const int64_t by_policy = ledger.answers(PolicySource(cell.policy)) - policy_before;
    std::cout << CellName({cell, 0}) << " repetition " << r << ": a fault of " << outage.count()
              << " ms: the breaker opened " << opens << " time(s) in it, short-circuited "
              << short_circuited << " call(s) until it closed " << took.count() << " ms after it; "
              << by_policy << " answer(s) by " << DecisionSourceName(PolicySource(cell.policy))
              << "\n";
    mechanism.by_policy += by_policy;
    if (by_policy > 0 && opens > 0 && short_circuited > 0) ++mechanism.opened_and_answered;
    EXPECT_TRUE(recovered && own <= bound)
        << "invariant 2 (recovery): repetition " << r << ": "
        << (recovered ? "the store answered again " + std::to_string(took.count()) + " ms"
                      : "the store did not answer with every breaker closed within " +
                            std::to_string(took.count()) + " ms")
        << " after the fault ended (" << (took - own).count()
        << " ms of them this process could not run); bound " << bound.count()
        << " ms (breakers: " << breakers << ")";
    if (cell.fault == Fault::kRestartWithData || cell.fault == Fault::kRestartEmpty) {
      StatusOr<Decision> peek = UnavailableError("not peeked");
      Eventually(
          [&] {
            peek = witness.Peek("w", {.deadline = milliseconds(1000)});
            return peek.ok() && peek->source == DecisionSource::kStore;
          },
          milliseconds(3000), milliseconds(20));
      ASSERT_TRUE(peek.ok() && peek->source == DecisionSource::kStore)
          << (peek.ok() ? peek->ToString() : peek.status().ToString());
      EXPECT_EQ(peek->remaining, cell.fault == Fault::kRestartWithData ? kLimit - 3 : kLimit)
          << "repetition " << r << ": the restart did not "
          << (cell.fault == Fault::kRestartWithData ? "keep" : "forget") << " the data";
      if (cell.fault == Fault::kRestartEmpty)
        for (int i = 0; i < 3; ++i) (void)witness.Check("w");
    }
    work->AfterRepetition(r, cell.fault, outage);

    // Invariant (6): what the first repetition left is the most any later one leaves.
    std::this_thread::sleep_for(milliseconds(100));
    if (r == 0) {
      first = Measure(server);
    } else if (r == reps - 1) {
      Resources now;
      const bool flat = Eventually(
          [&] {
            now = Measure(server);
            return NoGrowth(first, now);
          },
          milliseconds(1500), milliseconds(50));
      EXPECT_TRUE(flat) << "invariant 6 (resources): after repetition 1: " << first.ToString()
                        << "; after repetition " << reps << ": " << now.ToString();
    }
  }
  stop = true;
  for (auto& w : workers) w.join();
  work->Drain();
  work->AtEnd();

  // The mechanism, over the repetitions (what a loaded machine lets happen in one of them
  // varies: a call held in this process past half its deadline is not the store's
  // failure and rightly does not count for the breaker, and a full max_in_flight window
  // is a backlog). Whenever the store failed the workload's calls, the breaker opened
  // and short-circuited calls, in a repetition in which the policy answered too. A
  // workload that answers hot ids locally (budgets, synced counts) may ride a fault out
  // without a store call failing; any other feels every fault that must open the breaker.
  if (work->BreakerOpens(cell.fault)) {
    if (!work->AnswersLocally()) {
      EXPECT_GE(mechanism.by_policy, 1)
          << "mechanism: no call was answered by " << DecisionSourceName(PolicySource(cell.policy))
          << " in " << reps << " faults";
    }
    // A workload that answers locally sends the store few calls: a fault may fail fewer of
    // them than open the breaker (3 in a row), each answered by the policy. It must have
    // opened when the policy answered at least 3 calls per repetition on average (so 3 in
    // one of them at least).
    constexpr int64_t kFailuresToOpen = 3;  // ClientOptions::breaker_failures above
    if (mechanism.by_policy > 0 &&
        (!work->AnswersLocally() || mechanism.by_policy >= kFailuresToOpen * reps)) {
      EXPECT_GE(mechanism.opened_and_answered, 1)
          << "mechanism: the policy answered " << mechanism.by_policy << " calls in " << reps
          << " faults, but in none of them did the breaker open and short-circuit calls";
    }
  }

  ledger.ExpectTimely();
  // Invariant (3).
  EXPECT_EQ(server.KeysWithoutTtl(std::string(kPrefix) + ":*"), std::vector<std::string>{})
      << "invariant 3 (expiry)";
  // Invariant (4).
  ledger.ExpectAdmissionsWithinBounds(lives);
  std::cout << CellName({cell, 0}) << ": " << ledger.calls() << " timed calls (" << ledger.excused()
            << " late only by the time this process could not run), " << ledger.local_answers()
            << " answered by the local fallback\n";
}

INSTANTIATE_TEST_SUITE_P(SingleRedis, FaultMatrix, ::testing::ValuesIn(SingleRedisCells()),
                         CellName);

// ---------------------------------------------------------------------------------------
// Sentinel: a failover (ordered, so the old primary is demoted under the client's
// batches; after the primary was killed; or the primary demoted silently) while the calls
// run; the client follows it to the new primary without a restart. Invariants (1), (2)
// (from the moment the sentinels name the new primary, plus the time to locate it, until
// the store answers from the new primary), (3) on the new primary, (4) (an asynchronous
// replica may lack the last writes of the old primary: two lives). What the cells cannot
// tell: a client that left a demoted primary only on a READONLY answer to a call alone,
// not to a call inside a batch, still recovers here within the bound, on the breaker's
// probe (a call alone) one cool-down later; the connection's own test
// (sentinel_redis_test.cc, batches corked) holds that.

// kOrdered: SENTINEL FAILOVER (the sentinels demote the primary and close its clients);
// kPrimaryKilled: SIGKILL; kDemotedSilently: the primary moved by hand
// (RedisSentinelSet::MovePrimarySilently: REPLICAOF, no +switch-master, its clients kept),
// so that only its READONLY answers, to batched calls too, tell the client.
enum class Failover { kOrdered, kPrimaryKilled, kDemotedSilently };

const char* FailoverName(Failover f) {
  switch (f) {
    case Failover::kOrdered: return "SentinelFailover";
    case Failover::kPrimaryKilled: return "PrimaryKilled";
    case Failover::kDemotedSilently: return "PrimaryDemoted";
  }
  return "?";
}

struct SentinelCell {
  Call call;
  Failover failover;
  FailurePolicy policy;
};

void PrintTo(const SentinelCell& cell, std::ostream* os) {
  *os << CallName(cell.call) << " x " << FailoverName(cell.failover) << " x "
      << FailurePolicyName(cell.policy);
}

std::string SentinelCellName(const ::testing::TestParamInfo<SentinelCell>& info) {
  return std::string(CallName(info.param.call)) + "_" + FailoverName(info.param.failover) + "_" +
         std::string(FailurePolicyName(info.param.policy));
}

// Locating the new primary: asking the sentinels, connecting, loading the scripts.
constexpr milliseconds kLocateSlack{1500};

class SentinelFaultMatrix : public ::testing::TestWithParam<SentinelCell> {};

TEST_P(SentinelFaultMatrix, Cell) {
  const SentinelCell cell = GetParam();
  testing::RedisSentinelSet set;
  std::unique_ptr<Workload> work = MakeWorkload(cell.call, set.url(), cell.policy);
  ASSERT_NE(work, nullptr);
  for (const auto& c : work->clients()) ASSERT_NE(c, nullptr);
  work->Prepare();
  if (::testing::Test::HasFatalFailure()) return;
  Ledger ledger(cell.policy);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      while (!stop.load()) {
        work->Step(t, 0, ledger);
        std::this_thread::sleep_for(work->Pace());
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(300));
  const uint16_t old_port = set.PrimaryPort();
  ASSERT_NE(old_port, 0);
  int64_t opens_before = 0;
  for (const auto& c : work->clients()) opens_before += c->Health().breaker_opens;
  if (cell.failover == Failover::kOrdered) {
    auto ok = set.sentinel(0).Command({"SENTINEL", "FAILOVER", set.master_name()});
    EXPECT_EQ(ok.type, testing::RedisValue::Type::kStatus) << ok.str;
  } else if (cell.failover == Failover::kDemotedSilently) {
    EXPECT_EQ(set.MovePrimarySilently(), "");
  } else {
    set.DataNodeOnPort(old_port).Kill();
  }
  const uint16_t new_port = set.WaitForNewPrimary(old_port, 60000);
  const auto ended = steady_clock::now();
  const milliseconds bound = kCoolDown + work->ProbeDeadline() + kRecoverySlack + kLocateSlack;
  // Whether every client's calls go to the new primary. The sentinel that leads a
  // failover names the promoted replica before it announces the switch (+switch-master,
  // which moves the clients); until then, and until it is demoted, the old primary
  // still answers, so its answers are no recovery: the switch that follows them breaks
  // the connection, and calls fail while the client reconnects.
  std::string servers;
  const auto on_new_primary = [&] {
    servers.clear();
    bool all = true;
    for (const auto& c : work->clients()) {
      auto info = c->ServerInfo("server", kClientDeadline);
      const bool there = info.ok() && info->find("tcp_port:" + std::to_string(new_port) + "\r") !=
                                          std::string::npos;
      servers += there ? "new " : "old or none ";
      all = all && there;
    }
    return all;
  };
  bool recovered = false;
  int probes = 0;
  std::string breakers;
  while (new_port != 0 && Since(ended) < bound + milliseconds(5000)) {
    if (work->Probe(probes++)) {
      breakers.clear();
      bool closed = true;
      for (const auto& c : work->clients()) {
        breakers += c->Health().breaker + " ";
        closed = closed && c->Health().breaker == "closed";
      }
      if (closed && on_new_primary()) {
        recovered = true;
        break;
      }
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  const milliseconds took = Since(ended);
  int64_t opens = -opens_before;
  for (const auto& c : work->clients()) opens += c->Health().breaker_opens;
  std::cout << SentinelCellName({cell, 0}) << ": the store answered again " << took.count()
            << " ms after the sentinels named the new primary; the breakers opened " << opens
            << " times\n";
  // Decisions keep coming from the store after the first one (not one lucky call).
  int later_from_store = 0;
  for (int i = 0; recovered && i < 20; ++i) later_from_store += work->Probe(probes++) ? 1 : 0;
  stop = true;
  for (auto& w : workers) w.join();
  work->Drain();
  ASSERT_NE(new_port, 0) << "the sentinels promoted no replica";
  EXPECT_TRUE(recovered && took <= bound)
      << "invariant 2 (recovery): "
      << (recovered ? "the store answered again " + std::to_string(took.count()) + " ms"
                    : "the new primary did not answer with every breaker closed within " +
                          std::to_string(took.count()) + " ms")
      << " after the sentinels named it; bound " << bound.count() << " ms (breakers: " << breakers
      << "; primary answering: " << servers << ")";
  EXPECT_EQ(later_from_store, recovered ? 20 : 0)
      << "invariant 2 (recovery): of 20 calls after the first store answer, only "
      << later_from_store << " were answered by the store";
  work->AtEnd();
  ledger.ExpectTimely();
  EXPECT_EQ(set.DataNodeOnPort(new_port).KeysWithoutTtl(std::string(kPrefix) + ":*"),
            std::vector<std::string>{})
      << "invariant 3 (expiry)";
  ledger.ExpectAdmissionsWithinBounds(2);
}

std::vector<SentinelCell> SentinelCells() {
  std::vector<SentinelCell> cells;
  for (Call c : {Call::kCheck, Call::kCheckAsync, Call::kAcquire, Call::kPeriodicSync})
    for (Failover f : {Failover::kOrdered, Failover::kPrimaryKilled})
      cells.push_back({c, f, FailurePolicy::kClosed});
  // Batched calls (CheckAsync) on a primary demoted under them.
  cells.push_back({Call::kCheckAsync, Failover::kDemotedSilently, FailurePolicy::kClosed});
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Sentinel, SentinelFaultMatrix, ::testing::ValuesIn(SentinelCells()),
                         SentinelCellName);

// ---------------------------------------------------------------------------------------
// Cluster: one primary of three stalled (SIGSTOP) or down (killed, then started again
// from its own cluster config) while checks of ids on every primary run. Invariant (7):
// the ids whose slots the healthy primaries serve keep getting store decisions all
// along; and (1), (2) for the ids of the faulty primary, (3) on every primary.

enum class NodeFault { kStalled, kDown };

struct ClusterCell {
  bool async;
  NodeFault fault;
  FailurePolicy policy;
};

void PrintTo(const ClusterCell& cell, std::ostream* os) {
  *os << (cell.async ? "CheckAsync" : "Check") << " x "
      << (cell.fault == NodeFault::kStalled ? "PrimaryStalled" : "PrimaryDown") << " x "
      << FailurePolicyName(cell.policy);
}

std::string ClusterCellName(const ::testing::TestParamInfo<ClusterCell>& info) {
  return std::string(info.param.async ? "CheckAsync" : "Check") + "_" +
         (info.param.fault == NodeFault::kStalled ? "PrimaryStalled" : "PrimaryDown") + "_" +
         std::string(FailurePolicyName(info.param.policy));
}

class ClusterFaultMatrix : public ::testing::TestWithParam<ClusterCell> {};

TEST_P(ClusterFaultMatrix, Cell) {
  const ClusterCell cell = GetParam();
  // cluster-node-timeout well above any fault of the matrix (long mode included): a
  // primary unreachable for that long makes Redis refuse every slot (CLUSTERDOWN, with
  // cluster-require-full-coverage), which is no longer one node's fault.
  testing::RedisCluster cluster({.primaries = 3, .node_timeout_ms = 5000});
  auto created = Client::Create(MatrixOptions(cluster.url(), cell.policy));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::shared_ptr<Client> client = *created;
  const Limit limit{.limit = 1'000'000, .window = std::chrono::seconds(60)};
  auto limiter = *client->MakeLimiter("spread", limit);
  // Ids over every primary; the victim is the primary of the first id.
  std::vector<std::string> ids;
  std::vector<uint16_t> port_of;
  for (int i = 0; i < 30; ++i) {
    ids.push_back("id" + std::to_string(i));
    port_of.push_back(cluster.PrimaryPortOf(cluster.KeySlot(*limiter.KeyFor(ids.back()))));
  }
  const uint16_t victim = port_of[0];
  ASSERT_GT(std::count_if(port_of.begin(), port_of.end(), [&](uint16_t p) { return p != victim; }),
            5);

  Ledger ledger(cell.policy);
  std::atomic<bool> stop{false}, fault_on{false};
  std::atomic<int64_t> healthy_calls{0}, healthy_not_store{0};
  std::mutex example_mu;
  std::string example;
  auto account = [&](std::size_t i, const StatusOr<Decision>& d, bool during) {
    ExpectDecision(ledger, "Check", d);
    if (!during || port_of[i] == victim) return;
    ++healthy_calls;
    if (!d.ok() || d->source != DecisionSource::kStore) {
      ++healthy_not_store;
      std::lock_guard<std::mutex> lock(example_mu);
      if (example.empty())
        example = ids[i] + ": " + (d.ok() ? d->ToString() : d.status().ToString());
    }
  };
  std::atomic<int> outstanding{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (std::size_t n = static_cast<std::size_t>(t); !stop.load(); ++n) {
        const std::size_t i = n % ids.size();
        const bool during = fault_on.load();
        const auto t0 = steady_clock::now();
        if (cell.async) {
          while (outstanding.load() >= 8) std::this_thread::sleep_for(milliseconds(1));
          ++outstanding;
          limiter.CheckAsync(ids[i], {.deadline = kCallDeadline},
                             [&, i, during, t0](StatusOr<Decision> d) {
                               ledger.Timed("CheckAsync", Since(t0), kCallDeadline);
                               account(i, d, during && fault_on.load());
                               --outstanding;
                             });
        } else {
          auto d = limiter.Check(ids[i], {.deadline = kCallDeadline});
          ledger.Timed("Check", Since(t0), kCallDeadline);
          account(i, d, during && fault_on.load());
        }
        std::this_thread::sleep_for(milliseconds(2));
      }
    });
  }
  int64_t opens = 0, by_policy = 0;  // over the repetitions
  for (int r = 0; r < Repetitions(); ++r) {
    std::this_thread::sleep_for(milliseconds(200));
    const int64_t opens_before = client->Health().breaker_opens;
    const int64_t policy_before = ledger.answers(PolicySource(cell.policy));
    fault_on = true;
    if (cell.fault == NodeFault::kStalled) {
      cluster.NodeOnPort(victim).Pause();
    } else {
      cluster.NodeOnPort(victim).Kill();
    }
    std::this_thread::sleep_for(FaultLength());
    fault_on = false;
    if (cell.fault == NodeFault::kStalled) {
      cluster.NodeOnPort(victim).Resume();
    } else {
      cluster.NodeOnPort(victim).Start();
      // Back in the cluster (its own part: the other nodes see it again).
      EXPECT_TRUE(cluster.WaitUntilStable(20000)) << "the cluster did not heal";
    }
    const auto ended = steady_clock::now();
    const milliseconds bound = kCoolDown + kCallDeadline + kRecoverySlack +
                               (cell.fault == NodeFault::kDown ? kMaxBackoff : milliseconds(0));
    bool recovered = false;
    while (Since(ended) < bound + milliseconds(3000)) {
      auto d = limiter.Check(ids[0], {.deadline = kCallDeadline});
      if (d.ok() && d->source == DecisionSource::kStore && client->Health().breaker == "closed") {
        recovered = true;
        break;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    const milliseconds took = Since(ended);
    const milliseconds own = OwnTime(took);  // less the scheduling delays measured meanwhile
    opens += client->Health().breaker_opens - opens_before;
    by_policy += ledger.answers(PolicySource(cell.policy)) - policy_before;
    EXPECT_TRUE(recovered && own <= bound)
        << "invariant 2 (recovery): repetition " << r << ": the faulty primary's ids "
        << (recovered
                ? "were answered by the store again " + std::to_string(took.count()) + " ms"
                : "were not answered by the store within " + std::to_string(took.count()) + " ms")
        << " after the fault ended (" << (took - own).count()
        << " ms of them this process could not run); bound " << bound.count() << " ms (breaker "
        << client->Health().breaker << ")";
  }
  stop = true;
  for (auto& w : workers) w.join();
  Eventually([&] { return outstanding.load() == 0; }, milliseconds(3000), milliseconds(1));
  // The mechanism: the faulty primary's breaker opened, and the policy answered its ids.
  EXPECT_GE(opens, 1) << "mechanism: no breaker opened while a primary was "
                      << (cell.fault == NodeFault::kStalled ? "stalled" : "down");
  EXPECT_GE(by_policy, 1) << "mechanism: no call was answered by "
                          << DecisionSourceName(PolicySource(cell.policy));
  EXPECT_GT(healthy_calls.load(), 0);
  EXPECT_EQ(healthy_not_store.load(), 0)
      << "invariant 7 (one node's fault stays on its slots): " << healthy_not_store.load() << " of "
      << healthy_calls.load()
      << " calls on ids served by the healthy primaries were not decided by the store while "
         "one primary was "
      << (cell.fault == NodeFault::kStalled ? "stalled" : "down") << "; e.g. " << example;
  ledger.ExpectTimely();
  EXPECT_EQ(cluster.KeysWithoutTtl(std::string(kPrefix) + ":*"), std::vector<std::string>{})
      << "invariant 3 (expiry)";
}

std::vector<ClusterCell> ClusterCells() {
  std::vector<ClusterCell> cells;
  for (bool async : {false, true})
    for (NodeFault f : {NodeFault::kStalled, NodeFault::kDown})
      for (FailurePolicy p : {FailurePolicy::kOpen, FailurePolicy::kClosed, FailurePolicy::kLocal})
        cells.push_back({async, f, p});
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Cluster, ClusterFaultMatrix, ::testing::ValuesIn(ClusterCells()),
                         ClusterCellName);

// ---------------------------------------------------------------------------------------
// Cluster failover: one primary of three, each with a replica, killed; its replica is
// promoted (cluster-node-timeout 1 s; cluster-require-full-coverage no, so that the other
// primaries keep serving while it is marked failed). Invariant (7) through the whole
// failover: the healthy primaries' ids get the store's decisions all along; (1) for every
// call; (2) the victim's ids back on the store, every breaker closed, within
// kFailoverRecovery of the promotion (the router reads the slot map every 50 ms while a
// primary is unreachable); (3) on every primary.

// The promotion is known to the router within 50 ms; the rest: one call's deadline and
// a loaded machine.
constexpr milliseconds kFailoverRecovery{50 + 2 * 40 + 300};

class ClusterFailoverMatrix : public ::testing::TestWithParam<FailurePolicy> {};

// long: the run, its fault and its invariants in order, as every cell of the matrix
TEST_P(ClusterFailoverMatrix, Cell) {
  const FailurePolicy policy = GetParam();
  testing::RedisCluster cluster({.primaries = 3,
                                 .replicas = 1,
                                 .node_timeout_ms = 1000,
                                 .require_full_coverage = false,
                                 .files_in_memory = true});
  auto created = Client::Create(MatrixOptions(cluster.url(), policy));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::shared_ptr<Client> client = *created;
  auto limiter =
      *client->MakeLimiter("failover", {.limit = 1'000'000, .window = std::chrono::seconds(60)});
  // The victim is the second primary (the first keeps answering the fixture).
  const uint16_t victim = cluster.node(1).port();
  std::vector<std::string> ids;
  std::vector<bool> on_victim;
  for (int i = 0; i < 30; ++i) {
    ids.push_back("id" + std::to_string(i));
    on_victim.push_back(cluster.PrimaryPortOf(cluster.KeySlot(*limiter.KeyFor(ids.back()))) ==
                        victim);
  }
  const auto victims = std::count(on_victim.begin(), on_victim.end(), true);
  ASSERT_GT(victims, 0);
  ASSERT_LT(victims, 25);
  uint16_t replica_port = 0;
  for (const auto& node : cluster.nodes()) {
    const testing::RedisValue role = node->Command({"ROLE"});
    if (role.elements[0].str == "slave" && role.elements[2].integer == victim) {
      replica_port = node->port();
    }
  }
  ASSERT_NE(replica_port, 0) << "no replica of the victim";
  testing::RedisServer& replica = cluster.NodeOnPort(replica_port);

  Ledger ledger(policy);
  std::atomic<bool> stop{false}, fault_on{false};
  std::atomic<int64_t> healthy_calls{0}, healthy_not_store{0};
  std::mutex example_mu;
  std::string example;
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (std::size_t n = static_cast<std::size_t>(t); !stop.load(); ++n) {
        const std::size_t i = n % ids.size();
        const bool during = fault_on.load();
        const auto t0 = steady_clock::now();
        auto d = limiter.Check(ids[i], {.deadline = kCallDeadline});
        ledger.Timed("Check", Since(t0), kCallDeadline);
        ExpectDecision(ledger, "Check", d);
        if (during && fault_on.load() && !on_victim[i]) {
          ++healthy_calls;
          if (!d.ok() || d->source != DecisionSource::kStore) {
            ++healthy_not_store;
            std::lock_guard<std::mutex> lock(example_mu);
            if (example.empty())
              example = ids[i] + ": " + (d.ok() ? d->ToString() : d.status().ToString());
          }
        }
        std::this_thread::sleep_for(milliseconds(2));
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(500));
  fault_on = true;
  cluster.NodeOnPort(victim).Kill();
  const auto killed = steady_clock::now();
  bool promoted = false;
  while (Since(killed) < milliseconds(15000)) {
    if (replica.Command({"ROLE"}).elements[0].str == "master") {
      promoted = true;
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  const auto promoted_at = steady_clock::now();
  bool recovered = false;
  while (promoted && Since(promoted_at) < kFailoverRecovery + milliseconds(3000)) {
    bool all = true;
    for (std::size_t i = 0; i < ids.size() && all; ++i) {
      if (!on_victim[i]) continue;
      auto d = limiter.Check(ids[i], {.deadline = kCallDeadline});
      all = d.ok() && d->source == DecisionSource::kStore;
    }
    if (all && client->Health().breaker == "closed") {
      recovered = true;
      break;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  const milliseconds took = Since(promoted_at);
  std::this_thread::sleep_for(milliseconds(300));  // the healthy ids, after the recovery too
  fault_on = false;
  stop = true;
  for (auto& w : workers) w.join();
  ASSERT_TRUE(promoted) << "the replica was not promoted within 15 s";
  EXPECT_TRUE(recovered && took <= kFailoverRecovery)
      << "invariant 2 (recovery): the promoted replica's ids "
      << (recovered ? "were answered by the store " : "were not answered by the store within ")
      << took.count() << " ms after the promotion; bound " << kFailoverRecovery.count()
      << " ms (breaker " << client->Health().breaker << ")";
  EXPECT_GT(healthy_calls.load(), 0);
  EXPECT_EQ(healthy_not_store.load(), 0)
      << "invariant 7 (one node's fault stays on its slots): " << healthy_not_store.load() << " of "
      << healthy_calls.load()
      << " calls on ids served by the healthy primaries were not decided by the store while "
         "one primary failed over; e.g. "
      << example;
  ledger.ExpectTimely();
  EXPECT_EQ(cluster.KeysWithoutTtl(std::string(kPrefix) + ":*"), std::vector<std::string>{})
      << "invariant 3 (expiry)";
}

INSTANTIATE_TEST_SUITE_P(Cluster, ClusterFailoverMatrix,
                         ::testing::Values(FailurePolicy::kOpen, FailurePolicy::kClosed,
                                           FailurePolicy::kLocal),
                         [](const ::testing::TestParamInfo<FailurePolicy>& param) {
                           return "Check_PrimaryFailedOver_" +
                                  std::string(FailurePolicyName(param.param));
                         });

}  // namespace
}  // namespace sluice

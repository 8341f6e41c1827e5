// service/engine.h — the part of sluiced that speaks neither HTTP nor gRPC: the loaded
// configuration and its limiters, checks (one composite check per request), leases held
// for remote callers, and the service's own metrics.
//
// Thread-safety: every member function may be called from any thread. Callbacks run on
// the client's I/O threads or on the engine's blocking pool; they must not block.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/boost_first.h"  // before any Boost header

#include <boost/asio/thread_pool.hpp>

#include "service/config.h"
#include "service/handles.h"
#include "service/matcher.h"
#include "service/metrics.h"
#include "service/refused_ids.h"
#include "sluice/sluice.h"

namespace sluiced {

struct LimitOverride {
  int64_t requests_per_unit = 0;
  Unit unit = Unit::kSecond;
};

struct RequestDescriptor {
  Entries entries;
  std::optional<uint64_t> hits;  // per descriptor; explicit 0 checks without spending
  std::optional<LimitOverride> limit;
};

struct CheckRequest {
  std::string domain;
  std::vector<RequestDescriptor> descriptors;
  uint64_t hits = 1;  // 0 means 1 (Envoy's hits_addend)
  // POST /v1/debit: every descriptor is charged as a debit of its hits (work already
  // done), never refused for it. Otherwise only descriptors a rule's debit_entry names.
  bool debit = false;
};

enum class Code { kOk, kOverLimit, kUnavailable };
std::string_view CodeName(Code code);  // "OK", "OVER_LIMIT", "UNAVAILABLE"

struct DescriptorResult {
  Code code = Code::kOk;
  std::shared_ptr<const Rule> rule;  // null: no limit applied
  std::string id;
  int64_t limit = 0;  // the limit in force (override included)
  Unit unit = Unit::kSecond;
  // Set when this descriptor's limit was decided or read: a single check, a peek, every
  // limit of an admitted composite. A refused composite sets only its refusing limit's
  // (the others were not spent, and those after it not read).
  std::optional<sluice::Decision> decision;
  std::string error;  // a store error the policy could not answer
  // Charged as a debit (CheckRequest::debit, or a rule's debit_entry): `decision` answers
  // for the id's next request, its `debt` how far below zero the charge left it.
  bool debit = false;
  // The debit could not be taken (a concurrency limit): `error` says why.
  bool bad_request = false;
};

struct CheckResult {
  Code overall = Code::kOk;
  bool unknown_domain = false;
  std::vector<DescriptorResult> statuses;
  // The descriptor whose decision the response headers show; -1 when none.
  int headline = -1;
};

using CheckDone = std::function<void(CheckResult)>;
// A reserve's answer: the check of the estimates and, when every limit held its estimate,
// the handle that settles them (empty otherwise, or when no limit applies).
using ReserveDone = std::function<void(CheckResult, std::string handle)>;

// A settle's answer: what it did (kSettled when any limit was settled by this call, else
// kAlreadySettled when any was settled before, else kNotHeld) and each limit's state after
// it, as a debit's (`debt` shown; OVER_LIMIT when the id's next request would be refused).
struct SettleResult {
  sluice::SettleOutcome outcome = sluice::SettleOutcome::kNotHeld;
  int64_t settled_hits = 0;  // the actual cost the reservation was settled with
  CheckResult check;
};

struct LeaseGrant {
  bool granted = false;
  bool unknown_domain = false;
  std::string error;   // not a concurrency descriptor, store error, ...
  std::string handle;  // sluiced's lease handle (what heartbeat/release take)
  std::shared_ptr<const Rule> rule;
  std::string id;
  int64_t limit = 0;
  int64_t live = 0;
  std::chrono::milliseconds ttl{0};
  std::chrono::milliseconds retry_after{0};
  sluice::DecisionSource source = sluice::DecisionSource::kStore;
  sluice::RefusalReason reason = sluice::RefusalReason::kNone;
  // `limit` is an operator's runtime override of the id's cap (sluice::SetOverride).
  bool runtime_override = false;
};

// What a readiness probe found.
struct StoreProbe {
  enum class State {
    kReady,           // the probe's check was decided by the store
    kUnreachable,     // the store did not answer (down, connecting, too slow, breaker open)
    kRefusingWrites,  // the store answers, but refuses writes (OOM, READONLY)
    kFailing,         // the store answers the probe with another error
  };
  State state = State::kReady;
  std::string error;           // the store's error (kRefusingWrites, kFailing)
  sluice::StoreHealth health;  // the client's view: memory policy, breaker, ...
};

struct EngineOptions {
  sluice::ClientOptions client;
  // Set: quota calls (RLQS) go to the store on a client of their own (its own connection,
  // breaker and I/O thread), with this deadline instead of client.deadline: they are off
  // the request path and may wait longer. Unset, or an embedded store: the engine's client.
  std::optional<std::chrono::milliseconds> quota_deadline;
  int blocking_threads = 2;  // peeks (hits 0), readiness probes, metrics pages, admin calls
  std::string audit_log = "sluiced-audit.log";
};

class Engine {
 public:
  static sluice::StatusOr<std::unique_ptr<Engine>> Create(EngineOptions options,
                                                          std::shared_ptr<const Config> config);
  ~Engine();

  // Swaps in a new configuration: new limiters with the same names (counters survive).
  sluice::Status Reload(std::shared_ptr<const Config> config);
  std::shared_ptr<const Config> config() const;

  void Check(CheckRequest request, CheckDone done);

  // Reservations (POST /v1/reservations; docs/sluiced.md, "Reserve, then settle") live in
  // Redis only, as leases do: Reserve holds every descriptor's estimate (its hits) all or
  // nothing (a refusal gives back the ones held before it) and hands over a handle naming
  // each limit's reservation; Settle, on any instance, corrects each to `actual`, once.
  // A concurrency limit or a per-descriptor limit override is refused whole (bad_request);
  // shadow-mode and unlimited limits hold nothing. `done` runs on an I/O thread.
  void Reserve(CheckRequest request, ReserveDone done);
  // NotFound when the handle names no reservation of a configured rate limit (garbage, or a
  // limit removed by a reload); the store's errors (retrying is safe: once only).
  void Settle(const std::string& handle, uint64_t actual,
              std::function<void(sluice::StatusOr<SettleResult>)> done);

  // Leases for remote holders live in Redis only (docs/design.md §4; service/engine_leases.cc):
  // Acquire grants one and hands over its handle (service/handles.h); Heartbeat and Release act on
  // the lease a handle names, whichever instance granted it. No instance keeps anything of a lease
  // or heartbeats for a caller, so no instance's stop, crash or restart changes a slot. `done` runs
  // on an I/O thread.
  // `wait`: how long to wait for a slot (AcquireOptions::wait), at most kMaxAcquireWait.
  // At most kMaxWaitingAcquires wait at once on this instance (each holds its HTTP
  // request open); past that, an acquire is answered at once as if it did not wait.
  // `caller_gone` (may be null): set when the caller left while it waited; a slot granted
  // after that is released at once (nobody would heartbeat or release it, and it would
  // hold the slot for lease_ttl), and `done` gets no handle.
  void Acquire(std::string domain, Entries entries, std::chrono::milliseconds wait,
               std::shared_ptr<const std::atomic<bool>> caller_gone,
               std::function<void(LeaseGrant)> done);
  static constexpr std::chrono::milliseconds kMaxAcquireWait{60000};
  static constexpr int64_t kMaxWaitingAcquires = 1024;
  int64_t waiting_acquires() const { return waiting_acquires_.load(std::memory_order_relaxed); }
  // The time the lease now has left; NotFound (the handle names no lease of a configured
  // concurrency limit: garbage, or its limit was removed by a reload), FailedPrecondition
  // (the lease is gone from the store: its slot is free), store errors (Unavailable,
  // DeadlineExceeded: try again within lease_ttl).
  void Heartbeat(const std::string& handle,
                 std::function<void(sluice::StatusOr<std::chrono::milliseconds>)> done);
  // OK when released or already gone; NotFound as Heartbeat's. A store error: the
  // release is sent again in the background until it lands or lease_ttl passes.
  void Release(const std::string& handle, std::function<void(sluice::Status)> done);

  // Admin: resolve a descriptor to its rule and id (NotFound when nothing matches).
  sluice::StatusOr<Match> Resolve(const std::string& domain, const Entries& entries) const;
  // Blocking admin calls (run them on the blocking pool).
  sluice::StatusOr<sluice::ReleaseAllResult> ReleaseAll(const Match& match,
                                                        const sluice::AdminAction& action);
  sluice::StatusOr<std::vector<sluice::LeaseInfo>> ListLeases(const Match& match);
  // Resets the matched rate limit's counter of the id, audited (sluice::ResetCounter, into
  // the audit log). InvalidArgument for a concurrency limit (it has leases, not a counter:
  // release them) and for a rule that keeps no counter (unlimited, requests_per_unit 0).
  sluice::StatusOr<sluice::ResetResult> ResetCounter(const Match& match,
                                                     const sluice::AdminAction& action);
  sluice::StatusOr<sluice::IdState> Inspect(const Match& match);
  // Runtime overrides of the matched limit's id (sluice::SetOverride and ClearOverride,
  // audited into the audit log): a rate limit's limit (window: 0 keeps the rule's), or a
  // concurrency limit's cap. InvalidArgument for a rule that keeps no counter (unlimited,
  // or 0 requests per unit); FailedPrecondition when the rule's limiter has the most
  // overrides in force already.
  sluice::StatusOr<sluice::OverrideResult> SetOverride(const Match& match,
                                                       const sluice::OverrideSpec& spec,
                                                       const sluice::AdminAction& action);
  sluice::StatusOr<sluice::OverrideResult> ClearOverride(const Match& match,
                                                         const sluice::AdminAction& action);
  // The runtime overrides in force for every limit of the configuration, at most
  // kMaxOverridesShown (`truncated` says so), each with its rule's domain and its window
  // (the rule's own when the override keeps it; 0 for a concurrency limit).
  struct ShownOverride {
    std::string domain;
    sluice::RuntimeOverride override;
  };
  static constexpr std::size_t kMaxOverridesShown = 10000;
  sluice::StatusOr<std::vector<ShownOverride>> ListOverrides(bool& truncated);

  // Readiness: one check on the store (it writes the probe's counter, a tiny key that
  // expires within a second, in the same atomic script as any check), so a store that
  // answers reads but refuses writes (maxmemory reached under noeviction, a read-only
  // replica) is not taken for a healthy one. Calls done from the blocking pool, within
  // about half a second.
  void ProbeStore(std::function<void(StoreProbe)> done);
  // Set once sluiced stops gracefully (SIGTERM): readiness probes answer not ready.
  void StartDraining() { draining_.store(true, std::memory_order_relaxed); }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }

  sluice::Client& client() { return *client_; }
  // The quota calls' client (EngineOptions::quota_deadline), or the engine's.
  sluice::Client& quota_client() { return quota_client_ ? *quota_client_ : *client_; }
  // The store's URL as it may be shown: its password masked (sluice::RedactUrl).
  std::string store_shown() const { return sluice::RedactUrl(options_.client.url); }
  // The fault domains whose breaker is open or half-open (`h.open_domain_names`) as they
  // may be shown: a Redis Cluster primary's "host:port" as the library names it; the one
  // domain of any other store (one server, Sentinel) is the store itself, shown as
  // store_shown() (the library has no address of its own for it).
  std::vector<std::string> OpenDomainsShown(const sluice::StoreHealth& h) const;
  Metrics& metrics() { return metrics_; }
  // The ids this instance refused in the last minute or two (the support console's list).
  RefusedIds& refused_ids() { return refused_ids_; }
  // The audit log admin actions are written to (EngineOptions::audit_log).
  const std::string& audit_log() const { return options_.audit_log; }
  std::string MetricsText();
  boost::asio::thread_pool& blocking_pool() { return pool_; }

 private:
  struct BuiltRule {
    std::shared_ptr<const Rule> rule;
    std::optional<sluice::Limiter> limiter;
    std::optional<sluice::ConcurrencyLimiter> concurrency;
    RuleCounters* counters = nullptr;
  };
  struct Generation {
    std::shared_ptr<const Config> config;
    std::unordered_map<const Rule*, BuiltRule> rules;
    // Per domain: the fixed window that RateLimitOverrides count on when the descriptor's
    // own rule has no limiter to take the override (no rule, unlimited, concurrency,
    // requests_per_unit 0, shadow mode).
    std::unordered_map<std::string, BuiltRule> overrides;
    // The concurrency limits by limiter name (what a lease handle names), into `rules`.
    std::unordered_map<std::string, const BuiltRule*> concurrency;
  };
  // A request being checked: its result so far and the callback that answers it.
  struct Pending;
  // One descriptor of a request that a limit applies to: what Check sends to the store.
  struct Item {
    std::size_t index;  // into the request's descriptors
    const BuiltRule* built;
    int64_t cost;
    std::optional<sluice::Limit> limit;  // a RateLimitOverride
    bool debit = false;                  // charged whether it fits or not
  };

  Engine(EngineOptions options, std::shared_ptr<sluice::Client> client);
  // Check's steps: the limits to check, then one composite or each on its own, each
  // answer stored with Set and counted; Finish answers the request.
  std::vector<Item> Plan(const Generation& gen, const DomainConfig& domain,
                         const CheckRequest& request, CheckResult& result, bool& zero_refusal);
  void CheckTogether(const std::shared_ptr<Pending>& pending, std::vector<Item> items);
  void CheckEach(const std::shared_ptr<Pending>& pending, const std::vector<Item>& items);
  // Reserve's steps: item k's estimate held after items 0..k-1's (`held`: their limiter
  // names and refs); a refusal or an error settles those with 0 and answers.
  struct Reserving;
  void ReserveFrom(const std::shared_ptr<Reserving>& r, std::size_t k);
  // The limiter of the rate limit named `limiter_name` in the current configuration.
  std::optional<sluice::Limiter> RateLimiter(const std::string& limiter_name,
                                             std::shared_ptr<const Rule>& rule) const;
  void Set(const std::shared_ptr<Pending>& pending, const Item& item,
           sluice::StatusOr<sluice::Decision> decision, bool timed = true);
  static void Finish(const std::shared_ptr<Pending>& pending);
  sluice::StatusOr<std::shared_ptr<const Generation>> Build(std::shared_ptr<const Config> config);
  std::shared_ptr<const Generation> current() const;
  // The limiter of the concurrency limit a lease handle names (a copy: a reload may drop
  // the generation meanwhile) and the handle's lease reference; nullopt when the handle
  // names none in the current configuration.
  // The limiter an admin call on `match` acts through; InvalidArgument when the matched
  // limit is not a concurrency limit.
  sluice::StatusOr<sluice::ConcurrencyLimiter> AdminLimiter(const Match& match);
  std::optional<sluice::ConcurrencyLimiter> LeaseLimiter(const std::string& handle,
                                                         std::string& lease_ref) const;
  // Counts the decision; `timed`: also its store latency or store error (once per store
  // call: the other limits of a composite are counted with timed false).
  void Record(const BuiltRule& built, const DescriptorResult& result,
              std::chrono::steady_clock::duration took, bool timed = true);

  EngineOptions options_;
  std::shared_ptr<sluice::Client> client_;
  std::shared_ptr<sluice::Client> quota_client_;  // null: client_
  Metrics metrics_;
  RefusedIds refused_ids_;
  boost::asio::thread_pool pool_;
  mutable std::mutex mu_;
  std::shared_ptr<const Generation> generation_;
  std::optional<sluice::Limiter> probe_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> waiting_acquires_{0};  // acquires waiting for a slot now
};

}  // namespace sluiced

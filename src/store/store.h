// The Store interface: where decisions are made. The Redis store runs each algorithm's
// script; the memory store runs its in-memory twin. Everything above (limiters, leases,
// policies, the CLI) sees only this interface, so the fault-injecting test wrapper and
// every policy work the same on both.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "algo/algorithm.h"
#include "algo/concurrency.h"
#include "algo/quota_shares.h"
#include "sluice/decision.h"
#include "sluice/limits.h"
#include "sluice/metrics.h"

namespace sluice::internal {

using Deadline = std::chrono::steady_clock::time_point;

struct CheckCall {
  Op op = Op::kConsume;
  std::string key;
  Limit limit;
  int64_t cost = 1;  // consume/peek: cost; refund: amount
  // The model clock's time when ClientOptions::model_clock is set; otherwise the store
  // reads its own clock.
  std::optional<int64_t> now_ms;
  Deadline deadline;
  // What to answer when the store cannot (resolved: never kDefault), and for kLocal the
  // number of servers the limit is divided among.
  FailurePolicy on_failure = FailurePolicy::kOpen;
  int64_t servers = 1;
  bool cache_denials = false;
  // The limiter refuses to run on a store that can evict its keys
  // (LimiterOptions::refuse_evicting_store): answered by `on_failure` while it can.
  bool refuse_evicting = false;
  // Refunds only: where the units were counted (CheckOptions::counted_by).
  DecisionSource counted_by = DecisionSource::kStore;
  // The id stays refused this long once refused over the limit (LimiterOptions::
  // block_for; src/algo/block.lua); 0: no block.
  int64_t block_ms = 0;
  // A consume that asks for the request's cost plus a local-budget slice (`cost` is
  // both): the request's own cost, which a failure policy decides with. 0: `cost`.
  int64_t request_cost = 0;
};

// One request against several limits, decided all-or-nothing (CheckComposite's one-script
// path). Every call is a consume of the same cost with the same now_ms; the deadline of
// the first is the deadline of the whole.
inline constexpr std::size_t kMaxCompositeCalls = 64;  // src/algo/composite.lua checks it too
struct CompositeCall {
  std::vector<CheckCall> calls;
};

// The answer to a CompositeCall: either every limit admitted and counts the request
// (`refused_by` is empty, `decisions` holds one decision per call, in order), or the
// limit at `refused_by` refused (its refusal is `decisions[0]`, the only entry) and no
// limit counts the request.
struct CompositeOutcome {
  std::optional<std::size_t> refused_by;
  std::vector<Decision> decisions;
};
using CompositeCallback = std::function<void(StatusOr<CompositeOutcome>)>;

// One concurrency-lease operation (src/algo/concurrency.h).
struct LeaseCall {
  LeaseArgs args;
  std::string key;
  std::optional<int64_t> now_ms;  // as CheckCall::now_ms
  Deadline deadline;
  // Acquire only: what to answer when the store cannot (never kDefault), and for kLocal
  // the number of servers the limit is divided among.
  FailurePolicy on_failure = FailurePolicy::kOpen;
  bool refuse_evicting = false;  // as CheckCall::refuse_evicting, for acquires
  int64_t servers = 1;
  // A lease the local fallback granted: its heartbeats and release go to the local store.
  bool local = false;
};

// A lease operation's answer and, for acquire, who decided it.
struct LeaseResult {
  LeaseReply reply;
  DecisionSource source = DecisionSource::kStore;
};
using LeaseCallback = std::function<void(StatusOr<LeaseResult>)>;

// One QuotaShares call (sluice/quota.h): the bucket's key and the script's arguments.
struct QuotaCall {
  std::string key;        // the bucket's hash (MakeQuotaKey)
  std::string index_key;  // its expiry index (MakeQuotaIndexKey): the same slot
  QuotaShareArgs args;
  std::optional<int64_t> now_ms;  // as CheckCall::now_ms
  Deadline deadline;
};
using QuotaCallback = std::function<void(StatusOr<QuotaShareReply>)>;

// A part of a store that fails on its own: one primary of a Redis Cluster. The policy
// layer keeps a circuit breaker per fault domain (src/policy/domain_breakers.h), so that
// a failing primary short-circuits only the calls of the slots it serves. Domain 0 is
// the store's only one (one server, Sentinel's primary, the embedded store) and, on a
// cluster, the calls whose slot no known primary serves yet. An id is never reused: a
// replica promoted in a primary's place, or a node the router retired and meets again,
// is a new domain (whose breaker starts closed).
struct FaultDomainInfo {
  uint64_t id = 0;
  std::string name;  // "host:port"; empty for domain 0
};

class Store {
 public:
  virtual ~Store() = default;
  // Decides `call`. `done` runs exactly once: inline, or on a store thread. Errors are
  // Status values already translated to sluice's codes.
  virtual void Check(CheckCall call, DecisionCallback done) = 0;
  // Which keys CheckComposite can decide together in one atomic step (one script on one
  // server, or one hash slot of a cluster): keys of equal groups can; nullopt when this
  // store decides no composite at all (it then gets no CheckComposite calls).
  virtual std::optional<uint32_t> CompositeGroup(std::string_view key) const {
    (void)key;
    return std::nullopt;
  }
  // Decides every call of `call` in one atomic step: all admit and all count, or none
  // counts. Every key is of one CompositeGroup. `done` as for Check.
  virtual void CheckComposite(CompositeCall call, CompositeCallback done) {
    (void)call;
    done(FailedPreconditionError("this store cannot decide several limits in one step"));
  }
  // Runs one lease operation; `done` as for Check.
  virtual void RunLease(LeaseCall call, LeaseCallback done) = 0;
  // Appends one record (field, value pairs) to the stream `key`, trimmed to about
  // `max_len` entries, expiring `retention_ms` after the last append.
  virtual void AppendToStream(std::string key,
                              std::vector<std::pair<std::string, std::string>> fields,
                              int64_t max_len, int64_t retention_ms, Deadline deadline,
                              std::function<void(Status)> done) {
    (void)key;
    (void)fields;
    (void)max_len;
    (void)retention_ms;
    (void)deadline;
    done(FailedPreconditionError("the embedded store has no streams"));
  }
  // Runs one QuotaShares call (src/algo/quota_shares.h); `done` as for Check. No failure
  // policy and no breaker: a failure comes back as its error, and the caller applies its
  // own policy (a share of a rate has no "admit" or "refuse" to fall back on).
  virtual void AssignQuota(QuotaCall call, QuotaCallback done) {
    (void)call;
    done(FailedPreconditionError("this store cannot share quotas"));
  }
  // Runs `wake` (on any thread; it must not block) when a slot of the lease set `key` may
  // have freed (a release there, a waiter leaving), while the returned handle lives; null
  // when this store cannot tell (a waiting acquire then re-checks at intervals only). A
  // wake-up may be missed: it is a hint, never a grant.
  virtual std::shared_ptr<void> WatchLeaseSet(const std::string& key, std::function<void()> wake) {
    (void)key;
    (void)wake;
    return nullptr;
  }
  virtual ClientStats stats() const { return {}; }
  // INFO <section> of the server behind the store; FailedPrecondition when there is none.
  virtual void Info(std::string_view section, Deadline deadline,
                    std::function<void(StatusOr<std::string>)> done) {
    (void)section;
    (void)deadline;
    done(FailedPreconditionError("the embedded store has no server INFO"));
  }
  // Whether calls may lie in more than one fault domain; constant for the store's life.
  virtual bool HasFaultDomains() const { return false; }
  // The fault domain that serves `key` now (0 for a store without domains). Thread-safe,
  // cheap: a call asks it before it is sent.
  virtual uint64_t FaultDomain(std::string_view key) const {
    (void)key;
    return 0;
  }
  // The fault domains that serve keys now, each once (domain 0 alone for a store without
  // domains). Keys of one CompositeGroup lie in one fault domain.
  virtual std::vector<FaultDomainInfo> FaultDomains() const { return {FaultDomainInfo{}}; }
  // Whether the store can take calls now (false while a Redis connection is down or
  // still being made). Always true for the embedded store.
  virtual bool connected() const { return true; }
  // Why connected() is false: the latest connection (or, on a cluster, slot map) error as
  // Create would have returned it, never with a password; Ok while connected.
  // Thread-safe, cheap (StoreHealth::connection_error).
  virtual Status connection_error() const { return Status::Ok(); }
  // Stops I/O; outstanding calls complete with Unavailable. Idempotent.
  virtual void Shutdown() {}
};

}  // namespace sluice::internal

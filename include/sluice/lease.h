// sluice/lease.h — concurrency limits: at most `limit` requests of one id in flight at
// once, counted as expiring leases (docs/design.md §4), so a holder that dies (SIGKILL, lost
// network) frees its slot lease_ttl later without any reaper.
//
//   auto streams = client->MakeConcurrencyLimiter("streams", {.limit = 20});
//   sluice::StatusOr<sluice::Acquisition> a = streams->Acquire("user:42");
//   if (a.ok() && a->acquired) {
//     // a->lease heartbeats by itself; a->lease.held() turns false if it is lost.
//   }  // the Lease's destructor stops its heartbeats and releases it
//
// Three call styles, as for checks: Acquire (blocks up to the deadline), AcquireAsync (a
// callback on an I/O thread, never inline) and AsyncAcquire in sluice/asio.h (any Asio
// completion token). Blocking calls made on the client's I/O threads return
// FailedPrecondition at once; callbacks must not throw (sluice/client.h).
//
// The circuit breaker (ClientOptions::breaker_failures) short-circuits acquires only:
// heartbeats and releases always go to the store, so a stall shorter than lease_ttl
// loses no lease, and a release is never dropped while Redis answers.
//
// An acquire whose deadline passes may still run in Redis later (a stalled server runs
// it on resume) and grant a lease that nobody holds; when that grant's reply arrives,
// the client removes it at once. Only if the connection breaks before the reply does
// such a grant keep its slot, for at most lease_ttl.
//
// Thread-safety: ConcurrencyLimiter is thread-safe. A Lease is one owner's handle: its
// const members may be read from any thread, the others need external synchronization.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/client.h"
#include "sluice/decision.h"
#include "sluice/status.h"

namespace sluice {

namespace internal {
struct LeaseState;
}  // namespace internal

struct AdminAction;       // sluice/admin.h
struct AuditOptions;      // sluice/admin.h
struct ReleaseAllResult;  // sluice/admin.h

struct ConcurrencyOptions {
  // Live leases per id; 1 ≤ limit ≤ kMaxLimit.
  int64_t limit = 0;
  // How long a lease stays believable without a heartbeat: a dead holder's slot is free
  // again this long after its last heartbeat. 10 ms – 366 days. Default: 120 s. A
  // changed lease_ttl applies to new leases and to heartbeats; a live lease keeps the
  // expiry it was last given (cutting it short could give its slot to a second holder
  // while the first still believes it holds it), so a dead holder's slot frees at most
  // the old lease_ttl after its last heartbeat.
  std::chrono::milliseconds lease_ttl{120000};
  // How often a lease heartbeats; 0 means lease_ttl / 6 (a lease survives five lost
  // heartbeats in a row). Must be shorter than lease_ttl. Default: 0.
  std::chrono::milliseconds heartbeat_interval{0};
  // What Acquire answers when the store cannot (LimiterOptions::on_failure):
  // kOpen grants a lease that no store holds (source kFailOpen; it never heartbeats and
  // is never lost), kClosed refuses (reason kStoreUnavailable), kLocal grants from this
  // process's embedded store with limit / servers (source kLocalFallback; its heartbeats
  // and release stay local). Default: ClientOptions::on_failure.
  FailurePolicy on_failure = FailurePolicy::kDefault;
  // As LimiterOptions::refuse_evicting_store, for acquires (an evicted lease set frees
  // every slot of the id at once). Default: false.
  bool refuse_evicting_store = false;
  // kLocal: servers sharing the limit; 0 means ClientOptions::servers.
  int64_t servers = 0;
  // The most acquires of one id that may wait at once (AcquireOptions::wait), fleet-wide:
  // past it a waiting acquire is refused at once (kTooManyWaiters). 1 – kMaxWaiters.
  // Default: 100.
  int64_t max_waiters = 100;
  static constexpr int64_t kMaxWaiters = 4096;
};

// Why a lease stopped being held by its owner.
enum class LeaseLoss {
  kNone,
  kGone,     // the store no longer has it: expired and pruned, released by an operator,
             // or lost with the store's data (a restart without persistence)
  kExpired,  // no heartbeat was confirmed within lease_ttl (store down, process paused):
             // the store has let it expire, or will at any moment
};

std::string_view LeaseLossName(LeaseLoss loss);

class Lease {
 public:
  Lease() = default;  // holds nothing
  Lease(Lease&&) noexcept;
  Lease& operator=(Lease&&) noexcept;  // releases what this held first
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  // Stops heartbeating, then releases (without waiting for the store's answer). If
  // on_lost is running on another thread, waits for it to return first (on_lost must not
  // block, so this is short); from inside an on_lost (this lease's or another's) it does
  // not wait. Once it has returned, on_lost never runs (but for that exception).
  ~Lease();

  // True while the lease is believed live: granted, not released, not lost, and its
  // last confirmed heartbeat less than lease_ttl ago (checked on every call, so a
  // process resumed after a long pause sees false at once, before any heartbeat). Time
  // is CLOCK_BOOTTIME, which keeps counting while the machine is suspended, as the
  // store's clock does: after a suspend longer than lease_ttl, held() is false.
  bool held() const;
  // Why the lease was lost; kNone while held or after a release by its owner.
  LeaseLoss loss() const;
  // The lease's id in its store ("<acquired at ms>:<token>"; empty for kFailOpen).
  const std::string& id() const;
  // Who granted it: kStore, kLocalFallback or kFailOpen.
  DecisionSource source() const;
  // The time the granting store's clock said at acquisition (ms since the epoch).
  int64_t acquired_at_ms() const;

  // Stops heartbeating and removes the lease from its store, whatever the breaker's
  // state. OK when released, or already released or lost. On an error (the store is
  // unreachable) the client keeps sending the release in the background until it lands
  // or the lease has expired by itself (lease_ttl after its last heartbeat), even after
  // the Lease is destroyed (not after its Client is), and calling Release() again sends
  // it again at once. The Lease stops heartbeating either way. Waits for a running
  // on_lost as the destructor does; after it returns, on_lost never runs. Blocks up to
  // the client's deadline; on an I/O thread (inside on_lost or another callback) it does
  // not wait for the store: it stops the lease and sends the release as the destructor
  // does, and returns OK.
  Status Release();
  // As Release, without blocking; `done` (optional) runs on an I/O thread, never inside
  // ReleaseAsync (on a Lease that holds nothing, which has no client, on a thread of its
  // own).
  void ReleaseAsync(std::function<void(Status)> done = nullptr);
  // Heartbeats now instead of at the next interval. OK when the lease was extended;
  // the Lease's loss() tells whether it is gone. Blocks up to the client's deadline.
  Status Heartbeat();
  // Hands the lease to a holder elsewhere and lets go of it here: from now on nothing in
  // this process heartbeats or releases it (not even ~Lease), and it stays in its store
  // until someone releases it by reference or stops heartbeating it (it then frees
  // lease_ttl after its last heartbeat). Returns its reference for
  // ConcurrencyLimiter::Heartbeat and Release, or "" when this Lease holds nothing
  // (empty, released or lost). The reference carries the lease's random token: whoever
  // has it can heartbeat and release the lease, so treat it as a secret. Waits for a
  // running on_lost as Release does; after it returns, on_lost never runs. Never blocks
  // on the store.
  std::string Detach();

 private:
  friend class ConcurrencyLimiter;
  explicit Lease(std::shared_ptr<internal::LeaseState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::LeaseState> state_;
};

// The answer of Acquire.
struct Acquisition {
  bool acquired = false;
  Lease lease;  // held when acquired
  int64_t limit = 0;
  // Live leases of the id as the store counted them: after granting this one, or when
  // refused (below the limit only when the free slots are owed to waiters). 0 for
  // kFailOpen and kFailClosed, and for a waiting acquire refused from the queue.
  int64_t live = 0;
  // Refused: until the earliest live lease expires (a slot may free up sooner, when a
  // holder releases). For kFailClosed: until the store is probed again.
  std::chrono::milliseconds retry_after{0};
  DecisionSource source = DecisionSource::kStore;
  RefusalReason reason = RefusalReason::kNone;  // kOverLimit or kStoreUnavailable
};

using AcquireCallback = std::function<void(StatusOr<Acquisition>)>;

struct AcquireOptions {
  // The limit for this call instead of the limiter's (a plan upgrade takes effect now).
  std::optional<int64_t> limit;
  // Deadline of the acquire instead of ClientOptions::deadline (of each store call, when
  // waiting).
  std::optional<std::chrono::milliseconds> deadline;
  // How long to wait for a slot when the id is at its limit, instead of being refused at
  // once; 0 – kMaxWait. Waiters are served in the order they arrived, across every
  // process sharing the store: each holds a ticket in the id's queue in the store, and a
  // slot that frees goes to the first ticket (an acquire that does not wait never takes
  // a slot a waiter is owed). A waiter is woken when a lease of the id is released (on
  // Redis, by sharded pub/sub: one subscriber connection per client, not on a Redis
  // Cluster), and asks again at least every 500 ms and one deadline before its wait ends,
  // so the answer comes within `wait` (plus the last call's deadline at worst when the
  // client lags). A waiter that dies loses its place within 3 s. When the store cannot
  // answer, the failure policy answers at once (kLocal as a plain acquire). A wait that
  // ends in the queue is refused (kOverLimit); one refused because ConcurrencyOptions::
  // max_waiters already wait, kTooManyWaiters. Default: 0.
  std::chrono::milliseconds wait{0};
  static constexpr std::chrono::milliseconds kMaxWait{std::chrono::hours(1)};
  // Called once, on an I/O thread (never inside the owner's own call, such as a
  // Heartbeat() that finds the lease gone), when the lease is lost, so a stream can stop
  // instead of running unaccounted. Not called when its owner releases it, nor once
  // Release() or ~Lease has returned (they wait for a running on_lost, unless they are
  // called from within an on_lost), so it may capture its owner. Must not block or
  // throw; it may call its own Lease's Release() or destructor.
  std::function<void(LeaseLoss)> on_lost;
};

// One live lease, as an operator sees it.
struct LeaseInfo {
  std::string id;  // "<acquired at ms>:<token>"
  int64_t acquired_at_ms = 0;
  int64_t expires_at_ms = 0;  // store clock
};

class ConcurrencyLimiter {
 public:
  // Grants a lease of `id` if fewer than the limit are live (expired ones are pruned in
  // the same step). Refusals are Acquisitions, not errors. Errors: InvalidArgument (empty
  // id, bad limit or deadline); store errors only when the failure policy cannot answer
  // (never for kOpen/kClosed/kLocal acquisitions).
  StatusOr<Acquisition> Acquire(std::string_view id, const AcquireOptions& options = {}) const;
  void AcquireAsync(std::string_view id, const AcquireOptions& options, AcquireCallback done) const;

  // The live leases of `id`, soonest to expire first. Store errors are returned.
  // (Operators release them all with sluice::ReleaseAll, sluice/admin.h.)
  StatusOr<std::vector<LeaseInfo>> List(
      std::string_view id, std::chrono::milliseconds deadline = std::chrono::seconds(2)) const;

  // Leases detached from their Lease (Lease::Detach), named by reference: any process
  // with a limiter of the same name on the same store and prefix may heartbeat or
  // release them, so the holder of a lease need not be the process that acquired it.
  //
  // Heartbeat moves the lease's expiry to lease_ttl from now (never back, and a lease
  // that is gone is never revived) and returns the time it now has left. Errors:
  // InvalidArgument (not the reference of a lease of this limiter), NotFound (the lease
  // is gone: released, expired, or released by an operator; acquire a new one), store
  // errors (Unavailable, DeadlineExceeded: try again before lease_ttl runs out; like
  // the Lease's own heartbeats, these bypass the circuit breaker). A lease the kOpen
  // policy granted is in no store: lease_ttl at once. One the kLocal policy granted is
  // in the embedded store of the process that granted it: NotFound in any other. Blocks
  // up to the client's deadline.
  StatusOr<std::chrono::milliseconds> Heartbeat(std::string_view lease_ref) const;
  void HeartbeatAsync(std::string_view lease_ref,
                      std::function<void(StatusOr<std::chrono::milliseconds>)> done) const;
  // Removes a detached lease: OK when removed, or already gone. Errors as Heartbeat's,
  // but NotFound. On a store error this client keeps sending the release in the
  // background until it lands or lease_ttl has passed (as for a Lease's own release; not
  // after the Client is destroyed, and the lease frees lease_ttl after its last heartbeat
  // in any case). Blocks up to the client's deadline.
  Status Release(std::string_view lease_ref) const;
  void ReleaseAsync(std::string_view lease_ref, std::function<void(Status)> done) const;
  // The longest reference Lease::Detach returns.
  static constexpr std::size_t kMaxLeaseRefBytes = 256;

  const std::string& name() const { return name_; }
  const ConcurrencyOptions& options() const { return options_; }
  // The key of `id`'s lease set, or InvalidArgument for an empty id.
  StatusOr<std::string> KeyFor(std::string_view id) const;

 private:
  friend class Client;
  friend StatusOr<ReleaseAllResult> ReleaseAll(const ConcurrencyLimiter& limiter,
                                               std::string_view id, const AdminAction& action,
                                               const AuditOptions& audit,
                                               std::chrono::milliseconds deadline);
  ConcurrencyLimiter(std::shared_ptr<internal::ClientCore> core, std::string name,
                     ConcurrencyOptions options);
  // A detached lease's heartbeat (or release) from its reference: `done` gets the time
  // the lease has left (0 after a release), never inside the call.
  void RunDetached(std::string_view lease_ref, bool release,
                   std::function<void(StatusOr<std::chrono::milliseconds>)> done) const;
  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
  ConcurrencyOptions options_;
  std::string key_head_;
};

}  // namespace sluice

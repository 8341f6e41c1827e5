// sluice/client.h — the entry point: a Client connected to a store, and Limiters on it.
//
//   auto client = sluice::Client::Create({.url = "redis://127.0.0.1:6379"});
//   if (!client.ok()) { /* client.status() names the problem */ }
//   auto login = (*client)->MakeLimiter("login", {.limit = 5, .window = 60s});
//   sluice::StatusOr<sluice::Decision> d = login->Check("account:101");
//
// Three call styles share one implementation: Check (blocks the calling thread until
// the decision or the deadline), CheckAsync (a callback), and AsyncCheck in
// sluice/asio.h (any Asio completion token, C++20 coroutines included).
//
// Thread-safety: Client and Limiter are thread-safe; one Limiter may be used from any
// number of threads at once. No exception crosses this API. A Limiter keeps its Client's
// machinery alive, so it stays usable after the last shared_ptr<Client> is gone.
//
// Callbacks (CheckAsync, AcquireAsync, on_lost, ReleaseAsync) run on the client's I/O
// threads and must neither block nor throw: a blocking call (Check, Acquire, Release,
// ...) made on an I/O thread returns FailedPrecondition at once instead of waiting for
// itself, and an exception that leaves a callback ends the process (std::terminate), as
// a half-delivered decision could not be recovered.
//
// fork(): a Client belongs to the process that created it. In a child forked after
// Create (a pre-fork server's workers), every call of that Client, its Limiters and
// Leases answers FailedPrecondition at once (callbacks run inline, there being no I/O
// thread), and dropping them returns at once without touching the parent's threads or
// connection (their memory is left to the child's exit). Create a new Client in the
// child, or create Clients only after forking.
//
// Timed-out calls: a call that got DeadlineExceeded (or its failure policy's answer)
// was still sent, and Redis may run it after the deadline (a stalled server runs its
// queue when it resumes). It is then counted once: a `closed` refusal or a `local`
// admission may also have spent the id's budget in Redis. The error is always an
// over-count (stricter), never an under-count: each such call is counted at most once,
// and only calls already written to Redis can be (at most max_in_flight per connection
// at any moment; a call refused before being sent never is).
// An acquire that timed out is different: its late grant is released as soon as its
// reply arrives (sluice/lease.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limits.h"
#include "sluice/metrics.h"
#include "sluice/status.h"

namespace sluice {

namespace internal {
class ClientCore;
class ClientFactory;
class CompositeRun;
class LocalBudgets;
class SyncedCounts;
struct CheckCall;
enum class Op : int;  // algo/algorithm.h: consume, peek, refund, reset
}  // namespace internal

class ConcurrencyLimiter;  // sluice/lease.h
struct AdminAction;        // sluice/admin.h
struct AuditOptions;       // sluice/admin.h
struct ResetResult;        // sluice/admin.h
struct ConcurrencyOptions;
class QuotaShares;  // sluice/quota.h

// `url` (a ClientOptions::url, well-formed or not) fit to log or show: the password of
// its userinfo and the values of its query parameters other than db, user,
// sentinel_user, ca, cert, key and sni become "***" ("redis://app:***@10.0.0.5:6379",
// "unix:///run/redis.sock?password=***"); a userinfo without ':' is masked whole, as
// it may be a password alone. Everything else is kept as written.
std::string RedactUrl(std::string_view url);

struct ClientOptions {
  // Where the state lives:
  //   redis://[[user]:password@]host[:port][/db]   TCP (port 6379 and db 0 when omitted)
  //   rediss://...[?ca=FILE&cert=FILE&key=FILE&sni=NAME]   the same over TLS (the
  //       server's certificate is always verified: ca, the CA file, else the system's
  //       trust store; cert and key, a client certificate; sni, the name to verify when
  //       it is not the host)
  //   redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master-name[/db]
  //       [?sentinel_user=U&sentinel_password=P]   the primary the sentinels name,
  //       followed through failovers (rediss+sentinel:// over TLS)
  //   redis+cluster://[[user]:password@]host[:port][,host[:port]...]   a Redis Cluster's
  //       seed nodes (rediss+cluster:// over TLS)
  //   unix:///path/to/redis.sock[?db=N&user=U&password=P]
  //   memory://                                     the embedded store of this process
  // docs/design.md §8 has the details. Default: "redis://127.0.0.1:6379".
  std::string url = "redis://127.0.0.1:6379";
  // First part of every key (`<prefix>:{<limiter>:<id>}`); letters, digits and `_.-`,
  // 1–64 bytes. Default: "sluice".
  std::string prefix = "sluice";
  // Deadline of each check, counted from the call. A store that does not answer in time
  // yields DeadlineExceeded, even when it stays silent. Default: 5 ms.
  std::chrono::milliseconds deadline{5};
  // Deadline of connecting, authenticating and loading scripts. Default: 2000 ms.
  std::chrono::milliseconds connect_timeout{2000};
  // false: Create waits for the first connection (up to connect_timeout) and fails when
  // it cannot be made, so a wrong URL or password shows at start-up. true: Create
  // checks the options and returns at once; the connection is made in the background
  // and retried with the reconnect backoff until it succeeds, and until then every
  // call fails Unavailable (naming the last connection error), i.e. gets its failure
  // policy's answer. For services that must start, and serve by their policies, while
  // Redis is down (StoreHealth::connected says when it is up). Default: false.
  bool connect_in_background = false;
  // A connection whose oldest outstanding command has waited this long for the store
  // (counted from when it was written: not while this process held it) is considered
  // dead: it is closed and reconnected. Default: 1000 ms.
  std::chrono::milliseconds stall_timeout{1000};
  // Reconnect backoff: first delay, doubled per failed attempt up to the maximum.
  // Default: 10 ms and 1000 ms.
  std::chrono::milliseconds reconnect_min_backoff{10};
  std::chrono::milliseconds reconnect_max_backoff{1000};
  // Commands in flight on one connection before new ones fail fast with Unavailable
  // instead of queueing behind a store that cannot keep up. Default: 100000.
  std::size_t max_in_flight = 100000;
  // The most calls one connection sends to Redis as one batch script call (calls that
  // queued while a write was in flight; nothing waits to fill a batch): 1 sends every
  // call alone, e.g. to compare with and without batching. 1 to 256. Default: 64.
  std::size_t max_batch = 64;
  // Threads running the client's I/O and callbacks. Default: 1.
  int io_threads = 1;
  // The failure policy of every limiter that names none (LimiterOptions::on_failure).
  // Default: kOpen — a limiter must not take the service down with it; give sign-in and
  // other security limits kClosed or kLocal explicitly.
  FailurePolicy on_failure = FailurePolicy::kOpen;
  // kLocal: how many servers share each limit; the local limiter enforces
  // limit / servers (at least 1), and for token_bucket and gcra an explicit refill of
  // refill / servers per window (at least 1; refill 0 means limit per window, i.e. the
  // divided limit), so the fleet in fallback admits about the configured rate.
  // Default: 1.
  int64_t servers = 1;
  // The circuit breaker: consecutive store failures that open it, and how long it stays
  // open before one probe call is let through (one at a time; a probe that has not
  // answered within a cool-down is given up for the next call; docs/design.md §5). A
  // store failure is a call the store did not answer: a connection error, a script
  // error, or a deadline missed while the connection received no reply at all (a
  // stalled or unreachable Redis). A backlog in this client is not: a call refused because
  // max_in_flight calls are queued, a deadline missed while replies kept arriving, or one
  // missed after this process held the call for more than half its deadline before writing
  // it (its event loop lagged: a server's own work on the I/O threads, a slow callback, CPU
  // starvation) gets its failure policy's answer but is not
  // counted (a local burst must not refuse everyone for the cool-down while Redis is healthy). The
  // price: a Redis that answers everything, only slower than the deadline, does not open the
  // breaker either; each call then waits its deadline and gets its policy. A successful lease
  // heartbeat or release also closes the breaker. The breaker short-circuits checks and acquires
  // only; lease heartbeats and releases always go to the store. On a Redis Cluster each primary has
  // a breaker of its own (these options apply to each): a failing primary short-circuits only the
  // calls of the slots it serves. Default: 5 and 1000 ms.
  int breaker_failures = 5;
  std::chrono::milliseconds breaker_cool_down{1000};
  // Keys whose latest refusal is remembered (LRU), so that checks of a refused id (same
  // limit, same cost; `remaining` is as of the refusal) are
  // refused locally until its retry_after without a store call; 0 turns the cache off.
  // Default: 10000.
  std::size_t denial_cache_size = 10000;
  // How often the client reads the store's maxmemory-policy and evicted_keys (INFO), to
  // tell whether the store can evict rate-limit state (every sluice key has an expiry,
  // so any policy but noeviction can): StoreHealth, the metrics,
  // LimiterOptions::refuse_evicting_store and on_warning use the latest reading. The
  // first reading is made at once (retried every second until it succeeds). 0: never
  // (the embedded store is never read). Default: 10000 ms.
  std::chrono::milliseconds eviction_check_interval{10000};
  // Warnings about the store meant for the operator's log: called (on an I/O thread)
  // once when the store is seen with a maxmemory-policy that can evict sluice's keys,
  // and once when it is then seen evicting. Default: none.
  std::function<void(const std::string&)> on_warning;
  // Tests only: when set, scripts and the embedded store use this clock's time instead
  // of the store's own clock (Redis TIME). Default: none — the store's clock.
  std::shared_ptr<const Clock> model_clock;
};

// Per-limiter settings that are configuration, not arguments.
struct LimiterOptions {
  // Default: ClientOptions::on_failure.
  FailurePolicy on_failure = FailurePolicy::kDefault;
  // kLocal: servers sharing the limit; 0 means ClientOptions::servers. Default: 0.
  int64_t servers = 0;
  // Answer repeated checks of a refused id from the client's denial cache until its
  // retry_after (source kCachedDenial). Refunds and resets through this client forget
  // the id's entry; another process's refund is seen after retry_after at the latest.
  // Default: true.
  bool cache_denials = true;
  // Shadow mode, for dark-launching a limit: checks are evaluated and counted, but a
  // refusal is returned as allowed with Decision::shadow_refused set. Default: false.
  bool shadow = false;
  // For limits an eviction must not reset (sign-in, OTP): refuse to run on a store whose
  // maxmemory-policy can evict sluice's keys. MakeLimiter fails FailedPrecondition when
  // the client's latest reading says so; a limiter made before is answered by its
  // failure policy (as for a store that cannot answer) while a reading says so.
  // Default: false.
  bool refuse_evicting_store = false;
  // Block duration (a penalty box): once a check of an id is refused over the limit, the
  // id stays refused for this long, whatever the cost and whatever its algorithm would
  // allow meanwhile (Decision::blocked, retry_after the block's remaining time). Decided
  // in the same script as the refusal and stored in the store with its expiry beside the
  // id's key (`<key>.blk`, the same hash slot), so every process agrees; the denial cache
  // answers the block's checks of any cost without a store call (cache_denials). A check
  // during a block does not extend it; a refused Peek, a cost larger than the limit and
  // a Debit start none (docs/algorithms.md, "Block duration"). Reset clears it. Set to 0,
  // an existing block stops holding at the next check (limits are arguments). Not with
  // local_budget or sync (InvalidArgument): they admit without asking the store.
  // 0 <= block_for <= kMaxWindow. Default: 0 (none).
  std::chrono::milliseconds block_for{0};
  // Local budgets for ids hotter than one store key should carry (fixed_window,
  // sliding_window, token_bucket, gcra; docs/design.md §7). When this process sees an id
  // called at least `hot_checks_per_second`, a check that goes to the store asks for
  // cost + a slice (about `slice_period` of the id's rate, at most `max_slice`) in the
  // same atomic step; later checks are admitted from the slice without a store call
  // (source kLocalBudget) until it is spent or its life ends. Never over the limit:
  // every unit of a slice was counted (or, for the buckets, withdrawn) by the store, and
  // is spent only while that keeps the algorithm's own bound: inside the window that
  // counted it (the window algorithms), or before the bucket would have refilled it
  // (the buckets: a slice of k lives reset_after - k / refill). The price: units left
  // in a slice when its life ends are not spent by anyone (at most servers x max_slice
  // per window, or at any moment for the buckets). Cold ids, Peek, Reset, per-call
  // limits and shadow mode take the plain path; a Reset also drops this process's slice
  // of the id (other processes' slices are spent until they end). A refund of a
  // kLocalBudget decision goes back to the slice while it lasts. Memory: a small entry
  // per id this limiter saw in the last two seconds (swept as the table grows). Off by
  // default.
  struct LocalBudget {
    bool enabled = false;
    int64_t hot_checks_per_second = 200;
    std::chrono::milliseconds slice_period{50};
    int64_t max_slice = 0;  // 0: limit / 10 (at least 1)
  };
  LocalBudget local_budget;
  // Co-location of several limits of one request in one Redis Cluster hash slot, so that
  // a CheckComposite over them is one script (docs/design.md §6). A script runs on one
  // slot only, and by default the slot of an id's keys is that of its limiter and id:
  // the limits of one request lie in different slots and a CheckComposite over them is
  // staged. Set, the slot of an id's keys is that of the part of the id before its first
  // `separator` (the whole id when it has none, or when that part is empty): limiters
  // that co-locate with the same separator put "acme:u42" (a user's limit), "acme" (the
  // tenant's) and "acme:/export" (the tenant's route) in the slot of "acme". The key
  // still names the limiter and the whole id, `<prefix>:{@<tag>}:<limiter>:<id>:<suffix>`
  // (tag and id encoded as in docs/design.md §2), so no two limiters or ids share a key
  // and an id holding `{` or `}` cannot move its key to another slot. A truly global
  // limit (one id for everyone) has one slot: co-locating it with every tenant would put
  // the whole fleet on one primary, so leave it staged (see CheckComposite).
  // Setting (or changing) it renames the limiter's keys: each id's count starts afresh,
  // as after renaming the limiter; a limiter that leaves it unset keeps its key names
  // exactly. Harmless on standalone Redis and the embedded store (one slot there anyway).
  // `separator`: printable ASCII, not a letter, digit or space (InvalidArgument
  // otherwise). Default: unset.
  struct Colocate {
    char separator = ':';
  };
  std::optional<Colocate> colocate;

  // Periodic sync for hot ids, for limits that prefer availability to exactness
  // (fixed_window only; docs/design.md §7, with the overshoot bound). When this process
  // sees an id called at least `hot_checks_per_second`, it counts the id's admissions
  // locally (source kLocalSync): it learns the id's window and what is left in it
  // (remaining) from the store, admits at most remaining / servers until its next sync,
  // and every `sync_interval` pushes what it admitted and learns the shared count in the
  // same call (one script call per id; the calls of all ids go out together, pipelined
  // and batched). A share spent before the interval is up is synced at once (the checks
  // wait for that reply), unless the last sync gave no share: then the id is refused
  // locally until the next interval. Approximate: the fleet may admit more than the
  // limit, by at most what the other processes admitted since each process's last sync
  // (docs/design.md §7 states it exactly). An id called less than hot_checks_per_second
  // in the last second returns to the exact shared path at the next interval (its last
  // count pushed first). When the store cannot be reached, the share already held keeps
  // being spent; past it, checks get the failure policy. A refund of a kLocalSync
  // decision gives nothing back (the unit stays counted: stricter). A Reset drops what
  // this process admitted and had not pushed, with its share. `servers` must be at
  // least the number of processes that count the id locally, or the bound does not
  // hold. One background thread per limiter with sync on (none with a model clock:
  // checks run the due syncs). Not with local_budget. Off by default.
  struct Sync {
    bool enabled = false;
    int64_t hot_checks_per_second = 200;
    std::chrono::milliseconds sync_interval{100};
    // How many processes share the limit (the N of remaining / N); 0: `servers` above,
    // else ClientOptions::servers.
    int64_t servers = 0;
  };
  Sync sync;
};

// The client's view of its store, for status pages and health checks.
// On a Redis Cluster each primary has a breaker of its own (docs/design.md §5): `breaker`
// is then the worst of their states (open, then half_open, then closed),
// consecutive_failures the highest, the counts their sums, probe_in the soonest probe.
struct StoreHealth {
  bool connected = true;  // the store takes calls now (Store connection up)
  std::string breaker;    // "closed", "open" or "half_open"
  int64_t consecutive_failures = 0;
  int64_t breaker_opens = 0;              // times the breaker opened since Create
  int64_t short_circuited = 0;            // checks answered by their policy without a store call
  std::chrono::milliseconds probe_in{0};  // open: until the next probe
  int64_t breaker_domains = 1;            // breakers: the cluster's primaries, else 1
  int64_t open_domains = 0;               // of those, open or half-open
  // Their names ("host:port" of a primary; "(no primary known)" for the calls of slots no
  // primary is known to serve); empty when every breaker is closed.
  std::vector<std::string> open_domain_names;
  // The store's memory policy as last read (ClientOptions::eviction_check_interval);
  // empty until a reading succeeds (or for the embedded store).
  std::string memory_policy;
  bool evicting = false;            // memory_policy can evict sluice's keys (not noeviction)
  int64_t evicted_keys = 0;         // the server's evicted_keys counter, as last read
  std::string memory_policy_error;  // why the latest reading failed; empty when it did not
  // Why the store is not connected (`connected` false): the latest connection attempt's
  // error, in the words Client::Create would return it without connect_in_background
  // ("redis 10.0.0.7:6379 answered: WRONGPASS invalid username-password pair or user is
  // disabled.", "cannot resolve redis host \"cache\": Host not found (authoritative)",
  // "CLUSTER SLOTS failed (is this server in cluster mode?): ERR This instance has cluster
  // support disabled"); "… connecting" before the first attempt has finished. It names
  // the server's address, never a password. Empty while connected (and for the embedded
  // store).
  std::string connection_error;
};

// Per-call settings for Check/CheckAsync.
struct CheckOptions {
  // Units this request spends; 1 ≤ cost ≤ kMaxLimit. A cost larger than the limit is a
  // refusal with RefusalReason::kCostExceedsLimit. Default: 1.
  int64_t cost = 1;
  // The limit for this call instead of the limiter's own (rule: limits are arguments).
  // Default: the limiter's limit.
  std::optional<Limit> limit;
  // Deadline for this call instead of ClientOptions::deadline. Default: the client's.
  std::optional<std::chrono::milliseconds> deadline;
  // Refund only: where the units being given back were counted — the `source` of the
  // Decision that admitted them. kStore (default): the shared store. kLocalFallback: this
  // process's local fallback store (the shared store never counted them). kFailOpen,
  // kFailClosed, kCachedDenial: nothing was counted, so nothing is given back (the
  // answer is allowed, with that source, and touches no store). A shadow-mode decision
  // that would have refused counted nothing either: do not refund it.
  DecisionSource counted_by = DecisionSource::kStore;
};

class Limiter;
struct LimitCheck;
struct CompositeDecision;
StatusOr<CompositeDecision> CheckComposite(std::span<const LimitCheck> checks,
                                           const CheckOptions& options);
using CompositeDecisionCallback = std::function<void(StatusOr<CompositeDecision>)>;
void CheckCompositeAsync(std::span<const LimitCheck> checks, const CheckOptions& options,
                         CompositeDecisionCallback done);

class Limiter {
 public:
  // Decides whether `id` may spend `options.cost` now, and spends it if so.
  // Returns a Decision (allowed or refused), or:
  //   InvalidArgument    — empty id, a cost or limit out of range;
  //   DeadlineExceeded   — the store did not answer within the deadline;
  //   Unavailable        — the store cannot be reached (connection down, reconnecting);
  //   FailedPrecondition — called on a client's I/O thread, or in a child forked after
  //                        the Client was created (both at once, without a store call).
  // Store errors come back only when the failure policy cannot answer; with kOpen,
  // kClosed and kLocal they are Decisions. Blocks the calling thread at most the
  // deadline (plus scheduling delay).
  StatusOr<Decision> Check(std::string_view id, const CheckOptions& options = {}) const;

  // As Check, without blocking: `done` is called exactly once with the result, on one of
  // the client's I/O threads, never inside CheckAsync (a result known at once — invalid
  // input, embedded store, open breaker, cached denial — is posted), so a callback may
  // check again without recursing. `done` must not block.
  void CheckAsync(std::string_view id, const CheckOptions& options, DecisionCallback done) const;

  // Reports the id's state now, spending nothing: `allowed` says whether a request of
  // `options.cost` would be admitted, `remaining` what is left now (before any
  // spending), `reset_after` until the state is full again, `retry_after` until a
  // request of that cost could pass. Same errors and deadline as Check.
  StatusOr<Decision> Peek(std::string_view id, const CheckOptions& options = {}) const;

  // Gives back `amount` units (e.g. the downstream call failed), never above the limit,
  // to the store that counted them (options.counted_by: pass the admitting Decision's
  // source). The Decision reports the state after the refund (allowed is true). A refund
  // with no spent state is a no-op. Same errors and deadline as Check.
  StatusOr<Decision> Refund(std::string_view id, int64_t amount,
                            const CheckOptions& options = {}) const;

  // Charges `cost` units of work already done (the tokens of a stream that has ended)
  // whether they fit or not: what does not fit becomes a debt of at most the limit (the
  // budget never goes below -limit; units past that are dropped, so a huge debit cannot
  // lock an id out for ever). The id's checks are then refused until its algorithm's own
  // recovery covers the debt: a fixed window at its end, a sliding window or log as it
  // slides, a bucket as its refill covers the debt (docs/algorithms.md, "Debt"). A Reset
  // clears it. The Decision answers for the id's next request of one unit: `allowed`
  // when it would pass now, `remaining` what is left (0 in debt), `debt` how far below
  // zero, `retry_after` until one unit passes, `reset_after` until the state is full.
  // Every algorithm takes it. Same errors and deadline as Refund (a
  // debit is no decision: a store that cannot answer returns its error, no failure
  // policy charges it, and it is never taken from a local budget or a periodic sync; a
  // local budget slice this process holds for the id is dropped, its units left counted).
  StatusOr<Decision> Debit(std::string_view id, int64_t cost,
                           const CheckOptions& options = {}) const;
  // As Debit, without blocking, with the guarantees of CheckAsync.
  void DebitAsync(std::string_view id, int64_t cost, const CheckOptions& options,
                  DecisionCallback done) const;

  // Forgets `id`: its state is full again. Same errors and deadline as Check.
  StatusOr<Decision> Reset(std::string_view id, const CheckOptions& options = {}) const;

  const std::string& name() const { return name_; }
  const Limit& limit() const { return limit_; }
  const LimiterOptions& options() const { return options_; }
  // The key this limiter uses for `id`, or InvalidArgument for an empty id.
  StatusOr<std::string> KeyFor(std::string_view id) const;

 private:
  void Execute(internal::Op op, std::string_view id, const CheckOptions& options,
               DecisionCallback done) const;
  // Sends a call made by MakeCall (shadow mode applied).
  void ExecuteCall(internal::CheckCall call, DecisionCallback done) const;
  // The store call for `op` on `id`, or InvalidArgument for bad input.
  Status MakeCall(internal::Op op, std::string_view id, const CheckOptions& options,
                  internal::CheckCall& call) const;
  StatusOr<Decision> ExecuteSync(internal::Op op, std::string_view id,
                                 const CheckOptions& options) const;
  // A consume through the local budget: from the id's slice, or a store call that asks
  // for cost + a slice when the id is hot.
  void ExecuteBudgeted(internal::CheckCall call, std::string id, DecisionCallback done) const;
  // Gives `units` a sliding_window slice did not spend back to the window ending at
  // `window_end_ms` (store clock), asynchronously.
  void GiveBackLeftover(std::string_view id, int64_t units, int64_t window_end_ms) const;
  int64_t BudgetNowMs() const;
  // Before a debit: drops the id's local budget slice (options_.local_budget).
  void DropSliceForDebit(std::string_view id) const;
  // A consume of a hot id under periodic sync (options_.sync).
  void ExecuteSynced(internal::CheckCall call, std::string id, DecisionCallback done) const;

  friend class Client;
  friend void CheckCompositeAsync(std::span<const LimitCheck> checks, const CheckOptions& options,
                                  CompositeDecisionCallback done);
  friend class internal::CompositeRun;
  friend StatusOr<ResetResult> ResetCounter(const Limiter& limiter, std::string_view id,
                                            const AdminAction& action, const AuditOptions& audit,
                                            std::chrono::milliseconds deadline);
  Limiter(std::shared_ptr<internal::ClientCore> core, std::string name, Limit limit,
          LimiterOptions options);

  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
  Limit limit_;
  LimiterOptions options_;
  // The key of `id` under `algorithm` (plain, or co-located by options_.colocate).
  std::string KeyOf(std::string_view id, Algorithm algorithm) const;

  std::string key_head_;  // "<prefix>:{<name>:"
  // Slices of hot ids' budgets, shared by copies of this limiter (options_.local_budget).
  std::shared_ptr<internal::LocalBudgets> budgets_;
  // Hot ids' local counts and the thread that syncs them (options_.sync).
  std::shared_ptr<internal::SyncedCounts> synced_;
};

// One check against several limits (docs/design.md §6), most specific first: e.g. user,
// then tenant, then global.
struct LimitCheck {
  const Limiter* limiter;
  std::string_view id;
};

struct CompositeDecision {
  // Allowed: the admitted limit with the least remaining (what a response's rate limit
  // headers should show). Refused: the limit that refused.
  Decision decision;
  std::size_t decided_by = 0;  // index into the checks
  // Allowed: every limit's decision, in the order of the checks (each with the request
  // counted), so a caller can report each limit's state; `decision` is one of them.
  // Refused: empty (the limits after the refusing one were not read).
  std::vector<Decision> decisions;
};

// Admits a request of `options.cost` only if every limit admits it, and leaves it counted
// against all of them only then, so a flood that one limit refuses does not spend the
// wider limits (a tenant's flood cannot take the other tenants' share of a global limit).
// Two paths:
//  - One step, when every limiter is on the same Client, that client's store is Redis
//    (standalone: one server holds every key; Redis Cluster: when every key lies in one
//    hash slot, see LimiterOptions::colocate) or the embedded store, and no limiter is in
//    shadow mode: Redis runs one composite script (one EVALSHA) that peeks every limit
//    and consumes them only if all would admit; the embedded store does the same under
//    its locks. Exact: no other caller ever sees a refused request counted. A cached
//    denial of any limit refuses at once without a store call; when the store fails (or
//    the breaker is open) each limit gets its own failure policy, in order,
//    all-or-nothing (the local fallback is given back when a later limit's policy
//    refuses). One deadline for the whole call. Blocks at most that deadline.
//  - Staged, otherwise (limiters on different clients, keys in different cluster slots,
//    or a shadow limiter, which must never make the composite refuse): the limits are
//    checked in order, most specific first, and when one refuses the ones that already
//    admitted are refunded. Neighbours in `checks` that could go as one step (same
//    client, same slot, no shadow) go as one step of the stages: user and tenant limits
//    co-located by tenant, then a global limit, is two stages, not three. Bounded
//    inaccuracy of this path: between a limit's admission and its refund, other callers
//    see the request counted there (at most the cost of the composite checks in flight),
//    and a refund the store cannot take (it went down in between) leaves the request
//    counted: it may over-count, never under-count. Blocks up to one deadline per stage.
// Staged refunds go where each limit counted the request (the shared store, or the local
// fallback for a limit its policy admitted locally); a limit that counted nothing
// (fail_open, or a shadow limit that would have refused) is not refunded.
// The same limiter and id listed twice spend the cost twice; such a composite's refusal
// describes the state the refusing check saw (including the other listing's spending,
// given back afterwards), so it is never kept in the denial cache.
// Refused: `decided_by` is the first limit in order that refused. `options.limit` is
// ignored (each limiter's own limit applies). Errors: those of Limiter::Check.
StatusOr<CompositeDecision> CheckComposite(std::span<const LimitCheck> checks,
                                           const CheckOptions& options = {});

// As CheckComposite, without blocking (the same two paths, decisions and errors; the
// staged path's refunds are made before `done` runs). `done` is called exactly once, on
// one of the client's I/O threads (of the first limiter's client), never inside
// CheckCompositeAsync, so a callback may check again without recursing; it must neither
// block nor throw. The one exception: an empty `checks`, or a first LimitCheck without
// a limiter, names no client to deliver on, and gets InvalidArgument inline.
// `checks` (the limiters and the ids) need only live until CheckCompositeAsync returns:
// the call keeps what it needs.
void CheckCompositeAsync(std::span<const LimitCheck> checks, const CheckOptions& options,
                         CompositeDecisionCallback done);

class Client {
  friend class internal::ClientFactory;

 public:
  // Connects to options.url: resolves, connects, authenticates, selects the database,
  // checks that Redis is ≥ 7.0 and loads the scripts, within options.connect_timeout.
  // Returns InvalidArgument (bad URL or options), Unavailable (cannot connect),
  // PermissionDenied (AUTH/ACL refused), FailedPrecondition (Redis older than 7.0) or
  // DeadlineExceeded (no answer in time). Blocks at most connect_timeout. With
  // connect_in_background it only checks the options (InvalidArgument) and returns at
  // once: connection errors then show in calls and in Health().
  static StatusOr<std::shared_ptr<Client>> Create(ClientOptions options);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A limiter named `name` (letters, digits, `_.-`; 1–64 bytes) enforcing `limit`.
  // InvalidArgument for a bad name or limit. Cheap; does not touch the store.
  StatusOr<Limiter> MakeLimiter(std::string_view name, const Limit& limit,
                                const LimiterOptions& options = {}) const;

  // A concurrency limiter (sluice/lease.h) named `name` (as MakeLimiter). InvalidArgument
  // for a bad name or options. Cheap; does not touch the store.
  StatusOr<ConcurrencyLimiter> MakeConcurrencyLimiter(std::string_view name,
                                                      const ConcurrencyOptions& options) const;

  // Quota shares (sluice/quota.h) named `name` (as MakeLimiter): its buckets' keys are
  // `<prefix>:{<name>:<id>}:qs`, apart from any limiter's of the same name.
  // InvalidArgument for a bad name. Cheap; does not touch the store.
  StatusOr<QuotaShares> MakeQuotaShares(std::string_view name) const;

  // Every metric of this client (sluice/metrics.h lists them). Thread-safe; O(tracked
  // lease ids).
  std::vector<MetricSample> Metrics() const;

  // The circuit breaker's state and counters. Thread-safe, cheap.
  StoreHealth Health() const;

  const ClientOptions& options() const;
  // All zero for the embedded store. Thread-safe, cheap.
  ClientStats stats() const;

  // The store server's INFO text for `section` ("server", "commandstats", "cpu", …), for
  // operators' tools and benchmarks. FailedPrecondition for the embedded store; the
  // errors of Check otherwise. Blocks up to `deadline`.
  StatusOr<std::string> ServerInfo(
      std::string_view section, std::chrono::milliseconds deadline = std::chrono::seconds(2)) const;

 private:
  explicit Client(std::shared_ptr<internal::ClientCore> core) : core_(std::move(core)) {}
  std::shared_ptr<internal::ClientCore> core_;
};

}  // namespace sluice

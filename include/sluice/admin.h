// sluice/admin.h — operators' access to the keys sluice keeps under a prefix: scan them
// with their type and expiry, read and decode one id's state, give leaked keys (no
// expiry) an expiry; and the audited actions (release an id's leases, reset its counter,
// set or clear a runtime override of its limit).
// The `sluice` CLI's audit, repair, inspect, top, release and reset are built on it.
//
//   auto admin = sluice::Admin::Connect({.url = "redis://127.0.0.1:6379", .prefix = "sluice"});
//   if (!admin.ok()) { /* admin.status() names the problem */ }
//   Status s = (*admin)->Scan({}, [](const sluice::ScanBatch& batch) { ...; return true; });
//
// Everything here is SCAN-based (never KEYS) and pipelined, so it is safe on a server
// that serves traffic: Redis answers other clients between batches. Nothing here deletes
// a key, and nothing touches a key that is not of sluice's layout (a *foreign* key).
//
// Thread-safety: an Admin may be used from one thread at a time; its calls block the
// calling thread (each bounded by AdminOptions::command_timeout per round trip, up to
// 3 attempts). No exception crosses this API.
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
#include <utility>
#include <vector>

#include "sluice/decision.h"
#include "sluice/lease.h"
#include "sluice/status.h"

namespace sluice {

class Client;   // sluice/client.h
class Limiter;  // sluice/client.h

// An operator's action, for the audit record: both fields required, UTF-8 text without
// control characters.
struct AdminAction {
  std::string actor;   // who (required)
  std::string reason;  // why (required)
};

// Where audit records of admin actions go (ClientOptions has none of this: a process
// that never releases by hand needs nothing).
struct AuditOptions {
  // Append-only JSON-lines file, one record per action; required. The record is
  // written (and fsync'ed) before the store is touched, so an action that cannot be
  // recorded is not done, and an action is never done unrecorded; its outcome is then
  // written into the same line (see ReleaseAll below).
  std::string log_path;
  // Also append each record to the Redis stream `<prefix>:audit`, trimmed to about
  // stream_max_len entries and expiring stream_retention after the last record (every
  // sluice key expires). Default: off.
  bool stream = false;
  int64_t stream_max_len = 10000;
  std::chrono::milliseconds stream_retention{std::chrono::hours(24 * 30)};
};

struct ReleaseAllResult {
  int64_t released = 0;  // live leases removed
  std::string record;    // the audit record written (one JSON line, no newline)
  // AuditOptions::stream: why the stream did not get the record (empty when it did, or
  // when not asked). The file has it either way.
  std::string stream_error;
};

// Operators: releases every lease of `limiter`'s `id` in one atomic step, recorded by one line of
// audit.log_path: {"ts","op","action":"release_all","actor","reason","limiter","id",
// "key","outcome",...} (id as encoded in keys: printable ASCII, %XX for other bytes;
// op: a random id of this action). The line is written before the store is touched
// with "outcome":"pending" (a line left so means the process died in between: the
// release may have happened), then completed in place: "done" with "store_ms" and
// "released"; "unknown" with "error" when the store did not answer in time or the
// connection broke (the release may have happened, or may still happen when a stalled
// Redis resumes: inspect the id); "failed" with "error" for an error reply (it did
// not happen). On "done" only, the record also goes to the stream when asked.
// InvalidArgument without actor or reason, or when they are not well-formed UTF-8
// without control characters (nothing is written or released); FailedPrecondition
// when the log cannot be opened or written (nothing is released); the store's error
// (its message says the outcome is recorded) otherwise. Holders of the released
// leases learn at their next heartbeat (LeaseLoss::kGone). `deadline` bounds the store
// call; the two writes of the log line (each fsync'd) come before and after it, and take
// what the disk takes.
StatusOr<ReleaseAllResult> ReleaseAll(const ConcurrencyLimiter& limiter, std::string_view id,
                                      const AdminAction& action, const AuditOptions& audit,
                                      std::chrono::milliseconds deadline = std::chrono::seconds(2));

struct ResetResult {
  Decision after;      // the store's answer to the reset: the id's state is full again
  std::string record;  // the audit record written (one JSON line, no newline)
  // AuditOptions::stream: why the stream did not get the record (empty when it did, or
  // when not asked). The file has it either way.
  std::string stream_error;
};

// Operators: resets `limiter`'s counter of `id` (Limiter::Reset: the id's state under
// the limiter's algorithm is forgotten, so its whole limit is available again) as one
// audited action, recorded by one line of audit.log_path exactly as ReleaseAll records a
// release: {"ts","op","action":"reset","actor","reason","limiter","algorithm","id","key",
// "outcome",...}, written with "outcome":"pending" before the store is touched, then
// completed in place: "done" (the key named was reset); "unknown" or "failed" with
// "error" as for ReleaseAll. On "done" only, the record also goes to the
// stream when asked. Errors as ReleaseAll's. The key reset is the one the limiter names
// for `id` (its algorithm's, co-located or not as the limiter is): pass a limiter of the
// algorithm and LimiterOptions::colocate the id's state was written with; its limit plays
// no part. This process's denial cache and local budget of the id are dropped with it;
// another process answers a refusal it cached until that refusal's retry_after (when the
// request would have passed without the reset), and spends a local budget slice it holds
// until the slice ends.
// A concurrency limit has no counter to reset: release its leases (ReleaseAll).
StatusOr<ResetResult> ResetCounter(const Limiter& limiter, std::string_view id,
                                   const AdminAction& action, const AuditOptions& audit,
                                   std::chrono::milliseconds deadline = std::chrono::seconds(2));

// An operator's runtime override of one id's limit (SetOverride), as the store holds it.
struct RuntimeOverride {
  std::string limiter;
  std::string id;
  // The limit in force for the id instead of the limiter's (0: every request refused).
  int64_t limit = 0;
  // The window (refill period for token_bucket and gcra); 0: the limiter's own.
  std::chrono::milliseconds window{0};
  int64_t expires_at_ms = 0;  // when it ends, on the store's clock (Redis TIME)
  int64_t set_at_ms = 0;      // when it was set, on the store's clock
  std::string actor;
  std::string reason;
};

// What SetOverride sets.
struct OverrideSpec {
  // The id's limit while the override lasts: 0 to kMaxLimit. 0 refuses every request
  // (and acquire) of the id, without a store call, until it ends. Default: none.
  int64_t limit = 0;
  // The window (refill period) to go with it; 0: the limiter's own. Ignored by a
  // concurrency limit. Default: 0.
  std::chrono::milliseconds window{0};
  // How long it lasts: 1 s to kMaxOverrideTtl. Default: none.
  std::chrono::seconds ttl{0};
};

// At most this many runtime overrides in force per limiter, each for at most
// kMaxOverrideTtl.
inline constexpr int64_t kMaxOverridesPerLimiter = 1000;
inline constexpr std::chrono::seconds kMaxOverrideTtl{30 * 24 * 3600};

struct OverrideResult {
  // Set: whether it was stored (always true when OK). Clear: whether the id had an
  // override in force (false: nothing was cleared).
  bool changed = false;
  std::optional<RuntimeOverride> before;  // the override in force before (replaced or cleared)
  std::optional<RuntimeOverride> after;   // set: the override now in force
  std::string record;                     // the audit record written (one JSON line)
  // AuditOptions::stream: why the stream did not get the record (empty when it did, or
  // when not asked). The file has it either way.
  std::string stream_error;
};

// Operators: sets a runtime override of `limiter`'s limit for `id` for `spec.ttl`, in one
// script on the store's clock (src/algo/overrides.lua), replacing the id's earlier one.
// Every client of the store (this process's at once, every other sluiced and library
// client within 1 s plus one round trip: ClientOptions::runtime_overrides) then decides
// the id's checks with it, whatever the limiter's limit or a call's CheckOptions::limit,
// until it ends or is cleared; Decision::limit_source is then kRuntimeOverride. The
// override lives in one hash per limiter (`<prefix>:{overrides}:<limiter>`), which expires
// with its longest override. While the store cannot be reached, every client keeps
// applying the overrides it last read until each ends.
// Audited as ResetCounter is: {"ts","op","action":"override_set","actor","reason",
// "limiter","algorithm","id","key","limit","window_ms","ttl_s","outcome",...}, written
// with "outcome":"pending" before the store is touched, then completed in place: "done"
// with what it replaced ("old":"runtime" or "limiter", "old_limit", "old_window_ms": the
// earlier override's, or the limiter's own), or "unknown"/"failed" as for ReleaseAll;
// "refused" when the limiter has kMaxOverridesPerLimiter overrides in force already.
// Errors: those of ResetCounter; InvalidArgument for a limit or ttl out of range or an id
// longer than 512 bytes; FailedPrecondition, saying so, when kMaxOverridesPerLimiter
// other ids have an override in force (nothing is set: clear one, or wait for one to end).
// Blocks up to `deadline`.
StatusOr<OverrideResult> SetOverride(const Limiter& limiter, std::string_view id,
                                     const OverrideSpec& spec, const AdminAction& action,
                                     const AuditOptions& audit,
                                     std::chrono::milliseconds deadline = std::chrono::seconds(2));
// A concurrency limit's: the override's limit is the cap on live leases (spec.window is
// ignored); 0 refuses every acquire of the id. Leases already held are kept.
StatusOr<OverrideResult> SetOverride(const ConcurrencyLimiter& limiter, std::string_view id,
                                     const OverrideSpec& spec, const AdminAction& action,
                                     const AuditOptions& audit,
                                     std::chrono::milliseconds deadline = std::chrono::seconds(2));

// Operators: ends `id`'s runtime override now (every client within the bound above).
// Audited as SetOverride ("action":"override_clear"; the outcome "done" with
// "cleared":true and the old limit, or "cleared":false when the id had none). Errors as
// ResetCounter's. Blocks up to `deadline`.
StatusOr<OverrideResult> ClearOverride(
    const Limiter& limiter, std::string_view id, const AdminAction& action,
    const AuditOptions& audit, std::chrono::milliseconds deadline = std::chrono::seconds(2));
StatusOr<OverrideResult> ClearOverride(
    const ConcurrencyLimiter& limiter, std::string_view id, const AdminAction& action,
    const AuditOptions& audit, std::chrono::milliseconds deadline = std::chrono::seconds(2));

// As SetOverride and ClearOverride above, for a limiter named rather than made (an
// operator's tool that knows neither its algorithm nor its limit): the record says
// "old":"limiter" without the limiter's own limit, and names no algorithm.
StatusOr<OverrideResult> SetOverride(const Client& client, std::string_view limiter,
                                     std::string_view id, const OverrideSpec& spec,
                                     const AdminAction& action, const AuditOptions& audit,
                                     std::chrono::milliseconds deadline = std::chrono::seconds(2));
StatusOr<OverrideResult> ClearOverride(
    const Client& client, std::string_view limiter, std::string_view id, const AdminAction& action,
    const AuditOptions& audit, std::chrono::milliseconds deadline = std::chrono::seconds(2));

// The runtime overrides of the named limiters in force now, read from the store (at most
// kMaxOverridesPerLimiter each), ordered by limiter, then id. The store's errors
// (Unavailable, DeadlineExceeded); FailedPrecondition in a forked child. Blocks up to
// `deadline`.
StatusOr<std::vector<RuntimeOverride>> ListOverrides(
    const Client& client, std::span<const std::string> limiters,
    std::chrono::milliseconds deadline = std::chrono::seconds(2));

struct AdminOptions {
  // Where the state lives: a redis://, rediss://, redis+sentinel://, unix:// or
  // redis+cluster:// URL as in ClientOptions::url (the embedded memory:// store has
  // nothing to administer). On a cluster the slot map is read at Connect and every
  // primary is connected: Scan visits each in turn, every script call carries keys of one
  // slot, and ReadKeys, Inspect and ExpireIfNone send each key to its slot's primary. A
  // slot moved after Connect makes calls on its keys fail with the redirection (connect
  // again). Default: "redis://127.0.0.1:6379".
  std::string url = "redis://127.0.0.1:6379";
  // The key prefix to work on (ClientOptions::prefix). Default: "sluice".
  std::string prefix = "sluice";
  // Deadline of connecting and authenticating. Default: 2000 ms.
  std::chrono::milliseconds connect_timeout{2000};
  // Deadline of each round trip (one SCAN batch with its PTTL/TYPE, one EXPIRE batch).
  // Scan and ExpireIfNone send a round trip that misses it again (3 attempts in all);
  // the connection is closed (calls in flight fail Unavailable) when Redis sends nothing
  // for 3 x command_timeout. Default: 10 s.
  std::chrono::milliseconds command_timeout{10000};
  // SCAN's COUNT hint: keys examined per batch. Default: 1000.
  std::size_t scan_count = 1000;
};

enum class KeyType { kNone, kString, kList, kSet, kZset, kHash, kStream, kOther };

// "none", "string", "list", "set", "zset", "hash", "stream", "other".
std::string_view KeyTypeName(KeyType type);

// A key of sluice's layout, `<prefix>:{<limiter>:<encoded id>}:<suffix>` or, for a
// co-located limiter (LimiterOptions::colocate), `<prefix>:{@<encoded tag>}:<limiter>:
// <encoded id>:<suffix>`; or the audit stream of operators' actions, `<prefix>:audit`
// (suffix "audit", limiter and ids empty). A quota shares bucket (sluice/quota.h) is of
// the first form, suffix "qs" (the limiter is the QuotaShares' name, the id the bucket's).
// A limiter's runtime overrides (SetOverride) are `<prefix>:{overrides}:<limiter>`
// (suffix "ovr", the id empty).
struct KeyName {
  std::string limiter;
  std::string encoded_id;         // as written in the key (see docs/library.md, Keys)
  std::optional<std::string> id;  // decoded; nullopt for a hashed id (`#` + SHA-256)
  std::string suffix;             // fw2, sw, sl, tb, gcra, cc, qs, audit, or fw
                                  // (fixed_window before v2: read, never written)
  // A co-located key's tag as written in it (the part of the id that chose its slot);
  // empty for every other key.
  std::string encoded_slot_tag;
};

// Parses `key` under `prefix`. nullopt when it is not of sluice's layout: another
// prefix, a limiter name or suffix sluice never writes, or an id that is not in
// sluice's canonical encoding.
std::optional<KeyName> ParseKeyName(std::string_view prefix, std::string_view key);

// The Redis type sluice stores under `suffix`: kString for fw2, fw, sw, tb, gcra; kZset for
// sl and cc; kHash for qs and ovr; kStream for audit; kNone for a suffix sluice does not
// write.
KeyType ExpectedKeyType(std::string_view suffix);

// The algorithm a suffix stands for: "fixed_window", …, "concurrency", "quota_shares",
// "audit_log", "runtime_overrides"; "" if none.
std::string_view SuffixAlgorithm(std::string_view suffix);

// One key seen by Scan.
struct ScannedKey {
  std::string key;
  KeyType type = KeyType::kNone;
  // PTTL: ms left, -1 no expiry (a leak), -2 gone between SCAN and PTTL.
  int64_t ttl_ms = -2;
  // Set when the key is of sluice's layout and holds the type its suffix says.
  std::optional<KeyName> name;
  // Sorted sets of sluice (sl, cc): members (ZCARD). -1 otherwise.
  int64_t members = -1;
  // Concurrency sets (cc): leases whose expiry (score) is at or before the batch's `now_ms`
  // — holders that died or lost their lease and that no acquire has pruned yet. -1
  // otherwise.
  int64_t stale = -1;
  // With ScanOptions::read_leaked_values, for a key without an expiry: when its state is
  // over, on the Redis clock. Read from the value for fixed_window's earlier `fw` keys
  // (window end), token_bucket (full again), gcra (TAT) and concurrency (last lease
  // expiry): exact (see KeyState::ends_at_ms). fixed_window `fw2` (the window end was the
  // key's expiry): now + kMaxWindow, `ends_at_is_bound` set. sliding_window: window start + 2
  // windows (the state counts the current and the previous window), with the window its value
  // records, or kMaxWindow (366 days) for a value of the earlier form that records none;
  // sliding_log, whose entries hold no window: newest entry + kMaxWindow; for both
  // `ends_at_is_bound` is set. -1 otherwise (a value that does not decode).
  int64_t ends_at_ms = -1;
  bool ends_at_is_bound = false;

  // Under the prefix but not sluice's (layout or type): never touched by repair.
  bool foreign() const { return !name.has_value() && type != KeyType::kNone; }
};

struct ScanBatch {
  std::vector<ScannedKey> keys;
  int64_t now_ms = 0;   // the Redis clock (TIME) when the batch was scanned
  int64_t scanned = 0;  // keys returned by SCAN so far, this batch and repeats included
  int64_t repeats = 0;  // with ScanOptions::distinct: keys dropped so far as repeats
  // Where SCAN stands after this batch: pass it as ScanOptions::cursor to go on from
  // here (a scan stopped by on_batch loses nothing; some keys may come again). "0" once
  // the scan has walked the whole keyspace. On a cluster "<node>:<cursor>" (the primary,
  // in the order of its first slot, and its SCAN cursor), valid for the same Admin.
  std::string cursor;
};

struct ScanOptions {
  // Only keys of this limiter (SCAN MATCH narrows to it). Default: all limiters.
  std::string limiter;
  // Also read the value of keys without an expiry, to fill ScannedKey::ends_at_ms (what
  // repair needs). Default: false.
  bool read_leaked_values = false;
  // Where to start: "0" (the beginning) or a ScanBatch::cursor of an earlier scan with
  // the same limiter, to go on where it stopped. Default: "0".
  std::string cursor = "0";
  // Report each key once, although SCAN may return a key more than once (when the
  // table is resized during the scan): remembers a 64-bit hash of every key reported,
  // 11–22 bytes a key (16 MiB for a million keys). Two distinct keys share a hash
  // with probability about n²/2⁶⁵ (under 10⁻⁶ for 6 million keys): the second would be
  // taken for a repeat. Default: false (repeats are reported again).
  bool distinct = false;
};

// One decoded field of a key's value: {"count", 3}, {"window_end_ms", …}.
struct StateField {
  std::string name;
  int64_t value = 0;
};

// One key read and decoded by ReadKeys.
struct KeyState {
  std::string key;
  std::optional<KeyName> name;  // nullopt: foreign (or missing)
  KeyType type = KeyType::kNone;
  int64_t ttl_ms = -2;  // as ScannedKey::ttl_ms
  // Empty when the value decoded; otherwise why it is not sluice's (a script that reads
  // it would delete it).
  std::string problem;
  // The algorithm's state in its own terms (docs/operating.md, inspect, lists them).
  std::vector<StateField> fields;
  // How much of the budget the state holds now: units counted (fw2, fw, sw, sl), tokens
  // missing (tb), ms until full (gcra), live leases (cc); `used_unit` says which.
  // -1 when unknown.
  int64_t used = -1;
  std::string used_unit;
  // When the state is over by its own value (window end, bucket full again, last lease
  // expiry), on the Redis clock; -1 when the value does not say (sw and sl store no
  // window length) or the key is foreign.
  int64_t ends_at_ms = -1;
  // cc: every lease (live and stale), soonest expiry first, at most kMaxLeasesRead of
  // them; acquired_at_ms is -1 for a member not of the form `<acquired at ms>:<token>`.
  // A lease is live while now < expires_at_ms (concurrency.lua).
  std::vector<LeaseInfo> leases;
  int64_t members = -1;  // zsets: ZCARD
};

inline constexpr std::size_t kMaxLeasesRead = 10000;

// The state of one id under one limiter: one entry per algorithm key that exists.
struct IdState {
  std::string limiter;
  std::string id;
  std::string encoded_id;
  int64_t now_ms = 0;  // the Redis clock when read
  std::vector<KeyState> keys;
};

// What ExpireIfNone did.
struct ExpireResult {
  int64_t set = 0;      // keys that had no expiry and got one
  int64_t had_ttl = 0;  // keys that already had one (left alone)
  int64_t missing = 0;  // keys that no longer existed
  // Keys that held another Redis type than sluice stores under their suffix (replaced by
  // another application since they were scanned): left alone.
  int64_t foreign = 0;
};

class Admin {
 public:
  // Connects to options.url (authenticates, selects the database, checks Redis >= 7.0).
  // Returns InvalidArgument (bad URL or prefix, memory://), Unavailable (cannot connect),
  // PermissionDenied (AUTH/ACL refused), FailedPrecondition (Redis < 7.0) or
  // DeadlineExceeded. Blocks at most connect_timeout plus a second.
  static StatusOr<std::unique_ptr<Admin>> Connect(AdminOptions options);
  ~Admin();
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  const AdminOptions& options() const;

  // DBSIZE: keys in the selected database (all prefixes; on a cluster, the primaries'
  // sum), for progress estimates.
  StatusOr<int64_t> DbSize();

  // The Redis clock (TIME) in ms (on a cluster, the first primary's).
  StatusOr<int64_t> NowMs();

  // Each node's maxmemory-policy and count of evicted keys (INFO memory and stats; on a
  // cluster, every primary's): a policy other than noeviction can evict sluice's keys
  // (they all carry an expiry), and an evicted id starts over with its whole limit.
  struct MemoryPolicy {
    std::string node;          // host:port
    std::string policy;        // maxmemory_policy
    bool can_evict = false;    // any policy but noeviction
    int64_t evicted_keys = 0;  // evicted_keys since the server started
  };
  StatusOr<std::vector<MemoryPolicy>> MemoryPolicies();

  // SCANs every key matching `<prefix>:*` (or `<prefix>:{<limiter>:*`), in batches of
  // about scan_count keys; each batch's TYPE and PTTL (and ZCARD, and for cc the stale
  // leases) are read by one read-only script call (about a millisecond of Redis time)
  // while the next SCAN is already in flight. A round trip that misses its deadline is
  // sent again (3 attempts in all: all of it is read-only).
  // Calls `on_batch` once per batch on the calling thread; stops early (returning OK)
  // when it returns false. `on_batch` may call this Admin's other methods (not Scan).
  // A key may be reported twice (SCAN's guarantee) unless ScanOptions::distinct, and
  // keys created during the scan may be missed. Errors: InvalidArgument (bad limiter
  // name or cursor), DeadlineExceeded/Unavailable (the server stopped answering),
  // Internal.
  Status Scan(const ScanOptions& options, const std::function<bool(const ScanBatch&)>& on_batch);

  // Reads and decodes `keys` (type, expiry, value) in one pipelined round trip.
  // Keys not of sluice's layout come back with name unset and no fields. Errors as Scan.
  StatusOr<std::vector<KeyState>> ReadKeys(std::span<const std::string> keys);

  // Every algorithm key of one id under `limiter`, decoded: the plain keys and the
  // co-located ones (LimiterOptions::colocate, whatever its separator: every tag the id
  // can have is read). InvalidArgument for a bad limiter name or an empty id. Errors as
  // Scan.
  StatusOr<IdState> Inspect(std::string_view limiter, std::string_view id);

  // For each (key, ttl): gives the key an expiry of ttl if, at that moment, it exists,
  // holds the Redis type sluice stores under its suffix (ExpectedKeyType) and has no
  // expiry; all three checked in the same script call that sets the expiry, so a key
  // replaced by another application's value, or given an expiry, after it was scanned
  // is left alone. Nothing is deleted. Every key must be of sluice's layout under the
  // prefix (InvalidArgument names the first that is not, and nothing is changed);
  // ttl >= 1 s. One script call per 1,000 keys, at most 4 in flight, each with its own
  // deadline (AdminOptions::command_timeout): the time taken grows with the number of
  // keys, never the deadline of one call. A call that misses its deadline is sent again
  // (3 attempts in all; the script is idempotent: keys the late attempt set then count
  // in had_ttl). Errors as Scan (chunks before the failing one have been applied).
  StatusOr<ExpireResult> ExpireIfNone(
      std::span<const std::pair<std::string, std::chrono::seconds>> keys);

  struct Impl;

 private:
  explicit Admin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice

// The embedded store: every algorithm's in-memory twin behind the Store interface, for
// single-server use, tests, and the local fallback policy. State of one process only;
// keys expire on the store's clock like Redis keys do.
//
// Memory follows the live keys: every entry is filed in an index by its expiry, and
// expired entries are freed (reclaimed) two ways, each a bounded amount of work:
// - By the calls: each call reclaims up to kReclaimPerCall entries whose expiry has
//   passed in its own shard, and as many in one other shard (the next of a per-thread
//   rotation, if its lock is free), whichever ids the calls are for (one busy id visits
//   every shard every kShards calls).
// - By a step every kStepPeriod (ReclaimStep) that a Client runs on its I/O thread, on
//   its embedded store (memory://) and on its local fallback's store, whatever calls
//   arrive: none at all, only refusals the denial cache answers (they never reach the
//   store), or only calls to Redis while the fallback's store holds what it counted when
//   Redis was down. A step visits the next kShardsPerStep shards of the store's own
//   rotation, each under its own lock, up to kReclaimPerCall entries each: at most
//   kShardsPerStep x kReclaimPerCall = 2,048 entries examined per step, one shard's lock
//   held at a time for at most 64 of them. Every shard is visited every
//   kShards / kShardsPerStep steps (160 ms), so a shard's m reclaimable entries are gone
//   within ceil(m / 64) x 160 ms, with no call at all: N expired entries spread over the
//   shards within about N / (kShards x kReclaimPerCall) x 160 ms (one million: ~10 s).
// An entry becomes reclaimable up to kSlotMs after its expiry (its index slot must be
// over). A store used without a Client (tests, benchmarks) gets only the calls' share,
// unless its owner runs ReclaimStep.
// What is not bounded per call: a shard's hash table grows by rehashing all of its
// entries at once (std::unordered_map), one shard of kShards at a time. It keeps its
// slot array (8 bytes per slot, as many slots as the shard's peak entries) when entries
// go: shrinking it frees a large block, which makes glibc's malloc consolidate every
// small block freed since (the freed keys): measured, one call then took 190-290 ms
// after two million ids were freed (bench/memory_store_bench.cc).
//
// Thread-safety: thread-safe; sharded by key so threads rarely contend.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "algo/block.h"
#include "algo/concurrency.h"
#include "algo/fixed_window.h"
#include "algo/gcra.h"
#include "algo/quota_shares.h"
#include "algo/sliding_log.h"
#include "algo/sliding_window.h"
#include "algo/token_bucket.h"
#include "core/mutex.h"
#include "sluice/clock.h"
#include "store/store.h"
#include "store/wakeups.h"

namespace sluice::internal {

class MemoryStore final : public Store {
 public:
  // `clock` decides when keys expire and is the time of calls without now_ms.
  explicit MemoryStore(std::shared_ptr<const Clock> clock);

  void Check(CheckCall call, DecisionCallback done) override;
  StatusOr<Decision> CheckNow(const CheckCall& call);
  // Under the locks of every key's shard: peek all, then consume all (as the composite
  // script does on Redis).
  std::optional<uint32_t> CompositeGroup(std::string_view) const override { return 0; }
  void CheckComposite(CompositeCall call, CompositeCallback done) override;
  void RunLease(LeaseCall call, LeaseCallback done) override;
  // A release or a waiter leaving wakes the lease set's watchers, as on Redis.
  LeaseResult LeaseNow(const LeaseCall& call);
  std::shared_ptr<void> WatchLeaseSet(const std::string& key, std::function<void()> wake) override {
    return wakeups_->Watch(key, std::move(wake));
  }
  // The twin of src/algo/quota_shares.lua on the key's state; the entry expires with its
  // latest client (plus the scripts' grace under a model clock), so reclaim frees it.
  void AssignQuota(QuotaCall call, QuotaCallback done) override;
  QuotaShareReply QuotaNow(const QuotaCall& call);

  // Live (unexpired) keys; for tests and gauges. O(entries).
  std::size_t KeyCount();
  // Entries held, expired ones not yet reclaimed included: what the store's memory
  // follows. For tests and benchmarks.
  std::size_t EntryCount();

  // Index slots are this long: an entry is reclaimable once its slot is over, i.e. up
  // to kSlotMs after it expired.
  static constexpr int64_t kSlotMs = 1024;
  // The most entries one call examines in the expiry index (frees, or refiles when a
  // later call moved their expiry).
  static constexpr int kReclaimPerCall = 64;
  static constexpr std::size_t kShards = 256;
  // The periodic reclaim: shards visited per step, and how often a Client runs a step.
  static constexpr std::size_t kShardsPerStep = 32;
  static constexpr std::chrono::milliseconds kStepPeriod{20};
  static_assert(kShards % kShardsPerStep == 0, "a rotation visits every shard once");

  // One step of the periodic reclaim: the next kShardsPerStep shards of the store's
  // rotation, each under its own lock, up to kReclaimPerCall entries each, on the store's
  // clock. Returns the entries it freed.
  std::size_t ReclaimStep();

 private:
  // Keys carry their algorithm's suffix, so one key only ever holds one kind of state.
  // A block (BlockState) lives at `<key>.blk`, filed in the shard of `<key>` (the
  // gate reads both under one lock).
  using AnyState =
      std::variant<FixedWindowState, SlidingWindowState, SlidingLogState, TokenBucketState,
                   GcraState, LeaseSetState, QuotaShareState, BlockState>;
  // Lives in its shard's map node (never moved: node addresses survive rehashing), and
  // in one list of the shard's expiry index while `slot` is set.
  struct Entry {
    AnyState state;
    int64_t expires_at_ms = 0;
    // The index slot it is filed under: its expiry's slot when filed. A later expiry
    // leaves it there (refiled when the slot comes due); an earlier one moves it.
    std::optional<int64_t> slot;
    Entry* prev = nullptr;
    Entry* next = nullptr;
    const std::string* key = nullptr;  // the map node's own key
  };
  using Map = std::unordered_map<std::string, Entry>;
  struct Shard {
    Mutex mu;
    Map entries SLUICE_GUARDED_BY(mu);
    // Expiry index: slot (expiry / kSlotMs) -> the first entry of that slot's list.
    std::map<int64_t, Entry*> slots SLUICE_GUARDED_BY(mu);
  };

  Shard& ShardFor(const std::string& key);
  static int64_t SlotOf(int64_t ms);
  static void File(Shard& shard, Entry& entry) SLUICE_REQUIRES(shard.mu);
  static void Unfile(Shard& shard, Entry& entry) SLUICE_REQUIRES(shard.mu);
  // Stores the state a step left (`it`: the key's entry, or end()), filed by its expiry;
  // erases the entry when the step left none.
  template <typename State>
  static void Keep(Shard& shard, Map::iterator it, const std::string& key,
                   std::optional<State>& state, int64_t expires_at_ms) SLUICE_REQUIRES(shard.mu);
  // Frees up to kReclaimPerCall entries of the shard whose slot is over; the caller
  // holds the shard's lock. Returns the entries it freed.
  static std::size_t Reclaim(Shard& shard, int64_t now_ms) SLUICE_REQUIRES(shard.mu);
  // Reclaim in the next shard of this thread's rotation, unless its lock is taken. Called
  // with no lock held.
  void ReclaimElsewhere(int64_t now_ms);
  CompositeOutcome DecideMany(const std::vector<CheckCall>& calls);
  // Runs `step(state, now)` on the key's State (a set of members with expiries: lease sets,
  // quota buckets; empty when absent, expired or of another kind) under the shard's lock,
  // and keeps it until its latest member's expiry (plus the scripts' grace under a model
  // clock), or erases the entry when the step left it empty. Returns what `step` returns.
  template <typename State, typename Step>
  auto StepExpiringSet(const std::string& key, std::optional<int64_t> now_ms, Step step);
  // Runs `algorithm`'s twin on the key's state, under the block gate when the call
  // names a block or resets (src/algo/block.h); the caller holds the shard's lock.
  static AlgoReply StepLocked(Shard& shard, const std::string& key, const AlgoArgs& args,
                              Algorithm algorithm, int64_t now) SLUICE_REQUIRES(shard.mu);
  // The twin alone, without the gate.
  static AlgoReply DecideLocked(Shard& shard, const std::string& key, const AlgoArgs& args,
                                Algorithm algorithm, int64_t now) SLUICE_REQUIRES(shard.mu);
  // Starts a block of `block_ms` at `key` over the refusal `refused` (the composite's, for
  // a limit whose peek refused).
  static AlgoReply StartBlockLocked(Shard& shard, const std::string& key, int64_t block_ms,
                                    int64_t now, const AlgoReply& refused)
      SLUICE_REQUIRES(shard.mu);
  // Runs one twin on the key's state under the shard's lock.
  template <typename State, typename Step>
  static AlgoReply Apply(Shard& shard, const std::string& key, const AlgoArgs& args, int64_t now_ms,
                         Step step) SLUICE_REQUIRES(shard.mu);

  std::shared_ptr<const Clock> clock_;
  std::array<Shard, kShards> shards_;
  std::atomic<std::size_t> step_rotation_{0};  // ReclaimStep's next shard
  // Waiting acquires' watches (bounded as the Redis store's subscriber bounds them).
  std::shared_ptr<Wakeups> wakeups_ = std::make_shared<Wakeups>(10000);
};

}  // namespace sluice::internal

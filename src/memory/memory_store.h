// The embedded store: every algorithm's in-memory twin behind the Store interface, for
// single-server use, tests, and (later) the local fallback policy. State of one process
// only; keys expire on the store's clock like Redis keys do.
//
// Thread-safety: thread-safe; sharded by key so threads rarely contend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <variant>

#include "algo/fixed_window.h"
#include "algo/gcra.h"
#include "algo/sliding_log.h"
#include "algo/sliding_window.h"
#include "algo/token_bucket.h"
#include "core/store.h"
#include "lease/concurrency.h"
#include "sluice/clock.h"

namespace sluice::internal {

class MemoryStore final : public Store {
 public:
  // `clock` decides when keys expire and is the time of calls without now_ms.
  explicit MemoryStore(std::shared_ptr<const Clock> clock);

  void Check(CheckCall call, DecisionCallback done) override;
  StatusOr<Decision> CheckNow(const CheckCall& call);
  // Under the locks of every key's shard: peek all, then consume all (as the composite
  // script does on Redis).
  bool ChecksManyAtOnce() const override { return true; }
  void CheckMany(MultiCheckCall call, MultiDecisionCallback done) override;
  void Lease(LeaseCall call, LeaseCallback done) override;
  LeaseResult LeaseNow(const LeaseCall& call);

  // Live (unexpired) keys; for tests and gauges.
  std::size_t KeyCount();

 private:
  // Keys carry their algorithm's suffix, so one key only ever holds one kind of state.
  using AnyState = std::variant<FixedWindowState, SlidingWindowState, SlidingLogState,
                                TokenBucketState, GcraState, LeaseSetState>;
  struct Entry {
    AnyState state;
    int64_t expires_at_ms = 0;
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, Entry> entries;
    std::size_t next_sweep_at = 1024;
  };
  static constexpr std::size_t kShards = 16;

  Shard& ShardFor(const std::string& key);
  // Drops expired entries once the shard has doubled since the last sweep: memory stays
  // bounded by twice the live keys at an amortized O(1) per call.
  static void MaybeSweep(Shard& shard, int64_t now_ms);
  MultiDecision DecideMany(const std::vector<CheckCall>& calls);
  // Runs `algorithm`'s twin on the key's state; the caller holds the shard's lock.
  static AlgoReply StepLocked(Shard& shard, const std::string& key, const AlgoArgs& args,
                              Algorithm algorithm, int64_t now);
  // Runs one twin on the key's state under the shard's lock.
  template <typename State, typename Step>
  static AlgoReply Apply(Shard& shard, const std::string& key, const AlgoArgs& args,
                         int64_t now_ms, Step step);

  std::shared_ptr<const Clock> clock_;
  std::array<Shard, kShards> shards_;
};

}  // namespace sluice::internal

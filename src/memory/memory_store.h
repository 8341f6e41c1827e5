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

#include "algo/fixed_window.h"
#include "core/store.h"
#include "sluice/clock.h"

namespace sluice::internal {

class MemoryStore final : public Store {
 public:
  // `clock` decides when keys expire and is the time of calls without now_ms.
  explicit MemoryStore(std::shared_ptr<const Clock> clock);

  void Check(CheckCall call, DecisionCallback done) override;
  StatusOr<Decision> CheckNow(const CheckCall& call);

  // Live (unexpired) keys; for tests and gauges.
  std::size_t KeyCount();

 private:
  struct Entry {
    FixedWindowState fixed_window;
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

  std::shared_ptr<const Clock> clock_;
  std::array<Shard, kShards> shards_;
};

}  // namespace sluice::internal

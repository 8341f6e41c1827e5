// Cached denials: once the store refused a key until time T (retry_after), later checks
// of that key with the same limit and the same cost (any cost and limit, when the
// refusal was a block's: Decision::blocked) are refused here until T, without a store
// call — a flood from one refused id costs Redis one call per denial
// period. Bounded: an LRU of `capacity` keys (16 shards). A refund or reset of the key
// from this process drops its entry, and a refusal of a check sent before that refund or
// reset began is not cached when it arrives after it (the store decided it before the
// refund ran): each key hashes to a generation that Forget advances, and Record keeps a
// refusal only when its key's generation is still the one read when the check was sent
// (keys sharing a generation only lose a cache entry, never keep a stale one). A refund
// made by another process is not seen, so a cached denial can outlast it by at most its
// retry_after.
//
// Thread-safety: thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "sluice/decision.h"
#include "sluice/limits.h"

#include "core/mutex.h"

namespace sluice::internal {

class DenialCache {
 public:
  explicit DenialCache(std::size_t capacity);

  // The cached refusal for a check of `cost` under `limit` at `now_ms`, if one holds.
  std::optional<Decision> Lookup(const std::string& key, const Limit& limit, int64_t cost,
                                 int64_t now_ms);
  // The generation of `key` now: read when a check is sent, given back to Record.
  uint64_t Generation(const std::string& key) const;
  // Records the store's decision for a consume sent at `generation`; keeps refusals
  // that say when to retry, unless a refund or reset of the key began since.
  void Record(const std::string& key, const Limit& limit, int64_t cost, const Decision& decision,
              int64_t now_ms, uint64_t generation);
  // A refund or reset of `key` begins: its refusal is over, and so is every refusal of
  // it still on its way.
  void Forget(const std::string& key);

  std::size_t size();

 private:
  struct Entry {
    std::string key;
    Limit limit;
    int64_t cost = 0;
    int64_t remaining = 0;
    int64_t retry_at_ms = 0;
    int64_t reset_at_ms = 0;
    bool blocked = false;  // a block's refusal: answers every cost and limit
  };
  struct Shard {
    Mutex mu;
    std::list<Entry> lru SLUICE_GUARDED_BY(mu);  // most recent first
    std::unordered_map<std::string, std::list<Entry>::iterator> index SLUICE_GUARDED_BY(mu);
  };
  static constexpr std::size_t kShards = 16;
  static constexpr std::size_t kGenerations = 4096;
  Shard& ShardFor(std::size_t hash);
  const std::atomic<uint64_t>& GenerationOf(std::size_t hash) const {
    return generations_[(hash / kShards) % kGenerations];
  }

  const std::size_t per_shard_;
  std::array<Shard, kShards> shards_;
  // Advanced (before the entry is dropped) by Forget; compared under the shard's lock.
  std::array<std::atomic<uint64_t>, kGenerations> generations_{};
};

}  // namespace sluice::internal

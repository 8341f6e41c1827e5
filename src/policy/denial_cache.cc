#include "policy/denial_cache.h"

#include <algorithm>
#include <chrono>
#include <functional>

namespace sluice::internal {
namespace {

bool SameLimit(const Limit& a, const Limit& b) {
  return a.algorithm == b.algorithm && a.limit == b.limit && a.window == b.window &&
         a.refill == b.refill && a.aligned == b.aligned;
}

}  // namespace

DenialCache::DenialCache(std::size_t capacity)
    : per_shard_(std::max<std::size_t>(1, (capacity + kShards - 1) / kShards)) {}

DenialCache::Shard& DenialCache::ShardFor(std::size_t hash) {
  return shards_[hash % kShards];
}

uint64_t DenialCache::Generation(const std::string& key) const {
  return GenerationOf(std::hash<std::string>{}(key)).load(std::memory_order_acquire);
}

std::optional<Decision> DenialCache::Lookup(const std::string& key, const Limit& limit,
                                            int64_t cost, int64_t now_ms) {
  Shard& shard = ShardFor(std::hash<std::string>{}(key));
  MutexLock lock(shard.mu);
  auto it = shard.index.find(key);
  if (it == shard.index.end()) return std::nullopt;
  const Entry& e = *it->second;
  if (now_ms >= e.retry_at_ms) {
    shard.lru.erase(it->second);
    shard.index.erase(it);
    return std::nullopt;
  }
  // Only the same request is answered here: a different limit (a plan change) or a
  // smaller cost may pass, and a larger cost waits longer than the cached retry_after
  // (or can never pass): ask the store.
  // A block holds whatever the request (the store would answer the same).
  if (!e.blocked && (!SameLimit(e.limit, limit) || cost != e.cost)) return std::nullopt;
  Decision d;
  d.allowed = false;
  d.limit = limit.limit;
  d.remaining = e.remaining;
  d.retry_after = std::chrono::milliseconds(e.retry_at_ms - now_ms);
  d.reset_after = std::chrono::milliseconds(std::max<int64_t>(e.reset_at_ms - now_ms, 0));
  d.reason = RefusalReason::kOverLimit;
  d.blocked = e.blocked;
  d.source = DecisionSource::kCachedDenial;
  return d;
}

void DenialCache::Record(const std::string& key, const Limit& limit, int64_t cost,
                         const Decision& decision, int64_t now_ms, uint64_t generation) {
  const std::size_t hash = std::hash<std::string>{}(key);
  Shard& shard = ShardFor(hash);
  MutexLock lock(shard.mu);
  // A refund or reset that began after the check was sent may have run before or after
  // the check in the store: its refusal may be over already.
  const bool keep = !decision.allowed && decision.reason == RefusalReason::kOverLimit &&
                    decision.source == DecisionSource::kStore && decision.retry_after.count() > 0 &&
                    GenerationOf(hash).load(std::memory_order_acquire) == generation;
  auto it = shard.index.find(key);
  if (it != shard.index.end()) {
    shard.lru.erase(it->second);
    shard.index.erase(it);
  }
  if (!keep) return;
  shard.lru.push_front(Entry{key, limit, cost, decision.remaining,
                             now_ms + decision.retry_after.count(),
                             now_ms + decision.reset_after.count(), decision.blocked});
  shard.index.emplace(key, shard.lru.begin());
  if (shard.lru.size() > per_shard_) {
    shard.index.erase(shard.lru.back().key);
    shard.lru.pop_back();
  }
}

void DenialCache::Forget(const std::string& key) {
  const std::size_t hash = std::hash<std::string>{}(key);
  Shard& shard = ShardFor(hash);
  MutexLock lock(shard.mu);
  generations_[(hash / kShards) % kGenerations].fetch_add(1, std::memory_order_acq_rel);
  auto it = shard.index.find(key);
  if (it == shard.index.end()) return;
  shard.lru.erase(it->second);
  shard.index.erase(it);
}

std::size_t DenialCache::size() {
  std::size_t n = 0;
  for (Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    n += shard.lru.size();
  }
  return n;
}

}  // namespace sluice::internal

#include "memory/memory_store.h"

#include <functional>

namespace sluice::internal {

MemoryStore::MemoryStore(std::shared_ptr<const Clock> clock) : clock_(std::move(clock)) {}

MemoryStore::Shard& MemoryStore::ShardFor(const std::string& key) {
  return shards_[std::hash<std::string>{}(key) % kShards];
}

void MemoryStore::MaybeSweep(Shard& shard, int64_t now_ms) {
  if (shard.entries.size() < shard.next_sweep_at) return;
  std::erase_if(shard.entries, [now_ms](const auto& kv) { return kv.second.expires_at_ms <= now_ms; });
  shard.next_sweep_at = std::max<std::size_t>(1024, 2 * shard.entries.size());
}

StatusOr<Decision> MemoryStore::CheckNow(const CheckCall& call) {
  const int64_t now = call.now_ms ? *call.now_ms : clock_->NowMs();
  Shard& shard = ShardFor(call.key);
  std::lock_guard lock(shard.mu);
  MaybeSweep(shard, now);

  std::optional<FixedWindowState> state;
  auto it = shard.entries.find(call.key);
  if (it != shard.entries.end()) {
    if (it->second.expires_at_ms > now) {
      state = it->second.fixed_window;
    } else {
      shard.entries.erase(it);
      it = shard.entries.end();
    }
  }
  FixedWindowArgs args{call.limit.limit, call.limit.window.count(), call.cost, call.limit.aligned};
  FixedWindowOutcome outcome = FixedWindowStep(state, args, now);
  if (outcome.code == 1) {
    Entry& entry = it != shard.entries.end() ? it->second : shard.entries[call.key];
    entry.fixed_window = *state;
    entry.expires_at_ms = state->ends_ms;
  }
  return FixedWindowDecision(outcome, call.limit.limit);
}

void MemoryStore::Check(CheckCall call, DecisionCallback done) { done(CheckNow(call)); }

std::size_t MemoryStore::KeyCount() {
  const int64_t now = clock_->NowMs();
  std::size_t live = 0;
  for (Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    for (const auto& [key, entry] : shard.entries) live += entry.expires_at_ms > now;
  }
  return live;
}

}  // namespace sluice::internal

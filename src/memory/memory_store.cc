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

template <typename State, typename Step>
AlgoReply MemoryStore::Apply(Shard& shard, const std::string& key, const AlgoArgs& args,
                             int64_t now_ms, Step step) {
  std::optional<State> state;
  auto it = shard.entries.find(key);
  if (it != shard.entries.end() && it->second.expires_at_ms > now_ms) {
    if (State* stored = std::get_if<State>(&it->second.state)) state = std::move(*stored);
  }
  int64_t expires_at_ms = 0;
  AlgoReply reply = step(state, args, now_ms, expires_at_ms);
  if (state) {
    if (it == shard.entries.end()) it = shard.entries.try_emplace(key).first;
    it->second.state = std::move(*state);
    it->second.expires_at_ms = expires_at_ms;
  } else if (it != shard.entries.end()) {
    shard.entries.erase(it);
  }
  return reply;
}

StatusOr<Decision> MemoryStore::CheckNow(const CheckCall& call) {
  const int64_t now = call.now_ms ? *call.now_ms : clock_->NowMs();
  const AlgoArgs args = ArgsFor(call.op, call.cost, call.limit);
  Shard& shard = ShardFor(call.key);
  std::lock_guard lock(shard.mu);
  MaybeSweep(shard, now);
  AlgoReply reply;
  switch (call.limit.algorithm) {
    case Algorithm::kFixedWindow:
      reply = Apply<FixedWindowState>(shard, call.key, args, now, FixedWindowStep);
      break;
    case Algorithm::kSlidingWindow:
      reply = Apply<SlidingWindowState>(shard, call.key, args, now, SlidingWindowStep);
      break;
    case Algorithm::kSlidingLog:
      reply = Apply<SlidingLogState>(shard, call.key, args, now, SlidingLogStep);
      break;
    case Algorithm::kTokenBucket:
      reply = Apply<TokenBucketState>(shard, call.key, args, now, TokenBucketStep);
      break;
    case Algorithm::kGcra:
      reply = Apply<GcraState>(shard, call.key, args, now, GcraStep);
      break;
  }
  return MakeDecision(reply, call.limit.limit);
}

void MemoryStore::Check(CheckCall call, DecisionCallback done) { done(CheckNow(call)); }

LeaseResult MemoryStore::LeaseNow(const LeaseCall& call) {
  const int64_t now = call.now_ms ? *call.now_ms : clock_->NowMs();
  // Expiries get the same grace as the scripts give them under a model clock.
  const int64_t grace = call.now_ms ? 60000 : 0;
  Shard& shard = ShardFor(call.key);
  std::lock_guard lock(shard.mu);
  MaybeSweep(shard, now);
  LeaseSetState state;
  auto it = shard.entries.find(call.key);
  if (it != shard.entries.end() && it->second.expires_at_ms > now) {
    if (auto* stored = std::get_if<LeaseSetState>(&it->second.state)) state = std::move(*stored);
  }
  LeaseResult result{LeaseStep(state, call.args, now)};
  if (!state.members.empty()) {
    if (it == shard.entries.end()) it = shard.entries.try_emplace(call.key).first;
    it->second.expires_at_ms = state.MaxExpiry() + grace;
    it->second.state = std::move(state);
  } else if (it != shard.entries.end()) {
    shard.entries.erase(it);
  }
  return result;
}

void MemoryStore::Lease(LeaseCall call, LeaseCallback done) { done(LeaseNow(call)); }

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

#include "memory/memory_store.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

namespace sluice::internal {

MemoryStore::MemoryStore(std::shared_ptr<const Clock> clock) : clock_(std::move(clock)) {}

MemoryStore::Shard& MemoryStore::ShardFor(const std::string& key) {
  return shards_[std::hash<std::string>{}(key) % kShards];
}

int64_t MemoryStore::SlotOf(int64_t ms) {
  return ms >= 0 ? ms / kSlotMs : -((-ms + kSlotMs - 1) / kSlotMs);  // floor
}

void MemoryStore::File(Shard& shard, Entry& entry) {
  const int64_t slot = SlotOf(entry.expires_at_ms);
  entry.slot = slot;
  entry.prev = nullptr;
  auto [head, inserted] = shard.slots.try_emplace(slot, &entry);
  if (inserted) {
    entry.next = nullptr;
  } else {
    entry.next = head->second;
    head->second->prev = &entry;
    head->second = &entry;
  }
}

void MemoryStore::Unfile(Shard& shard, Entry& entry) {
  if (!entry.slot) return;
  if (entry.next != nullptr) entry.next->prev = entry.prev;
  if (entry.prev != nullptr) {
    entry.prev->next = entry.next;
  } else {
    auto head = shard.slots.find(*entry.slot);
    if (entry.next != nullptr) {
      head->second = entry.next;
    } else {
      shard.slots.erase(head);
    }
  }
  entry.slot.reset();
  entry.prev = entry.next = nullptr;
}

std::size_t MemoryStore::Reclaim(Shard& shard, int64_t now_ms) {
  std::size_t freed = 0;
  int budget = kReclaimPerCall;
  while (budget-- > 0 && !shard.slots.empty()) {
    const auto first = shard.slots.begin();
    // Every expiry in the slot is at or before its last ms: over once now reaches it.
    if (first->first * kSlotMs + kSlotMs - 1 > now_ms) break;
    Entry& entry = *first->second;
    Unfile(shard, entry);
    if (entry.expires_at_ms <= now_ms) {
      shard.entries.erase(shard.entries.find(*entry.key));
      ++freed;
    } else {
      File(shard, entry);  // a later call moved its expiry: into a later slot
    }
  }
  return freed;
}

void MemoryStore::ReclaimElsewhere(int64_t now_ms) {
  thread_local std::size_t rotation = 0;
  Shard& shard = shards_[rotation++ % kShards];
  if (!shard.mu.try_lock()) return;
  Reclaim(shard, now_ms);
  shard.mu.unlock();
}

std::size_t MemoryStore::ReclaimStep() {
  const std::size_t first = step_rotation_.fetch_add(kShardsPerStep, std::memory_order_relaxed);
  const int64_t now = clock_->NowMs();
  std::size_t freed = 0;
  for (std::size_t i = 0; i < kShardsPerStep; ++i) {
    Shard& shard = shards_[(first + i) % kShards];
    MutexLock lock(shard.mu);
    freed += Reclaim(shard, now);
  }
  return freed;
}

template <typename State>
void MemoryStore::Keep(Shard& shard, Map::iterator it, const std::string& key,
                       std::optional<State>& state, int64_t expires_at_ms) {
  if (!state) {
    if (it != shard.entries.end()) {
      Unfile(shard, it->second);
      shard.entries.erase(it);
    }
    return;
  }
  if (it == shard.entries.end()) {
    it = shard.entries.try_emplace(key).first;
    it->second.key = &it->first;
  }
  Entry& entry = it->second;
  entry.state = std::move(*state);
  entry.expires_at_ms = expires_at_ms;
  if (!entry.slot || SlotOf(expires_at_ms) < *entry.slot) {
    Unfile(shard, entry);
    File(shard, entry);
  }
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
  Keep(shard, it, key, state, expires_at_ms);
  return reply;
}

AlgoReply MemoryStore::StepLocked(Shard& shard, const std::string& key, const AlgoArgs& args,
                                  Algorithm algorithm, int64_t now) {
  if (!BlockGated(args)) return DecideLocked(shard, key, args, algorithm, now);
  const std::string block_key = key + ".blk";
  const AlgoReply blocked = Apply<BlockState>(shard, block_key, args, now, BlockBefore);
  if (blocked.code != kNotBlocked) return blocked;
  const AlgoReply decided = DecideLocked(shard, key, args, algorithm, now);
  return Apply<BlockState>(shard, block_key, args, now,
                           [&decided](std::optional<BlockState>& block, const AlgoArgs& a,
                                      int64_t at, int64_t& expires_at_ms) {
                             return BlockAfter(block, a, at, decided, expires_at_ms);
                           });
}

AlgoReply MemoryStore::StartBlockLocked(Shard& shard, const std::string& key, int64_t block_ms,
                                        int64_t now, const AlgoReply& refused) {
  return Apply<BlockState>(
      shard, key + ".blk", AlgoArgs{}, now,
      [&](std::optional<BlockState>& block, const AlgoArgs&, int64_t at, int64_t& expires_at_ms) {
        return StartBlock(block, block_ms, at, refused, expires_at_ms);
      });
}

AlgoReply MemoryStore::DecideLocked(Shard& shard, const std::string& key, const AlgoArgs& args,
                                    Algorithm algorithm, int64_t now) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
      return Apply<FixedWindowState>(shard, key, args, now, FixedWindowStep);
    case Algorithm::kSlidingWindow:
      return Apply<SlidingWindowState>(shard, key, args, now, SlidingWindowStep);
    case Algorithm::kSlidingLog:
      return Apply<SlidingLogState>(shard, key, args, now, SlidingLogStep);
    case Algorithm::kTokenBucket:
      return Apply<TokenBucketState>(shard, key, args, now, TokenBucketStep);
    case Algorithm::kGcra: return Apply<GcraState>(shard, key, args, now, GcraStep);
  }
  return AlgoReply{};
}

StatusOr<Decision> MemoryStore::CheckNow(const CheckCall& call) {
  const int64_t now = call.now_ms ? *call.now_ms : clock_->NowMs();
  const AlgoArgs args = ArgsFor(call.op, call.cost, call.limit, call.block_ms);
  Shard& shard = ShardFor(call.key);
  AlgoReply reply;
  {
    MutexLock lock(shard.mu);
    Reclaim(shard, now);
    reply = StepLocked(shard, call.key, args, call.limit.algorithm, now);
  }
  ReclaimElsewhere(now);
  return MakeDecision(reply, call.limit.limit, call.op);
}

void MemoryStore::CheckComposite(CompositeCall call, CompositeCallback done) {
  if (call.calls.empty()) {
    done(InvalidArgumentError("a composite check takes at least one limit"));
    return;
  }
  CompositeOutcome decided = DecideMany(call.calls);  // `done` runs with no lock held
  ReclaimElsewhere(call.calls[0].now_ms ? *call.calls[0].now_ms : clock_->NowMs());
  done(std::move(decided));
}

// The analysis cannot follow a set of locks taken in a loop: every shard of `calls` is
// locked (in `locks`) before the first step and held until the return.
CompositeOutcome MemoryStore::DecideMany(const std::vector<CheckCall>& calls)
    SLUICE_NO_THREAD_SAFETY_ANALYSIS {
  // The shards of every key, locked in index order (so two composites cannot deadlock):
  // the same steps as src/algo/composite.lua, with one `now` for all.
  std::vector<Shard*> shards;
  for (const CheckCall& c : calls) shards.push_back(&ShardFor(c.key));
  std::vector<Shard*> order = shards;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::vector<std::unique_lock<Mutex>> locks;
  for (Shard* s : order) locks.emplace_back(s->mu);
  const int64_t now = calls[0].now_ms ? *calls[0].now_ms : clock_->NowMs();
  for (Shard* s : order) Reclaim(*s, now);
  const auto step = [&](std::size_t i, Op op) SLUICE_NO_THREAD_SAFETY_ANALYSIS {
    const CheckCall& c = calls[i];
    return StepLocked(*shards[i], c.key, ArgsFor(op, c.cost, c.limit, c.block_ms),
                      c.limit.algorithm, now);
  };
  // Peek all but the last, consume the last (a refused consume changes nothing), then
  // consume the others. A limit whose peek refused over its limit starts its block.
  const std::size_t last = calls.size() - 1;
  for (std::size_t i = 0; i < last; ++i) {
    AlgoReply r = step(i, Op::kPeek);
    if (r.code == 0 && calls[i].block_ms > 0) {
      r = StartBlockLocked(*shards[i], calls[i].key, calls[i].block_ms, now, r);
    }
    if (r.code != 1) return CompositeOutcome{i, {MakeDecision(r, calls[i].limit.limit)}};
  }
  CompositeOutcome out;
  out.decisions.resize(calls.size());
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const std::size_t i = k == 0 ? last : k - 1;
    const AlgoReply r = step(i, Op::kConsume);
    if (r.code != 1) {
      // Only when a key is listed twice: one consume spent what the other's peek saw.
      if (k > 0) {
        for (std::size_t j = i; j-- > 0;) step(j, Op::kRefund);
        step(last, Op::kRefund);
      }
      return CompositeOutcome{i, {MakeDecision(r, calls[i].limit.limit)}};
    }
    out.decisions[i] = MakeDecision(r, calls[i].limit.limit);
  }
  return out;
}

void MemoryStore::Check(CheckCall call, DecisionCallback done) {
  done(CheckNow(call));
}

template <typename State, typename Step>
auto MemoryStore::StepExpiringSet(const std::string& key, std::optional<int64_t> now_ms,
                                  Step step) {
  const int64_t now = now_ms ? *now_ms : clock_->NowMs();
  // Expiries get the same grace as the scripts give them under a model clock.
  const int64_t grace = now_ms ? kModelClockGraceMs : 0;
  Shard& shard = ShardFor(key);
  decltype(step(std::declval<State&>(), now)) result;
  {
    MutexLock lock(shard.mu);
    Reclaim(shard, now);
    std::optional<State> state(std::in_place);
    auto it = shard.entries.find(key);
    if (it != shard.entries.end() && it->second.expires_at_ms > now) {
      if (auto* stored = std::get_if<State>(&it->second.state)) *state = std::move(*stored);
    }
    result = step(*state, now);
    const int64_t expires_at_ms = state->empty() ? 0 : state->MaxExpiry() + grace;
    if (state->empty()) state.reset();
    Keep(shard, it, key, state, expires_at_ms);
  }
  ReclaimElsewhere(now);
  return result;
}

LeaseResult MemoryStore::LeaseNow(const LeaseCall& call) {
  LeaseResult result = StepExpiringSet<LeaseSetState>(
      call.key, call.now_ms, [&call](LeaseSetState& state, int64_t now) {
        return LeaseResult{LeaseStep(state, call.args, now)};
      });
  if (call.args.op == LeaseOp::kRelease || call.args.op == LeaseOp::kLeave) {
    wakeups_->Notify(call.key);
  }
  return result;
}

void MemoryStore::RunLease(LeaseCall call, LeaseCallback done) {
  done(LeaseNow(call));
}

QuotaShareReply MemoryStore::QuotaNow(const QuotaCall& call) {
  return StepExpiringSet<QuotaShareState>(call.key, call.now_ms,
                                          [&call](QuotaShareState& state, int64_t now) {
                                            return QuotaShareStep(state, call.args, now);
                                          });
}

void MemoryStore::AssignQuota(QuotaCall call, QuotaCallback done) {
  done(QuotaNow(call));
}

std::size_t MemoryStore::KeyCount() {
  const int64_t now = clock_->NowMs();
  std::size_t live = 0;
  for (Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (const auto& [key, entry] : shard.entries) live += entry.expires_at_ms > now;
  }
  return live;
}

std::size_t MemoryStore::EntryCount() {
  std::size_t held = 0;
  for (Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    held += shard.entries.size();
  }
  return held;
}

}  // namespace sluice::internal

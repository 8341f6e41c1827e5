#include "client/overrides.h"

#include <mutex>

#include "core/keys.h"

namespace sluice::internal {
namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

OverrideCopy::OverrideCopy(HeartbeatScheduler& scheduler, Store& store, std::string prefix,
                           std::shared_ptr<const Clock> model_clock)
    : scheduler_(scheduler),
      store_(store),
      prefix_(std::move(prefix)),
      model_clock_(std::move(model_clock)) {}

bool OverrideCopy::Track(std::string_view limiter) {
  bool start = false;
  {
    std::unique_lock lock(mu_);
    if (!copies_.contains(std::string(limiter))) {
      if (copies_.size() >= kMaxLimiters) return false;
      copies_.emplace(std::string(limiter), LimiterCopy{});
    }
    start = !started_;
    started_ = true;
    if (start) ScheduleLocked(HeartbeatScheduler::Clock::now());
  }
  return true;
}

void OverrideCopy::Changed(const std::string& limiter, const std::string& id,
                           const OverrideEntry* set) {
  {
    std::unique_lock lock(mu_);
    auto copy = copies_.find(limiter);
    if (copy != copies_.end()) {
      if (set) {
        copy->second.entries[id] = *set;
      } else {
        copy->second.entries.erase(id);
      }
      copy->second.counter = -1;  // the next refresh reads the hash whole
      bool any = false;
      for (const auto& [name, c] : copies_) any = any || !c.entries.empty();
      any_.store(any, std::memory_order_release);
    }
  }
  RefreshNow();
}

void OverrideCopy::RefreshNow() {
  std::unique_lock lock(mu_);
  if (!started_) return;
  if (outstanding_ > 0) {
    again_ = true;
    return;
  }
  ScheduleLocked(HeartbeatScheduler::Clock::now());
}

void OverrideCopy::ScheduleLocked(HeartbeatScheduler::Clock::time_point at) {
  // One refresh pending at a time: a new one replaces it. (The scheduler never calls Due
  // holding its own lock, so taking it under mu_ cannot deadlock.)
  if (scheduled_) scheduler_.Cancel(*scheduled_);
  scheduled_ = scheduler_.Schedule(at, weak_from_this());
}

int64_t OverrideCopy::StoreNowMs() const {
  if (model_clock_) return model_clock_->NowMs();
  return SteadyMs() + offset_ms_.load(std::memory_order_relaxed);
}

std::optional<OverrideCopy::Applied> OverrideCopy::Find(std::string_view limiter,
                                                        std::string_view id) const {
  if (!any_.load(std::memory_order_acquire)) return std::nullopt;
  std::shared_lock lock(mu_);
  const auto copy = copies_.find(std::string(limiter));
  if (copy == copies_.end()) return std::nullopt;
  const auto e = copy->second.entries.find(std::string(id));
  if (e == copy->second.entries.end()) return std::nullopt;
  const int64_t left = e->second.expires_at_ms - StoreNowMs();
  if (left <= 0) return std::nullopt;
  return Applied{e->second.limit, e->second.window_ms, e->second.expires_at_ms, left};
}

void OverrideCopy::Due() {
  std::vector<std::vector<std::string>> chunks;
  std::vector<std::vector<int64_t>> known;
  {
    std::unique_lock lock(mu_);
    if (outstanding_ > 0) return;                    // the round in flight schedules the next
    if (scheduled_) scheduler_.Cancel(*scheduled_);  // this round schedules the next
    scheduled_.reset();
    for (const auto& [name, copy] : copies_) {
      if (chunks.empty() || chunks.back().size() == kKeysPerCall) {
        chunks.emplace_back();
        known.emplace_back();
      }
      chunks.back().push_back(name);
      known.back().push_back(copy.counter);
    }
    if (paused_.load(std::memory_order_relaxed)) chunks.clear();
    outstanding_ = static_cast<int>(chunks.size());
    again_ = false;
    if (chunks.empty()) {
      ScheduleLocked(HeartbeatScheduler::Clock::now() + kPeriod);
      return;
    }
  }
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    OverrideCall call;
    call.op = OverrideOp::kRead;
    for (const std::string& name : chunks[c]) call.keys.push_back(MakeOverridesKey(prefix_, name));
    call.known = std::move(known[c]);
    if (model_clock_) call.now_ms = model_clock_->NowMs();
    call.deadline = std::chrono::steady_clock::now() + kRefreshDeadline;
    const int64_t sent = SteadyMs();
    store_.Overrides(std::move(call), [weak = weak_from_this(), names = std::move(chunks[c]),
                                       sent](StatusOr<OverrideReply> reply) {
      if (auto self = weak.lock()) {
        self->Apply(names, reply, sent);
        self->Done();
      }
    });
  }
}

void OverrideCopy::Apply(const std::vector<std::string>& names,
                         const StatusOr<OverrideReply>& reply, int64_t sent_steady_ms) {
  if (!reply.ok() || reply->read.hashes.size() != names.size()) {
    // The copy stays as it was: each entry in force until its own expiry.
    refresh_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  refreshes_.fetch_add(1, std::memory_order_relaxed);
  // The store's clock, as of the middle of the round trip.
  const int64_t now_steady = SteadyMs();
  offset_ms_.store(reply->read.now_ms - (sent_steady_ms + now_steady) / 2,
                   std::memory_order_relaxed);
  std::unique_lock lock(mu_);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const OverrideHash& hash = reply->read.hashes[i];
    auto copy = copies_.find(names[i]);
    if (copy == copies_.end()) continue;
    copy->second.counter = hash.counter;
    if (!hash.changed) continue;
    copy->second.entries.clear();
    for (const OverrideEntry& e : hash.entries) {
      if (e.expires_at_ms <= reply->read.now_ms) continue;
      if (copy->second.entries.size() >= static_cast<std::size_t>(kMaxOverridesPerLimiter)) break;
      OverrideEntry kept = e;
      kept.actor.clear();  // what the check path needs: limit, window, expiry
      kept.reason.clear();
      copy->second.entries.emplace(e.id, std::move(kept));
    }
  }
  bool any = false;
  for (const auto& [name, copy] : copies_) any = any || !copy.entries.empty();
  any_.store(any, std::memory_order_release);
}

void OverrideCopy::Done() {
  std::unique_lock lock(mu_);
  if (--outstanding_ > 0) return;
  ScheduleLocked(again_ ? HeartbeatScheduler::Clock::now()
                        : HeartbeatScheduler::Clock::now() + kPeriod);
}

}  // namespace sluice::internal

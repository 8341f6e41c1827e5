#include "client/local_budget.h"

#include <algorithm>

namespace sluice::internal {

LocalBudgets::LocalBudgets(const LimiterOptions::LocalBudget& options, int64_t limit)
    : hot_(std::max<int64_t>(1, options.hot_checks_per_second)),
      period_ms_(std::max<int64_t>(1, options.slice_period.count())),
      max_slice_(options.max_slice > 0 ? std::min(options.max_slice, limit)
                                       : std::max<int64_t>(1, limit / 10)),
      limit_(limit) {}

LocalBudgets::Entry& LocalBudgets::Touch(std::string_view id, int64_t now_ms) {
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) {
    if (entries_.size() >= sweep_at_) Sweep(now_ms);
    it = entries_.emplace(std::string(id), Entry{.second_ms = now_ms}).first;
  }
  Entry& e = it->second;
  if (now_ms - e.second_ms >= 1000) {
    // A new second: the one that ended is the rate (a gap of more than a second: 0).
    e.last_calls = now_ms - e.second_ms < 2000 ? e.calls : 0;
    e.calls = 0;
    e.second_ms = now_ms;
  }
  ++e.calls;
  return e;
}

void LocalBudgets::Sweep(int64_t now_ms) {
  // Forget ids that hold no live slice and were not called in the last two seconds;
  // sweep again when the table has doubled from what is left (amortized O(1) a call).
  std::erase_if(entries_, [now_ms](const auto& kv) {
    const Entry& e = kv.second;
    return (e.units == 0 || now_ms >= e.expires_ms) && now_ms - e.second_ms >= 2000;
  });
  sweep_at_ = std::max<std::size_t>(4096, 2 * entries_.size());
}

std::optional<Decision> LocalBudgets::TrySpend(std::string_view id, int64_t cost, int64_t now_ms) {
  MutexLock lock(mu_);
  Entry& e = Touch(id, now_ms);
  if (e.units < cost || now_ms >= e.expires_ms) return std::nullopt;
  e.units -= cost;
  Decision d;
  d.allowed = true;
  d.limit = limit_;
  d.remaining = e.units;  // what this process can still admit without asking
  d.reset_after = std::chrono::milliseconds(e.expires_ms - now_ms);
  d.source = DecisionSource::kLocalBudget;
  return d;
}

int64_t LocalBudgets::Want(std::string_view id, int64_t cost, int64_t now_ms) {
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) return cost;
  const Entry& e = it->second;
  if (now_ms < e.exhausted_until_ms) return cost;
  // The rate: the last full second's calls, or this second's when it already has more.
  const int64_t elapsed = std::max<int64_t>(1, now_ms - e.second_ms);
  const int64_t rate = std::max(e.last_calls, e.calls * 1000 / std::max<int64_t>(elapsed, 100));
  if (rate < hot_) return cost;
  const int64_t slice = std::clamp<int64_t>(rate * period_ms_ / 1000, 1, max_slice_);
  return std::min(limit_, cost + slice);
}

void LocalBudgets::Fill(std::string_view id, int64_t extra, int64_t sent_ms,
                        int64_t reset_after_ms) {
  if (extra <= 0) return;
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) {
    it = entries_.emplace(std::string(id), Entry{.second_ms = sent_ms}).first;
  }
  Entry& e = it->second;
  // At most a second, whatever the window: the store's clock and this host's monotonic
  // clock may run at slightly different rates (or the store's be stepped), and over a
  // second that difference is far below a millisecond.
  const int64_t expires = sent_ms + std::min<int64_t>(reset_after_ms, kMaxSliceLifeMs);
  // A slice from an older window ends no later than this one; units of the same window
  // (taken by two misses at once) add up.
  if (e.expires_ms > 0 && e.expires_ms < expires && e.expires_ms <= sent_ms) e.units = 0;
  e.units += extra;
  e.expires_ms = e.units == extra ? expires : std::min(e.expires_ms, expires);
}

void LocalBudgets::Exhausted(std::string_view id, int64_t until_ms) {
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it != entries_.end()) it->second.exhausted_until_ms = until_ms;
}

bool LocalBudgets::GiveBack(std::string_view id, int64_t amount, int64_t now_ms) {
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end() || now_ms >= it->second.expires_ms) return false;
  it->second.units = std::min(limit_, it->second.units + amount);
  return true;
}

int64_t LocalBudgets::Held(int64_t now_ms) const {
  MutexLock lock(mu_);
  int64_t held = 0;
  for (const auto& [id, e] : entries_) {
    if (now_ms < e.expires_ms) held += e.units;
  }
  return held;
}

}  // namespace sluice::internal

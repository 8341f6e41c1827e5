#include "client/local_budget.h"

#include <algorithm>

#include "algo/token_bucket.h"

namespace sluice::internal {

LocalBudgets::LocalBudgets(const LimiterOptions::LocalBudget& options, const Limit& limit)
    : hot_(std::max<int64_t>(1, options.hot_checks_per_second)),
      period_ms_(std::max<int64_t>(1, options.slice_period.count())),
      max_slice_(options.max_slice > 0 ? std::min(options.max_slice, limit.limit)
                                       : std::max<int64_t>(1, limit.limit / 10)),
      limit_(limit.limit),
      whole_(limit) {}

int64_t LocalBudgets::SliceLifeMs(const Limit& limit, int64_t extra, int64_t reset_after_ms) {
  int64_t life = 0;
  switch (limit.algorithm) {
    case Algorithm::kFixedWindow: life = reset_after_ms; break;
    case Algorithm::kSlidingWindow: life = reset_after_ms - limit.window.count() - 1; break;
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra: {
      // extra tokens refill in extra × window / rate ms: rounded up.
      const int64_t rate = limit.refill == 0 ? limit.limit : limit.refill;
      const QuotRem refill = MulDivMod(extra, limit.window.count(), rate);
      if (refill.quot > kBucketHorizonMs) return 0;
      life = reset_after_ms - 2 - refill.quot - (refill.rem > 0 ? 1 : 0);
      break;
    }
    default: return 0;  // no slices for the others (MakeLimiter refuses the option)
  }
  // At most a second, whatever the window: the store's clock and this host's monotonic
  // clock may run at slightly different rates (or the store's be stepped), and over a
  // second that difference is far below a millisecond.
  return std::min<int64_t>(life, kMaxSliceLifeMs);
}

LocalBudgets::Entry& LocalBudgets::Touch(std::string_view id, int64_t now_ms) {
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) {
    if (entries_.size() >= sweep_at_) Sweep(now_ms);
    it = entries_.emplace(std::string(id), Entry{.rate = {.second_ms = now_ms}}).first;
  }
  Entry& e = it->second;
  e.rate.Count(now_ms);
  return e;
}

void LocalBudgets::Sweep(int64_t now_ms) {
  // Forget ids that hold no live slice and were not called in the last two seconds;
  // sweep again when the table has doubled from what is left (amortized O(1) a call).
  std::erase_if(entries_, [now_ms](const auto& kv) {
    const Entry& e = kv.second;
    return (e.units == 0 || now_ms >= e.expires_ms) && now_ms - e.rate.second_ms >= 2000;
  });
  sweep_at_ = std::max<std::size_t>(4096, 2 * entries_.size());
}

std::optional<Decision> LocalBudgets::TrySpend(std::string_view id, int64_t cost, int64_t now_ms,
                                               Leftover* leftover) {
  MutexLock lock(mu_);
  Entry& e = Touch(id, now_ms);
  if (now_ms >= e.expires_ms) {
    if (leftover && e.units > 0 && e.window_end_ms != 0) {
      *leftover = {e.units, e.window_end_ms};
      e.units = 0;
    }
    return std::nullopt;
  }
  if (e.units < cost) return std::nullopt;
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
  const int64_t elapsed = std::max<int64_t>(1, now_ms - e.rate.second_ms);
  const int64_t rate =
      std::max(e.rate.last_calls, e.rate.calls * 1000 / std::max<int64_t>(elapsed, 100));
  if (rate < hot_) return cost;
  const int64_t slice = std::clamp<int64_t>(rate * period_ms_ / 1000, 1, max_slice_);
  return std::min(limit_, cost + slice);
}

int64_t LocalBudgets::Fill(std::string_view id, int64_t extra, int64_t sent_ms,
                           int64_t reset_after_ms, int64_t window_end_ms, Leftover* leftover) {
  if (extra <= 0) return 0;
  const int64_t life = SliceLifeMs(whole_, extra, reset_after_ms);
  if (life <= 0) {
    // Nothing to spend (a take at a window's very end, or from a nearly full bucket):
    // a sliding_window's units go straight back to their window.
    if (leftover && window_end_ms != 0) *leftover = {extra, window_end_ms};
    return 0;
  }
  const int64_t expires = sent_ms + life;
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) {
    it = entries_.emplace(std::string(id), Entry{.rate = {.second_ms = sent_ms}}).first;
  }
  Entry& e = it->second;
  // Taken before a reset of the id: the store forgot those units.
  if (sent_ms <= e.reset_ms) return 0;
  // A slice whose life ended is dropped; units of a live one (taken by two misses at
  // once, or an older slice not yet spent) join the new ones under the earlier end, so
  // no unit is spent past its own slice's end.
  // A sliding_window slice of another window (it ended at the store before this take
  // ran) is given back whole.
  if (e.units > 0 && e.window_end_ms != window_end_ms) {
    if (leftover && e.window_end_ms != 0) *leftover = {e.units, e.window_end_ms};
    e.units = 0;
  }
  if (e.expires_ms <= sent_ms) e.units = 0;
  e.units += extra;
  e.expires_ms = e.units == extra ? expires : std::min(e.expires_ms, expires);
  e.window_end_ms = window_end_ms;
  return extra;
}

void LocalBudgets::Exhausted(std::string_view id, int64_t until_ms) {
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it != entries_.end()) it->second.exhausted_until_ms = until_ms;
}

void LocalBudgets::Drop(std::string_view id, int64_t now_ms) {
  MutexLock lock(mu_);
  Entry& e =
      entries_.try_emplace(std::string(id), Entry{.rate = {.second_ms = now_ms}}).first->second;
  e.units = 0;
  e.expires_ms = 0;
  e.window_end_ms = 0;
  e.exhausted_until_ms = 0;
  e.reset_ms = now_ms;
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

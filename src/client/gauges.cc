#include "client/gauges.h"

#include <algorithm>

namespace sluice::internal {
namespace {
constexpr int64_t kMinuteMs = 60000;
}  // namespace

LeaseGauges::Entries::iterator LeaseGauges::Touch(const std::string& key, int64_t now_ms) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    // Several at once when ids that held leases past max_ids have let them go since
    // (amortized O(1): each id is evicted once).
    while (entries_.size() >= max_ids_ && !idle_.empty()) {
      entries_.erase(*idle_.back());
      idle_.pop_back();
    }
    it = entries_.emplace(key, Entry{}).first;
    it->second.idle = true;
    idle_.push_front(&it->first);
    it->second.recency = idle_.begin();
  } else if (it->second.idle && it->second.recency != idle_.begin()) {
    idle_.splice(idle_.begin(), idle_, it->second.recency);
  }
  Entry& e = it->second;
  const int64_t minute = now_ms / kMinuteMs;
  if (e.minute != minute) {
    e.minute = minute;
    e.minute_max = e.live;
  }
  return it;
}

void LeaseGauges::Settle(Entries::iterator it) {
  Entry& e = it->second;
  if (e.held > 0 && e.idle) {
    idle_.erase(e.recency);
    e.idle = false;
  } else if (e.held == 0 && !e.idle) {
    idle_.push_front(&it->first);
    e.recency = idle_.begin();
    e.idle = true;
  }
}

void LeaseGauges::Observe(const std::string& key, int64_t live, int64_t now_ms) {
  MutexLock lock(mu_);
  Entry& e = Touch(key, now_ms)->second;
  e.live = live;
  e.minute_max = std::max(e.minute_max, live);
}

void LeaseGauges::Granted(const std::string& key, int64_t live, int64_t now_ms) {
  MutexLock lock(mu_);
  auto it = Touch(key, now_ms);
  Entry& e = it->second;
  e.live = live;
  e.minute_max = std::max(e.minute_max, live);
  ++e.held;
  Settle(it);
}

void LeaseGauges::Held(const std::string& key, int64_t delta, int64_t now_ms) {
  MutexLock lock(mu_);
  auto it = Touch(key, now_ms);
  it->second.held = std::max<int64_t>(0, it->second.held + delta);
  Settle(it);
}

std::vector<LeaseGauges::Row> LeaseGauges::Snapshot(int64_t now_ms) const {
  MutexLock lock(mu_);
  std::vector<Row> rows;
  rows.reserve(entries_.size());
  for (const auto& [key, e] : entries_) {
    const bool this_minute = e.minute == now_ms / kMinuteMs;
    const auto cut = key.find('\n');
    rows.push_back({key.substr(0, cut), key.substr(cut + 1), e.held, e.live,
                    this_minute ? e.minute_max : e.live});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.limiter != b.limiter ? a.limiter < b.limiter : a.id < b.id;
  });
  return rows;
}

}  // namespace sluice::internal

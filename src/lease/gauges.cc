#include "lease/gauges.h"

#include <algorithm>

namespace sluice::internal {
namespace {
constexpr int64_t kMinuteMs = 60000;
}  // namespace

LeaseGauges::Entry& LeaseGauges::Touch(const std::string& key, int64_t now_ms) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_ids_ && !recency_.empty()) {
      entries_.erase(*recency_.back());
      recency_.pop_back();
    }
    it = entries_.emplace(key, Entry{}).first;
    recency_.push_front(&it->first);
    it->second.recency = recency_.begin();
  } else if (it->second.recency != recency_.begin()) {
    recency_.splice(recency_.begin(), recency_, it->second.recency);
  }
  Entry& e = it->second;
  const int64_t minute = now_ms / kMinuteMs;
  if (e.minute != minute) {
    e.minute = minute;
    e.minute_max = e.live;
  }
  return e;
}

void LeaseGauges::Observe(const std::string& key, int64_t live, int64_t now_ms) {
  std::lock_guard lock(mu_);
  Entry& e = Touch(key, now_ms);
  e.live = live;
  e.minute_max = std::max(e.minute_max, live);
}

void LeaseGauges::Granted(const std::string& key, int64_t live, int64_t now_ms) {
  std::lock_guard lock(mu_);
  Entry& e = Touch(key, now_ms);
  e.live = live;
  e.minute_max = std::max(e.minute_max, live);
  ++e.held;
}

void LeaseGauges::Held(const std::string& key, int64_t delta, int64_t now_ms) {
  std::lock_guard lock(mu_);
  Entry& e = Touch(key, now_ms);
  e.held = std::max<int64_t>(0, e.held + delta);
}

std::vector<LeaseGauges::Row> LeaseGauges::Snapshot(int64_t now_ms) const {
  std::lock_guard lock(mu_);
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

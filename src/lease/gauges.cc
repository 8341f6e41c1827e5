#include "lease/gauges.h"

#include <algorithm>

namespace sluice::internal {
namespace {
constexpr int64_t kMinuteMs = 60000;
}  // namespace

LeaseGauges::Entry& LeaseGauges::Touch(const std::string& limiter, const std::string& id,
                                       int64_t now_ms) {
  auto key = std::make_pair(limiter, id);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_ids_) {
      auto oldest = entries_.end();
      for (auto e = entries_.begin(); e != entries_.end(); ++e) {
        if (e->second.held == 0 && (oldest == entries_.end() || e->second.updated_ms < oldest->second.updated_ms)) {
          oldest = e;
        }
      }
      if (oldest != entries_.end()) entries_.erase(oldest);
    }
    it = entries_.emplace(std::move(key), Entry{}).first;
  }
  Entry& e = it->second;
  e.updated_ms = now_ms;
  const int64_t minute = now_ms / kMinuteMs;
  if (e.minute != minute) {
    e.minute = minute;
    e.minute_max = e.live;
  }
  return e;
}

void LeaseGauges::Observe(const std::string& limiter, const std::string& id, int64_t live,
                          int64_t now_ms) {
  std::lock_guard lock(mu_);
  Entry& e = Touch(limiter, id, now_ms);
  e.live = live;
  e.minute_max = std::max(e.minute_max, live);
}

void LeaseGauges::Held(const std::string& limiter, const std::string& id, int64_t delta,
                       int64_t now_ms) {
  std::lock_guard lock(mu_);
  Entry& e = Touch(limiter, id, now_ms);
  e.held = std::max<int64_t>(0, e.held + delta);
}

std::vector<LeaseGauges::Row> LeaseGauges::Snapshot(int64_t now_ms) const {
  std::lock_guard lock(mu_);
  std::vector<Row> rows;
  rows.reserve(entries_.size());
  for (const auto& [key, e] : entries_) {
    const bool this_minute = e.minute == now_ms / kMinuteMs;
    rows.push_back({key.first, key.second, e.held, e.live, this_minute ? e.minute_max : e.live});
  }
  return rows;
}

}  // namespace sluice::internal

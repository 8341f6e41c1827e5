// service/refused_ids.h — the ids this sluiced refused lately, for the support console's
// "most refusals now": refusals per (domain, limiter, id) in the current and the previous
// clock minute of this instance (not fleet-wide: each sluiced counts what it answered).
// Bounded: at most kMaxIds ids; an id first refused while the table is full of ids refused
// within the last two minutes is not tracked (counted in `untracked`), so a flood of
// distinct ids costs a bounded table and a bounded sweep (once a minute).
//
// Thread-safety: every member function may be called from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace sluiced {

class RefusedIds {
 public:
  static constexpr std::size_t kMaxIds = 1000;

  struct Row {
    std::string domain, limiter, id;
    int64_t refused = 0;  // in this minute and the one before
  };

  // One refusal at `minute` (minutes of the steady clock; callers pass MinuteNow()).
  void Add(const std::string& domain, const std::string& limiter, const std::string& id,
           int64_t minute) {
    std::lock_guard lock(mu_);
    if (minute != swept_minute_) {
      std::erase_if(counts_, [&](const auto& kv) { return kv.second.minute < minute - 1; });
      swept_minute_ = minute;
    }
    auto key = std::make_tuple(domain, limiter, id);
    auto it = counts_.find(key);
    if (it == counts_.end()) {
      if (counts_.size() >= kMaxIds) {
        ++untracked_;
        return;
      }
      it = counts_.emplace(std::move(key), Count{}).first;
    }
    Count& c = it->second;
    if (c.minute != minute) {
      c.previous = c.minute == minute - 1 ? c.current : 0;
      c.current = 0;
      c.minute = minute;
    }
    ++c.current;
  }

  // The `n` ids with the most refusals in `minute` and the one before, most first.
  std::vector<Row> Top(std::size_t n, int64_t minute) {
    std::vector<Row> rows;
    {
      std::lock_guard lock(mu_);
      for (const auto& [key, c] : counts_) {
        int64_t recent = 0;
        if (c.minute == minute) recent = c.current + c.previous;
        if (c.minute == minute - 1) recent = c.current;
        if (recent > 0) {
          rows.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), recent});
        }
      }
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return std::tie(b.refused, a.domain, a.limiter, a.id) <
             std::tie(a.refused, b.domain, b.limiter, b.id);
    });
    if (rows.size() > n) rows.resize(n);
    return rows;
  }

  uint64_t untracked() {
    std::lock_guard lock(mu_);
    return untracked_;
  }

  static int64_t MinuteNow() {
    return std::chrono::duration_cast<std::chrono::minutes>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  struct Count {
    int64_t minute = 0;
    int64_t current = 0, previous = 0;
  };
  std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, Count> counts_;
  int64_t swept_minute_ = 0;
  uint64_t untracked_ = 0;
};

}  // namespace sluiced

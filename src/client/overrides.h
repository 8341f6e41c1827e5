// The runtime overrides a client applies (sluice/admin.h, SetOverride): a copy of the
// override hashes of the limiters made on this client (src/algo/overrides.lua), refreshed
// once a second by one script call per 128 limiters (all of them in one hash slot), which
// reads nothing more of a hash whose change counter has not moved. A check looks its id up
// here (Find) when it builds its store call: nothing at all while no limiter of the client
// has an override, one hash lookup under a shared lock otherwise.
//
// Bound: an override set, changed or cleared at T is applied by every client of the store
// by T + kPeriod + one refresh round trip (a set made through this client: at once). An
// entry's own expiry is honoured on every lookup, on the store's clock as the latest
// refresh read it (off by at most that refresh's round trip). While the store cannot
// answer, the copy stays as it was, each entry in force until its expiry.
//
// Size: at most kMaxLimiters limiters tracked per client (a limiter made after that many
// others gets no runtime override: Track says so), each with at most
// kMaxOverridesPerLimiter entries.
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "client/heartbeats.h"
#include "sluice/clock.h"
#include "store/store.h"

namespace sluice::internal {

class OverrideCopy final : public HeartbeatScheduler::Target,
                           public std::enable_shared_from_this<OverrideCopy> {
 public:
  static constexpr std::chrono::milliseconds kPeriod{1000};
  static constexpr std::chrono::milliseconds kRefreshDeadline{500};
  static constexpr std::size_t kMaxLimiters = 1024;
  static constexpr std::size_t kKeysPerCall = 128;

  // An override in force.
  struct Applied {
    int64_t limit = 0;
    int64_t window_ms = 0;  // 0: the limiter's own
    int64_t expires_at_ms = 0;
    int64_t expires_in_ms = 0;  // from the lookup
  };

  // `model_clock`: the model clock's time (tests), or null for the store's own.
  OverrideCopy(HeartbeatScheduler& scheduler, Store& store, std::string prefix,
               std::shared_ptr<const Clock> model_clock);

  // Copies `limiter`'s overrides from now on (the first limiter starts the refresh).
  // False when kMaxLimiters others are tracked already.
  bool Track(std::string_view limiter);
  // The override of `limiter`'s `id` in force now, if any.
  std::optional<Applied> Find(std::string_view limiter, std::string_view id) const;
  // A set (`set`) or clear (null) of `limiter`'s `id` made through this client: applied to
  // the copy at once, then a refresh is made at once.
  void Changed(const std::string& limiter, const std::string& id, const OverrideEntry* set);
  // Refreshes at once.
  void RefreshNow();

  // Counters for metrics and tests.
  uint64_t refreshes() const { return refreshes_.load(std::memory_order_relaxed); }
  uint64_t refresh_errors() const { return refresh_errors_.load(std::memory_order_relaxed); }
  // Tests: stops refreshing (the copy then keeps what it holds).
  void PauseForTest(bool paused) { paused_.store(paused, std::memory_order_relaxed); }

  void Due() override;

 private:
  struct LimiterCopy {
    int64_t counter = -1;  // as read; -1: never read
    std::unordered_map<std::string, OverrideEntry> entries;
  };
  int64_t StoreNowMs() const;
  // One chunk's reply: the copies of `names` updated.
  void Apply(const std::vector<std::string>& names, const StatusOr<OverrideReply>& reply,
             int64_t sent_steady_ms);
  void Done();  // a chunk is back: the next round once all are
  void ScheduleLocked(HeartbeatScheduler::Clock::time_point at);  // holds mu_

  HeartbeatScheduler& scheduler_;
  Store& store_;
  const std::string prefix_;
  const std::shared_ptr<const Clock> model_clock_;

  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, LimiterCopy> copies_;  // guarded by mu_
  std::atomic<bool> any_{false};                         // any entry in any copy
  std::atomic<int64_t> offset_ms_{0};                    // the store's clock minus the steady clock
  // Round state (on I/O threads; mu_ for the flags).
  bool started_ = false;                              // guarded by mu_
  int outstanding_ = 0;                               // chunks in flight; guarded by mu_
  bool again_ = false;                                // RefreshNow during a round; guarded by mu_
  std::optional<HeartbeatScheduler::Key> scheduled_;  // the pending refresh; guarded by mu_
  std::atomic<bool> paused_{false};
  std::atomic<uint64_t> refreshes_{0}, refresh_errors_{0};
};

}  // namespace sluice::internal

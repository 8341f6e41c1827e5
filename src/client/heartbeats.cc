#include "client/heartbeats.h"

#include <vector>

namespace sluice::internal {

HeartbeatScheduler::Key HeartbeatScheduler::Schedule(Clock::time_point at,
                                                     std::weak_ptr<Target> target) {
  MutexLock lock(mu_);
  Key key{at, next_++};
  due_.emplace(key, std::move(target));
  if (at < armed_at_) ArmLocked(at);
  return key;
}

void HeartbeatScheduler::Cancel(const Key& key) {
  MutexLock lock(mu_);
  due_.erase(key);
  // The timer may stay armed for a moment nobody needs: it fires, finds nothing due,
  // and re-arms for what is left. Cheaper than re-arming on every cancel.
}

std::size_t HeartbeatScheduler::size() const {
  MutexLock lock(mu_);
  return due_.size();
}

void HeartbeatScheduler::Shutdown() {
  MutexLock lock(mu_);
  stopped_ = true;
  due_.clear();
  timer_.cancel();
  armed_at_ = Clock::time_point::max();
}

void HeartbeatScheduler::ArmLocked(Clock::time_point at) {
  if (stopped_) return;
  armed_at_ = at;
  timer_.expires_at(at);  // cancels the wait in progress, if any
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Fire();
  });
}

void HeartbeatScheduler::Fire() {
  std::vector<std::shared_ptr<Target>> now_due;
  {
    MutexLock lock(mu_);
    const auto now = Clock::now();
    auto end = due_.upper_bound(Key{now, UINT64_MAX});
    for (auto it = due_.begin(); it != end; ++it) {
      if (auto target = it->second.lock()) now_due.push_back(std::move(target));
    }
    due_.erase(due_.begin(), end);
    armed_at_ = Clock::time_point::max();
    if (!due_.empty()) ArmLocked(due_.begin()->first.first);
  }
  for (const auto& target : now_due) target->Due();
}

}  // namespace sluice::internal

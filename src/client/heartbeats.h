// One timer for every lease of a client: leases register the moment of their next
// heartbeat, and when the timer fires, every lease that is due heartbeats at once (so
// the heartbeats of many leases leave in one pipelined write). Registering and
// cancelling are a map insert and erase under a mutex: a lease that is acquired and
// released costs no timer of its own, no cancelled-wait handler, no extra dispatch. The
// client's periodic reclaim of its embedded stores (memory/memory_store.h) runs on the
// same timer.
//
// Thread-safety: thread-safe. Due callbacks run on the io_context's threads, outside
// the scheduler's lock.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/mutex.h"

namespace sluice::internal {

class HeartbeatScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  using Key = std::pair<Clock::time_point, uint64_t>;
  // Called when due, if the owner still exists.
  struct Target {
    virtual ~Target() = default;
    virtual void Due() = 0;
  };

  explicit HeartbeatScheduler(boost::asio::io_context& io) : timer_(io) {}

  // `target->Due()` at `at` (or soon after). Returns the key that Cancel takes.
  Key Schedule(Clock::time_point at, std::weak_ptr<Target> target);
  // Forgets a scheduled call; a no-op when it already ran or was cancelled.
  void Cancel(const Key& key);
  // Drops every scheduled call and disarms the timer for good (the io_context can then
  // run out of work). Idempotent.
  void Shutdown();
  // Scheduled calls (for tests and gauges).
  std::size_t size() const;

 private:
  void ArmLocked(Clock::time_point at) SLUICE_REQUIRES(mu_);
  void Fire();

  mutable Mutex mu_;
  boost::asio::steady_timer timer_ SLUICE_GUARDED_BY(mu_);
  std::map<Key, std::weak_ptr<Target>> due_ SLUICE_GUARDED_BY(mu_);
  uint64_t next_ SLUICE_GUARDED_BY(mu_) = 0;
  Clock::time_point armed_at_ SLUICE_GUARDED_BY(mu_) = Clock::time_point::max();
  bool stopped_ SLUICE_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::internal

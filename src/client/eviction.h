// Whether the store can evict sluice's keys. Every key sluice writes carries an expiry,
// so a Redis whose maxmemory-policy is anything but `noeviction` (an allkeys-* policy,
// and the volatile-* ones too) may drop a limiter's state when its memory fills: an id
// then starts over with its whole limit (a spent OTP budget is spent again). sluice
// cannot stop the server from evicting; it reads the policy and the server's count of
// evicted keys (INFO, which answers where CONFIG is refused), at start and every
// ClientOptions::eviction_check_interval, so that it is never silent about it:
// StoreHealth, the metrics, one warning per change (ClientOptions::on_warning), and
// limiters that refuse to run on such a store (LimiterOptions::refuse_evicting_store).
//
// On a Redis Cluster the node asked is the primary of slot 0 (a cluster's nodes are
// normally configured alike).
//
// Thread-safety: thread-safe. Readings and warnings happen on the io_context's threads.
#pragma once

#include "sluice/boost_first.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/mutex.h"
#include "core/server_info.h"
#include "store/store.h"

namespace sluice::internal {

class EvictionWatch {
 public:
  struct Reading {
    bool known = false;        // a reading succeeded at least once
    std::string policy;        // maxmemory_policy, as the server names it
    bool can_evict = false;    // PolicyCanEvict(policy)
    int64_t evicted_keys = 0;  // the server's evicted_keys counter, as last read
    std::string error;         // why the latest reading failed (empty when it did not)
  };
  struct Options {
    std::chrono::milliseconds interval{10000};
    std::chrono::milliseconds deadline{2000};  // of each INFO call
    // Called once when the store is seen with a policy that can evict (again after it
    // was seen with noeviction), and once when the server's evicted_keys counter then
    // grows.
    std::function<void(const std::string&)> on_warning;
    // Called with can_evict after every successful reading.
    std::function<void(bool)> on_reading;
  };

  explicit EvictionWatch(boost::asio::io_context& io) : timer_(io) {}

  // Reads at once, then every interval, until Shutdown. The future is ready when the
  // first reading has ended (succeeded or failed).
  std::future<void> Start(std::shared_ptr<Store> store, Options options);
  // No reading starts after it; the timer is cancelled (so the io_context can run dry).
  void Shutdown();
  Reading reading() const;

 private:
  void ReadNow();
  void Arm(std::chrono::milliseconds in);
  void Record(StatusOr<std::string> memory, StatusOr<std::string> stats);

  mutable Mutex mu_;
  boost::asio::steady_timer timer_ SLUICE_GUARDED_BY(mu_);
  bool stopped_ SLUICE_GUARDED_BY(mu_) = false;
  std::shared_ptr<Store> store_ SLUICE_GUARDED_BY(mu_);
  Options options_ SLUICE_GUARDED_BY(mu_);
  Reading reading_ SLUICE_GUARDED_BY(mu_);
  bool warned_policy_ SLUICE_GUARDED_BY(mu_) = false;
  bool warned_evictions_ SLUICE_GUARDED_BY(mu_) = false;
  std::optional<std::promise<void>> first_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

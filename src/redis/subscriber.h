// Subscriber: one connection per Redis store that listens for lease-set wake-ups, so a
// waiting acquire (sluice/lease.h, AcquireOptions::wait) learns of a release without
// polling. A release publishes on the channel named after the lease set's key (SPUBLISH:
// sharded pub/sub, Redis >= 7.0, which keeps a channel on its key's shard); this
// connection SSUBSCRIBEs to the channels that have waiters in this process (Wakeups: one
// subscription per channel, whatever the number of waiters) and SUNSUBSCRIBEs when the
// last waiter goes.
//
// Not a guarantee: a message lost (the connection down or reconnecting, the bound on
// watches reached) costs a waiter latency only, since waiters re-check at a bounded
// interval and at their deadline. After a reconnect, the channels are subscribed again
// (checked every kResubscribeCheck).
//
// Thread-safety: thread-safe.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/mutex.h"
#include "redis/connection.h"
#include "redis/endpoint.h"
#include "store/wakeups.h"

struct redisReply;

namespace sluice::internal {

class Subscriber : public std::enable_shared_from_this<Subscriber> {
 public:
  // The most channels watched at once per store (each a subscription of this connection).
  static constexpr std::size_t kMaxWatches = 10000;
  static constexpr std::chrono::milliseconds kResubscribeCheck{500};

  // Connects in the background (with `options`' timeouts and backoff, no scripts).
  static std::shared_ptr<Subscriber> Start(boost::asio::any_io_executor executor, Endpoint endpoint,
                                           ConnectionOptions options);
  ~Subscriber();

  // Runs `wake` (on an I/O thread; must not block) at each message on `channel` while the
  // handle lives; null past kMaxWatches.
  Wakeups::Handle Watch(const std::string& channel, std::function<void()> wake);
  void Shutdown();

 private:
  Subscriber(boost::asio::any_io_executor executor) : timer_(executor) {}
  // A reply on the connection: a message wakes its channel's waiters; the answers to
  // SSUBSCRIBE/SUNSUBSCRIBE are skipped.
  void OnReply(const redisReply* reply);
  void Send(std::string_view verb, const std::string& channel);
  // Subscribes every watched channel again when the connection reconnected since.
  void CheckReconnect();

  std::shared_ptr<Connection> connection_;
  std::shared_ptr<Wakeups> wakeups_;
  Mutex timer_mu_;  // Shutdown (any thread) and the check's re-arming (an I/O thread)
  boost::asio::steady_timer timer_ SLUICE_GUARDED_BY(timer_mu_);
  std::atomic<uint64_t> sessions_seen_{0};
  std::atomic<bool> stopped_{false};
};

}  // namespace sluice::internal

// Wakeups: who waits for a lease set's slots, by channel (the lease set's key). A store
// that can tell when a slot frees (the Redis store's subscriber on the key's SPUBLISH
// channel, the embedded store's own releases) calls Notify; a waiting acquire holds a
// Watch for its id while it waits. A missed or absent notification costs a waiter
// latency only: it also re-checks at a bounded interval and at its deadline.
//
// Bounded: at most `max_watches` watches at once; Watch answers null past it (the
// waiter then re-checks only).
//
// Thread-safety: thread-safe. Notify runs the channel's callbacks on the calling thread,
// outside the lock; callbacks must not block (a waiter posts its re-check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"

namespace sluice::internal {

class Wakeups : public std::enable_shared_from_this<Wakeups> {
 public:
  // A watch stays registered while its handle lives.
  using Handle = std::shared_ptr<void>;
  // on_first / on_last: the first watch of a channel came, the last went (a subscriber
  // subscribes and unsubscribes there). Called under the lock, so that a channel's
  // subscribe and unsubscribe are issued in the order its watches came and went: they
  // must not block nor call back into this object.
  Wakeups(std::size_t max_watches, std::function<void(const std::string&)> on_first = nullptr,
          std::function<void(const std::string&)> on_last = nullptr)
      : max_watches_(max_watches), on_first_(std::move(on_first)), on_last_(std::move(on_last)) {}

  // Registers `wake` for `channel`; null past the bound.
  Handle Watch(const std::string& channel, std::function<void()> wake);
  // Runs every callback watching `channel`.
  void Notify(std::string_view channel);
  // The channels watched now (a subscriber subscribes them again after a reconnect).
  std::vector<std::string> Channels() const;
  std::size_t watches() const;

 private:
  void Unwatch(const std::string& channel, uint64_t id);

  const std::size_t max_watches_;
  const std::function<void(const std::string&)> on_first_;
  const std::function<void(const std::string&)> on_last_;
  mutable Mutex mu_;
  uint64_t next_id_ SLUICE_GUARDED_BY(mu_) = 0;
  std::size_t count_ SLUICE_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::map<uint64_t, std::function<void()>>, std::less<>> channels_
      SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

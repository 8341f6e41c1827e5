// What a Client owns and its Limiters share: the I/O threads and the store.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "client/eviction.h"
#include "client/gauges.h"
#include "client/heartbeats.h"
#include "client/overrides.h"
#include "core/boot_clock.h"
#include "core/mutex.h"
#include "policy/policy_store.h"
#include "sluice/client.h"
#include "store/store.h"

namespace sluice::internal {

class ClientCore {
 public:
  // The last reference may drop inside a callback, on an I/O thread, which can neither
  // join itself nor destroy the io_context it runs in: the deleter then tears down on a
  // thread of its own.
  static std::shared_ptr<ClientCore> Make(ClientOptions options);
  explicit ClientCore(ClientOptions options);
  // Shuts the store down and joins the I/O threads.
  ~ClientCore();

  void StartThreads();

  // True in a child process forked after this client was made: its I/O threads are the
  // parent's. Calls then fail at once (PolicyStore), callbacks run inline (Post), and the
  // last reference leaks the core instead of tearing down what is not this process's.
  bool Forked() const;
  // Runs `fn` on an I/O thread (never inline), or inline in a forked child (no I/O
  // thread would ever run it). A template: no std::function allocation per post, and
  // move-only handlers are fine.
  template <typename Fn>
  void Post(Fn&& fn) {
    if (Forked()) {
      fn();
      return;
    }
    boost::asio::post(io, std::forward<Fn>(fn));
  }

  // Keeps `target` alive until Drop (or until the client goes): background work that
  // outlives its owner, such as a lease release retried after its Lease is gone.
  void Keep(std::shared_ptr<HeartbeatScheduler::Target> target);
  void Drop(const HeartbeatScheduler::Target* target);

  const ClientOptions options;
  // The clock of leases' believable ends (held(), heartbeat deadlines): BootClock, or a
  // test's own (ClientFactory::UseBootClock) so lease tests need not sleep.
  BootNow boot_now = &BootClock::now;
  // Wall-clock ms for the lease gauges' clock minute: the model clock when one is set,
  // else the system clock.
  int64_t WallMs() const;
  boost::asio::io_context io;
  // The store every call goes through: the policy layer in front of the real store.
  std::shared_ptr<Store> store;
  std::shared_ptr<PolicyStore> policy;  // == store
  LeaseGauges lease_gauges;
  // Every lease's next heartbeat, and the next reclaim step (after `io`: destroyed
  // before it).
  HeartbeatScheduler heartbeats{io};
  // The store's memory policy (client/eviction.h); started by Client::Create for Redis.
  EvictionWatch eviction{io};
  // The runtime overrides of this client's limiters (made by UseStore; never null after).
  std::shared_ptr<OverrideCopy> overrides;

  // Puts the policy layer in front of `real` and makes it the store, and starts the
  // periodic reclaim of its embedded stores (PolicyStore::ReclaimStep) on `heartbeats`.
  void UseStore(std::shared_ptr<Store> real);

 private:
  // Runs a reclaim step, then schedules the next one kStepPeriod later.
  class Reclaimer;
  std::shared_ptr<Reclaimer> reclaimer_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  bool OnIoThread() const;
  std::vector<std::thread> threads_;
  const uint64_t fork_generation_;
  Mutex kept_mu_;
  std::unordered_map<const HeartbeatScheduler::Target*, std::shared_ptr<HeartbeatScheduler::Target>>
      kept_ SLUICE_GUARDED_BY(kept_mu_);
};

// 128 random bits from the kernel's CSPRNG as 22 base64url characters (lease members,
// reservation tokens): not derivable from the tokens handed out before.
std::string NewToken();
inline constexpr std::size_t kTokenChars = 22;

// Runs `start(deliver)`, an asynchronous call, so that `done` gets what `deliver` is called
// with on an I/O thread and never inside the caller: a result known before `start` returns
// (the embedded store, bad input, an open breaker, a cached denial) is posted, so a
// callback that calls again does not recurse without bound.
template <typename T, typename Start>
void CallNeverInline(const std::shared_ptr<ClientCore>& core, std::function<void(T)> done,
                     Start start) {
  auto returned = std::make_shared<std::atomic<bool>>(false);
  start(std::function<void(T)>([returned, core, done = std::move(done)](T result) mutable {
    if (returned->load(std::memory_order_acquire)) {
      done(std::move(result));
      return;
    }
    core->Post([done = std::move(done), result = std::move(result)]() mutable {
      done(std::move(result));
    });
  }));
  returned->store(true, std::memory_order_release);
}

// Builds a Client around a store made elsewhere (the fault-injecting wrapper in tests, a
// shared embedded store); the client puts its policy layer in front of it.
class ClientFactory {
 public:
  static StatusOr<std::shared_ptr<Client>> WithStore(ClientOptions options,
                                                     std::shared_ptr<Store> store);
  // Tests: the client's leases read `now` instead of BootClock. Set before the first
  // Acquire.
  static void UseBootClock(const Client& client, BootNow now) {
    client.core_->boot_now = std::move(now);
  }
  static const std::shared_ptr<Store>& StoreOf(const Client& client) { return client.core_->store; }
  static ClientCore& CoreOf(const Client& client) { return *client.core_; }
};

}  // namespace sluice::internal

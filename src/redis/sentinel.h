// Where a Sentinel-managed primary is (redis+sentinel://): a query link to each sentinel,
// asked SENTINEL GET-MASTER-ADDR-BY-NAME at every connect of the data connection, and one
// link subscribed to +switch-master so that a failover moves the data connection to the
// new primary at once (Connection::Redirect).
//
// Locate follows the Sentinel client rules: the sentinels are asked in order, the one
// that named the primary last first; a sentinel that is down, answers nil (it does not
// monitor the master), an error or anything but an address is left for the next one
// within the same deadline, and the one that answers moves to the front. When none
// names the primary, the error says what each sentinel's link answered or why it is
// down. A primary a sentinel named that turns out not to be one (ROLE) moves that
// sentinel to the back.
//
// The links skip the data connection's Redis >= 7 check (a Sentinel 6.2 naming a
// Redis 7 primary is common). The subscribed link moves to the front sentinel when the
// one it listens to does not know the master.
//
// The data connection asks at every (re)connect (so a break — the primary killed, a
// READONLY reply from a demoted primary — asks the sentinels again) and checks with ROLE
// that the server it reached is a primary (redis/connection.h).
//
// Thread-safety: thread-safe.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "core/mutex.h"
#include "redis/connection.h"
#include "redis/endpoint.h"
#include "sluice/status.h"

namespace sluice::internal {

class SentinelLocator : public std::enable_shared_from_this<SentinelLocator> {
 public:
  // `endpoint` is a Kind::kSentinel one; `data` the data connection's options (timeouts
  // and backoff carry over to the links).
  static std::shared_ptr<SentinelLocator> Make(boost::asio::any_io_executor executor,
                                               const Endpoint& endpoint,
                                               const ConnectionOptions& data);

  // The connection to move when the primary changes (set before Start).
  void Follow(const std::shared_ptr<Connection>& data);
  // Starts the links (in the background: they retry with their backoff).
  void Start();
  void Shutdown();

  // The primary's address as the first sentinel that knows it names it (see above);
  // waits (until `deadline`) for links that are still coming up. Unavailable naming
  // each sentinel's answer or error when none names the primary. `done` runs on an I/O
  // thread.
  void Locate(Deadline deadline, std::function<void(StatusOr<HostPort>)> done);

  // The data connection found `address` (as Locate named it) not to be a primary: the
  // sentinel that named it goes behind the others.
  void NotPrimary(const HostPort& address);

 private:
  struct Attempt;
  SentinelLocator(boost::asio::any_io_executor executor, Endpoint endpoint);
  // Asks the next sentinel of the attempt's round, or ends the round.
  void Next(const std::shared_ptr<Attempt>& attempt);
  // Sentinel `s` named the primary `address`: it goes to the front (and the subscribed
  // link to it when the one it listens to does not know the master).
  void Answered(size_t s, const HostPort& address);
  void OnMessage(const redisReply* reply);

  boost::asio::any_io_executor executor_;
  const Endpoint endpoint_;                         // the kSentinel endpoint
  std::vector<std::shared_ptr<Connection>> links_;  // one per sentinel, in URL order
  std::shared_ptr<Connection> watch_;
  std::atomic<bool> shutdown_{false};
  Mutex mu_;
  std::weak_ptr<Connection> data_ SLUICE_GUARDED_BY(mu_);
  // Indices into endpoint_.sentinels, the one to ask first first.
  std::vector<size_t> order_ SLUICE_GUARDED_BY(mu_);
  // Per sentinel: it answered nil (does not monitor the master) the last time it was asked.
  std::vector<bool> unknowing_ SLUICE_GUARDED_BY(mu_);
  // What the front sentinel named last (for NotPrimary).
  HostPort named_ SLUICE_GUARDED_BY(mu_);
  // The subscribed link: the sentinel it was sent to last, and its turn through order_.
  size_t watch_at_ SLUICE_GUARDED_BY(mu_) = 0;
  size_t watch_turn_ SLUICE_GUARDED_BY(mu_) = 0;
};

// The parts of a +switch-master message ("<name> <old ip> <old port> <new ip> <new
// port>"): the master's name and its new address; nullopt when malformed.
struct SwitchMaster {
  std::string name;
  HostPort to;
};
std::optional<SwitchMaster> ParseSwitchMaster(std::string_view message);

}  // namespace sluice::internal

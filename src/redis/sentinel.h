// Where a Sentinel-managed primary is (redis+sentinel://): two links to the sentinels,
// one asking SENTINEL GET-MASTER-ADDR-BY-NAME at every connect of the data connection,
// one subscribed to +switch-master so that a failover moves the data connection to the
// new primary at once (Connection::Redirect). Each link is a Connection that takes the
// sentinels in turn: a link whose sentinel is down moves to the next at its reconnect.
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

  // The primary's address as the first reachable sentinel names it; waits (until
  // `deadline`) for a link to come up. Unavailable naming the sentinels when none
  // answers or none knows the master. `done` runs on an I/O thread.
  void Locate(Deadline deadline, std::function<void(StatusOr<HostPort>)> done);

 private:
  SentinelLocator(boost::asio::any_io_executor executor, Endpoint endpoint);
  void LocateNow(Deadline deadline, std::function<void(StatusOr<HostPort>)> done);
  void OnMessage(const redisReply* reply);

  boost::asio::any_io_executor executor_;
  const Endpoint endpoint_;  // the kSentinel endpoint
  std::shared_ptr<Connection> query_;
  std::shared_ptr<Connection> watch_;
  std::atomic<bool> shutdown_{false};
  Mutex mu_;
  std::weak_ptr<Connection> data_ SLUICE_GUARDED_BY(mu_);
};

// The parts of a +switch-master message ("<name> <old ip> <old port> <new ip> <new
// port>"): the master's name and its new address; nullopt when malformed.
struct SwitchMaster {
  std::string name;
  HostPort to;
};
std::optional<SwitchMaster> ParseSwitchMaster(std::string_view message);

}  // namespace sluice::internal

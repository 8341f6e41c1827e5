// The Redis store: each algorithm's script, called by EVALSHA over one pipelined
// Connection per endpoint.
//
// Thread-safety: thread-safe.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <memory>

#include <boost/asio/any_io_executor.hpp>

#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/subscriber.h"
#include "store/store.h"

namespace sluice::internal {

// For the cluster router (redis/cluster_store.h), stores per primary: `cluster` tags each
// batchable call with its key's slot (a batch holds one slot and declares its keys), or,
// with `cross_slot_batches`, with Connection::kAnySlot (a batch spans the slots the
// primary serves, keys undeclared); `asking` sends ASKING right before every command, the
// connection's own NOSCRIPT resends included (ConnectionOptions::asking: the store that
// follows an ASK redirection; its calls go alone).
struct RedisStoreMode {
  bool cluster = false;
  bool cross_slot_batches = false;
  bool asking = false;
};

class RedisStore final : public Store {
 public:
  // Connects (see Connection::Start) and waits for the first result, at most
  // options.connect_timeout plus a second of grace; or, with `in_background`, returns at
  // once and lets the connection retry (with its reconnect backoff) until it is up.
  // `mode`: see RedisStoreMode.
  using Mode = RedisStoreMode;
  static StatusOr<std::shared_ptr<RedisStore>> Connect(boost::asio::any_io_executor executor,
                                                       Endpoint endpoint, ConnectionOptions options,
                                                       bool in_background = false,
                                                       Mode mode = RedisStoreMode());

  void Check(CheckCall call, DecisionCallback done) override;
  // Standalone Redis holds every key, so any set of keys is one script (the composite):
  // one group. (The cluster router groups by slot, and sends a composite's script to the
  // node of that slot.)
  std::optional<uint32_t> CompositeGroup(std::string_view) const override { return 0; }
  void CheckComposite(CompositeCall call, CompositeCallback done) override;
  void RunLease(LeaseCall call, LeaseCallback done) override;
  void AppendToStream(std::string key, std::vector<std::pair<std::string, std::string>> fields,
                      int64_t max_len, int64_t retention_ms, Deadline deadline,
                      std::function<void(Status)> done) override;
  // src/algo/quota_shares.lua, sent alone (EVALSHA).
  void AssignQuota(QuotaCall call, QuotaCallback done) override;
  // The subscriber's connection (redis/subscriber.h), made at the first watch; none in
  // cluster mode (the router's stores: a channel lives on its key's shard).
  std::shared_ptr<void> WatchLeaseSet(const std::string& key, std::function<void()> wake) override;
  bool connected() const override { return connection_->ready(); }
  // The connection's last_error, or "… connecting" before its first attempt ends.
  Status connection_error() const override;
  void Shutdown() override;
  ClientStats stats() const override;
  void Info(std::string_view section, Deadline deadline,
            std::function<void(StatusOr<std::string>)> done) override;

  Connection& connection() { return *connection_; }

 private:
  RedisStore(std::shared_ptr<Connection> connection, Mode mode,
             boost::asio::any_io_executor executor, ConnectionOptions options)
      : connection_(std::move(connection)),
        mode_(mode),
        executor_(std::move(executor)),
        options_(std::move(options)) {}
  // The batch tag of a call on `key` (its slot in cluster mode).
  uint32_t BatchTag(std::string_view key) const;
  std::shared_ptr<Connection> connection_;
  const Mode mode_;
  // What the subscriber connects with.
  boost::asio::any_io_executor executor_;
  ConnectionOptions options_;
  Mutex subscriber_mu_;
  std::shared_ptr<Subscriber> subscriber_ SLUICE_GUARDED_BY(subscriber_mu_);
  bool shut_down_ SLUICE_GUARDED_BY(subscriber_mu_) = false;
};

}  // namespace sluice::internal

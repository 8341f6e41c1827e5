// A private Sentinel-managed set for one test: a primary and `replicas` replicas (each a
// RedisServer) and `sentinels` sentinels (`redis-server <conf> --sentinel`, Debian's
// redis-sentinel being that same binary) on free loopback ports, all started and
// stopped by their pids. Ready when every replica's link to the primary is up and every
// sentinel knows the replicas and the other sentinels (so a failover can be agreed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "testing/redis_server.h"

namespace sluice::testing {

struct RedisSentinelOptions {
  int replicas = 1;
  int sentinels = 3;
  int quorum = 2;
  // How long a silent primary takes to be judged down, and the failover's own timeout.
  int down_after_ms = 1000;
  int failover_timeout_ms = 5000;
  std::string master_name = "sluice-primary";
  // Every data node and sentinel TLS only (replication too); url() is then
  // rediss+sentinel://...?ca=<file>.
  std::optional<RedisTlsFiles> tls;
};

class RedisSentinelSet {
 public:
  // Aborts the test binary with a clear message when the set cannot be made ready.
  explicit RedisSentinelSet(RedisSentinelOptions options = {});
  RedisSentinelSet(const RedisSentinelSet&) = delete;
  RedisSentinelSet& operator=(const RedisSentinelSet&) = delete;

  // redis+sentinel://127.0.0.1:<s1>,127.0.0.1:<s2>,.../<master name>, or
  // rediss+sentinel://...?ca=<file> with TLS
  std::string url() const;
  const std::string& master_name() const { return options_.master_name; }
  // The data nodes: the first primary first, then the replicas.
  RedisServer& data_node(size_t i) { return *data_[i]; }
  size_t data_nodes() const { return data_.size(); }
  RedisServer& sentinel(size_t i) { return *sentinels_[i]; }
  // The data node listening on `port` (aborts when none).
  RedisServer& DataNodeOnPort(uint16_t port);

  // The primary's port as the first live sentinel names it (0 when none answers).
  uint16_t PrimaryPort();
  // Waits (at most `timeout_ms`) until the sentinels name a primary other than
  // `old_port` and that node says it is one (ROLE); its port, or 0.
  uint16_t WaitForNewPrimary(uint16_t old_port, int timeout_ms);
  // Moves the primary from data node 0 to data node 1 behind the clients' backs: node 1
  // stops replicating, the sentinels are made to monitor it (SENTINEL REMOVE and MONITOR
  // announce no +switch-master), and node 0 replicates from it, answering READONLY to
  // writes. Only a READONLY reply tells a client it is on a demoted primary. Returns an
  // empty string when done, else what failed.
  std::string MovePrimarySilently();

 private:
  bool Ready();
  RedisSentinelOptions options_;
  std::vector<std::unique_ptr<RedisServer>> data_;
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
};

}  // namespace sluice::testing

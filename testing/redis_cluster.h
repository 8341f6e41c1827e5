// A private Redis Cluster for one test: `primaries` redis-servers in cluster mode (plus
// `replicas` per primary, for failover tests) on free loopback ports, each a RedisServer
// (started and stopped by its pid), joined by `redis-cli --cluster create`, and ready
// when every node says cluster_state:ok and agrees on who serves every slot.
// Also: commands on a chosen node or on the node of a key, keys over every primary, and
// the steps of a slot migration (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "testing/redis_server.h"

namespace sluice::testing {

struct RedisClusterOptions {
  int primaries = 3;
  int replicas = 0;  // per primary
  // cluster-node-timeout: how long a silent primary takes to be failed over.
  int node_timeout_ms = 1000;
  // cluster-require-full-coverage. Redis's default, yes, makes every primary refuse every
  // slot (CLUSTERDOWN) from the moment a primary is marked failed until a replica is
  // promoted in its place; no keeps the other primaries serving their slots meanwhile.
  bool require_full_coverage = true;
  // The nodes' directories in memory (/dev/shm, when it is a directory): every node
  // rewrites nodes.conf at each change of the cluster's configuration, with fsync at some
  // (an election), so a test that measures the client through a failover keeps a slow or
  // shared disk out of its figures.
  bool files_in_memory = false;
  // Every node TLS only, the cluster bus and replication too (tls-cluster,
  // tls-replication); url() is then rediss+cluster://...?ca=<file>.
  std::optional<RedisTlsFiles> tls;
};

class RedisCluster {
 public:
  // Aborts the test binary with a clear message when the cluster cannot be made.
  explicit RedisCluster(RedisClusterOptions options = {});
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // redis+cluster://127.0.0.1:<first>,127.0.0.1:<second> (two seeds), or
  // rediss+cluster://...?ca=<file> with TLS.
  std::string url() const;
  // Every node, primaries first (in creation order), then the replicas.
  const std::vector<std::unique_ptr<RedisServer>>& nodes() const { return nodes_; }
  RedisServer& node(size_t i) { return *nodes_[i]; }
  // The node listening on `port` (aborts when none).
  RedisServer& NodeOnPort(uint16_t port);

  // The port of the primary that serves `slot`, as the first live node sees it.
  uint16_t PrimaryPortOf(uint16_t slot) const;
  // The ports of the live primaries that serve slots.
  std::vector<uint16_t> PrimaryPorts() const;
  std::string NodeId(uint16_t port);
  // CLUSTER KEYSLOT, asked of a node.
  uint16_t KeySlot(const std::string& key);
  // Runs `args` on the primary of `key`'s slot.
  RedisValue CommandForKey(const std::string& key, const std::vector<std::string>& args);

  // Keys matching `pattern` over every live primary, and those with no expiry.
  std::vector<std::string> Keys(const std::string& pattern);
  std::vector<std::string> KeysWithoutTtl(const std::string& pattern);

  // A slot migration in steps: Begin (IMPORTING on `to`, MIGRATING on `from`), then
  // MigrateKeys moves up to `count` keys of the slot (MIGRATE), returning how many it
  // moved, and Finish (SETSLOT NODE on every primary) hands the slot to `to`.
  void BeginMigration(uint16_t slot, uint16_t from_port, uint16_t to_port);
  size_t MigrateKeys(uint16_t slot, uint16_t from_port, uint16_t to_port, size_t count);
  void FinishMigration(uint16_t slot, uint16_t from_port, uint16_t to_port);

  // A new empty primary (no slot yet) joined with CLUSTER MEET; its port once every live
  // node knows it and it says cluster_state:ok. It stays a primary when it gives away its
  // last slot (cluster-allow-replica-migration no), so that it can be forgotten.
  uint16_t AddPrimary();
  // Every other live node forgets the node on `port` (CLUSTER FORGET; it must serve no
  // slot): it leaves the cluster. The node itself keeps running.
  void Forget(uint16_t port);

  // Waits (at most `timeout_ms`) until every live node says cluster_state:ok and all
  // agree on the primary of every slot; false when they did not in time.
  bool WaitUntilStable(int timeout_ms);

 private:
  RedisClusterOptions options_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

// Runs a program (argv[0] looked up in PATH) with its output in `log_path`, waits for it
// at most `timeout_ms` (then kills it by its pid); its exit status, or -1.
int RunProgram(const std::vector<std::string>& argv, const std::string& log_path, int timeout_ms);

}  // namespace sluice::testing

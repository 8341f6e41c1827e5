#include "testing/redis_sentinel.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace sluice::testing {
namespace {

[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "redis sentinel test fixture: %s\n", what.c_str());
  std::abort();
}

// The value of `field` in a flat field/value array (SENTINEL MASTER, RESP2); empty when
// absent.
std::string Field(const RedisValue& flat, const std::string& field) {
  for (size_t i = 0; i + 1 < flat.elements.size(); i += 2) {
    if (flat.elements[i].str == field) return flat.elements[i + 1].str;
  }
  return "";
}

}  // namespace

RedisSentinelSet::RedisSentinelSet(RedisSentinelOptions options) : options_(std::move(options)) {
  const std::vector<std::string> tls_replication =
      options_.tls ? std::vector<std::string>{"--tls-replication", "yes"}
                   : std::vector<std::string>{};
  data_.push_back(std::make_unique<RedisServer>(
      RedisServerOptions{.extra_args = tls_replication, .tls = options_.tls}));
  const std::string primary_port = std::to_string(data_[0]->port());
  for (int i = 0; i < options_.replicas; ++i) {
    RedisServerOptions replica{.extra_args = tls_replication, .tls = options_.tls};
    for (const std::string& a :
         {std::string("--replicaof"), std::string("127.0.0.1"), primary_port}) {
      replica.extra_args.push_back(a);
    }
    data_.push_back(std::make_unique<RedisServer>(std::move(replica)));
  }
  const std::string& name = options_.master_name;
  const std::string config =
      "sentinel resolve-hostnames no\n"
      "sentinel monitor " +
      name + " 127.0.0.1 " + primary_port + " " + std::to_string(options_.quorum) + "\n" +
      "sentinel down-after-milliseconds " + name + " " + std::to_string(options_.down_after_ms) +
      "\nsentinel failover-timeout " + name + " " + std::to_string(options_.failover_timeout_ms) +
      "\nsentinel parallel-syncs " + name + " 1\n";
  for (int i = 0; i < options_.sentinels; ++i) {
    sentinels_.push_back(std::make_unique<RedisServer>(
        RedisServerOptions{.tls = options_.tls, .sentinel_config = config}));
  }
  // Sentinels find the replicas through the primary's INFO and each other through hello
  // messages (every 2 s): give them a while.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!Ready()) {
    if (std::chrono::steady_clock::now() > until) {
      Fatal("the sentinels did not learn the replicas and each other within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool RedisSentinelSet::Ready() {
  for (size_t i = 1; i < data_.size(); ++i) {
    if (data_[i]->Command({"INFO", "replication"}).str.find("master_link_status:up") ==
        std::string::npos) {
      return false;
    }
  }
  for (auto& sentinel : sentinels_) {
    RedisValue master = sentinel->Command({"SENTINEL", "MASTER", options_.master_name});
    if (Field(master, "num-slaves") != std::to_string(options_.replicas) ||
        Field(master, "num-other-sentinels") != std::to_string(options_.sentinels - 1)) {
      return false;
    }
  }
  return true;
}

std::string RedisSentinelSet::url() const {
  std::string url = options_.tls ? "rediss+sentinel://" : "redis+sentinel://";
  for (size_t i = 0; i < sentinels_.size(); ++i) {
    if (i > 0) url += ",";
    url += "127.0.0.1:" + std::to_string(sentinels_[i]->port());
  }
  url += "/" + options_.master_name;
  if (options_.tls) url += "?ca=" + options_.tls->ca_file;
  return url;
}

RedisServer& RedisSentinelSet::DataNodeOnPort(uint16_t port) {
  for (auto& node : data_) {
    if (node->port() == port) return *node;
  }
  Fatal("no data node on port " + std::to_string(port));
}

uint16_t RedisSentinelSet::PrimaryPort() {
  for (auto& sentinel : sentinels_) {
    if (!sentinel->running()) continue;
    RedisValue address =
        sentinel->Command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.master_name});
    if (address.elements.size() == 2) {
      return static_cast<uint16_t>(std::stoi(address.elements[1].str));
    }
  }
  return 0;
}

uint16_t RedisSentinelSet::WaitForNewPrimary(uint16_t old_port, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    const uint16_t port = PrimaryPort();
    if (port != 0 && port != old_port) {
      RedisValue role = DataNodeOnPort(port).Command({"ROLE"});
      if (!role.elements.empty() && role.elements[0].str == "master") return port;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

std::string RedisSentinelSet::MovePrimarySilently() {
  RedisServer& old = data_node(0);
  RedisServer& next = data_node(1);
  const auto expect_ok = [](const RedisValue& reply, const std::string& what) {
    return reply.str == "OK" ? std::string() : what + " answered " + reply.str;
  };
  if (auto e = expect_ok(next.Command({"REPLICAOF", "NO", "ONE"}), "REPLICAOF NO ONE"); !e.empty())
    return e;
  for (auto& sentinel : sentinels_) {
    if (auto e =
            expect_ok(sentinel->Command({"SENTINEL", "REMOVE", master_name()}), "SENTINEL REMOVE");
        !e.empty())
      return e;
    if (auto e = expect_ok(
            sentinel->Command({"SENTINEL", "MONITOR", master_name(), "127.0.0.1",
                               std::to_string(next.port()), std::to_string(options_.quorum)}),
            "SENTINEL MONITOR");
        !e.empty())
      return e;
  }
  if (auto e = expect_ok(old.Command({"REPLICAOF", "127.0.0.1", std::to_string(next.port())}),
                         "REPLICAOF");
      !e.empty())
    return e;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    // With an expiry, in case the write lands before the node turns replica.
    if (old.Command({"SET", "sentinel-set:probe", "1", "PX", "1000"}).str.starts_with("READONLY"))
      return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "the old primary did not answer READONLY within 10 s";
}

}  // namespace sluice::testing

#include "testing/redis_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace sluice::testing {
namespace {

[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "redis cluster test fixture: %s\n", what.c_str());
  std::abort();
}

using Clock = std::chrono::steady_clock;

// Where the nodes' directories are made (RedisClusterOptions::files_in_memory).
std::string NodesParentDir(const RedisClusterOptions& options) {
  std::error_code ec;
  if (options.files_in_memory && std::filesystem::is_directory("/dev/shm", ec)) return "/dev/shm";
  return "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// slot -> primary port, from CLUSTER SLOTS of one node; empty on an error reply.
std::vector<int> SlotOwners(const RedisServer& node) {
  RedisValue slots = node.Command({"CLUSTER", "SLOTS"});
  std::vector<int> owners(16384, 0);
  if (slots.type != RedisValue::Type::kArray) return {};
  for (const auto& row : slots.elements) {
    if (row.elements.size() < 3 || row.elements[2].elements.size() < 2) return {};
    for (long long s = row.elements[0].integer; s <= row.elements[1].integer && s < 16384; ++s) {
      owners[static_cast<size_t>(s)] = static_cast<int>(row.elements[2].elements[1].integer);
    }
  }
  return owners;
}

}  // namespace

int RunProgram(const std::vector<std::string>& argv, const std::string& log_path, int timeout_ms) {
  // Built before fork: the child allocates nothing (see redis_server.cc).
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (Clock::now() >= until) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

RedisCluster::RedisCluster(RedisClusterOptions options) : options_(options) {
  const int total = options_.primaries * (1 + options_.replicas);
  for (int i = 0; i < total; ++i) {
    // RedisServer picks a free port and retries on another when the server exits at
    // start (here also when port + 10000, the cluster bus, is taken). The nodes'
    // configuration file lives in each server's own directory (--dir).
    RedisServerOptions node{
        .extra_args = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                       "--cluster-node-timeout", std::to_string(options_.node_timeout_ms),
                       "--cluster-require-full-coverage",
                       options_.require_full_coverage ? "yes" : "no"},
        .tls = options_.tls,
        .parent_dir = NodesParentDir(options_)};
    if (options_.tls) {
      for (const char* a : {"--tls-cluster", "yes", "--tls-replication", "yes"}) {
        node.extra_args.push_back(a);
      }
    }
    nodes_.push_back(std::make_unique<RedisServer>(std::move(node)));
  }
  std::vector<std::string> argv = {CliProgram(), "--cluster", "create"};
  if (options_.tls) {
    // The server certificate serves as redis-cli's client certificate too.
    argv.insert(argv.begin() + 1, {"--tls", "--cacert", options_.tls->ca_file, "--cert",
                                   options_.tls->cert_file, "--key", options_.tls->key_file});
  }
  for (const auto& node : nodes_) argv.push_back("127.0.0.1:" + std::to_string(node->port()));
  argv.push_back("--cluster-replicas");
  argv.push_back(std::to_string(options_.replicas));
  argv.push_back("--cluster-yes");
  char log_template[] = "/tmp/sluice-cluster-create-XXXXXX";
  const int fd = ::mkstemp(log_template);
  if (fd < 0) Fatal("mkstemp failed");
  ::close(fd);
  const int status = RunProgram(argv, log_template, 60'000);
  const std::string log = ReadFile(log_template);
  ::unlink(log_template);
  if (status != 0) {
    Fatal("redis-cli --cluster create failed (status " + std::to_string(status) + "):\n" + log);
  }
  if (!WaitUntilStable(30'000)) Fatal("the cluster did not become stable within 30 s");
  if (options_.replicas > 0) {
    // Every replica attached (its primary lists it) before a test may fail one over.
    const auto until = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      size_t attached = 0;
      RedisValue slots = nodes_[0]->Command({"CLUSTER", "SLOTS"});
      std::map<long long, size_t> replicas;  // primary port -> replicas listed
      for (const auto& row : slots.elements) {
        if (row.elements.size() >= 3) {
          replicas[row.elements[2].elements[1].integer] = row.elements.size() - 3;
        }
      }
      for (const auto& [port, n] : replicas) attached += n;
      if (attached >= static_cast<size_t>(options_.primaries * options_.replicas)) break;
      if (Clock::now() >= until) Fatal("the replicas did not attach within 30 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

RedisCluster::~RedisCluster() = default;

std::string RedisCluster::url() const {
  std::string url = std::string(options_.tls ? "rediss" : "redis") +
                    "+cluster://127.0.0.1:" + std::to_string(nodes_[0]->port());
  if (nodes_.size() > 1) url += ",127.0.0.1:" + std::to_string(nodes_[1]->port());
  if (options_.tls) url += "?ca=" + options_.tls->ca_file;
  return url;
}

RedisServer& RedisCluster::NodeOnPort(uint16_t port) {
  for (auto& node : nodes_) {
    if (node->port() == port) return *node;
  }
  Fatal("no node on port " + std::to_string(port));
}

bool RedisCluster::WaitUntilStable(int timeout_ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    bool ok = true;
    std::vector<int> first;
    for (const auto& node : nodes_) {
      if (!node->running()) continue;
      RedisValue info = node->Command({"CLUSTER", "INFO"});
      if (info.str.find("cluster_state:ok") == std::string::npos) {
        ok = false;
        break;
      }
      std::vector<int> owners = SlotOwners(*node);
      bool full = !owners.empty();
      for (int port : owners) full = full && port != 0;
      if (!full || (!first.empty() && owners != first)) {
        ok = false;
        break;
      }
      first = std::move(owners);
    }
    if (ok) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

uint16_t RedisCluster::PrimaryPortOf(uint16_t slot) const {
  for (const auto& node : nodes_) {
    if (!node->running()) continue;
    std::vector<int> owners = SlotOwners(*node);
    if (!owners.empty()) return static_cast<uint16_t>(owners[slot]);
  }
  Fatal("no live node answered CLUSTER SLOTS");
}

std::vector<uint16_t> RedisCluster::PrimaryPorts() const {
  for (const auto& node : nodes_) {
    if (!node->running()) continue;
    std::vector<int> owners = SlotOwners(*node);
    if (owners.empty()) continue;
    std::vector<uint16_t> ports;
    for (int port : owners) {
      if (port != 0 &&
          std::find(ports.begin(), ports.end(), static_cast<uint16_t>(port)) == ports.end()) {
        ports.push_back(static_cast<uint16_t>(port));
      }
    }
    return ports;
  }
  Fatal("no live node answered CLUSTER SLOTS");
}

std::string RedisCluster::NodeId(uint16_t port) {
  return NodeOnPort(port).Command({"CLUSTER", "MYID"}).str;
}

uint16_t RedisCluster::KeySlot(const std::string& key) {
  for (const auto& node : nodes_) {
    if (node->running()) {
      return static_cast<uint16_t>(node->Command({"CLUSTER", "KEYSLOT", key}).integer);
    }
  }
  Fatal("no live node");
}

RedisValue RedisCluster::CommandForKey(const std::string& key,
                                       const std::vector<std::string>& args) {
  return NodeOnPort(PrimaryPortOf(KeySlot(key))).Command(args);
}

std::vector<std::string> RedisCluster::Keys(const std::string& pattern) {
  std::vector<std::string> keys;
  for (uint16_t port : PrimaryPorts()) {
    for (auto& key : NodeOnPort(port).Keys(pattern)) keys.push_back(std::move(key));
  }
  return keys;
}

std::vector<std::string> RedisCluster::KeysWithoutTtl(const std::string& pattern) {
  std::vector<std::string> keys;
  for (uint16_t port : PrimaryPorts()) {
    for (auto& key : NodeOnPort(port).KeysWithoutTtl(pattern)) keys.push_back(std::move(key));
  }
  return keys;
}

void RedisCluster::BeginMigration(uint16_t slot, uint16_t from_port, uint16_t to_port) {
  const std::string s = std::to_string(slot);
  RedisValue a =
      NodeOnPort(to_port).Command({"CLUSTER", "SETSLOT", s, "IMPORTING", NodeId(from_port)});
  RedisValue b =
      NodeOnPort(from_port).Command({"CLUSTER", "SETSLOT", s, "MIGRATING", NodeId(to_port)});
  if (a.type == RedisValue::Type::kError || b.type == RedisValue::Type::kError) {
    Fatal("CLUSTER SETSLOT IMPORTING/MIGRATING failed: " + a.str + " / " + b.str);
  }
}

size_t RedisCluster::MigrateKeys(uint16_t slot, uint16_t from_port, uint16_t to_port,
                                 size_t count) {
  RedisValue keys = NodeOnPort(from_port).Command(
      {"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), std::to_string(count)});
  if (keys.elements.empty()) return 0;
  std::vector<std::string> args = {"MIGRATE", "127.0.0.1", std::to_string(to_port), "", "0",
                                   "5000",    "KEYS"};
  for (const auto& k : keys.elements) args.push_back(k.str);
  RedisValue reply = NodeOnPort(from_port).Command(args);
  if (reply.type == RedisValue::Type::kError && reply.str.find("BUSYKEY") != std::string::npos) {
    // A lease set's per-minute history (`…}:ch`) is written beside the set by whichever
    // node an acquire reaches during the slot's migration, so it can exist on both; the
    // source's copy replaces the target's, as `redis-cli --cluster reshard
    // --cluster-replace` does (docs/operating.md, On a Redis Cluster). Any other key found
    // on both nodes is a failure.
    std::string others;
    for (const auto& k : keys.elements) {
      const bool busy = NodeOnPort(to_port).Command({"EXISTS", k.str}).integer == 1;
      if (busy && !k.str.ends_with("}:ch")) others += " " + k.str;
    }
    if (!others.empty()) Fatal("MIGRATE failed: keys on both nodes:" + others);
    args.insert(args.begin() + 6, "REPLACE");
    reply = NodeOnPort(from_port).Command(args);
  }
  if (reply.type == RedisValue::Type::kError) Fatal("MIGRATE failed: " + reply.str);
  return keys.elements.size();
}

void RedisCluster::FinishMigration(uint16_t slot, uint16_t from_port, uint16_t to_port) {
  const std::string s = std::to_string(slot);
  const std::string to_id = NodeId(to_port);
  // The new owner first, then the old one, then the rest (as redis-cli does).
  std::vector<uint16_t> order = {to_port, from_port};
  for (uint16_t port : PrimaryPorts()) {
    if (port != to_port && port != from_port) order.push_back(port);
  }
  for (uint16_t port : order) {
    RedisValue r = NodeOnPort(port).Command({"CLUSTER", "SETSLOT", s, "NODE", to_id});
    if (r.type == RedisValue::Type::kError) Fatal("CLUSTER SETSLOT NODE failed: " + r.str);
  }
}

uint16_t RedisCluster::AddPrimary() {
  RedisServerOptions node{
      .extra_args = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", std::to_string(options_.node_timeout_ms),
                     "--cluster-require-full-coverage",
                     options_.require_full_coverage ? "yes" : "no",
                     "--cluster-allow-replica-migration", "no"},
      .tls = options_.tls,
      .parent_dir = NodesParentDir(options_)};
  if (options_.tls) {
    for (const char* a : {"--tls-cluster", "yes", "--tls-replication", "yes"}) {
      node.extra_args.push_back(a);
    }
  }
  nodes_.push_back(std::make_unique<RedisServer>(std::move(node)));
  RedisServer& added = *nodes_.back();
  const std::string id = added.Command({"CLUSTER", "MYID"}).str;
  RedisValue met =
      nodes_.front()->Command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(added.port())});
  if (met.type == RedisValue::Type::kError) Fatal("CLUSTER MEET failed: " + met.str);
  const auto until = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    bool known = true;
    for (const auto& n : nodes_) {
      if (!n->running()) continue;
      // Its line, as a primary past the handshake: "<id> <addr> [myself,]master - ...".
      const std::string nodes = n->Command({"CLUSTER", "NODES"}).str;
      const size_t at = nodes.find(id);
      const std::string line =
          at == std::string::npos ? std::string() : nodes.substr(at, nodes.find('\n', at) - at);
      if (line.find("master") == std::string::npos || line.find("handshake") != std::string::npos ||
          line.find("noaddr") != std::string::npos) {
        known = false;
      }
    }
    // And the new node knows them all.
    const std::string view = added.Command({"CLUSTER", "NODES"}).str;
    known = known &&
            std::count(view.begin(), view.end(), '\n') >= static_cast<long>(nodes_.size() - 1) &&
            added.Command({"CLUSTER", "INFO"}).str.find("cluster_state:ok") != std::string::npos;
    if (known) break;
    if (Clock::now() > until) Fatal("the new node did not join within 30 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return added.port();
}

void RedisCluster::Forget(uint16_t port) {
  const std::string id = NodeId(port);
  for (const auto& n : nodes_) {
    if (!n->running() || n->port() == port) continue;
    RedisValue r = n->Command({"CLUSTER", "FORGET", id});
    if (r.type == RedisValue::Type::kError) Fatal("CLUSTER FORGET failed: " + r.str);
  }
}

}  // namespace sluice::testing

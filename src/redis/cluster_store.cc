#include "redis/cluster_store.h"

#include <algorithm>
#include <thread>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>

#include "core/client_side.h"
#include "redis/crc16.h"

namespace sluice::internal {

namespace asio = boost::asio;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

constexpr milliseconds kMinBackoff{1};
constexpr milliseconds kMaxBackoff{100};

const Status& StatusOf(const Status& status) {
  return status;
}
template <typename T>
const Status& StatusOf(const StatusOr<T>& result) {
  static const Status ok;
  return result.ok() ? ok : result.status();
}

// A call of a cross-slot batch that the primary refused to run (its key is in a slot the
// node does not serve, or the cluster is down): the script stopped at the key's first
// access, so nothing was written and it can be sent again with the key declared.
bool NotRunHere(const Status& status) {
  return status.message().find("Script attempted to access a non local key") != std::string::npos ||
         status.message().find("Script attempted to execute a command while the cluster is down") !=
             std::string::npos ||
         status.message().find(
             "Script attempted to execute a write command while the cluster is "
             "down") != std::string::npos;
}

// A call that failed before it was written (Connection::Enqueue: "is not connected"):
// safe to send again.
bool NeverSent(const Status& status) {
  return status.code() == StatusCode::kUnavailable &&
         status.message().find(" is not connected") != std::string::npos;
}

// A node that cannot answer: not connected, the connection lost, or a deadline passed
// with no reply on the connection (a stalled or partitioned node). Not a backlog in this
// client (core/client_side.h).
bool Unreachable(const Status& status) {
  return (status.code() == StatusCode::kUnavailable ||
          status.code() == StatusCode::kDeadlineExceeded) &&
         !IsClientSide(status);
}

}  // namespace

template <typename Result>
struct ClusterStore::Attempt {
  uint16_t slot = 0;
  Deadline deadline;
  std::function<void(RedisStore&, std::function<void(Result)>)> run;
  std::function<void(Result)> done;
  int redirects = 0;
  int waits = 0;
  bool slotted = false;  // sent through the nodes' slotted stores (after a fallback)
};

ClusterStore::ClusterStore(asio::any_io_executor executor, std::vector<Endpoint> seeds,
                           ConnectionOptions options, milliseconds refresh_interval)
    : executor_(executor),
      strand_(asio::make_strand(executor)),
      periodic_(strand_),
      seeds_(std::move(seeds)),
      options_(std::move(options)),
      refresh_interval_(refresh_interval),
      slot_node_(kClusterSlots, -1) {}

ClusterStore::~ClusterStore() = default;

StatusOr<std::shared_ptr<ClusterStore>> ClusterStore::Connect(asio::any_io_executor executor,
                                                              std::vector<Endpoint> seeds,
                                                              ConnectionOptions options,
                                                              bool in_background,
                                                              milliseconds refresh_interval) {
  if (seeds.empty()) return InvalidArgumentError("a Redis Cluster URL needs a seed node");
  const milliseconds wait = options.connect_timeout + std::chrono::seconds(1);
  std::shared_ptr<ClusterStore> store(
      new ClusterStore(executor, seeds, std::move(options), refresh_interval));
  if (in_background) {
    for (const Endpoint& seed : store->seeds_) store->NodeAt(seed.host, seed.port);
    store->ArmPeriodic();
    return store;
  }
  // The first seed that answers.
  Status last;
  bool any = false;
  for (const Endpoint& seed : store->seeds_) {
    auto node = RedisStore::Connect(executor, seed, store->options_, /*in_background=*/false,
                                    {.cluster = true, .cross_slot_batches = true});
    if (!node.ok()) {
      last = node.status();
      continue;
    }
    auto n = std::make_shared<Node>();
    n->endpoint = seed;
    n->address = seed.Describe();
    n->store = *std::move(node);
    MutexLock lock(store->mu_);
    n->domain = store->next_domain_++;
    store->nodes_.push_back(std::move(n));
    any = true;
    break;
  }
  if (!any) return last;
  if (Status s = store->RefreshNow(wait); !s.ok()) {
    store->Shutdown();
    return s;
  }
  // Every primary of the map connected.
  const auto until = steady_clock::now() + wait;
  for (const Endpoint& primary : store->Primaries()) {
    auto node = store->NodeAt(primary.host, primary.port);
    while (!node->store->connected() && steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(2));
    }
    if (!node->store->connected()) {
      store->Shutdown();
      return UnavailableError("cannot connect to redis cluster primary " + node->address);
    }
  }
  store->ArmPeriodic();
  return store;
}

std::shared_ptr<ClusterStore::Node> ClusterStore::NodeAt(const std::string& host, uint16_t port) {
  MutexLock lock(mu_);
  return NodeAtLocked(host, port);
}

std::shared_ptr<ClusterStore::Node> ClusterStore::NodeAtLocked(const std::string& host,
                                                               uint16_t port) {
  for (const auto& node : nodes_) {
    if (node->endpoint.host == host && node->endpoint.port == port) return node;
  }
  auto node = std::make_shared<Node>();
  node->endpoint = seeds_.front();  // user and password
  node->endpoint.kind = Endpoint::Kind::kTcp;
  node->endpoint.host = host;
  node->endpoint.port = port;
  node->endpoint.db = 0;
  node->address = node->endpoint.Describe();
  // In the background: never fails (the connection retries with its backoff).
  node->store = *RedisStore::Connect(executor_, node->endpoint, options_, /*in_background=*/true,
                                     {.cluster = true, .cross_slot_batches = true});
  node->domain = next_domain_++;
  nodes_.push_back(node);
  return node;
}

std::shared_ptr<ClusterStore::Node> ClusterStore::NodeForSlot(uint16_t slot) {
  MutexLock lock(mu_);
  const int index = slot_node_[slot];
  return index < 0 ? nullptr : nodes_[static_cast<size_t>(index)];
}

std::shared_ptr<RedisStore> ClusterStore::AskingStore(const std::shared_ptr<Node>& node) {
  MutexLock lock(mu_);
  if (!node->asking) {
    node->asking = *RedisStore::Connect(executor_, node->endpoint, options_,
                                        /*in_background=*/true, {.cluster = true, .asking = true});
  }
  return node->asking;
}

std::shared_ptr<RedisStore> ClusterStore::SlottedStore(const std::shared_ptr<Node>& node) {
  MutexLock lock(mu_);
  if (!node->slotted) {
    node->slotted = *RedisStore::Connect(executor_, node->endpoint, options_,
                                         /*in_background=*/true, {.cluster = true});
  }
  return node->slotted;
}

template <typename Result>
void ClusterStore::Route(uint16_t slot, Deadline deadline,
                         std::function<void(RedisStore&, std::function<void(Result)>)> run,
                         std::function<void(Result)> done) {
  auto attempt = std::make_shared<Attempt<Result>>();
  attempt->slot = slot;
  attempt->deadline = deadline;
  attempt->run = std::move(run);
  attempt->done = std::move(done);
  Run(attempt, nullptr, false);
}

template <typename Result>
void ClusterStore::Run(const std::shared_ptr<Attempt<Result>>& attempt,
                       std::shared_ptr<Node> target, bool asking) {
  if (!target) target = NodeForSlot(attempt->slot);
  if (!target) {
    RequestRefresh();
    RetryLater(attempt, Result(UnavailableError("no node of the redis cluster is known to serve "
                                                "slot " +
                                                std::to_string(attempt->slot) + " (yet)")));
    return;
  }
  // `target` (captured below) keeps the store alive while the call runs.
  std::shared_ptr<RedisStore> store = asking             ? AskingStore(target)
                                      : attempt->slotted ? SlottedStore(target)
                                                         : target->store;
  attempt->run(*store, [self = shared_from_this(), attempt, target, asking](Result result) {
    self->OnResult(attempt, target, asking, std::move(result));
  });
}

template <typename Result>
void ClusterStore::OnResult(const std::shared_ptr<Attempt<Result>>& attempt,
                            const std::shared_ptr<Node>& node, bool asking, Result result) {
  const Status& status = StatusOf(result);
  NoteOutcome(*node, status);
  if (status.ok() || shutdown_.load(std::memory_order_relaxed)) {
    attempt->done(std::move(result));
    return;
  }
  std::optional<ClusterError> error = ClusterErrorOf(status, node->endpoint.host);
  if (!error && !attempt->slotted && !asking && NotRunHere(status)) {
    {
      MutexLock lock(mu_);
      ++router_stats_.slot_fallbacks;
    }
    attempt->slotted = true;
    RequestRefresh();
    Run(attempt, node, /*asking=*/false);
    return;
  }
  if (!error) {
    if (NeverSent(status)) {
      if (asking) {
        // The connection kept for ASK is still being made: ask the same node again.
        RetryLater(attempt, std::move(result), node, /*asking=*/true);
        return;
      }
      // A node down (a failover?): the map may name its successor soon.
      RequestRefresh();
      RetryLater(attempt, std::move(result));
      return;
    }
    // A node that cannot answer: is it being failed over?
    if (Unreachable(status)) RequestRefresh();
    attempt->done(std::move(result));
    return;
  }
  switch (error->kind) {
    case ClusterError::Kind::kMoved:
    case ClusterError::Kind::kAsk: {
      const bool moved = error->kind == ClusterError::Kind::kMoved;
      std::shared_ptr<Node> target;
      {
        MutexLock lock(mu_);
        ++(moved ? router_stats_.moved : router_stats_.asked);
        if (++attempt->redirects > kMaxRedirects) {
          ++router_stats_.redirects_exhausted;
        } else {
          target = NodeAtLocked(error->host, error->port);
          if (moved) {
            const auto it = std::find(nodes_.begin(), nodes_.end(), target);
            slot_node_[error->slot] = static_cast<int>(it - nodes_.begin());
          }
        }
      }
      if (moved) RequestRefresh();
      if (!target) {
        attempt->done(std::move(result));
        return;
      }
      Run(attempt, std::move(target), /*asking=*/!moved);
      return;
    }
    case ClusterError::Kind::kReadOnly: RequestRefresh(); [[fallthrough]];
    case ClusterError::Kind::kTryAgain:
    case ClusterError::Kind::kClusterDown: RetryLater(attempt, std::move(result)); return;
  }
}

void ClusterStore::NoteOutcome(Node& node, const Status& status) {
  const bool failing = Unreachable(status);
  // Read first: a store per call would bounce the line between the I/O threads.
  if (node.failing.load(std::memory_order_relaxed) != failing) {
    node.failing.store(failing, std::memory_order_relaxed);
  }
}

template <typename Result>
void ClusterStore::RetryLater(const std::shared_ptr<Attempt<Result>>& attempt, Result result,
                              std::shared_ptr<Node> target, bool asking) {
  const milliseconds backoff =
      std::min<milliseconds>(kMinBackoff * (1 << std::min(attempt->waits, 10)), kMaxBackoff);
  if (shutdown_.load(std::memory_order_relaxed) ||
      steady_clock::now() + backoff >= attempt->deadline) {
    attempt->done(std::move(result));
    return;
  }
  ++attempt->waits;
  {
    MutexLock lock(mu_);
    ++router_stats_.retried;
  }
  auto timer = std::make_shared<asio::steady_timer>(executor_, backoff);
  timer->async_wait([self = shared_from_this(), attempt, timer, target = std::move(target),
                     asking](boost::system::error_code) { self->Run(attempt, target, asking); });
}

void ClusterStore::Check(CheckCall call, DecisionCallback done) {
  const uint16_t slot = KeySlot(call.key);
  const Deadline deadline = call.deadline;
  // The call is kept whole for a retry; each attempt sends a copy.
  auto shared = std::make_shared<CheckCall>(std::move(call));
  Route<StatusOr<Decision>>(
      slot, deadline,
      [shared](RedisStore& store, std::function<void(StatusOr<Decision>)> then) {
        store.Check(*shared, std::move(then));
      },
      std::move(done));
}

std::optional<uint32_t> ClusterStore::CompositeGroup(std::string_view key) const {
  return KeySlot(key);
}

void ClusterStore::CheckComposite(CompositeCall call, CompositeCallback done) {
  if (call.calls.empty()) {
    done(InvalidArgumentError("a composite check takes at least one limit"));
    return;
  }
  const uint16_t slot = KeySlot(call.calls[0].key);
  for (const CheckCall& c : call.calls) {
    if (KeySlot(c.key) != slot) {
      done(InvalidArgumentError("a composite check on redis cluster needs every key in one slot; " +
                                c.key + " is not in the slot of " + call.calls[0].key));
      return;
    }
  }
  const Deadline deadline = call.calls[0].deadline;
  auto shared = std::make_shared<CompositeCall>(std::move(call));
  Route<StatusOr<CompositeOutcome>>(
      slot, deadline,
      [shared](RedisStore& store, std::function<void(StatusOr<CompositeOutcome>)> then) {
        store.CheckComposite(*shared, std::move(then));
      },
      std::move(done));
}

void ClusterStore::RunLease(LeaseCall call, LeaseCallback done) {
  const uint16_t slot = KeySlot(call.key);
  const Deadline deadline = call.deadline;
  auto shared = std::make_shared<LeaseCall>(std::move(call));
  Route<StatusOr<LeaseResult>>(
      slot, deadline,
      [shared](RedisStore& store, std::function<void(StatusOr<LeaseResult>)> then) {
        store.RunLease(*shared, std::move(then));
      },
      std::move(done));
}

void ClusterStore::AppendToStream(std::string key,
                                  std::vector<std::pair<std::string, std::string>> fields,
                                  int64_t max_len, int64_t retention_ms, Deadline deadline,
                                  std::function<void(Status)> done) {
  const uint16_t slot = KeySlot(key);
  Route<Status>(
      slot, deadline,
      [key = std::move(key), fields = std::move(fields), max_len, retention_ms, deadline](
          RedisStore& store, std::function<void(Status)> then) {
        store.AppendToStream(key, fields, max_len, retention_ms, deadline, std::move(then));
      },
      std::move(done));
}

void ClusterStore::AssignQuota(QuotaCall call, QuotaCallback done) {
  const uint16_t slot = KeySlot(call.key);
  const Deadline deadline = call.deadline;
  Route<StatusOr<QuotaShareReply>>(
      slot, deadline,
      [call = std::move(call)](RedisStore& store,
                               std::function<void(StatusOr<QuotaShareReply>)> then) {
        store.AssignQuota(call, std::move(then));
      },
      std::move(done));
}

void ClusterStore::Overrides(OverrideCall call, OverrideCallback done) {
  if (call.keys.empty()) return done(InvalidArgumentError("an override call names no hash"));
  const uint16_t slot = KeySlot(call.keys.front());
  const Deadline deadline = call.deadline;
  Route<StatusOr<OverrideReply>>(
      slot, deadline,
      [call = std::move(call)](RedisStore& store,
                               std::function<void(StatusOr<OverrideReply>)> then) {
        store.Overrides(call, std::move(then));
      },
      std::move(done));
}

uint64_t ClusterStore::FaultDomain(std::string_view key) const {
  const uint16_t slot = KeySlot(key);
  MutexLock lock(mu_);
  const int index = slot_node_[slot];
  return index < 0 ? 0 : nodes_[static_cast<size_t>(index)]->domain;
}

std::vector<FaultDomainInfo> ClusterStore::FaultDomains() const {
  MutexLock lock(mu_);
  std::vector<bool> seen(nodes_.size(), false);
  std::vector<FaultDomainInfo> out;
  bool unserved = false;
  for (int index : slot_node_) {
    if (index < 0) {
      unserved = true;
      continue;
    }
    if (seen[static_cast<size_t>(index)]) continue;
    seen[static_cast<size_t>(index)] = true;
    const Node& node = *nodes_[static_cast<size_t>(index)];
    out.push_back({node.domain, node.address});
  }
  if (unserved) out.push_back(FaultDomainInfo{});
  return out;
}

bool ClusterStore::connected() const {
  MutexLock lock(mu_);
  if (!map_known_) return false;
  std::vector<bool> seen(nodes_.size(), false);
  for (int index : slot_node_) {
    if (index < 0 || seen[static_cast<size_t>(index)]) continue;
    seen[static_cast<size_t>(index)] = true;
    if (!nodes_[static_cast<size_t>(index)]->store->connected()) return false;
  }
  return true;
}

Status ClusterStore::connection_error() const {
  std::vector<std::shared_ptr<Node>> nodes;  // asked outside mu_ (each takes its own lock)
  {
    MutexLock lock(mu_);
    if (!map_known_) {
      if (!last_refresh_error_.ok()) return last_refresh_error_;
      nodes = nodes_;  // the seeds
    } else {
      std::vector<bool> seen(nodes_.size(), false);
      for (int index : slot_node_) {
        if (index < 0 || seen[static_cast<size_t>(index)]) continue;
        seen[static_cast<size_t>(index)] = true;
        nodes.push_back(nodes_[static_cast<size_t>(index)]);
      }
    }
  }
  for (const auto& node : nodes) {
    if (Status why = node->store->connection_error(); !why.ok()) return why;
  }
  if (connected()) return Status::Ok();
  return UnavailableError("redis cluster: reading its slot map");
}

void ClusterStore::ShutdownNode(const Node& node) {
  node.store->Shutdown();
  std::shared_ptr<RedisStore> asking, slotted;
  {
    MutexLock lock(mu_);
    asking = node.asking;
    slotted = node.slotted;
  }
  if (asking) asking->Shutdown();
  if (slotted) slotted->Shutdown();
}

void ClusterStore::Shutdown() {
  if (shutdown_.exchange(true)) return;
  std::vector<std::shared_ptr<Node>> nodes;
  {
    MutexLock lock(mu_);
    nodes = nodes_;
  }
  for (const auto& node : nodes) ShutdownNode(*node);
  asio::post(strand_, [self = shared_from_this()] { self->periodic_.cancel(); });
}

ClientStats ClusterStore::stats() const {
  std::vector<std::shared_ptr<RedisStore>> stores;
  {
    MutexLock lock(mu_);
    for (const auto& node : nodes_) {
      stores.push_back(node->store);
      if (node->asking) stores.push_back(node->asking);
      if (node->slotted) stores.push_back(node->slotted);
    }
  }
  ClientStats total;
  for (const auto& store : stores) {
    ClientStats s = store->stats();
    total.commands += s.commands;
    total.writes += s.writes;
    total.deadline_exceeded += s.deadline_exceeded;
    total.reconnects += s.reconnects;
    total.noscript_retries += s.noscript_retries;
  }
  return total;
}

void ClusterStore::Info(std::string_view section, Deadline deadline,
                        std::function<void(StatusOr<std::string>)> done) {
  std::shared_ptr<Node> node = NodeForSlot(0);
  if (!node) {
    done(UnavailableError("the redis cluster's slot map is not known yet"));
    return;
  }
  node->store->Info(section, deadline, std::move(done));
}

ClusterStore::RouterStats ClusterStore::router_stats() const {
  MutexLock lock(mu_);
  RouterStats out = router_stats_;
  out.nodes = nodes_.size();
  return out;
}

std::string ClusterStore::NodeOf(uint16_t slot) const {
  MutexLock lock(mu_);
  const int index = slot_node_[slot];
  return index < 0 ? std::string() : nodes_[static_cast<size_t>(index)]->address;
}

std::vector<Endpoint> ClusterStore::Primaries() const {
  MutexLock lock(mu_);
  std::vector<bool> seen(nodes_.size(), false);
  std::vector<Endpoint> out;
  for (int index : slot_node_) {
    if (index < 0 || seen[static_cast<size_t>(index)]) continue;
    seen[static_cast<size_t>(index)] = true;
    out.push_back(nodes_[static_cast<size_t>(index)]->endpoint);
  }
  return out;
}

}  // namespace sluice::internal

// The Redis Cluster store: routes each call to the primary that serves its key's hash
// slot, over one auto-pipelined Connection per primary (a RedisStore each, in cluster
// mode: its batches never span slots).
//
// The slot map comes from CLUSTER SLOTS, asked at start, every refresh_interval, after a
// MOVED, after a connection failure and after a call that missed its deadline with no
// reply; and every kUnreachableRefresh while a primary of the map is unreachable (not
// connected, or its last call failed so), so that a replica promoted in its place is
// known within that much of its promotion, whether or not calls still reach the dead
// node (its breaker stops them). Slots a map leaves without a primary (Redis leaves a
// primary marked failed out of CLUSTER SLOTS until its replacement is promoted) keep their
// last one, and a slot handed from an unreachable primary to one not connected yet stays
// with the first until the second is up: either way the calls stay with the breaker that
// already answers them, instead of failing on an unknown slot or a connection still being
// made (which would open the new primary's breaker for a cool-down). A node absent from
// kRetireAfterAbsentMaps maps in a row is retired (its stores shut down, never
// reconnected). A call that meets
//   - MOVED: the slot is moved in the map at once, a refresh starts in the background,
//     and the call is sent again to the named node;
//   - ASK (a slot in mid-migration): the call is sent once to the named node right after
//     ASKING (on a second connection to that node kept for this, see RedisStore::Mode,
//     which puts ASKING before the connection's NOSCRIPT resend too);
//   - TRYAGAIN, CLUSTERDOWN, READONLY (a demoted primary), or a node not connected (the
//     call was never sent): retried with exponential backoff (1 ms up to 100 ms) while
//     the call's deadline leaves room, else answered with the last error;
//   - a connection lost with the call in flight: answered Unavailable, never resent (the
//     script may have run); a refresh starts.
// Every redirection is bounded (kMaxRedirects per call). NOSCRIPT is answered per node by
// its Connection (EVAL, which caches the script there: a promoted replica has none).
//
// Batches: the calls queued for one primary share a batch whatever their slots (the keys
// go undeclared, src/algo/batch.lua), so batching pays on a cluster as on one node. A
// call of such a batch whose key the primary does not serve (the map is stale, or its
// slot is migrating and the key has left) fails alone, before anything is written
// ("Script attempted to access a non local key"; the same while the cluster is down):
// it is sent again, and from then on, through the node's `slotted` connection, whose
// batches hold one slot and declare it, so Redis answers it with MOVED, ASK or
// CLUSTERDOWN, handled as above; a map refresh starts.
//
// Several limits on one request: a script can touch one slot only, so composites are
// grouped by slot (CompositeGroup): limits whose keys share a slot (co-located,
// LimiterOptions::colocate) are one composite script on that slot's node, routed as any
// call; CheckComposite stages the others (docs/design.md §6).
//
// cluster_store.cc routes the calls; cluster_map.cc reads and applies the slot map.
//
// Thread-safety: thread-safe; callbacks run on the I/O threads (or inline when a call
// cannot be routed at all).
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "core/mutex.h"
#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/redis_store.h"
#include "redis/slot_map.h"
#include "store/store.h"

namespace sluice::internal {

class ClusterStore final : public Store, public std::enable_shared_from_this<ClusterStore> {
 public:
  static constexpr int kMaxRedirects = 5;
  // How often the slot map is read while a primary of the map is unreachable or no map
  // is known yet.
  static constexpr std::chrono::milliseconds kUnreachableRefresh{50};

  // Connects to the first seed that answers, reads the slot map and connects to every
  // primary, waiting at most options.connect_timeout plus a second for each step; or,
  // with `in_background`, returns at once and keeps trying (calls before the map is
  // known fail Unavailable). `refresh_interval`: the periodic refresh.
  static StatusOr<std::shared_ptr<ClusterStore>> Connect(
      boost::asio::any_io_executor executor, std::vector<Endpoint> seeds, ConnectionOptions options,
      bool in_background = false,
      std::chrono::milliseconds refresh_interval = std::chrono::seconds(5));
  ~ClusterStore() override;

  void Check(CheckCall call, DecisionCallback done) override;
  // The key's hash slot.
  std::optional<uint32_t> CompositeGroup(std::string_view key) const override;
  // InvalidArgument when the keys lie in more than one slot.
  void CheckComposite(CompositeCall call, CompositeCallback done) override;
  void RunLease(LeaseCall call, LeaseCallback done) override;
  void AppendToStream(std::string key, std::vector<std::pair<std::string, std::string>> fields,
                      int64_t max_len, int64_t retention_ms, Deadline deadline,
                      std::function<void(Status)> done) override;
  // Routed by the key's slot, as every call.
  void AssignQuota(QuotaCall call, QuotaCallback done) override;
  // Every key of one call is of one slot (MakeOverridesKey): routed by the first.
  void Overrides(OverrideCall call, OverrideCallback done) override;
  // Each primary is a fault domain of its own (a node's id, never reused: a replica
  // promoted in its place, or the node made anew after it was retired, is another); a
  // key whose slot the map does not name yet is in domain 0.
  bool HasFaultDomains() const override { return true; }
  uint64_t FaultDomain(std::string_view key) const override;
  // The primaries of the map, and domain 0 while some slot has none.
  std::vector<FaultDomainInfo> FaultDomains() const override;
  // Whether the slot map is known and every primary in it is connected.
  bool connected() const override;
  // Before the slot map is known, why it is not (the last refresh's error, else a seed's
  // connection error); after, the first primary of the map that is not connected's.
  Status connection_error() const override;
  void Shutdown() override;
  ClientStats stats() const override;
  // INFO of the primary that serves slot 0.
  void Info(std::string_view section, Deadline deadline,
            std::function<void(StatusOr<std::string>)> done) override;

  // For tests and operators.
  struct RouterStats {
    uint64_t moved = 0;      // MOVED replies followed
    uint64_t asked = 0;      // ASK replies followed
    uint64_t retried = 0;    // calls sent again after a backoff
    uint64_t refreshes = 0;  // slot maps read
    uint64_t redirects_exhausted = 0;
    // calls of a cross-slot batch that met a key this node does not serve, sent again
    // with their key declared
    uint64_t slot_fallbacks = 0;
    // nodes retired: absent from kRetireAfterAbsentMaps slot maps in a row
    uint64_t nodes_retired = 0;
    // nodes the router holds connections to now
    uint64_t nodes = 0;
  };
  // A node that this many slot maps in a row do not name is retired: dropped from nodes_
  // and its connections shut down (a node removed from the cluster, a pod replaced with
  // a new address), so it is not reconnected to for the client's lifetime.
  static constexpr int kRetireAfterAbsentMaps = 3;
  RouterStats router_stats() const;
  // "host:port" of the primary the map names for `slot`; empty when none.
  std::string NodeOf(uint16_t slot) const;
  // The primaries of the current map, each once.
  std::vector<Endpoint> Primaries() const;
  // Reads the slot map now and waits for it (at most `timeout`).
  Status RefreshNow(std::chrono::milliseconds timeout);

 private:
  struct Node {
    Endpoint endpoint;
    std::string address;                  // endpoint.Describe()
    std::shared_ptr<RedisStore> store;    // its batches span slots (keys undeclared)
    std::shared_ptr<RedisStore> slotted;  // one slot per batch: made at the first fallback
    std::shared_ptr<RedisStore> asking;   // made at the first ASK to this node
    // Slot maps read in a row that do not name this node (guarded by the store's mu_).
    int absent = 0;
    // Its latest call failed as a node that cannot answer does (never sent: not
    // connected; connection lost; deadline passed with no reply); cleared by a success.
    std::atomic<bool> failing{false};
    uint64_t domain = 0;  // its fault domain (FaultDomain), set when made
  };
  template <typename Result>
  struct Attempt;

  ClusterStore(boost::asio::any_io_executor executor, std::vector<Endpoint> seeds,
               ConnectionOptions options, std::chrono::milliseconds refresh_interval);

  // The node at host:port, made (connecting in the background) when new.
  std::shared_ptr<Node> NodeAt(const std::string& host, uint16_t port) SLUICE_EXCLUDES(mu_);
  std::shared_ptr<Node> NodeAtLocked(const std::string& host, uint16_t port) SLUICE_REQUIRES(mu_);
  std::shared_ptr<Node> NodeForSlot(uint16_t slot) SLUICE_EXCLUDES(mu_);
  std::shared_ptr<RedisStore> AskingStore(const std::shared_ptr<Node>& node) SLUICE_EXCLUDES(mu_);
  std::shared_ptr<RedisStore> SlottedStore(const std::shared_ptr<Node>& node) SLUICE_EXCLUDES(mu_);

  template <typename Result>
  void Route(uint16_t slot, Deadline deadline,
             std::function<void(RedisStore&, std::function<void(Result)>)> run,
             std::function<void(Result)> done);
  template <typename Result>
  void Run(const std::shared_ptr<Attempt<Result>>& attempt, std::shared_ptr<Node> target,
           bool asking);
  template <typename Result>
  void OnResult(const std::shared_ptr<Attempt<Result>>& attempt, const std::shared_ptr<Node>& node,
                bool asking, Result result);
  // Runs the attempt again after a backoff, on `target` (null: the slot's node in the map
  // then), or answers `result` when the deadline leaves no room.
  template <typename Result>
  void RetryLater(const std::shared_ptr<Attempt<Result>>& attempt, Result result,
                  std::shared_ptr<Node> target = nullptr, bool asking = false);

  // Starts a refresh unless one runs (then another follows it).
  void RequestRefresh() SLUICE_EXCLUDES(mu_);
  // Reads CLUSTER SLOTS from the first connected node of `candidates` that answers.
  void RefreshFrom(std::vector<std::shared_ptr<Node>> candidates, size_t next,
                   std::function<void(Status)> done);
  void Apply(const std::vector<SlotRange>& ranges) SLUICE_EXCLUDES(mu_);
  void RefreshFinished(Status status) SLUICE_EXCLUDES(mu_);
  // Ticks every kUnreachableRefresh; a tick reads the map when none is known, when a
  // primary of the map is unreachable, or refresh_interval after the last map read.
  void ArmPeriodic() SLUICE_EXCLUDES(mu_);
  bool MapDueLocked(std::chrono::steady_clock::time_point now) const SLUICE_REQUIRES(mu_);
  // Connected, and its latest call did not fail as an unreachable node's.
  static bool Reachable(const Node& node);
  // Stops a node's connections (its own, and its ASKING and slotted ones if made): at
  // Shutdown, and for a node the slot map retired.
  void ShutdownNode(const Node& node) SLUICE_EXCLUDES(mu_);
  // Notes the outcome of a call on `node` for MapDueLocked.
  static void NoteOutcome(Node& node, const Status& status);

  boost::asio::any_io_executor executor_;
  boost::asio::strand<boost::asio::any_io_executor> strand_;  // the periodic timer's
  boost::asio::steady_timer periodic_;                        // on strand_
  const std::vector<Endpoint> seeds_;
  const ConnectionOptions options_;
  const std::chrono::milliseconds refresh_interval_;
  std::atomic<bool> shutdown_{false};

  mutable Mutex mu_;
  // Every node met and not retired.
  std::vector<std::shared_ptr<Node>> nodes_ SLUICE_GUARDED_BY(mu_);
  // Per slot, an index into nodes_; -1: unknown.
  std::vector<int> slot_node_ SLUICE_GUARDED_BY(mu_);
  // The indices into nodes_ of the map's primaries, each once.
  std::vector<int> primaries_ SLUICE_GUARDED_BY(mu_);
  bool map_known_ SLUICE_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point map_read_at_ SLUICE_GUARDED_BY(mu_){};
  bool refreshing_ SLUICE_GUARDED_BY(mu_) = false;
  bool refresh_again_ SLUICE_GUARDED_BY(mu_) = false;
  Status last_refresh_error_ SLUICE_GUARDED_BY(mu_);
  RouterStats router_stats_ SLUICE_GUARDED_BY(mu_);
  uint64_t retired_ SLUICE_GUARDED_BY(mu_) = 0;
  uint64_t next_domain_ SLUICE_GUARDED_BY(mu_) = 1;  // the next node's fault domain
};

}  // namespace sluice::internal

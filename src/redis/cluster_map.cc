// The Redis Cluster router's slot map upkeep (redis/cluster_store.h): reading CLUSTER
// SLOTS from the first node that answers (asked at start, on request, and on the periodic
// tick), applying what it says (slots left without a primary, a slot handed to a primary
// not connected yet, nodes retired), and the tick, which reads the map every
// kUnreachableRefresh while a primary of it is unreachable. cluster_store.cc routes the
// calls by the map this keeps.
#include "redis/cluster_store.h"

#include <algorithm>
#include <future>
#include <unordered_map>

#include <hiredis/hiredis.h>
#include <boost/asio/post.hpp>

#include "redis/crc16.h"
#include "redis/reply.h"
#include "redis/resp.h"

namespace sluice::internal {

namespace asio = boost::asio;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

Status ClusterStore::RefreshNow(milliseconds timeout) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto result = promise->get_future();
  std::vector<std::shared_ptr<Node>> candidates;
  {
    MutexLock lock(mu_);
    candidates = nodes_;
  }
  RefreshFrom(std::move(candidates), 0,
              [promise](Status status) { promise->set_value(std::move(status)); });
  if (result.wait_for(timeout) != std::future_status::ready) {
    return DeadlineExceededError("reading the redis cluster's slot map took longer than " +
                                 std::to_string(timeout.count()) + " ms");
  }
  return result.get();
}

void ClusterStore::RequestRefresh() {
  std::vector<std::shared_ptr<Node>> candidates;
  {
    MutexLock lock(mu_);
    if (refreshing_) {
      refresh_again_ = true;
      return;
    }
    refreshing_ = true;
    refresh_again_ = false;
    // The primaries of the map first, then every other node met (seeds, old primaries).
    std::vector<bool> taken(nodes_.size(), false);
    for (int index : slot_node_) {
      if (index < 0 || taken[static_cast<size_t>(index)]) continue;
      taken[static_cast<size_t>(index)] = true;
      candidates.push_back(nodes_[static_cast<size_t>(index)]);
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!taken[i]) candidates.push_back(nodes_[i]);
    }
  }
  // A node whose calls fail is asked last: a stalled one would hold the refresh for the
  // whole CLUSTER SLOTS deadline before the next were asked.
  std::stable_partition(candidates.begin(), candidates.end(), [](const auto& node) {
    return !node->failing.load(std::memory_order_relaxed);
  });
  RefreshFrom(std::move(candidates), 0,
              [self = shared_from_this()](Status status) { self->RefreshFinished(status); });
}

void ClusterStore::RefreshFinished(Status status) {
  bool again = false;
  {
    MutexLock lock(mu_);
    refreshing_ = false;
    again = refresh_again_ && !shutdown_.load(std::memory_order_relaxed);
    refresh_again_ = false;
    if (!status.ok()) last_refresh_error_ = status;
  }
  if (!again) return;
  // Another refresh was asked for while this one ran: run it a little later, so that a
  // burst of MOVED replies costs one more CLUSTER SLOTS, not one each.
  auto timer = std::make_shared<asio::steady_timer>(executor_, milliseconds(20));
  timer->async_wait([self = shared_from_this(), timer](boost::system::error_code) {
    if (!self->shutdown_.load(std::memory_order_relaxed)) self->RequestRefresh();
  });
}

void ClusterStore::RefreshFrom(std::vector<std::shared_ptr<Node>> candidates, size_t next,
                               std::function<void(Status)> done) {
  while (next < candidates.size() && !candidates[next]->store->connected()) ++next;
  if (next >= candidates.size() || shutdown_.load(std::memory_order_relaxed)) {
    // Why no node could be asked: the first connection error among them.
    std::string why;
    for (const auto& node : candidates) {
      if (Status s = node->store->connection_error(); !s.ok()) {
        why = ": " + std::string(s.message());
        break;
      }
    }
    done(UnavailableError("no node of the redis cluster answered CLUSTER SLOTS" + why));
    return;
  }
  std::shared_ptr<Node> node = candidates[next];
  node->store->connection().Send(
      FormatCommand({"CLUSTER", "SLOTS"}), steady_clock::now() + options_.connect_timeout,
      [self = shared_from_this(), candidates = std::move(candidates), next, node,
       done = std::move(done)](const Status& status, const redisReply* reply) mutable {
        // An ERR reply ("ERR This instance has cluster support disabled") is parsed, so
        // that a server not in cluster mode says so (FailedPrecondition); a transient
        // refusal (LOADING, CLUSTERDOWN: Unavailable) or a lost connection moves on to
        // the next node.
        const bool answered =
            reply != nullptr && (status.ok() || status.code() == StatusCode::kInternal);
        StatusOr<std::vector<SlotRange>> ranges =
            answered ? ParseClusterSlots(CopyReply(*reply), node->endpoint.host)
                     : StatusOr<std::vector<SlotRange>>(status);
        if (ranges.ok() && ranges->empty()) {
          ranges = UnavailableError("redis " + node->address + " knows no slot of its cluster");
        }
        if (!ranges.ok()) {
          // A server that is not in cluster mode says so at once: no other node will
          // disagree about what was configured.
          if (ranges.status().code() == StatusCode::kFailedPrecondition) {
            done(ranges.status());
            return;
          }
          // Off the strand of this connection before the next node is asked.
          asio::post(self->executor_, [self, candidates = std::move(candidates), next,
                                       done = std::move(done)]() mutable {
            self->RefreshFrom(std::move(candidates), next + 1, std::move(done));
          });
          return;
        }
        self->Apply(*ranges);
        done(Status::Ok());
      });
}

void ClusterStore::Apply(const std::vector<SlotRange>& ranges) {
  std::vector<std::shared_ptr<Node>> retired;
  {
    MutexLock lock(mu_);
    // After Shutdown no node is made: nobody would shut it down.
    if (shutdown_.load(std::memory_order_relaxed)) return;
    std::vector<std::shared_ptr<Node>> named;
    std::vector<const Node*> owner(kClusterSlots, nullptr);  // by slot
    for (const SlotRange& range : ranges) {
      named.push_back(NodeAtLocked(range.host, range.port));
      for (uint32_t slot = range.first; slot <= range.last; ++slot)
        owner[slot] = named.back().get();
    }
    // Slots the map leaves without a primary keep their last one. Redis leaves a primary
    // marked failed out of CLUSTER SLOTS until a replica is promoted in its place (seen
    // with 7.0), and until then its slots' calls belong to its fault domain: its breaker
    // answers them at once, where a slot of no known primary would send each call through
    // the retries of an unknown slot to domain 0's breaker. Such a node counts as named.
    if (map_known_) {
      for (uint32_t slot = 0; slot < kClusterSlots; ++slot) {
        if (owner[slot] != nullptr || slot_node_[slot] < 0) continue;
        const std::shared_ptr<Node>& last = nodes_[static_cast<size_t>(slot_node_[slot])];
        owner[slot] = last.get();
        if (std::find(named.begin(), named.end(), last) == named.end()) named.push_back(last);
      }
    }
    // A slot handed from an unreachable primary to one whose connection is not up yet (a
    // replica promoted in its place, met for the first time) stays with the first until
    // the second is connected: the first's breaker answers its calls at once, where the
    // second's would be opened by calls that find it still connecting. The map is read
    // every kUnreachableRefresh meanwhile (MapDueLocked), so it moves within that much of
    // the connection being up.
    if (map_known_) {
      for (uint32_t slot = 0; slot < kClusterSlots; ++slot) {
        if (owner[slot] == nullptr || slot_node_[slot] < 0) continue;
        const std::shared_ptr<Node>& last = nodes_[static_cast<size_t>(slot_node_[slot])];
        if (owner[slot] == last.get() || Reachable(*last) || owner[slot]->store->connected()) {
          continue;
        }
        owner[slot] = last.get();
        if (std::find(named.begin(), named.end(), last) == named.end()) named.push_back(last);
      }
    }
    // Nodes this map does not name count towards retirement; the named ones start over.
    std::vector<std::shared_ptr<Node>> kept;
    for (const auto& node : nodes_) {
      const bool in_map = std::find(named.begin(), named.end(), node) != named.end();
      node->absent = in_map ? 0 : node->absent + 1;
      if (node->absent >= kRetireAfterAbsentMaps) {
        retired.push_back(node);
      } else {
        kept.push_back(node);
      }
    }
    nodes_ = std::move(kept);
    std::unordered_map<const Node*, int> index_of;
    for (size_t i = 0; i < nodes_.size(); ++i)
      index_of.emplace(nodes_[i].get(), static_cast<int>(i));
    std::vector<int> map(kClusterSlots, -1);
    for (uint32_t slot = 0; slot < kClusterSlots; ++slot) {
      if (owner[slot] != nullptr) map[slot] = index_of.at(owner[slot]);
    }
    slot_node_ = std::move(map);
    primaries_.clear();
    std::vector<bool> seen(nodes_.size(), false);
    for (int index : slot_node_) {
      if (index < 0 || seen[static_cast<size_t>(index)]) continue;
      seen[static_cast<size_t>(index)] = true;
      primaries_.push_back(index);
    }
    map_known_ = true;
    map_read_at_ = steady_clock::now();
    ++router_stats_.refreshes;
    router_stats_.nodes_retired += retired.size();
    last_refresh_error_ = Status::Ok();
  }
  // Calls in flight on a retired node fail Unavailable and are routed again by the map.
  for (const auto& node : retired) ShutdownNode(*node);
}

bool ClusterStore::Reachable(const Node& node) {
  return node.store->connected() && !node.failing.load(std::memory_order_relaxed);
}

bool ClusterStore::MapDueLocked(steady_clock::time_point now) const {
  if (!map_known_ || now - map_read_at_ >= refresh_interval_) return true;
  for (int index : primaries_) {
    if (!Reachable(*nodes_[static_cast<size_t>(index)])) return true;
  }
  return false;
}

void ClusterStore::ArmPeriodic() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->shutdown_.load(std::memory_order_relaxed)) return;
    self->periodic_.expires_after(
        std::min<milliseconds>(kUnreachableRefresh, self->refresh_interval_));
    self->periodic_.async_wait([self](boost::system::error_code ec) {
      if (ec || self->shutdown_.load(std::memory_order_relaxed)) return;
      bool due = false;
      {
        MutexLock lock(self->mu_);
        due = self->MapDueLocked(steady_clock::now());
      }
      if (due) self->RequestRefresh();
      self->ArmPeriodic();
    });
  });
}

}  // namespace sluice::internal

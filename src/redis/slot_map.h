// What a Redis Cluster says about itself, parsed: the slot map (CLUSTER SLOTS) and the
// error replies a cluster node sends instead of running a command (MOVED, ASK,
// TRYAGAIN, CLUSTERDOWN, READONLY).
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis/reply.h"
#include "sluice/status.h"

namespace sluice::internal {

// Slots `first`..`last` (inclusive) are served by the primary at host:port.
struct SlotRange {
  uint16_t first = 0;
  uint16_t last = 0;
  std::string host;
  uint16_t port = 0;
  bool operator==(const SlotRange&) const = default;
};

// Parses the reply to CLUSTER SLOTS: per range [first, last, [host, port, id, ...],
// replicas...]; only the primary (the first node) is kept. A primary announced with an
// empty host or "?" (a node that does not know its own address) is taken to live on
// `asked_host`, the host the command was sent to, as Redis documents.
StatusOr<std::vector<SlotRange>> ParseClusterSlots(const Reply& reply, std::string_view asked_host);

// What a cluster node answered instead of running a command.
struct ClusterError {
  enum class Kind {
    kMoved,        // the slot lives on host:port now, for good
    kAsk,          // the slot is migrating: ask host:port, this once (ASKING first)
    kTryAgain,     // a multi-key call met a slot in mid-migration: retry soon
    kClusterDown,  // the cluster cannot serve (a failover is in progress): retry soon
    kReadOnly,     // written to a replica (a demoted primary): refresh the map, retry
  };
  Kind kind = Kind::kMoved;
  uint16_t slot = 0;  // kMoved, kAsk
  std::string host;   // kMoved, kAsk
  uint16_t port = 0;  // kMoved, kAsk
};

// Parses an error reply ("MOVED 3999 127.0.0.1:6381"); nullopt for any other error. An
// empty host (":6381", a node that does not know its address) becomes `asked_host`.
std::optional<ClusterError> ParseClusterError(std::string_view error, std::string_view asked_host);

// The same, read from a Status made by ErrorReplyToStatus ("redis <where> answered:
// <error reply>").
std::optional<ClusterError> ClusterErrorOf(const Status& status, std::string_view asked_host);

}  // namespace sluice::internal

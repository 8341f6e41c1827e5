// A simulated fleet of Envoys speaking RLQS (StreamRateLimitQuotas) to sluiced: each client
// holds one grpc++ bidi stream (on a connection of its own, or shared by a few clients), generates
// requests open loop at its own demand schedule and decides each one locally as Envoy's
// rate_limit_quota filter does (no-assignment behaviour, blanket rules, token buckets with their
// TTL, abandon, reports every interval). The same demand can instead go through RLS (one
// ShouldRateLimit per request), for comparison. Used by rlqs_fleet_test.cc and, through
// sluiced_rlqs_fleet, by bench/rlqs.sh and bench/rlqs_fleet_scale.sh.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluiced::bench {

// From `at_s` (seconds after the fleet's start) on, `rate` requests/s, evenly spaced; the
// steps are sorted by at_s and the demand is 0 before the first.
struct DemandStep {
  double at_s = 0;
  double rate = 0;
};
using DemandSchedule = std::vector<DemandStep>;

// The demand in force at `t_s`.
double DemandAt(const DemandSchedule& schedule, double t_s);

// A bucket id: RLQS's BucketId map; through RLS, its entries sorted by key are one descriptor.
using BucketId = std::map<std::string, std::string>;

struct FleetClient {
  std::string domain = "fleet";
  BucketId bucket = {{"rule", "hot"}};
  DemandSchedule demand;
};

enum class FleetMode { kRlqs, kRls };

// What a client does with a request while it holds no assignment for its bucket (Envoy's
// no_assignment_behavior).
enum class NoAssignment { kAllowAll, kDenyAll };

struct FleetOptions {
  // host:port of each sluiced; client i connects to targets[i % size] first and, after its
  // stream ends, to the next one in turn.
  std::vector<std::string> targets;
  std::vector<FleetClient> clients;
  // Clients sharing one HTTP/2 connection per target: client i's streams go on connection
  // i / streams_per_connection (sluiced allows 100 concurrent streams per connection).
  int streams_per_connection = 1;
  double seconds = 10;  // the run ends this long after `start`
  // How often each client reports (Envoy's reporting_interval is 5 s).
  std::chrono::milliseconds report_interval{5000};
  NoAssignment no_assignment = NoAssignment::kAllowAll;
  FleetMode mode = FleetMode::kRlqs;
  int rls_threads = 4;  // kRls: each thread makes its clients' calls one at a time
  // The fleet's time 0 (default: when RunFleet is called): a caller that acts on the run
  // while it goes (stopping Redis at second 16) shares the timeline.
  std::optional<std::chrono::steady_clock::time_point> start;
  // How often the driver plays every client's timeline up to the present: a request is
  // decided at its scheduled time whatever the tick, but an assignment is applied up to a
  // tick late.
  std::chrono::milliseconds tick{1};
};

enum class AssignmentKind : uint8_t { kNone, kAllowAll, kDenyAll, kTokenBucket };

// One client's second [s, s + 1) of the run.
struct SecondStats {
  uint64_t requests = 0, admitted = 0, denied = 0;  // by each request's scheduled time
  uint64_t assignments = 0;  // quota assignments received (applied to the client's bucket)
  // Tokens the assignments put in the token bucket: a new bucket starts full (max_tokens),
  // a changed one keeps its fill ratio, so a larger max_tokens adds tokens at once.
  double tokens_created = 0;
  // The assignment in force at the second's end, and its rate (token bucket only).
  AssignmentKind kind = AssignmentKind::kNone;
  double assigned_rate = 0;
};

struct ClientResult {
  std::vector<SecondStats> seconds;
  uint64_t reports_sent = 0;  // RLQS: report messages written on a stream
  uint64_t responses = 0;     // RLQS: response messages received
  uint64_t streams = 0;       // RLQS: streams opened (the first, then each reconnect)
  uint64_t stream_ends = 0;   // RLQS: streams that ended before the run did
  uint64_t errors = 0;        // RLS: calls that failed (counted as admitted, as Envoy's default)
  double max_lag_s = 0;       // RLS: the latest a call was sent after its scheduled time
  // RLQS: the first assignment the client applied (kNone: it never got one), its rate
  // (token bucket), and how long after the client's first request (its subscription) it
  // came, in seconds.
  AssignmentKind first_kind = AssignmentKind::kNone;
  double first_rate = 0, first_after_s = -1;
  uint64_t blanket_assignments = 0;  // RLQS: ALLOW_ALL or DENY_ALL assignments applied
};

// The fleet's sums over its clients, per second.
struct FleetSecond {
  double demand = 0;  // the scheduled demand at the second's start, requests/s
  uint64_t requests = 0, admitted = 0, denied = 0, assignments = 0;
  double tokens_created = 0;
  double assigned_rate = 0;  // sum over the clients holding a token bucket at the second's end
  int allow_all = 0, deny_all = 0, no_assignment = 0;  // clients in each state then
};

struct FleetResult {
  std::vector<ClientResult> clients;
  std::vector<FleetSecond> fleet;
  uint64_t requests = 0, admitted = 0, denied = 0;
  uint64_t reports_sent = 0, responses = 0, streams = 0, stream_ends = 0, errors = 0;
  uint64_t blanket_assignments = 0;
  double max_lag_s = 0;
};

// Runs the fleet until options.seconds after its start (blocks), then closes every stream
// (half-close, cancelled after 2 s) and returns what each client saw.
FleetResult RunFleet(const FleetOptions& options);

// n weights summing to 1, client i's proportional to 1 / (i + 1)^skew (0: all equal).
std::vector<double> SkewedShares(int n, double skew);

}  // namespace sluiced::bench

// service/rlqs.h — Envoy's Rate Limit Quota Service (RLQS v3,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas) on
// sluiced's gRPC listener: each client (an Envoy) reports per bucket what it allowed and
// denied since its last report, and gets back, per bucket, an assignment it enforces
// on its own until the next one (a token bucket, allow-all or deny-all) or an abandon.
//
// A bucket id (a map of strings) is matched as an RLS descriptor whose entries are the
// map's, sorted by key in byte order, in the report's domain: one config serves RLS and
// RLQS. A rate limit's clients share its rate through the store (sluice::QuotaShares):
// each report records the client's demand and grants it a share in proportion to it,
// the sum of the live grants of a bucket never above the limit, whichever sluiced
// instance serves which client (docs/rlqs.md derives the bounds).
//
// Thread-safety: a stream's messages arrive on its connection's strand; the store's
// answers on the client's I/O threads; a stream's state is guarded by its own mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "service/engine.h"
#include "service/h2_server.h"
#include "sluice/status.h"

namespace envoy::type::v3 {
class RateLimitStrategy;
}  // namespace envoy::type::v3

namespace sluiced {

// What a bucket that matches no rate limit gets: an unknown domain, no rule, a
// concurrency rule.
enum class RlqsUnmatched { kAllowAll, kDenyAll, kAbandon };
// "allow_all", "deny_all", "abandon"; false for anything else.
bool ParseRlqsUnmatched(std::string_view text, RlqsUnmatched& out);

struct RlqsOptions {
  // How often the clients report (Envoy's filter: every 5 s). The assignments' time to
  // live is twice that, in whole seconds (at least 1 s): an assignment outlives one lost
  // report. Default: 5 s.
  std::chrono::milliseconds report_interval{5000};
  RlqsUnmatched unmatched = RlqsUnmatched::kAllowAll;
  // A bucket reported idle (no request) this many reports in a row is abandoned: the
  // client forgets it and its share is given back. Default: 3.
  int idle_reports = 3;
};

// The deadline of a quota call (to Redis): a fifth of the report interval, never below
// `request_deadline` (the request path's). A client keeps its assignment while it waits for
// the next, so a quota call can wait far longer than a check; a Redis slower than the
// check deadline (a wave of subscriptions, a busy or distant Redis) then still answers
// shares instead of the failure policy.
std::chrono::milliseconds RlqsStoreDeadline(std::chrono::milliseconds report_interval,
                                            std::chrono::milliseconds request_deadline);

// The bounds a client meets (docs/rlqs.md, Bounds). A report is one gRPC message, at most
// GrpcServerOptions::max_message_bytes (1 MiB); its buckets are bounded by that alone,
// and by the buckets a stream may hold.
inline constexpr std::size_t kRlqsMaxBucketsPerStream = 10000;
// Reports received while an earlier one waits for the store are merged into one (per bucket:
// the counts and the elapsed times added), answered once the earlier one is: a burst of
// first reports (Envoy sends one per new bucket, at once) queues nothing more than the
// buckets themselves.
// The state of a stream (its buckets' ids in the stores, the report being answered, the
// merged one waiting, and its answer) is charged, in bytes, to its connection's and the
// server's state budgets (GrpcServerOptions::max_connection_state_bytes and
// max_server_state_bytes): a report that would go over ends its stream RESOURCE_EXHAUSTED.
// Bytes charged per bucket a stream holds, over its ids' lengths (the map's node, its
// strings' headers).
inline constexpr std::size_t kRlqsBucketOverheadBytes = 160;
// A report's demand is clamped to the largest the stores take (QuotaShareRequest's bound:
// 10^9 requests a second); a limit's rate likewise.
inline constexpr int64_t kRlqsMaxRateMilli = 1'000'000'000'000;

// The assignment's time to live for `report_interval`: 2x, whole seconds, at least 1 s
// (Envoy reads only a Duration's seconds; an unset or zero TTL expires at once).
std::chrono::seconds RlqsTtl(std::chrono::milliseconds report_interval);

// A client's demand in milli-requests per second: what it allowed and denied over
// `elapsed`, taken as at least a second (Envoy's first report of a bucket says 0 s), at
// least one request a second (what a subscription counts as: a bucket reported without
// requests keeps a small share, so that its next request is not refused by a DENY_ALL
// while the limit has room; it is abandoned after --rlqs-idle-reports such reports), at
// most kRlqsMaxRateMilli.
int64_t RlqsDemandMilli(uint64_t allowed, uint64_t denied, std::chrono::milliseconds elapsed);

// The longest fill interval a grant of at least one request a minute is given: its rate is
// then within 1/60 of a request a second of the grant.
inline constexpr int64_t kRlqsMaxFillSeconds = 60;

// The token bucket for a grant of `grant_milli` of a limit of `rate_milli` with capacity
// `burst` (both > 0): floor(grant * k) tokens per k whole seconds (Envoy's filter reads only
// seconds), k up to kRlqsMaxFillSeconds chosen to come closest to the grant, never above
// it; capacity the grant's part of `burst`, at least two tokens. A grant of 0 is DENY_ALL.
// Envoy replaces a running token bucket only when max_tokens, tokens_per_fill or the
// NANOS of fill_interval changed (its seconds are not compared): the interval's nanos
// repeat its seconds (1 to 1000 ns, well below a microsecond of rate for a client that
// reads them), so two assignments that differ in their interval differ there too.
void RlqsStrategy(int64_t grant_milli, int64_t rate_milli, int64_t burst,
                  envoy::type::v3::RateLimitStrategy& out);

class RlqsService {
 public:
  // A QuotaShares of the engine's client, and an embedded store's for the `local`
  // failure policy.
  static sluice::StatusOr<std::shared_ptr<RlqsService>> Create(Engine& engine, RlqsOptions options);
  // The gRPC method, for the server's list.
  GrpcMethod Method();
  const RlqsOptions& options() const;

  struct State;

 private:
  explicit RlqsService(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace sluiced

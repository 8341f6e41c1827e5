// sluice/metrics.h — the library's metrics, as samples a service exports (Prometheus
// text via FormatPrometheus, or any other system by walking the samples).
//
//   std::vector<sluice::MetricSample> samples = client->Metrics();
//   std::string page = sluice::FormatPrometheus(samples);
//
// Client::Metrics() reports (counters are cumulative since Client::Create):
//   sluice_store_commands_total, sluice_store_writes_total,
//   sluice_store_deadline_exceeded_total, sluice_store_reconnects_total,
//   sluice_store_noscript_retries_total                          counters of the store
//   sluice_cached_denials_total, sluice_policy_decisions_total,
//   sluice_shadow_refusals_total, sluice_syncs_total             counters of decisions
//   sluice_breaker_state{state}          gauge: 1 for the current state, 0 for the others
//   sluice_breaker_opens_total, sluice_breaker_short_circuited_total       counters
//   sluice_breaker_consecutive_failures                                     gauge
//   sluice_breaker_domains, sluice_breaker_open_domains  gauges: breakers (one per
//                                         primary of a Redis Cluster, else 1), and of
//                                         those the open or half-open; on a cluster the
//                                         state above is the worst primary's, the
//                                         failures the highest, the counters sums
//   sluice_store_evicting{policy}         gauge: 1 when the store's maxmemory-policy can
//                                         evict sluice's keys (after the first reading)
//   sluice_store_evicted_keys             gauge: the store's evicted_keys, as last read
//   sluice_leases_held{limiter,id}        gauge: leases this client holds
//   sluice_leases_live{limiter,id}        gauge: live leases of the id, fleet-wide, as
//                                         counted at this client's latest acquire
//   sluice_leases_live_max_1m{limiter,id} gauge: highest live count this clock minute
// Lease ids are label values as encoded in keys (printable ASCII). Every id on which this
// client holds a lease is tracked, however many; of the ids holding none, the most
// recently updated are kept, up to 1000 ids in all per client (an id that holds a lease
// is never dropped: a lease held for long is the leak floor the gauges exist to show).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice {

enum class MetricType { kCounter, kGauge };

struct MetricSample {
  std::string name;
  MetricType type = MetricType::kGauge;
  std::string help;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

// Prometheus text exposition format 0.0.4: one HELP and TYPE line per metric name (the
// first sample's), samples of one name together in the order given, label values
// escaped.
std::string FormatPrometheus(const std::vector<MetricSample>& samples);

// Counters of the client's store connection, cumulative since Create.
struct ClientStats {
  uint64_t commands = 0;           // commands written to the store
  uint64_t writes = 0;             // batches written: commands / writes = pipelining depth
  uint64_t deadline_exceeded = 0;  // calls completed by their deadline, not by a reply
  uint64_t reconnects = 0;         // connections lost after being up
  uint64_t noscript_retries = 0;   // calls resent as EVAL after a NOSCRIPT reply
  uint64_t cached_denials = 0;     // refusals answered from the denial cache
  uint64_t policy_decisions = 0;   // decisions made by a failure policy
  uint64_t shadow_refusals = 0;    // shadow-mode checks that would have been refused
  uint64_t syncs = 0;              // periodic-sync calls sent (LimiterOptions::sync)
};

}  // namespace sluice

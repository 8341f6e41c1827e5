// service/metrics.h — sluiced's own counters (the library's come from Client::Metrics):
// decisions by domain, limit, outcome and source (and by descriptor for the limits with
// detailed_metric); store latency; store errors; config
// reloads. Counters live as long as the process, so a reload never resets them.
//
// Thread-safety: all members are thread-safe; a decision costs two relaxed atomic adds.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/decision.h"
#include "sluice/metrics.h"

namespace sluiced {

// A decision's outcome, the first index of the decision counters.
enum Outcome : int { kAllowed, kOverLimit, kUnavailable, kShadowRefused };
inline constexpr int kOutcomes = kShadowRefused + 1;
// Every sluice::DecisionSource, the second index (the last is kLocalSync).
inline constexpr int kSources = static_cast<int>(sluice::DecisionSource::kLocalSync) + 1;

struct RuleCounters {
  std::string domain;
  std::string limit;
  std::array<std::array<std::atomic<uint64_t>, kSources>, kOutcomes> decisions{};
};

// One descriptor's counters under a limit with `detailed_metric: true`.
struct DescriptorCounters {
  std::string domain;
  std::string limit;
  std::string descriptor;  // the counter id, "key=value,key2=value2"
  std::array<std::atomic<uint64_t>, kOutcomes> decisions{};
};

// Where an RLQS answer came from: the store's share, a failure policy's (the store did
// not answer), the rule itself (unlimited, shadow mode, 0 per unit), the unmatched
// default, an idle bucket's abandon.
enum RlqsSource : int {
  kRlqsStore,
  kRlqsPolicyOpen,
  kRlqsPolicyClosed,
  kRlqsPolicyLocal,
  kRlqsRule,
  kRlqsUnmatched,
  kRlqsIdle
};
inline constexpr int kRlqsSources = kRlqsIdle + 1;

// One limit's RLQS figures (domain "_unknown" and limit "_unmatched" for the buckets
// that match none: a client's domain or bucket never becomes a label).
struct RlqsCounters {
  std::string domain;
  std::string limit;
  std::atomic<int64_t> rate_milli{0};           // the limit's rate, milli-requests per second
  std::atomic<int64_t> clients{0};              // live clients, as the store last answered
  std::atomic<int64_t> assigned_milli{0};       // the sum of their grants, idem
  std::atomic<uint64_t> allowed{0}, denied{0};  // as the clients reported
  std::array<std::atomic<uint64_t>, kRlqsSources> answers{};
};

class Metrics {
 public:
  // The RLQS figures of one limit (created on first use, kept forever: one per rule).
  RlqsCounters* ForRlqs(const std::string& domain, const std::string& limit);
  void RlqsStreams(int delta) { rlqs_streams_.fetch_add(delta, std::memory_order_relaxed); }
  void RlqsStoreError() { rlqs_store_errors_.fetch_add(1, std::memory_order_relaxed); }
  // At most this many descriptor series (detailed_metric) per process: the ids after them
  // are counted under descriptor="_other", so a flood of distinct values cannot grow
  // sluiced's memory or the scrape without bound.
  static constexpr std::size_t kMaxDescriptorSeries = 10000;
  // The counters of one descriptor of a detailed_metric limit (created on first use,
  // kept forever, up to kMaxDescriptorSeries).
  DescriptorCounters* ForDescriptor(const std::string& domain, const std::string& limit,
                                    const std::string& descriptor);
  // The counters of one limit (created on first use, kept forever).
  RuleCounters* ForRule(const std::string& domain, const std::string& limit);
  void ObserveStoreLatency(std::chrono::steady_clock::duration took);
  void StoreError() { store_errors_.fetch_add(1, std::memory_order_relaxed); }
  void ConfigLoad(bool ok) {
    (ok ? reloads_ : reload_failures_).fetch_add(1, std::memory_order_relaxed);
  }
  void Request(bool grpc) {
    (grpc ? grpc_requests_ : http_requests_).fetch_add(1, std::memory_order_relaxed);
  }
  void BadRequest() { bad_requests_.fetch_add(1, std::memory_order_relaxed); }
  void LeaseAbandoned() { leases_abandoned_.fetch_add(1, std::memory_order_relaxed); }
  // At most this many lease ids get series of their own (sluice_leases_held,
  // sluice_leases_live, sluice_leases_live_max_1m: three per id); see CapLeaseSeries.
  static constexpr std::size_t kMaxLeaseIds = 1000;
  // Prometheus text of these metrics; `folded_lease_ids` the ids CapLeaseSeries summed
  // under "_other".
  std::string Format(std::size_t folded_lease_ids = 0) const;

  static constexpr std::array<double, 12> kBucketsMs = {0.1, 0.25, 0.5, 1,  2,   3,
                                                        5,   10,   25,  50, 100, 250};

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<RuleCounters>> rules_;
  std::map<std::string, std::unique_ptr<DescriptorCounters>> descriptors_;
  std::size_t descriptor_series_ = 0;  // named ones, "_other" series not counted
  std::array<std::atomic<uint64_t>, kBucketsMs.size() + 1> latency_buckets_{};
  std::atomic<uint64_t> latency_sum_us_{0};
  std::atomic<uint64_t> latency_count_{0};
  std::atomic<uint64_t> store_errors_{0};
  std::atomic<uint64_t> reloads_{0};
  std::atomic<uint64_t> reload_failures_{0};
  std::atomic<uint64_t> http_requests_{0};
  std::atomic<uint64_t> grpc_requests_{0};
  std::atomic<uint64_t> bad_requests_{0};
  std::atomic<uint64_t> leases_abandoned_{0};
  std::map<std::string, std::unique_ptr<RlqsCounters>> rlqs_;
  std::atomic<int64_t> rlqs_streams_{0};
  std::atomic<uint64_t> rlqs_store_errors_{0};
  void FormatRlqs(std::string& out) const;
};

// Bounds the library's per-id lease gauges (sluice_leases_held, sluice_leases_live,
// sluice_leases_live_max_1m, labels limiter and id) in `samples` to `max_ids` ids: the
// ids holding the most leases keep their series (then the most live fleet-wide, then by
// limiter and id, so the choice is stable between scrapes); the others' values are
// summed per limiter under id="_other" ("_other" holds no '=', so it names no
// descriptor). Returns how many ids were folded so; other samples are left as they are.
std::size_t CapLeaseSeries(std::vector<sluice::MetricSample>& samples, std::size_t max_ids);

}  // namespace sluiced

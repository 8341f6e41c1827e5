#include "service/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>

#include "sluice/decision.h"

namespace sluiced {
namespace {

// The length of the valid UTF-8 sequence at v[i], or 0 when the bytes there are not one.
std::size_t Utf8SequenceAt(const std::string& v, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(v[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // up to U+10FFFF
  } else {
    return 0;
  }
  if (i + n > v.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  return n;
}

// A label value as Prometheus' text format takes it: UTF-8 (a descriptor value may be
// any bytes: each byte that is not part of valid UTF-8 becomes U+FFFD), with \\, \" and
// \n escaped.
std::string Escape(const std::string& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const std::size_t n = Utf8SequenceAt(v, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";
      } else {
        out.append(v, i, n);
        i += n - 1;
      }
    } else if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// The shortest decimal that reads back as exactly `v` ("0.00025", not %.17g's
// "0.00025000000000000001"): plain notation in the range a latency or a sum of seconds
// takes, the shortest of plain and exponent outside it.
std::string Number(double v) {
  char buf[400];
  const double magnitude = std::fabs(v);
  const bool plain = v == 0 || (magnitude >= 1e-6 && magnitude < 1e15);
  const auto end = plain ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed).ptr
                         : std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

constexpr const char* kOutcomeNames[kOutcomes] = {"allowed", "over_limit", "unavailable",
                                                  "shadow_refused"};

// The counters of one limit in `by_limit` (a limit's RuleCounters or RlqsCounters), made on
// first use. With Metrics::mu_ held.
template <class Counters>
Counters* ForLimit(std::map<std::string, std::unique_ptr<Counters>>& by_limit,
                   const std::string& domain, const std::string& limit) {
  auto& slot = by_limit[domain + '\0' + limit];
  if (!slot) {
    slot = std::make_unique<Counters>();
    slot->domain = domain;
    slot->limit = limit;
  }
  return slot.get();
}

}  // namespace

RuleCounters* Metrics::ForRule(const std::string& domain, const std::string& limit) {
  std::lock_guard lock(mu_);
  return ForLimit(rules_, domain, limit);
}

RlqsCounters* Metrics::ForRlqs(const std::string& domain, const std::string& limit) {
  std::lock_guard lock(mu_);
  return ForLimit(rlqs_, domain, limit);
}

DescriptorCounters* Metrics::ForDescriptor(const std::string& domain, const std::string& limit,
                                           const std::string& descriptor) {
  const std::string head = domain + '\0' + limit + '\0';
  std::lock_guard lock(mu_);
  auto it = descriptors_.find(head + descriptor);
  if (it != descriptors_.end()) return it->second.get();
  const bool named = descriptor_series_ < kMaxDescriptorSeries;
  // "_other" cannot be a counter id (every id holds a '='), so it names no descriptor.
  auto& slot = descriptors_[head + (named ? descriptor : std::string("_other"))];
  if (!slot) {
    slot = std::make_unique<DescriptorCounters>();
    slot->domain = domain;
    slot->limit = limit;
    slot->descriptor = named ? descriptor : "_other";
    if (named) ++descriptor_series_;
  }
  return slot.get();
}

void Metrics::ObserveStoreLatency(std::chrono::steady_clock::duration took) {
  const double ms = std::chrono::duration<double, std::milli>(took).count();
  std::size_t i = 0;
  while (i < kBucketsMs.size() && ms > kBucketsMs[i]) ++i;
  latency_buckets_[i].fetch_add(1, std::memory_order_relaxed);
  latency_sum_us_.fetch_add(static_cast<uint64_t>(ms * 1000), std::memory_order_relaxed);
  latency_count_.fetch_add(1, std::memory_order_relaxed);
}

std::size_t CapLeaseSeries(std::vector<sluice::MetricSample>& samples, std::size_t max_ids) {
  static constexpr const char* kNames[] = {"sluice_leases_held", "sluice_leases_live",
                                           "sluice_leases_live_max_1m"};
  auto kind_of = [](const sluice::MetricSample& s) {
    for (int k = 0; k < 3; ++k)
      if (s.name == kNames[k]) return k;
    return -1;
  };
  auto label = [](const sluice::MetricSample& s, std::string_view name) -> const std::string* {
    for (const auto& [k, v] : s.labels)
      if (k == name) return &v;
    return nullptr;
  };
  struct Id {
    double values[3] = {0, 0, 0};  // held, live, live_max_1m
  };
  std::map<std::pair<std::string, std::string>, Id> ids;  // (limiter, id)
  for (const auto& s : samples) {
    const int kind = kind_of(s);
    const std::string* limiter = label(s, "limiter");
    const std::string* id = label(s, "id");
    if (kind < 0 || !limiter || !id) continue;
    ids[{*limiter, *id}].values[kind] = s.value;
  }
  if (ids.size() <= max_ids) return 0;
  std::vector<const std::pair<const std::pair<std::string, std::string>, Id>*> ranked;
  ranked.reserve(ids.size());
  for (const auto& entry : ids) ranked.push_back(&entry);
  // Most held first, then most live; ties in (limiter, id) order (the map's).
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto* a, const auto* b) {
    return std::tie(a->second.values[0], a->second.values[1]) >
           std::tie(b->second.values[0], b->second.values[1]);
  });
  std::set<std::pair<std::string, std::string>> kept;
  for (std::size_t i = 0; i < max_ids; ++i) kept.insert(ranked[i]->first);
  std::map<std::string, Id> other;  // per limiter: the sums of the folded ids
  for (std::size_t i = max_ids; i < ranked.size(); ++i) {
    Id& sum = other[ranked[i]->first.first];
    for (int k = 0; k < 3; ++k) sum.values[k] += ranked[i]->second.values[k];
  }
  // The help text of each name, from its first sample (every sample of a name has it).
  std::string help[3];
  std::vector<sluice::MetricSample> out;
  out.reserve(samples.size());
  for (auto& s : samples) {
    const int kind = kind_of(s);
    const std::string* limiter = label(s, "limiter");
    const std::string* id = label(s, "id");
    if (kind >= 0 && limiter && id) {
      if (help[kind].empty()) help[kind] = s.help;
      if (!kept.count({*limiter, *id})) continue;
    }
    out.push_back(std::move(s));
  }
  for (int k = 0; k < 3; ++k) {
    for (const auto& [limiter, sum] : other) {
      out.push_back({kNames[k],
                     sluice::MetricType::kGauge,
                     help[k],
                     {{"limiter", limiter}, {"id", "_other"}},
                     sum.values[k]});
    }
  }
  samples = std::move(out);
  return ranked.size() - max_ids;
}

std::string Metrics::Format(std::size_t folded_lease_ids) const {
  std::string out;
  out += "# HELP sluiced_decisions_total Decisions by domain, limit, outcome and source.\n";
  out += "# TYPE sluiced_decisions_total counter\n";
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, r] : rules_) {
      for (int o = 0; o < kOutcomes; ++o) {
        for (int s = 0; s < kSources; ++s) {
          const uint64_t v = r->decisions[o][s].load(std::memory_order_relaxed);
          if (v == 0 && !(o == 0 && s == 0)) continue;
          out += "sluiced_decisions_total{domain=\"" + Escape(r->domain) + "\",limit=\"" +
                 Escape(r->limit) + "\",outcome=\"" + kOutcomeNames[o] + "\",source=\"" +
                 std::string(sluice::DecisionSourceName(static_cast<sluice::DecisionSource>(s))) +
                 "\"} " + std::to_string(v) + "\n";
        }
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    if (!descriptors_.empty()) {
      out +=
          "# HELP sluiced_descriptor_decisions_total Decisions by descriptor, for the limits "
          "with detailed_metric.\n";
      out += "# TYPE sluiced_descriptor_decisions_total counter\n";
      for (const auto& [key, d] : descriptors_) {
        for (int o = 0; o < kOutcomes; ++o) {
          const uint64_t v = d->decisions[o].load(std::memory_order_relaxed);
          if (v == 0) continue;
          out += "sluiced_descriptor_decisions_total{domain=\"" + Escape(d->domain) +
                 "\",limit=\"" + Escape(d->limit) + "\",descriptor=\"" + Escape(d->descriptor) +
                 "\",outcome=\"" + kOutcomeNames[o] + "\"} " + std::to_string(v) + "\n";
        }
      }
    }
  }
  out += "# HELP sluiced_store_latency_seconds Time from a check's call to its store decision.\n";
  out += "# TYPE sluiced_store_latency_seconds histogram\n";
  uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= kBucketsMs.size(); ++i) {
    cumulative += latency_buckets_[i].load(std::memory_order_relaxed);
    const std::string le = i < kBucketsMs.size() ? Number(kBucketsMs[i] / 1000) : "+Inf";
    out += "sluiced_store_latency_seconds_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) +
           "\n";
  }
  out += "sluiced_store_latency_seconds_sum " +
         Number(static_cast<double>(latency_sum_us_.load(std::memory_order_relaxed)) / 1e6) + "\n";
  out += "sluiced_store_latency_seconds_count " + std::to_string(cumulative) + "\n";
  auto counter = [&out](const char* name, const char* help, uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
           " " + std::to_string(v) + "\n";
  };
  counter("sluiced_store_errors_total",
          "Checks the store did not answer (answered by their failure policy, or an error).",
          store_errors_.load());
  counter("sluiced_config_reloads_total", "Configurations loaded (start-up included).",
          reloads_.load());
  counter("sluiced_config_reload_failures_total", "Configurations refused (the old one was kept).",
          reload_failures_.load());
  counter("sluiced_http_requests_total", "HTTP requests served.", http_requests_.load());
  counter("sluiced_grpc_requests_total", "ShouldRateLimit calls served.", grpc_requests_.load());
  counter("sluiced_bad_requests_total", "Requests refused as malformed (4xx, INVALID_ARGUMENT).",
          bad_requests_.load());
  counter("sluiced_lease_waits_abandoned_total",
          "Waiting acquires whose client left first: the slot granted after was released at once.",
          leases_abandoned_.load());
  FormatRlqs(out);
  out +=
      "# HELP sluiced_lease_ids_folded Lease ids over the cap of per-id series, their "
      "sluice_leases_* gauges summed under id=\"_other\".\n";
  out += "# TYPE sluiced_lease_ids_folded gauge\n";
  out += "sluiced_lease_ids_folded " + std::to_string(folded_lease_ids) + "\n";
  return out;
}

void Metrics::FormatRlqs(std::string& out) const {
  static constexpr const char* kSourceNames[kRlqsSources] = {
      "store", "policy_open", "policy_closed", "policy_local", "rule", "unmatched", "idle"};
  out += "# HELP sluiced_rlqs_streams Open RLQS streams (one per client and domain).\n";
  out += "# TYPE sluiced_rlqs_streams gauge\n";
  out += "sluiced_rlqs_streams " + std::to_string(rlqs_streams_.load()) + "\n";
  out +=
      "# HELP sluiced_rlqs_store_errors_total RLQS store calls that failed (answered by the "
      "limit's failure policy).\n";
  out += "# TYPE sluiced_rlqs_store_errors_total counter\n";
  out += "sluiced_rlqs_store_errors_total " + std::to_string(rlqs_store_errors_.load()) + "\n";
  std::lock_guard lock(mu_);
  if (rlqs_.empty()) return;
  struct Gauge {
    const char* name;
    const char* help;
    double (*value)(const RlqsCounters&);
  };
  static constexpr Gauge kGauges[] = {
      {"sluiced_rlqs_rate", "The limit's rate shared among its RLQS clients, per second.",
       [](const RlqsCounters& c) { return c.rate_milli.load() / 1000.0; }},
      {"sluiced_rlqs_clients",
       "Live RLQS clients of the limit, fleet-wide, as the store last said.",
       [](const RlqsCounters& c) { return static_cast<double>(c.clients.load()); }},
      {"sluiced_rlqs_assigned_rate",
       "The sum of the rates assigned to the limit's clients, fleet-wide, per second, as the "
       "store last said.",
       [](const RlqsCounters& c) { return c.assigned_milli.load() / 1000.0; }},
  };
  for (const Gauge& g : kGauges) {
    out += std::string("# HELP ") + g.name + " " + g.help + "\n# TYPE " + g.name + " gauge\n";
    for (const auto& [key, c] : rlqs_)
      out += std::string(g.name) + "{domain=\"" + Escape(c->domain) + "\",limit=\"" +
             Escape(c->limit) + "\"} " + Number(g.value(*c)) + "\n";
  }
  out +=
      "# HELP sluiced_rlqs_reported_requests_total Requests the RLQS clients reported, by "
      "their own decision.\n# TYPE sluiced_rlqs_reported_requests_total counter\n";
  for (const auto& [key, c] : rlqs_) {
    const std::string labels =
        "{domain=\"" + Escape(c->domain) + "\",limit=\"" + Escape(c->limit) + "\",result=\"";
    out += "sluiced_rlqs_reported_requests_total" + labels + "allowed\"} " +
           std::to_string(c->allowed.load()) + "\n";
    out += "sluiced_rlqs_reported_requests_total" + labels + "denied\"} " +
           std::to_string(c->denied.load()) + "\n";
  }
  out +=
      "# HELP sluiced_rlqs_answers_total RLQS bucket answers, by where they came from.\n"
      "# TYPE sluiced_rlqs_answers_total counter\n";
  for (const auto& [key, c] : rlqs_) {
    for (int s = 0; s < kRlqsSources; ++s) {
      const uint64_t v = c->answers[s].load();
      if (v == 0) continue;
      out += "sluiced_rlqs_answers_total{domain=\"" + Escape(c->domain) + "\",limit=\"" +
             Escape(c->limit) + "\",source=\"" + kSourceNames[s] + "\"} " + std::to_string(v) +
             "\n";
    }
  }
}

}  // namespace sluiced

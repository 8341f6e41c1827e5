#include "service/metrics.h"

#include <cstdio>

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

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

constexpr const char* kOutcomeNames[kOutcomes] = {"allowed", "over_limit", "unavailable",
                                                  "shadow_refused"};

}  // namespace

RuleCounters* Metrics::ForRule(const std::string& domain, const std::string& limit) {
  std::lock_guard lock(mu_);
  auto& slot = rules_[domain + '\0' + limit];
  if (!slot) {
    slot = std::make_unique<RuleCounters>();
    slot->domain = domain;
    slot->limit = limit;
  }
  return slot.get();
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

std::string Metrics::Format(std::size_t held_leases) const {
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
  out += "# HELP sluiced_leases_held Leases sluiced holds for remote callers.\n";
  out += "# TYPE sluiced_leases_held gauge\n";
  out += "sluiced_leases_held " + std::to_string(held_leases) + "\n";
  return out;
}

}  // namespace sluiced

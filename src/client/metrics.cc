#include "sluice/metrics.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "client/client_core.h"
#include "policy/breaker.h"
#include "sluice/client.h"

namespace sluice {
namespace {

void AppendLabelValue(std::string& out, const std::string& value) {
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", v);
  }
  return buf;
}

}  // namespace

std::string FormatPrometheus(const std::vector<MetricSample>& samples) {
  // Group by name, keeping the order in which names first appear.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const MetricSample*>> by_name;
  for (const MetricSample& s : samples) {
    auto [it, fresh] = by_name.try_emplace(s.name);
    if (fresh) order.push_back(s.name);
    it->second.push_back(&s);
  }
  std::string out;
  for (const std::string& name : order) {
    const auto& group = by_name[name];
    out += "# HELP " + name + " " + group.front()->help + "\n";
    out += "# TYPE " + name +
           (group.front()->type == MetricType::kCounter ? " counter\n" : " gauge\n");
    for (const MetricSample* s : group) {
      out += name;
      if (!s->labels.empty()) {
        out.push_back('{');
        for (std::size_t i = 0; i < s->labels.size(); ++i) {
          if (i > 0) out.push_back(',');
          out += s->labels[i].first + "=\"";
          AppendLabelValue(out, s->labels[i].second);
          out.push_back('"');
        }
        out.push_back('}');
      }
      out += " " + FormatValue(s->value) + "\n";
    }
  }
  return out;
}

std::vector<MetricSample> Client::Metrics() const {
  std::vector<MetricSample> m;
  auto add = [&m](std::string name, MetricType type, std::string help, double value,
                  std::vector<std::pair<std::string, std::string>> labels = {}) {
    m.push_back({std::move(name), type, std::move(help), std::move(labels), value});
  };
  const ClientStats s = stats();
  constexpr auto kCounter = MetricType::kCounter;
  constexpr auto kGauge = MetricType::kGauge;
  add("sluice_store_commands_total", kCounter, "Commands written to the store.",
      double(s.commands));
  add("sluice_store_writes_total", kCounter,
      "Batches written to the store (commands/writes = pipelining depth).", double(s.writes));
  add("sluice_store_deadline_exceeded_total", kCounter,
      "Store calls completed by their deadline, not by a reply.", double(s.deadline_exceeded));
  add("sluice_store_reconnects_total", kCounter, "Store connections lost after being up.",
      double(s.reconnects));
  add("sluice_store_noscript_retries_total", kCounter,
      "Calls resent as EVAL after a NOSCRIPT reply.", double(s.noscript_retries));
  add("sluice_cached_denials_total", kCounter,
      "Refusals answered from the denial cache without a store call.", double(s.cached_denials));
  add("sluice_policy_decisions_total", kCounter,
      "Decisions made by a failure policy because the store could not answer.",
      double(s.policy_decisions));
  add("sluice_shadow_refusals_total", kCounter, "Shadow-mode checks that would have been refused.",
      double(s.shadow_refusals));
  add("sluice_syncs_total", kCounter,
      "Periodic-sync calls sent to the store for hot ids (LimiterOptions::sync).", double(s.syncs));
  // One breaker per fault domain (a Redis Cluster's primaries): the state is the worst
  // of them, the counters their sums, the failures the highest.
  const internal::DomainBreakers::Summary b = core_->policy->breakers().Summarize();
  for (auto st : {internal::Breaker::State::kClosed, internal::Breaker::State::kOpen,
                  internal::Breaker::State::kHalfOpen}) {
    add("sluice_breaker_state", kGauge,
        "The store circuit breaker's state (1 = current; on a cluster the worst primary's).",
        st == b.worst ? 1 : 0, {{"state", std::string(internal::BreakerStateName(st))}});
  }
  add("sluice_breaker_opens_total", kCounter, "Times the circuit breaker opened.", double(b.opens));
  add("sluice_breaker_short_circuited_total", kCounter,
      "Calls answered without a store call because the breaker was open.",
      double(b.short_circuited));
  add("sluice_breaker_consecutive_failures", kGauge, "Consecutive store failures.",
      double(b.consecutive_failures));
  add("sluice_breaker_domains", kGauge,
      "Fault domains with a breaker of their own (a cluster's primaries; 1 otherwise).",
      double(b.domains));
  add("sluice_breaker_open_domains", kGauge, "Fault domains whose breaker is open or half-open.",
      double(b.open_domains));
  if (const auto eviction = core_->eviction.reading(); eviction.known) {
    add("sluice_store_evicting", kGauge,
        "1 when the store's maxmemory-policy can evict sluice's keys (any but noeviction).",
        eviction.can_evict ? 1 : 0, {{"policy", eviction.policy}});
    add("sluice_store_evicted_keys", kGauge,
        "The store's evicted_keys counter (INFO stats), as last read.",
        double(eviction.evicted_keys));
  }
  const auto rows = core_->lease_gauges.Snapshot(core_->WallMs());
  for (const auto& r : rows) {
    add("sluice_leases_held", kGauge, "Leases this client holds.", double(r.held),
        {{"limiter", r.limiter}, {"id", r.id}});
  }
  for (const auto& r : rows) {
    add("sluice_leases_live", kGauge,
        "Live leases of the id across the fleet, as counted at this client's latest acquire.",
        double(r.live), {{"limiter", r.limiter}, {"id", r.id}});
  }
  for (const auto& r : rows) {
    add("sluice_leases_live_max_1m", kGauge,
        "Highest live lease count of the id seen this clock minute.", double(r.max_1m),
        {{"limiter", r.limiter}, {"id", r.id}});
  }
  return m;
}

}  // namespace sluice

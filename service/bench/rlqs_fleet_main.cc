// sluiced_rlqs_fleet: runs a simulated fleet of Envoys (rlqs_fleet.h) against sluiced, over
// RLQS or, for comparison, RLS, and prints the fleet's seconds as CSV, a summary line
// (bench/rlqs.sh reads it) and a chart of the admitted rate against the limit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "service/bench/rlqs_fleet.h"

namespace {

using sluiced::bench::AssignmentKind;
using sluiced::bench::DemandSchedule;
using sluiced::bench::FleetOptions;
using sluiced::bench::FleetResult;

struct Args {
  std::vector<std::string> targets;
  std::string mode = "rlqs", domain = "fleet", no_assignment = "allow", demand = "0:2000";
  std::vector<std::string> bucket = {"rule=hot"};
  int clients = 8, interval_ms = 5000, rls_threads = 4, streams_per_connection = 1, tick_ms = 1;
  int wave = 0;          // new clients subscribing within one second from wave_at_s on
  double wave_at_s = 0;  // each with the fleet's mean demand per client then
  double skew = 0, reverse_skew_at = -1, start_spread_s = 0, seconds = 30, limit = 0;
  double settle_s = -1;  // default: 2 intervals + 1 s
  bool csv = false, clients_csv = false, chart = false;
};

// "0:2000,10:500": from 0 s on 2000 requests/s, from 10 s on 500.
DemandSchedule ParseDemand(const std::string& text) {
  DemandSchedule steps;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string step = text.substr(at, comma - at);
    const std::size_t colon = step.find(':');
    if (colon == std::string::npos) throw CLI::ValidationError("--demand", "expected t:rate");
    steps.push_back({std::stod(step.substr(0, colon)), std::stod(step.substr(colon + 1))});
    at = comma + 1;
  }
  std::sort(steps.begin(), steps.end(), [](auto& a, auto& b) { return a.at_s < b.at_s; });
  return steps;
}

// Client i's schedule: the fleet's demand times its skewed share (reversed from
// --reverse-skew-at on: the light clients become the heavy ones), from its start on.
DemandSchedule ClientDemand(const Args& a, const DemandSchedule& total,
                            const std::vector<double>& shares, int i) {
  std::set<double> at;
  for (const auto& step : total) at.insert(step.at_s);
  if (a.reverse_skew_at >= 0) at.insert(a.reverse_skew_at);
  const double start = a.start_spread_s * i / a.clients;
  DemandSchedule schedule;
  for (double t : at) {
    const double from = std::max(t, start);
    const bool reversed = a.reverse_skew_at >= 0 && from >= a.reverse_skew_at;
    const double share = shares[static_cast<std::size_t>(reversed ? a.clients - 1 - i : i)];
    if (!schedule.empty() && schedule.back().at_s == from) schedule.pop_back();
    schedule.push_back({from, sluiced::bench::DemandAt(total, from) * share});
  }
  return schedule;
}

FleetOptions Options(const Args& a) {
  FleetOptions o;
  o.targets = a.targets;
  o.seconds = a.seconds;
  o.report_interval = std::chrono::milliseconds(a.interval_ms);
  o.no_assignment = a.no_assignment == "deny" ? sluiced::bench::NoAssignment::kDenyAll
                                              : sluiced::bench::NoAssignment::kAllowAll;
  o.mode = a.mode == "rls" ? sluiced::bench::FleetMode::kRls : sluiced::bench::FleetMode::kRlqs;
  o.rls_threads = a.rls_threads;
  o.streams_per_connection = a.streams_per_connection;
  o.tick = std::chrono::milliseconds(a.tick_ms);
  sluiced::bench::BucketId bucket;
  for (const auto& entry : a.bucket) {
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos) throw CLI::ValidationError("--bucket", "expected key=value");
    bucket[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  const DemandSchedule total = ParseDemand(a.demand);
  const std::vector<double> shares = sluiced::bench::SkewedShares(a.clients, a.skew);
  for (int i = 0; i < a.clients; ++i) {
    o.clients.push_back(
        {.domain = a.domain, .bucket = bucket, .demand = ClientDemand(a, total, shares, i)});
  }
  // The wave: client j's first request at wave_at + j / wave (all within one second).
  const double mean = sluiced::bench::DemandAt(total, a.wave_at_s) / a.clients;
  for (int j = 0; j < a.wave; ++j) {
    o.clients.push_back({.domain = a.domain,
                         .bucket = bucket,
                         .demand = {{a.wave_at_s + static_cast<double>(j) / a.wave, mean}}});
  }
  return o;
}

const char* KindName(AssignmentKind k) {
  switch (k) {
    case AssignmentKind::kAllowAll: return "allow_all";
    case AssignmentKind::kDenyAll: return "deny_all";
    case AssignmentKind::kTokenBucket: return "token_bucket";
    case AssignmentKind::kNone: break;
  }
  return "none";
}

void PrintCsv(const FleetResult& r, bool clients) {
  std::printf(
      "second,demand,requests,admitted,denied,assignments,tokens_created,assigned_rate,"
      "allow_all,deny_all,no_assignment\n");
  for (std::size_t s = 0; s < r.fleet.size(); ++s) {
    const auto& f = r.fleet[s];
    std::printf(
        "%zu,%.0f,%llu,%llu,%llu,%llu,%.0f,%.1f,%d,%d,%d\n", s, f.demand,
        static_cast<unsigned long long>(f.requests), static_cast<unsigned long long>(f.admitted),
        static_cast<unsigned long long>(f.denied), static_cast<unsigned long long>(f.assignments),
        f.tokens_created, f.assigned_rate, f.allow_all, f.deny_all, f.no_assignment);
  }
  if (!clients) return;
  std::printf("client,second,requests,admitted,denied,assignments,tokens_created,kind,rate\n");
  for (std::size_t i = 0; i < r.clients.size(); ++i) {
    for (std::size_t s = 0; s < r.clients[i].seconds.size(); ++s) {
      const auto& x = r.clients[i].seconds[s];
      std::printf(
          "%zu,%zu,%llu,%llu,%llu,%llu,%.0f,%s,%.1f\n", i, s,
          static_cast<unsigned long long>(x.requests), static_cast<unsigned long long>(x.admitted),
          static_cast<unsigned long long>(x.denied), static_cast<unsigned long long>(x.assignments),
          x.tokens_created, KindName(x.kind), x.assigned_rate);
    }
  }
}

// The seconds counted as steady: at least `settle` after the start and after every change
// of demand, and not the last (possibly partial) second.
std::vector<bool> SteadySeconds(const Args& a, const FleetResult& r) {
  std::vector<double> changes = {0};
  for (const auto& step : ParseDemand(a.demand)) changes.push_back(step.at_s);
  if (a.reverse_skew_at >= 0) changes.push_back(a.reverse_skew_at);
  const double settle = a.settle_s >= 0 ? a.settle_s : 2.0 * a.interval_ms / 1000 + 1;
  std::vector<bool> steady(r.fleet.size(), false);
  for (std::size_t s = 0; s + 1 < r.fleet.size(); ++s) {
    double last = 0;
    for (double c : changes) {
      if (c <= static_cast<double>(s)) last = std::max(last, c);
    }
    steady[s] = static_cast<double>(s) >= last + settle;
  }
  return steady;
}

// The first assignments of clients [from, to): how many were token buckets (and their rates'
// range), blanket rules, or never came; the latest came this long after the subscription.
std::string FirstAssignments(const FleetResult& r, std::size_t from, std::size_t to) {
  int token = 0, blanket = 0, none = 0;
  double min_rate = 0, max_rate = 0, max_after = 0;
  for (std::size_t i = from; i < to && i < r.clients.size(); ++i) {
    const auto& c = r.clients[i];
    if (c.first_kind == AssignmentKind::kNone) {
      ++none;
      continue;
    }
    max_after = std::max(max_after, c.first_after_s);
    if (c.first_kind != AssignmentKind::kTokenBucket) {
      ++blanket;
      continue;
    }
    min_rate = token ? std::min(min_rate, c.first_rate) : c.first_rate;
    max_rate = token ? std::max(max_rate, c.first_rate) : c.first_rate;
    ++token;
  }
  char out[256];
  std::snprintf(out, sizeof out,
                "first_token_bucket=%d first_blanket=%d first_none=%d first_rate_min=%.3f "
                "first_rate_max=%.3f first_after_max_s=%.3f",
                token, blanket, none, min_rate, max_rate, max_after);
  return out;
}

void PrintSummary(const Args& a, const FleetResult& r) {
  const std::vector<bool> steady = SteadySeconds(a, r);
  double steady_admitted = 0, steady_max = 0, max_admitted = 0;
  int steady_n = 0;
  for (std::size_t s = 0; s < r.fleet.size(); ++s) {
    if (s + 1 < r.fleet.size()) {  // the last second may be partial
      max_admitted = std::max(max_admitted, static_cast<double>(r.fleet[s].admitted));
    }
    if (!steady[s]) continue;
    const auto admitted = static_cast<double>(r.fleet[s].admitted);
    steady_admitted += admitted;
    steady_max = std::max(steady_max, admitted);
    ++steady_n;
  }
  std::printf(
      "fleet mode=%s clients=%d seconds=%.1f interval_ms=%d requests=%llu admitted=%llu "
      "denied=%llu admitted_per_s=%.1f steady_seconds=%d steady_admitted_per_s=%.1f "
      "steady_max_admitted_per_s=%.0f limit=%.1f reports=%llu responses=%llu streams=%llu "
      "stream_ends=%llu errors=%llu max_lag_s=%.3f max_admitted_per_s=%.0f "
      "blanket_assignments=%llu\n",
      a.mode.c_str(), a.clients, a.seconds, a.interval_ms,
      static_cast<unsigned long long>(r.requests), static_cast<unsigned long long>(r.admitted),
      static_cast<unsigned long long>(r.denied),
      static_cast<double>(r.admitted) / std::max(a.seconds, 1e-9), steady_n,
      steady_n ? steady_admitted / steady_n : 0.0, steady_max, a.limit,
      static_cast<unsigned long long>(r.reports_sent), static_cast<unsigned long long>(r.responses),
      static_cast<unsigned long long>(r.streams), static_cast<unsigned long long>(r.stream_ends),
      static_cast<unsigned long long>(r.errors), r.max_lag_s, max_admitted,
      static_cast<unsigned long long>(r.blanket_assignments));
  if (a.mode != "rlqs") return;
  const auto n = static_cast<std::size_t>(a.clients);
  std::printf("fleet_first clients=%d %s\n", a.clients, FirstAssignments(r, 0, n).c_str());
  if (a.wave > 0) {
    std::printf("fleet_wave clients=%d at_s=%.1f %s\n", a.wave, a.wave_at_s,
                FirstAssignments(r, n, r.clients.size()).c_str());
  }
}

// One row per second: '#' up to the admitted rate, '|' at the limit, '.' at the demand.
void PrintChart(const Args& a, const FleetResult& r) {
  constexpr int kWidth = 60;
  double top = a.limit * 1.25;
  for (const auto& f : r.fleet) top = std::max({top, static_cast<double>(f.admitted), f.demand});
  if (top <= 0) return;
  const auto col = [&](double v) {
    return std::min(kWidth - 1, static_cast<int>(std::lround(v / top * (kWidth - 1))));
  };
  std::printf("admitted/s per second ('#'), limit %.0f/s ('|'), demand ('.'); full width %.0f/s\n",
              a.limit, top);
  for (std::size_t s = 0; s < r.fleet.size(); ++s) {
    const auto& f = r.fleet[s];
    std::string row(kWidth, ' ');
    const int admitted = f.admitted ? col(static_cast<double>(f.admitted)) : -1;
    for (int c = 0; c <= admitted; ++c) row[static_cast<std::size_t>(c)] = '#';
    if (f.demand > 0) row[static_cast<std::size_t>(col(f.demand))] = '.';
    if (a.limit > 0) row[static_cast<std::size_t>(col(a.limit))] = '|';
    std::printf("%4zu %s %6llu / %-6.0f demand %.0f\n", s, row.c_str(),
                static_cast<unsigned long long>(f.admitted), a.limit, f.demand);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluiced_rlqs_fleet: a simulated fleet of Envoys on RLQS (or RLS) against sluiced"};
  Args a;
  app.add_option("--target", a.targets, "sluiced gRPC host:port (repeat, or comma-separated)")
      ->required()
      ->delimiter(',');
  app.add_option("--mode", a.mode, "rlqs or rls")->check(CLI::IsMember({"rlqs", "rls"}));
  app.add_option("--clients", a.clients, "simulated Envoys")->check(CLI::Range(1, 100000));
  app.add_option("--domain", a.domain);
  app.add_option("--bucket", a.bucket, "bucket id entry key=value (repeat)");
  app.add_option("--demand", a.demand, "the fleet's demand: t:rate,... (seconds, requests/s)");
  app.add_option("--skew", a.skew, "client i's share of the demand ~ 1/(i+1)^skew");
  app.add_option("--reverse-skew-at", a.reverse_skew_at, "from this second on, shares reversed");
  app.add_option("--start-spread-s", a.start_spread_s, "client i starts at i/clients of this");
  app.add_option("--seconds", a.seconds);
  app.add_option("--interval-ms", a.interval_ms, "report interval (Envoy: 5000)")
      ->check(CLI::Range(1, 3600000));
  app.add_option("--no-assignment", a.no_assignment, "allow or deny")
      ->check(CLI::IsMember({"allow", "deny"}));
  app.add_option("--rls-threads", a.rls_threads)->check(CLI::Range(1, 256));
  app.add_option("--streams-per-connection", a.streams_per_connection,
                 "RLQS: clients whose streams share one HTTP/2 connection (sluiced: at most 100)")
      ->check(CLI::Range(1, 100));
  app.add_option("--tick-ms", a.tick_ms, "how often the driver catches up (assignments late by it)")
      ->check(CLI::Range(1, 100));
  app.add_option("--wave", a.wave, "new clients subscribing within one second from --wave-at")
      ->check(CLI::Range(0, 100000));
  app.add_option("--wave-at", a.wave_at_s, "the wave's start, seconds");
  app.add_option("--limit", a.limit, "the bucket's rate, requests/s (summary and chart)");
  app.add_option("--settle-s", a.settle_s, "seconds after a change left out of the steady rate");
  app.add_flag("--csv", a.csv, "per-second CSV of the fleet");
  app.add_flag("--clients-csv", a.clients_csv, "per-second CSV of each client too");
  app.add_flag("--chart", a.chart, "ASCII chart of the admitted rate per second");
  CLI11_PARSE(app, argc, argv);
  FleetOptions options;
  try {
    options = Options(a);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  } catch (const std::exception& e) {  // std::stod on a malformed --demand
    std::fprintf(stderr, "--demand: %s\n", e.what());
    return 2;
  }
  const FleetResult r = sluiced::bench::RunFleet(options);
  if (a.csv || a.clients_csv) PrintCsv(r, a.clients_csv);
  if (a.chart) PrintChart(a, r);
  PrintSummary(a, r);
  return 0;
}

// sluice simulate: N servers sharing one limit, simulated deterministically in this
// process (the embedded store and a model clock; no Redis, no threads, no real time).
// Each mode decides the same requests:
//   local   every server enforces the whole limit in its own memory (the naive mistake)
//   split   every server enforces limit / servers (rounded down) in its own memory
//   shared  one store for all servers: what sluice does; the reference ("ideal")
//   prefetch  one store, and each server takes slices of the hot id's budget
//           (LimiterOptions::local_budget: fixed_window, sliding_window, token_bucket,
//           gcra)
//   sync    one store, and each server counts the hot id locally and syncs every
//           --sync-interval-ms of model time (LimiterOptions::sync, hot from the first
//           request: fixed_window only); its store calls include the syncs
// Requests: per window, server i receives c_i of them (--per-server, or --demand spread
// by --shape), placed evenly over the window (--shape bursts: over its first tenth), and
// all servers' requests are decided in time order. Windows line up with the store's
// clock (fixed_window is aligned), so "per window" means the same span for every mode.
// Per mode it prints what was admitted, the overshoot and the under-admission against
// the shared mode (summed per window), and the calls that reached a shared store.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

struct SimulateOptions {
  int servers = 8;
  bool servers_given = false;  // --servers on the command line
  int64_t limit = 100;
  int64_t window_ms = 60000;
  int windows = 10;
  std::string algorithm = "fixed_window";
  int64_t demand = -1;  // requests per window over all servers; -1: servers x limit
  std::string shape = "even";
  std::string per_server;  // "c1,c2,...": requests per window per server
  std::vector<std::string> modes;
  int64_t sync_interval_ms = 100;
  bool json = false;
  std::string svg;
};

// The model clock every simulated store reads.
class SimClock final : public Clock {
 public:
  int64_t NowMs() const override { return now_.load(std::memory_order_relaxed); }
  void Set(int64_t ms) { now_.store(ms, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_{0};
};

struct Request {
  int64_t at_ms;  // model time
  int server;
};

struct ModeResult {
  std::string mode;
  int64_t per_server_limit = 0;  // the limit each server enforces (shared: the whole one)
  int64_t admitted = 0;
  int64_t store_calls = 0;  // calls that reached a store shared by the servers
  std::vector<int64_t> admitted_per_window;
  std::vector<int64_t> admitted_per_server;
  // Cumulative admitted at the end of each tenth of a window (for the chart).
  std::vector<int64_t> cumulative;
  int64_t overshoot = 0, under_admission = 0;  // against the shared mode, per window
};

// Splits `total` over weights by largest remainder (deterministic: ties go to the
// lower index).
std::vector<int64_t> Apportion(int64_t total, const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<int64_t> out(weights.size(), 0);
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = static_cast<double>(total) * weights[i] / sum;
    out[i] = static_cast<int64_t>(std::floor(exact));
    given += out[i];
    rest.emplace_back(exact - static_cast<double>(out[i]), i);
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total && k < rest.size(); ++k, ++given) ++out[rest[k].second];
  return out;
}

// Requests per window per server, or an error message.
std::string PerServer(SimulateOptions& o, std::vector<int64_t>& counts) {
  if (!o.per_server.empty()) {
    std::stringstream in(o.per_server);
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != 0 || v < 0 || v > 10'000'000) {
        return "--per-server: \"" + item + "\" is not a count of requests (0..10000000)";
      }
      counts.push_back(v);
    }
    if (counts.empty()) return "--per-server: no counts given";
    if (o.servers_given && o.servers != static_cast<int>(counts.size())) {
      return "--per-server lists " + std::to_string(counts.size()) + " servers but --servers is " +
             std::to_string(o.servers);
    }
    o.servers = static_cast<int>(counts.size());
    return "";
  }
  if (o.servers < 1 || o.servers > 10'000) return "--servers: want 1..10000";
  const int64_t demand = o.demand < 0 ? o.limit * o.servers : o.demand;
  if (demand > 100'000'000) return "--demand: at most 100000000 requests per window";
  std::vector<double> weights(static_cast<size_t>(o.servers), 1.0);
  if (o.shape == "skewed") {
    // Zipf-like: server i gets a share proportional to 1 / (i + 1).
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 / static_cast<double>(i + 1);
  } else if (o.shape == "pinned") {
    std::fill(weights.begin(), weights.end(), 0.0);
    weights[0] = 1.0;
  } else if (o.shape != "even" && o.shape != "bursts") {
    return "--shape: \"" + o.shape + "\" is not one of even, skewed, pinned, bursts";
  }
  counts = Apportion(demand, weights);
  return "";
}

std::vector<Request> Schedule(const SimulateOptions& o, const std::vector<int64_t>& counts,
                              int64_t start_ms) {
  std::vector<Request> out;
  const double span =
      static_cast<double>(o.window_ms) / (o.shape == "bursts" && o.per_server.empty() ? 10 : 1);
  for (int w = 0; w < o.windows; ++w) {
    const int64_t base = start_ms + w * o.window_ms;
    for (size_t s = 0; s < counts.size(); ++s) {
      for (int64_t j = 0; j < counts[s]; ++j) {
        const double at = (static_cast<double>(j) + 0.5) * span / static_cast<double>(counts[s]);
        out.push_back({base + static_cast<int64_t>(at), static_cast<int>(s)});
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Request& a, const Request& b) {
    return a.at_ms != b.at_ms ? a.at_ms < b.at_ms : a.server < b.server;
  });
  return out;
}

// Decides `requests` under `mode`. Returns an error message or "".
std::string RunMode(const SimulateOptions& o, Algorithm algorithm, const std::string& mode,
                    const std::vector<Request>& requests, int64_t start_ms, ModeResult& r) {
  r.mode = mode;
  const bool prefetch = mode == "prefetch";
  const bool sync = mode == "sync";
  const bool per_server = prefetch || sync;  // one store, a limiter per server
  const bool shared = mode == "shared" || per_server;
  r.per_server_limit = mode == "split" ? o.limit / o.servers : o.limit;
  if (r.per_server_limit < 1) {
    return "mode split: limit " + std::to_string(o.limit) + " over " + std::to_string(o.servers) +
           " servers leaves less than 1 per server";
  }
  auto clock = std::make_shared<SimClock>();
  clock->Set(start_ms);
  Limit limit{.algorithm = algorithm,
              .limit = r.per_server_limit,
              .window = std::chrono::milliseconds(o.window_ms),
              .aligned = algorithm == Algorithm::kFixedWindow};
  // One store for all servers (shared), or one per server (local, split).
  std::vector<std::shared_ptr<Client>> clients;
  std::vector<Limiter> limiters;
  // Prefetch: one store, and a limiter per server (each holds its own slices).
  const int stores = shared ? 1 : o.servers;
  for (int i = 0; i < stores; ++i) {
    auto client = Client::Create({.url = "memory://", .model_clock = clock});
    if (!client.ok()) return client.status().ToString();
    clients.push_back(*client);
  }
  LimiterOptions options;
  options.local_budget.enabled = prefetch;
  if (sync) {
    options.sync = {.enabled = true,
                    .hot_checks_per_second = 1,
                    .sync_interval = std::chrono::milliseconds(o.sync_interval_ms),
                    .servers = o.servers};
  }
  for (int i = 0; i < (per_server ? o.servers : stores); ++i) {
    auto limiter =
        clients[per_server ? 0 : static_cast<size_t>(i)]->MakeLimiter("simulate", limit, options);
    if (!limiter.ok()) return "mode " + mode + ": " + limiter.status().ToString();
    limiters.push_back(*limiter);
  }
  r.admitted_per_window.assign(static_cast<size_t>(o.windows), 0);
  r.admitted_per_server.assign(static_cast<size_t>(o.servers), 0);
  r.cumulative.assign(static_cast<size_t>(o.windows) * 10, 0);
  for (const Request& q : requests) {
    clock->Set(q.at_ms);
    Limiter& limiter = limiters[shared && !per_server ? 0 : static_cast<size_t>(q.server)];
    StatusOr<Decision> d = limiter.Check("hot");
    if (!d.ok()) return d.status().ToString();
    if (shared && d->source == DecisionSource::kStore) ++r.store_calls;
    if (!d->allowed) continue;
    ++r.admitted;
    const int64_t since = q.at_ms - start_ms;
    ++r.admitted_per_window[static_cast<size_t>(since / o.window_ms)];
    ++r.admitted_per_server[static_cast<size_t>(q.server)];
    ++r.cumulative[static_cast<size_t>(since * 10 / o.window_ms)];
  }
  for (size_t i = 1; i < r.cumulative.size(); ++i) r.cumulative[i] += r.cumulative[i - 1];
  if (sync) r.store_calls += static_cast<int64_t>(clients[0]->stats().syncs);
  return "";
}

std::string Svg(const SimulateOptions& o, const std::vector<ModeResult>& results) {
  const double width = 720, height = 420, left = 70, right = 150, top = 40, bottom = 50;
  int64_t max_y = 1;
  for (const ModeResult& r : results) max_y = std::max(max_y, r.cumulative.back());
  const size_t points = results.front().cumulative.size();
  const auto x = [&](size_t i) {
    return left + (width - left - right) * static_cast<double>(i) / static_cast<double>(points);
  };
  const auto y = [&](int64_t v) {
    return top +
           (height - top - bottom) * (1.0 - static_cast<double>(v) / static_cast<double>(max_y));
  };
  static const char* kColors[] = {"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd"};
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"22\" font-size=\"14\">" << o.servers << " servers sharing "
    << o.limit << " per " << o.window_ms << " ms (" << o.algorithm
    << "): requests admitted, cumulative</text>\n";
  // Axes, and a tick per window.
  s << "<line x1=\"" << left << "\" y1=\"" << y(0) << "\" x2=\"" << width - right << "\" y2=\""
    << y(0) << "\" stroke=\"black\"/>\n"
    << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << y(0)
    << "\" stroke=\"black\"/>\n";
  for (int w = 0; w <= o.windows; ++w) {
    const double wx = x(static_cast<size_t>(w) * 10);
    s << "<line x1=\"" << wx << "\" y1=\"" << y(0) << "\" x2=\"" << wx << "\" y2=\"" << y(0) + 5
      << "\" stroke=\"black\"/>\n";
    if (w % std::max(1, o.windows / 10) == 0) {
      s << "<text x=\"" << wx << "\" y=\"" << y(0) + 18 << "\" text-anchor=\"middle\">" << w
        << "</text>\n";
    }
  }
  s << "<text x=\"" << (left + width - right) / 2 << "\" y=\"" << height - 10
    << "\" text-anchor=\"middle\">windows</text>\n"
    << "<text x=\"" << left - 8 << "\" y=\"" << top + 4 << "\" text-anchor=\"end\">" << max_y
    << "</text>\n<text x=\"" << left - 8 << "\" y=\"" << y(0)
    << "\" text-anchor=\"end\">0</text>\n";
  for (size_t m = 0; m < results.size(); ++m) {
    const ModeResult& r = results[m];
    const char* color = kColors[m % 5];
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"" << x(0)
      << "," << y(0);
    for (size_t i = 0; i < points; ++i) s << " " << x(i + 1) << "," << y(r.cumulative[i]);
    s << "\"/>\n<text x=\"" << width - right + 8 << "\" y=\"" << y(r.cumulative.back()) + 4
      << "\" fill=\"" << color << "\">" << r.mode << ": " << r.admitted << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

// --limit, --window-ms, --windows, and the requests per window per server (`counts`, and
// their sum `per_window`), within what is simulated. An error message or "".
std::string CheckLoad(SimulateOptions& o, std::vector<int64_t>& counts, int64_t& per_window) {
  if (o.limit < 1 || o.limit > 100'000'000) return "--limit: want 1..100000000";
  if (o.window_ms < 10 || o.window_ms > 86'400'000) return "--window-ms: want 10..86400000";
  if (o.windows < 1 || o.windows > 1000) return "--windows: want 1..1000";
  if (std::string why = PerServer(o, counts); !why.empty()) return why;
  per_window = 0;
  for (int64_t c : counts) per_window += c;
  if (per_window * o.windows > 20'000'000) {
    return "that is " + std::to_string(per_window * o.windows) +
           " requests in all; at most 20000000 are simulated";
  }
  return "";
}

// --mode (local, split, shared by default) and --sync-interval-ms. `note` says why a mode
// asked for by default is left out. An error message or "".
std::string CheckModes(SimulateOptions& o, std::string& note) {
  if (o.modes.empty()) {
    o.modes = {"local", "split", "shared"};
    if (o.limit / o.servers < 1) {
      // Asked for by default only: leave it out and say why (asked for by name, it fails).
      o.modes = {"local", "shared"};
      note = "split not run: limit " + std::to_string(o.limit) + " over " +
             std::to_string(o.servers) + " servers leaves less than 1 per server";
    }
  }
  for (const std::string& m : o.modes) {
    if (m != "local" && m != "split" && m != "shared" && m != "prefetch" && m != "sync") {
      return "--mode: \"" + m + "\" is not one of local, split, shared, prefetch, sync";
    }
  }
  if (o.sync_interval_ms < 1) return "--sync-interval-ms: want >= 1";
  return "";
}

// The result of `mode` (one that ran).
const ModeResult& Find(const std::vector<ModeResult>& results, const std::string& mode) {
  return *std::find_if(results.begin(), results.end(),
                       [&](const ModeResult& r) { return r.mode == mode; });
}

// Runs the modes asked for, and the shared mode (the reference every mode is held to, so
// it always runs); each result's overshoot and under-admission against the shared mode's.
// An error message or "".
std::string RunModes(const SimulateOptions& o, Algorithm algorithm,
                     const std::vector<Request>& requests, int64_t start_ms,
                     std::vector<ModeResult>& results) {
  std::vector<std::string> run = o.modes;
  if (std::find(run.begin(), run.end(), "shared") == run.end()) run.push_back("shared");
  results.resize(run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    if (std::string why = RunMode(o, algorithm, run[i], requests, start_ms, results[i]);
        !why.empty()) {
      return why;
    }
  }
  const ModeResult& ideal = Find(results, "shared");
  for (ModeResult& r : results) {
    for (int w = 0; w < o.windows; ++w) {
      const int64_t d = r.admitted_per_window[static_cast<size_t>(w)] -
                        ideal.admitted_per_window[static_cast<size_t>(w)];
      (d > 0 ? r.overshoot : r.under_admission) += std::abs(d);
    }
  }
  return "";
}

void PrintSimulateJson(const SimulateOptions& o, const std::vector<int64_t>& counts,
                       int64_t per_window, int64_t ideal, const std::vector<ModeResult>& shown,
                       const std::string& note) {
  nlohmann::json j = {{"servers", o.servers},     {"limit", o.limit},
                      {"window_ms", o.window_ms}, {"windows", o.windows},
                      {"algorithm", o.algorithm}, {"requests_per_window", per_window},
                      {"per_server", counts},     {"ideal", ideal}};
  for (const ModeResult& r : shown) {
    j["modes"].push_back({{"mode", r.mode},
                          {"per_server_limit", r.per_server_limit},
                          {"admitted", r.admitted},
                          {"overshoot", r.overshoot},
                          {"under_admission", r.under_admission},
                          {"store_calls", r.store_calls},
                          {"admitted_per_window", r.admitted_per_window},
                          {"admitted_per_server", r.admitted_per_server}});
  }
  if (shown.size() == 1) j["admitted"] = shown.front().admitted;
  if (!note.empty()) j["note"] = note;
  std::printf("%s\n", j.dump().c_str());
}

void PrintSimulateTable(const SimulateOptions& o, int64_t per_window, int64_t ideal,
                        const std::vector<ModeResult>& shown, const std::string& note) {
  std::printf("%d servers sharing %lld per %lld ms (%s), %d windows, %lld requests per window\n",
              o.servers, static_cast<long long>(o.limit), static_cast<long long>(o.window_ms),
              o.algorithm.c_str(), o.windows, static_cast<long long>(per_window));
  std::printf("ideal (one shared limit): %lld admitted\n\n", static_cast<long long>(ideal));
  std::printf("%-8s %10s %10s %10s %16s %12s\n", "mode", "per server", "admitted", "overshoot",
              "under-admission", "store calls");
  for (const ModeResult& r : shown) {
    std::printf("%-8s %10lld %10lld %10lld %16lld %12lld\n", r.mode.c_str(),
                static_cast<long long>(r.per_server_limit), static_cast<long long>(r.admitted),
                static_cast<long long>(r.overshoot), static_cast<long long>(r.under_admission),
                static_cast<long long>(r.store_calls));
  }
  if (!note.empty()) std::printf("%s\n", note.c_str());
  std::printf(
      "\nper server: the limit each server enforces; overshoot / under-admission: admitted "
      "above / below the shared limit's, summed per window\n");
}

int Run(SimulateOptions o) {
  const auto fail = [](const std::string& why) {
    std::fprintf(stderr, "sluice simulate: %s\n", why.c_str());
    return kExitError;
  };
  StatusOr<Algorithm> algorithm = ParseAlgorithm(o.algorithm);
  if (!algorithm.ok()) return fail(algorithm.status().message());
  std::vector<int64_t> counts;
  int64_t per_window = 0;
  if (std::string why = CheckLoad(o, counts, per_window); !why.empty()) return fail(why);
  std::string note;
  if (std::string why = CheckModes(o, note); !why.empty()) return fail(why);
  // Aligned windows start at multiples of the window on the model clock.
  const int64_t start_ms = 1'700'000'000'000 / o.window_ms * o.window_ms + o.window_ms;
  const std::vector<Request> requests = Schedule(o, counts, start_ms);

  std::vector<ModeResult> results;
  if (std::string why = RunModes(o, *algorithm, requests, start_ms, results); !why.empty()) {
    return fail(why);
  }
  const int64_t ideal = Find(results, "shared").admitted;
  // Report the modes asked for, in the order asked.
  std::vector<ModeResult> shown;
  for (const std::string& m : o.modes) shown.push_back(Find(results, m));

  if (!o.svg.empty()) {
    std::ofstream out(o.svg);
    out << Svg(o, shown);
    if (!out.good()) return fail("cannot write " + o.svg);
  }
  if (o.json) {
    PrintSimulateJson(o, counts, per_window, ideal, shown, note);
  } else {
    PrintSimulateTable(o, per_window, ideal, shown, note);
  }
  return kExitOk;
}

}  // namespace

void AddSimulate(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "N servers sharing one limit, simulated deterministically (embedded store, model "
      "clock; no Redis): what each enforcement mode admits");
  CLI::Option* servers =
      cmd->add_option("--servers", o->servers, "Servers sharing the limit")->capture_default_str();
  cmd->add_option("--limit", o->limit, "The shared limit per window")->capture_default_str();
  cmd->add_option("--window-ms", o->window_ms, "Window length")->capture_default_str();
  cmd->add_option("--windows", o->windows, "Windows simulated")->capture_default_str();
  cmd->add_option("--algorithm", o->algorithm,
                  "fixed_window (aligned), sliding_window, sliding_log, token_bucket, gcra")
      ->capture_default_str();
  cmd->add_option("--demand", o->demand,
                  "Requests per window over all servers (default: servers x limit)");
  cmd->add_option("--shape", o->shape,
                  "How --demand is spread: even, skewed (server i gets 1/(i+1) of the "
                  "weight), pinned (all on server 0), bursts (even, in each window's first "
                  "tenth)")
      ->capture_default_str();
  cmd->add_option("--per-server", o->per_server,
                  "Requests each server receives per window, c1,c2,... (instead of "
                  "--demand/--shape; sets --servers)");
  cmd->add_option("--mode", o->modes,
                  "local, split, shared, prefetch, sync (repeatable; default local, split, "
                  "shared)");
  cmd->add_option("--sync-interval-ms", o->sync_interval_ms,
                  "mode sync: model time between a server's syncs")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "One JSON object on stdout");
  cmd->add_option("--svg", o->svg, "Write a chart of admitted requests over time per mode");
  cmd->callback([o, servers, &exit_code] {
    o->servers_given = servers->count() > 0;
    exit_code = Run(*o);
  });
}

}  // namespace sluice::cli

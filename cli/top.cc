// sluice top: a live view of the ids with the most live leases and the hottest counters
// under a prefix, refreshed every --interval, sampled with SCAN: each refresh reads at
// most --sample keys, going on where the previous refresh stopped (the SCAN cursor is
// kept), so successive refreshes walk the whole keyspace and start over. Rows found by
// earlier refreshes stay on screen, with the values they had when sampled, until the
// key is sampled again or a whole pass of the keyspace has gone by without it. Quits on q
// or Ctrl-C. A concurrency set whose live leases never return to zero is the "floor" of
// a leak: it stays at the top here.
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "admin_common.h"
#include "commands.h"
#include "target.h"

namespace sluice::cli {
namespace {

struct TopOptions {
  AdminFlags admin;
  std::string limiter;  // from the target flags
  TargetFlags target;
  double interval_s = 1;
  int rows = 15;
  int64_t sample = 20'000;
  bool once = false;
  int frames = 0;  // 0: until q
};

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop.store(true);
}

struct Row {
  std::string key, limiter, id, algorithm, unit;
  int64_t value = 0, stale = 0, ttl_ms = 0;
  int64_t pass = 0;  // the keyspace pass in which it was sampled
};

struct Frame {
  int64_t sampled = 0;
  int64_t pass = 0;  // passes over the keyspace completed before this refresh ended
  double took_s = 0;
  std::vector<Row> leases, counters;
};

// What successive refreshes share: where SCAN stands, and the rows worth showing.
struct View {
  std::string cursor = "0";
  int64_t pass = 0;
  std::map<std::string, Row> lease_rows, counter_rows;  // by key
};

bool ByValue(const Row& a, const Row& b) {
  return a.value != b.value ? a.value > b.value : a.stale > b.stale;
}

// The top `n` of `rows`, best first.
std::vector<Row> Top(std::vector<Row> rows, int n) {
  const size_t keep = std::min(rows.size(), static_cast<size_t>(n));
  std::partial_sort(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(keep), rows.end(),
                    ByValue);
  rows.resize(keep);
  return rows;
}

// The rows of `known` sampled in this pass or the last one, the top `n` of each
// algorithm (units differ between algorithms: ms until full for gcra, tokens, counts);
// `known` keeps only those.
std::vector<Row> Rank(std::map<std::string, Row>& known, int64_t pass, int n) {
  std::map<std::string, std::vector<Row>> by_algorithm;
  for (auto& [key, row] : known) {
    if (row.pass >= pass - 1) by_algorithm[row.algorithm].push_back(row);
  }
  std::vector<Row> ranked;
  known.clear();
  for (auto& [algorithm, rows] : by_algorithm) {
    for (Row& r : Top(std::move(rows), n)) {
      known[r.key] = r;
      ranked.push_back(std::move(r));
    }
  }
  return ranked;
}

StatusOr<Frame> Sample(Admin& admin, const TopOptions& o, View& view) {
  const auto start = std::chrono::steady_clock::now();
  Frame frame;
  std::vector<std::string> counter_keys;
  // From where the last refresh stopped; past the end, once more from the start (so a
  // keyspace smaller than --sample is read whole, once, each refresh).
  const bool from_start = view.cursor == "0";
  for (int leg = 0; leg < 2 && frame.sampled < o.sample; ++leg) {
    bool finished = false;
    Status status =
        admin.Scan({.limiter = o.limiter, .cursor = view.cursor, .distinct = true},
                   [&](const ScanBatch& batch) {
                     for (const ScannedKey& k : batch.keys) {
                       ++frame.sampled;
                       if (!k.name) continue;
                       if (k.name->suffix == "ch") continue;  // a lease set's history
                       if (k.name->suffix == "cc") {
                         view.lease_rows[k.key] = {k.key,
                                                   k.name->limiter,
                                                   k.name->encoded_id,
                                                   "concurrency",
                                                   "live leases",
                                                   k.members - std::max<int64_t>(0, k.stale),
                                                   std::max<int64_t>(0, k.stale),
                                                   k.ttl_ms,
                                                   view.pass};
                       } else {
                         counter_keys.push_back(k.key);
                       }
                     }
                     view.cursor = batch.cursor;
                     finished = batch.cursor == "0";
                     return frame.sampled < o.sample;
                   });
    if (!status.ok()) return status;
    if (!finished) break;
    ++view.pass;
    view.cursor = "0";
    if (from_start && leg == 0) break;  // the whole keyspace was read in this refresh
  }
  constexpr size_t kChunk = 5000;
  for (size_t at = 0; at < counter_keys.size(); at += kChunk) {
    std::span<const std::string> chunk(counter_keys.data() + at,
                                       std::min(kChunk, counter_keys.size() - at));
    auto states = admin.ReadKeys(chunk);
    if (!states.ok()) return states.status();
    for (const KeyState& s : *states) {
      if (!s.name || s.used <= 0) {
        view.counter_rows.erase(s.key);  // back to zero, or gone
        continue;
      }
      view.counter_rows[s.key] = {s.key,
                                  s.name->limiter,
                                  s.name->encoded_id,
                                  std::string(SuffixAlgorithm(s.name->suffix)),
                                  s.used_unit,
                                  s.used,
                                  0,
                                  s.ttl_ms,
                                  view.pass};
    }
  }
  frame.pass = view.pass;
  frame.leases = Top(Rank(view.lease_rows, view.pass, o.rows), o.rows);
  frame.counters = Rank(view.counter_rows, view.pass, o.rows);
  frame.took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return frame;
}

std::string Render(const Frame& f, const TopOptions& o) {
  std::string out;
  char line[512];
  auto add = [&](int n) {
    out.append(line, static_cast<size_t>(std::min<int>(n, sizeof line - 1)));
  };
  add(std::snprintf(line, sizeof line,
                    "sluice top — prefix %s%s%s — %lld keys sampled in %.2f s (keyspace passes "
                    "done: %lld) — q or Ctrl-C quits\n\n",
                    o.admin.prefix.c_str(), o.limiter.empty() ? "" : ", limiter ",
                    o.limiter.c_str(), static_cast<long long>(f.sampled), f.took_s,
                    static_cast<long long>(f.pass)));
  add(std::snprintf(line, sizeof line, "MOST LIVE LEASES\n%-20s %-40s %10s %8s %12s\n", "limiter",
                    "id", "live", "stale", "ttl"));
  if (f.leases.empty()) out += "  (no concurrency sets)\n";
  for (const Row& r : f.leases) {
    add(std::snprintf(line, sizeof line, "%-20s %-40s %10lld %8lld %12s\n", r.limiter.c_str(),
                      r.id.c_str(), static_cast<long long>(r.value),
                      static_cast<long long>(r.stale), FormatTtl(r.ttl_ms).c_str()));
  }
  add(std::snprintf(line, sizeof line,
                    "\nHOTTEST COUNTERS (top rows of each algorithm)\n%-20s %-40s %-15s %10s  %s\n",
                    "limiter", "id", "algorithm", "used", "unit"));
  if (f.counters.empty()) out += "  (no counters in use)\n";
  for (const Row& r : f.counters) {
    add(std::snprintf(line, sizeof line, "%-20s %-40s %-15s %10lld  %s\n", r.limiter.c_str(),
                      r.id.c_str(), r.algorithm.c_str(), static_cast<long long>(r.value),
                      r.unit.c_str()));
  }
  return out;
}

nlohmann::json ToJson(const Frame& f) {
  auto rows = [](const std::vector<Row>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const Row& r : v) {
      a.push_back({{"limiter", r.limiter},
                   {"id", r.id},
                   {"algorithm", r.algorithm},
                   {"value", r.value},
                   {"unit", r.unit},
                   {"stale", r.stale},
                   {"ttl_ms", r.ttl_ms}});
    }
    return a;
  };
  return {{"sampled", f.sampled},
          {"passes", f.pass},
          {"took_s", f.took_s},
          {"leases", rows(f.leases)},
          {"counters", rows(f.counters)}};
}

// Waits up to `seconds` for q on stdin or a signal; true when the user asked to quit.
bool WaitForQuit(double seconds, bool& stdin_open) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_stop.load()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int n = poll(&p, stdin_open ? 1 : 0, static_cast<int>(left.count()));
    if (n > 0) {
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) != 1) {
        stdin_open = false;  // EOF: only Ctrl-C quits now
      } else if (c == 'q' || c == 'Q' || c == 3 /* Ctrl-C in raw mode */) {
        return true;
      }
    }
  }
  return true;
}

int RunTop(const TopOptions& o) {
  auto admin = ConnectOrReport("top", o.admin);
  if (!admin) return kExitError;
  View view;
  if (o.once || o.admin.json || o.frames > 0) {
    // --frames N: N refreshes --interval apart; each printed, or with --json the last.
    const int frames = o.frames > 0 ? o.frames : 1;
    for (int i = 0; i < frames; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
      auto frame = Sample(*admin, o, view);
      if (!frame.ok()) return ReportError("top", frame.status());
      if (o.admin.json) {
        if (i == frames - 1) PrintJson(ToJson(*frame));
      } else {
        std::fputs(Render(*frame, o).c_str(), stdout);
        std::fflush(stdout);
      }
    }
    return kExitOk;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;  // no SA_RESTART: poll returns at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool tty = isatty(STDIN_FILENO) == 1;
  termios saved{};
  if (tty && tcgetattr(STDIN_FILENO, &saved) == 0) {
    termios raw = saved;
    raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  }
  const bool clear = isatty(STDOUT_FILENO) == 1;
  bool stdin_open = true;
  int exit_code = kExitOk;
  while (!g_stop.load()) {
    auto frame = Sample(*admin, o, view);
    if (!frame.ok()) {
      exit_code = ReportError("top", frame.status());
      break;
    }
    std::string text = Render(*frame, o);
    if (clear) text = "\x1b[H\x1b[2J" + text;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    if (WaitForQuit(o.interval_s, stdin_open)) break;
  }
  if (tty) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  return exit_code;
}

}  // namespace

void AddTop(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TopOptions>();
  CLI::App* cmd = app.add_subcommand(
      "top",
      "Live view of the ids with the most live leases and the hottest counters under a prefix, "
      "sampled with SCAN (--sample keys per refresh, each refresh going on where the last "
      "stopped). Quits on q or Ctrl-C.\n"
      "Exit codes: 0 quit, 2 usage or connection error.");
  AddAdminFlags(cmd, o->admin);
  AddTargetFlags(cmd, o->target, /*with_id=*/false);  // only this limiter's keys
  cmd->add_option("--interval", o->interval_s, "Seconds between refreshes")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--rows", o->rows, "Rows per table")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000));
  cmd->add_option("--sample", o->sample,
                  "At most this many keys scanned per refresh; each refresh goes on where the "
                  "last stopped, so successive refreshes cover the whole keyspace")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  auto* once =
      cmd->add_flag("--once", o->once, "Print one frame and exit (--json alone implies it)");
  cmd->add_option("--frames", o->frames,
                  "Print this many frames, --interval apart, and exit (with --json: only the "
                  "last, which holds what every refresh found)")
      ->check(CLI::Range(1, 1'000'000))
      ->excludes(once);
  cmd->callback([o, &exit_code] {
    if (AnyTarget(o->target)) {
      auto target = ResolveTarget(o->target, Need::kLimiter);
      if (!target.ok()) {
        exit_code = ReportError("top", target.status());
        return;
      }
      o->limiter = target->limiter;
    }
    exit_code = RunTop(*o);
  });
}

}  // namespace sluice::cli

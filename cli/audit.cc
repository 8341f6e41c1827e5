// sluice audit: read-only. SCANs the prefix (never KEYS) with TYPE/PTTL pipelined per
// batch and reports keys without an expiry (leaks) grouped by limiter and algorithm,
// concurrency sets holding stale leases, the largest sets, keys under the prefix that
// are not sluice's (foreign), and totals. Every count is of distinct keys: SCAN may
// return a key twice, and the scan drops repeats (ScanOptions::distinct: a 64-bit hash
// per key, not a copy of it). Progress (keys scanned, rate, ETA from DBSIZE) goes to
// stderr once a second when the scan takes longer than that.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "admin_common.h"
#include "commands.h"
#include "target.h"

namespace sluice::cli {
namespace {

struct AuditOptions {
  AdminFlags admin;
  std::string limiter;  // from the target flags
  TargetFlags target;
  int list = 100;  // keys listed per group
  int largest = 10;
  bool quiet = false;
};

struct SetInfo {
  std::string key;
  std::string limiter, id, algorithm;
  int64_t members = 0, stale = 0;
  bool operator>(const SetInfo& o) const { return members > o.members; }
};

struct LeakGroup {
  int64_t count = 0;
  std::vector<std::string> keys;
};

class Progress {
 public:
  Progress(bool enabled, int64_t total) : enabled_(enabled), total_(total) {}
  void Update(int64_t scanned) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = scanned / elapsed;
    char eta[64] = "";
    if (total_ > scanned && rate > 0) {
      // DBSIZE counts every key of the database, so this bounds the time left.
      std::snprintf(eta, sizeof eta, ", ETA <= %.0f s", (total_ - scanned) / rate);
    }
    std::fprintf(stderr, "%saudit: %lld of <= %lld keys scanned, %.0f keys/s%s%s", tty_ ? "\r" : "",
                 static_cast<long long>(scanned), static_cast<long long>(total_), rate, eta,
                 tty_ ? "   " : "\n");
    shown_ = true;
  }
  void Done() {
    if (shown_ && tty_) std::fputc('\n', stderr);
  }

 private:
  bool enabled_;
  int64_t total_;
  bool tty_ = isatty(STDERR_FILENO) == 1;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

// What the scan found, key by key; then ordered for the report by Finish.
struct AuditTally {
  int64_t scanned = 0, sluice_keys = 0, leaked = 0, foreign = 0, vanished = 0, repeats = 0;
  std::map<std::string, int64_t> by_algorithm;
  std::map<std::pair<std::string, std::string>, LeakGroup> leaks;  // (limiter, suffix)
  std::vector<nlohmann::json> foreign_examples;
  std::vector<SetInfo> stale_sets;
  // The largest sets, smallest on top (popped once there are more than --largest).
  std::priority_queue<SetInfo, std::vector<SetInfo>, std::greater<>> largest;
  // After Finish: largest first (from `largest`), and the stale leases of stale_sets.
  std::vector<SetInfo> top;
  int64_t stale_leases = 0;

  void Add(const ScannedKey& k, const AuditOptions& o);
  // Orders stale_sets most stale first, moves `largest` to `top`, sums the stale leases.
  void Finish();
};

void AuditTally::Add(const ScannedKey& k, const AuditOptions& o) {
  ++scanned;
  if (k.type == KeyType::kNone) {
    ++vanished;
    return;
  }
  if (k.foreign()) {
    ++foreign;
    if (foreign_examples.size() < static_cast<size_t>(o.list)) {
      foreign_examples.push_back(
          {{"key", k.key}, {"type", KeyTypeName(k.type)}, {"ttl_ms", k.ttl_ms}});
    }
    return;
  }
  ++sluice_keys;
  const KeyName& name = *k.name;
  ++by_algorithm[std::string(SuffixAlgorithm(name.suffix))];
  if (k.ttl_ms == -1) {
    ++leaked;
    LeakGroup& g = leaks[{name.limiter, name.suffix}];
    ++g.count;
    if (g.keys.size() < static_cast<size_t>(o.list)) g.keys.push_back(k.key);
  }
  if (k.members >= 0) {
    SetInfo set{k.key,           name.limiter,
                name.encoded_id, std::string(SuffixAlgorithm(name.suffix)),
                k.members,       std::max<int64_t>(0, k.stale)};
    if (k.stale > 0) stale_sets.push_back(set);
    if (o.largest > 0) {
      largest.push(std::move(set));
      if (largest.size() > static_cast<size_t>(o.largest)) largest.pop();
    }
  }
}

void AuditTally::Finish() {
  while (!largest.empty()) {
    top.push_back(largest.top());
    largest.pop();
  }
  std::reverse(top.begin(), top.end());
  std::sort(stale_sets.begin(), stale_sets.end(),
            [](const SetInfo& a, const SetInfo& b) { return a.stale > b.stale; });
  for (const SetInfo& s : stale_sets) stale_leases += s.stale;
}

// Every key under the prefix (or the limiter) into `tally`, with progress on stderr.
Status ScanForAudit(Admin& admin, const AuditOptions& o, int64_t dbsize, AuditTally& tally) {
  Progress progress(!o.quiet, dbsize);
  Status status = admin.Scan({.limiter = o.limiter, .distinct = true}, [&](const ScanBatch& batch) {
    tally.repeats = batch.repeats;
    for (const ScannedKey& k : batch.keys) tally.Add(k, o);
    progress.Update(batch.scanned);
    return true;
  });
  progress.Done();
  return status;
}

using MemoryPolicies = StatusOr<std::vector<Admin::MemoryPolicy>>;

// Foreign keys are an error (the prefix is shared or wrong); keys without an expiry,
// stale leases and a store that can evict are findings. A store that can evict resets
// limits without a trace in the keys: a finding too.
int AuditExitCode(const AuditTally& t, const MemoryPolicies& memory) {
  bool evicting = false;
  if (memory.ok()) {
    for (const auto& m : *memory) evicting |= m.can_evict;
  }
  return t.foreign > 0                                         ? kExitError
         : (t.leaked > 0 || !t.stale_sets.empty() || evicting) ? kExitFindings
                                                               : kExitOk;
}

nlohmann::json LeaksJson(const AuditTally& t) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& [k, g] : t.leaks) {
    groups.push_back({{"limiter", k.first},
                      {"algorithm", SuffixAlgorithm(k.second)},
                      {"type", KeyTypeName(ExpectedKeyType(k.second))},
                      {"count", g.count},
                      {"keys", g.keys}});
  }
  return groups;
}

nlohmann::json StaleSetsJson(const AuditTally& t) {
  nlohmann::json stale = nlohmann::json::array();
  for (const SetInfo& s : t.stale_sets) {
    stale.push_back({{"limiter", s.limiter},
                     {"id", s.id},
                     {"key", s.key},
                     {"stale", s.stale},
                     {"members", s.members}});
  }
  return stale;
}

nlohmann::json LargestSetsJson(const AuditTally& t) {
  nlohmann::json big = nlohmann::json::array();
  for (const SetInfo& s : t.top) {
    big.push_back({{"limiter", s.limiter},
                   {"id", s.id},
                   {"algorithm", s.algorithm},
                   {"key", s.key},
                   {"members", s.members}});
  }
  return big;
}

void PrintAuditJson(const AuditOptions& o, const AuditTally& t, int64_t dbsize, double elapsed,
                    const MemoryPolicies& memory, int exit_code) {
  nlohmann::json doc;
  doc["prefix"] = o.admin.prefix;
  if (!o.limiter.empty()) doc["limiter"] = o.limiter;
  doc["keys_scanned"] = t.scanned;
  doc["repeats_dropped"] = t.repeats;
  doc["sluice_keys"] = t.sluice_keys;
  doc["dbsize"] = dbsize;
  doc["elapsed_s"] = elapsed;
  doc["keys_per_s"] = elapsed > 0 ? t.scanned / elapsed : 0.0;
  doc["by_algorithm"] = t.by_algorithm;
  doc["leaked"] = t.leaked;
  doc["leaks"] = LeaksJson(t);
  doc["stale_lease_sets"] = StaleSetsJson(t);
  doc["stale_leases"] = t.stale_leases;
  doc["largest_sets"] = LargestSetsJson(t);
  doc["foreign"] = t.foreign;
  doc["foreign_examples"] = t.foreign_examples;
  if (memory.ok()) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& m : *memory) {
      nodes.push_back({{"node", m.node},
                       {"maxmemory_policy", m.policy},
                       {"can_evict", m.can_evict},
                       {"evicted_keys", m.evicted_keys}});
    }
    doc["memory_policy"] = nodes;
  } else {
    doc["memory_policy_error"] = memory.status().message();
  }
  doc["peak_rss_kb"] = PeakRssKb();
  doc["exit_code"] = exit_code;
  PrintJson(doc);
}

void PrintLeaks(const AuditTally& t) {
  if (t.leaked == 0) {
    std::printf("\nno key without an expiry\n");
    return;
  }
  std::printf("\n%lld key(s) WITHOUT AN EXPIRY (fix: sluice repair --apply):\n",
              static_cast<long long>(t.leaked));
  for (const auto& [k, g] : t.leaks) {
    std::printf("  %s%s, %s (%s): %lld\n", k.first.empty() ? "" : "limiter ", k.first.c_str(),
                std::string(SuffixAlgorithm(k.second)).c_str(),
                std::string(KeyTypeName(ExpectedKeyType(k.second))).c_str(),
                static_cast<long long>(g.count));
    for (const std::string& key : g.keys) std::printf("    %s\n", key.c_str());
    if (g.count > static_cast<int64_t>(g.keys.size())) {
      std::printf("    … and %lld more\n", static_cast<long long>(g.count - g.keys.size()));
    }
  }
}

void PrintSets(const AuditOptions& o, const AuditTally& t) {
  if (!t.stale_sets.empty()) {
    std::printf("\n%zu concurrency set(s) hold %lld STALE LEASE(S) (expired, not yet pruned):\n",
                t.stale_sets.size(), static_cast<long long>(t.stale_leases));
    for (size_t i = 0; i < t.stale_sets.size() && i < static_cast<size_t>(o.list); ++i) {
      const SetInfo& s = t.stale_sets[i];
      std::printf("  limiter %s, id %s: %lld stale of %lld\n", s.limiter.c_str(), s.id.c_str(),
                  static_cast<long long>(s.stale), static_cast<long long>(s.members));
    }
  }
  if (!t.top.empty()) {
    std::printf("\nlargest sets:\n");
    for (const SetInfo& s : t.top) {
      std::printf("  %8lld  %s (%s)\n", static_cast<long long>(s.members), s.key.c_str(),
                  s.algorithm.c_str());
    }
  }
}

void PrintMemoryPolicies(const MemoryPolicies& memory) {
  if (!memory.ok()) {
    std::printf("\nmemory policy unknown (%s)\n", memory.status().message().c_str());
    return;
  }
  for (const auto& m : *memory) {
    if (!m.can_evict) {
      std::printf("\n%s: maxmemory-policy noeviction (limits are never evicted)\n", m.node.c_str());
      continue;
    }
    std::printf(
        "\n%s: maxmemory-policy %s CAN EVICT sluice's keys (every one has an expiry): an "
        "evicted id starts over with its whole limit; %lld keys evicted since the server "
        "started (fix: a Redis of its own for limits, maxmemory-policy noeviction)\n",
        m.node.c_str(), m.policy.c_str(), static_cast<long long>(m.evicted_keys));
  }
}

void PrintAuditText(const AuditOptions& o, const AuditTally& t, double elapsed,
                    const MemoryPolicies& memory) {
  std::printf(
      "sluice audit of prefix \"%s\"%s%s: %lld keys scanned in %.2f s (%.0f keys/s), "
      "%lld of them sluice's\n",
      o.admin.prefix.c_str(), o.limiter.empty() ? "" : ", limiter ", o.limiter.c_str(),
      static_cast<long long>(t.scanned), elapsed, elapsed > 0 ? t.scanned / elapsed : 0.0,
      static_cast<long long>(t.sluice_keys));
  for (const auto& [algorithm, n] : t.by_algorithm) {
    std::printf("  %-15s %lld\n", algorithm.c_str(), static_cast<long long>(n));
  }
  PrintLeaks(t);
  PrintSets(o, t);
  PrintMemoryPolicies(memory);
  if (t.foreign > 0) {
    std::printf(
        "\n%lld FOREIGN key(s) under the prefix (not sluice's layout or type; never "
        "touched by repair — is the prefix shared or wrong?):\n",
        static_cast<long long>(t.foreign));
    for (const auto& f : t.foreign_examples) {
      std::printf("  %s (%s)\n", f["key"].get<std::string>().c_str(),
                  f["type"].get<std::string>().c_str());
    }
  }
}

int RunAudit(const AuditOptions& o) {
  auto admin = ConnectOrReport("audit", o.admin);
  if (!admin) return kExitError;
  auto dbsize = admin->DbSize();
  if (!dbsize.ok()) return ReportError("audit", dbsize.status());

  const auto start = std::chrono::steady_clock::now();
  AuditTally tally;
  if (Status status = ScanForAudit(*admin, o, *dbsize, tally); !status.ok()) {
    return ReportError("audit", status);
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  tally.Finish();
  const MemoryPolicies memory = admin->MemoryPolicies();
  const int exit_code = AuditExitCode(tally, memory);
  if (o.admin.json) {
    PrintAuditJson(o, tally, *dbsize, elapsed, memory, exit_code);
  } else {
    PrintAuditText(o, tally, elapsed, memory);
  }
  return exit_code;
}

}  // namespace

void AddAudit(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<AuditOptions>();
  CLI::App* cmd = app.add_subcommand(
      "audit",
      "Read-only check of the keys under a prefix: keys without an expiry, stale leases, the "
      "largest sets, foreign keys. SCAN-based (never KEYS), safe on a live server.\n"
      "Exit codes: 0 clean, 1 findings (keys without expiry, stale leases, a memory policy that "
      "can evict), 2 usage or "
      "connection error, or foreign keys under the prefix.");
  AddAdminFlags(cmd, o->admin);
  AddTargetFlags(cmd, o->target, /*with_id=*/false);  // only this limiter's keys
  cmd->add_option("--list", o->list, "Keys listed per group")
      ->capture_default_str()
      ->check(CLI::Range(0, 1'000'000));
  cmd->add_option("--largest", o->largest, "Largest sets shown")
      ->capture_default_str()
      ->check(CLI::Range(0, 10'000));
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([o, &exit_code] {
    if (AnyTarget(o->target)) {
      auto target = ResolveTarget(o->target, Need::kLimiter);
      if (!target.ok()) {
        exit_code = ReportError("audit", target.status());
        return;
      }
      o->limiter = target->limiter;
    }
    exit_code = RunAudit(*o);
  });
}

}  // namespace sluice::cli

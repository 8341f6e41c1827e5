// sluice repair: gives sluice keys that have no expiry one, with EXPIRE … NX. Dry run by
// default (prints what it would do); --apply does it and prints what it did. Never
// deletes a key, never touches a key that has an expiry (NX) or a foreign key; safe
// while traffic flows (a script that writes a key in between sets its own expiry, and
// NX then leaves it alone).
//
// Which TTL: --ttl when given. Otherwise the key's own value says when its state is
// over for fixed_window (window end), token_bucket (full again), gcra (TAT) and
// concurrency sets (the last lease's expiry): the key gets exactly that (at least 1 s).
// sliding_window and sliding_log values do not hold their window's length, so they get
// kDefaultTtl (24 h). A TTL longer than the window never changes a decision: those
// scripts prune entries and windows by the times stored in the value, not by the key's
// expiry; it only keeps the bytes for longer. A shorter one could forget a live window
// and admit more than the limit. Pass --ttl for windows longer than 24 h. The operators'
// audit stream (`<prefix>:audit`) gets at least 30 days, the default retention.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "admin_common.h"
#include "commands.h"

namespace sluice::cli {
namespace {

constexpr std::chrono::seconds kDefaultTtl{24 * 3600};
constexpr std::chrono::seconds kAuditStreamTtl{30 * 24 * 3600};

struct RepairOptions {
  AdminFlags admin;
  std::string limiter;
  bool apply = false;
  bool dry_run = false;
  int64_t ttl_s = 0;  // 0: from the value, else kDefaultTtl
  int list = 20;
};

struct Planned {
  std::string key;
  std::chrono::seconds ttl{0};
  std::string why;  // "window end", "--ttl", "default" …
};

int RunRepair(const RepairOptions& o) {
  auto admin = ConnectOrReport("repair", o.admin);
  if (!admin) return kExitError;
  const auto start = std::chrono::steady_clock::now();
  std::vector<Planned> plan;
  std::unordered_set<std::string> seen;
  int64_t foreign = 0, scanned = 0;
  Status status = admin->Scan(
      {.limiter = o.limiter, .read_leaked_values = o.ttl_s == 0}, [&](const ScanBatch& batch) {
        scanned += static_cast<int64_t>(batch.keys.size());
        for (const ScannedKey& k : batch.keys) {
          if (k.foreign()) {
            if (seen.insert(k.key).second) ++foreign;
            continue;
          }
          if (!k.name || k.ttl_ms != -1 || !seen.insert(k.key).second) continue;
          if (k.name->suffix == "audit") {
            // The operators' audit stream keeps AuditOptions::stream_retention (30 days
            // by default) after its last record; never less here, whatever --ttl says.
            plan.push_back({k.key, std::max(kAuditStreamTtl, std::chrono::seconds(o.ttl_s)),
                            "audit stream retention"});
          } else if (o.ttl_s > 0) {
            plan.push_back({k.key, std::chrono::seconds(o.ttl_s), "--ttl"});
          } else if (k.ends_at_ms >= 0) {
            const int64_t left_ms = k.ends_at_ms - batch.now_ms;
            plan.push_back({k.key, std::chrono::seconds(std::max<int64_t>(1, (left_ms + 999) / 1000)),
                            left_ms > 0 ? "when its state is over" : "state already over"});
          } else {
            plan.push_back({k.key, kDefaultTtl, "default (the value holds no window length)"});
          }
        }
        return true;
      });
  if (!status.ok()) return ReportError("repair", status);

  const double scan_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ExpireResult done;
  if (o.apply && !plan.empty()) {
    std::vector<std::pair<std::string, std::chrono::seconds>> batch;
    batch.reserve(plan.size());
    for (const Planned& p : plan) batch.emplace_back(p.key, p.ttl);
    auto result = admin->ExpireIfNone(batch);
    if (!result.ok()) return ReportError("repair", result.status());
    done = *result;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int exit_code = kExitOk;
  if (foreign > 0) {
    exit_code = kExitError;
  } else if (!o.apply && !plan.empty()) {
    exit_code = kExitFindings;
  }

  if (o.admin.json) {
    nlohmann::json doc;
    doc["prefix"] = o.admin.prefix;
    doc["mode"] = o.apply ? "apply" : "dry_run";
    doc["keys_scanned"] = scanned;
    doc["without_expiry"] = static_cast<int64_t>(plan.size());
    nlohmann::json keys = nlohmann::json::array();
    for (size_t i = 0; i < plan.size() && i < static_cast<size_t>(o.list); ++i) {
      keys.push_back({{"key", plan[i].key}, {"ttl_s", plan[i].ttl.count()}, {"why", plan[i].why}});
    }
    doc["keys"] = keys;
    if (o.apply) {
      doc["expiry_set"] = done.set;
      doc["had_expiry"] = done.had_ttl;
      doc["vanished"] = done.missing;
    }
    doc["foreign_untouched"] = foreign;
    doc["scan_s"] = scan_s;
    doc["elapsed_s"] = elapsed;
    doc["peak_rss_kb"] = PeakRssKb();
    doc["exit_code"] = exit_code;
    PrintJson(doc);
    return exit_code;
  }
  std::printf("sluice repair (%s) of prefix \"%s\": %lld keys scanned, %zu sluice key(s) without "
              "an expiry\n",
              o.apply ? "APPLY" : "dry run", o.admin.prefix.c_str(),
              static_cast<long long>(scanned), plan.size());
  for (size_t i = 0; i < plan.size() && i < static_cast<size_t>(o.list); ++i) {
    std::printf("  %s %s  EXPIRE %lld NX  (%s)\n", o.apply ? "did" : "would", plan[i].key.c_str(),
                static_cast<long long>(plan[i].ttl.count()), plan[i].why.c_str());
  }
  if (plan.size() > static_cast<size_t>(o.list)) {
    std::printf("  … and %zu more\n", plan.size() - static_cast<size_t>(o.list));
  }
  if (o.apply) {
    std::printf("expiry set on %lld key(s); %lld had one by then (left alone); %lld vanished; "
                "%.2f s\n",
                static_cast<long long>(done.set), static_cast<long long>(done.had_ttl),
                static_cast<long long>(done.missing), elapsed);
  } else if (!plan.empty()) {
    std::printf("nothing changed (dry run); run again with --apply to set these expiries\n");
  }
  if (foreign > 0) {
    std::printf("%lld FOREIGN key(s) under the prefix were not touched (not sluice's layout or "
                "type; see sluice audit)\n",
                static_cast<long long>(foreign));
  }
  return exit_code;
}

}  // namespace

void AddRepair(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RepairOptions>();
  CLI::App* cmd = app.add_subcommand(
      "repair",
      "Give sluice keys without an expiry one (EXPIRE ... NX). Dry run unless --apply. Never "
      "deletes, never touches keys that have an expiry or foreign keys.\n"
      "TTL: --ttl if given; else when the key's state is over by its own value (fixed_window, "
      "token_bucket, gcra, concurrency), else 24 h (sliding_window, sliding_log: their values "
      "hold no window length; a longer TTL never changes a decision).\n"
      "Exit codes: 0 nothing to do or done, 1 dry run found keys to repair, 2 usage or "
      "connection error, or foreign keys under the prefix (left untouched).");
  AddAdminFlags(cmd, o->admin);
  cmd->add_option("--limiter", o->limiter, "Only this limiter's keys");
  auto* apply = cmd->add_flag("--apply", o->apply, "Set the expiries");
  cmd->add_flag("--dry-run", o->dry_run, "Only print what would be done (the default)")->excludes(apply);
  cmd->add_option("--ttl", o->ttl_s, "Expiry in seconds for every repaired key (instead of the per-key choice)")
      ->check(CLI::Range(int64_t{1}, int64_t{366} * 24 * 3600));
  cmd->add_option("--list", o->list, "Keys listed")->capture_default_str()->check(CLI::Range(0, 10'000'000));
  cmd->callback([o, &exit_code] { exit_code = RunRepair(*o); });
}

}  // namespace sluice::cli

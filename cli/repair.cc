// sluice repair: gives sluice keys that have no expiry one. Dry run by default (prints
// what it would do); --apply does it and prints what it did. Never deletes a key, never
// touches a key that has an expiry or a foreign key: the script that sets an expiry
// checks, in the same step, that the key still holds sluice's type and still has no
// expiry (Admin::ExpireIfNone). Safe while traffic flows (a script that writes a key in
// between sets its own expiry, and the check then leaves it alone). With --apply the
// expiries are set as the scan goes (10,000 keys at a time, each script call with its
// own --timeout), so memory stays bounded whatever the number of leaked keys.
//
// Which TTL: --ttl when given. Otherwise one at least as long as the key's state can
// last, from its own value: fixed_window's earlier `fw` keys (window end), token_bucket
// (full again), gcra (TAT) and concurrency sets (the last lease's expiry) get exactly
// that; a `fw2` key (fixed_window's count, whose window end was the expiry it lost) gets
// the longest window, 366 days, which its next call shortens to its own; sliding_window
// gets window start + 2 windows (it counts the current and the previous window), with the
// window its value records (2 x 366 days, the longest window a Limit accepts, for a value
// of the earlier form that records none); sliding_log entries hold no window, so a log
// gets its newest entry + 366 days. A TTL at least as long as the state
// never changes a decision (every script prunes by the times stored in the value, not by
// the key's expiry; a longer TTL only keeps the bytes longer); a shorter one forgets
// counted units and admits more than the limit, so pass a shorter --ttl only knowing the
// windows in use. Derived TTLs are capped like --ttl at 366 days (2 x 366 days for
// sliding_window): a value saying more is corrupted, or a token_bucket/gcra whose
// capacity takes over a year to refill (then the key expires, and the bucket is full
// again, after 366 days). A value that does not decode gets kDefaultTtl (the next call
// deletes it anyway). The operators' audit stream (`<prefix>:audit`) gets at least 30
// days, the default retention.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "admin_common.h"
#include "commands.h"
#include "sluice/limits.h"
#include "target.h"

namespace sluice::cli {
namespace {

constexpr std::chrono::seconds kDefaultTtl{24 * 3600};
constexpr std::chrono::seconds kAuditStreamTtl{30 * 24 * 3600};
constexpr int64_t kMaxTtlS = kMaxWindow.count() / 1000;  // --ttl's bound: 366 days
constexpr size_t kApplyEvery = 10'000;                   // keys per ExpireIfNone

struct RepairOptions {
  AdminFlags admin;
  std::string limiter;  // from the target flags
  TargetFlags target;
  bool apply = false;
  bool dry_run = false;
  int64_t ttl_s = 0;  // 0: from the value
  int list = 20;
};

struct Planned {
  std::string key;
  std::chrono::seconds ttl{0};
  std::string why;  // "window end", "--ttl", "default" …
};

// The TTL a leaked key gets, and why.
Planned Plan(const ScannedKey& k, int64_t now_ms, int64_t ttl_s) {
  const std::string& suffix = k.name->suffix;
  if (suffix == "audit") {
    // The operators' audit stream keeps AuditOptions::stream_retention (30 days by
    // default) after its last record; never less here, whatever --ttl says.
    return {k.key, std::max(kAuditStreamTtl, std::chrono::seconds(ttl_s)),
            "audit stream retention"};
  }
  if (ttl_s > 0) return {k.key, std::chrono::seconds(ttl_s), "--ttl"};
  if (suffix == "ovr") {
    // Never shorter than the longest lifetime an override may have.
    return {k.key, std::max(std::chrono::seconds(30 * 24 * 3600), std::chrono::seconds(ttl_s)),
            "runtime overrides' longest lifetime (their next set, clear or read sets the "
            "expiry of the longest)"};
  }
  if (suffix == "qs") {
    return {k.key, kDefaultTtl,
            "default (a quota shares bucket: its next call sets the expiry of its latest "
            "grant)"};
  }
  if (k.ends_at_ms < 0) {
    return {k.key, kDefaultTtl, "default (the value does not decode; the next call deletes it)"};
  }
  const int64_t cap_s = suffix == "sw" ? 2 * kMaxTtlS : kMaxTtlS;
  // In ms, with the overflow of a corrupted value in mind.
  const int64_t left_ms =
      k.ends_at_ms > now_ms + cap_s * 1000 ? cap_s * 1000 + 1 : k.ends_at_ms - now_ms;
  if (left_ms > cap_s * 1000) {
    return {k.key, std::chrono::seconds(cap_s),
            "capped: the value says its state lasts longer than any window (corrupted, or a "
            "bucket that takes over a year to refill)"};
  }
  const std::chrono::seconds ttl(std::max<int64_t>(1, (left_ms + 999) / 1000));
  if (left_ms <= 0) return {k.key, ttl, "state already over"};
  if (k.ends_at_is_bound) {
    if (suffix == "fw2") {
      return {k.key, ttl,
              "the longest window (366 days): the window end was the key's expiry; the next "
              "call shortens it to the end of a window opened then"};
    }
    return {k.key, ttl,
            suffix == "sw" ? "the longest its state can last: window start + 2 windows (the "
                             "value's window, or 366 days for a value that records none)"
                           : "the longest its state can last: newest entry + 366 days (the log "
                             "holds no window length)"};
  }
  return {k.key, ttl, "when its state is over"};
}

// One repair: what the scan planned, and with --apply the expiries set as it goes.
struct RepairRun {
  const RepairOptions& o;
  Admin& admin;
  std::vector<Planned> listed;  // the first --list planned keys
  std::map<std::string, int64_t> by_why;
  std::vector<std::pair<std::string, std::chrono::seconds>> pending;  // --apply: not yet sent
  int64_t planned = 0, foreign = 0, scanned = 0;
  ExpireResult done;
  Status apply_status;

  // Plans every key of the batch without an expiry; false when setting the pending
  // expiries failed (apply_status says why).
  bool AddBatch(const ScanBatch& batch);
  // Sets the pending expiries; false when that failed (apply_status says why).
  bool ApplyPending();
  // Scans and, with --apply, sets every expiry planned. The first failure.
  Status ScanAndApply();
  int ExitCode() const;
};

bool RepairRun::AddBatch(const ScanBatch& batch) {
  scanned += static_cast<int64_t>(batch.keys.size());
  for (const ScannedKey& k : batch.keys) {
    if (k.foreign()) {
      ++foreign;
      continue;
    }
    if (!k.name || k.ttl_ms != -1) continue;
    Planned p = Plan(k, batch.now_ms, o.ttl_s);
    ++planned;
    ++by_why[p.why];
    if (o.apply) pending.emplace_back(p.key, p.ttl);
    if (listed.size() < static_cast<size_t>(o.list)) listed.push_back(std::move(p));
  }
  return pending.size() < kApplyEvery || ApplyPending();
}

bool RepairRun::ApplyPending() {
  if (pending.empty()) return true;
  auto result = admin.ExpireIfNone(pending);
  pending.clear();
  if (!result.ok()) {
    apply_status = result.status();
    return false;
  }
  done.set += result->set;
  done.had_ttl += result->had_ttl;
  done.missing += result->missing;
  done.foreign += result->foreign;
  return true;
}

Status RepairRun::ScanAndApply() {
  Status status =
      admin.Scan({.limiter = o.limiter, .read_leaked_values = o.ttl_s == 0, .distinct = true},
                 [this](const ScanBatch& batch) { return AddBatch(batch); });
  if (status.ok() && apply_status.ok()) ApplyPending();
  return status.ok() ? apply_status : status;
}

int RepairRun::ExitCode() const {
  if (foreign > 0 || done.foreign > 0) return kExitError;
  if (!o.apply && planned > 0) return kExitFindings;
  return kExitOk;
}

void PrintRepairJson(const RepairRun& run, double elapsed, int exit_code) {
  const RepairOptions& o = run.o;
  nlohmann::json doc;
  doc["prefix"] = o.admin.prefix;
  doc["mode"] = o.apply ? "apply" : "dry_run";
  doc["keys_scanned"] = run.scanned;
  doc["without_expiry"] = run.planned;
  nlohmann::json keys = nlohmann::json::array();
  for (const Planned& p : run.listed) {
    keys.push_back({{"key", p.key}, {"ttl_s", p.ttl.count()}, {"why", p.why}});
  }
  doc["keys"] = keys;
  doc["by_why"] = run.by_why;
  if (o.apply) {
    doc["expiry_set"] = run.done.set;
    doc["had_expiry"] = run.done.had_ttl;
    doc["vanished"] = run.done.missing;
    doc["replaced_by_foreign"] = run.done.foreign;
  }
  doc["foreign_untouched"] = run.foreign;
  doc["elapsed_s"] = elapsed;
  doc["peak_rss_kb"] = PeakRssKb();
  doc["exit_code"] = exit_code;
  PrintJson(doc);
}

void PrintRepairText(const RepairRun& run, double elapsed) {
  const RepairOptions& o = run.o;
  std::printf(
      "sluice repair (%s) of prefix \"%s\": %lld keys scanned, %lld sluice key(s) without "
      "an expiry\n",
      o.apply ? "APPLY" : "dry run", o.admin.prefix.c_str(), static_cast<long long>(run.scanned),
      static_cast<long long>(run.planned));
  for (const Planned& p : run.listed) {
    std::printf("  %s %s  EXPIRE %lld  (%s)\n", o.apply ? "did" : "would", p.key.c_str(),
                static_cast<long long>(p.ttl.count()), p.why.c_str());
  }
  if (run.planned > static_cast<int64_t>(run.listed.size())) {
    std::printf("  … and %lld more\n",
                static_cast<long long>(run.planned - static_cast<int64_t>(run.listed.size())));
  }
  if (o.apply) {
    std::printf(
        "expiry set on %lld key(s); %lld had one by then (left alone); %lld vanished; "
        "%lld held another type by then (left alone); %.2f s\n",
        static_cast<long long>(run.done.set), static_cast<long long>(run.done.had_ttl),
        static_cast<long long>(run.done.missing), static_cast<long long>(run.done.foreign),
        elapsed);
  } else if (run.planned > 0) {
    std::printf("nothing changed (dry run); run again with --apply to set these expiries\n");
  }
  if (run.foreign > 0) {
    std::printf(
        "%lld FOREIGN key(s) under the prefix were not touched (not sluice's layout or "
        "type; see sluice audit)\n",
        static_cast<long long>(run.foreign));
  }
}

int RunRepair(const RepairOptions& o) {
  auto admin = ConnectOrReport("repair", o.admin);
  if (!admin) return kExitError;
  const auto start = std::chrono::steady_clock::now();
  RepairRun run{o, *admin};
  if (Status failed = run.ScanAndApply(); !failed.ok()) {
    if (o.apply) {
      std::fprintf(stderr, "sluice repair: stopped after setting %lld expir%s\n",
                   static_cast<long long>(run.done.set), run.done.set == 1 ? "y" : "ies");
    }
    return ReportError("repair", failed);
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int exit_code = run.ExitCode();
  if (o.admin.json) {
    PrintRepairJson(run, elapsed, exit_code);
  } else {
    PrintRepairText(run, elapsed);
  }
  return exit_code;
}

}  // namespace

void AddRepair(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RepairOptions>();
  CLI::App* cmd = app.add_subcommand(
      "repair",
      "Give sluice keys without an expiry one. Dry run unless --apply. Never deletes, never "
      "touches keys that have an expiry or foreign keys (type and expiry are checked in the "
      "script that sets it).\n"
      "TTL: --ttl if given; else at least as long as the key's state can last, from its "
      "value: when it is over (fixed_window's earlier fw keys, token_bucket, gcra, "
      "concurrency), or the longest it can last (fixed_window fw2: 366 days, which its next "
      "call shortens to its window; sliding_window: window start + 2 windows, 732 days for a value "
      "that records "
      "no window; sliding_log: newest entry + 366 days, a log holds no window length); capped at "
      "366 days (732 for sliding_window). A TTL at least as long as the state never changes "
      "a decision; a shorter --ttl can forget counted units and admit more than the limit.\n"
      "Exit codes: 0 nothing to do or done, 1 dry run found keys to repair, 2 usage or "
      "connection error, or foreign keys under the prefix (left untouched).");
  AddAdminFlags(cmd, o->admin);
  AddTargetFlags(cmd, o->target, /*with_id=*/false);  // only this limiter's keys
  auto* apply = cmd->add_flag("--apply", o->apply, "Set the expiries");
  cmd->add_flag("--dry-run", o->dry_run, "Only print what would be done (the default)")
      ->excludes(apply);
  cmd->add_option("--ttl", o->ttl_s,
                  "Expiry in seconds for every repaired key (instead of the per-key choice); "
                  "at most 366 days")
      ->check(CLI::Range(int64_t{1}, kMaxTtlS));
  cmd->add_option("--list", o->list, "Keys listed")
      ->capture_default_str()
      ->check(CLI::Range(0, 10'000'000));
  cmd->callback([o, &exit_code] {
    if (AnyTarget(o->target)) {
      auto target = ResolveTarget(o->target, Need::kLimiter);
      if (!target.ok()) {
        exit_code = ReportError("repair", target.status());
        return;
      }
      o->limiter = target->limiter;
    }
    exit_code = RunRepair(*o);
  });
}

}  // namespace sluice::cli

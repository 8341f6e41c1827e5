// sluice inspect: the state of one id under one limiter — every algorithm key it has,
// decoded (counters, window ends, tokens, TAT), its TTL, and its concurrency leases with
// their expiry times. Read-only.
#include <cstdio>
#include <memory>
#include <string>

#include "admin_common.h"
#include "commands.h"
#include "target.h"

namespace sluice::cli {
namespace {

struct InspectOptions {
  AdminFlags admin;
  TargetFlags target;
};

bool EndsWith(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

int RunInspect(const InspectOptions& o) {
  auto target = ResolveTarget(o.target, Need::kLimiterAndId);
  if (!target.ok()) return ReportError("inspect", target.status());
  auto admin = ConnectOrReport("inspect", o.admin);
  if (!admin) return kExitError;
  auto state = admin->Inspect(target->limiter, target->id);
  if (!state.ok()) return ReportError("inspect", state.status());
  // No key: the JSON document (empty `keys`) or the header line, then why on stderr, exit 1.
  const bool none = state->keys.empty();
  const int64_t now = state->now_ms;

  if (o.admin.json) {
    nlohmann::json doc;
    doc["limiter"] = state->limiter;
    doc["id"] = state->id;
    doc["encoded_id"] = state->encoded_id;
    doc["now_ms"] = now;
    nlohmann::json keys = nlohmann::json::array();
    for (const KeyState& k : state->keys) {
      nlohmann::json j;
      j["key"] = k.key;
      j["algorithm"] = k.name ? SuffixAlgorithm(k.name->suffix) : "";
      j["type"] = KeyTypeName(k.type);
      j["ttl_ms"] = k.ttl_ms;
      if (!k.problem.empty()) j["problem"] = k.problem;
      for (const StateField& f : k.fields) j["state"][f.name] = f.value;
      if (k.used >= 0) j["used"] = {{"value", k.used}, {"unit", k.used_unit}};
      if (k.name && k.name->suffix == "cc") {
        nlohmann::json leases = nlohmann::json::array();
        for (const LeaseInfo& l : k.leases) {
          leases.push_back({{"lease", l.id},
                            {"acquired_at_ms", l.acquired_at_ms},
                            {"expires_at_ms", l.expires_at_ms},
                            {"expires_in_ms", l.expires_at_ms - now},
                            {"live", l.expires_at_ms > now}});
        }
        j["leases"] = leases;
      }
      keys.push_back(std::move(j));
    }
    doc["keys"] = keys;
    PrintJson(doc);
    return none ? ReportNoKeys("inspect", *admin, *target) : kExitOk;
  }

  std::printf("limiter %s, id \"%s\" (in keys: %s); Redis clock %s\n", state->limiter.c_str(),
              state->id.c_str(), state->encoded_id.c_str(), FormatUtcMs(now).c_str());
  if (none) return ReportNoKeys("inspect", *admin, *target);
  for (const KeyState& k : state->keys) {
    std::printf("\n%s  %s  (%s, ttl %s)\n",
                k.name ? std::string(SuffixAlgorithm(k.name->suffix)).c_str() : "not sluice's",
                k.key.c_str(), std::string(KeyTypeName(k.type)).c_str(),
                FormatTtl(k.ttl_ms).c_str());
    if (!k.problem.empty()) std::printf("  NOT SLUICE'S VALUE: %s\n", k.problem.c_str());
    for (const StateField& f : k.fields) {
      if (EndsWith(f.name, "_in_ms")) {
        std::printf("  %-28s %s\n", f.name.c_str(), FormatDurationMs(f.value).c_str());
      } else if (EndsWith(f.name, "_ms")) {
        std::printf("  %-28s %lld  %s (%s)\n", f.name.c_str(), static_cast<long long>(f.value),
                    FormatUtcMs(f.value).c_str(), FormatDurationMs(f.value - now).c_str());
      } else {
        std::printf("  %-28s %lld\n", f.name.c_str(), static_cast<long long>(f.value));
      }
    }
    if (k.ttl_ms == -1) std::printf("  NO EXPIRY: a leak (sluice audit / sluice repair)\n");
    if (!k.leases.empty()) {
      std::printf("  %-34s %-26s %-26s %s\n", "lease", "acquired", "expires", "");
      for (const LeaseInfo& l : k.leases) {
        const bool live = l.expires_at_ms > now;
        std::printf("  %-34s %-26s %-26s %s %s\n", l.id.c_str(),
                    l.acquired_at_ms >= 0 ? FormatUtcMs(l.acquired_at_ms).c_str() : "?",
                    FormatUtcMs(l.expires_at_ms).c_str(), live ? "live, in" : "STALE, expired",
                    FormatDurationMs(live ? l.expires_at_ms - now : now - l.expires_at_ms).c_str());
      }
      if (k.members > static_cast<int64_t>(k.leases.size())) {
        std::printf("  … and %lld more\n", static_cast<long long>(k.members - k.leases.size()));
      }
    }
  }
  return kExitOk;
}

}  // namespace

void AddInspect(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "The state of one id: each algorithm's counters or tokens, TTL, live and stale leases "
      "with their expiry times. Read-only.\n"
      "Name the id by --limiter and --id, or as sluiced forms them: --domain D --entry "
      "key=value [--entry ...] (docs/sluiced.md, Limiter names and ids).\n"
      "Exit codes: 0 shown, 1 the id has no key (never seen, or its state expired: its budget "
      "is full) or the limiter none at all under the prefix (stderr says which), 2 usage or "
      "connection error.");
  AddAdminFlags(cmd, o->admin);
  AddTargetFlags(cmd, o->target, /*with_id=*/true);
  cmd->callback([o, &exit_code] { exit_code = RunInspect(*o); });
}

}  // namespace sluice::cli

// sluice override set|list|clear: an operator's runtime override of one id's limit, through
// the library's audited calls (sluice/admin.h: SetOverride, ClearOverride, ListOverrides).
// Every sluiced and library client of the same Redis applies a set or clear within 1 s plus
// one round trip. Each set and clear appends one record to the audit log (and the
// `<prefix>:audit` stream unless --no-stream), as `sluice reset` does.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "admin_common.h"
#include "commands.h"
#include "service/override_json.h"
#include "sluice/sluice.h"
#include "target.h"

namespace sluice::cli {
namespace {

struct OverrideOptions {
  AdminFlags admin;
  TargetFlags target;
  std::string actor, reason;
  int64_t limit = -1;
  int64_t window_ms = 0;
  std::string ttl;  // "90s", "30m", "24h", "7d"
  std::string audit_log;
  bool no_stream = false;
};

std::string DefaultAuditLog() {
  const char* env = std::getenv("SLUICE_AUDIT_LOG");
  return env && *env ? env : "sluice-audit.jsonl";
}

// "90s", "30m", "24h", "7d" (or a bare number of seconds); InvalidArgument otherwise.
StatusOr<std::chrono::seconds> ParseTtl(const std::string& text) {
  std::size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const long long scale = unit.empty() || unit == "s" ? 1
                          : unit == "m"               ? 60
                          : unit == "h"               ? 3600
                          : unit == "d"               ? 86400
                                                      : 0;
  if (used == 0 || scale == 0 || n < 1 || n > kMaxOverrideTtl.count() / scale) {
    return InvalidArgumentError("--ttl takes a duration from 1s to 30d (90s, 30m, 24h, 7d), got '" +
                                text + "'");
  }
  return std::chrono::seconds(n * scale);
}

std::shared_ptr<Client> ClientOrReport(const char* command, const OverrideOptions& o) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.admin.timeout_s * 1000));
  // This process makes no check: it needs no copy of the overrides.
  auto client = Client::Create({.url = o.admin.url,
                                .prefix = o.admin.prefix,
                                .deadline = timeout,
                                .runtime_overrides = false});
  if (!client.ok()) {
    ReportError(command, client.status());
    return nullptr;
  }
  return *std::move(client);
}

void PrintOverride(const RuntimeOverride& o) {
  std::printf("%s  id \"%s\": limit %lld per %s, until %s (set %s by %s: %s)\n", o.limiter.c_str(),
              o.id.c_str(), static_cast<long long>(o.limit),
              o.window.count() == 0 ? "the limiter's own window"
                                    : (std::to_string(o.window.count()) + " ms").c_str(),
              FormatUtcMs(o.expires_at_ms).c_str(), FormatUtcMs(o.set_at_ms).c_str(),
              o.actor.c_str(), o.reason.c_str());
}

// Prints what a set or clear did; the exit code.
int Report(const char* command, const OverrideOptions& o, const StatusOr<OverrideResult>& r) {
  if (!r.ok()) return ReportError(command, r.status());
  if (o.admin.json) {
    nlohmann::json j = {{"changed", r->changed},
                        {"record", nlohmann::json::parse(r->record, nullptr, false)}};
    if (r->after) j["override"] = sluiced::RuntimeOverrideJson(*r->after);
    if (r->before) j["before"] = sluiced::RuntimeOverrideJson(*r->before);
    if (!r->stream_error.empty()) j["stream_error"] = r->stream_error;
    PrintJson(j);
    return kExitOk;
  }
  if (r->after) {
    std::printf("set: ");
    PrintOverride(*r->after);
  } else if (r->changed) {
    std::printf("cleared the runtime override of id \"%s\"\n", r->before->id.c_str());
  } else {
    std::printf("the id had no runtime override in force: nothing cleared\n");
  }
  if (r->before && r->after) {
    std::printf("replaced: ");
    PrintOverride(*r->before);
  }
  std::printf("audit record (%s%s): %s\n", o.audit_log.c_str(),
              o.no_stream ? "" : (" and " + o.admin.prefix + ":audit").c_str(), r->record.c_str());
  if (!r->stream_error.empty()) {
    std::printf("the audit stream did not get the record: %s (the file has it)\n",
                r->stream_error.c_str());
  }
  return kExitOk;
}

int RunSet(const OverrideOptions& o) {
  auto target = ResolveTarget(o.target, Need::kLimiterAndId);
  if (!target.ok()) return ReportError("override set", target.status());
  auto ttl = ParseTtl(o.ttl);
  if (!ttl.ok()) return ReportError("override set", ttl.status());
  auto client = ClientOrReport("override set", o);
  if (!client) return kExitError;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.admin.timeout_s * 1000));
  return Report(
      "override set", o,
      SetOverride(*client, target->limiter, target->id,
                  {.limit = o.limit, .window = std::chrono::milliseconds(o.window_ms), .ttl = *ttl},
                  {.actor = o.actor, .reason = o.reason},
                  {.log_path = o.audit_log, .stream = !o.no_stream}, timeout));
}

int RunClear(const OverrideOptions& o) {
  auto target = ResolveTarget(o.target, Need::kLimiterAndId);
  if (!target.ok()) return ReportError("override clear", target.status());
  auto client = ClientOrReport("override clear", o);
  if (!client) return kExitError;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.admin.timeout_s * 1000));
  return Report(
      "override clear", o,
      ClearOverride(*client, target->limiter, target->id, {.actor = o.actor, .reason = o.reason},
                    {.log_path = o.audit_log, .stream = !o.no_stream}, timeout));
}

// The limiters to list: --limiter (or --domain/--entry), else every limiter that has an
// override hash under the prefix (one SCAN of `<prefix>:{overrides}:*`).
StatusOr<std::vector<std::string>> LimitersToList(const OverrideOptions& o) {
  if (AnyTarget(o.target)) {
    auto target = ResolveTarget(o.target, Need::kLimiter);
    if (!target.ok()) return target.status();
    return std::vector<std::string>{target->limiter};
  }
  auto admin = Admin::Connect({.url = o.admin.url,
                               .prefix = o.admin.prefix,
                               .command_timeout = std::chrono::milliseconds(
                                   static_cast<int64_t>(o.admin.timeout_s * 1000))});
  if (!admin.ok()) return admin.status();
  std::vector<std::string> names;
  Status scanned = (*admin)->Scan({}, [&](const ScanBatch& batch) {
    for (const ScannedKey& k : batch.keys) {
      if (k.name && k.name->suffix == "ovr") names.push_back(k.name->limiter);
    }
    return true;
  });
  if (!scanned.ok()) return scanned;
  return names;
}

int RunList(const OverrideOptions& o) {
  auto names = LimitersToList(o);
  if (!names.ok()) return ReportError("override list", names.status());
  auto client = ClientOrReport("override list", o);
  if (!client) return kExitError;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.admin.timeout_s * 1000));
  auto listed = ListOverrides(*client, *names, timeout);
  if (!listed.ok()) return ReportError("override list", listed.status());
  if (o.admin.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const RuntimeOverride& r : *listed) list.push_back(sluiced::RuntimeOverrideJson(r));
    PrintJson({{"overrides", list}});
    return kExitOk;
  }
  for (const RuntimeOverride& r : *listed) PrintOverride(r);
  std::printf("%zu runtime override(s) in force\n", listed->size());
  return kExitOk;
}

void AddAuditedFlags(CLI::App* cmd, OverrideOptions& o) {
  AddAdminFlags(cmd, o.admin);
  AddTargetFlags(cmd, o.target, /*with_id=*/true);
  cmd->add_option("--actor", o.actor, "Who does this (recorded)")->required();
  cmd->add_option("--reason", o.reason, "Why (recorded)")->required();
  cmd->add_option("--audit-log", o.audit_log,
                  "JSON-lines file the record is appended to (default: $SLUICE_AUDIT_LOG, else "
                  "./sluice-audit.jsonl)");
  cmd->add_flag("--no-stream", o.no_stream, "Do not also append the record to <prefix>:audit");
}

}  // namespace

void AddOverride(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "override",
      "Runtime overrides of one id's limit (\"tenant acme: 500/min for 24 h\"), without a "
      "config deploy: every sluiced and library client of the same Redis applies one within "
      "1 s plus one round trip. At most 1,000 per limiter, each for at most 30 days. Exit "
      "codes: 0 done, 2 usage or connection error, a refusal (1,000 in force already, a "
      "bad --ttl), or an audit log that cannot be written (then nothing is done).");
  cmd->require_subcommand(1);

  auto set = std::make_shared<OverrideOptions>();
  set->audit_log = DefaultAuditLog();
  CLI::App* s = cmd->add_subcommand(
      "set", "Set (or replace) an id's runtime override, as one audited action");
  AddAuditedFlags(s, *set);
  s->add_option("--limit", set->limit,
                "The id's limit while it lasts (0 refuses every request of the id)")
      ->required()
      ->check(CLI::Range(int64_t{0}, kMaxLimit));
  s->add_option("--window-ms", set->window_ms,
                "Its window (refill period); default: the limiter's own")
      ->check(CLI::Range(int64_t{1}, kMaxWindow.count()));
  s->add_option("--ttl", set->ttl, "How long it lasts: 90s, 30m, 24h, 7d (at most 30d)")
      ->required();
  s->callback([set, &exit_code] { exit_code = RunSet(*set); });

  auto clear = std::make_shared<OverrideOptions>();
  clear->audit_log = DefaultAuditLog();
  CLI::App* c = cmd->add_subcommand("clear", "End an id's runtime override now, audited");
  AddAuditedFlags(c, *clear);
  c->callback([clear, &exit_code] { exit_code = RunClear(*clear); });

  auto list = std::make_shared<OverrideOptions>();
  CLI::App* l = cmd->add_subcommand(
      "list", "The runtime overrides in force: of one limiter, or of every limiter that has one");
  AddAdminFlags(l, list->admin);
  AddTargetFlags(l, list->target, /*with_id=*/false);
  l->callback([list, &exit_code] { exit_code = RunList(*list); });
}

}  // namespace sluice::cli

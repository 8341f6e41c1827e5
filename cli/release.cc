// sluice release: releases every lease of one id through the library's audited admin
// call (ConcurrencyLimiter::ReleaseAll): one atomic step in Redis, one audit record
// (who, why, when, which id, how many) appended to a JSON-lines file before anything is
// reported, and to the `<prefix>:audit` stream unless --no-stream. Refuses without
// --actor and --reason. Holders of the released leases learn it at their next heartbeat.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "admin_common.h"
#include "commands.h"
#include "sluice/sluice.h"
#include "target.h"

namespace sluice::cli {
namespace {

struct ReleaseOptions {
  AdminFlags admin;
  TargetFlags target;
  std::string actor, reason;
  std::string audit_log;
  bool no_stream = false;
};

std::string DefaultAuditLog() {
  const char* env = std::getenv("SLUICE_AUDIT_LOG");
  return env && *env ? env : "sluice-audit.jsonl";
}

int RunRelease(const ReleaseOptions& o) {
  auto target = ResolveTarget(o.target, Need::kLimiterAndId);
  if (!target.ok()) return ReportError("release", target.status());
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.admin.timeout_s * 1000));
  // An id with no key at all under the limiter (a wrong name, prefix or id) is an error,
  // before anything is recorded; one with keys but no live lease is released (0) and
  // recorded like any other.
  auto admin = ConnectOrReport("release", o.admin);
  if (!admin) return kExitError;
  auto state = admin->Inspect(target->limiter, target->id);
  if (!state.ok()) return ReportError("release", state.status());
  if (state->keys.empty()) return ReportNoKeys("release", *admin, *target);
  auto client = Client::Create({.url = o.admin.url, .prefix = o.admin.prefix, .deadline = timeout});
  if (!client.ok()) return ReportError("release", client.status());
  // The limit plays no part in a release; the limiter only names the key.
  auto limiter = (*client)->MakeConcurrencyLimiter(target->limiter, {.limit = 1});
  if (!limiter.ok()) return ReportError("release", limiter.status());
  AuditOptions audit{.log_path = o.audit_log, .stream = !o.no_stream};
  auto result =
      ReleaseAll(*limiter, target->id, {.actor = o.actor, .reason = o.reason}, audit, timeout);
  if (!result.ok()) return ReportError("release", result.status());
  if (o.admin.json) {
    nlohmann::json doc;
    doc["limiter"] = target->limiter;
    doc["id"] = target->id;
    doc["released"] = result->released;
    doc["record"] = nlohmann::json::parse(result->record, nullptr, false);
    doc["audit_log"] = o.audit_log;
    doc["stream"] = !o.no_stream;
    if (!result->stream_error.empty()) doc["stream_error"] = result->stream_error;
    PrintJson(doc);
  } else {
    std::printf("released %lld lease(s) of id \"%s\" (limiter %s)\naudit record (%s%s): %s\n",
                static_cast<long long>(result->released), target->id.c_str(),
                target->limiter.c_str(), o.audit_log.c_str(),
                o.no_stream ? "" : (" and " + o.admin.prefix + ":audit").c_str(),
                result->record.c_str());
    if (!result->stream_error.empty()) {
      std::printf("the audit stream did not get the record: %s (the file has it)\n",
                  result->stream_error.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

void AddRelease(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReleaseOptions>();
  o->audit_log = DefaultAuditLog();
  CLI::App* cmd = app.add_subcommand(
      "release",
      "Release every lease of one id (a stuck or leaked holder), as one audited action: the "
      "record (who, why, when, id, how many) goes to --audit-log and the <prefix>:audit stream.\n"
      "Name the id by --limiter and --id, or as sluiced forms them: --domain D --entry "
      "key=value [--entry ...] (docs/sluiced.md, Limiter names and ids).\n"
      "Exit codes: 0 released (also 0 leases, when the id has keys but no live lease), 1 the "
      "id has no key at all under the limiter, or the limiter none under the prefix (nothing "
      "released or recorded), 2 usage or connection error, missing actor or reason, or an "
      "audit log that cannot be written (then nothing is released).");
  AddAdminFlags(cmd, o->admin);
  AddTargetFlags(cmd, o->target, /*with_id=*/true);
  cmd->add_option("--actor", o->actor, "Who does this (recorded)")->required();
  cmd->add_option("--reason", o->reason, "Why (recorded)")->required();
  cmd->add_option("--audit-log", o->audit_log,
                  "JSON-lines file the record is appended to (default: $SLUICE_AUDIT_LOG, else "
                  "./sluice-audit.jsonl)");
  cmd->add_flag("--no-stream", o->no_stream, "Do not also append the record to <prefix>:audit");
  cmd->callback([o, &exit_code] { exit_code = RunRelease(*o); });
}

}  // namespace sluice::cli

// sluice reset: resets one id's rate-limit counter (a locked-out account) through the
// library's audited admin call (sluice::ResetCounter): one record (who, why, when, which
// key) appended to a JSON-lines file before the store is touched, and to the
// `<prefix>:audit` stream unless --no-stream — the same log and stream as `sluice
// release`. Without --algorithm, the id's keys under the limiter are read first and each
// algorithm's state found is reset (one record each). A concurrency limit has leases,
// not a counter: it is refused, pointing at `sluice release`.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "admin_common.h"
#include "commands.h"
#include "sluice/sluice.h"
#include "target.h"

namespace sluice::cli {
namespace {

struct ResetOptions {
  AdminFlags admin;
  TargetFlags target;
  std::string limiter, id;  // resolved from `target`
  std::string actor, reason;
  std::string algorithm;  // empty: every algorithm whose state the id has
  std::string colocate;   // LimiterOptions::colocate's separator; empty: not co-located
  std::string audit_log;
  bool no_stream = false;
};

std::string DefaultAuditLog() {
  const char* env = std::getenv("SLUICE_AUDIT_LOG");
  return env && *env ? env : "sluice-audit.jsonl";
}

constexpr const char* kConcurrency =
    "a concurrency limit has leases, not a counter: release them with `sluice release`";

// The algorithms to reset: --algorithm, or those whose keys the id has (read by Inspect).
// An empty list with OK: the id has no key under the limiter; `no_keys_exit` is then
// ReportNoKeys's exit code (it said why on stderr: a wrong limiter name, or an id never
// seen or whose state expired), as release and inspect answer it.
StatusOr<std::vector<Algorithm>> AlgorithmsToReset(const ResetOptions& o, int& no_keys_exit) {
  if (!o.algorithm.empty()) {
    if (o.algorithm == "concurrency") return InvalidArgumentError(kConcurrency);
    auto a = ParseAlgorithm(o.algorithm);
    if (!a.ok()) return a.status();
    return std::vector<Algorithm>{*a};
  }
  auto admin = Admin::Connect({.url = o.admin.url,
                               .prefix = o.admin.prefix,
                               .command_timeout = std::chrono::milliseconds(
                                   static_cast<int64_t>(o.admin.timeout_s * 1000))});
  if (!admin.ok()) return admin.status();
  auto state = (*admin)->Inspect(o.limiter, o.id);
  if (!state.ok()) return state.status();
  if (state->keys.empty()) {
    no_keys_exit = ReportNoKeys("reset", **admin, Target{o.limiter, o.id});
    return std::vector<Algorithm>{};
  }
  std::set<std::string> names;
  bool leases = false;
  for (const KeyState& k : state->keys) {
    if (!k.name) continue;
    const std::string name(SuffixAlgorithm(k.name->suffix));
    if (name == "concurrency") {
      leases = true;
      continue;
    }
    if (!k.name->encoded_slot_tag.empty() && o.colocate.empty()) {
      return InvalidArgumentError("the id's state is in a co-located key (" + k.key +
                                  "): pass --colocate with the limiter's separator");
    }
    names.insert(name);
  }
  if (names.empty() && leases) return InvalidArgumentError(kConcurrency);
  std::vector<Algorithm> algorithms;
  for (const std::string& name : names) {
    auto a = ParseAlgorithm(name);
    if (a.ok()) algorithms.push_back(*a);
  }
  return algorithms;
}

int RunReset(ResetOptions o) {
  if (o.colocate.size() > 1) {
    return ReportError("reset", InvalidArgumentError("--colocate takes one character"));
  }
  auto target = ResolveTarget(o.target, Need::kLimiterAndId);
  if (!target.ok()) return ReportError("reset", target.status());
  o.limiter = target->limiter;
  o.id = target->id;
  int no_keys_exit = kExitOk;
  auto algorithms = AlgorithmsToReset(o, no_keys_exit);
  if (!algorithms.ok()) return ReportError("reset", algorithms.status());
  if (no_keys_exit != kExitOk) return no_keys_exit;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.admin.timeout_s * 1000));
  auto client = Client::Create({.url = o.admin.url, .prefix = o.admin.prefix, .deadline = timeout});
  if (!client.ok()) return ReportError("reset", client.status());
  LimiterOptions limiter_options;
  if (!o.colocate.empty()) limiter_options.colocate = LimiterOptions::Colocate{o.colocate[0]};
  const AuditOptions audit{.log_path = o.audit_log, .stream = !o.no_stream};
  nlohmann::json records = nlohmann::json::array();
  for (Algorithm algorithm : *algorithms) {
    // The limit plays no part in a reset; the limiter only names the key.
    auto limiter = (*client)->MakeLimiter(
        o.limiter, {.algorithm = algorithm, .limit = 1, .window = std::chrono::seconds(1)},
        limiter_options);
    if (!limiter.ok()) return ReportError("reset", limiter.status());
    auto result =
        ResetCounter(*limiter, o.id, {.actor = o.actor, .reason = o.reason}, audit, timeout);
    if (!result.ok()) return ReportError("reset", result.status());
    if (o.admin.json) {
      nlohmann::json r = {{"algorithm", AlgorithmName(algorithm)},
                          {"record", nlohmann::json::parse(result->record, nullptr, false)}};
      if (!result->stream_error.empty()) r["stream_error"] = result->stream_error;
      records.push_back(std::move(r));
      continue;
    }
    std::printf("reset the %s counter of id \"%s\" (limiter %s)\naudit record (%s%s): %s\n",
                std::string(AlgorithmName(algorithm)).c_str(), o.id.c_str(), o.limiter.c_str(),
                o.audit_log.c_str(),
                o.no_stream ? "" : (" and " + o.admin.prefix + ":audit").c_str(),
                result->record.c_str());
    if (!result->stream_error.empty()) {
      std::printf("the audit stream did not get the record: %s (the file has it)\n",
                  result->stream_error.c_str());
    }
  }
  if (o.admin.json) {
    PrintJson({{"reset", records.size()},
               {"resets", records},
               {"audit_log", o.audit_log},
               {"stream", !o.no_stream}});
  }
  return kExitOk;
}

}  // namespace

void AddReset(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ResetOptions>();
  o->audit_log = DefaultAuditLog();
  CLI::App* cmd = app.add_subcommand(
      "reset",
      "Reset one id's rate-limit counter (its whole limit is available again), as one audited "
      "action: the record (who, why, when, which key) goes to --audit-log and the "
      "<prefix>:audit stream. Without --algorithm, every algorithm's state the id has under "
      "the limiter is reset (one record each).\n"
      "Exit codes: 0 reset, 1 nothing to reset (without --algorithm: the id has no key "
      "under the limiter, or the limiter none at all; stderr says which, nothing is "
      "recorded), 2 usage or connection error, missing actor or reason, a concurrency "
      "limit, or an audit log that cannot be written (then nothing is reset).");
  AddAdminFlags(cmd, o->admin);
  AddTargetFlags(cmd, o->target, /*with_id=*/true);
  cmd->add_option("--actor", o->actor, "Who does this (recorded)")->required();
  cmd->add_option("--reason", o->reason, "Why (recorded)")->required();
  cmd->add_option("--algorithm", o->algorithm,
                  "The limiter's algorithm (fixed_window, sliding_window, sliding_log, "
                  "token_bucket, gcra); default: each one the id has state of");
  cmd->add_option("--colocate", o->colocate,
                  "The limiter's co-location separator (LimiterOptions::colocate), if it has one");
  cmd->add_option("--audit-log", o->audit_log,
                  "JSON-lines file the record is appended to (default: $SLUICE_AUDIT_LOG, else "
                  "./sluice-audit.jsonl)");
  cmd->add_flag("--no-stream", o->no_stream, "Do not also append the record to <prefix>:audit");
  cmd->callback([o, &exit_code] { exit_code = RunReset(*o); });
}

}  // namespace sluice::cli

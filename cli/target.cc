#include "target.h"

#include <cstdio>
#include <utility>

#include "admin_common.h"
#include "commands.h"
#include "service/limiter_names.h"

namespace sluice::cli {

void AddTargetFlags(CLI::App* cmd, TargetFlags& flags, bool with_id) {
  cmd->add_option("--limiter", flags.limiter,
                  "Limiter name (as /admin/config's `limiter`, e.g. example.client)");
  if (with_id) {
    cmd->add_option("--id", flags.id,
                    "The id, as the application passes it (sluiced's: k1=v1,k2=v2)");
  }
  cmd->add_option("--domain", flags.domain,
                  "sluiced's domain: with --entry, names the limiter and id as sluiced does");
  cmd->add_option("--entry", flags.entries,
                  with_id ? "A descriptor entry key=value, in the request's order (repeat it)"
                          : "A descriptor entry key (or key=value), in order (repeat it)");
}

bool AnyTarget(const TargetFlags& flags) {
  return !flags.limiter.empty() || !flags.id.empty() || !flags.domain.empty() ||
         !flags.entries.empty();
}

StatusOr<Target> ResolveTarget(const TargetFlags& flags, Need need) {
  const bool with_id = need == Need::kLimiterAndId;
  if (flags.domain.empty()) {
    if (!flags.entries.empty()) return InvalidArgumentError("--entry needs --domain");
    if (flags.limiter.empty())
      return InvalidArgumentError(with_id ? "name the target: --limiter L --id I, or --domain D "
                                            "--entry key=value [--entry …]"
                                          : "--limiter L, or --domain D --entry key [--entry …]");
    if (with_id && flags.id.empty())
      return InvalidArgumentError("the id is empty: --limiter needs --id I");
    return Target{.limiter = flags.limiter, .id = flags.id};
  }
  if (flags.entries.empty()) return InvalidArgumentError("--domain needs at least one --entry");
  if (!flags.id.empty())
    return InvalidArgumentError("--id and --entry both name the id: give one of them");
  sluiced::Entries entries;
  std::vector<std::string> pieces = {flags.domain};
  for (const std::string& entry : flags.entries) {
    const auto eq = entry.find('=');
    std::string key = entry.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (key.empty()) return InvalidArgumentError("--entry '" + entry + "': the key is empty");
    if (with_id && eq == std::string::npos)
      return InvalidArgumentError("--entry '" + entry +
                                  "': write key=value (key= for an empty value)");
    pieces.push_back(sluiced::NodePiece(key, ""));
    entries.emplace_back(std::move(key), std::move(value));
  }
  Target target;
  target.limiter = flags.limiter.empty() ? sluiced::LimiterName(pieces) : flags.limiter;
  if (with_id) target.id = sluiced::DescriptorId(entries);
  return target;
}

int ReportNoKeys(const char* command, Admin& admin, const Target& target) {
  bool limiter_has_keys = false;
  const Status scanned = admin.Scan({.limiter = target.limiter}, [&](const ScanBatch& batch) {
    limiter_has_keys = !batch.keys.empty();
    return !limiter_has_keys;  // the first key is enough
  });
  if (!scanned.ok()) return ReportError(command, scanned);
  const std::string& prefix = admin.options().prefix;
  if (!limiter_has_keys) {
    std::fprintf(stderr,
                 "sluice %s: limiter \"%s\" has no keys at all under prefix \"%s\": no such "
                 "limiter here (check the name: sluiced's are listed by GET /admin/config, "
                 "`limiter`; and --prefix, --redis)\n",
                 command, target.limiter.c_str(), prefix.c_str());
  } else {
    std::fprintf(stderr,
                 "sluice %s: id \"%s\" has no keys under limiter \"%s\" (prefix \"%s\"): "
                 "never seen, or its state expired (its budget is full, it holds no lease)\n",
                 command, target.id.c_str(), target.limiter.c_str(), prefix.c_str());
  }
  return kExitFindings;
}

}  // namespace sluice::cli

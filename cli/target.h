// What the operator commands act on: a limiter (and an id), named either as the library
// names them (--limiter, --id) or as sluiced forms them from a request's descriptor
// (--domain D --entry key=value …: docs/sluiced.md, Limiter names and ids), with the
// code sluiced itself uses (service/limiter_names.h).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sluice/admin.h"
#include "sluice/status.h"

namespace sluice::cli {

struct TargetFlags {
  std::string limiter;
  std::string id;
  std::string domain;
  std::vector<std::string> entries;  // "key=value" (or "key": an empty value)
};

struct Target {
  std::string limiter;
  std::string id;  // empty for commands that take a limiter only
};

// Adds --limiter and --domain/--entry (and --id when `with_id`) to `cmd`; none required
// (ResolveTarget says what is missing).
void AddTargetFlags(CLI::App* cmd, TargetFlags& flags, bool with_id);

// The limiter and id the flags name:
//   --limiter L [--id I]                  as given;
//   --domain D --entry k1=v1 [--entry …]  sluiced's limiter of the rule whose descriptor
//                                         nodes are the bare keys k1, k2… ("D.k1.k2") and the
//                                         id "k1=v1,k2=v2" (escaped as sluiced escapes it);
//   --domain D --entry … --limiter L      the id from the entries, the limiter as given (a
//                                         rule with `value:` in its nodes or a hashed name:
//                                         /admin/config lists every rule's limiter).
// `need` is what the command needs: kLimiter (filters: the entries' values are not used)
// or kLimiterAndId. InvalidArgument when flags are missing, mixed (--id with --entry) or
// an entry is malformed.
enum class Need { kLimiter, kLimiterAndId };
StatusOr<Target> ResolveTarget(const TargetFlags& flags, Need need);

// Whether any flag of the target was given (for commands where the target is optional).
bool AnyTarget(const TargetFlags& flags);

// When `target`'s id has no key under its limiter: prints on stderr why, telling a limiter
// that has no key at all under the prefix (a wrong name or prefix: one SCAN of the
// limiter's keys, stopped at the first) from an id that has none (never seen, or its state
// expired), and returns kExitFindings.
int ReportNoKeys(const char* command, Admin& admin, const Target& target);

}  // namespace sluice::cli

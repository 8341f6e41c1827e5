// The operators' runtime overrides (sluice/admin.h: SetOverride, ClearOverride,
// ListOverrides), each set or clear audited as a reset is (client/audit_record.h).
#include <algorithm>
#include <string>
#include <vector>

#include "client/audit_record.h"
#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"
#include "sluice/admin.h"
#include "sluice/client.h"
#include "sluice/lease.h"

namespace sluice {
namespace internal {

// What an override action needs of a limiter of either kind.
struct OverrideTarget {
  ClientCore& core;
  std::string name;
  std::string_view algorithm;  // AlgorithmName, "concurrency", or "" (not known)
  int64_t own_limit = -1;      // -1: not known (a limiter named, not made)
  int64_t own_window_ms = 0;   // 0 for a concurrency limit
};

struct OverrideAccess {
  static OverrideTarget Of(const Limiter& l) {
    return {*l.core_, l.name(), AlgorithmName(l.limit().algorithm), l.limit().limit,
            l.limit().window.count()};
  }
  static OverrideTarget Of(const ConcurrencyLimiter& l) {
    return {*l.core_, l.name(), "concurrency", l.options().limit, 0};
  }
};

namespace {

RuntimeOverride Public(const std::string& limiter, const OverrideEntry& e) {
  return {limiter,         e.id,        e.limit, std::chrono::milliseconds(e.window_ms),
          e.expires_at_ms, e.set_at_ms, e.actor, e.reason};
}

StatusOr<OverrideReply> Run(ClientCore& core, OverrideCall call) {
  return WaitFor<StatusOr<OverrideReply>>(
      [&](OverrideCallback done) { core.store->Overrides(std::move(call), std::move(done)); });
}

// The tail's "what it replaced": the earlier override, or the limiter's own limit.
std::string OldFields(const OverrideTarget& t, const std::optional<OverrideEntry>& before) {
  if (before) {
    return ",\"old\":\"runtime\",\"old_limit\":" + std::to_string(before->limit) +
           ",\"old_window_ms\":" + std::to_string(before->window_ms);
  }
  if (t.own_limit < 0) return ",\"old\":\"limiter\"";
  return ",\"old\":\"limiter\",\"old_limit\":" + std::to_string(t.own_limit) +
         ",\"old_window_ms\":" + std::to_string(t.own_window_ms);
}

Status CheckSpec(const OverrideSpec& spec, std::string_view id) {
  if (spec.limit < 0 || spec.limit > kMaxLimit) {
    return InvalidArgumentError("an override's limit must be between 0 and " +
                                std::to_string(kMaxLimit) + ", got " + std::to_string(spec.limit));
  }
  if (spec.window.count() < 0 || spec.window > kMaxWindow) {
    return InvalidArgumentError(
        "an override's window must be between 1 ms and 366 days (0: the "
        "limiter's own)");
  }
  if (spec.ttl.count() < 1 || spec.ttl > kMaxOverrideTtl) {
    return InvalidArgumentError("an override lasts 1 s to 30 days (ttl), got " +
                                std::to_string(spec.ttl.count()) + " s");
  }
  if (id.size() > kMaxOverrideIdBytes) {
    return InvalidArgumentError("an override's id is at most 512 bytes");
  }
  return Status::Ok();
}

Status CheckTexts(const AdminAction& action) {
  if (action.actor.size() > kMaxOverrideActorBytes ||
      action.reason.size() > kMaxOverrideReasonBytes) {
    return InvalidArgumentError("an override's actor is at most 256 bytes, its reason 1024");
  }
  return Status::Ok();
}

// Runs a set (spec) or a clear (no spec) of `id`, recorded before and after.
StatusOr<OverrideResult> Change(const OverrideTarget& t, std::string_view id,
                                const OverrideSpec* spec, const AdminAction& action,
                                const AuditOptions& audit, std::chrono::milliseconds deadline) {
  const char* what = spec ? "a runtime override" : "clearing a runtime override";
  if (Status s = CheckAuditedAction(what, id, action, audit, deadline); !s.ok()) return s;
  if (Status s = CheckTexts(action); !s.ok()) return s;
  if (spec) {
    if (Status s = CheckSpec(*spec, id); !s.ok()) return s;
  } else if (id.size() > kMaxOverrideIdBytes) {
    return InvalidArgumentError("an override's id is at most 512 bytes");
  }
  const std::string key = MakeOverridesKey(t.core.options.prefix, t.name);
  AuditRecord record(audit.log_path);
  if (Status s = record.Open(); !s.ok()) return s;
  const AuditFields fields{
      spec ? "override_set" : "override_clear",  action,       t.name, t.algorithm,
      IsoTime(std::chrono::system_clock::now()), EncodeId(id), key};
  std::string head = AuditRecordHead(fields);
  std::vector<std::pair<std::string, std::string>> extra;
  if (spec) {
    // What it sets: known before the store is touched.
    extra = {{"limit", std::to_string(spec->limit)},
             {"window_ms", std::to_string(spec->window.count())},
             {"ttl_s", std::to_string(spec->ttl.count())}};
    for (const auto& [name, value] : extra) head += "\"" + name + "\":" + value + ",";
  }
  if (Status s = record.Append(head); !s.ok()) return s;

  OverrideCall call;
  call.op = spec ? OverrideOp::kSet : OverrideOp::kClear;
  call.keys = {key};
  call.entry.id = std::string(id);
  if (spec) {
    call.entry.limit = spec->limit;
    call.entry.window_ms = spec->window.count();
    call.entry.actor = action.actor;
    call.entry.reason = action.reason;
    call.lifetime_ms = std::chrono::duration_cast<std::chrono::milliseconds>(spec->ttl).count();
  }
  if (t.core.options.model_clock) call.now_ms = t.core.options.model_clock->NowMs();
  call.deadline = std::chrono::steady_clock::now() + deadline;
  StatusOr<OverrideReply> reply = Run(t.core, std::move(call));
  if (!reply.ok()) {
    return ActionNotConfirmed(spec ? "the override" : "the clear", reply.status(), record,
                              audit.log_path);
  }
  const OverrideChange& c = reply->change;
  if (spec && !c.done) {
    const std::string refused =
        AuditTail("\"outcome\":\"refused\",\"live\":" + std::to_string(c.live));
    Status written = record.Finish(refused);
    return FailedPreconditionError(
        "limiter " + t.name + " has " + std::to_string(c.live) +
        " runtime overrides in force, the most it may have: nothing was set (clear one, or wait "
        "for one to end)" +
        (written.ok() ? "; recorded in " + audit.log_path : "; " + written.message()));
  }
  std::string tail = "\"outcome\":\"done\"";
  if (!spec) tail += c.done ? ",\"cleared\":true" : ",\"cleared\":false";
  if (spec || c.done) tail += OldFields(t, c.before);
  const std::string done = AuditTail(tail);
  if (Status written = record.Finish(done); !written.ok()) {
    return InternalError(std::string(spec ? "set" : "cleared") + " the override of " + key +
                         " but " + written.message());
  }
  // This process applies it at once.
  t.core.overrides->Changed(t.name, std::string(id), c.after ? &*c.after : nullptr);
  OverrideResult result;
  result.changed = c.done;
  if (c.before) result.before = Public(t.name, *c.before);
  if (c.after) result.after = Public(t.name, *c.after);
  result.record = head + done;
  if (audit.stream) {
    extra.emplace_back("outcome", spec ? "done" : (c.done ? "cleared" : "none"));
    result.stream_error =
        AppendToAuditStream(t.core, AuditStreamFields(fields, std::move(extra)), audit, deadline);
  }
  return result;
}

}  // namespace
}  // namespace internal

using internal::OverrideAccess;

StatusOr<OverrideResult> SetOverride(const Limiter& limiter, std::string_view id,
                                     const OverrideSpec& spec, const AdminAction& action,
                                     const AuditOptions& audit,
                                     std::chrono::milliseconds deadline) {
  return internal::Change(OverrideAccess::Of(limiter), id, &spec, action, audit, deadline);
}

StatusOr<OverrideResult> SetOverride(const ConcurrencyLimiter& limiter, std::string_view id,
                                     const OverrideSpec& spec, const AdminAction& action,
                                     const AuditOptions& audit,
                                     std::chrono::milliseconds deadline) {
  OverrideSpec cap = spec;
  cap.window = std::chrono::milliseconds(0);
  return internal::Change(OverrideAccess::Of(limiter), id, &cap, action, audit, deadline);
}

StatusOr<OverrideResult> ClearOverride(const Limiter& limiter, std::string_view id,
                                       const AdminAction& action, const AuditOptions& audit,
                                       std::chrono::milliseconds deadline) {
  return internal::Change(OverrideAccess::Of(limiter), id, nullptr, action, audit, deadline);
}

StatusOr<OverrideResult> ClearOverride(const ConcurrencyLimiter& limiter, std::string_view id,
                                       const AdminAction& action, const AuditOptions& audit,
                                       std::chrono::milliseconds deadline) {
  return internal::Change(OverrideAccess::Of(limiter), id, nullptr, action, audit, deadline);
}

StatusOr<OverrideResult> SetOverride(const Client& client, std::string_view limiter,
                                     std::string_view id, const OverrideSpec& spec,
                                     const AdminAction& action, const AuditOptions& audit,
                                     std::chrono::milliseconds deadline) {
  if (Status s = internal::ValidateName("limiter name", limiter); !s.ok()) return s;
  const internal::OverrideTarget t{internal::ClientFactory::CoreOf(client), std::string(limiter),
                                   ""};
  return internal::Change(t, id, &spec, action, audit, deadline);
}

StatusOr<OverrideResult> ClearOverride(const Client& client, std::string_view limiter,
                                       std::string_view id, const AdminAction& action,
                                       const AuditOptions& audit,
                                       std::chrono::milliseconds deadline) {
  if (Status s = internal::ValidateName("limiter name", limiter); !s.ok()) return s;
  const internal::OverrideTarget t{internal::ClientFactory::CoreOf(client), std::string(limiter),
                                   ""};
  return internal::Change(t, id, nullptr, action, audit, deadline);
}

StatusOr<std::vector<RuntimeOverride>> ListOverrides(const Client& client,
                                                     std::span<const std::string> limiters,
                                                     std::chrono::milliseconds deadline) {
  internal::ClientCore& core = internal::ClientFactory::CoreOf(client);
  std::vector<std::string> names(limiters.begin(), limiters.end());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<RuntimeOverride> out;
  const auto until = std::chrono::steady_clock::now() + deadline;
  constexpr std::size_t kChunk = internal::OverrideCopy::kKeysPerCall;
  for (std::size_t at = 0; at < names.size(); at += kChunk) {
    internal::OverrideCall call;
    const std::size_t end = std::min(names.size(), at + kChunk);
    for (std::size_t i = at; i < end; ++i) {
      if (Status s = internal::ValidateName("limiter name", names[i]); !s.ok()) return s;
      call.keys.push_back(internal::MakeOverridesKey(core.options.prefix, names[i]));
    }
    call.known.assign(call.keys.size(), -1);
    if (core.options.model_clock) call.now_ms = core.options.model_clock->NowMs();
    call.deadline = until;
    StatusOr<internal::OverrideReply> reply = internal::Run(core, std::move(call));
    if (!reply.ok()) return reply.status();
    for (std::size_t i = at; i < end; ++i) {
      std::vector<internal::OverrideEntry> entries = reply->read.hashes.at(i - at).entries;
      std::sort(entries.begin(), entries.end(),
                [](const auto& a, const auto& b) { return a.id < b.id; });
      for (const internal::OverrideEntry& e : entries) {
        if (e.expires_at_ms > reply->read.now_ms) out.push_back(internal::Public(names[i], e));
      }
    }
  }
  return out;
}

}  // namespace sluice

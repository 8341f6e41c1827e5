// The operators' "reset this id's counter", with its audit record
// (client/audit_record.h: written before the store is touched, its outcome after).
#include "sluice/admin.h"
#include "sluice/client.h"

#include "client/audit_record.h"
#include "client/client_core.h"
#include "core/keys.h"

namespace sluice {
using internal::AuditTail;

StatusOr<ResetResult> ResetCounter(const Limiter& limiter, std::string_view id,
                                   const AdminAction& action, const AuditOptions& audit,
                                   std::chrono::milliseconds deadline) {
  if (Status s = internal::CheckAuditedAction("an admin reset", id, action, audit, deadline);
      !s.ok())
    return s;
  StatusOr<std::string> key = limiter.KeyFor(id);
  if (!key.ok()) return key.status();
  internal::AuditRecord record(audit.log_path);
  if (Status s = record.Open(); !s.ok()) return s;
  const internal::AuditFields fields{"reset",
                                     action,
                                     limiter.name(),
                                     AlgorithmName(limiter.limit().algorithm),
                                     internal::IsoTime(std::chrono::system_clock::now()),
                                     internal::EncodeId(id),
                                     *key};
  const std::string head = internal::AuditRecordHead(fields);
  if (Status s = record.Append(head); !s.ok()) return s;

  // A reset is not a decision: a store that cannot take it returns the error (never a
  // failure policy's answer), so a Decision here is the store's.
  StatusOr<Decision> after = limiter.Reset(id, {.deadline = deadline});
  if (!after.ok()) {
    return internal::ActionNotConfirmed("the reset", after.status(), record, audit.log_path);
  }
  ResetResult result;
  result.after = *after;
  // What changed is the key's state, forgotten: the record names the key; what the id has
  // now depends on the limit the caller passed, and is in the result, not the record.
  const std::string done = AuditTail("\"outcome\":\"done\"");
  if (Status written = record.Finish(done); !written.ok()) {
    return InternalError("reset " + fields.key + " but " + written.message());
  }
  result.record = head + done;
  if (audit.stream) {
    result.stream_error = internal::AppendToAuditStream(
        *limiter.core_, internal::AuditStreamFields(fields), audit, deadline);
  }
  return result;
}

}  // namespace sluice

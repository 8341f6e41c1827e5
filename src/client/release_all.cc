// The operators' "release every lease of this id", with its audit record
// (client/audit_record.h: written before the store is touched, its outcome after).
#include "sluice/admin.h"

#include "algo/concurrency.h"
#include "client/audit_record.h"
#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"

namespace sluice {
using internal::AuditRecord;
using internal::AuditTail;

StatusOr<ReleaseAllResult> ReleaseAll(const ConcurrencyLimiter& limiter, std::string_view id,
                                      const AdminAction& action, const AuditOptions& audit,
                                      std::chrono::milliseconds deadline) {
  const std::shared_ptr<internal::ClientCore>& core = limiter.core_;
  if (Status s = internal::CheckAuditedAction("an admin release", id, action, audit, deadline);
      !s.ok())
    return s;
  AuditRecord record(audit.log_path);
  if (Status s = record.Open(); !s.ok()) return s;

  internal::LeaseCall call;
  call.args.op = internal::LeaseOp::kReleaseAll;
  call.key = internal::MakeLeaseKey(limiter.key_head_, id);
  if (core->options.model_clock) call.now_ms = core->options.model_clock->NowMs();
  const internal::AuditFields fields{"release_all",
                                     action,
                                     limiter.name_,
                                     {},
                                     internal::IsoTime(std::chrono::system_clock::now()),
                                     internal::EncodeId(id),
                                     call.key};
  const std::string head = internal::AuditRecordHead(fields);
  if (Status s = record.Append(head); !s.ok()) return s;

  call.deadline = std::chrono::steady_clock::now() + deadline;
  auto released =
      internal::WaitFor<StatusOr<internal::LeaseResult>>([&](internal::LeaseCallback done) {
        core->store->RunLease(std::move(call), std::move(done));
      });
  if (!released.ok())
    return internal::ActionNotConfirmed("the release", released.status(), record, audit.log_path);

  ReleaseAllResult result;
  result.released = released->reply.count;
  const std::string done =
      AuditTail("\"outcome\":\"done\",\"store_ms\":" + std::to_string(released->reply.now_ms) +
                ",\"released\":" + std::to_string(result.released));
  if (Status written = record.Finish(done); !written.ok()) {
    return InternalError("released " + std::to_string(result.released) + " leases of " +
                         fields.key + " but " + written.message());
  }
  result.record = head + done;
  if (audit.stream) {
    result.stream_error = internal::AppendToAuditStream(
        *core, internal::AuditStreamFields(fields, {{"released", std::to_string(result.released)}}),
        audit, deadline);
  }
  return result;
}

}  // namespace sluice

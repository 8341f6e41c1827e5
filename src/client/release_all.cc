// The operators' "release every lease of this id", with its audit record
// (client/audit_record.h: written before the store is touched, its outcome after).
#include "sluice/admin.h"

#include "algo/concurrency.h"
#include "client/audit_record.h"
#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"

namespace sluice {
namespace {

using internal::AppendJsonString;
using internal::AuditRecord;
using internal::AuditTail;

// What a record says of the action besides its outcome; the stream gets the same fields.
struct ReleaseFields {
  const AdminAction& action;
  const std::string& limiter;
  std::string ts;
  std::string encoded_id;  // as encoded in keys: printable ASCII, reversible (%XX)
  std::string key;
};

// The record, written before the store is touched: everything but the outcome, which
// goes into a fixed-width tail of spaces (JSON allows them between tokens).
std::string RecordHead(const ReleaseFields& f) {
  std::string head;
  head += "{\"ts\":";
  AppendJsonString(head, f.ts);
  head += ",\"op\":\"" + internal::OperationId() + "\"";
  head += ",\"action\":\"release_all\",\"actor\":";
  AppendJsonString(head, f.action.actor);
  head += ",\"reason\":";
  AppendJsonString(head, f.action.reason);
  head += ",\"limiter\":";
  AppendJsonString(head, f.limiter);
  head += ",\"id\":";
  AppendJsonString(head, f.encoded_id);
  head += ",\"key\":";
  AppendJsonString(head, f.key);
  head += ",";
  return head;
}

// What the audit stream gets of a done release.
std::vector<std::pair<std::string, std::string>> StreamFields(const ReleaseFields& f,
                                                              int64_t released) {
  return {{"ts", f.ts},
          {"action", "release_all"},
          {"actor", f.action.actor},
          {"reason", f.action.reason},
          {"limiter", f.limiter},
          {"id", f.encoded_id},
          {"key", f.key},
          {"released", std::to_string(released)}};
}

}  // namespace

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
  const ReleaseFields fields{action, limiter.name_,
                             internal::IsoTime(std::chrono::system_clock::now()),
                             internal::EncodeId(id), call.key};
  const std::string head = RecordHead(fields);
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
        *core, StreamFields(fields, result.released), audit, deadline);
  }
  return result;
}

}  // namespace sluice

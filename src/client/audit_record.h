// The audit record of an operator's action (sluice/admin.h: ReleaseAll, ResetCounter):
// one JSON line appended to the audit log before the store is touched, its outcome then
// written into the same line in place, and on success a copy in the `<prefix>:audit`
// stream.
//
// Order of events, so that no action goes unrecorded and no record claims an action that
// did not happen: the record is written (one write(2) on an O_APPEND descriptor, then
// fsync) BEFORE the store is touched, with "outcome":"pending" and a fixed-width tail of
// padding; then the action runs in the store (one script); then the tail of that same
// line is overwritten in place (pwrite at its own offset, fsync) with the outcome: "done"
// with what changed, or "unknown" with the error when the store did not answer (the
// script may still have run: a paused Redis runs it later), or "failed" for an error
// reply. So there is one line per call, and a line whose outcome is "pending" is an
// action whose process died in between. A log that cannot be opened or written stops the
// action before the store.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/admin.h"
#include "sluice/status.h"

namespace sluice::internal {

class ClientCore;

// True for well-formed UTF-8 (RFC 3629: shortest form only, no surrogates, nothing past
// U+10FFFF) without control characters (C0, DEL, C1): what may go into a record.
bool PrintableUtf8(std::string_view s);

// `s` is PrintableUtf8 (or printable ASCII): only quotes and backslashes need escaping.
void AppendJsonString(std::string& out, std::string_view s);

// 2026-12-05T18:57:14.123Z
std::string IsoTime(std::chrono::system_clock::time_point t);

// The end of a record: `fields` then spaces up to kAuditTailBytes, then '}'. The record
// is first written with the pending tail and the outcome overwrites it in place, so every
// tail of a record must fit in kAuditTailBytes.
inline constexpr std::size_t kAuditTailBytes = 96;
std::string AuditTail(const std::string& fields);

// 64 random bits in hex: ties the record to its action when a log is read later.
std::string OperationId();

// What a record says of an action besides its outcome; the stream gets the same fields.
struct AuditFields {
  std::string_view name;  // the record's "action": "release_all", "reset"
  const AdminAction& action;
  const std::string& limiter;
  std::string_view algorithm;  // recorded after the limiter; empty: not recorded
  std::string ts;
  std::string encoded_id;  // as encoded in keys: printable ASCII, reversible (%XX)
  std::string key;
};

// The record, written before the store is touched: everything but the outcome, which
// goes into a fixed-width tail of spaces (JSON allows them between tokens).
std::string AuditRecordHead(const AuditFields& f);

// What the audit stream gets of a done action: the record's fields, then `extra`.
std::vector<std::pair<std::string, std::string>> AuditStreamFields(
    const AuditFields& f, std::vector<std::pair<std::string, std::string>> extra = {});

// The checks every audited action makes of its arguments before the log is opened or the
// store touched: InvalidArgument naming what is wrong. `what` names the action in the
// messages ("an admin release").
Status CheckAuditedAction(std::string_view what, std::string_view id, const AdminAction& action,
                          const AuditOptions& audit, std::chrono::milliseconds deadline);

// The audit log's descriptor and the one record an action writes into it: appended
// with the pending tail (Append), whose tail the outcome then overwrites (Finish).
class AuditRecord {
 public:
  explicit AuditRecord(const std::string& path) : path_(path) {}
  ~AuditRecord();
  AuditRecord(const AuditRecord&) = delete;
  AuditRecord& operator=(const AuditRecord&) = delete;

  // FailedPrecondition when the log cannot be opened (the action must not be done).
  Status Open();
  // Writes `head` and the pending tail as one line, then fsync. FailedPrecondition when
  // it cannot (the action must not be done).
  Status Append(const std::string& head);
  // Overwrites the pending tail with `tail` (an AuditTail: the outcome), then fsync.
  Status Finish(const std::string& tail) const;

 private:
  const std::string& path_;
  int fd_ = -1;
  off_t tail_at_ = 0;
  bool can_update_ = false;
};

// An action the store did not confirm: its outcome goes into the record, and the error
// says what is known. No answer in time, or the connection broke: the script may have
// run, or may still run (a paused Redis runs it when it resumes): "unknown". An error
// reply: it did not: "failed". `what` names the action ("the release").
Status ActionNotConfirmed(std::string_view what, const Status& error, const AuditRecord& record,
                          const std::string& log_path);

// Appends a done record's fields to the audit stream `<prefix>:audit` (AuditOptions);
// the error, or empty when it went.
std::string AppendToAuditStream(ClientCore& core,
                                std::vector<std::pair<std::string, std::string>> fields,
                                const AuditOptions& audit, std::chrono::milliseconds deadline);

}  // namespace sluice::internal

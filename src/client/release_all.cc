// The operators' "release every lease of this id", with its audit record.
//
// Order of events, so that no action goes unrecorded and no record claims an action that
// did not happen: the record is written (one write(2) on an O_APPEND descriptor, then
// fsync) BEFORE the store is touched, with "outcome":"pending" and a fixed-width tail of
// padding; then the release runs in the store (one script: count the live leases,
// delete the set); then the tail of that same line is overwritten in place (pwrite at
// its own offset, fsync) with the outcome: "done" with store_ms and released, or
// "unknown" with the error when the store did not answer (the script may still have run:
// a paused Redis runs it later), or "failed" for an error reply. So there is one line
// per call, and a line whose outcome is "pending" is an action whose process died
// in between. Then, on "done" only, the record goes to the stream when asked. A log that
// cannot be opened or written stops the action before the store.
#include "sluice/admin.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "algo/concurrency.h"
#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"

namespace sluice {
namespace {

// True for well-formed UTF-8 (RFC 3629: shortest form only, no surrogates, nothing past
// U+10FFFF) without control characters (C0, DEL, C1): what may go into a record.
bool PrintableUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return false;
      ++i;
      continue;
    }
    // The lead byte fixes the length and the range the second byte may take (the rest
    // are 0x80..0xbf): this is what excludes overlong forms (e0 80..9f, f0 80..8f),
    // surrogates (ed a0..bf) and code points past U+10FFFF (f4 90..bf, f5..ff).
    int extra;
    unsigned char low = 0x80, high = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
      if (c == 0xc2) low = 0xa0;  // U+0080..U+009F are the C1 control characters
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2;
      if (c == 0xe0) low = 0xa0;
      if (c == 0xed) high = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
      if (c == 0xf0) low = 0x90;
      if (c == 0xf4) high = 0x8f;
    } else {
      return false;  // a continuation byte first, an overlong lead (c0, c1), or f5..ff
    }
    if (i + static_cast<std::size_t>(extra) >= s.size()) return false;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < low || second > high) return false;
    for (int k = 2; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += 1 + static_cast<std::size_t>(extra);
  }
  return true;
}

// `s` is PrintableUtf8: only quotes and backslashes need escaping.
void AppendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
}

std::string IsoTime(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

// The end of a record: `fields` then spaces up to kTailBytes, then '}'. The record is
// first written with the pending tail and the outcome overwrites it in place, so every
// tail has the same length.
constexpr std::size_t kTailBytes = 96;
std::string Tail(const std::string& fields) {
  std::string tail = fields;
  if (tail.size() < kTailBytes) tail.append(kTailBytes - tail.size(), ' ');
  tail += '}';
  return tail;
}

// 64 random bits in hex: ties the record to its action when a log is read later.
std::string OperationId() {
  unsigned char bytes[8] = {};
  std::size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t n = getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n > 0) filled += static_cast<std::size_t>(n);
    if (n < 0 && errno != EINTR) break;  // not unique then, only less random
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

// ReleaseAll's checks of its arguments, before the log is opened or the store touched.
Status CheckReleaseAll(std::string_view id, const AdminAction& action, const AuditOptions& audit,
                       std::chrono::milliseconds deadline) {
  if (id.empty()) return InvalidArgumentError("id is empty");
  if (action.actor.empty()) return InvalidArgumentError("an admin release needs an actor (who)");
  if (action.reason.empty()) return InvalidArgumentError("an admin release needs a reason (why)");
  if (!PrintableUtf8(action.actor) || !PrintableUtf8(action.reason)) {
    return InvalidArgumentError("actor and reason must be UTF-8 text without control characters");
  }
  if (audit.log_path.empty()) {
    return InvalidArgumentError("an admin release needs an audit log (AuditOptions::log_path)");
  }
  if (audit.stream && (audit.stream_max_len < 1 || audit.stream_retention.count() < 1)) {
    return InvalidArgumentError("the audit stream needs stream_max_len >= 1 and a retention > 0");
  }
  if (deadline.count() <= 0) return InvalidArgumentError("deadline must be > 0 ms");
  return Status::Ok();
}

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
  head += ",\"op\":\"" + OperationId() + "\"";
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

// The audit log's descriptor and the one record this action writes into it: appended
// with the pending tail (Append), whose tail the outcome then overwrites (Finish).
class AuditRecord {
 public:
  explicit AuditRecord(const std::string& path) : path_(path) {}
  ~AuditRecord() {
    if (fd_ >= 0) ::close(fd_);
  }
  AuditRecord(const AuditRecord&) = delete;
  AuditRecord& operator=(const AuditRecord&) = delete;

  Status Open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd_ < 0) {
      return FailedPreconditionError("cannot open the audit log " + path_ + ": " +
                                     std::strerror(errno) + " (nothing was released)");
    }
    return Status::Ok();
  }

  // Writes `head` and the pending tail as one line, then fsync.
  Status Append(const std::string& head) {
    const std::string pending = Tail("\"outcome\":\"pending\"");
    const std::string intent = head + pending + "\n";
    if (::write(fd_, intent.data(), intent.size()) != static_cast<ssize_t>(intent.size()) ||
        ::fsync(fd_) != 0) {
      return FailedPreconditionError("cannot write the audit record to " + path_ + ": " +
                                     std::strerror(errno) + " (nothing was released)");
    }
    // O_APPEND put it at the end whatever other writers did; the descriptor's offset is
    // now just past it. pwrite ignores the offset only without O_APPEND (Linux).
    tail_at_ = ::lseek(fd_, 0, SEEK_CUR) - static_cast<off_t>(pending.size() + 1);
    const int flags = ::fcntl(fd_, F_GETFL);
    can_update_ = tail_at_ > 0 && flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_APPEND) == 0;
    return Status::Ok();
  }

  // Overwrites the pending tail with `tail` (the outcome), then fsync.
  Status Finish(const std::string& tail) const {
    if (!can_update_ ||
        ::pwrite(fd_, tail.data(), tail.size(), tail_at_) != static_cast<ssize_t>(tail.size()) ||
        ::fsync(fd_) != 0) {
      return InternalError("could not write the outcome into the audit record in " + path_ +
                           " (it says \"pending\"): " + std::strerror(errno) + "; outcome: {" +
                           tail + "}");
    }
    return Status::Ok();
  }

 private:
  const std::string& path_;
  int fd_ = -1;
  off_t tail_at_ = 0;
  bool can_update_ = false;
};

// A release the store did not confirm: its outcome goes into the record, and the error
// says what is known. No answer in time, or the connection broke: the script may have
// run, or may still run (a paused Redis runs it when it resumes). An error reply: it did
// not.
Status ReleaseNotConfirmed(const Status& error, const AuditRecord& record,
                           const std::string& log_path) {
  const StatusCode code = error.code();
  const bool unknown = code == StatusCode::kDeadlineExceeded || code == StatusCode::kUnavailable;
  const std::string tail = Tail(std::string("\"outcome\":\"") + (unknown ? "unknown" : "failed") +
                                "\",\"error\":\"" + std::string(StatusCodeName(code)) + "\"");
  Status written = record.Finish(tail);
  return Status(code,
                error.message() +
                    (unknown ? "; the release may have happened or may still happen: " : "; ") +
                    (written.ok() ? "recorded in " + log_path : written.message()));
}

// Appends a done record to the audit stream; the error, or empty when it went.
std::string AppendToAuditStream(internal::ClientCore& core, const ReleaseFields& f,
                                int64_t released, const AuditOptions& audit,
                                std::chrono::milliseconds deadline) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"ts", f.ts},
      {"action", "release_all"},
      {"actor", f.action.actor},
      {"reason", f.action.reason},
      {"limiter", f.limiter},
      {"id", f.encoded_id},
      {"key", f.key},
      {"released", std::to_string(released)}};
  Status appended = internal::WaitFor<Status>([&](std::function<void(Status)> done_cb) {
    core.store->AppendToStream(core.options.prefix + ":audit", std::move(fields),
                               audit.stream_max_len, audit.stream_retention.count(),
                               std::chrono::steady_clock::now() + deadline, std::move(done_cb));
  });
  return appended.ok() ? std::string() : appended.ToString();
}

}  // namespace

StatusOr<ReleaseAllResult> ReleaseAll(const ConcurrencyLimiter& limiter, std::string_view id,
                                      const AdminAction& action, const AuditOptions& audit,
                                      std::chrono::milliseconds deadline) {
  const std::shared_ptr<internal::ClientCore>& core = limiter.core_;
  if (Status s = CheckReleaseAll(id, action, audit, deadline); !s.ok()) return s;
  AuditRecord record(audit.log_path);
  if (Status s = record.Open(); !s.ok()) return s;

  internal::LeaseCall call;
  call.args.op = internal::LeaseOp::kReleaseAll;
  call.key = internal::MakeLeaseKey(limiter.key_head_, id);
  if (core->options.model_clock) call.now_ms = core->options.model_clock->NowMs();
  const ReleaseFields fields{action, limiter.name_, IsoTime(std::chrono::system_clock::now()),
                             internal::EncodeId(id), call.key};
  const std::string head = RecordHead(fields);
  if (Status s = record.Append(head); !s.ok()) return s;

  call.deadline = std::chrono::steady_clock::now() + deadline;
  auto released =
      internal::WaitFor<StatusOr<internal::LeaseResult>>([&](internal::LeaseCallback done) {
        core->store->RunLease(std::move(call), std::move(done));
      });
  if (!released.ok()) return ReleaseNotConfirmed(released.status(), record, audit.log_path);

  ReleaseAllResult result;
  result.released = released->reply.count;
  const std::string done =
      Tail("\"outcome\":\"done\",\"store_ms\":" + std::to_string(released->reply.now_ms) +
           ",\"released\":" + std::to_string(result.released));
  if (Status written = record.Finish(done); !written.ok()) {
    return InternalError("released " + std::to_string(result.released) + " leases of " +
                         fields.key + " but " + written.message());
  }
  result.record = head + done;
  if (audit.stream) {
    result.stream_error = AppendToAuditStream(*core, fields, result.released, audit, deadline);
  }
  return result;
}

}  // namespace sluice

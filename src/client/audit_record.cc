// The audit record of an operator's action: see audit_record.h.
#include "client/audit_record.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "client/client_core.h"
#include "core/wait.h"

namespace sluice::internal {

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

std::string AuditTail(const std::string& fields) {
  std::string tail = fields;
  if (tail.size() < kAuditTailBytes) tail.append(kAuditTailBytes - tail.size(), ' ');
  tail += '}';
  return tail;
}

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

std::string AuditRecordHead(const AuditFields& f) {
  std::string head;
  head += "{\"ts\":";
  AppendJsonString(head, f.ts);
  head += ",\"op\":\"" + OperationId() + "\"";
  head += ",\"action\":";
  AppendJsonString(head, f.name);
  head += ",\"actor\":";
  AppendJsonString(head, f.action.actor);
  head += ",\"reason\":";
  AppendJsonString(head, f.action.reason);
  head += ",\"limiter\":";
  AppendJsonString(head, f.limiter);
  if (!f.algorithm.empty()) {
    head += ",\"algorithm\":";
    AppendJsonString(head, f.algorithm);
  }
  head += ",\"id\":";
  AppendJsonString(head, f.encoded_id);
  head += ",\"key\":";
  AppendJsonString(head, f.key);
  head += ",";
  return head;
}

std::vector<std::pair<std::string, std::string>> AuditStreamFields(
    const AuditFields& f, std::vector<std::pair<std::string, std::string>> extra) {
  std::vector<std::pair<std::string, std::string>> fields = {{"ts", f.ts},
                                                             {"action", std::string(f.name)},
                                                             {"actor", f.action.actor},
                                                             {"reason", f.action.reason},
                                                             {"limiter", f.limiter}};
  if (!f.algorithm.empty()) fields.emplace_back("algorithm", std::string(f.algorithm));
  fields.emplace_back("id", f.encoded_id);
  fields.emplace_back("key", f.key);
  for (auto& e : extra) fields.push_back(std::move(e));
  return fields;
}

Status CheckAuditedAction(std::string_view what, std::string_view id, const AdminAction& action,
                          const AuditOptions& audit, std::chrono::milliseconds deadline) {
  const std::string w(what);
  if (id.empty()) return InvalidArgumentError("id is empty");
  if (action.actor.empty()) return InvalidArgumentError(w + " needs an actor (who)");
  if (action.reason.empty()) return InvalidArgumentError(w + " needs a reason (why)");
  if (!PrintableUtf8(action.actor) || !PrintableUtf8(action.reason)) {
    return InvalidArgumentError("actor and reason must be UTF-8 text without control characters");
  }
  if (audit.log_path.empty()) {
    return InvalidArgumentError(w + " needs an audit log (AuditOptions::log_path)");
  }
  if (audit.stream && (audit.stream_max_len < 1 || audit.stream_retention.count() < 1)) {
    return InvalidArgumentError("the audit stream needs stream_max_len >= 1 and a retention > 0");
  }
  if (deadline.count() <= 0) return InvalidArgumentError("deadline must be > 0 ms");
  return Status::Ok();
}

AuditRecord::~AuditRecord() {
  if (fd_ >= 0) ::close(fd_);
}

Status AuditRecord::Open() {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd_ < 0) {
    return FailedPreconditionError("cannot open the audit log " + path_ + ": " +
                                   std::strerror(errno) + " (nothing was done)");
  }
  return Status::Ok();
}

Status AuditRecord::Append(const std::string& head) {
  const std::string pending = AuditTail("\"outcome\":\"pending\"");
  const std::string intent = head + pending + "\n";
  if (::write(fd_, intent.data(), intent.size()) != static_cast<ssize_t>(intent.size()) ||
      ::fsync(fd_) != 0) {
    return FailedPreconditionError("cannot write the audit record to " + path_ + ": " +
                                   std::strerror(errno) + " (nothing was done)");
  }
  // O_APPEND put it at the end whatever other writers did; the descriptor's offset is
  // now just past it. pwrite ignores the offset only without O_APPEND (Linux).
  tail_at_ = ::lseek(fd_, 0, SEEK_CUR) - static_cast<off_t>(pending.size() + 1);
  const int flags = ::fcntl(fd_, F_GETFL);
  can_update_ = tail_at_ > 0 && flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_APPEND) == 0;
  return Status::Ok();
}

Status AuditRecord::Finish(const std::string& tail) const {
  if (!can_update_ || tail.size() != kAuditTailBytes + 1 ||
      ::pwrite(fd_, tail.data(), tail.size(), tail_at_) != static_cast<ssize_t>(tail.size()) ||
      ::fsync(fd_) != 0) {
    return InternalError("could not write the outcome into the audit record in " + path_ +
                         " (it says \"pending\"): " + std::strerror(errno) + "; outcome: {" + tail +
                         "}");
  }
  return Status::Ok();
}

Status ActionNotConfirmed(std::string_view what, const Status& error, const AuditRecord& record,
                          const std::string& log_path) {
  const StatusCode code = error.code();
  const bool unknown = code == StatusCode::kDeadlineExceeded || code == StatusCode::kUnavailable;
  const std::string tail =
      AuditTail(std::string("\"outcome\":\"") + (unknown ? "unknown" : "failed") +
                "\",\"error\":\"" + std::string(StatusCodeName(code)) + "\"");
  Status written = record.Finish(tail);
  return Status(code,
                error.message() +
                    (unknown ? "; " + std::string(what) + " may have happened or may still happen: "
                             : std::string("; ")) +
                    (written.ok() ? "recorded in " + log_path : written.message()));
}

std::string AppendToAuditStream(ClientCore& core,
                                std::vector<std::pair<std::string, std::string>> fields,
                                const AuditOptions& audit, std::chrono::milliseconds deadline) {
  Status appended = WaitFor<Status>([&](std::function<void(Status)> done_cb) {
    core.store->AppendToStream(core.options.prefix + ":audit", std::move(fields),
                               audit.stream_max_len, audit.stream_retention.count(),
                               std::chrono::steady_clock::now() + deadline, std::move(done_cb));
  });
  return appended.ok() ? std::string() : appended.ToString();
}

}  // namespace sluice::internal

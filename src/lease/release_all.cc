// The operators' "release every lease of this id", with its audit record.
//
// Order of events, so that no action goes unrecorded and no record describes an action
// that did not happen: open the audit log (create it if missing) → release in the store
// (one script: count the live leases, delete the set) → append the record with one
// write(2) on an O_APPEND descriptor and fsync → optionally the stream. A store failure
// writes nothing; a log that cannot be opened stops the action before the store.
#include "sluice/lease.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/client_core.h"
#include "core/keys.h"
#include "core/wait.h"
#include "lease/concurrency.h"

namespace sluice {
namespace {

// True for well-formed UTF-8 without control characters: what may go into a record.
bool PrintableUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return false;
      ++i;
      continue;
    }
    int extra;
    if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
    } else {
      return false;
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
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
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}


}  // namespace

StatusOr<ReleaseAllResult> ConcurrencyLimiter::ReleaseAll(std::string_view id,
                                                          const AdminAction& action,
                                                          const AuditOptions& audit,
                                                          std::chrono::milliseconds deadline) const {
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

  const int fd = ::open(audit.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return FailedPreconditionError("cannot open the audit log " + audit.log_path + ": " +
                                   std::strerror(errno) + " (nothing was released)");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  internal::LeaseCall call;
  call.args.op = internal::LeaseOp::kReleaseAll;
  call.key = internal::MakeLeaseKey(key_head_, id);
  if (core_->options.model_clock) call.now_ms = core_->options.model_clock->NowMs();
  call.deadline = std::chrono::steady_clock::now() + deadline;
  const std::string key = call.key;
  auto released = internal::WaitFor<StatusOr<internal::LeaseResult>>([&](internal::LeaseCallback done) {
    core_->store->Lease(std::move(call), std::move(done));
  });
  if (!released.ok()) return released.status();

  ReleaseAllResult result;
  result.released = released->reply.count;
  const std::string ts = IsoTime(std::chrono::system_clock::now());
  const std::string encoded = internal::EncodeId(id);
  std::string& r = result.record;
  r += "{\"ts\":";
  AppendJsonString(r, ts);
  r += ",\"store_ms\":" + std::to_string(released->reply.now_ms);
  r += ",\"action\":\"release_all\",\"actor\":";
  AppendJsonString(r, action.actor);
  r += ",\"reason\":";
  AppendJsonString(r, action.reason);
  r += ",\"limiter\":";
  AppendJsonString(r, name_);
  r += ",\"id\":";  // as encoded in keys: printable ASCII, reversible (%XX)
  AppendJsonString(r, encoded);
  r += ",\"key\":";
  AppendJsonString(r, key);
  r += ",\"released\":" + std::to_string(result.released) + "}";

  const std::string line = r + "\n";
  const ssize_t n = ::write(fd, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()) || ::fsync(fd) != 0) {
    return InternalError("released " + std::to_string(result.released) + " leases of " + key +
                         " but could not write the audit record to " + audit.log_path + ": " +
                         std::strerror(errno) + "; record: " + r);
  }
  if (audit.stream) {
    std::vector<std::pair<std::string, std::string>> fields = {
        {"ts", ts},           {"action", "release_all"}, {"actor", action.actor},
        {"reason", action.reason}, {"limiter", name_},   {"id", encoded},
        {"key", key},         {"released", std::to_string(result.released)}};
    Status appended = internal::WaitFor<Status>([&](std::function<void(Status)> done) {
      core_->store->AppendToStream(core_->options.prefix + ":audit", std::move(fields),
                                   audit.stream_max_len, audit.stream_retention.count(),
                                   std::chrono::steady_clock::now() + deadline, std::move(done));
    });
    if (!appended.ok()) {
      result.stream_error = appended.ToString();
    }
  }
  return result;
}

}  // namespace sluice

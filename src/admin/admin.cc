// The admin API (include/sluice/admin.h): SCAN batches and their scripts
// (src/admin/scan_batch.lua, expire_batch.lua) over one BlockingClient. Key names are
// parsed in key_names.cc; stored values are described in key_state.cc by the decoders
// beside each algorithm.
#include "sluice/admin.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <future>
#include <string>

#include "admin/key_set.h"
#include "admin/key_state.h"
#include "core/keys.h"
#include "redis/blocking_client.h"
#include "redis/endpoint.h"
#include "redis/reply.h"
#include "redis/resp.h"

namespace sluice {
namespace internal {
extern const std::string_view kScanBatchLua;    // src/admin/scan_batch.lua
extern const std::string_view kExpireBatchLua;  // src/admin/expire_batch.lua
}  // namespace internal

namespace {

using internal::Reply;

KeyType ParseType(std::string_view s) {
  if (s == "string") return KeyType::kString;
  if (s == "zset") return KeyType::kZset;
  if (s == "none") return KeyType::kNone;
  if (s == "hash") return KeyType::kHash;
  if (s == "list") return KeyType::kList;
  if (s == "set") return KeyType::kSet;
  if (s == "stream") return KeyType::kStream;
  return KeyType::kOther;
}

enum AdminScript { kScanBatch = 0, kExpireBatch = 1 };

}  // namespace

struct Admin::Impl {
  AdminOptions options;
  std::unique_ptr<internal::BlockingClient> redis;
};

Admin::Admin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Admin::~Admin() = default;

const AdminOptions& Admin::options() const {
  return impl_->options;
}

StatusOr<std::unique_ptr<Admin>> Admin::Connect(AdminOptions options) {
  if (Status s = internal::ValidateName("prefix", options.prefix); !s.ok()) return s;
  if (options.url == "memory://") {
    return InvalidArgumentError("memory:// is one process's embedded store: nothing to administer");
  }
  if (options.command_timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return InvalidArgumentError("command_timeout and connect_timeout must be > 0 ms");
  }
  if (options.scan_count < 1) return InvalidArgumentError("scan_count must be >= 1");
  auto endpoint = internal::ParseRedisUrl(options.url);
  if (!endpoint.ok()) return endpoint.status();
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  internal::BlockingClientOptions copts;
  copts.connect_timeout = impl->options.connect_timeout;
  copts.command_timeout = impl->options.command_timeout;
  // A SCAN batch's replies can take a while on a busy server; the deadline is the guard.
  // The connection is closed only when nothing came back for as long as every attempt
  // of a call may take (a call that misses its deadline is sent again, 3 attempts in
  // all), so a stall that a retry outlasts does not break the calls in flight.
  copts.stall_timeout = 3 * impl->options.command_timeout;
  copts.scripts = {{"sluice_admin_scan_batch", internal::kScanBatchLua},
                   {"sluice_admin_expire_batch", internal::kExpireBatchLua}};
  auto redis = internal::BlockingClient::Connect(std::move(*endpoint), std::move(copts));
  if (!redis.ok()) return redis.status();
  impl->redis = std::move(*redis);
  return std::unique_ptr<Admin>(new Admin(std::move(impl)));
}

StatusOr<int64_t> Admin::DbSize() {
  auto r = impl_->redis->Exec({internal::FormatCommand({"DBSIZE"})});
  if (!r.ok()) return r.status();
  if ((*r)[0].type != Reply::Type::kInteger) return impl_->redis->Unexpected("DBSIZE");
  return static_cast<int64_t>((*r)[0].integer);
}

StatusOr<int64_t> Admin::NowMs() {
  auto r = impl_->redis->Exec({internal::FormatCommand({"TIME"})});
  if (!r.ok()) return r.status();
  auto now = internal::TimeMs((*r)[0]);
  if (!now) return impl_->redis->Unexpected("TIME");
  return *now;
}

Status Admin::Scan(const ScanOptions& scan, const std::function<bool(const ScanBatch&)>& on_batch) {
  std::string pattern = impl_->options.prefix + ":*";
  if (!scan.limiter.empty()) {
    if (Status s = internal::ValidateName("limiter name", scan.limiter); !s.ok()) return s;
    // `{` is not special in a glob; the prefix and limiter names hold no glob characters.
    pattern = internal::KeyHead(impl_->options.prefix, scan.limiter) + "*";
  }
  if (scan.cursor.empty() || scan.cursor.size() > 20 ||
      !std::all_of(scan.cursor.begin(), scan.cursor.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgumentError("a scan cursor is a decimal number (ScanBatch::cursor), got \"" +
                                scan.cursor + "\"");
  }
  // SCAN visits COUNT buckets whatever MATCH keeps. When few keys of the database match
  // (a limiter among many, a small prefix in a big database), COUNT grows up to 4x so
  // that fewer sequential round trips walk the table; each SCAN still blocks Redis only
  // a few milliseconds.
  const size_t base_count = impl_->options.scan_count;
  size_t count = base_count;
  auto scan_round = [&](const std::string& cursor) {
    return impl_->redis->ExecAsync({internal::FormatCommand({"SCAN", cursor, "MATCH", pattern,
                                                             "COUNT", std::to_string(count)}),
                                    internal::FormatCommand({"TIME"})});
  };
  // Redis is the bound (SCAN, TYPE and PTTL cost it ~3 us per key), so it is never left
  // idle: the next SCAN is sent as soon as the last one is answered, and up to kDepth
  // batch scripts are in flight while the client decodes an earlier batch.
  constexpr size_t kDepth = 4;
  struct InFlight {
    std::vector<std::string> keys;
    int64_t now_ms = 0;
    std::string cursor;                // SCAN's cursor after this batch
    int64_t scanned = 0, repeats = 0;  // so far, this batch included
    std::future<internal::BlockingClient::Replies> details;
  };
  std::deque<InFlight> in_flight;
  // A round trip that misses its deadline is sent again (kAttempts in all): SCAN from a
  // cursor and the read-only batch script give the same answer twice.
  constexpr int kAttempts = 3;
  const auto retried = [&](std::future<internal::BlockingClient::Replies> first,
                           const auto& resend) {
    auto replies = impl_->redis->Checked(first.get());
    for (int attempt = 1; attempt < kAttempts && !replies.ok() &&
                          replies.status().code() == StatusCode::kDeadlineExceeded;
         ++attempt) {
      replies = impl_->redis->Checked(resend().get());
    }
    return replies;
  };
  const auto batch_args = [&](int64_t now_ms) {
    return std::vector<std::string>{std::to_string(now_ms), scan.read_leaked_values ? "1" : "0"};
  };
  std::string next_cursor = scan.cursor;  // the cursor `next` was sent with
  auto next = scan_round(next_cursor);
  bool scanning = true;
  int64_t scanned = 0, repeats = 0;
  internal::KeyHashSet seen;
  while (scanning || !in_flight.empty()) {
    if (scanning && in_flight.size() < kDepth) {
      auto round = retried(std::move(next), [&] { return scan_round(next_cursor); });
      if (!round.ok()) return round.status();
      const Reply& sr = (*round)[0];
      auto now = internal::TimeMs((*round)[1]);
      if (sr.type != Reply::Type::kArray || sr.elements.size() != 2 ||
          sr.elements[1].type != Reply::Type::kArray || !now) {
        return impl_->redis->Unexpected("SCAN");
      }
      const std::string cursor = sr.elements[0].str;
      const size_t matched = sr.elements[1].elements.size();
      if (matched * 2 < base_count && count < 4 * base_count) {
        count *= 2;
      } else if (matched > 2 * base_count && count > base_count) {
        count /= 2;
      }
      scanning = cursor != "0";
      if (scanning) {
        next_cursor = cursor;
        next = scan_round(cursor);
      }
      scanned += static_cast<int64_t>(matched);
      InFlight f;
      f.now_ms = *now;
      f.cursor = cursor;
      f.scanned = scanned;
      f.keys.reserve(matched);
      for (const Reply& k : sr.elements[1].elements) {
        if (scan.distinct && !seen.Insert(k.str)) {
          ++repeats;
          continue;
        }
        f.keys.push_back(k.str);
      }
      f.repeats = repeats;
      if (f.keys.empty()) {
        if (!in_flight.empty()) {
          // Its batch now ends here.
          in_flight.back().cursor = cursor;
          in_flight.back().scanned = scanned;
          in_flight.back().repeats = repeats;
          continue;
        }
        // Nothing to report and nothing pending: an empty batch tells where SCAN stands.
        ScanBatch empty;
        empty.now_ms = *now;
        empty.scanned = scanned;
        empty.repeats = repeats;
        empty.cursor = cursor;
        if (!on_batch(empty)) return Status::Ok();
        continue;
      }
      f.details = impl_->redis->EvalAsync(kScanBatch, f.keys, batch_args(f.now_ms));
      in_flight.push_back(std::move(f));
      continue;
    }
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    std::vector<std::string>& keys = f.keys;
    auto details = retried(std::move(f.details), [&] {
      return impl_->redis->EvalAsync(kScanBatch, keys, batch_args(f.now_ms));
    });
    if (!details.ok()) return details.status();
    const Reply& flat = (*details)[0];
    if (flat.type != Reply::Type::kArray || flat.elements.size() != 5 * keys.size()) {
      return impl_->redis->Unexpected("the scan batch script");
    }
    ScanBatch batch;
    batch.now_ms = f.now_ms;
    batch.cursor = std::move(f.cursor);
    static constexpr KeyType kTypes[] = {KeyType::kNone,   KeyType::kString, KeyType::kList,
                                         KeyType::kSet,    KeyType::kZset,   KeyType::kHash,
                                         KeyType::kStream, KeyType::kOther};
    batch.keys.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ScannedKey& key = batch.keys[i];
      const Reply* r = &flat.elements[5 * i];
      key.key = std::move(keys[i]);
      key.type = kTypes[std::clamp<long long>(r[0].integer, 0, 7)];
      key.ttl_ms = r[1].integer;
      key.name = ParseKeyName(impl_->options.prefix, key.key);
      if (!key.name) continue;
      if (key.type != ExpectedKeyType(key.name->suffix)) {
        key.name.reset();  // vanished, or not sluice's
        continue;
      }
      key.members = r[2].integer;
      key.stale = r[3].integer;
      bool is_bound = false;
      if (auto ends = internal::StateEndsAt(key.name->suffix, r[4], f.now_ms, is_bound)) {
        key.ends_at_ms = *ends;
        key.ends_at_is_bound = is_bound;
      }
    }
    batch.scanned = f.scanned;
    batch.repeats = f.repeats;
    // Calls still in flight complete into their own shared state: nothing waits on them.
    if (!on_batch(batch)) return Status::Ok();
  }
  return Status::Ok();
}

StatusOr<std::vector<KeyState>> Admin::ReadKeys(std::span<const std::string> keys) {
  std::vector<std::string> commands;
  commands.reserve(1 + keys.size() * 5);
  commands.push_back(internal::FormatCommand({"TIME"}));
  std::vector<KeyState> states(keys.size());
  std::vector<size_t> first_command(keys.size());
  const std::string max_lease = std::to_string(kMaxLeasesRead - 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    KeyState& s = states[i];
    s.key = keys[i];
    s.name = ParseKeyName(impl_->options.prefix, s.key);
    first_command[i] = commands.size();
    commands.push_back(internal::FormatCommand({"TYPE", s.key}));
    commands.push_back(internal::FormatCommand({"PTTL", s.key}));
    if (!s.name) continue;
    if (ExpectedKeyType(s.name->suffix) == KeyType::kString) {
      commands.push_back(internal::FormatCommand({"GET", s.key}));
    } else if (s.name->suffix == "sl") {
      commands.push_back(internal::FormatCommand({"ZCARD", s.key}));
      commands.push_back(internal::FormatCommand({"ZRANGE", s.key, "0", "0", "WITHSCORES"}));
      commands.push_back(internal::FormatCommand({"ZRANGE", s.key, "-1", "-1", "WITHSCORES"}));
    } else if (s.name->suffix == "cc") {
      commands.push_back(internal::FormatCommand({"ZCARD", s.key}));
      commands.push_back(internal::FormatCommand({"ZRANGE", s.key, "0", max_lease, "WITHSCORES"}));
      commands.push_back(internal::FormatCommand({"ZRANGE", s.key, "-1", "-1", "WITHSCORES"}));
    }
  }
  auto replies = impl_->redis->Exec(std::move(commands));
  if (!replies.ok()) return replies.status();
  auto now = internal::TimeMs((*replies)[0]);
  if (!now) return impl_->redis->Unexpected("TIME");
  for (size_t i = 0; i < keys.size(); ++i) {
    KeyState& s = states[i];
    const Reply* r = &(*replies)[first_command[i]];
    s.type = ParseType(r[0].str);
    s.ttl_ms = r[1].type == Reply::Type::kInteger ? r[1].integer : -2;
    if (!s.name) continue;
    const KeyType expected = ExpectedKeyType(s.name->suffix);
    if (s.type == KeyType::kNone) {
      s.name.reset();
      continue;
    }
    if (s.type != expected) {
      s.problem = "holds a " + std::string(KeyTypeName(s.type)) + "; sluice stores a " +
                  std::string(KeyTypeName(expected)) + " under :" + s.name->suffix;
      s.name.reset();
      continue;
    }
    const std::string& suffix = s.name->suffix;
    if (expected == KeyType::kString) {
      if (r[2].type != Reply::Type::kString) continue;  // expired in between
      const std::string& v = r[2].str;
      internal::DescribeStringValue(suffix, v, *now, s);
    } else if (expected == KeyType::kZset) {
      s.members = r[2].type == Reply::Type::kInteger ? r[2].integer : 0;
      if (s.members == 0) continue;
      if (suffix == "sl") {
        internal::DescribeSlidingLog(r[3], r[4], s);
      } else {
        internal::DescribeLeases(r[3], r[4], *now, s);
      }
    }
  }
  // Sets with more leases than were read, every one read stale: how many of the rest
  // are stale too (a set of 20,000 dead holders has no live lease).
  std::vector<size_t> uncounted;
  std::vector<std::string> counts;
  const std::string stale_at = std::to_string(*now);
  for (size_t i = 0; i < states.size(); ++i) {
    const KeyState& s = states[i];
    if (s.name && s.name->suffix == "cc" && s.problem.empty() &&
        s.members > static_cast<int64_t>(s.leases.size()) && !s.leases.empty() &&
        s.leases.back().expires_at_ms <= *now) {
      uncounted.push_back(i);
      counts.push_back(internal::FormatCommand({"ZCOUNT", s.key, "-inf", stale_at}));
    }
  }
  if (!uncounted.empty()) {
    auto counted = impl_->redis->Exec(std::move(counts));
    if (!counted.ok()) return counted.status();
    for (size_t j = 0; j < uncounted.size(); ++j) {
      KeyState& s = states[uncounted[j]];
      const Reply& r = (*counted)[j];
      if (r.type != Reply::Type::kInteger) continue;  // gone or replaced in between
      const int64_t stale = std::min<int64_t>(r.integer, s.members);
      for (StateField& f : s.fields) {
        if (f.name == "live") f.value = s.members - stale;
        if (f.name == "stale") f.value = stale;
      }
      s.used = s.members - stale;
    }
  }
  return states;
}

StatusOr<IdState> Admin::Inspect(std::string_view limiter, std::string_view id) {
  if (Status s = internal::ValidateName("limiter name", limiter); !s.ok()) return s;
  if (id.empty()) return InvalidArgumentError("id is empty");
  IdState state;
  state.limiter = std::string(limiter);
  state.id = std::string(id);
  state.encoded_id = internal::EncodeId(id);
  std::vector<std::string> keys;
  const std::string head =
      internal::KeyHead(impl_->options.prefix, limiter) + state.encoded_id + "}:";
  for (std::string_view suffix : internal::kKeySuffixes) keys.push_back(head + std::string(suffix));
  auto now = NowMs();
  if (!now.ok()) return now.status();
  state.now_ms = *now;
  auto read = ReadKeys(keys);
  if (!read.ok()) return read.status();
  for (KeyState& k : *read) {
    if (k.type != KeyType::kNone) state.keys.push_back(std::move(k));
  }
  return state;
}

StatusOr<ExpireResult> Admin::ExpireIfNone(
    std::span<const std::pair<std::string, std::chrono::seconds>> keys) {
  for (const auto& [key, ttl] : keys) {
    if (!ParseKeyName(impl_->options.prefix, key)) {
      return InvalidArgumentError("refusing to touch \"" + key +
                                  "\": not a sluice key under prefix \"" + impl_->options.prefix +
                                  "\"");
    }
    if (ttl.count() < 1) {
      return InvalidArgumentError("ttl for \"" + key + "\" must be >= 1 s, got " +
                                  std::to_string(ttl.count()));
    }
  }
  // One script call per chunk of kChunk keys, at most kInFlight of them sent and not
  // yet answered: Redis stays busy (the next call is queued behind the one it runs)
  // while each call's deadline, set when it is sent, covers only its own round trip and
  // the few queued before it, however many keys there are. A call that misses its
  // deadline is sent again, up to kAttempts in all: the script changes nothing it has
  // already changed (a key it gave an expiry has one), so a late first attempt and the
  // retry together do it once; its keys then count as having had an expiry.
  constexpr size_t kChunk = 1000;
  constexpr size_t kInFlight = 4;
  constexpr int kAttempts = 3;
  struct Call {
    std::vector<std::string> keys, args;
    int attempt = 1;
    std::future<internal::BlockingClient::Replies> reply;
  };
  ExpireResult result;
  std::deque<Call> calls;
  Status failure;
  const auto collect = [&] {
    Call call = std::move(calls.front());
    calls.pop_front();
    auto replies = impl_->redis->Checked(call.reply.get());
    while (!replies.ok() && replies.status().code() == StatusCode::kDeadlineExceeded &&
           call.attempt < kAttempts) {
      ++call.attempt;
      replies =
          impl_->redis->Checked(impl_->redis->EvalAsync(kExpireBatch, call.keys, call.args).get());
    }
    if (!replies.ok()) {
      if (failure.ok()) failure = replies.status();
      return;
    }
    const Reply& r = (*replies)[0];
    if (r.type != Reply::Type::kArray) {
      if (failure.ok()) failure = impl_->redis->Unexpected("the expire batch script");
      return;
    }
    for (const Reply& e : r.elements) {
      if (e.integer == 1) ++result.set;
      if (e.integer == 0) ++result.had_ttl;
      if (e.integer == -1) ++result.missing;
      if (e.integer == -2) ++result.foreign;
    }
  };
  for (size_t start = 0; start < keys.size() && failure.ok(); start += kChunk) {
    Call call;
    for (size_t i = start; i < std::min(keys.size(), start + kChunk); ++i) {
      const std::string& key = keys[i].first;
      call.keys.push_back(key);
      call.args.push_back(std::to_string(keys[i].second.count()));
      const auto name = ParseKeyName(impl_->options.prefix, key);
      call.args.emplace_back(KeyTypeName(ExpectedKeyType(name->suffix)));
    }
    if (calls.size() == kInFlight) collect();
    if (!failure.ok()) break;
    call.reply = impl_->redis->EvalAsync(kExpireBatch, call.keys, call.args);
    calls.push_back(std::move(call));
  }
  while (!calls.empty()) collect();
  if (!failure.ok()) return failure;
  return result;
}

}  // namespace sluice

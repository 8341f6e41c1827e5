// The admin surface (include/sluice/admin.h): one pipelined Connection on a private I/O
// thread, blocking calls on top of it, and the decoders of every algorithm's stored
// value (the formats are documented at the top of each src/algo/<name>.lua).
#include "sluice/admin.h"

#include <utility>  // before Boost (Asio 1.74 + g++ 12)

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <hiredis/hiredis.h>

#include "admin/key_set.h"
#include "core/keys.h"
#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/resp.h"
#include "sluice/limits.h"

namespace sluice {
namespace {

using internal::Connection;

// A reply copied out of hiredis's buffer (valid only inside the callback).
struct Reply {
  enum class Kind { kNil, kInteger, kString, kArray, kError } kind = Kind::kNil;
  long long integer = 0;
  std::string str;
  std::vector<Reply> elements;
};

Reply Copy(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.kind = Reply::Kind::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.kind = Reply::Kind::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.kind = Reply::Kind::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.kind = Reply::Kind::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Copy(r->element[i]));
      break;
    default:
      break;
  }
  return out;
}

bool IsNameByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == '-';
}

// The byte internal::EncodeId escapes (it must, so an escape of any other byte is not
// canonical and the key is not one sluice wrote).
bool MustEscape(unsigned char c) {
  return c <= 0x20 || c >= 0x7f || c == '%' || c == '{' || c == '}' || c == '#';
}

int HexValue(char c, bool upper) {
  if (c >= '0' && c <= '9') return c - '0';
  if (upper && c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (!upper && c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Decodes a canonical encoded id (internal::EncodeId's output); false when it is not one.
bool DecodeId(std::string_view encoded, std::optional<std::string>& id) {
  if (encoded.empty()) return false;
  if (encoded[0] == '#') {
    if (encoded.size() != 65) return false;
    for (char c : encoded.substr(1)) {
      if (HexValue(c, false) < 0) return false;
    }
    id.reset();
    return true;
  }
  if (encoded.size() > internal::kMaxEncodedIdBytes) return false;
  std::string out;
  out.reserve(encoded.size());
  for (size_t i = 0; i < encoded.size(); ++i) {
    const auto c = static_cast<unsigned char>(encoded[i]);
    if (c == '%') {
      if (i + 2 >= encoded.size()) return false;
      const int hi = HexValue(encoded[i + 1], true), lo = HexValue(encoded[i + 2], true);
      if (hi < 0 || lo < 0) return false;
      const auto b = static_cast<unsigned char>(hi * 16 + lo);
      if (!MustEscape(b)) return false;
      out.push_back(static_cast<char>(b));
      i += 2;
    } else {
      if (MustEscape(c)) return false;
      out.push_back(static_cast<char>(c));
    }
  }
  id = std::move(out);
  return true;
}

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

constexpr std::string_view kSuffixes[] = {"fw", "sw", "sl", "tb", "gcra", "cc"};

// The admin scripts. Like every sluice script they are the only copy of their code;
// they live here rather than in src/algo/ because they belong to no algorithm and no
// limiter calls them. Each runs over one SCAN batch (about AdminOptions::scan_count
// keys), so Redis is blocked for about a millisecond per call and serves other clients
// between batches; one call replaces thousands of pipelined commands, which is what
// makes a scan of a million keys take seconds on the client side instead of tens.

// KEYS     the keys of one SCAN batch
// ARGV     now ms (the Redis clock when the batch was scanned), "1" to read the value of
//          keys without an expiry (else "0")
// Returns  5 items per key: type code (0 none, 1 string, 2 list, 3 set, 4 zset, 5 hash,
//          6 stream, 7 other), PTTL, ZCARD (-1 if not a zset), leases whose expiry is
//          at or before now (`:cc` sets, live while now < score; -1 otherwise), and for a
//          key without an expiry (when asked) its value: a string's bytes, a sorted
//          set's highest score (ZRANGE -1 -1 WITHSCORES: a `:cc` set's last expiry, a
//          `:sl` log's newest entry), else false.
// TTL rule: reads only (flags=no-writes): it creates, changes and expires nothing.
constexpr std::string_view kScanBatchLua = R"lua(#!lua flags=no-writes
local call = redis.call
local codes = {none = 0, string = 1, list = 2, set = 3, zset = 4, hash = 5, stream = 6}
local stale_at = ARGV[1]
local values = ARGV[2] == '1'
local out = {}
local n = 0
for i = 1, #KEYS do
  local key = KEYS[i]
  local t = call('TYPE', key).ok
  local ttl = call('PTTL', key)
  local members, stale, value = -1, -1, false
  local cc = string.sub(key, -3) == ':cc'
  if t == 'zset' then
    members = call('ZCARD', key)
    if cc then stale = call('ZCOUNT', key, '-inf', stale_at) end
  end
  if values and ttl == -1 then
    if t == 'string' then
      value = call('GET', key)
    elseif t == 'zset' then
      local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
      if last[2] then value = last[2] end
    end
  end
  out[n + 1] = codes[t] or 7
  out[n + 2] = ttl
  out[n + 3] = members
  out[n + 4] = stale
  out[n + 5] = value
  n = n + 5
end
return out
)lua";

// KEYS     keys to give an expiry
// ARGV     for KEYS[i]: ARGV[2i-1] its expiry in seconds, ARGV[2i] the Redis type sluice
//          stores under its suffix ("string", "zset", "stream")
// Returns  one integer per key: 1 it had no expiry and got one, 0 it had an expiry (left
//          as it was), -1 it does not exist, -2 it holds another type (another
//          application's value replaced sluice's since the scan: left alone).
// TTL rule: sets an expiry only on a key of sluice's type that has none (checked in this
//          same call, so nothing can change in between); never deletes, never moves an
//          existing expiry.
constexpr std::string_view kExpireBatchLua = R"lua(
local call = redis.call
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local t = call('TYPE', key).ok
  if t == 'none' then
    out[i] = -1
  elseif t ~= ARGV[2 * i] then
    out[i] = -2
  elseif call('TTL', key) ~= -1 then
    out[i] = 0
  else
    call('EXPIRE', key, ARGV[2 * i - 1])
    out[i] = 1
  end
end
return out
)lua";

enum AdminScript { kScanBatch = 0, kExpireBatch = 1 };

std::string ToDecimal(int64_t v) { return std::to_string(v); }

constexpr int64_t kMaxWindowMs = kMaxWindow.count();

// a + b, clamped to int64's range (values read from Redis may be anything).
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? INT64_MAX : INT64_MIN;
  return sum;
}

// Integers stored as doubles by the scripts: exact and in range, else nullopt.
std::optional<int64_t> DoubleToInt(double d) {
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return std::nullopt;
  return static_cast<int64_t>(d);
}

double BigEndianDouble(std::string_view bytes, size_t at) {
  uint64_t bits = 0;
  for (size_t i = 0; i < 8; ++i) {
    bits = (bits << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return std::bit_cast<double>(bits);
}

int64_t LittleEndianSigned(std::string_view bytes, size_t at, size_t width) {
  uint64_t bits = 0;
  for (size_t i = width; i-- > 0;) bits = (bits << 8) | static_cast<unsigned char>(bytes[at + i]);
  const unsigned shift = static_cast<unsigned>(64 - 8 * width);
  return static_cast<int64_t>(bits << shift) >> shift;  // sign-extend
}

std::optional<int64_t> ParseInt(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  int64_t v = 0;
  size_t i = 0;
  bool negative = s[0] == '-';
  if (negative) i = 1;
  if (i == s.size()) return std::nullopt;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  return negative ? -v : v;
}

// A score as Redis returns it (WITHSCORES, RESP2: a bulk string).
std::optional<int64_t> ParseScore(const Reply& r) {
  if (r.kind != Reply::Kind::kString) return std::nullopt;
  if (auto v = ParseInt(r.str)) return v;
  char* end = nullptr;
  const double d = std::strtod(r.str.c_str(), &end);
  if (end == r.str.c_str()) return std::nullopt;
  return DoubleToInt(std::floor(d));
}

void Add(KeyState& s, std::string name, int64_t value) {
  s.fields.push_back({std::move(name), value});
}

void DecodeFixedWindow(const std::string& v, int64_t now, KeyState& s) {
  const auto sep = v.find(':');
  std::optional<int64_t> count, ends;
  if (sep != std::string::npos) {
    count = ParseInt(std::string_view(v).substr(0, sep));
    ends = ParseInt(std::string_view(v).substr(sep + 1));
  }
  if (!count || !ends) {
    s.problem = "value is not \"<count>:<window end ms>\"";
    return;
  }
  Add(s, "count", *count);
  Add(s, "window_end_ms", *ends);
  Add(s, "window_ends_in_ms", *ends - now);
  s.used = *ends > now ? *count : 0;
  s.used_unit = "units in the window";
  s.ends_at_ms = *ends;
}

void DecodeSlidingWindow(const std::string& v, KeyState& s) {
  if (v.size() != 26 && v.size() != 20) {
    s.problem = "value is not 26 bytes (start, current, previous, window) nor 20 (no window)";
    return;
  }
  const int64_t start = LittleEndianSigned(v, 0, 8);
  const int64_t current = LittleEndianSigned(v, 8, 6);
  const int64_t previous = LittleEndianSigned(v, 14, 6);
  Add(s, "window_start_ms", start);
  Add(s, "current", current);
  Add(s, "previous", previous);
  if (v.size() == 26) Add(s, "window_ms", LittleEndianSigned(v, 20, 6));
  s.used = current + previous;
  s.used_unit = "units in this and the previous window";
}

void DecodeTokenBucket(const std::string& v, int64_t now, KeyState& s) {
  if (v.size() != 32) {
    s.problem = "value is not 32 bytes (tokens, fraction, at, full_in)";
    return;
  }
  auto tokens = DoubleToInt(BigEndianDouble(v, 0));
  auto fraction = DoubleToInt(BigEndianDouble(v, 8));
  auto at = DoubleToInt(BigEndianDouble(v, 16));
  auto full_in = DoubleToInt(BigEndianDouble(v, 24));
  if (!tokens || !fraction || !at || !full_in) {
    s.problem = "value holds a field that is not an integer";
    return;
  }
  Add(s, "missing_tokens", *tokens);
  Add(s, "missing_fraction_per_window", *fraction);
  Add(s, "written_at_ms", *at);
  Add(s, "full_at_ms", *at + *full_in);
  Add(s, "full_in_ms", std::max<int64_t>(0, *at + *full_in - now));
  s.used = *at + *full_in > now ? *tokens : 0;
  s.used_unit = "tokens missing when written";
  s.ends_at_ms = *at + *full_in;
}

void DecodeGcra(const std::string& v, int64_t now, KeyState& s) {
  // 32 bytes (TAT, fraction, refill, window); the earlier forms: a decimal TAT, or 16
  // bytes (TAT, fraction).
  std::optional<int64_t> tat = ParseInt(v), fraction = 0, refill, window;
  if (!tat && (v.size() == 16 || v.size() == 32)) {
    tat = DoubleToInt(BigEndianDouble(v, 0));
    fraction = DoubleToInt(BigEndianDouble(v, 8));
    if (v.size() == 32) {
      refill = DoubleToInt(BigEndianDouble(v, 16));
      window = DoubleToInt(BigEndianDouble(v, 24));
      if (!refill || !window) tat.reset();
    }
  }
  if (!tat || !fraction) {
    s.problem = "value is not 32 bytes (TAT, fraction, refill, window), 16 bytes (TAT, "
                "fraction) or a decimal TAT";
    return;
  }
  const int64_t full_at = *tat + (*fraction > 0 ? 1 : 0);
  Add(s, "tat_ms", *tat);
  Add(s, "tat_fraction", *fraction);
  if (refill) Add(s, "refill", *refill);
  if (window) Add(s, "window_ms", *window);
  Add(s, "full_in_ms", std::max<int64_t>(0, full_at - now));
  s.used = std::max<int64_t>(0, full_at - now);
  s.used_unit = "ms until full";
  s.ends_at_ms = full_at;
}

// A sliding-log member: one letter ('a' = 1 … 'p' = 16 digits), the start, [:cost].
bool ParseLogMember(std::string_view m, int64_t& start, int64_t& cost) {
  if (m.empty() || m[0] < 'a' || m[0] > 'p') return false;
  const size_t digits = static_cast<size_t>(m[0] - 'a' + 1);
  if (m.size() < 1 + digits) return false;
  auto s = ParseInt(m.substr(1, digits));
  if (!s) return false;
  start = *s;
  cost = 1;
  if (m.size() > 1 + digits) {
    if (m[1 + digits] != ':') return false;
    auto c = ParseInt(m.substr(2 + digits));
    if (!c) return false;
    cost = *c;
  }
  return true;
}

// ZRANGE … WITHSCORES (RESP2: member, score, member, score …).
bool Pairs(const Reply& r, std::vector<std::pair<std::string, int64_t>>& out) {
  if (r.kind != Reply::Kind::kArray || r.elements.size() % 2 != 0) return false;
  for (size_t i = 0; i < r.elements.size(); i += 2) {
    auto score = ParseScore(r.elements[i + 1]);
    if (!score || r.elements[i].kind != Reply::Kind::kString) return false;
    out.emplace_back(r.elements[i].str, *score);
  }
  return true;
}

void DecodeSlidingLog(const Reply& oldest, const Reply& newest, KeyState& s) {
  std::vector<std::pair<std::string, int64_t>> first, last;
  int64_t first_start = 0, first_cost = 0, last_start = 0, last_cost = 0;
  if (!Pairs(oldest, first) || !Pairs(newest, last) || first.size() != 1 || last.size() != 1 ||
      !ParseLogMember(first[0].first, first_start, first_cost) ||
      !ParseLogMember(last[0].first, last_start, last_cost)) {
    s.problem = "members are not sliding-log entries";
    return;
  }
  Add(s, "entries", s.members);
  Add(s, "units", last_start + last_cost - first_start);
  Add(s, "oldest_ms", first[0].second);
  Add(s, "newest_ms", last[0].second);
  s.used = last_start + last_cost - first_start;
  s.used_unit = "units in the log";
}

void DecodeLeases(const Reply& range, const Reply& newest, int64_t now, KeyState& s) {
  std::vector<std::pair<std::string, int64_t>> members, last;
  if (!Pairs(range, members) || !Pairs(newest, last)) {
    s.problem = "ZRANGE returned an unexpected reply";
    return;
  }
  int64_t live = 0, stale = 0;
  for (auto& [member, score] : members) {
    LeaseInfo lease;
    lease.acquired_at_ms = -1;
    const auto sep = member.find(':');
    if (sep != std::string::npos) {
      if (auto at = ParseInt(std::string_view(member).substr(0, sep))) lease.acquired_at_ms = *at;
    }
    lease.id = member;
    lease.expires_at_ms = score;
    (score <= now ? stale : live) += 1;
    s.leases.push_back(std::move(lease));
  }
  // Past kMaxLeasesRead the rest have later expiries: all live when the last one read is,
  // else counted by ReadKeys with a ZCOUNT.
  if (!members.empty() && members.back().second > now) {
    live += s.members - static_cast<int64_t>(members.size());
  }
  Add(s, "leases", s.members);
  Add(s, "live", live);
  Add(s, "stale", stale);
  s.used = live;
  s.used_unit = "live leases";
  if (!last.empty()) s.ends_at_ms = last[0].second;
}

}  // namespace

std::string_view KeyTypeName(KeyType type) {
  switch (type) {
    case KeyType::kNone: return "none";
    case KeyType::kString: return "string";
    case KeyType::kList: return "list";
    case KeyType::kSet: return "set";
    case KeyType::kZset: return "zset";
    case KeyType::kHash: return "hash";
    case KeyType::kStream: return "stream";
    case KeyType::kOther: return "other";
  }
  return "other";
}

KeyType ExpectedKeyType(std::string_view suffix) {
  if (suffix == "fw" || suffix == "sw" || suffix == "tb" || suffix == "gcra") {
    return KeyType::kString;
  }
  if (suffix == "sl" || suffix == "cc") return KeyType::kZset;
  if (suffix == "audit") return KeyType::kStream;
  return KeyType::kNone;
}

std::string_view SuffixAlgorithm(std::string_view suffix) {
  if (suffix == "fw") return "fixed_window";
  if (suffix == "sw") return "sliding_window";
  if (suffix == "sl") return "sliding_log";
  if (suffix == "tb") return "token_bucket";
  if (suffix == "gcra") return "gcra";
  if (suffix == "cc") return "concurrency";
  if (suffix == "audit") return "audit_log";
  return "";
}

std::optional<KeyName> ParseKeyName(std::string_view prefix, std::string_view key) {
  if (key.size() == prefix.size() + 6 && key.starts_with(prefix) && key.ends_with(":audit")) {
    return KeyName{.suffix = "audit"};
  }
  if (key.size() < prefix.size() + 2 || !key.starts_with(prefix) ||
      key.substr(prefix.size(), 2) != ":{") {
    return std::nullopt;
  }
  std::string_view rest = key.substr(prefix.size() + 2);
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > internal::kMaxNameBytes) {
    return std::nullopt;
  }
  KeyName name;
  name.limiter = std::string(rest.substr(0, colon));
  if (!std::all_of(name.limiter.begin(), name.limiter.end(), IsNameByte)) return std::nullopt;
  rest = rest.substr(colon + 1);
  const size_t close = rest.find('}');
  if (close == std::string_view::npos || rest.substr(close).size() < 3 ||
      rest[close + 1] != ':') {
    return std::nullopt;
  }
  name.encoded_id = std::string(rest.substr(0, close));
  const std::string_view suffix = rest.substr(close + 2);
  if (std::find(std::begin(kSuffixes), std::end(kSuffixes), suffix) == std::end(kSuffixes)) {
    return std::nullopt;
  }
  name.suffix = std::string(suffix);
  if (!DecodeId(name.encoded_id, name.id)) return std::nullopt;
  return name;
}

struct Admin::Impl {
  AdminOptions options;
  boost::asio::io_context io{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work{
      io.get_executor()};
  std::thread thread;
  std::shared_ptr<Connection> connection;

  ~Impl() {
    if (connection) connection->Shutdown();
    work.reset();
    if (thread.joinable()) thread.join();
  }

  // Sends `commands` pipelined; the future holds every reply in order (error replies
  // included, as kError), or the transport's error (deadline, connection lost).
  std::future<StatusOr<std::vector<Reply>>> ExecAsync(std::vector<std::string> commands) {
    std::vector<Call> calls(commands.size());
    for (size_t i = 0; i < commands.size(); ++i) calls[i].bytes = std::move(commands[i]);
    return SubmitAsync(std::move(calls));
  }

  // EVALSHA of an admin script with `keys` and `args`; the future holds its reply.
  std::future<StatusOr<std::vector<Reply>>> EvalAsync(AdminScript script,
                                                      std::span<const std::string> keys,
                                                      std::span<const std::string> args) {
    Call call;
    call.script = script;
    internal::AppendBulk(call.bytes, static_cast<int64_t>(keys.size()));
    for (const std::string& k : keys) internal::AppendBulk(call.bytes, k);
    for (const std::string& a : args) internal::AppendBulk(call.bytes, a);
    call.tail_items = static_cast<int>(1 + keys.size() + args.size());
    std::vector<Call> calls;
    calls.push_back(std::move(call));
    return SubmitAsync(std::move(calls));
  }

  // One command (bytes = FormatCommand) or one script call (bytes = Eval's tail).
  struct Call {
    int script = -1;
    std::string bytes;
    int tail_items = 0;
  };

  std::future<StatusOr<std::vector<Reply>>> SubmitAsync(std::vector<Call> commands) {
    struct Pending {
      std::mutex mu;
      std::vector<Reply> replies;
      size_t left = 0;
      Status failure;
      std::promise<StatusOr<std::vector<Reply>>> promise;
    };
    auto pending = std::make_shared<Pending>();
    pending->replies.resize(commands.size());
    pending->left = commands.size();
    auto result = pending->promise.get_future();
    if (commands.empty()) {
      pending->promise.set_value(std::vector<Reply>{});
      return result;
    }
    const auto deadline = std::chrono::steady_clock::now() + options.command_timeout;
    for (size_t i = 0; i < commands.size(); ++i) {
      auto done = [pending, i](const Status& status, const redisReply* reply) {
                         Reply copy;
                         if (reply != nullptr) copy = Copy(reply);
                         std::lock_guard lock(pending->mu);
                         if (reply != nullptr) {
                           pending->replies[i] = std::move(copy);
                         } else if (pending->failure.ok()) {
                           pending->failure = status;
                         }
                         if (--pending->left == 0) {
                           if (pending->failure.ok()) {
                             pending->promise.set_value(std::move(pending->replies));
                           } else {
                             pending->promise.set_value(pending->failure);
                           }
                         }
                       };
      if (commands[i].script >= 0) {
        connection->Eval(commands[i].script, std::move(commands[i].bytes), commands[i].tail_items,
                         deadline, std::move(done));
      } else {
        connection->Send(commands[i].bytes, deadline, std::move(done));
      }
    }
    return result;
  }

  // As ExecAsync, waited for; an error reply other than WRONGTYPE (which callers read as
  // "not sluice's") fails the whole call with its code.
  StatusOr<std::vector<Reply>> Exec(std::vector<std::string> commands) {
    return Checked(ExecAsync(std::move(commands)).get());
  }

  StatusOr<std::vector<Reply>> Checked(StatusOr<std::vector<Reply>> replies) const {
    if (!replies.ok()) return replies;
    for (const Reply& r : *replies) {
      if (r.kind == Reply::Kind::kError && !r.str.starts_with("WRONGTYPE")) {
        return internal::ErrorReplyToStatus(r.str, connection->endpoint().Describe());
      }
    }
    return replies;
  }

  static std::optional<int64_t> TimeMs(const Reply& r) {
    if (r.kind != Reply::Kind::kArray || r.elements.size() != 2) return std::nullopt;
    auto s = ParseInt(r.elements[0].str), us = ParseInt(r.elements[1].str);
    if (!s || !us) return std::nullopt;
    return *s * 1000 + *us / 1000;
  }

  Status Unexpected(std::string_view what) const {
    return InternalError("redis " + connection->endpoint().Describe() +
                         " returned an unexpected reply to " + std::string(what));
  }
};

Admin::Admin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Admin::~Admin() = default;

const AdminOptions& Admin::options() const { return impl_->options; }

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
  internal::ConnectionOptions copts;
  copts.connect_timeout = impl->options.connect_timeout;
  // A SCAN batch's replies can take a while on a busy server; the deadline is the guard.
  // The connection is closed only when nothing came back for as long as every attempt
  // of a call may take (a call that misses its deadline is sent again, 3 attempts in
  // all), so a stall that a retry outlasts does not break the calls in flight.
  copts.stall_timeout = 3 * impl->options.command_timeout;
  copts.max_in_flight = 1'000'000;
  copts.scripts = {{"sluice_admin_scan_batch", kScanBatchLua},
                   {"sluice_admin_expire_batch", kExpireBatchLua}};
  impl->connection = Connection::Make(impl->io.get_executor(), std::move(*endpoint), copts);
  impl->thread = std::thread([io = &impl->io] { io->run(); });
  auto promise = std::make_shared<std::promise<Status>>();
  auto result = promise->get_future();
  impl->connection->Start([promise](Status status) { promise->set_value(std::move(status)); });
  if (result.wait_for(impl->options.connect_timeout + std::chrono::seconds(1)) !=
      std::future_status::ready) {
    return DeadlineExceededError("connecting to redis " + impl->connection->endpoint().Describe() +
                                 " did not finish in time");
  }
  if (Status s = result.get(); !s.ok()) return s;
  return std::unique_ptr<Admin>(new Admin(std::move(impl)));
}

StatusOr<int64_t> Admin::DbSize() {
  auto r = impl_->Exec({internal::FormatCommand({"DBSIZE"})});
  if (!r.ok()) return r.status();
  if ((*r)[0].kind != Reply::Kind::kInteger) return impl_->Unexpected("DBSIZE");
  return static_cast<int64_t>((*r)[0].integer);
}

StatusOr<int64_t> Admin::NowMs() {
  auto r = impl_->Exec({internal::FormatCommand({"TIME"})});
  if (!r.ok()) return r.status();
  auto now = Impl::TimeMs((*r)[0]);
  if (!now) return impl_->Unexpected("TIME");
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
      !std::all_of(scan.cursor.begin(), scan.cursor.end(), [](char c) { return c >= '0' && c <= '9'; })) {
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
    return impl_->ExecAsync({internal::FormatCommand({"SCAN", cursor, "MATCH", pattern, "COUNT",
                                                      std::to_string(count)}),
                             internal::FormatCommand({"TIME"})});
  };
  // Redis is the bound (SCAN, TYPE and PTTL cost it ~3 us per key), so it is never left
  // idle: the next SCAN is sent as soon as the last one is answered, and up to kDepth
  // batch scripts are in flight while the client decodes an earlier batch.
  constexpr size_t kDepth = 4;
  struct InFlight {
    std::vector<std::string> keys;
    int64_t now_ms = 0;
    std::string cursor;  // SCAN's cursor after this batch
    int64_t scanned = 0, repeats = 0;  // so far, this batch included
    std::future<StatusOr<std::vector<Reply>>> details;
  };
  std::deque<InFlight> in_flight;
  // A round trip that misses its deadline is sent again (kAttempts in all): SCAN from a
  // cursor and the read-only batch script give the same answer twice.
  constexpr int kAttempts = 3;
  const auto retried = [&](std::future<StatusOr<std::vector<Reply>>> first, const auto& resend) {
    auto replies = impl_->Checked(first.get());
    for (int attempt = 1; attempt < kAttempts && !replies.ok() &&
                          replies.status().code() == StatusCode::kDeadlineExceeded;
         ++attempt) {
      replies = impl_->Checked(resend().get());
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
      auto now = Impl::TimeMs((*round)[1]);
      if (sr.kind != Reply::Kind::kArray || sr.elements.size() != 2 ||
          sr.elements[1].kind != Reply::Kind::kArray || !now) {
        return impl_->Unexpected("SCAN");
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
      f.details = impl_->EvalAsync(kScanBatch, f.keys, batch_args(f.now_ms));
      in_flight.push_back(std::move(f));
      continue;
    }
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    std::vector<std::string>& keys = f.keys;
    auto details = retried(std::move(f.details), [&] {
      return impl_->EvalAsync(kScanBatch, keys, batch_args(f.now_ms));
    });
    if (!details.ok()) return details.status();
    const Reply& flat = (*details)[0];
    if (flat.kind != Reply::Kind::kArray || flat.elements.size() != 5 * keys.size()) {
      return impl_->Unexpected("the scan batch script");
    }
    ScanBatch batch;
    batch.now_ms = f.now_ms;
    batch.cursor = std::move(f.cursor);
    const int64_t* now = &f.now_ms;
    static constexpr KeyType kTypes[] = {KeyType::kNone, KeyType::kString, KeyType::kList,
                                         KeyType::kSet,  KeyType::kZset,   KeyType::kHash,
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
      if (r[4].kind == Reply::Kind::kString) {
        const int64_t longest = kMaxWindowMs;
        if (key.name->suffix == "cc") {
          if (auto expiry = ParseScore(r[4])) key.ends_at_ms = *expiry;
        } else if (key.name->suffix == "sl") {
          // The newest entry counts until it leaves a window no longer than kMaxWindow.
          if (auto newest = ParseScore(r[4])) {
            key.ends_at_ms = SaturatingAdd(*newest, longest);
            key.ends_at_is_bound = true;
          }
        } else if (key.name->suffix == "sw") {
          // The counts of the window starting at `start` and of the one before it are
          // used up when the window after the current one ends: start + 2 windows — the
          // window the value records (26 bytes), else the longest a window can be.
          KeyState state;
          DecodeSlidingWindow(r[4].str, state);
          if (state.problem.empty()) {
            int64_t window = longest;
            if (state.fields.size() > 3 && state.fields[3].value >= 1 &&
                state.fields[3].value <= longest) {
              window = state.fields[3].value;
            }
            key.ends_at_ms = SaturatingAdd(state.fields[0].value, 2 * window);
            key.ends_at_is_bound = true;
          }
        } else {
          KeyState state;
          if (key.name->suffix == "fw") DecodeFixedWindow(r[4].str, *now, state);
          if (key.name->suffix == "tb") DecodeTokenBucket(r[4].str, *now, state);
          if (key.name->suffix == "gcra") DecodeGcra(r[4].str, *now, state);
          key.ends_at_ms = state.ends_at_ms;
        }
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
  auto replies = impl_->Exec(std::move(commands));
  if (!replies.ok()) return replies.status();
  auto now = Impl::TimeMs((*replies)[0]);
  if (!now) return impl_->Unexpected("TIME");
  for (size_t i = 0; i < keys.size(); ++i) {
    KeyState& s = states[i];
    const Reply* r = &(*replies)[first_command[i]];
    s.type = ParseType(r[0].str);
    s.ttl_ms = r[1].kind == Reply::Kind::kInteger ? r[1].integer : -2;
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
      if (r[2].kind != Reply::Kind::kString) continue;  // expired in between
      const std::string& v = r[2].str;
      if (suffix == "fw") DecodeFixedWindow(v, *now, s);
      if (suffix == "sw") DecodeSlidingWindow(v, s);
      if (suffix == "tb") DecodeTokenBucket(v, *now, s);
      if (suffix == "gcra") DecodeGcra(v, *now, s);
    } else if (expected == KeyType::kZset) {
      s.members = r[2].kind == Reply::Kind::kInteger ? r[2].integer : 0;
      if (s.members == 0) continue;
      if (suffix == "sl") {
        DecodeSlidingLog(r[3], r[4], s);
      } else {
        DecodeLeases(r[3], r[4], *now, s);
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
    auto counted = impl_->Exec(std::move(counts));
    if (!counted.ok()) return counted.status();
    for (size_t j = 0; j < uncounted.size(); ++j) {
      KeyState& s = states[uncounted[j]];
      const Reply& r = (*counted)[j];
      if (r.kind != Reply::Kind::kInteger) continue;  // gone or replaced in between
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
  const std::string head = internal::KeyHead(impl_->options.prefix, limiter) + state.encoded_id + "}:";
  for (std::string_view suffix : kSuffixes) keys.push_back(head + std::string(suffix));
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
      return InvalidArgumentError("refusing to touch \"" + key + "\": not a sluice key under prefix \"" +
                                  impl_->options.prefix + "\"");
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
    std::future<StatusOr<std::vector<Reply>>> reply;
  };
  ExpireResult result;
  std::deque<Call> calls;
  Status failure;
  const auto collect = [&] {
    Call call = std::move(calls.front());
    calls.pop_front();
    auto replies = impl_->Checked(call.reply.get());
    while (!replies.ok() && replies.status().code() == StatusCode::kDeadlineExceeded &&
           call.attempt < kAttempts) {
      ++call.attempt;
      replies = impl_->Checked(impl_->EvalAsync(kExpireBatch, call.keys, call.args).get());
    }
    if (!replies.ok()) {
      if (failure.ok()) failure = replies.status();
      return;
    }
    const Reply& r = (*replies)[0];
    if (r.kind != Reply::Kind::kArray) {
      if (failure.ok()) failure = impl_->Unexpected("the expire batch script");
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
      call.args.push_back(ToDecimal(keys[i].second.count()));
      const auto name = ParseKeyName(impl_->options.prefix, key);
      call.args.emplace_back(KeyTypeName(ExpectedKeyType(name->suffix)));
    }
    if (calls.size() == kInFlight) collect();
    if (!failure.ok()) break;
    call.reply = impl_->EvalAsync(kExpireBatch, call.keys, call.args);
    calls.push_back(std::move(call));
  }
  while (!calls.empty()) collect();
  if (!failure.ok()) return failure;
  return result;
}

}  // namespace sluice

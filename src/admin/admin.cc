// The admin API (include/sluice/admin.h): SCAN batches and their scripts
// (src/admin/scan_batch.lua, expire_batch.lua) over one BlockingClient per server: the one
// server, or every primary of a Redis Cluster (its slot map read at Connect). On a
// cluster each primary is scanned in turn, and every script call carries the keys of one
// slot only (a script may touch one slot); a batch's calls still go pipelined, in one
// round trip. Key names are parsed in key_names.cc; stored values are described in
// key_state.cc by the decoders beside each algorithm.
#include "sluice/admin.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <string>

#include "admin/key_set.h"
#include "admin/key_state.h"
#include "core/keys.h"
#include "core/server_info.h"
#include "redis/blocking_client.h"
#include "redis/crc16.h"
#include "redis/endpoint.h"
#include "redis/reply.h"
#include "redis/resp.h"
#include "redis/slot_map.h"

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

using internal::BlockingClient;

// `keys` in groups of one hash slot each (a script call may touch one slot on a cluster),
// reordered so that each group's keys are contiguous; groups hold at most `max_group`
// keys. Off a cluster: one group of every key, in order.
struct SlotGroups {
  std::vector<std::string> keys;
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) into keys
};
SlotGroups GroupBySlot(std::vector<std::string> keys, bool cluster, size_t max_group) {
  SlotGroups out;
  if (cluster) {
    std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
      return internal::KeySlot(a) < internal::KeySlot(b);
    });
  }
  out.keys = std::move(keys);
  for (size_t i = 0; i < out.keys.size(); ++i) {
    const bool joins = !out.groups.empty() &&
                       out.groups.back().second - out.groups.back().first < max_group &&
                       (!cluster || internal::KeySlot(out.keys[i]) ==
                                        internal::KeySlot(out.keys[out.groups.back().first]));
    if (joins) {
      ++out.groups.back().second;
    } else {
      out.groups.emplace_back(i, i + 1);
    }
  }
  return out;
}

// Every tag a co-located key of `id` can have (core/keys.h: SlotTagOf for each separator
// the id holds, and the whole id), each once.
std::vector<std::string> PossibleSlotTags(std::string_view id) {
  std::vector<std::string> tags{std::string(id)};
  bool seen[256] = {};
  for (size_t i = 1; i < id.size(); ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    if (!internal::IsSlotTagSeparator(c) || seen[c]) continue;
    seen[c] = true;
    if (id.find(static_cast<char>(c)) != i) continue;  // the id starts with it: the whole id
    tags.emplace_back(id.substr(0, i));
  }
  return tags;
}

// Admin::ExpireIfNone refuses every key that is not a sluice key under `prefix`, and
// every TTL under a second, before it changes anything.
Status CheckExpireKeys(const std::string& prefix,
                       std::span<const std::pair<std::string, std::chrono::seconds>> keys) {
  for (const auto& [key, ttl] : keys) {
    if (!ParseKeyName(prefix, key)) {
      return InvalidArgumentError("refusing to touch \"" + key +
                                  "\": not a sluice key under prefix \"" + prefix + "\"");
    }
    if (ttl.count() < 1) {
      return InvalidArgumentError("ttl for \"" + key + "\" must be >= 1 s, got " +
                                  std::to_string(ttl.count()));
    }
  }
  return Status::Ok();
}

// Admin::ExpireIfNone sends one chunk of up to kExpireChunk keys per round trip, at most
// kExpireInFlight of them sent and not yet answered: Redis stays busy (the next chunk is
// queued behind the one it runs) while each chunk's deadline, set when it is sent, covers
// only its own round trip and the few queued before it, however many keys there are. A
// chunk is one script call (off a cluster) or one call per slot among its keys (a
// cluster, keys grouped by node and sorted by slot first), sent pipelined. A chunk that
// misses its deadline is sent again (Retried): the script changes nothing it has already
// changed (a key it gave an expiry has one), so a late first attempt and the retry
// together do it once; its keys then count as having had an expiry.
constexpr size_t kExpireChunk = 1000;
constexpr size_t kExpireInFlight = 4;

// A round trip that misses its deadline is sent again, kAttempts in all: SCAN from a
// cursor and the read-only batch script give the same answer twice, and the expire
// script does nothing twice (above).
constexpr int kAttempts = 3;

// Waits for `first`; while the replies missed their deadline, sends again with `resend`.
template <typename Resend>
BlockingClient::Replies Retried(BlockingClient& redis, std::future<BlockingClient::Replies> first,
                                const Resend& resend) {
  auto replies = redis.Checked(first.get());
  for (int attempt = 1; attempt < kAttempts && !replies.ok() &&
                        replies.status().code() == StatusCode::kDeadlineExceeded;
       ++attempt) {
    replies = redis.Checked(resend().get());
  }
  return replies;
}

struct ExpireChunk {
  BlockingClient* redis = nullptr;
  SlotGroups keys;
  std::vector<std::vector<std::string>> args;  // per group: ttl and expected type per key
  std::future<BlockingClient::Replies> reply;
};

// The chunk's script calls, pipelined: one per group.
std::future<BlockingClient::Replies> SendExpireChunk(const ExpireChunk& chunk) {
  std::vector<BlockingClient::ScriptCall> calls;
  for (size_t g = 0; g < chunk.keys.groups.size(); ++g) {
    const auto [begin, end] = chunk.keys.groups[g];
    calls.push_back({std::span(chunk.keys.keys).subspan(begin, end - begin), chunk.args[g]});
  }
  return chunk.redis->EvalManyAsync(kExpireBatch, calls);
}

// Waits for the chunk's replies (sending it again after a missed deadline) and adds what
// the script did to `result`.
Status CollectExpireChunk(ExpireChunk& chunk, ExpireResult& result) {
  auto replies =
      Retried(*chunk.redis, std::move(chunk.reply), [&] { return SendExpireChunk(chunk); });
  if (!replies.ok()) return replies.status();
  for (const Reply& r : *replies) {
    if (r.type != Reply::Type::kArray) return chunk.redis->Unexpected("the expire batch script");
    for (const Reply& e : r.elements) {
      if (e.integer == 1) ++result.set;
      if (e.integer == 0) ++result.had_ttl;
      if (e.integer == -1) ++result.missing;
      if (e.integer == -2) ++result.foreign;
    }
  }
  return Status::Ok();
}

// The next chunk of one node's keys (`all`, grouped by slot), from group `at` on: whole
// groups up to about kExpireChunk keys (each group holds at most kExpireChunk). Moves
// `at` past them. The chunk's `redis` is left to the caller.
ExpireChunk NextExpireChunk(const std::string& prefix, const SlotGroups& all,
                            const std::map<std::string, std::chrono::seconds>& ttls, size_t& at) {
  ExpireChunk chunk;
  size_t taken = 0;
  for (; at < all.groups.size(); ++at) {
    const auto [begin, end] = all.groups[at];
    if (taken > 0 && taken + (end - begin) > kExpireChunk) break;
    const size_t first = chunk.keys.keys.size();
    std::vector<std::string> args;
    for (size_t i = begin; i < end; ++i) {
      const std::string& key = all.keys[i];
      chunk.keys.keys.push_back(key);
      args.push_back(std::to_string(ttls.at(key).count()));
      args.emplace_back(KeyTypeName(ExpectedKeyType(ParseKeyName(prefix, key)->suffix)));
    }
    chunk.keys.groups.emplace_back(first, chunk.keys.keys.size());
    chunk.args.push_back(std::move(args));
    taken += end - begin;
  }
  return chunk;
}

// SCAN over one node with MATCH `pattern`, from a cursor to the end of the node's table.
// Redis is the bound (SCAN, TYPE and PTTL cost it ~3 us per key), so it is never left
// idle: the next SCAN is sent as soon as the last one is answered.
class ScanWalk {
 public:
  // One SCAN's answer, with Redis's clock (TIME, in the same round trip).
  struct Round {
    BlockingClient::Replies replies;
    std::string cursor;  // SCAN's cursor after it: "0" at the end
    int64_t now_ms = 0;
    const std::vector<Reply>& matched() const { return (*replies)[0].elements[1].elements; }
  };

  // Sends the first SCAN, from `start`.
  ScanWalk(BlockingClient& redis, const std::string& pattern, size_t base_count, std::string start)
      : redis_(redis),
        pattern_(pattern),
        base_count_(base_count),
        count_(base_count),
        cursor_(std::move(start)),
        next_(Send()) {}

  // false once SCAN's cursor came back to "0".
  bool scanning() const { return scanning_; }

  // Waits for the SCAN sent last and sends the next one, unless that was the end.
  StatusOr<Round> Next() {
    Round round{Retried(redis_, std::move(next_), [&] { return Send(); })};
    if (!round.replies.ok()) return round.replies.status();
    const Reply& sr = (*round.replies)[0];
    auto now = internal::TimeMs((*round.replies)[1]);
    if (sr.type != Reply::Type::kArray || sr.elements.size() != 2 ||
        sr.elements[1].type != Reply::Type::kArray || !now) {
      return redis_.Unexpected("SCAN");
    }
    round.cursor = sr.elements[0].str;
    round.now_ms = *now;
    // SCAN visits COUNT buckets whatever MATCH keeps. When few keys of the database match
    // (a limiter among many, a small prefix in a big database), COUNT grows up to 4x so
    // that fewer sequential round trips walk the table; each SCAN still blocks Redis only
    // a few milliseconds.
    const size_t matched = sr.elements[1].elements.size();
    if (matched * 2 < base_count_ && count_ < 4 * base_count_) {
      count_ *= 2;
    } else if (matched > 2 * base_count_ && count_ > base_count_) {
      count_ /= 2;
    }
    scanning_ = round.cursor != "0";
    if (scanning_) {
      cursor_ = round.cursor;
      next_ = Send();
    }
    return round;
  }

 private:
  // SCAN from cursor_ and TIME, pipelined.
  std::future<BlockingClient::Replies> Send() {
    return redis_.ExecAsync({internal::FormatCommand({"SCAN", cursor_, "MATCH", pattern_, "COUNT",
                                                      std::to_string(count_)}),
                             internal::FormatCommand({"TIME"})});
  }

  BlockingClient& redis_;
  const std::string& pattern_;
  const size_t base_count_;
  size_t count_;
  std::string cursor_;  // the cursor next_ was sent with
  bool scanning_ = true;
  std::future<BlockingClient::Replies> next_;
};

// One batch of a scan: its keys' details asked of the batch script, not yet reported.
struct ScanInFlight {
  SlotGroups keys;  // grouped by slot: one script call per group
  std::vector<std::string> args;
  int64_t now_ms = 0;
  std::string cursor;                // the cursor the scan reports after this batch
  int64_t scanned = 0, repeats = 0;  // so far, this batch included
  std::future<BlockingClient::Replies> details;
};

// The batch script's calls for `f`, pipelined: one per group.
std::future<BlockingClient::Replies> SendScanDetails(BlockingClient& redis, const ScanInFlight& f) {
  std::vector<BlockingClient::ScriptCall> calls;
  calls.reserve(f.keys.groups.size());
  for (const auto& [begin, end] : f.keys.groups) {
    calls.push_back({std::span(f.keys.keys).subspan(begin, end - begin), f.args});
  }
  return redis.EvalManyAsync(kScanBatch, calls);
}

// The keys of a SCAN reply that the scan reports, counted into `scanned` and `repeats`.
// With a limiter (`plain_head` not empty), the pattern also matches keys of limiters
// whose name ends with this one's: only this limiter's keys are kept.
std::vector<std::string> KeepScanned(const std::vector<Reply>& matched, const std::string& prefix,
                                     const std::string& plain_head, const ScanOptions& scan,
                                     internal::KeyHashSet& seen, int64_t& scanned,
                                     int64_t& repeats) {
  std::vector<std::string> keys;
  keys.reserve(matched.size());
  for (const Reply& k : matched) {
    if (!plain_head.empty() && !k.str.starts_with(plain_head)) {
      // The pattern's other layout: a co-located key of this limiter, or nothing of it.
      const auto name = ParseKeyName(prefix, k.str);
      if (!name || name->encoded_slot_tag.empty() || name->limiter != scan.limiter) continue;
    }
    ++scanned;
    if (scan.distinct && !seen.Insert(k.str)) {
      ++repeats;
      continue;
    }
    keys.push_back(k.str);
  }
  return keys;
}

// The batch `f` reports, from the batch script's replies (`details`, one per group).
StatusOr<ScanBatch> DecodeScanBatch(BlockingClient& redis, const std::string& prefix,
                                    ScanInFlight& f, const std::vector<Reply>& details) {
  std::vector<std::string>& keys = f.keys.keys;
  if (details.size() != f.keys.groups.size()) return redis.Unexpected("the scan batch script");
  ScanBatch batch;
  batch.now_ms = f.now_ms;
  batch.cursor = std::move(f.cursor);
  static constexpr KeyType kTypes[] = {KeyType::kNone,   KeyType::kString, KeyType::kList,
                                       KeyType::kSet,    KeyType::kZset,   KeyType::kHash,
                                       KeyType::kStream, KeyType::kOther};
  batch.keys.resize(keys.size());
  for (size_t g = 0; g < f.keys.groups.size(); ++g) {
    const auto [begin, end] = f.keys.groups[g];
    const Reply& flat = details[g];
    if (flat.type != Reply::Type::kArray || flat.elements.size() != 5 * (end - begin)) {
      return redis.Unexpected("the scan batch script");
    }
    for (size_t i = begin; i < end; ++i) {
      ScannedKey& key = batch.keys[i];
      const Reply* r = &flat.elements[5 * (i - begin)];
      key.key = std::move(keys[i]);
      key.type = kTypes[std::clamp<long long>(r[0].integer, 0, 7)];
      key.ttl_ms = r[1].integer;
      key.name = ParseKeyName(prefix, key.key);
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
  }
  batch.scanned = f.scanned;
  batch.repeats = f.repeats;
  return batch;
}

}  // namespace

struct Admin::Impl {
  AdminOptions options;
  // The one server; or on a cluster every primary, in the order of their first slot.
  std::vector<std::unique_ptr<BlockingClient>> nodes;
  bool cluster = false;
  std::vector<int> slot_node;  // cluster: per slot, an index into nodes (-1: unserved)

  BlockingClient& first() { return *nodes[0]; }
  // The index of the node that serves `key`; on a cluster, -1 for a slot no node serves.
  int NodeOf(std::string_view key) const { return cluster ? slot_node[internal::KeySlot(key)] : 0; }
  // Reads the slot map from the first seed that answers and connects to every primary.
  Status ConnectCluster(const std::vector<internal::Endpoint>& seeds,
                        const internal::BlockingClientOptions& copts);
  // Scans one node from `cursor` (its own SCAN cursor) to its end; `node` names it in
  // the cursors reported. false in `go_on` when on_batch asked to stop.
  Status ScanNode(size_t node, const std::string& pattern, const std::string& plain_head,
                  const ScanOptions& scan, std::string cursor,
                  const std::function<bool(const ScanBatch&)>& on_batch, int64_t& scanned,
                  int64_t& repeats, internal::KeyHashSet& seen, bool& go_on);
  // ReadKeys on one server, every key being served by it.
  StatusOr<std::vector<KeyState>> ReadKeysOn(BlockingClient& redis,
                                             std::span<const std::string> keys);
  // The cursor a scan reports for `node` standing at its own `cursor`.
  std::string CursorOf(size_t node, const std::string& cursor) const {
    if (!cluster) return cursor;
    if (cursor != "0") return std::to_string(node) + ":" + cursor;
    return node + 1 < nodes.size() ? std::to_string(node + 1) + ":0" : "0";
  }
};

Status Admin::Impl::ConnectCluster(const std::vector<internal::Endpoint>& seeds,
                                   const internal::BlockingClientOptions& copts) {
  Status last = UnavailableError("no seed node of the redis cluster answered");
  for (const internal::Endpoint& seed : seeds) {
    auto client = BlockingClient::Connect(seed, copts);
    if (!client.ok()) {
      last = client.status();
      continue;
    }
    auto reply = (*client)->Command({"CLUSTER", "SLOTS"});
    if (!reply.ok()) {
      last = reply.status();
      continue;
    }
    auto ranges = internal::ParseClusterSlots(*reply, seed.host);
    if (!ranges.ok()) {
      // A server not in cluster mode says so; another seed would not disagree.
      if (ranges.status().code() == StatusCode::kFailedPrecondition) return ranges.status();
      last = ranges.status();
      continue;
    }
    if (ranges->empty()) {
      last = UnavailableError("redis " + seed.Describe() + " knows no slot of its cluster");
      continue;
    }
    std::sort(ranges->begin(), ranges->end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<internal::Endpoint> primaries;
    slot_node.assign(internal::kClusterSlots, -1);
    for (const internal::SlotRange& range : *ranges) {
      size_t index = 0;
      while (index < primaries.size() &&
             (primaries[index].host != range.host || primaries[index].port != range.port)) {
        ++index;
      }
      if (index == primaries.size()) {
        internal::Endpoint endpoint = seed;  // user and password
        endpoint.host = range.host;
        endpoint.port = range.port;
        primaries.push_back(std::move(endpoint));
      }
      for (uint32_t slot = range.first; slot <= range.last; ++slot) {
        slot_node[slot] = static_cast<int>(index);
      }
    }
    nodes.clear();
    for (const internal::Endpoint& primary : primaries) {
      if (*client && primary.host == seed.host && primary.port == seed.port) {
        nodes.push_back(std::move(*client));
        continue;
      }
      auto node = BlockingClient::Connect(primary, copts);
      if (!node.ok()) {
        return Status(node.status().code(), "redis cluster primary " + primary.Describe() + ": " +
                                                node.status().message());
      }
      nodes.push_back(std::move(*node));
    }
    cluster = true;
    return Status::Ok();
  }
  return last;
}

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
  const bool cluster = internal::IsClusterUrl(options.url);
  std::vector<internal::Endpoint> endpoints;
  if (cluster) {
    auto seeds = internal::ParseClusterUrl(options.url);
    if (!seeds.ok()) return seeds.status();
    endpoints = std::move(*seeds);
  } else {
    auto endpoint = internal::ParseRedisUrl(options.url);
    if (!endpoint.ok()) return endpoint.status();
    endpoints.push_back(std::move(*endpoint));
  }
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
  if (cluster) {
    if (Status s = impl->ConnectCluster(endpoints, copts); !s.ok()) return s;
  } else {
    auto redis = BlockingClient::Connect(std::move(endpoints[0]), std::move(copts));
    if (!redis.ok()) return redis.status();
    impl->nodes.push_back(std::move(*redis));
  }
  return std::unique_ptr<Admin>(new Admin(std::move(impl)));
}

StatusOr<int64_t> Admin::DbSize() {
  int64_t total = 0;
  for (const auto& node : impl_->nodes) {
    auto r = node->Exec({internal::FormatCommand({"DBSIZE"})});
    if (!r.ok()) return r.status();
    if ((*r)[0].type != Reply::Type::kInteger) return node->Unexpected("DBSIZE");
    total += static_cast<int64_t>((*r)[0].integer);
  }
  return total;
}

StatusOr<std::vector<Admin::MemoryPolicy>> Admin::MemoryPolicies() {
  std::vector<MemoryPolicy> out;
  for (const auto& node : impl_->nodes) {
    auto r = node->Exec(
        {internal::FormatCommand({"INFO", "memory"}), internal::FormatCommand({"INFO", "stats"})});
    if (!r.ok()) return r.status();
    if ((*r)[0].type != Reply::Type::kString || (*r)[1].type != Reply::Type::kString)
      return node->Unexpected("INFO");
    MemoryPolicy p;
    p.node = node->endpoint().Describe();
    auto policy = internal::InfoField((*r)[0].str, "maxmemory_policy");
    if (!policy) return node->Unexpected("INFO memory (no maxmemory_policy)");
    p.policy = *policy;
    p.can_evict = internal::PolicyCanEvict(p.policy);
    if (auto evicted = internal::InfoField((*r)[1].str, "evicted_keys")) {
      p.evicted_keys = std::strtoll(evicted->c_str(), nullptr, 10);
    }
    out.push_back(std::move(p));
  }
  return out;
}

StatusOr<int64_t> Admin::NowMs() {
  auto r = impl_->first().Exec({internal::FormatCommand({"TIME"})});
  if (!r.ok()) return r.status();
  auto now = internal::TimeMs((*r)[0]);
  if (!now) return impl_->first().Unexpected("TIME");
  return *now;
}

Status Admin::Scan(const ScanOptions& scan, const std::function<bool(const ScanBatch&)>& on_batch) {
  std::string pattern = impl_->options.prefix + ":*";
  std::string plain_head;
  if (!scan.limiter.empty()) {
    if (Status s = internal::ValidateName("limiter name", scan.limiter); !s.ok()) return s;
    // `{` is not special in a glob; the prefix and limiter names hold no glob characters.
    // One pattern for both layouts, `{<limiter>:` and `{@<tag>}:<limiter>:`; what else it
    // matches (a limiter whose name ends with this one's) is dropped by ScanNode.
    plain_head = internal::KeyHead(impl_->options.prefix, scan.limiter);
    pattern = impl_->options.prefix + ":{*" + scan.limiter + ":*";
  }
  const auto digits = [](std::string_view text) {
    return !text.empty() && text.size() <= 20 &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  // Off a cluster, SCAN's own cursor; on a cluster "0" (from the start) or
  // "<node>:<cursor>" as ScanBatch::cursor reports it.
  size_t node = 0;
  std::string cursor = scan.cursor;
  bool valid = digits(cursor);
  if (impl_->cluster && cursor != "0") {
    const size_t colon = cursor.find(':');
    valid = colon != std::string::npos && digits(cursor.substr(0, colon)) &&
            digits(cursor.substr(colon + 1)) && colon <= 4 &&
            std::stoul(cursor.substr(0, colon)) < impl_->nodes.size();
    if (valid) {
      node = std::stoul(cursor.substr(0, colon));
      cursor = cursor.substr(colon + 1);
    }
  }
  if (!valid) {
    return InvalidArgumentError(
        "a scan cursor is " +
        std::string(impl_->cluster ? "\"0\" or <node>:<cursor>" : "a decimal number") +
        " (ScanBatch::cursor), got \"" + scan.cursor + "\"");
  }
  int64_t scanned = 0, repeats = 0;
  internal::KeyHashSet seen;
  for (bool go_on = true; node < impl_->nodes.size() && go_on; ++node, cursor = "0") {
    if (Status s = impl_->ScanNode(node, pattern, plain_head, scan, cursor, on_batch, scanned,
                                   repeats, seen, go_on);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

Status Admin::Impl::ScanNode(size_t node, const std::string& pattern, const std::string& plain_head,
                             const ScanOptions& scan, std::string start,
                             const std::function<bool(const ScanBatch&)>& on_batch,
                             int64_t& scanned, int64_t& repeats, internal::KeyHashSet& seen,
                             bool& go_on) {
  BlockingClient& redis = *nodes[node];
  ScanWalk walk(redis, pattern, options.scan_count, std::move(start));
  // Up to kDepth batch scripts are in flight while the client decodes an earlier batch.
  constexpr size_t kDepth = 4;
  std::deque<ScanInFlight> in_flight;
  while (walk.scanning() || !in_flight.empty()) {
    if (walk.scanning() && in_flight.size() < kDepth) {
      auto round = walk.Next();
      if (!round.ok()) return round.status();
      ScanInFlight f;
      f.now_ms = round->now_ms;
      f.cursor = CursorOf(node, round->cursor);
      f.args = {std::to_string(round->now_ms), scan.read_leaked_values ? "1" : "0"};
      std::vector<std::string> keys =
          KeepScanned(round->matched(), options.prefix, plain_head, scan, seen, scanned, repeats);
      f.scanned = scanned;
      f.repeats = repeats;
      if (keys.empty()) {
        if (!in_flight.empty()) {
          // Its batch now ends here.
          in_flight.back().cursor = f.cursor;
          in_flight.back().scanned = scanned;
          in_flight.back().repeats = repeats;
          continue;
        }
        // Nothing to report and nothing pending: an empty batch tells where SCAN stands.
        ScanBatch empty;
        empty.now_ms = round->now_ms;
        empty.scanned = scanned;
        empty.repeats = repeats;
        empty.cursor = f.cursor;
        if (!on_batch(empty)) {
          go_on = false;
          return Status::Ok();
        }
        continue;
      }
      f.keys = GroupBySlot(std::move(keys), cluster, std::numeric_limits<size_t>::max());
      f.details = SendScanDetails(redis, f);
      in_flight.push_back(std::move(f));
      continue;
    }
    ScanInFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    auto details = Retried(redis, std::move(f.details), [&] { return SendScanDetails(redis, f); });
    if (!details.ok()) return details.status();
    auto batch = DecodeScanBatch(redis, options.prefix, f, *details);
    if (!batch.ok()) return batch.status();
    // Calls still in flight complete into their own shared state: nothing waits on them.
    if (!on_batch(*batch)) {
      go_on = false;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<KeyState>> Admin::ReadKeys(std::span<const std::string> keys) {
  if (!impl_->cluster) return impl_->ReadKeysOn(impl_->first(), keys);
  // Each node reads its own keys, with its own clock; the states go back in `keys` order.
  std::vector<std::vector<size_t>> of_node(impl_->nodes.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const int node = impl_->NodeOf(keys[i]);
    if (node < 0) {
      return UnavailableError("no primary of the redis cluster serves the slot of " + keys[i]);
    }
    of_node[static_cast<size_t>(node)].push_back(i);
  }
  std::vector<KeyState> states(keys.size());
  for (size_t node = 0; node < of_node.size(); ++node) {
    if (of_node[node].empty()) continue;
    std::vector<std::string> mine;
    for (size_t i : of_node[node]) mine.push_back(keys[i]);
    auto read = impl_->ReadKeysOn(*impl_->nodes[node], mine);
    if (!read.ok()) return read.status();
    for (size_t j = 0; j < mine.size(); ++j) states[of_node[node][j]] = std::move((*read)[j]);
  }
  return states;
}

namespace {

// The commands that read the value of a key of sluice's with `suffix` (after its TYPE and
// PTTL), as ReadKeysOn decodes their replies.
void AppendValueReads(const std::string& key, const std::string& suffix,
                      const std::string& max_lease, std::vector<std::string>& commands) {
  if (ExpectedKeyType(suffix) == KeyType::kString) {
    commands.push_back(internal::FormatCommand({"GET", key}));
  } else if (suffix == "sl") {
    commands.push_back(internal::FormatCommand({"ZCARD", key}));
    commands.push_back(internal::FormatCommand({"ZRANGE", key, "0", "0", "WITHSCORES"}));
    commands.push_back(internal::FormatCommand({"ZRANGE", key, "-1", "-1", "WITHSCORES"}));
  } else if (suffix == "cc") {
    commands.push_back(internal::FormatCommand({"ZCARD", key}));
    commands.push_back(internal::FormatCommand({"ZRANGE", key, "0", max_lease, "WITHSCORES"}));
    commands.push_back(internal::FormatCommand({"ZRANGE", key, "-1", "-1", "WITHSCORES"}));
  } else if (suffix == internal::kLeaseHistorySuffix) {
    commands.push_back(internal::FormatCommand({"HGETALL", key}));  // 64 fields at most
  } else if (ExpectedKeyType(suffix) == KeyType::kZset) {
    // Another sorted set (a quota bucket's expiry index, a lease set's queue): its size.
    commands.push_back(internal::FormatCommand({"ZCARD", key}));
  }
}

}  // namespace

StatusOr<std::vector<KeyState>> Admin::Impl::ReadKeysOn(BlockingClient& redis,
                                                        std::span<const std::string> keys) {
  std::vector<std::string> commands;
  commands.reserve(1 + keys.size() * 5);
  commands.push_back(internal::FormatCommand({"TIME"}));
  std::vector<KeyState> states(keys.size());
  std::vector<size_t> first_command(keys.size());
  const std::string max_lease = std::to_string(kMaxLeasesRead - 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    KeyState& s = states[i];
    s.key = keys[i];
    s.name = ParseKeyName(options.prefix, s.key);
    first_command[i] = commands.size();
    commands.push_back(internal::FormatCommand({"TYPE", s.key}));
    commands.push_back(internal::FormatCommand({"PTTL", s.key}));
    if (s.name) AppendValueReads(s.key, s.name->suffix, max_lease, commands);
  }
  auto replies = redis.Exec(std::move(commands));
  if (!replies.ok()) return replies.status();
  auto now = internal::TimeMs((*replies)[0]);
  if (!now) return redis.Unexpected("TIME");
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
      } else if (suffix == "cc") {
        internal::DescribeLeases(r[3], r[4], *now, s);
      }  // a quota bucket's expiry index, a lease set's queue: their members only
    } else if (suffix == internal::kLeaseHistorySuffix) {
      internal::DescribeLeaseHistory(r[2], *now, s);
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
    auto counted = redis.Exec(std::move(counts));
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
  // Co-located keys (LimiterOptions::colocate): the separator is the limiter's
  // configuration, unknown here, so every tag the id can have is read (a few at most:
  // one per distinct separator byte in the id).
  for (const std::string& tag : PossibleSlotTags(id)) {
    for (std::string_view suffix : internal::kKeySuffixes) {
      keys.push_back(internal::MakeTaggedKey(impl_->options.prefix, limiter, tag, id, suffix));
    }
  }
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
  const std::string& prefix = impl_->options.prefix;
  if (Status s = CheckExpireKeys(prefix, keys); !s.ok()) return s;
  std::vector<std::vector<std::string>> of_node(impl_->nodes.size());
  std::map<std::string, std::chrono::seconds> ttls;
  for (const auto& [key, ttl] : keys) {
    const int node = impl_->NodeOf(key);
    if (node < 0)
      return UnavailableError("no primary of the redis cluster serves the slot of " + key);
    of_node[static_cast<size_t>(node)].push_back(key);
    ttls[key] = ttl;
  }
  // Chunks of about kExpireChunk keys, at most kExpireInFlight of them sent and not yet
  // answered (the comment at kExpireChunk says why).
  ExpireResult result;
  std::deque<ExpireChunk> chunks;
  Status failure;
  const auto collect = [&] {
    ExpireChunk chunk = std::move(chunks.front());
    chunks.pop_front();
    Status s = CollectExpireChunk(chunk, result);
    if (failure.ok()) failure = std::move(s);
  };
  for (size_t node = 0; node < of_node.size() && failure.ok(); ++node) {
    SlotGroups all = GroupBySlot(std::move(of_node[node]), impl_->cluster, kExpireChunk);
    for (size_t at = 0; at < all.groups.size() && failure.ok();) {
      ExpireChunk chunk = NextExpireChunk(prefix, all, ttls, at);
      chunk.redis = impl_->nodes[node].get();
      if (chunks.size() == kExpireInFlight) collect();
      if (!failure.ok()) break;
      chunk.reply = SendExpireChunk(chunk);
      chunks.push_back(std::move(chunk));
    }
  }
  while (!chunks.empty()) collect();
  if (!failure.ok()) return failure;
  return result;
}

}  // namespace sluice

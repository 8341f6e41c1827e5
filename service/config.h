// service/config.h — sluiced's rate limit configuration: envoyproxy/ratelimit's YAML
// format unchanged (domain, nested descriptors, key, value, rate_limit{unit,
// requests_per_unit, unlimited, name, replaces}, shadow_mode, detailed_metric) plus
// sluice's extensions on a descriptor (algorithm, burst, lease_ttl, failure_mode,
// local_servers, colocate).
//
// A Config is immutable once loaded and shared by every request of its generation; a
// reload builds a new one. Errors name `file:line:column` (1-based) and what is wrong.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/client.h"
#include "sluice/lease.h"
#include "sluice/limits.h"
#include "sluice/status.h"

namespace sluiced {

// The envoy-ratelimit units. Window lengths: month = 30 days, year = 365 days.
enum class Unit { kSecond, kMinute, kHour, kDay, kWeek, kMonth, kYear };
std::string_view UnitName(Unit unit);  // "second", ...
std::chrono::milliseconds UnitWindow(Unit unit);

// What a descriptor node limits with (sluice's `algorithm` extension).
enum class RuleKind {
  kFixedWindow,
  kSlidingWindow,
  kSlidingLog,
  kTokenBucket,
  kGcra,
  kConcurrency
};
std::string_view RuleKindName(RuleKind kind);

struct Position {
  std::string file;
  int line = 0;                  // 1-based
  int column = 0;                // 1-based
  std::string ToString() const;  // "file:line:column"
};

// A rate_limit block with its descriptor's extensions: one limit of the config.
struct Rule {
  std::string domain;
  std::string name;          // rate_limit.name, or empty
  std::string path;          // "domain/key_value/key" where it sits in the tree (messages)
  std::string limiter_name;  // the sluice limiter (stable across reloads at this path)
  Unit unit = Unit::kSecond;
  int64_t requests_per_unit = 0;  // 0: every request is over the limit
  bool unlimited = false;
  std::vector<std::string> replaces;  // names of rules this one replaces when both match
  bool shadow_mode = false;
  bool detailed_metric = false;
  RuleKind kind = RuleKind::kFixedWindow;
  int64_t burst = 0;  // token_bucket/gcra: bucket capacity; 0 = requests_per_unit
  std::chrono::milliseconds lease_ttl{120000};
  // `max_waiters` (concurrency): the most acquires of one id that wait at once, fleet-wide
  // (sluice::ConcurrencyOptions::max_waiters).
  int64_t max_waiters = sluice::ConcurrencyOptions{}.max_waiters;
  sluice::FailurePolicy failure_mode = sluice::FailurePolicy::kDefault;
  int64_t local_servers = 0;
  // `colocate: true`: the limit's keys sit in the Redis Cluster hash slot of the
  // descriptor's first entry (sluice::LimiterOptions::colocate, separator ','), so the
  // limits of one request whose descriptors start with the same entry are checked in
  // one script on a cluster (one slot). Rate limits only.
  bool colocate = false;
  // `debit_entry: <key>` (rate limits, not concurrency): a request
  // descriptor of this rule's entries followed by one more entry with this key (any
  // value), which no rule matches as it is, is charged to this rule's counter as a debit
  // of its hits (sluice::Limiter::Debit): Envoy's `apply_on_stream_done` request, made
  // recognisable by an action that appends that entry. Empty: none.
  std::string debit_entry;
  // `block_duration: 15m` (rate limits, not concurrency): once the rule refuses an id
  // over its limit, the id stays refused this long (sluice::LimiterOptions::block_for).
  // 0: none.
  std::chrono::milliseconds block_duration{0};
  Position position;

  // The sluice limit this rule enforces (not meaningful for concurrency/unlimited/0).
  sluice::Limit ToLimit() const;
  // The name shown in answers, headers and metrics (the `limit` label): `name` if set, else
  // the limiter name, as the admin API and the sluice CLI spell it ("example.client").
  const std::string& DisplayName() const { return name.empty() ? limiter_name : name; }
};

struct DescriptorNode {
  std::string key;
  std::optional<std::string> value;  // absent (or ""): one counter per distinct value
  bool wildcard = false;             // value holds '*': each matches any run of bytes
  std::shared_ptr<const Rule> rule;  // null: no rate_limit at this node
  std::vector<DescriptorNode> children;
};

struct DomainConfig {
  std::string domain;
  std::string file;
  std::vector<DescriptorNode> descriptors;
};

struct Config {
  std::vector<DomainConfig> domains;               // sorted by domain, unique
  std::vector<std::shared_ptr<const Rule>> rules;  // every rule, in file order
  std::vector<std::string> files;

  const DomainConfig* FindDomain(std::string_view domain) const;
};

// What a configuration may hold, so that no file, however written, can exhaust sluiced's
// stack or memory at start-up or on a reload. YAML aliases (`*name`) are refused
// outright: an alias can make a descriptor its own child, or double a tree per line.
struct ConfigLimits {
  // Bytes of one file. Default: 4 MiB.
  std::size_t max_file_bytes = 4 << 20;
  // Levels of nested `descriptors` (a top-level descriptor is level 1). Default: 64.
  int max_depth = 64;
  // rate_limit blocks in the whole configuration (every file). Default: 100,000.
  std::size_t max_rules = 100000;
};

// Parses one YAML document; `file` names it in errors.
sluice::StatusOr<DomainConfig> ParseDomainYaml(std::string_view text, const std::string& file,
                                               std::vector<std::shared_ptr<const Rule>>& rules,
                                               const ConfigLimits& limits = {});
// Loads a file, or every *.yaml / *.yml of a directory (sorted; one domain per file, a
// domain in two files is an error).
sluice::StatusOr<std::shared_ptr<const Config>> LoadConfig(const std::string& path,
                                                           const ConfigLimits& limits = {});
// Builds a Config from in-memory documents (file name, text), as LoadConfig does.
sluice::StatusOr<std::shared_ptr<const Config>> BuildConfig(
    const std::vector<std::pair<std::string, std::string>>& documents,
    const ConfigLimits& limits = {});

}  // namespace sluiced

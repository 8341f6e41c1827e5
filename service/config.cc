#include "service/config.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "service/limiter_names.h"

namespace sluiced {
namespace {

using sluice::InvalidArgumentError;
using sluice::Status;
using sluice::StatusOr;

constexpr int64_t kSecondMs = 1000;

// Thrown inside the parser only, turned into a Status at its edge.
struct ConfigError {
  Position at;
  std::string what;
};

Position At(const std::string& file, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return {file, mark.line + 1, mark.column + 1};
}

[[noreturn]] void Fail(const std::string& file, const YAML::Node& node, std::string what) {
  throw ConfigError{At(file, node), std::move(what)};
}

std::string Scalar(const std::string& file, const YAML::Node& node, std::string_view field) {
  if (!node.IsScalar()) Fail(file, node, std::string(field) + " must be a string");
  return node.Scalar();
}

bool Bool(const std::string& file, const YAML::Node& node, std::string_view field) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  Fail(file, node, std::string(field) + " must be true or false");
}

int64_t Integer(const std::string& file, const YAML::Node& node, std::string_view field,
                int64_t min, int64_t max) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (!s.empty() && s.size() <= 18 &&
        std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); })) {
      const int64_t v = std::stoll(s);
      if (v >= min && v <= max) return v;
      Fail(file, node,
           std::string(field) + " must be between " + std::to_string(min) + " and " +
               std::to_string(max) + ", not " + s);
    }
  }
  Fail(file, node,
       std::string(field) + " must be a whole number between " + std::to_string(min) + " and " +
           std::to_string(max));
}

// "500ms", "30s", "2m", "1h", or a number of seconds.
std::chrono::milliseconds Duration(const std::string& file, const YAML::Node& node,
                                   std::string_view field) {
  const std::string bad = std::string(field) + " must be a duration such as 500ms, 30s, 2m or 1h";
  if (!node.IsScalar()) Fail(file, node, bad);
  const std::string& s = node.Scalar();
  std::size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0 || digits > 12) Fail(file, node, bad);
  const int64_t n = std::stoll(s.substr(0, digits));
  const std::string suffix = s.substr(digits);
  int64_t ms = 0;
  if (suffix == "ms")
    ms = n;
  else if (suffix == "s" || suffix.empty())
    ms = n * kSecondMs;
  else if (suffix == "m")
    ms = n * 60 * kSecondMs;
  else if (suffix == "h")
    ms = n * 3600 * kSecondMs;
  else
    Fail(file, node, bad);
  return std::chrono::milliseconds(ms);
}

// The key node of `key` in `map` (for its position); the map itself if absent.
YAML::Node FindKey(const YAML::Node& map, std::string_view key) {
  for (const auto& kv : map)
    if (kv.first.IsScalar() && kv.first.Scalar() == key) return kv.first;
  return map;
}

void OnlyKeys(const std::string& file, const YAML::Node& map, std::string_view what,
              std::initializer_list<std::string_view> allowed) {
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) Fail(file, kv.first, std::string(what) + ": keys must be strings");
    const std::string& k = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      Fail(file, kv.first,
           "unknown key '" + k + "' in " + std::string(what) + " (expected one of: " + list + ")");
    }
  }
}

// Reads the document's events (no node tree) and refuses, at their position, what
// could blow up the tree built next: an alias, and collections nested deeper than
// descriptors at `max_depth` levels need (the parser recurses once per level).
class Screen : public YAML::EventHandler {
 public:
  Screen(std::string file, int max_nesting) : file_(std::move(file)), max_(max_nesting) {}
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw ConfigError{At(mark), "YAML aliases (*name) are not accepted: write each descriptor out"};
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  Position At(const YAML::Mark& mark) const { return {file_, mark.line + 1, mark.column + 1}; }
  void Enter(const YAML::Mark& mark) {
    if (++depth_ > max_)
      throw ConfigError{At(mark), "nested deeper than " + std::to_string(max_) + " levels"};
  }
  std::string file_;
  int max_;
  int depth_ = 0;
};

struct Parser {
  std::string file;
  std::string domain;
  std::vector<std::shared_ptr<const Rule>>& rules;
  const ConfigLimits& limits;

  std::shared_ptr<const Rule> ParseRule(const YAML::Node& descriptor, const YAML::Node& rl,
                                        const std::vector<std::string>& pieces,
                                        const std::string& path) {
    if (!rl.IsMap()) Fail(file, rl, "rate_limit must be a map");
    OnlyKeys(file, rl, "rate_limit",
             {"unit", "requests_per_unit", "unlimited", "name", "replaces"});
    auto rule = std::make_shared<Rule>();
    rule->domain = domain;
    rule->path = path;
    rule->limiter_name = LimiterName(pieces);
    rule->position = At(file, rl);
    ParseNames(rl, *rule);
    if (const YAML::Node alg = descriptor["algorithm"]) rule->kind = ParseKind(alg);
    ParseRate(rl, *rule);
    ParseExtensions(descriptor, *rule);
    if (rule->unlimited && rl["requests_per_unit"])
      Fail(file, rl["unlimited"], "unlimited: true cannot have requests_per_unit");
    if (rule->kind != RuleKind::kConcurrency && !rule->unlimited && rule->requests_per_unit > 0) {
      if (Status s = rule->ToLimit().Validate(); !s.ok()) Fail(file, rl, s.message());
    }
    if (rules.size() >= limits.max_rules)
      Fail(file, rl,
           "more than " + std::to_string(limits.max_rules) + " rate limits in the configuration");
    rules.push_back(rule);
    return rule;
  }

  // rate_limit's unlimited, name and replaces.
  void ParseNames(const YAML::Node& rl, Rule& rule) {
    if (rl["unlimited"]) rule.unlimited = Bool(file, rl["unlimited"], "unlimited");
    if (rl["name"]) {
      rule.name = Scalar(file, rl["name"], "name");
      if (rule.name.empty()) Fail(file, rl["name"], "name must not be empty");
    }
    if (rl["replaces"]) {
      const YAML::Node replaces = rl["replaces"];
      if (!replaces.IsSequence()) Fail(file, replaces, "replaces must be a list of {name: ...}");
      for (const auto& r : replaces) {
        if (!r.IsMap()) Fail(file, r, "each entry of replaces must be a map with a name");
        OnlyKeys(file, r, "replaces entry", {"name"});
        if (!r["name"]) Fail(file, r, "replaces entry needs a name");
        std::string name = Scalar(file, r["name"], "replaces name");
        if (name.empty()) Fail(file, r["name"], "replaces name must not be empty");
        rule.replaces.push_back(std::move(name));
      }
    }
  }

  // sluice's `algorithm` extension, by the names RuleKindName gives.
  RuleKind ParseKind(const YAML::Node& alg) {
    const std::string a = Scalar(file, alg, "algorithm");
    for (RuleKind kind : {RuleKind::kFixedWindow, RuleKind::kSlidingWindow, RuleKind::kSlidingLog,
                          RuleKind::kTokenBucket, RuleKind::kGcra, RuleKind::kConcurrency}) {
      if (a == RuleKindName(kind)) return kind;
    }
    Fail(file, alg,
         "unknown algorithm '" + a +
             "' (expected fixed_window, sliding_window, sliding_log, token_bucket, gcra or "
             "concurrency)");
  }

  // rate_limit's unit and requests_per_unit.
  void ParseRate(const YAML::Node& rl, Rule& rule) {
    const bool needs_unit = !rule.unlimited && rule.kind != RuleKind::kConcurrency;
    if (const YAML::Node unit = rl["unit"]) {
      std::string u = Scalar(file, unit, "unit");
      std::transform(u.begin(), u.end(), u.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      static const std::pair<const char*, Unit> kUnits[] = {
          {"second", Unit::kSecond}, {"minute", Unit::kMinute}, {"hour", Unit::kHour},
          {"day", Unit::kDay},       {"week", Unit::kWeek},     {"month", Unit::kMonth},
          {"year", Unit::kYear}};
      bool found = false;
      for (const auto& [n, v] : kUnits) {
        if (u == n) {
          rule.unit = v;
          found = true;
        }
      }
      if (!found)
        Fail(file, unit,
             "unknown unit '" + unit.Scalar() +
                 "' (expected second, minute, hour, day, week, month or year)");
    } else if (needs_unit) {
      Fail(file, rl, "rate_limit needs a unit (or unlimited: true)");
    }
    if (const YAML::Node rpu = rl["requests_per_unit"]) {
      rule.requests_per_unit = Integer(file, rpu, "requests_per_unit", 0, sluice::kMaxLimit);
    } else if (!rule.unlimited) {
      Fail(file, rl, "rate_limit needs requests_per_unit (or unlimited: true)");
    }
  }

  // sluice's extensions beside rate_limit (burst, lease_ttl, max_waiters, failure_mode,
  // local_servers, colocate, debit_entry, block_duration) and envoy-ratelimit's shadow_mode and
  // detailed_metric.
  void ParseExtensions(const YAML::Node& descriptor, Rule& rule) {
    if (const YAML::Node burst = descriptor["burst"]) {
      if (rule.kind != RuleKind::kTokenBucket && rule.kind != RuleKind::kGcra)
        Fail(file, burst, "burst applies to algorithm token_bucket or gcra only");
      rule.burst = Integer(file, burst, "burst", 1, sluice::kMaxLimit);
    }
    if (const YAML::Node ttl = descriptor["lease_ttl"]) {
      if (rule.kind != RuleKind::kConcurrency)
        Fail(file, ttl, "lease_ttl applies to algorithm concurrency only");
      rule.lease_ttl = Duration(file, ttl, "lease_ttl");
      if (rule.lease_ttl < std::chrono::milliseconds(10) || rule.lease_ttl > sluice::kMaxWindow)
        Fail(file, ttl, "lease_ttl must be between 10ms and 366 days");
    }
    if (const YAML::Node mw = descriptor["max_waiters"]) {
      if (rule.kind != RuleKind::kConcurrency)
        Fail(file, mw, "max_waiters applies to algorithm concurrency only");
      rule.max_waiters =
          Integer(file, mw, "max_waiters", 1, sluice::ConcurrencyOptions::kMaxWaiters);
    }
    if (const YAML::Node fm = descriptor["failure_mode"]) {
      const std::string f = Scalar(file, fm, "failure_mode");
      const auto policy = sluice::ParseFailurePolicy(f);
      if (!policy.ok() || *policy == sluice::FailurePolicy::kDefault)
        Fail(file, fm, "unknown failure_mode '" + f + "' (expected open, closed or local)");
      rule.failure_mode = *policy;
    }
    if (const YAML::Node ls = descriptor["local_servers"]) {
      rule.local_servers = Integer(file, ls, "local_servers", 1, 1000000);
    }
    if (const YAML::Node co = descriptor["colocate"]) {
      rule.colocate = Bool(file, co, "colocate");
      if (rule.colocate && rule.kind == RuleKind::kConcurrency)
        Fail(file, co, "colocate applies to rate limits, not to algorithm: concurrency");
    }
    if (const YAML::Node de = descriptor["debit_entry"]) {
      if (rule.kind == RuleKind::kConcurrency)
        Fail(file, de, "debit_entry applies to rate limits, not to algorithm: concurrency");
      if (rule.unlimited) Fail(file, de, "debit_entry has nothing to charge on an unlimited rule");
      rule.debit_entry = Scalar(file, de, "debit_entry");
      if (rule.debit_entry.empty()) Fail(file, de, "debit_entry must not be empty");
    }
    if (const YAML::Node bd = descriptor["block_duration"]) {
      if (rule.kind == RuleKind::kConcurrency)
        Fail(file, bd, "block_duration applies to rate limits, not to algorithm: concurrency");
      if (rule.unlimited) Fail(file, bd, "block_duration has nothing to hold on an unlimited rule");
      rule.block_duration = Duration(file, bd, "block_duration");
      if (rule.block_duration < std::chrono::milliseconds(1) ||
          rule.block_duration > sluice::kMaxWindow)
        Fail(file, bd, "block_duration must be between 1ms and 366 days");
    }
    if (descriptor["shadow_mode"])
      rule.shadow_mode = Bool(file, descriptor["shadow_mode"], "shadow_mode");
    if (descriptor["detailed_metric"])
      rule.detailed_metric = Bool(file, descriptor["detailed_metric"], "detailed_metric");
  }

  std::vector<DescriptorNode> ParseList(const YAML::Node& list, std::vector<std::string> pieces,
                                        const std::string& path, int depth) {
    if (!list.IsSequence()) Fail(file, list, "descriptors must be a list");
    if (depth > limits.max_depth)
      Fail(file, list,
           "descriptors nested deeper than " + std::to_string(limits.max_depth) + " levels");
    std::vector<DescriptorNode> out;
    std::set<std::string> seen;
    for (const auto& d : list) {
      if (!d.IsMap()) Fail(file, d, "a descriptor must be a map with a key");
      // envoy-ratelimit's newer descriptor keys that sluiced does not implement: refused
      // by name rather than silently read differently.
      static const std::pair<const char*, const char*> kRefused[] = {
          {"quota_mode",
           "a quota-mode limit never refuses and reports its state to Envoy's "
           "quota system; use shadow_mode to count without refusing"},
          {"share_threshold",
           "every value a wildcard matches would share one counter; give "
           "the values one limit with a bare key instead"},
          {"value_to_metric",
           "sluiced's metrics are per limit; detailed_metric: true adds a "
           "series per descriptor value"},
          {"metadata", "sluiced sends no per-limit metadata in its responses"}};
      for (const auto& [key, why] : kRefused) {
        if (d[key])
          Fail(file, FindKey(d, key),
               std::string(key) + " is not supported by sluiced (envoy-ratelimit's " + key +
                   "): " + why);
      }
      OnlyKeys(file, d, "descriptor",
               {"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
                "algorithm", "burst", "lease_ttl", "max_waiters", "failure_mode", "local_servers",
                "colocate", "debit_entry", "block_duration"});
      if (!d["key"]) Fail(file, d, "descriptor needs a key");
      DescriptorNode node;
      node.key = Scalar(file, d["key"], "key");
      if (node.key.empty()) Fail(file, d["key"], "key must not be empty");
      std::string piece = node.key;
      if (d["value"]) {
        // `value: ""` is the bare key, as in envoy-ratelimit (one counter per value).
        std::string value = Scalar(file, d["value"], "value");
        if (!value.empty()) {
          node.wildcard = value.find('*') != std::string::npos;
          piece = NodePiece(node.key, value);
          node.value = std::move(value);
        }
      }
      if (!seen.insert(piece).second)
        Fail(file, d, "duplicate descriptor '" + piece + "' at this level");
      auto child_pieces = pieces;
      child_pieces.push_back(piece);
      const std::string child_path = path + "/" + piece;
      if (d["rate_limit"]) {
        node.rule = ParseRule(d, d["rate_limit"], child_pieces, child_path);
      } else {
        for (const char* ext : {"algorithm", "burst", "lease_ttl", "max_waiters", "failure_mode",
                                "local_servers", "colocate", "debit_entry", "block_duration"}) {
          if (d[ext])
            Fail(file, d[ext], std::string(ext) + " needs a rate_limit on the same descriptor");
        }
        for (const char* flag : {"shadow_mode", "detailed_metric"}) {
          if (d[flag]) Bool(file, d[flag], flag);  // accepted as envoy-ratelimit does
        }
      }
      if (d["descriptors"])
        node.children = ParseList(d["descriptors"], child_pieces, child_path, depth + 1);
      out.push_back(std::move(node));
    }
    return out;
  }
};

std::string TooLarge(const std::string& file, std::size_t bytes, std::size_t max_bytes) {
  return file + ":1:1: the file has " + std::to_string(bytes) + " bytes, more than the " +
         std::to_string(max_bytes) + " a config file may have";
}

// A file larger than max_bytes is refused by its size, without being read.
std::string ReadFile(const std::string& path, std::size_t max_bytes, Status& status) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_bytes) {
    status = InvalidArgumentError(TooLarge(path, size, max_bytes));
    return {};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    status = InvalidArgumentError(path + ": cannot be read");
    return {};
  }
  // Up to one byte more than allowed: a file that grew since is refused by the parser.
  std::string text;
  if (!ec) text.reserve(static_cast<std::size_t>(size));
  char chunk[65536];
  while (text.size() <= max_bytes && in.read(chunk, sizeof chunk).gcount() > 0)
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
  if (in.bad()) status = InvalidArgumentError(path + ": cannot be read");
  return text;
}

}  // namespace

std::string_view UnitName(Unit unit) {
  switch (unit) {
    case Unit::kSecond: return "second";
    case Unit::kMinute: return "minute";
    case Unit::kHour: return "hour";
    case Unit::kDay: return "day";
    case Unit::kWeek: return "week";
    case Unit::kMonth: return "month";
    case Unit::kYear: return "year";
  }
  return "second";
}

std::chrono::milliseconds UnitWindow(Unit unit) {
  using std::chrono::hours;
  switch (unit) {
    case Unit::kSecond: return std::chrono::seconds(1);
    case Unit::kMinute: return std::chrono::minutes(1);
    case Unit::kHour: return hours(1);
    case Unit::kDay: return hours(24);
    case Unit::kWeek: return hours(24 * 7);
    case Unit::kMonth: return hours(24 * 30);
    case Unit::kYear: return hours(24 * 365);
  }
  return std::chrono::seconds(1);
}

std::string_view RuleKindName(RuleKind kind) {
  switch (kind) {
    case RuleKind::kFixedWindow: return "fixed_window";
    case RuleKind::kSlidingWindow: return "sliding_window";
    case RuleKind::kSlidingLog: return "sliding_log";
    case RuleKind::kTokenBucket: return "token_bucket";
    case RuleKind::kGcra: return "gcra";
    case RuleKind::kConcurrency: return "concurrency";
  }
  return "fixed_window";
}

std::string Position::ToString() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

sluice::Limit Rule::ToLimit() const {
  sluice::Limit limit;
  limit.window = UnitWindow(unit);
  limit.limit = requests_per_unit;
  switch (kind) {
    case RuleKind::kFixedWindow:
      limit.algorithm = sluice::Algorithm::kFixedWindow;
      limit.aligned = true;  // envoy-ratelimit's windows start at multiples of the unit
      break;
    case RuleKind::kSlidingWindow: limit.algorithm = sluice::Algorithm::kSlidingWindow; break;
    case RuleKind::kSlidingLog: limit.algorithm = sluice::Algorithm::kSlidingLog; break;
    case RuleKind::kTokenBucket:
    case RuleKind::kGcra:
      limit.algorithm =
          kind == RuleKind::kGcra ? sluice::Algorithm::kGcra : sluice::Algorithm::kTokenBucket;
      limit.limit = burst > 0 ? burst : requests_per_unit;
      limit.refill = requests_per_unit;
      break;
    case RuleKind::kConcurrency: break;
  }
  return limit;
}

const DomainConfig* Config::FindDomain(std::string_view domain) const {
  auto it =
      std::lower_bound(domains.begin(), domains.end(), domain,
                       [](const DomainConfig& d, std::string_view v) { return d.domain < v; });
  return it != domains.end() && it->domain == domain ? &*it : nullptr;
}

StatusOr<DomainConfig> ParseDomainYaml(std::string_view text, const std::string& file,
                                       std::vector<std::shared_ptr<const Rule>>& rules,
                                       const ConfigLimits& limits) {
  if (text.size() > limits.max_file_bytes) {
    return InvalidArgumentError(TooLarge(file, text.size(), limits.max_file_bytes));
  }
  try {
    {
      // The root map, then per level of descriptors a list and a map; rate_limit,
      // replaces and its entries below the deepest.
      std::istringstream in{std::string(text)};
      YAML::Parser screen_parser(in);
      Screen screen(file, 2 * limits.max_depth + 8);
      screen_parser.HandleNextDocument(screen);
    }
    const YAML::Node root = YAML::Load(std::string(text));
    if (!root.IsMap()) {
      return InvalidArgumentError(file + ":1:1: the document must be a map with a domain");
    }
    OnlyKeys(file, root, "the top level", {"domain", "descriptors"});
    if (!root["domain"]) Fail(file, root, "missing domain");
    DomainConfig config;
    config.file = file;
    config.domain = Scalar(file, root["domain"], "domain");
    if (config.domain.empty()) Fail(file, root["domain"], "domain must not be empty");
    Parser parser{file, config.domain, rules, limits};
    if (root["descriptors"]) {
      config.descriptors = parser.ParseList(root["descriptors"], {config.domain}, config.domain, 1);
    }
    return config;
  } catch (const ConfigError& e) {
    return InvalidArgumentError(e.at.ToString() + ": " + e.what);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(file + ":" + std::to_string(e.mark.line + 1) + ":" +
                                std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const std::exception& e) {
    return InvalidArgumentError(file + ": " + e.what());
  }
}

StatusOr<std::shared_ptr<const Config>> BuildConfig(
    const std::vector<std::pair<std::string, std::string>>& documents, const ConfigLimits& limits) {
  auto config = std::make_shared<Config>();
  std::map<std::string, std::string> domain_file;
  for (const auto& [file, text] : documents) {
    std::vector<std::shared_ptr<const Rule>> rules;
    auto domain = ParseDomainYaml(text, file, rules, limits);
    if (!domain.ok()) return domain.status();
    // The cap counts the rules of every file.
    if (config->rules.size() + rules.size() > limits.max_rules) {
      return InvalidArgumentError(
          rules[limits.max_rules - config->rules.size()]->position.ToString() + ": more than " +
          std::to_string(limits.max_rules) + " rate limits in the configuration");
    }
    auto [it, fresh] = domain_file.emplace(domain->domain, file);
    if (!fresh) {
      return InvalidArgumentError(file + ":1:1: domain '" + domain->domain +
                                  "' is already defined in " + it->second);
    }
    // replaces must name a rule of the same domain.
    std::set<std::string> names;
    for (const auto& r : rules)
      if (!r->name.empty()) names.insert(r->name);
    for (const auto& r : rules) {
      for (const auto& n : r->replaces) {
        if (!names.count(n)) {
          return InvalidArgumentError(r->position.ToString() + ": replaces names '" + n +
                                      "', which no rate_limit of domain '" + domain->domain +
                                      "' has");
        }
      }
    }
    config->rules.insert(config->rules.end(), rules.begin(), rules.end());
    config->domains.push_back(std::move(*domain));
    config->files.push_back(file);
  }
  std::sort(config->domains.begin(), config->domains.end(),
            [](const DomainConfig& a, const DomainConfig& b) { return a.domain < b.domain; });
  return std::shared_ptr<const Config>(std::move(config));
}

StatusOr<std::shared_ptr<const Config>> LoadConfig(const std::string& path,
                                                   const ConfigLimits& limits) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const auto ext = entry.path().extension().string();
      if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml"))
        files.push_back(entry.path().string());
    }
    if (ec) return InvalidArgumentError(path + ": cannot list the directory: " + ec.message());
    std::sort(files.begin(), files.end());
    if (files.empty()) return InvalidArgumentError(path + ": no *.yaml file in this directory");
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    return InvalidArgumentError(path + ": no such file or directory");
  }
  std::vector<std::pair<std::string, std::string>> documents;
  for (const auto& f : files) {
    Status status;
    std::string text = ReadFile(f, limits.max_file_bytes, status);
    if (!status.ok()) return status;
    documents.emplace_back(f, std::move(text));
  }
  return BuildConfig(documents, limits);
}

}  // namespace sluiced

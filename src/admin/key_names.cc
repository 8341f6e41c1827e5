// Key names of sluice's layout (docs/design.md §2) as the admin API reads them back: the
// inverse of core/keys.h, refusing every name sluice never writes.
#include "sluice/admin.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "core/keys.h"

namespace sluice {
namespace {

bool IsLimiterByte(char c) {
  return internal::IsNameByte(static_cast<unsigned char>(c));
}

bool IsTokenByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// A rate algorithm's counter (what a reservation is held against).
bool IsCounterSuffix(std::string_view suffix) {
  return suffix == "fw2" || suffix == "sw" || suffix == "sl" || suffix == "tb" || suffix == "gcra";
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
  if (suffix.ends_with(internal::kBlockSuffix)) return KeyType::kString;  // a block's end
  if (suffix.ends_with(internal::kReservationSuffix)) return KeyType::kString;
  if (suffix == "fw2" || suffix == "fw" || suffix == "sw" || suffix == "tb" || suffix == "gcra") {
    return KeyType::kString;
  }
  if (suffix == "sl" || suffix == "cc") return KeyType::kZset;
  if (suffix == internal::kQuotaSuffix || suffix == internal::kLeaseHistorySuffix) {
    return KeyType::kHash;
  }
  if (suffix == internal::kQuotaIndexSuffix) return KeyType::kZset;
  if (suffix == internal::kLeaseQueueSuffix || suffix == internal::kLeaseTicketSuffix) {
    return KeyType::kZset;
  }
  if (suffix == "audit") return KeyType::kStream;
  if (suffix == internal::kOverridesSuffix) return KeyType::kHash;
  return KeyType::kNone;
}

std::string_view SuffixAlgorithm(std::string_view suffix) {
  // A block is its algorithm's (the key's state says it is a block).
  if (suffix.ends_with(internal::kBlockSuffix)) suffix.remove_suffix(internal::kBlockSuffix.size());
  // So is a reservation.
  if (suffix.ends_with(internal::kReservationSuffix)) {
    suffix.remove_suffix(internal::kReservationSuffix.size());
  }
  if (suffix == "fw2" || suffix == "fw") return "fixed_window";
  if (suffix == "sw") return "sliding_window";
  if (suffix == "sl") return "sliding_log";
  if (suffix == "tb") return "token_bucket";
  if (suffix == "gcra") return "gcra";
  if (suffix == "cc" || suffix == internal::kLeaseQueueSuffix ||
      suffix == internal::kLeaseTicketSuffix || suffix == internal::kLeaseHistorySuffix) {
    return "concurrency";
  }
  if (suffix == internal::kQuotaSuffix || suffix == internal::kQuotaIndexSuffix) {
    return "quota_shares";
  }
  if (suffix == "audit") return "audit_log";
  if (suffix == internal::kOverridesSuffix) return "runtime_overrides";
  return "";
}

namespace {

bool KnownSuffix(std::string_view suffix) {
  return std::find(std::begin(internal::kKeySuffixes), std::end(internal::kKeySuffixes), suffix) !=
             std::end(internal::kKeySuffixes) ||
         suffix == internal::kLeaseQueueSuffix || suffix == internal::kLeaseTicketSuffix;
}

// `<encoded tag>}:<limiter>:<encoded id>:<suffix>`, the rest of a co-located key after
// `{@`: only what MakeColocatedKey writes (the tag is the one the id has for some
// separator).
std::optional<KeyName> ParseColocated(std::string_view rest) {
  const size_t close = rest.find('}');
  if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
    return std::nullopt;
  }
  KeyName name;
  name.encoded_slot_tag = std::string(rest.substr(0, close));
  std::optional<std::string> tag;
  if (!internal::DecodeId(name.encoded_slot_tag, tag)) return std::nullopt;
  rest = rest.substr(close + 2);
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > internal::kMaxNameBytes) {
    return std::nullopt;
  }
  name.limiter = std::string(rest.substr(0, colon));
  if (!std::all_of(name.limiter.begin(), name.limiter.end(), IsLimiterByte)) return std::nullopt;
  rest = rest.substr(colon + 1);
  const size_t last = rest.rfind(':');
  if (last == std::string_view::npos) return std::nullopt;
  name.encoded_id = std::string(rest.substr(0, last));
  const std::string_view suffix = rest.substr(last + 1);
  if (!KnownSuffix(suffix)) return std::nullopt;
  name.suffix = std::string(suffix);
  if (!internal::DecodeId(name.encoded_id, name.id)) return std::nullopt;
  // When both are readable, the tag must be the id, or the id's part before a separator
  // that the tag does not hold.
  if (tag && name.id && *tag != *name.id) {
    const std::string& id = *name.id;
    if (tag->empty() || id.size() <= tag->size() || !id.starts_with(*tag)) return std::nullopt;
    const auto separator = static_cast<unsigned char>(id[tag->size()]);
    if (!internal::IsSlotTagSeparator(separator) ||
        tag->find(static_cast<char>(separator)) != std::string::npos) {
      return std::nullopt;
    }
  }
  return name;
}

}  // namespace

std::optional<KeyName> ParseKeyName(std::string_view prefix, std::string_view key) {
  // A reservation: a rate counter's key, ":r:" and a token (core/keys.h).
  constexpr std::size_t kTail =
      internal::kReservationInfix.size() + internal::kReservationTokenChars;
  if (key.size() > kTail) {
    const std::string_view tail = key.substr(key.size() - kTail);
    const std::string_view token = tail.substr(internal::kReservationInfix.size());
    if (tail.starts_with(internal::kReservationInfix) &&
        std::all_of(token.begin(), token.end(), IsTokenByte)) {
      std::optional<KeyName> name = ParseKeyName(prefix, key.substr(0, key.size() - kTail));
      if (!name || !IsCounterSuffix(name->suffix)) return std::nullopt;
      name->suffix += internal::kReservationSuffix;
      return name;
    }
  }
  if (key.size() == prefix.size() + 6 && key.starts_with(prefix) && key.ends_with(":audit")) {
    return KeyName{.suffix = "audit"};
  }
  constexpr std::string_view kOverridesTag = ":{overrides}:";
  if (key.starts_with(prefix) && key.substr(prefix.size()).starts_with(kOverridesTag)) {
    // A limiter's runtime overrides (core/keys.h, MakeOverridesKey).
    const std::string_view limiter = key.substr(prefix.size() + kOverridesTag.size());
    if (limiter.empty() || limiter.size() > internal::kMaxNameBytes ||
        !std::all_of(limiter.begin(), limiter.end(), IsLimiterByte)) {
      return std::nullopt;
    }
    return KeyName{.limiter = std::string(limiter),
                   .suffix = std::string(internal::kOverridesSuffix)};
  }
  if (key.size() < prefix.size() + 2 || !key.starts_with(prefix) ||
      key.substr(prefix.size(), 2) != ":{") {
    return std::nullopt;
  }
  std::string_view rest = key.substr(prefix.size() + 2);
  if (rest.starts_with('@')) return ParseColocated(rest.substr(1));
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > internal::kMaxNameBytes) {
    return std::nullopt;
  }
  KeyName name;
  name.limiter = std::string(rest.substr(0, colon));
  if (!std::all_of(name.limiter.begin(), name.limiter.end(), IsLimiterByte)) return std::nullopt;
  rest = rest.substr(colon + 1);
  const size_t close = rest.find('}');
  if (close == std::string_view::npos || rest.substr(close).size() < 3 || rest[close + 1] != ':') {
    return std::nullopt;
  }
  name.encoded_id = std::string(rest.substr(0, close));
  const std::string_view suffix = rest.substr(close + 2);
  // A quota shares bucket (sluice/quota.h) is sluice's too: never co-located.
  if (!KnownSuffix(suffix) && suffix != internal::kQuotaSuffix &&
      suffix != internal::kQuotaIndexSuffix) {
    return std::nullopt;
  }
  name.suffix = std::string(suffix);
  if (!internal::DecodeId(name.encoded_id, name.id)) return std::nullopt;
  return name;
}

}  // namespace sluice

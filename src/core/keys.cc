#include "core/keys.h"

#include "core/sha256.h"

namespace sluice::internal {
namespace {

bool NeedsEscape(unsigned char c) {
  return c <= 0x20 || c >= 0x7f || c == '%' || c == '{' || c == '}' || c == '#';
}

// A hex digit's value: upper case as EncodeId writes escapes, lower case as Sha256Hex
// writes hashes; -1 for anything else.
int HexValue(char c, bool upper) {
  if (c >= '0' && c <= '9') return c - '0';
  if (upper && c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (!upper && c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

bool IsNameByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

Status ValidateName(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return InvalidArgumentError(std::string(what) + " must be 1-64 bytes, got " +
                                std::to_string(name.size()));
  }
  for (unsigned char c : name) {
    if (!IsNameByte(c)) {
      return InvalidArgumentError(std::string(what) + " \"" + std::string(name) +
                                  "\" may hold only letters, digits and _.-");
    }
  }
  return Status::Ok();
}

std::string EncodeId(std::string_view id) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(id.size() + 8);
  for (unsigned char c : id) {
    if (NeedsEscape(c)) {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(static_cast<char>(c));
    }
    if (out.size() > kMaxEncodedIdBytes) return "#" + Sha256Hex(id);
  }
  return out;
}

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
  if (encoded.size() > kMaxEncodedIdBytes) return false;
  std::string out;
  out.reserve(encoded.size());
  for (size_t i = 0; i < encoded.size(); ++i) {
    const auto c = static_cast<unsigned char>(encoded[i]);
    if (c == '%') {
      if (i + 2 >= encoded.size()) return false;
      const int hi = HexValue(encoded[i + 1], true), lo = HexValue(encoded[i + 2], true);
      if (hi < 0 || lo < 0) return false;
      const auto b = static_cast<unsigned char>(hi * 16 + lo);
      if (!NeedsEscape(b)) return false;
      out.push_back(static_cast<char>(b));
      i += 2;
    } else {
      if (NeedsEscape(c)) return false;
      out.push_back(static_cast<char>(c));
    }
  }
  id = std::move(out);
  return true;
}

std::string KeyHead(std::string_view prefix, std::string_view limiter) {
  std::string head;
  head.reserve(prefix.size() + limiter.size() + 3);
  head.append(prefix).append(":{").append(limiter).push_back(':');
  return head;
}

std::string_view AlgorithmSuffix(Algorithm algorithm) {
  switch (algorithm) {
    // v2 (a plain count, the window's end in the key's expiry): a new name, so a server
    // still on the "count:end" format ("fw") and one on v2 never delete each other's
    // state as foreign during a rolling deploy (docs/design.md §2).
    case Algorithm::kFixedWindow: return "fw2";
    case Algorithm::kSlidingWindow: return "sw";
    case Algorithm::kSlidingLog: return "sl";
    case Algorithm::kTokenBucket: return "tb";
    case Algorithm::kGcra: return "gcra";
  }
  return "x";
}

namespace {

// KeyHead + EncodeId(id) + "}:" + suffix: the plain key of every kind of state.
std::string MakeSuffixedKey(std::string_view key_head, std::string_view id,
                            std::string_view suffix) {
  std::string key;
  key.reserve(key_head.size() + id.size() + 8 + suffix.size());
  key.append(key_head).append(EncodeId(id)).append("}:").append(suffix);
  return key;
}

}  // namespace

std::string MakeKey(std::string_view key_head, std::string_view id, Algorithm algorithm) {
  return MakeSuffixedKey(key_head, id, AlgorithmSuffix(algorithm));
}

bool IsSlotTagSeparator(unsigned char c) {
  return c > 0x20 && c < 0x7f &&
         !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'));
}

std::string_view SlotTagOf(std::string_view id, char separator) {
  const size_t at = id.find(separator);
  return at == std::string_view::npos || at == 0 ? id : id.substr(0, at);
}

std::string MakeColocatedKey(std::string_view prefix, std::string_view limiter, char separator,
                             std::string_view id, std::string_view suffix) {
  return MakeTaggedKey(prefix, limiter, SlotTagOf(id, separator), id, suffix);
}

std::string MakeTaggedKey(std::string_view prefix, std::string_view limiter, std::string_view tag,
                          std::string_view id, std::string_view suffix) {
  std::string key;
  key.reserve(prefix.size() + limiter.size() + tag.size() + id.size() + suffix.size() + 16);
  key.append(prefix)
      .append(":{@")
      .append(EncodeId(tag))
      .append("}:")
      .append(limiter)
      .push_back(':');
  key.append(EncodeId(id)).push_back(':');
  key.append(suffix);
  return key;
}

std::string MakeLeaseKey(std::string_view key_head, std::string_view id) {
  return MakeSuffixedKey(key_head, id, kLeaseSuffix);
}

std::string MakeQuotaKey(std::string_view key_head, std::string_view id) {
  return MakeSuffixedKey(key_head, id, kQuotaSuffix);
}

std::string MakeOverridesKey(std::string_view prefix, std::string_view limiter) {
  std::string key(prefix);
  key += ":{overrides}:";
  key += limiter;
  return key;
}

std::string MakeQuotaIndexKey(std::string_view key_head, std::string_view id) {
  return MakeSuffixedKey(key_head, id, kQuotaIndexSuffix);
}

}  // namespace sluice::internal

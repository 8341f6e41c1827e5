#include "service/handles.h"

#include <sys/random.h>

#include <array>
#include <cstdint>

namespace sluiced {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr unsigned char kLeaseHandleVersion = 1;
constexpr unsigned char kReservationHandleVersion = 2;
constexpr std::size_t kMaxLimiterNameBytes = 64;
constexpr std::size_t kMaxLeaseRefBytes = 256;

std::string Base64Url(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  return out;
}

int Sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

// Base64Url's inverse; nullopt for a character outside the alphabet, a length no
// encoding has (1 mod 4), or leftover bits that are not zero (one text per byte string).
std::optional<std::string> FromBase64Url(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = Sextet(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

}  // namespace

std::string RandomHandle() {
  std::array<char, 16> bytes;
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n > 0) filled += static_cast<std::size_t>(n);
    // n < 0: EINTR (getrandom blocks only before the kernel's pool is seeded at boot).
  }
  return Base64Url(std::string_view(bytes.data(), bytes.size()));
}

// Raw form: version (1 byte), name size (1), name, reference size (2, big-endian),
// reference. Both sizes are checked against what is there, so a truncated or extended
// handle is refused before any store call.
std::string EncodeLeaseHandle(std::string_view limiter_name, std::string_view lease_ref) {
  std::string raw;
  raw.reserve(4 + limiter_name.size() + lease_ref.size());
  raw.push_back(static_cast<char>(kLeaseHandleVersion));
  raw.push_back(static_cast<char>(limiter_name.size()));
  raw.append(limiter_name);
  raw.push_back(static_cast<char>(lease_ref.size() >> 8));
  raw.push_back(static_cast<char>(lease_ref.size() & 0xff));
  raw.append(lease_ref);
  return Base64Url(raw);
}

std::optional<LeaseHandle> DecodeLeaseHandle(std::string_view handle) {
  if (handle.empty() || handle.size() > kMaxLeaseHandleBytes) return std::nullopt;
  const std::optional<std::string> raw = FromBase64Url(handle);
  if (!raw || raw->size() < 4 || static_cast<unsigned char>((*raw)[0]) != kLeaseHandleVersion)
    return std::nullopt;
  const std::size_t name_size = static_cast<unsigned char>((*raw)[1]);
  if (name_size == 0 || name_size > kMaxLimiterNameBytes || raw->size() < 4 + name_size)
    return std::nullopt;
  const std::size_t ref_size =
      static_cast<std::size_t>(static_cast<unsigned char>((*raw)[2 + name_size])) << 8 |
      static_cast<unsigned char>((*raw)[3 + name_size]);
  if (ref_size == 0 || ref_size > kMaxLeaseRefBytes || raw->size() != 4 + name_size + ref_size)
    return std::nullopt;
  return LeaseHandle{raw->substr(2, name_size), raw->substr(4 + name_size)};
}

// Raw form: version (1 byte), count (1), then per limit: name size (1), name, reference
// size (2, big-endian), reference. Every size is checked against what is there.
std::optional<std::string> EncodeReservationHandle(const std::vector<ReservedLimit>& limits) {
  if (limits.empty() || limits.size() > kMaxReservationLimits) return std::nullopt;
  std::string raw;
  raw.push_back(static_cast<char>(kReservationHandleVersion));
  raw.push_back(static_cast<char>(limits.size()));
  for (const ReservedLimit& l : limits) {
    if (l.limiter_name.empty() || l.limiter_name.size() > kMaxLimiterNameBytes ||
        l.reservation_ref.empty() || l.reservation_ref.size() > 0xffff) {
      return std::nullopt;
    }
    raw.push_back(static_cast<char>(l.limiter_name.size()));
    raw.append(l.limiter_name);
    raw.push_back(static_cast<char>(l.reservation_ref.size() >> 8));
    raw.push_back(static_cast<char>(l.reservation_ref.size() & 0xff));
    raw.append(l.reservation_ref);
  }
  std::string handle = Base64Url(raw);
  if (handle.size() > kMaxReservationHandleBytes) return std::nullopt;
  return handle;
}

std::optional<std::vector<ReservedLimit>> DecodeReservationHandle(std::string_view handle) {
  if (handle.empty() || handle.size() > kMaxReservationHandleBytes) return std::nullopt;
  const std::optional<std::string> raw = FromBase64Url(handle);
  if (!raw || raw->size() < 2 || static_cast<unsigned char>((*raw)[0]) != kReservationHandleVersion)
    return std::nullopt;
  const std::size_t count = static_cast<unsigned char>((*raw)[1]);
  if (count == 0 || count > kMaxReservationLimits) return std::nullopt;
  std::vector<ReservedLimit> limits;
  std::size_t at = 2;
  for (std::size_t i = 0; i < count; ++i) {
    if (raw->size() < at + 1) return std::nullopt;
    const std::size_t name_size = static_cast<unsigned char>((*raw)[at]);
    if (name_size == 0 || name_size > kMaxLimiterNameBytes || raw->size() < at + 3 + name_size)
      return std::nullopt;
    std::string name = raw->substr(at + 1, name_size);
    at += 1 + name_size;
    const std::size_t ref_size = static_cast<std::size_t>(static_cast<unsigned char>((*raw)[at]))
                                     << 8 |
                                 static_cast<unsigned char>((*raw)[at + 1]);
    at += 2;
    if (ref_size == 0 || raw->size() < at + ref_size) return std::nullopt;
    limits.push_back({std::move(name), raw->substr(at, ref_size)});
    at += ref_size;
  }
  if (at != raw->size()) return std::nullopt;
  return limits;
}

}  // namespace sluiced

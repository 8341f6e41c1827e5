// Reading numbers out of stored values and replies: decimal text, the scripts'
// big-endian doubles and little-endian packed integers. Every reader takes untrusted
// bytes (what Redis holds may be anything) and says when they are not a number.
#pragma once

#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::internal {

// A whole decimal number (an optional '-' and digits, nothing else) in int64's range.
inline std::optional<int64_t> ParseDecimal(std::string_view s) {
  int64_t v = 0;
  if (s.empty() || s[0] == '+') return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// An integer the scripts stored as a double: exact and within ±9e18, else nullopt.
inline std::optional<int64_t> ExactInteger(double d) {
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return std::nullopt;
  return static_cast<int64_t>(d);
}

// The double packed big-endian ('>d', string.pack) at bytes[at, at + 8).
// Precondition: bytes.size() >= at + 8.
inline double BigEndianDouble(std::string_view bytes, std::size_t at) {
  uint64_t bits = 0;
  for (std::size_t i = 0; i < 8; ++i)
    bits = (bits << 8) | static_cast<unsigned char>(bytes[at + i]);
  return std::bit_cast<double>(bits);
}

// The signed integer packed little-endian in `width` bytes ('<i<width>') at
// bytes[at, at + width), sign-extended. Precondition: 1 <= width <= 8, bytes long enough.
inline int64_t LittleEndianSigned(std::string_view bytes, std::size_t at, std::size_t width) {
  uint64_t bits = 0;
  for (std::size_t i = width; i-- > 0;)
    bits = (bits << 8) | static_cast<unsigned char>(bytes[at + i]);
  const unsigned shift = static_cast<unsigned>(64 - 8 * width);
  return static_cast<int64_t>(bits << shift) >> shift;
}

}  // namespace sluice::internal

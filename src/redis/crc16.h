// Redis Cluster's key hashing: CRC16 (XMODEM: polynomial 0x1021, initial value 0, no
// reflection) and the hash slot of a key, with hash tags exactly as Redis applies them:
// when the key holds a `{` and, after it, a `}` with at least one byte between them, only
// the bytes between the first `{` and the first `}` after it are hashed; otherwise the
// whole key is.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::internal {

inline constexpr uint16_t kClusterSlots = 16384;

uint16_t Crc16(std::string_view bytes);

// The hash slot (0..16383) Redis Cluster stores `key` in.
uint16_t KeySlot(std::string_view key);

}  // namespace sluice::internal

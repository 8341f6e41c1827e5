// SHA-256 (FIPS 180-4), used to bound the length of keys built from very long ids.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::internal {

std::array<uint8_t, 32> Sha256(std::string_view data);
// Lower-case hex of Sha256(data): 64 characters.
std::string Sha256Hex(std::string_view data);

}  // namespace sluice::internal

// SHA-256 against published vectors and against coreutils' sha256sum at the padding edges.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::internal {
namespace {

// FIPS 180-2, Appendix B (SHA-256 examples).
TEST(Sha256, Fips180EmptyString) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, Fips180Abc) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, Fips180TwoBlockMessage) {
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, Fips180OneMillionA) {
  EXPECT_EQ(Sha256Hex(std::string(1'000'000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding edges: 55 bytes is the longest message whose padding fits in its last block,
// 56 the shortest that needs one more; 63/64/65 straddle a full block.
// Expected digests were obtained once with coreutils sha256sum:
//   head -c N /dev/zero | tr '\0' a | sha256sum
struct PaddingCase {
  std::size_t length;
  const char* hex;
};

TEST(Sha256, PaddingEdgesMatchSha256sum) {
  const PaddingCase cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      // The same edges one block later (a full block before the tail).
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  for (const PaddingCase& c : cases) {
    EXPECT_EQ(Sha256Hex(std::string(c.length, 'a')), c.hex) << c.length << " bytes of 'a'";
  }
}

// Every byte value once, including NUL and bytes >= 0x80 (signedness of char).
// Expected digest obtained once with:
//   python3 -c "import sys; sys.stdout.buffer.write(bytes(range(256)))" | sha256sum
TEST(Sha256, AllByteValuesMatchSha256sum) {
  std::string data;
  for (int b = 0; b < 256; ++b) data.push_back(static_cast<char>(b));
  EXPECT_EQ(Sha256Hex(data), "40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880");
}

TEST(Sha256, BinaryDigestMatchesHex) {
  const std::array<uint8_t, 32> digest = Sha256("abc");
  EXPECT_EQ(digest[0], 0xba);
  EXPECT_EQ(digest[1], 0x78);
  EXPECT_EQ(digest[31], 0xad);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t byte : digest) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 15]);
  }
  EXPECT_EQ(hex, Sha256Hex("abc"));
}

TEST(Sha256, HexIsSixtyFourLowerCaseDigits) {
  const std::string hex = Sha256Hex("sluice");
  ASSERT_EQ(hex.size(), 64u);
  for (char c : hex) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << hex;
}

}  // namespace
}  // namespace sluice::internal

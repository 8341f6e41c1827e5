// Key layout and id encoding (docs/design.md §2): no id can break the hash tag, two different
// ids never share a key, and keys stay bounded in length.
#include "core/keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/sha256.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice::internal {
namespace {

using namespace std::string_literals;

// True when `encoded` could sit inside a hash tag: no brace, and `#` only as the first
// character of a hashed id.
void ExpectTagSafe(std::string_view id, const std::string& encoded) {
  EXPECT_EQ(encoded.find('{'), std::string::npos) << "id: " << id;
  EXPECT_EQ(encoded.find('}'), std::string::npos) << "id: " << id;
  EXPECT_EQ(encoded.find('#', 1), std::string::npos) << "id: " << id;
  if (!encoded.empty() && encoded[0] == '#') {
    EXPECT_EQ(encoded.size(), 65u) << "a hashed id is # + 64 hex digits";
  }
  EXPECT_LE(encoded.size(), kMaxEncodedIdBytes) << "id: " << id;
}

TEST(EncodeId, KeepsPlainIdsAsIs) {
  EXPECT_EQ(EncodeId("user-42"), "user-42");
  EXPECT_EQ(EncodeId("a"), "a");
  EXPECT_EQ(EncodeId("10.0.0.1"), "10.0.0.1");
  // Printable ASCII other than % { } # is kept, including ':' and '/'.
  EXPECT_EQ(EncodeId("tenant:7/route"), "tenant:7/route");
}

TEST(EncodeId, EscapesBraces) {
  EXPECT_EQ(EncodeId("{"), "%7B");
  EXPECT_EQ(EncodeId("}"), "%7D");
  EXPECT_EQ(EncodeId("a{b}c"), "a%7Bb%7Dc");
  EXPECT_EQ(EncodeId("}{"), "%7D%7B");
}

TEST(EncodeId, EscapesPercentAndHash) {
  EXPECT_EQ(EncodeId("%"), "%25");
  EXPECT_EQ(EncodeId("#"), "%23");
  EXPECT_EQ(EncodeId("%7B"), "%257B") << "an id that looks escaped must not equal one that is";
  EXPECT_EQ(EncodeId("#abc"), "%23abc");
}

TEST(EncodeId, EscapesNulSpaceAndControlBytes) {
  EXPECT_EQ(EncodeId("\0"s), "%00");
  EXPECT_EQ(EncodeId("a\0b"s), "a%00b");
  EXPECT_EQ(EncodeId(" "), "%20");
  EXPECT_EQ(EncodeId("a b"), "a%20b");
  EXPECT_EQ(EncodeId("\t\r\n"), "%09%0D%0A");
  EXPECT_EQ(EncodeId("\x7f"), "%7F");
}

TEST(EncodeId, EscapesHighBytesAndUtf8) {
  EXPECT_EQ(EncodeId("\xff"), "%FF");
  EXPECT_EQ(EncodeId("\x80"), "%80");
  // "é" is C3 A9 in UTF-8; "€" is E2 82 AC.
  EXPECT_EQ(EncodeId("caf\xc3\xa9"), "caf%C3%A9");
  EXPECT_EQ(EncodeId("\xe2\x82\xac"
                     "5"),
            "%E2%82%AC5");
}

TEST(EncodeId, NulBytesAreNotTruncated) {
  EXPECT_NE(EncodeId("a\0"s), EncodeId("a"));
  EXPECT_NE(EncodeId("\0\0"s), EncodeId("\0"s));
}

TEST(EncodeId, EveryByteValueIsTagSafe) {
  for (int b = 0; b < 256; ++b) {
    const std::string id(1, static_cast<char>(b));
    const std::string encoded = EncodeId(id);
    SCOPED_TRACE("byte " + std::to_string(b));
    ExpectTagSafe(id, encoded);
    EXPECT_NE(encoded[0], '#');
    EXPECT_TRUE(encoded.size() == 1 || encoded.size() == 3) << encoded;
  }
}

// Random short ids over a small alphabet rich in special bytes: distinct ids give
// distinct encodings, and every encoding is tag-safe.
TEST(EncodeId, IsInjectiveOnRandomIds) {
  constexpr uint32_t kSeed = 20240917;
  std::printf("EncodeId.IsInjectiveOnRandomIds seed=%u\n", kSeed);
  std::mt19937 rng(kSeed);
  const std::string alphabet =
      "a%{}#: \x7f\xff\xc3\xa9"
      "7B"s +
      '\0';
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> length(1, 8);

  std::unordered_map<std::string, std::string> id_by_encoding;
  int distinct_ids = 0;
  for (int i = 0; i < 50'000; ++i) {
    std::string id;
    for (int n = length(rng); n > 0; --n) id.push_back(alphabet[pick(rng)]);
    const std::string encoded = EncodeId(id);
    auto [it, inserted] = id_by_encoding.emplace(encoded, id);
    if (inserted) {
      ++distinct_ids;
      ExpectTagSafe(id, encoded);
    } else {
      ASSERT_EQ(it->second, id) << "seed " << kSeed << ": two ids share encoding " << encoded;
    }
  }
  // Guards against a degenerate generator that would make the check vacuous.
  EXPECT_GT(distinct_ids, 25'000);
}

TEST(EncodeId, HugeIdIsHashedToABoundedLength) {
  const std::string id(1 << 20, 'x');
  const std::string encoded = EncodeId(id);
  EXPECT_EQ(encoded, "#" + Sha256Hex(id));
  ExpectTagSafe("<1 MB of x>", encoded);

  const std::string key = MakeKey(KeyHead("sluice", "login"), id, Algorithm::kFixedWindow);
  EXPECT_EQ(key.rfind("sluice:{login:#", 0), 0u) << key.substr(0, 40);
  EXPECT_EQ(key.size(), std::string("sluice:{login:}:fw2").size() + 65);
  EXPECT_TRUE(key.ends_with("}:fw2")) << key.substr(key.size() - 10);
}

TEST(EncodeId, HugeIdOfSpecialBytesIsHashed) {
  const std::string id(1 << 20, '{');
  const std::string encoded = EncodeId(id);
  EXPECT_EQ(encoded, "#" + Sha256Hex(id));
  ExpectTagSafe("<1 MB of {>", encoded);
}

TEST(EncodeId, HugeIdsDifferingInOneByteGetDifferentKeys) {
  std::string a(1 << 20, 'x');
  std::string b = a;
  b[b.size() / 2] = 'y';
  std::string c = a;
  c.back() = '\0';
  const std::string head = KeyHead("sluice", "api");
  EXPECT_NE(MakeKey(head, a, Algorithm::kFixedWindow), MakeKey(head, b, Algorithm::kFixedWindow));
  EXPECT_NE(MakeKey(head, a, Algorithm::kFixedWindow), MakeKey(head, c, Algorithm::kFixedWindow));
  EXPECT_NE(MakeKey(head, b, Algorithm::kFixedWindow), MakeKey(head, c, Algorithm::kFixedWindow));
  // And a prefix of a long id is a different id.
  EXPECT_NE(MakeKey(head, a, Algorithm::kFixedWindow),
            MakeKey(head, a.substr(0, a.size() - 1), Algorithm::kFixedWindow));
}

TEST(EncodeId, ExactlyMaxEncodedBytesIsNotHashed) {
  const std::string id(kMaxEncodedIdBytes, 'x');
  EXPECT_EQ(EncodeId(id), id);
}

TEST(EncodeId, OneOverMaxEncodedBytesIsHashed) {
  const std::string id(kMaxEncodedIdBytes + 1, 'x');
  EXPECT_EQ(EncodeId(id), "#" + Sha256Hex(id));
}

TEST(EncodeId, EscapesCountThreeBytesTowardsTheBound) {
  static_assert(kMaxEncodedIdBytes == 128, "the ids below are sized for 128");
  // 42 escapes (126 bytes) + 2 plain bytes = 128 encoded bytes: kept.
  const std::string at_bound = std::string(42, '{') + "ab";
  const std::string encoded = EncodeId(at_bound);
  EXPECT_EQ(encoded.size(), 128u);
  EXPECT_NE(encoded[0], '#');
  EXPECT_EQ(encoded.substr(0, 6), "%7B%7B");
  EXPECT_EQ(encoded.substr(126), "ab");

  // 42 escapes + 3 plain bytes = 129 encoded bytes (a 45-byte id): hashed.
  const std::string over_plain = std::string(42, '{') + "abc";
  EXPECT_EQ(EncodeId(over_plain), "#" + Sha256Hex(over_plain));

  // 43 escapes = 129 encoded bytes (a 43-byte id): hashed, although the raw id is short.
  const std::string over_escape = std::string(43, '}');
  EXPECT_EQ(EncodeId(over_escape), "#" + Sha256Hex(over_escape));

  // 127 plain bytes + one escape = 130: hashed; 125 + one escape = 128: kept.
  const std::string plain_then_escape_over = std::string(127, 'x') + "%";
  EXPECT_EQ(EncodeId(plain_then_escape_over)[0], '#');
  const std::string plain_then_escape_at = std::string(125, 'x') + "%";
  EXPECT_EQ(EncodeId(plain_then_escape_at), std::string(125, 'x') + "%25");
}

TEST(EncodeId, HashedIdNeverEqualsAnEncodedId) {
  // An id that spells out "#<hex>" of a long id is escaped, so it cannot collide with it.
  const std::string long_id(200, 'z');
  const std::string hashed = EncodeId(long_id);
  ASSERT_EQ(hashed[0], '#');
  EXPECT_NE(EncodeId(hashed), hashed);
  EXPECT_EQ(EncodeId(hashed), "%23" + hashed.substr(1));
}

TEST(KeyHead, LayoutIsPrefixColonBraceLimiterColon) {
  EXPECT_EQ(KeyHead("sluice", "login"), "sluice:{login:");
  EXPECT_EQ(KeyHead("my.app-1", "api_v2"), "my.app-1:{api_v2:");
}

TEST(MakeKey, LayoutIsPrefixTagLimiterEncodedId) {
  EXPECT_EQ(MakeKey(KeyHead("sluice", "login"), "alice", Algorithm::kFixedWindow),
            "sluice:{login:alice}:fw2");
  EXPECT_EQ(MakeKey(KeyHead("p", "l"), "a{b}", Algorithm::kFixedWindow), "p:{l:a%7Bb%7D}:fw2");
  EXPECT_EQ(MakeKey(KeyHead("p", "l"), "\0"s, Algorithm::kFixedWindow), "p:{l:%00}:fw2");
  EXPECT_EQ(MakeKey(KeyHead("p", "l"), "x y#", Algorithm::kFixedWindow), "p:{l:x%20y%23}:fw2");
}

TEST(MakeKey, TagHoldsExactlyOneOpenAndOneCloseBrace) {
  for (std::string id : {"}"s, "{"s, "}}{{"s, "a}:{b"s, std::string(300, '}')}) {
    const std::string key = MakeKey(KeyHead("sluice", "rl"), id, Algorithm::kFixedWindow);
    EXPECT_EQ(std::count(key.begin(), key.end(), '{'), 1) << key;
    EXPECT_EQ(std::count(key.begin(), key.end(), '}'), 1) << key;
    EXPECT_EQ(key.find('{'), std::string("sluice:").size()) << key;
    EXPECT_TRUE(key.ends_with("}:fw2")) << key;
  }
}

TEST(MakeKey, DifferentLimitersNeverShareAKey) {
  // The limiter ends at the first ':' after '{' because a valid name cannot hold ':' ...
  ASSERT_FALSE(ValidateName("limiter", "a:b").ok());
  // ... so a limiter whose name is a prefix of another's cannot reach its keys.
  EXPECT_NE(MakeKey(KeyHead("p", "a"), "b:c", Algorithm::kFixedWindow),
            MakeKey(KeyHead("p", "ab"), ":c", Algorithm::kFixedWindow));
  EXPECT_NE(MakeKey(KeyHead("p", "a"), "bx", Algorithm::kFixedWindow),
            MakeKey(KeyHead("p", "ab"), "x", Algorithm::kFixedWindow));
  EXPECT_NE(MakeKey(KeyHead("p", "a"), "x", Algorithm::kFixedWindow),
            MakeKey(KeyHead("p", "b"), "x", Algorithm::kFixedWindow));
  EXPECT_NE(MakeKey(KeyHead("p", "a"), "x", Algorithm::kFixedWindow),
            MakeKey(KeyHead("q", "a"), "x", Algorithm::kFixedWindow));
}

TEST(ValidateName, AcceptsLettersDigitsUnderscoreDotDash) {
  EXPECT_THAT(ValidateName("limiter", "a"), IsOk());
  EXPECT_THAT(ValidateName("limiter", "login.v2-x_Y9"), IsOk());
  EXPECT_THAT(ValidateName("limiter", "ABCxyz0189_.-"), IsOk());
  EXPECT_THAT(ValidateName("prefix", std::string(kMaxNameBytes, 'n')), IsOk());
  EXPECT_THAT(ValidateName("prefix", "..."), IsOk());
}

TEST(ValidateName, RejectsEmptyAndTooLong) {
  const Status empty = ValidateName("limiter", "");
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("limiter"), std::string::npos) << empty.message();

  const Status too_long = ValidateName("prefix", std::string(kMaxNameBytes + 1, 'n'));
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("prefix"), std::string::npos) << too_long.message();
  EXPECT_NE(too_long.message().find("65"), std::string::npos) << too_long.message();
}

TEST(ValidateName, RejectsBytesOutsideTheNameAlphabet) {
  for (std::string name : {"a:b"s, "a{b"s, "a}b"s, "a b"s, " "s, "a\0b"s, "caf\xc3\xa9"s, "a/b"s,
                           "a%b"s, "a#b"s, "a*b"s, "\xff"s}) {
    const Status status = ValidateName("limiter", name);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "name: " << name;
    EXPECT_NE(status.message().find("limiter"), std::string::npos) << status.message();
  }
}

}  // namespace
}  // namespace sluice::internal

namespace sluice::internal {
namespace {

// DecodeId is EncodeId's inverse on every id EncodeId writes in full (random ids of the
// bytes that get escaped and of plain ones, every single byte value), and says "hashed"
// for the ids it hashes.
TEST(DecodeId, RoundTripsEveryEncodedId) {
  constexpr uint32_t kSeed = 20261130;
  std::mt19937 rng(kSeed);
  const std::string alphabet = std::string("a%{}#: \x7f\xff\xc3\xa9Z9_.-") + '\0';
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> length(1, 60);
  int plain = 0, hashed = 0;
  for (int i = 0; i < 20'000; ++i) {
    std::string id;
    for (int n = length(rng); n > 0; --n) id.push_back(alphabet[pick(rng)]);
    const std::string encoded = EncodeId(id);
    std::optional<std::string> decoded = "unset";
    ASSERT_TRUE(DecodeId(encoded, decoded)) << "seed " << kSeed << " encoded " << encoded;
    if (encoded[0] == '#') {
      EXPECT_FALSE(decoded.has_value()) << encoded;
      ++hashed;
    } else {
      ASSERT_TRUE(decoded.has_value()) << encoded;
      EXPECT_EQ(*decoded, id) << "seed " << kSeed << " encoded " << encoded;
      ++plain;
    }
  }
  EXPECT_GT(plain, 1000);
  EXPECT_GT(hashed, 500);
  for (int b = 0; b < 256; ++b) {
    const std::string id(1, static_cast<char>(b));
    std::optional<std::string> decoded;
    ASSERT_TRUE(DecodeId(EncodeId(id), decoded)) << b;
    EXPECT_EQ(decoded, id) << b;
  }
}

TEST(DecodeId, RejectsWhatEncodeIdNeverWrites) {
  std::optional<std::string> id;
  for (std::string_view bad :
       {"", "a b", "a{b", "%41", "%7b", "%7", "%", "a%zz", "#abc",
        "#"
        "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"}) {
    EXPECT_FALSE(DecodeId(bad, id)) << "\"" << bad << "\"";
  }
  EXPECT_FALSE(DecodeId(std::string(kMaxEncodedIdBytes + 1, 'a'), id));
  EXPECT_TRUE(DecodeId("%7B%25", id));
  EXPECT_EQ(id, "{%");
}

}  // namespace
}  // namespace sluice::internal

// ParseKeyName is the line between sluice's keys and foreign ones: it must accept every
// key internal::MakeKey writes (and give back the id) and nothing else. KeyHashSet is how
// audit and repair count each scanned key once.
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

#include "admin/key_set.h"
#include "admin/key_state.h"
#include "core/keys.h"
#include "sluice/admin.h"

namespace sluice::admin_test {
namespace {

// Audit and repair count each key once although SCAN may return it
// again; KeyHashSet is what remembers the keys seen (a hash each, not a copy).
TEST(KeyHashSet, CountsEachKeyOnceThroughRepeatsAndGrowth) {
  const uint32_t seed = 20261130;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  internal::KeyHashSet set;
  std::unordered_set<std::string> reference;
  std::vector<std::string> keys;
  for (int i = 0; i < 300'000; ++i) {
    // New keys, and (a third of the time) a key seen before: what a SCAN over a table
    // being resized returns.
    std::string key;
    if (!keys.empty() && rng() % 3 == 0) {
      key = keys[rng() % keys.size()];
    } else {
      key = "sluice:{api:user:" + std::to_string(rng()) + "}:fw";
      keys.push_back(key);
    }
    const bool fresh = reference.insert(key).second;
    ASSERT_EQ(set.Insert(key), fresh) << key;
  }
  EXPECT_EQ(set.size(), reference.size());
  for (const std::string& key : keys) EXPECT_FALSE(set.Insert(key));
  EXPECT_TRUE(set.Insert(""));
  EXPECT_FALSE(set.Insert(""));
}

TEST(ParseKeyName, AcceptsEveryKeySluiceWritesAndDecodesTheId) {
  const uint32_t seed = 20261129;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int i = 0; i < 2000; ++i) {
    std::string id(1 + rng() % 150, '\0');
    for (char& c : id) c = static_cast<char>(rng() % 256);
    for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kSlidingWindow, Algorithm::kSlidingLog,
                        Algorithm::kTokenBucket, Algorithm::kGcra}) {
      const std::string key = internal::MakeKey(internal::KeyHead("pre.fix", "lim-1"), id, a);
      auto name = ParseKeyName("pre.fix", key);
      ASSERT_TRUE(name.has_value()) << key;
      EXPECT_EQ(name->limiter, "lim-1");
      EXPECT_EQ(name->suffix, internal::AlgorithmSuffix(a));
      EXPECT_EQ(name->encoded_id, internal::EncodeId(id));
      if (name->encoded_id[0] == '#') {
        EXPECT_FALSE(name->id.has_value());
      } else {
        EXPECT_EQ(name->id, id);
      }
    }
  }
  auto cc = ParseKeyName("sluice", "sluice:{pool:worker:7}:cc");
  ASSERT_TRUE(cc.has_value());
  EXPECT_EQ(cc->id, "worker:7");
  EXPECT_EQ(ExpectedKeyType(cc->suffix), KeyType::kZset);
}

TEST(ParseKeyName, AcceptsAQuotaSharesBucketInItsPlainFormOnly) {
  const std::string key = internal::MakeQuotaKey(internal::KeyHead("pre.fix", "rlqs"), "r{1}");
  auto name = ParseKeyName("pre.fix", key);
  ASSERT_TRUE(name.has_value()) << key;
  EXPECT_EQ(name->limiter, "rlqs");
  EXPECT_EQ(name->id, "r{1}");
  EXPECT_EQ(name->suffix, "qs");
  EXPECT_EQ(ExpectedKeyType(name->suffix), KeyType::kHash);
  EXPECT_EQ(SuffixAlgorithm(name->suffix), "quota_shares");
  // QuotaShares never co-locates: such a key is not sluice's.
  EXPECT_FALSE(
      ParseKeyName("pre.fix", internal::MakeColocatedKey("pre.fix", "rlqs", ':', "r:1", "qs")));
}

TEST(ParseKeyName, RejectsWhatSluiceNeverWrites) {
  for (const char* key : {
           "sluice:session:abc",          // no hash tag
           "other:{signin:a}:fw",         // another prefix
           "sluicex:{signin:a}:fw",       // a longer prefix
           "sluice:{signin:a}:fwx",       // unknown suffix
           "sluice:{signin:a}:",          // no suffix
           "sluice:{signin:a}",           // no suffix
           "sluice:{sign in:a}:fw",       // limiter name with a space
           "sluice:{:a}:fw",              // empty limiter
           "sluice:{signin:}:fw",         // empty id
           "sluice:{signin:a%zz}:fw",     // bad escape
           "sluice:{signin:a%41}:fw",     // escape of a byte never escaped ('A')
           "sluice:{signin:a%7b}:fw",     // lower-case hex: not EncodeId's
           "sluice:{signin:a%2}:fw",      // truncated escape
           "sluice:{signin:a b}:fw",      // raw space
           "sluice:{signin:#abc}:fw",     // short hash
           "sluice:{signin:a}:fw:extra",  // trailing part
       }) {
    EXPECT_FALSE(ParseKeyName("sluice", key).has_value()) << key;
  }
  EXPECT_TRUE(ParseKeyName("sluice", "sluice:{signin:a%7B%25}:fw").has_value());
}

// A reservation (Limiter::Reserve) is its counter's key, ":r:" and a 22-character token:
// sluice's (audit must not call it foreign, nor exit 2 for it), named by the counter's
// suffix and ":r", a string. Only a rate counter holds one, and only a token of the right
// size and alphabet is one.
TEST(ParseKeyName, AcceptsAReservationBesideItsCounter) {
  const std::string token = "AbCdEfGhIjKlMnOpQr-_09";
  ASSERT_EQ(token.size(), internal::kReservationTokenChars);
  for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kSlidingWindow, Algorithm::kSlidingLog,
                      Algorithm::kTokenBucket, Algorithm::kGcra}) {
    const std::string counter = internal::MakeKey(internal::KeyHead("sluice", "ai"), "u:{7}", a);
    auto name = ParseKeyName("sluice", counter + std::string(internal::kReservationInfix) + token);
    ASSERT_TRUE(name.has_value()) << counter;
    EXPECT_EQ(name->limiter, "ai");
    EXPECT_EQ(name->id, "u:{7}");
    EXPECT_EQ(name->suffix, std::string(internal::AlgorithmSuffix(a)) + ":r");
    EXPECT_EQ(ExpectedKeyType(name->suffix), KeyType::kString);
    EXPECT_EQ(SuffixAlgorithm(name->suffix), SuffixAlgorithm(internal::AlgorithmSuffix(a)));
    const std::string colocated =
        internal::MakeColocatedKey("sluice", "ai", ':', "u:7", internal::AlgorithmSuffix(a));
    auto beside = ParseKeyName("sluice", colocated + ":r:" + token);
    ASSERT_TRUE(beside.has_value()) << colocated;
    EXPECT_EQ(beside->encoded_slot_tag, "u");
  }
  for (const std::string& key : {
           "sluice:{ai:a}:cc:r:" + token,                  // a lease set holds none
           "sluice:{ai:a}:tb.blk:r:" + token,              // nor a block
           "sluice:{ai:a}:tb:r:" + token.substr(1),        // a short token
           "sluice:{ai:a}:tb:r:" + token.substr(1) + "=",  // not base64url
           "sluice:{ai:a}:tb:x:" + token,                  // another infix
           "sluice:{ai:a}:tb:r:" + token + ":r:" + token,  // one on another
       }) {
    EXPECT_FALSE(ParseKeyName("sluice", key).has_value()) << key;
  }
}

TEST(KeyState, AReservationCountsUntilItsValueSays) {
  KeyState held;
  internal::DescribeStringValue("tb:r", "r40:0:5000", 1000, held);
  EXPECT_EQ(held.problem, "");
  EXPECT_EQ(held.ends_at_ms, 5000);
  KeyState settled;
  internal::DescribeStringValue("sw:r", "s12:7000", 1000, settled);
  EXPECT_EQ(settled.problem, "");
  EXPECT_EQ(settled.ends_at_ms, 7000);
  for (const char* bad : {"", "x1:2", "r40:5000", "s12", "r:0:1", "s1:x"}) {
    KeyState s;
    internal::DescribeStringValue("tb:r", bad, 1000, s);
    EXPECT_NE(s.problem, "") << bad;
  }
}

// Co-located keys (LimiterOptions::colocate) are sluice's too: audit must not call them
// foreign, repair must be able to give them an expiry, inspect must find them.
TEST(ParseKeyName, AcceptsEveryCoLocatedKeyAndItsTag) {
  const uint32_t seed = 20261201;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string separators = ":/|.-_@#{}%";
  for (int i = 0; i < 2000; ++i) {
    std::string id(1 + rng() % 150, '\0');
    // Mostly printable, with separators, so that tags of every shape come up.
    for (char& c : id) {
      c = rng() % 4 == 0 ? separators[rng() % separators.size()]
                         : static_cast<char>(rng() % 3 == 0 ? rng() % 256 : 'a' + rng() % 26);
    }
    const char separator = separators[rng() % separators.size()];
    for (std::string_view suffix : internal::kKeySuffixes) {
      const std::string key = internal::MakeColocatedKey("pre.fix", "lim-1", separator, id, suffix);
      auto name = ParseKeyName("pre.fix", key);
      ASSERT_TRUE(name.has_value()) << key;
      EXPECT_EQ(name->limiter, "lim-1");
      EXPECT_EQ(name->suffix, suffix);
      EXPECT_EQ(name->encoded_id, internal::EncodeId(id));
      EXPECT_EQ(name->encoded_slot_tag, internal::EncodeId(internal::SlotTagOf(id, separator)));
      if (name->encoded_id[0] != '#') {
        EXPECT_EQ(name->id, id);
      }
    }
  }
  auto user = ParseKeyName("sluice", "sluice:{@acme}:user:acme:u42:fw");
  ASSERT_TRUE(user.has_value());
  EXPECT_EQ(user->limiter, "user");
  EXPECT_EQ(user->id, "acme:u42");
  EXPECT_EQ(user->encoded_slot_tag, "acme");
  // A plain key has no tag.
  EXPECT_EQ(ParseKeyName("sluice", "sluice:{user:acme:u42}:fw")->encoded_slot_tag, "");
}

TEST(ParseKeyName, RejectsCoLocatedKeysSluiceNeverWrites) {
  for (const char* key : {
           "sluice:{@acme}:user:beta:u1:fw",   // a tag that is not the id's
           "sluice:{@acm}:user:acme:u1:fw",    // a tag that stops inside a word
           "sluice:{@acme:}:user:acme:u1:fw",  // the separator in the tag
           "sluice:{@a/b}:user:a/b/c:fw",      // split at a separator that is not the first
           "sluice:{@}:user:acme:fw",          // an empty tag
           "sluice:{@acme}:user:acme:fwx",     // unknown suffix
           "sluice:{@acme}:user:fw",           // no id
           "sluice:{@acme}:us er:acme:fw",     // limiter name with a space
           "sluice:{@acme}user:acme:fw",       // no colon after the tag
           "sluice:{@acme}::acme:fw",          // empty limiter
           "sluice:{@ac me}:user:ac me:fw",    // raw space in the tag
       }) {
    EXPECT_FALSE(ParseKeyName("sluice", key).has_value()) << key;
  }
  EXPECT_TRUE(ParseKeyName("sluice", "sluice:{@acme}:user:acme/u1:fw").has_value());
  EXPECT_TRUE(ParseKeyName("sluice", "sluice:{@acme}:tenant:acme:tb").has_value());
}

}  // namespace
}  // namespace sluice::admin_test

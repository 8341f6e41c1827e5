// The Redis Cluster router's pure parts: CRC16 and hash slots (known vectors, hash tags
// exactly as Redis reads them), the CLUSTER SLOTS parser, the redirection parser (MOVED,
// ASK, TRYAGAIN, CLUSTERDOWN, READONLY) and the redis+cluster:// URL.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/keys.h"
#include "redis/crc16.h"
#include "redis/endpoint.h"
#include "redis/resp.h"
#include "redis/slot_map.h"
#include "sluice/admin.h"

namespace sluice::internal {
namespace {

TEST(ClusterCrc16, KnownVectors) {
  // CRC-16/XMODEM check value.
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
  EXPECT_EQ(Crc16("A"), 0x58E5);
}

TEST(ClusterKeySlot, MatchesRedis) {
  // Values as CLUSTER KEYSLOT answers them.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 & 16383);
  EXPECT_EQ(KeySlot(""), 0);
}

TEST(ClusterKeySlot, HashTags) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  // An empty tag: the whole key is hashed.
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") & 16383);
  EXPECT_NE(KeySlot("foo{}{bar}"), KeySlot("bar"));
  // From the first { to the first } after it.
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), Crc16("{bar") & 16383);
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  // No closing brace: the whole key.
  EXPECT_EQ(KeySlot("foo{bar"), Crc16("foo{bar") & 16383);
  EXPECT_EQ(KeySlot("}foo{bar}"), KeySlot("bar"));
}

TEST(ClusterKeySlot, AnIdCannotMoveItsKeyToAnotherSlot) {
  // The slot of every key of a decision is the slot of "<limiter>:<encoded id>", and
  // braces in an id are encoded, so an id cannot choose the tag.
  const std::string head = KeyHead("sluice", "api");
  for (const std::string id : {"plain", "x}{y", "{y}", "}", "{", "a{b}c", "{}", "%7B"}) {
    const std::string key = MakeKey(head, id, Algorithm::kFixedWindow);
    EXPECT_EQ(KeySlot(key), KeySlot("api:" + EncodeId(id))) << key;
    EXPECT_EQ(KeySlot(key), KeySlot(MakeLeaseKey(head, id))) << key;
    EXPECT_EQ(KeySlot(key), KeySlot(MakeKey(head, id, Algorithm::kGcra))) << key;
  }
  EXPECT_NE(KeySlot(MakeKey(head, "{y}", Algorithm::kFixedWindow)), KeySlot("y"));
}

TEST(ClusterKeySlot, CoLocatedLimitsOfOneTenantShareItsSlot) {
  // User, tenant and a tenant's route: three limiters, ids sharing the part before ':'.
  for (const std::string tenant : {"acme", "x}{y", "{victim}", "%7B", "a{b}c", "t#1"}) {
    const std::string user_key = MakeColocatedKey("sluice", "user", ':', tenant + ":u42", "fw");
    const std::string tenant_key = MakeColocatedKey("sluice", "tenant", ':', tenant, "tb");
    const std::string route_key = MakeColocatedKey("sluice", "route", ':', tenant + ":/x", "gcra");
    const uint16_t slot = KeySlot(user_key);
    EXPECT_EQ(KeySlot(tenant_key), slot) << tenant;
    EXPECT_EQ(KeySlot(route_key), slot) << tenant;
    // The slot is the encoded tag's (with the `@` that keeps the layouts apart), so braces
    // in the tenant cannot choose another.
    EXPECT_EQ(slot, KeySlot("{@" + EncodeId(tenant) + "}")) << tenant;
    // Three different keys: each names its limiter and whole id.
    EXPECT_NE(user_key, tenant_key);
    EXPECT_NE(user_key, MakeColocatedKey("sluice", "user", ':', tenant + ":u43", "fw"));
    EXPECT_NE(user_key, MakeColocatedKey("sluice", "route", ':', tenant + ":u42", "fw"));
  }
  EXPECT_EQ(MakeColocatedKey("sluice", "user", ':', "acme:u42", "fw"),
            "sluice:{@acme}:user:acme:u42:fw");
  EXPECT_NE(KeySlot(MakeColocatedKey("sluice", "user", ':', "{victim}:u1", "fw")),
            KeySlot("victim"));
  EXPECT_NE(KeySlot(MakeColocatedKey("sluice", "user", ':', "{victim}:u1", "fw")),
            KeySlot("@victim"));
  // Another tenant, another slot (for these two).
  EXPECT_NE(KeySlot(MakeColocatedKey("sluice", "user", ':', "acme:u42", "fw")),
            KeySlot(MakeColocatedKey("sluice", "user", ':', "beta:u42", "fw")));
  // A plain key never equals a co-located one, and keeps its old name.
  EXPECT_EQ(MakeKey(KeyHead("sluice", "user"), "acme:u42", Algorithm::kFixedWindow),
            "sluice:{user:acme:u42}:fw2");
}

TEST(ClusterKeySlot, SlotTagIsThePartBeforeTheFirstSeparator) {
  EXPECT_EQ(SlotTagOf("acme:u42:x", ':'), "acme");
  EXPECT_EQ(SlotTagOf("acme", ':'), "acme");
  EXPECT_EQ(SlotTagOf(":u42", ':'), ":u42");  // an empty part: the whole id
  EXPECT_EQ(SlotTagOf("acme/u42:x", '/'), "acme");
  EXPECT_EQ(SlotTagOf("acme/u42:x", ':'), "acme/u42");
  for (const unsigned char c : std::string(":/|.-_{}#%~!")) {
    EXPECT_TRUE(IsSlotTagSeparator(c)) << c;
  }
  for (const int c : std::vector<int>{'a', 'Z', '0', '9', ' ', '\0', '\n', 0x7f, 0x80, 0xff}) {
    EXPECT_FALSE(IsSlotTagSeparator(static_cast<unsigned char>(c))) << c;
  }
}

Reply Int(long long v) {
  return Reply{.type = Reply::Type::kInteger, .integer = v};
}
Reply Str(std::string s) {
  return Reply{.type = Reply::Type::kString, .str = std::move(s)};
}
Reply Arr(std::vector<Reply> elements) {
  return Reply{.type = Reply::Type::kArray, .elements = std::move(elements)};
}

TEST(ClusterSlots, ParsesPrimariesAndSkipsReplicas) {
  Reply reply = Arr({
      Arr({Int(0), Int(5460), Arr({Str("127.0.0.1"), Int(30001), Str("id1")}),
           Arr({Str("127.0.0.1"), Int(30004), Str("id4")})}),
      Arr({Int(5461), Int(10922), Arr({Str(""), Int(30002), Str("id2")})}),
      Arr({Int(10923), Int(16383), Arr({Str("?"), Int(30003), Str("id3"), Arr({})})}),
  });
  auto ranges = ParseClusterSlots(reply, "10.0.0.7");
  ASSERT_TRUE(ranges.ok()) << ranges.status().ToString();
  ASSERT_EQ(ranges->size(), 3u);
  EXPECT_EQ((*ranges)[0], (SlotRange{0, 5460, "127.0.0.1", 30001}));
  // A node that does not know its own address lives where we asked.
  EXPECT_EQ((*ranges)[1], (SlotRange{5461, 10922, "10.0.0.7", 30002}));
  EXPECT_EQ((*ranges)[2], (SlotRange{10923, 16383, "10.0.0.7", 30003}));
}

TEST(ClusterSlots, RefusesMalformedReplies) {
  EXPECT_FALSE(ParseClusterSlots(Str("x"), "h").ok());
  EXPECT_FALSE(
      ParseClusterSlots(Arr({Arr({Int(0), Int(16384), Arr({Str("h"), Int(1)})})}), "h").ok());
  EXPECT_FALSE(ParseClusterSlots(Arr({Arr({Int(5), Int(4), Arr({Str("h"), Int(1)})})}), "h").ok());
  EXPECT_FALSE(ParseClusterSlots(Arr({Arr({Int(0), Int(4), Arr({Str("h")})})}), "h").ok());
  EXPECT_FALSE(ParseClusterSlots(Arr({Arr({Int(0), Int(4)})}), "h").ok());
  auto not_cluster = ParseClusterSlots(
      Reply{.type = Reply::Type::kError, .str = "ERR This instance has cluster support disabled"},
      "h");
  ASSERT_FALSE(not_cluster.ok());
  EXPECT_EQ(not_cluster.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(not_cluster.status().message().find("cluster mode"), std::string::npos);
}

TEST(ClusterErrors, MovedAndAsk) {
  auto moved = ParseClusterError("MOVED 3999 127.0.0.1:6381", "seed");
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->kind, ClusterError::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->host, "127.0.0.1");
  EXPECT_EQ(moved->port, 6381);
  auto ask = ParseClusterError("ASK 16383 ::1:7000", "seed");
  ASSERT_TRUE(ask.has_value());
  EXPECT_EQ(ask->kind, ClusterError::Kind::kAsk);
  EXPECT_EQ(ask->slot, 16383);
  EXPECT_EQ(ask->host, "::1");
  EXPECT_EQ(ask->port, 7000);
  // An empty host: the node we asked.
  auto unknown = ParseClusterError("MOVED 1 :6380", "10.1.2.3");
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->host, "10.1.2.3");
  EXPECT_EQ(unknown->port, 6380);
  // Malformed redirections are not followed.
  EXPECT_FALSE(ParseClusterError("MOVED 16384 h:1", "s").has_value());
  EXPECT_FALSE(ParseClusterError("MOVED x h:1", "s").has_value());
  EXPECT_FALSE(ParseClusterError("MOVED 1 h", "s").has_value());
  EXPECT_FALSE(ParseClusterError("MOVED 1 h:0", "s").has_value());
  EXPECT_FALSE(ParseClusterError("MOVEDX 1 h:1", "s").has_value());
  EXPECT_FALSE(ParseClusterError("ASKING", "s").has_value());
}

TEST(ClusterErrors, TransientStates) {
  using Kind = ClusterError::Kind;
  EXPECT_EQ(ParseClusterError("TRYAGAIN Multiple keys request during rehashing of slot", "s")->kind,
            Kind::kTryAgain);
  EXPECT_EQ(ParseClusterError("CLUSTERDOWN The cluster is down", "s")->kind, Kind::kClusterDown);
  EXPECT_EQ(ParseClusterError("READONLY You can't write against a read only replica.", "s")->kind,
            Kind::kReadOnly);
  EXPECT_FALSE(ParseClusterError("ERR unknown command", "s").has_value());
  EXPECT_FALSE(
      ParseClusterError("CROSSSLOT Keys in request don't hash to the same slot", "s").has_value());
}

TEST(ClusterErrors, ReadFromAStatus) {
  // As Connection reports an error reply.
  Status moved = ErrorReplyToStatus("MOVED 42 127.0.0.1:7001", "127.0.0.1:7000");
  auto error = ClusterErrorOf(moved, "127.0.0.1");
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->slot, 42);
  EXPECT_EQ(error->port, 7001);
  EXPECT_FALSE(ClusterErrorOf(UnavailableError("redis x is not connected"), "h").has_value());
  EXPECT_FALSE(ClusterErrorOf(Status::Ok(), "h").has_value());
}

TEST(ClusterUrl, ParsesSeeds) {
  auto seeds = ParseClusterUrl("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2,[::1]:7002");
  ASSERT_TRUE(seeds.ok()) << seeds.status().ToString();
  ASSERT_EQ(seeds->size(), 3u);
  EXPECT_EQ((*seeds)[0].host, "10.0.0.1");
  EXPECT_EQ((*seeds)[0].port, 7000);
  EXPECT_EQ((*seeds)[1].host, "10.0.0.2");
  EXPECT_EQ((*seeds)[1].port, 6379);
  EXPECT_EQ((*seeds)[2].host, "::1");
  EXPECT_EQ((*seeds)[2].port, 7002);
  for (const Endpoint& e : *seeds) {
    EXPECT_EQ(e.user, "app");
    EXPECT_EQ(e.password, "s@cret");
  }
  EXPECT_TRUE(ParseClusterUrl("redis+cluster://h:1/0").ok());
  EXPECT_TRUE(IsClusterUrl("redis+cluster://h:1"));
  EXPECT_FALSE(IsClusterUrl("redis://h:1"));
}

TEST(ClusterUrl, RefusesBadOnes) {
  for (const char* url : {"redis+cluster://", "redis+cluster://h:1,,h:2", "redis+cluster://h:1/3",
                          "redis+cluster://h:99999", "redis://h:1"}) {
    auto seeds = ParseClusterUrl(url);
    EXPECT_FALSE(seeds.ok()) << url;
    EXPECT_EQ(seeds.status().code(), StatusCode::kInvalidArgument) << url;
  }
  // A single-server entry point says what a cluster URL is, without echoing it.
  auto single = ParseRedisUrl("redis+cluster://u:secret@h:1");
  ASSERT_FALSE(single.ok());
  EXPECT_NE(single.status().message().find("Redis Cluster"), std::string::npos);
  EXPECT_EQ(single.status().message().find("secret"), std::string::npos);
}

TEST(ClusterUrl, TheOperatorToolsTakeAClusterAndNeverEchoItsPassword) {
  // Admin (sluice audit, repair, inspect, top) reads the slot map from the seeds: none
  // answers here.
  auto admin = Admin::Connect({.url = "redis+cluster://u:secret@127.0.0.1:1",
                               .connect_timeout = std::chrono::milliseconds(500)});
  ASSERT_FALSE(admin.ok());
  EXPECT_EQ(admin.status().code(), StatusCode::kUnavailable) << admin.status().ToString();
  EXPECT_EQ(admin.status().message().find("secret"), std::string::npos);
  auto bad = Admin::Connect({.url = "redis+cluster://u:secret@127.0.0.1:1/3"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("secret"), std::string::npos);
}

}  // namespace
}  // namespace sluice::internal

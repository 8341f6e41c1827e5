#include "core/server_info.h"

#include <gtest/gtest.h>

namespace sluice::internal {
namespace {

TEST(ServerInfo, FieldsAreFoundByTheirWholeName) {
  const std::string info =
      "# Memory\r\nused_memory:1024\r\nmaxmemory_policy:volatile-lru\r\n"
      "maxmemory:0\r\n# Stats\r\nevicted_keys:17\r\nevicted_keys_x:3";
  EXPECT_EQ(InfoField(info, "maxmemory_policy"), "volatile-lru");
  EXPECT_EQ(InfoField(info, "maxmemory"), "0");  // not maxmemory_policy's prefix
  EXPECT_EQ(InfoField(info, "evicted_keys"), "17");
  EXPECT_EQ(InfoField(info, "evicted_keys_x"), "3");  // the last line, without CRLF
  EXPECT_EQ(InfoField(info, "used"), std::nullopt);
  EXPECT_EQ(InfoField(info, "Memory"), std::nullopt);
  EXPECT_EQ(InfoField("", "maxmemory"), std::nullopt);
}

TEST(ServerInfo, EveryPolicyButNoevictionCanEvictSluiceKeys) {
  EXPECT_FALSE(PolicyCanEvict("noeviction"));
  for (const char* p : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
                        "volatile-lfu", "volatile-random", "volatile-ttl"}) {
    EXPECT_TRUE(PolicyCanEvict(p)) << p;
  }
}

}  // namespace
}  // namespace sluice::internal

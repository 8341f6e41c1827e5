// Reply: one Redis reply copied out of the parser's buffer into owned memory, for the
// code that keeps a reply past its callback or must not see hiredis (the admin API, the
// blocking client, the test fixture). The hot path (scripts' replies in RedisStore)
// reads hiredis's reply in place instead.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

struct redisReply;

namespace sluice::internal {

struct Reply {
  enum class Type { kNil, kInteger, kString, kStatus, kError, kArray } type = Type::kNil;
  long long integer = 0;
  std::string str;  // kString (bulk), kStatus (+OK) and kError (-ERR ...)
  std::vector<Reply> elements;
};

// A deep copy of `reply` (RESP2 types; doubles, maps and the like of RESP3 come back as
// kNil: sluice speaks RESP2).
Reply CopyReply(const redisReply& reply);

// The reply to TIME in milliseconds; nullopt when it is not one.
std::optional<int64_t> TimeMs(const Reply& reply);

}  // namespace sluice::internal

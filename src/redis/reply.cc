#include "redis/reply.h"

#include <charconv>
#include <string_view>

#include <hiredis/hiredis.h>

namespace sluice::internal {

Reply CopyReply(const redisReply& r) {
  Reply out;
  switch (r.type) {
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::kString;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::kStatus;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::kError;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      out.elements.reserve(r.elements);
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(CopyReply(*r.element[i]));
      break;
    default: break;
  }
  return out;
}

std::optional<int64_t> TimeMs(const Reply& r) {
  if (r.type != Reply::Type::kArray || r.elements.size() != 2) return std::nullopt;
  int64_t s = 0, us = 0;
  for (auto [text, out] : {std::pair{std::string_view(r.elements[0].str), &s},
                           std::pair{std::string_view(r.elements[1].str), &us}}) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  }
  return s * 1000 + us / 1000;
}

}  // namespace sluice::internal

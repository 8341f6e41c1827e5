// Writing RESP commands straight into an output buffer (no intermediate strings), and
// turning Redis error replies into sluice Status codes — the one place where that happens.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::internal {

inline void AppendRespHeader(std::string& out, char kind, uint64_t n) {
  char buf[24];
  buf[0] = kind;
  auto [end, ec] = std::to_chars(buf + 1, buf + sizeof(buf) - 2, n);
  (void)ec;
  *end++ = '\r';
  *end++ = '\n';
  out.append(buf, static_cast<size_t>(end - buf));
}

inline void AppendArray(std::string& out, uint64_t items) {
  AppendRespHeader(out, '*', items);
}

inline void AppendBulk(std::string& out, std::string_view value) {
  AppendRespHeader(out, '$', value.size());
  out.append(value);
  out.append("\r\n", 2);
}

inline void AppendBulk(std::string& out, int64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  (void)ec;
  AppendBulk(out, std::string_view(buf, static_cast<size_t>(end - buf)));
}

// A whole command: FormatCommand({"SET", "k", "v"}).
inline std::string FormatCommand(std::initializer_list<std::string_view> parts) {
  std::string out;
  AppendArray(out, parts.size());
  for (std::string_view part : parts) AppendBulk(out, part);
  return out;
}

// Maps an error reply ("NOAUTH …", "LOADING …") to the code that tells the caller what
// to do. `where` names the endpoint for the message.
Status ErrorReplyToStatus(std::string_view error, std::string_view where);

}  // namespace sluice::internal

#include "core/server_info.h"

namespace sluice::internal {

std::optional<std::string> InfoField(std::string_view info, std::string_view field) {
  std::size_t at = 0;
  while (at < info.size()) {
    std::size_t end = info.find('\n', at);
    if (end == std::string_view::npos) end = info.size();
    std::string_view line = info.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > field.size() && line.starts_with(field) && line[field.size()] == ':') {
      return std::string(line.substr(field.size() + 1));
    }
    at = end + 1;
  }
  return std::nullopt;
}

bool PolicyCanEvict(std::string_view policy) {
  return policy != "noeviction";
}

}  // namespace sluice::internal
